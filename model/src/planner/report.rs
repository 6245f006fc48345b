//! Table III-style comparisons of planners on one model.

use serde::{Deserialize, Serialize};

use super::{run, Overlaps, Plan, PlanError, PlanOptions, PlannerKind, Problem};
use crate::order::{self, OrderKind};
use crate::Model;

/// All plans of one model, side by side. Serialises to
/// `{"model", "lower_bound_bytes", "plans": [{"planner", "overlap",
/// "peak_bytes", "gap_bytes", "status", "tensors": [{"name", "offset",
/// "size", "first_op", "last_op", …}], …}], …}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Comparison {
    /// Model name.
    pub model: String,
    /// Lower bound of the model's own order, crediting the DMO overlaps of
    /// the comparison's O_s source. (Each plan also carries the bound of its
    /// own order, which its gap refers to.)
    pub lower_bound_bytes: u64,
    /// The O_s source of the DMO-aware rows.
    pub overlap: String,
    /// Minimum over all execution orders of the peak working set (the
    /// reordering DP's optimum, DMO credited), when the DP finished.
    pub order_free_lower_bound_bytes: Option<u64>,
    /// One validated plan per row, in the order of the rows.
    pub plans: Vec<Plan>,
}

/// The rows of a full comparison: TFLM's planners (never overlapping), the
/// DMO heap without overlaps (the paper's "original" column), then every
/// DMO-capable planner with `overlaps`.
pub(crate) fn default_rows(overlaps: &Overlaps) -> Vec<(PlannerKind, bool)> {
    let mut rows = vec![
        (PlannerKind::Linear, false),
        (PlannerKind::TflmGreedy, false),
        (PlannerKind::DmoHeap, false),
    ];
    let with = overlaps.method != "none";
    for p in [
        PlannerKind::DmoHeap,
        PlannerKind::Replacement,
        PlannerKind::Reorder,
        PlannerKind::Exact,
    ] {
        if with || p != PlannerKind::DmoHeap {
            rows.push((p, with));
        }
    }
    rows
}

/// Runs `rows` (planner, whether it gets `overlaps` or none) on `model`.
/// Every plan has passed the validator.
pub fn compare(
    model: &Model,
    overlaps: &Overlaps,
    rows: &[(PlannerKind, bool)],
    opts: &PlanOptions,
) -> Result<Comparison, PlanError> {
    let none = Overlaps::none(model);
    let mut plans = Vec::new();
    for &(planner, with_overlap) in rows {
        let o = if with_overlap { overlaps } else { &none };
        plans.push(run(model, planner, o, opts)?);
    }
    let model_order = order::order(model, OrderKind::Model);
    let lower_bound_bytes =
        Problem::new(model, &model_order, overlaps, opts.alignment).lower_bound();
    let os = |op: usize| overlaps.get(op);
    let order_free_lower_bound_bytes = order::reorder_dp(model, &os, opts.reorder_max_states)
        .ok()
        .map(|r| r.peak_working_set);
    Ok(Comparison {
        model: model.name.clone(),
        lower_bound_bytes,
        overlap: overlaps.method.clone(),
        order_free_lower_bound_bytes,
        plans,
    })
}

/// The plan memtrace writes and proves when no planner is named: the
/// smallest of [`compare_all`]'s (`plan --emit-offline` and `verify` both
/// take it). `None` when no planner applies.
pub fn best(
    model: &Model,
    overlaps: &Overlaps,
    opts: &PlanOptions,
) -> Result<Option<Plan>, PlanError> {
    Ok(compare_all(model, overlaps, opts)?.best_plan().cloned())
}

/// [`compare`] with `default_rows`.
pub fn compare_all(
    model: &Model,
    overlaps: &Overlaps,
    opts: &PlanOptions,
) -> Result<Comparison, PlanError> {
    compare(model, overlaps, &default_rows(overlaps), opts)
}

fn kib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / 1024.0)
}

fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl Comparison {
    /// A plain-text table, one row per plan.
    pub fn to_table(&self) -> String {
        let mut rows: Vec<[String; 8]> = vec![[
            "planner".into(),
            "overlap".into(),
            "status".into(),
            "peak B".into(),
            "peak KiB".into(),
            "bound B".into(),
            "gap B".into(),
            "order".into(),
        ]];
        for p in &self.plans {
            rows.push([
                p.planner.name().to_string(),
                p.overlap.clone(),
                p.status.to_string(),
                p.peak_bytes.map(group).unwrap_or_else(|| "-".into()),
                p.peak_bytes.map(kib).unwrap_or_else(|| "-".into()),
                group(p.lower_bound_bytes),
                p.gap_bytes.map(group).unwrap_or_else(|| "-".into()),
                p.order_name.name(),
            ]);
        }
        let widths: Vec<usize> = (0..8)
            .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
            .collect();
        let mut out = format!(
            "model {}: lower bound {} B (model order, O_s {})",
            self.model,
            group(self.lower_bound_bytes),
            self.overlap
        );
        if let Some(b) = self.order_free_lower_bound_bytes {
            out.push_str(&format!(", {} B over all orders", group(b)));
        }
        out.push('\n');
        for r in &rows {
            let line: Vec<String> = r
                .iter()
                .enumerate()
                .map(|(c, v)| {
                    if (3..=6).contains(&c) {
                        format!("{v:>w$}", w = widths[c])
                    } else {
                        format!("{v:<w$}", w = widths[c])
                    }
                })
                .collect();
            out.push_str(line.join("  ").trim_end());
            out.push('\n');
        }
        for p in &self.plans {
            if let Some(n) = &p.note {
                if p.status == super::PlanStatus::NotApplicable {
                    out.push_str(&format!("{}: not applicable: {n}\n", p.planner));
                }
            }
        }
        out
    }

    /// The applicable plan with the smallest peak (the first one on ties):
    /// what `--emit-offline` writes when no planner is named.
    pub fn best_plan(&self) -> Option<&Plan> {
        self.plans
            .iter()
            .filter(|p| p.peak_bytes.is_some())
            .min_by_key(|p| p.peak_bytes)
    }

    /// The plan of `planner` with `overlap` source, if present.
    pub fn plan(&self, planner: &str, overlap: &str) -> Option<&Plan> {
        self.plans
            .iter()
            .find(|p| p.planner.name() == planner && p.overlap == overlap)
    }
}
