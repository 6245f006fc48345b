//! The independent plan validator.
//!
//! It does not reuse the planners' `Problem`: it recomputes every
//! tensor's lifetime from the model and the plan's order, and checks the
//! plan's data ranges `[offset, offset + bytes)` directly:
//!
//! * the order runs every operator once, after its predecessors;
//! * every tensor that needs the arena is placed exactly once, with a size at
//!   least its bytes, and nothing else is placed;
//! * the plan's lifetimes and peak are the ones recomputed here;
//! * no two tensors live at a common step share a byte, except an input of
//!   an operator that dies at that operator (its first input only, for a
//!   concatenation: `Op::overlap_inputs`) and the operator's
//!   first output,
//!   when the input starts no lower than `output start + output bytes − O_s`
//!   (the input's start overlaps the output's end by at most O_s, the
//!   direction DMO computes O_s for).

use std::collections::HashMap;

use super::{Overlaps, Plan};
use crate::order::is_valid_order;
use crate::Model;

/// Why a plan is not a safe arena layout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Violation(pub String);

/// `Ok` if `plan` is a safe arena layout for `model` under `overlaps`.
pub fn validate(model: &Model, plan: &Plan, overlaps: &Overlaps) -> Result<(), Violation> {
    check(model, plan, overlaps).map_err(Violation)
}

fn check(model: &Model, plan: &Plan, overlaps: &Overlaps) -> Result<(), String> {
    if !is_valid_order(model, &plan.order) {
        return Err("the order is not a valid execution order".into());
    }
    let mut step_of = vec![0usize; model.ops.len()];
    for (s, &op) in plan.order.iter().enumerate() {
        step_of[op] = s;
    }
    let life = lifetimes(model, &step_of, plan.order.len());
    check_placements(model, plan, &life)?;
    let allowed = allowed_overlaps(model, overlaps, &life, &step_of);
    check_no_clash(model, plan, &allowed)
}

/// Tensor -> (first, last) step it is live at, recomputed from the graph:
/// the arena's tensors only.
fn lifetimes(model: &Model, step_of: &[usize], steps: usize) -> HashMap<usize, (usize, usize)> {
    let mut life: HashMap<usize, (usize, usize)> = HashMap::new();
    let last_step = steps.saturating_sub(1);
    let touch = |t: usize, s: usize, life: &mut HashMap<usize, (usize, usize)>| {
        let e = life.entry(t).or_insert((s, s));
        e.0 = e.0.min(s);
        e.1 = e.1.max(s);
    };
    for &t in &model.inputs {
        touch(t, 0, &mut life);
    }
    for (op, o) in model.ops.iter().enumerate() {
        // An operator's scratch memory is touched during its step only.
        for &t in o.inputs.iter().chain(&o.outputs).chain(&o.scratch) {
            touch(t, step_of[op], &mut life);
        }
    }
    for &t in &model.outputs {
        touch(t, last_step, &mut life);
    }
    life.retain(|&t, _| model.tensors[t].needs_arena());
    life
}

/// Every arena tensor placed once, large enough, with its real lifetime,
/// nothing else placed, and the peak the tensors reach.
fn check_placements(
    model: &Model,
    plan: &Plan,
    life: &HashMap<usize, (usize, usize)>,
) -> Result<(), String> {
    let mut placed: HashMap<usize, usize> = HashMap::new();
    for (i, p) in plan.tensors.iter().enumerate() {
        let Some(t) = model.tensors.get(p.tensor) else {
            return Err(format!("placed tensor {} does not exist", p.tensor));
        };
        if placed.insert(p.tensor, i).is_some() {
            return Err(format!("tensor `{}` is placed twice", t.name));
        }
        let Some(&(f, l)) = life.get(&p.tensor) else {
            return Err(format!(
                "tensor `{}` does not need the arena but is placed",
                t.name
            ));
        };
        if p.size < t.bytes {
            return Err(format!(
                "tensor `{}` gets {} bytes but holds {}",
                t.name, p.size, t.bytes
            ));
        }
        if (p.first_op, p.last_op) != (f, l) {
            return Err(format!(
                "tensor `{}` is reported live at steps {}..={}, but it is live at {f}..={l}",
                t.name, p.first_op, p.last_op
            ));
        }
    }
    if let Some((&t, _)) = life.iter().find(|(t, _)| !placed.contains_key(t)) {
        return Err(format!("tensor `{}` is not placed", model.tensors[t].name));
    }
    let peak = plan
        .tensors
        .iter()
        .map(|p| p.offset + p.size)
        .max()
        .unwrap_or(0);
    if plan.peak_bytes != Some(peak) {
        return Err(format!(
            "the plan reports a peak of {:?} bytes, its tensors reach {peak}",
            plan.peak_bytes
        ));
    }
    Ok(())
}

/// The DMO overlaps allowed: (input, output) -> O_s, for an input that
/// dies at its operator's step (and is no graph output).
fn allowed_overlaps(
    model: &Model,
    overlaps: &Overlaps,
    life: &HashMap<usize, (usize, usize)>,
    step_of: &[usize],
) -> HashMap<(usize, usize), u64> {
    let mut allowed = HashMap::new();
    for (op, o) in model.ops.iter().enumerate() {
        let os = overlaps.get(op);
        let Some(&out) = o.outputs.first() else {
            continue;
        };
        if os == 0 {
            continue;
        }
        for &inp in o.overlap_inputs() {
            let dies_here = life.get(&inp).is_some_and(|&(_, l)| l == step_of[op])
                && !model.outputs.contains(&inp);
            if dies_here && inp != out {
                allowed.insert((inp, out), os);
            }
        }
    }
    allowed
}

/// No two tensors live at one step share a byte, except an allowed input
/// over its output's last O_s bytes: pairwise, step by step, over data
/// ranges sorted by start.
fn check_no_clash(
    model: &Model,
    plan: &Plan,
    allowed: &HashMap<(usize, usize), u64>,
) -> Result<(), String> {
    let steps = plan.order.len();
    let mut live_at: Vec<Vec<usize>> = vec![Vec::new(); steps.max(1)];
    for (i, p) in plan.tensors.iter().enumerate() {
        for list in &mut live_at[p.first_op..=p.last_op.min(steps.max(1) - 1)] {
            list.push(i);
        }
    }
    for (s, live) in live_at.iter_mut().enumerate() {
        let range = |i: usize| {
            let p = &plan.tensors[i];
            (p.offset, p.offset + model.tensors[p.tensor].bytes)
        };
        live.sort_by_key(|&i| range(i));
        for (k, &a) in live.iter().enumerate() {
            let (a_start, a_end) = range(a);
            for &b in &live[k + 1..] {
                let (b_start, b_end) = range(b);
                if b_start >= a_end {
                    break;
                }
                if b_end <= b_start || a_end <= a_start {
                    continue; // empty tensors overlap nothing
                }
                let (ta, tb) = (plan.tensors[a].tensor, plan.tensors[b].tensor);
                let ok = |inp: usize, out: usize| {
                    allowed.get(&(inp, out)).is_some_and(|&os| {
                        let (in_start, _) = range(if inp == ta { a } else { b });
                        let (out_start, out_end) = range(if out == ta { a } else { b });
                        in_start as i128 >= out_end as i128 - os as i128 && out_end > out_start
                    })
                };
                if !ok(ta, tb) && !ok(tb, ta) {
                    return Err(format!(
                        "at step {s} (operator {}), `{}` [{a_start}, {a_end}) and `{}` [{b_start}, {b_end}) overlap",
                        plan.order.get(s).copied().unwrap_or(0),
                        model.tensors[ta].name,
                        model.tensors[tb].name
                    ));
                }
            }
        }
    }
    Ok(())
}
