//! Arena planners: where each activation tensor lives in one arena.
//!
//! Every planner returns the same [`Plan`] (tensor → offset, size, first and
//! last step; peak bytes), with the lower bound of its execution order and
//! its gap to it, after the independent [`validate`] check has accepted it.
//!
//! | planner | what it is |
//! |---|---|
//! | `linear` | TFLM `LinearMemoryPlanner`: tensors back to back |
//! | `tflm-greedy` | TFLM `GreedyMemoryPlanner`, exactly (largest first, first fit in time) |
//! | `dmo-heap` | the DMO paper's heap allocation (Section IV), overlapping by O_s, best of eager/lazy × forward/backward |
//! | `replacement` | Sakr et al.'s single-buffer replacement strategy, sequential models only |
//! | `reorder` | Liberis & Lane's reordering DP, then `dmo-heap` placement |
//! | `exact` | branch and bound over placements (DMO overlaps allowed), within a time limit |
//!
//! Lifetimes follow TFLM's `AllocationInfoBuilder`: graph inputs are created
//! at step 0, graph outputs live to the last step, every other tensor from the
//! step of its producer to the step of its last reader. Sizes are rounded up
//! to the plan's alignment (TFLM's `kBufferAlignment` is 16) and O_s credits
//! are rounded down to it.
//!
//! `memtrace plan MODEL --overlap analytic` (or `algorithmic`) compares them
//! all on one model ([`report::compare_all`]); the example `planning_times`
//! (`cargo run --release -p memtrace-model --example planning_times`) times
//! each on a real model and on [`crate::zoo::synthetic_graph`].

pub(crate) mod exact;
pub(crate) mod greedy;
pub(crate) mod heap;
pub mod overlap;
pub(crate) mod replacement;
pub mod report;
pub mod validate;

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::order::{self, OrderKind, PlanOrder};
use crate::Model;
pub use overlap::{OverlapMethod, OverlapSource, Overlaps, TracedOverlaps};
pub use report::Comparison;

/// The planners.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum PlannerKind {
    /// TFLM `LinearMemoryPlanner`: tensors back to back (`linear`).
    Linear,
    /// TFLM `GreedyMemoryPlanner`: largest first, first fit in time (`tflm-greedy`).
    TflmGreedy,
    /// The DMO paper's heap allocation, overlapping by O_s (`dmo-heap`).
    DmoHeap,
    /// Sakr et al.'s single-buffer replacement, sequential models only (`replacement`).
    Replacement,
    /// Liberis & Lane's reordering DP, then `dmo-heap` placement (`reorder`).
    Reorder,
    /// Branch and bound over placements within a time limit (`exact`).
    Exact,
    /// TinySeg: spills tensors through their cold ranges and fuses the
    /// fetches, re-planning with a base planner after every change
    /// ([`crate::tinyseg`]). It transforms the model, so [`run`] cannot
    /// return its plan of the untransformed one.
    Tinyseg,
}

impl PlannerKind {
    /// Every planner, in the order reports list them.
    pub const ALL: [PlannerKind; 6] = [
        PlannerKind::Linear,
        PlannerKind::TflmGreedy,
        PlannerKind::DmoHeap,
        PlannerKind::Replacement,
        PlannerKind::Reorder,
        PlannerKind::Exact,
    ];

    /// Name used on the command line and in reports (`linear`, `tflm-greedy`, ...).
    pub fn name(self) -> &'static str {
        match self {
            PlannerKind::Linear => "linear",
            PlannerKind::TflmGreedy => "tflm-greedy",
            PlannerKind::DmoHeap => "dmo-heap",
            PlannerKind::Replacement => "replacement",
            PlannerKind::Reorder => "reorder",
            PlannerKind::Exact => "exact",
            PlannerKind::Tinyseg => "tinyseg",
        }
    }

    /// Whether the planner can use O_s at all (linear and greedy are TFLM's
    /// and never overlap tensors that are live together).
    pub fn uses_overlap(self) -> bool {
        !matches!(self, PlannerKind::Linear | PlannerKind::TflmGreedy)
    }
}

impl fmt::Display for PlannerKind {
    /// The [`PlannerKind::name`], padded as the format asks.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// Knobs shared by the planners.
#[derive(Clone, Debug)]
pub struct PlanOptions {
    /// Offsets and sizes are multiples of this (TFLM: 16). At least 1.
    pub alignment: u64,
    /// Wall-clock budget of the `exact` search.
    pub exact_time_limit: Duration,
    /// `exact` searches only graphs with at most this many arena tensors
    /// (beyond, it returns the best heuristic plan as "best found").
    pub exact_max_tensors: usize,
    /// The reordering DP gives up after visiting this many operator sets.
    pub reorder_max_states: usize,
    /// Plan the model's own operator order only: `dmo-heap`, `reorder` and
    /// `exact` try no other serialisation. TinySeg needs it, because an
    /// eager or lazy order would move its spills and fetches away from the
    /// ends of the cold ranges they were placed at.
    pub model_order_only: bool,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            alignment: 16,
            exact_time_limit: Duration::from_secs(2),
            exact_max_tensors: 400,
            reorder_max_states: 200_000,
            model_order_only: false,
        }
    }
}

/// How a plan was obtained.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanStatus {
    /// A heuristic's answer.
    #[serde(rename = "heuristic")]
    Heuristic,
    /// Proven minimal peak for the plan's execution order.
    #[serde(rename = "optimal")]
    Optimal,
    /// The exact search stopped (time or size limit) before proving optimality.
    #[serde(rename = "best found")]
    BestFound,
    /// The planner does not apply to this model; `note` says why.
    #[serde(rename = "not applicable")]
    NotApplicable,
}

impl fmt::Display for PlanStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PlanStatus::Heuristic => "heuristic",
            PlanStatus::Optimal => "optimal",
            PlanStatus::BestFound => "best found",
            PlanStatus::NotApplicable => "not applicable",
        })
    }
}

/// One placed tensor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacedTensor {
    /// Index in `Model::tensors`.
    pub tensor: usize,
    /// Tensor name.
    pub name: String,
    /// Byte offset from the start of the arena.
    pub offset: u64,
    /// Planned (aligned) size; the data is `Model::tensors[tensor].bytes`.
    pub size: u64,
    /// First and last execution step (position in `Plan::order`) the tensor
    /// is live; equal to operator indices when the order is the model's.
    pub first_op: usize,
    /// Last execution step the tensor is live (see `first_op`).
    pub last_op: usize,
}

/// An input/output pair a plan overlaps by DMO.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsedOverlap {
    /// Operator index.
    pub op: usize,
    /// Input tensor index.
    pub input: usize,
    /// Output tensor index.
    pub output: usize,
    /// Bytes by which the input's start overlaps the output's end.
    pub bytes: u64,
    /// The O_s that allowed it.
    pub safe_bytes: u64,
}

/// An arena plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// The planner that made the plan (serialised by its name).
    pub planner: PlannerKind,
    /// O_s source (`none` for planners that never overlap).
    pub overlap: String,
    /// How the plan was obtained.
    pub status: PlanStatus,
    /// Why not applicable, which order won, search statistics …
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Which serialisation: `model`, `eager`, `lazy` (or several that
    /// coincide, `eager=lazy`), `reordered`.
    pub order_name: PlanOrder,
    /// Operator index executed at each step.
    pub order: Vec<usize>,
    /// Arena size in bytes (end of the highest tensor); `None` when not applicable.
    pub peak_bytes: Option<u64>,
    /// Lower bound for this plan's order (max over steps of live bytes,
    /// crediting DMO overlaps).
    pub lower_bound_bytes: u64,
    /// `peak_bytes - lower_bound_bytes`; `None` when not applicable.
    pub gap_bytes: Option<u64>,
    /// Placement of every arena tensor (empty when not applicable).
    pub tensors: Vec<PlacedTensor>,
    /// The DMO pairs whose input and output the plan actually overlaps.
    pub overlaps_used: Vec<UsedOverlap>,
    /// Wall-clock planning time (not serialised: not deterministic).
    #[serde(skip)]
    pub elapsed: Duration,
}

impl Plan {
    /// Per-tensor byte offsets for TFLM `OfflineMemoryAllocation`: one entry
    /// per model tensor, -1 for tensors this plan does not place.
    pub fn offline_offsets(&self, model: &Model) -> Vec<i64> {
        let mut out = vec![-1i64; model.tensors.len()];
        for t in &self.tensors {
            out[t.tensor] = t.offset as i64;
        }
        out
    }

    /// The arena offset of every model tensor this plan places (`None` for
    /// the others), by tensor index.
    pub fn offsets(&self, model: &Model) -> Vec<Option<u64>> {
        let mut o = vec![None; model.tensors.len()];
        for t in &self.tensors {
            o[t.tensor] = Some(t.offset);
        }
        o
    }

    /// The arena the plan needs: its peak, or (a plan that is not
    /// applicable) the end of its last tensor.
    pub fn arena_bytes(&self, model: &Model) -> u64 {
        self.peak_bytes.unwrap_or_else(|| {
            self.tensors
                .iter()
                .map(|t| t.offset + model.tensors[t.tensor].bytes.max(t.size))
                .max()
                .unwrap_or(0)
        })
    }

    /// TFLM's greedy plan without overlaps: the placement every reference
    /// run uses.
    pub fn tflm_greedy(model: &Model) -> Result<Plan, PlanError> {
        run(
            model,
            PlannerKind::TflmGreedy,
            &Overlaps::none(model),
            &PlanOptions::default(),
        )
    }
}

/// A plan that failed, or a planner that could not run.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The planner's plan failed the independent validation.
    #[error("{planner} produced an invalid plan: {reason}")]
    Invalid {
        /// Name of the planner.
        planner: String,
        /// What the validator rejected.
        reason: String,
    },
    /// The model cannot be planned; the message says why.
    #[error("{0}")]
    Model(String),
}

/// One tensor to place in the arena, with its planned size and lifetime.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ArenaBuffer {
    /// Index in `Model::tensors`.
    pub tensor: usize,
    /// Planned size (data bytes rounded up to the alignment, at least one
    /// alignment unit).
    pub size: u64,
    /// First step the tensor is live (its producer's, or 0 for a graph input).
    pub first: usize,
    /// Last step the tensor is live (its last reader's, or the last step for a
    /// graph output).
    pub last: usize,
}

/// A DMO pair: `input` dies at step `step`, where `output` is created; the
/// input may start at `output.offset + output.size - credit` or higher.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DmoPair {
    /// Step at which the input dies and the output is created.
    pub step: usize,
    /// Operator index.
    pub op: usize,
    /// Buffer indices.
    pub input: usize,
    /// Buffer index of the output.
    pub output: usize,
    /// Bytes the input may overlap the output by: O_s plus the output's
    /// alignment padding, rounded down to the alignment.
    pub credit: u64,
    /// The raw O_s.
    pub safe: u64,
}

/// The placement problem of one execution order.
#[derive(Clone, Debug)]
pub(crate) struct Problem {
    /// Operator index executed at each step.
    pub order: Vec<usize>,
    /// Tensors to place, in tensor-index order.
    pub buffers: Vec<ArenaBuffer>,
    /// DMO pairs the order allows.
    pub pairs: Vec<DmoPair>,
    /// Offsets and sizes are multiples of this many bytes.
    pub alignment: u64,
    /// Number of execution steps (operators).
    pub steps: usize,
}

pub(crate) fn align_up(v: u64, a: u64) -> u64 {
    v.div_ceil(a) * a
}

impl Problem {
    /// Buffers in tensor-index order (TFLM's `AddBuffer` order) with
    /// TFLM-style lifetimes for `order`, and the DMO pairs `overlaps` allows.
    pub(crate) fn new(
        model: &Model,
        order: &[usize],
        overlaps: &Overlaps,
        alignment: u64,
    ) -> Problem {
        let alignment = alignment.max(1);
        let steps = order.len();
        let last_step = steps.saturating_sub(1);
        let mut step_of = vec![0; model.ops.len()];
        for (s, &op) in order.iter().enumerate() {
            step_of[op] = s;
        }
        let n = model.tensors.len();
        let mut first: Vec<Option<usize>> = vec![None; n];
        let mut last: Vec<Option<usize>> = vec![None; n];
        for &t in &model.inputs {
            first[t] = Some(0);
        }
        for &t in &model.outputs {
            last[t] = Some(last_step);
        }
        for (op, o) in model.ops.iter().enumerate() {
            let s = step_of[op];
            for &t in &o.inputs {
                last[t] = Some(last[t].map_or(s, |l| l.max(s)));
            }
            for &t in &o.outputs {
                first[t] = Some(first[t].map_or(s, |f| f.min(s)));
            }
            // Scratch lives during its operator's step only.
            if let Some(t) = o.scratch {
                first[t] = Some(s);
                last[t] = Some(s);
            }
        }
        let mut buffers = Vec::new();
        let mut buffer_of = vec![usize::MAX; n];
        for t in model.arena_tensors() {
            let Some(f) = first[t] else { continue };
            // A tensor nobody reads lives during its producer's step only.
            let l = last[t].unwrap_or(f).max(f);
            buffer_of[t] = buffers.len();
            buffers.push(ArenaBuffer {
                tensor: t,
                size: align_up(model.tensors[t].bytes.max(1), alignment),
                first: f,
                last: l,
            });
        }
        let mut pairs = Vec::new();
        for (s, &op) in order.iter().enumerate() {
            let o = &model.ops[op];
            let safe = overlaps.get(op);
            let Some(&out_t) = o.outputs.first() else {
                continue;
            };
            let out = buffer_of[out_t];
            if safe == 0 || out == usize::MAX || buffers[out].first != s {
                continue;
            }
            let out_bytes = model.tensors[out_t].bytes;
            // Safe: input start >= out start + out bytes - O_s; the planners
            // place against the padded size, which allows the padding too.
            let credit = (safe + buffers[out].size - out_bytes) / alignment * alignment;
            let mut seen = Vec::new();
            for &in_t in o.overlap_inputs() {
                let inp = buffer_of[in_t];
                if inp == usize::MAX || inp == out || seen.contains(&inp) {
                    continue;
                }
                seen.push(inp);
                if buffers[inp].last == s && !model.outputs.contains(&in_t) && credit > 0 {
                    pairs.push(DmoPair {
                        step: s,
                        op,
                        input: inp,
                        output: out,
                        credit,
                        safe,
                    });
                }
            }
        }
        Problem {
            order: order.to_vec(),
            buffers,
            pairs,
            alignment,
            steps,
        }
    }

    /// Whether two buffers are live at a common step.
    pub(crate) fn conflict(&self, a: usize, b: usize) -> bool {
        let (x, y) = (&self.buffers[a], &self.buffers[b]);
        x.first <= y.last && y.first <= x.last
    }

    /// The DMO credit if `input` may overlap `output`.
    #[cfg(test)]
    pub(crate) fn pair_credit(&self, input: usize, output: usize) -> Option<u64> {
        self.pairs
            .iter()
            .find(|p| p.input == input && p.output == output)
            .map(|p| p.credit)
    }

    /// Max over steps of the live (planned) bytes, minus at each step the
    /// most its DMO pairs can overlap: `min(credit, output size, sum of the
    /// paired inputs' sizes)`. No placement of this order can do better.
    pub(crate) fn lower_bound(&self) -> u64 {
        if self.buffers.is_empty() {
            return 0;
        }
        let steps = self.steps.max(1);
        let mut delta = vec![0i128; steps + 1];
        for b in &self.buffers {
            delta[b.first] += b.size as i128;
            delta[b.last + 1] -= b.size as i128;
        }
        let mut credit = vec![0u64; steps];
        let mut by_step: std::collections::HashMap<usize, (u64, u64, u64)> = Default::default();
        for p in &self.pairs {
            let e = by_step
                .entry(p.step)
                .or_insert((p.credit, self.buffers[p.output].size, 0));
            e.2 += self.buffers[p.input].size;
        }
        for (s, (c, out, ins)) in by_step {
            credit[s] = c.min(out).min(ins);
        }
        let mut live = 0i128;
        let mut best = 0u64;
        for s in 0..steps {
            live += delta[s];
            best = best.max((live as u64).saturating_sub(credit[s]));
        }
        best
    }

    /// Builds the plan for `offsets` (one per buffer).
    pub(crate) fn plan(
        &self,
        model: &Model,
        planner: PlannerKind,
        overlap: &str,
        order_name: &PlanOrder,
        offsets: &[u64],
    ) -> Plan {
        let tensors: Vec<PlacedTensor> = self
            .buffers
            .iter()
            .zip(offsets)
            .map(|(b, &offset)| PlacedTensor {
                tensor: b.tensor,
                name: model.tensors[b.tensor].name.clone(),
                offset,
                size: b.size,
                first_op: b.first,
                last_op: b.last,
            })
            .collect();
        let peak = tensors.iter().map(|t| t.offset + t.size).max().unwrap_or(0);
        let overlaps_used = self
            .pairs
            .iter()
            .filter_map(|p| {
                let (i, o) = (&self.buffers[p.input], &self.buffers[p.output]);
                let (io, oo) = (offsets[p.input], offsets[p.output]);
                let (ib, ob) = (model.tensors[i.tensor].bytes, model.tensors[o.tensor].bytes);
                let shared = (oo + ob).min(io + ib).saturating_sub(oo.max(io));
                (shared > 0).then(|| UsedOverlap {
                    op: p.op,
                    input: i.tensor,
                    output: o.tensor,
                    bytes: (oo + ob).saturating_sub(io),
                    safe_bytes: p.safe,
                })
            })
            .collect();
        let lb = self.lower_bound();
        Plan {
            planner,
            overlap: overlap.to_string(),
            status: PlanStatus::Heuristic,
            note: None,
            order_name: order_name.clone(),
            order: self.order.clone(),
            peak_bytes: Some(peak),
            lower_bound_bytes: lb,
            gap_bytes: Some(peak.saturating_sub(lb)),
            tensors,
            overlaps_used,
            elapsed: Duration::ZERO,
        }
    }

    /// Peak of an offset assignment.
    pub(crate) fn peak(&self, offsets: &[u64]) -> u64 {
        self.buffers
            .iter()
            .zip(offsets)
            .map(|(b, &o)| o + b.size)
            .max()
            .unwrap_or(0)
    }
}

/// A "not applicable" plan.
pub(crate) fn not_applicable(
    model: &Model,
    planner: PlannerKind,
    overlaps: &Overlaps,
    alignment: u64,
    reason: String,
) -> Plan {
    let order: Vec<usize> = (0..model.ops.len()).collect();
    let lb = Problem::new(model, &order, overlaps, alignment).lower_bound();
    let overlap = overlaps.method.as_str();
    Plan {
        planner,
        overlap: overlap.to_string(),
        status: PlanStatus::NotApplicable,
        note: Some(reason),
        order_name: PlanOrder::model(),
        order,
        peak_bytes: None,
        lower_bound_bytes: lb,
        gap_bytes: None,
        tensors: Vec::new(),
        overlaps_used: Vec::new(),
        elapsed: Duration::ZERO,
    }
}

/// Distinct orders among model / eager / lazy, with their names; only the
/// model's order with [`PlanOptions::model_order_only`].
pub(crate) fn candidate_orders(
    model: &Model,
    kinds: &[OrderKind],
    opts: &PlanOptions,
) -> Vec<(PlanOrder, Vec<usize>)> {
    if opts.model_order_only {
        return vec![(PlanOrder::model(), order::order(model, OrderKind::Model))];
    }
    let mut out: Vec<(PlanOrder, Vec<usize>)> = Vec::new();
    for &k in kinds {
        let o = order::order(model, k);
        match out.iter_mut().find(|(_, x)| *x == o) {
            Some((PlanOrder::Named(names), _)) => names.push(k),
            _ => out.push((PlanOrder::Named(vec![k]), o)),
        }
    }
    out
}

/// Runs one planner, then checks its plan with the independent validator.
/// An invalid plan is an error, never returned.
pub fn run(
    model: &Model,
    planner: PlannerKind,
    overlaps: &Overlaps,
    opts: &PlanOptions,
) -> Result<Plan, PlanError> {
    let start = std::time::Instant::now();
    let none = Overlaps::none(model);
    let overlaps = if planner.uses_overlap() {
        overlaps
    } else {
        &none
    };
    let mut plan = match planner {
        PlannerKind::Linear => greedy::linear(model, opts),
        PlannerKind::TflmGreedy => greedy::tflm_greedy(model, opts),
        PlannerKind::DmoHeap => heap::dmo_heap(model, overlaps, opts),
        PlannerKind::Replacement => replacement::replacement(model, overlaps, opts),
        PlannerKind::Reorder => heap::reorder(model, overlaps, opts),
        PlannerKind::Exact => exact::exact(model, overlaps, opts),
        PlannerKind::Tinyseg => not_applicable(
            model,
            planner,
            overlaps,
            opts.alignment,
            "tinyseg transforms the model: run it with `memtrace plan --planner tinyseg` \
             (crate::tinyseg::optimize)"
                .into(),
        ),
    };
    if matches!(planner, PlannerKind::DmoHeap | PlannerKind::Reorder) {
        plan = never_worse_than_without_overlaps(model, planner, overlaps, opts, plan);
    }
    plan.elapsed = start.elapsed();
    if plan.status != PlanStatus::NotApplicable {
        validate::validate(model, &plan, overlaps).map_err(|v| PlanError::Invalid {
            planner: planner.name().to_string(),
            reason: v.0,
        })?;
    }
    Ok(plan)
}

/// `plan` (from `planner` with `overlaps`), or whichever of the same
/// planner without overlaps and TFLM's greedy plan has a smaller peak: both
/// place no tensor over another, so they hold under any O_s, and a heuristic
/// that may use overlaps must never do worse than either (on MLPerf
/// Tiny's ad01, the heap with overlaps needed 896 B where greedy
/// needed 768 B). A replacement keeps the planner's name and O_s source; its
/// note says where the placement came from.
fn never_worse_than_without_overlaps(
    model: &Model,
    planner: PlannerKind,
    overlaps: &Overlaps,
    opts: &PlanOptions,
    plan: Plan,
) -> Plan {
    if plan.peak_bytes.is_none() || overlaps.method == "none" {
        return plan;
    }
    let none = Overlaps::none(model);
    let plain = match planner {
        PlannerKind::DmoHeap => heap::dmo_heap(model, &none, opts),
        _ => heap::reorder(model, &none, opts),
    };
    let greedy = greedy::tflm_greedy(model, opts);
    let mut best = plan;
    for (other, what) in [
        (plain, "the same planner without overlaps"),
        (greedy, "tflm-greedy"),
    ] {
        if other.peak_bytes.is_none() || other.peak_bytes >= best.peak_bytes {
            continue;
        }
        let offsets: Vec<u64> = other.tensors.iter().map(|t| t.offset).collect();
        let problem = Problem::new(model, &other.order, overlaps, opts.alignment);
        let mut replaced = problem.plan(
            model,
            planner,
            &overlaps.method,
            &other.order_name,
            &offsets,
        );
        replaced.note = Some(format!(
            "placement of {what} ({} B), smaller than with overlaps ({} B)",
            other.peak_bytes.unwrap_or(0),
            best.peak_bytes.unwrap_or(0)
        ));
        best = replaced;
    }
    best
}

#[cfg(test)]
mod tests;
