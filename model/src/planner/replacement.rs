//! Sakr et al.'s memory replacement strategy for CMSIS-NN: one *total
//! buffer* shared by all layers of a sequential network, with a pointer to
//! its first free slot.
//!
//! Their rule (Table I): a layer that can destroy its input as it goes
//! (pooling in CMSIS-NN) writes its output from the start of the buffer, over
//! its input; any other layer (convolution) must keep its input intact and
//! writes next to it. Here "can destroy its input" is decided by the plan's
//! O_s, not by the op's name: a layer writes from offset 0 over its input only
//! when its O_s covers the whole output (in-place is safe), which the TFLM
//! reference pools satisfy; every other layer goes at offset 0 if that leaves
//! its input untouched, else right after its input. The buffer's size is the
//! largest end offset.
//!
//! Only sequential models qualify (every operator reads exactly the previous
//! operator's output, and nothing else reads it); for any other graph the
//! plan is "not applicable" with the reason.

use super::{not_applicable, Plan, PlanOptions, Problem};
use crate::order::{self, OrderKind, PlanOrder};
use crate::planner::{Overlaps, PlannerKind};
use crate::Model;

/// Sakr et al.'s single-buffer plan in the model's order; "not applicable"
/// unless the model is sequential.
pub fn replacement(model: &Model, overlaps: &Overlaps, opts: &PlanOptions) -> Plan {
    if let Err(reason) = model.sequential_chain().map_err(|e| e.to_string()) {
        return not_applicable(
            model,
            PlannerKind::Replacement,
            overlaps,
            opts.alignment,
            format!("needs a sequential model: {reason}"),
        );
    }
    let order = order::order(model, OrderKind::Model);
    let problem = Problem::new(model, &order, overlaps, opts.alignment);
    let mut offsets = vec![0u64; problem.buffers.len()];
    let buffer_of = |t: usize| problem.buffers.iter().position(|b| b.tensor == t);
    for (op_index, op) in model.ops.iter().enumerate() {
        let Some(out) = op.outputs.iter().find_map(|&t| buffer_of(t)) else {
            continue;
        };
        let Some(inp) = op
            .inputs
            .iter()
            .find(|&&t| model.tensors[t].needs_arena())
            .and_then(|&t| buffer_of(t))
        else {
            continue;
        };
        let (in_off, in_size) = (offsets[inp], problem.buffers[inp].size);
        let out_size = problem.buffers[out].size;
        let in_place_ok = problem.pairs.iter().any(|p| {
            p.op == op_index && p.input == inp && p.credit >= out_size.saturating_sub(in_off)
        });
        offsets[out] = if in_place_ok || out_size <= in_off {
            0
        } else {
            in_off + in_size
        };
        // The operator's scratch memory goes above both of its tensors.
        if let Some(s) = op.scratch.and_then(buffer_of) {
            offsets[s] = (in_off + in_size).max(offsets[out] + out_size);
        }
    }
    let mut plan = problem.plan(
        model,
        PlannerKind::Replacement,
        &overlaps.method,
        &PlanOrder::model(),
        &offsets,
    );
    plan.note = Some("single total buffer, Sakr et al.".into());
    plan
}
