//! Plans as the executor needs them: TFLM's greedy, un-overlapped plan, and
//! any plan as per-tensor offsets and an arena size.

use memtrace_model::planner::{self, Overlaps, Plan, PlanOptions, PlannerKind};
use memtrace_model::Model;

use crate::error::Result;

/// The arena offset of every tensor `plan` places (`None` for the others).
pub fn offsets_of(model: &Model, plan: &Plan) -> Vec<Option<u64>> {
    let mut o = vec![None; model.tensors.len()];
    for t in &plan.tensors {
        o[t.tensor] = Some(t.offset);
    }
    o
}

/// The arena size of `plan`: its peak, or the end of its last tensor.
pub fn arena_of(plan: &Plan, model: &Model) -> u64 {
    plan.peak_bytes.unwrap_or_else(|| {
        plan.tensors
            .iter()
            .map(|t| t.offset + model.tensors[t.tensor].bytes.max(t.size))
            .max()
            .unwrap_or(0)
    })
}

/// The greedy, un-overlapped plan of `model`.
pub fn greedy(model: &Model) -> Result<Plan> {
    Ok(planner::run(
        model,
        PlannerKind::TflmGreedy,
        &Overlaps::none(model),
        &PlanOptions::default(),
    )?)
}
