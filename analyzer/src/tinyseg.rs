//! TinySeg's reports: the per-step table of a run (`plan --planner
//! tinyseg`) and what a verified run says of it.

use std::fmt::Write;

use serde::Serialize;

use crate::shadow::Clobber;
use memtrace_model::tinyseg::{Optimized, Step};

/// Percent change from `from` to `to` (negative: lower).
pub fn change_percent(from: u64, to: u64) -> f64 {
    if from == 0 {
        return 0.0;
    }
    (to as f64 - from as f64) * 100.0 / from as f64
}

/// One row per step: action, peak, change against the first step's peak,
/// lower bound, bytes spilled (raw and compressed) and the graph change.
pub fn steps_table(steps: &[Step]) -> String {
    let first = steps.first().map_or(0, |s| s.peak_bytes);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>4}  {:<14} {:>12} {:>8} {:>12} {:>10} {:>10}  change",
        "step", "action", "peak B", "vs orig", "lower bd B", "spilled B", "compr. B"
    );
    for (i, s) in steps.iter().enumerate() {
        let compressed = s
            .compressed_bytes
            .map_or_else(|| "-".to_string(), |c| c.to_string());
        let spilled = if s.spilled_bytes > 0 {
            s.spilled_bytes.to_string()
        } else {
            "-".into()
        };
        let _ = writeln!(
            out,
            "{i:>4}  {:<14} {:>12} {:>+7.1}% {:>12} {:>10} {:>10}  {}",
            s.action,
            s.peak_bytes,
            change_percent(first, s.peak_bytes),
            s.lower_bound_bytes,
            spilled,
            compressed,
            s.change
        );
    }
    out
}

/// What `memtrace verify --planner tinyseg` reports besides the runs: the
/// steps, the bytes moved (raw and compressed, measured on the run's
/// storage), the storage check and what spilling cost in instructions.
#[derive(Clone, Debug, Serialize)]
pub struct SpillReport {
    /// The base planner.
    pub base: String,
    /// The target peak, if one was given.
    pub target_bytes: Option<u64>,
    /// Every accepted step, with its compressed bytes.
    pub steps: Vec<Step>,
    /// Bytes sent to storage; each is fetched back once, so twice this
    /// crosses the storage interface.
    pub spilled_bytes: u64,
    /// The same tensors in TinySeg's compressed form (representative +
    /// bitmap + other values), from the bytes the run left in storage.
    pub compressed_bytes: u64,
    /// Size of the storage region the program used.
    pub storage_bytes: u64,
    /// Reads of storage bytes that did not hold the tensor being fetched
    /// (a shadow map over the storage region).
    pub storage_clobbers: Vec<Clobber>,
    /// Instructions of the plan run minus the reference run.
    pub extra_instructions: i64,
    /// Instructions inside the storage operators' windows (spill, fetch,
    /// fetch_concat, fetch_conv2d).
    pub storage_op_instructions: u64,
    /// Wall-clock seconds TinySeg took to plan (transformations included).
    pub planning_seconds: f64,
}

impl SpillReport {
    /// The steps and the cost lines, as text.
    pub fn to_text(&self) -> String {
        let mut s = format!(
            "tinyseg on {}{}\n",
            self.base,
            self.target_bytes
                .map(|t| format!(", target {t} B"))
                .unwrap_or_default()
        );
        s.push_str(&steps_table(&self.steps));
        let _ = writeln!(
            s,
            "storage {} B spilled and fetched back ({} B compressed, {:.1} %); region {} B; {} storage clobbers",
            self.spilled_bytes,
            self.compressed_bytes,
            if self.spilled_bytes > 0 {
                100.0 * self.compressed_bytes as f64 / self.spilled_bytes as f64
            } else {
                0.0
            },
            self.storage_bytes,
            self.storage_clobbers.len()
        );
        let _ = writeln!(
            s,
            "cost    {:+} instructions against the reference run; {} inside storage operators; planned in {:.3} s",
            self.extra_instructions, self.storage_op_instructions, self.planning_seconds
        );
        s
    }
}

/// What `memtrace plan --planner tinyseg` reports: the steps and the final
/// plan of the transformed model.
#[derive(Clone, Debug, Serialize)]
pub struct TinysegPlan {
    /// Model name.
    pub model: String,
    /// The base planner.
    pub base: String,
    /// The target peak, if one was given.
    pub target_bytes: Option<u64>,
    /// Every accepted step.
    pub steps: Vec<Step>,
    /// Bytes sent to storage (each fetched back once).
    pub spilled_bytes: u64,
    /// Wall-clock seconds of the whole optimisation.
    pub planning_seconds: f64,
    /// The transformed model's operators in execution order
    /// (`KIND output`).
    pub ops: Vec<String>,
    /// The base planner's plan of the transformed model.
    pub plan: memtrace_model::planner::Plan,
}

impl TinysegPlan {
    /// The report of `optimized`, which took `seconds`.
    pub fn new(optimized: &Optimized, target_bytes: Option<u64>, seconds: f64) -> Self {
        let m = &optimized.graph.model;
        TinysegPlan {
            model: m.name.clone(),
            base: optimized.base.name().into(),
            target_bytes,
            steps: optimized.steps.clone(),
            spilled_bytes: optimized.spilled_bytes(),
            planning_seconds: seconds,
            ops: m
                .ops
                .iter()
                .map(|op| {
                    let out = op
                        .outputs
                        .first()
                        .map_or("", |&t| m.tensors[t].name.as_str());
                    format!("{} {out}", op.kind.tflite_name())
                })
                .collect(),
            plan: optimized.plan.clone(),
        }
    }

    /// The steps and a summary line, as text.
    pub fn to_table(&self) -> String {
        let mut s = format!(
            "model {}: tinyseg on {}{}\n",
            self.model,
            self.base,
            self.target_bytes
                .map(|t| format!(", target {t} B"))
                .unwrap_or_default()
        );
        s.push_str(&steps_table(&self.steps));
        let _ = writeln!(
            s,
            "final   peak {} B (lower bound {} B), {} operators, {} B spilled; planned in {:.3} s",
            self.plan.peak_bytes.unwrap_or(0),
            self.plan.lower_bound_bytes,
            self.ops.len(),
            self.spilled_bytes,
            self.planning_seconds
        );
        s
    }
}
