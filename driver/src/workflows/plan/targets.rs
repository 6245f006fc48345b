//! Plans for a set of cores (`plan --target cortex-m0,cortex-m4,…`): one
//! plan that holds on each. CMSIS-NN compiles to other code per core (pure C
//! on the M0 and M3, DSP on the M4, M7 and M33), so an operator's O_s and
//! scratch differ between cores; the plan takes, per operator, the smallest
//! O_s and the largest scratch of all, and the arena to allocate is the
//! largest TFLM needs on any of them.

use std::collections::HashMap;

use memtrace_model::source::ModelFile;
use memtrace_tracer::Arch;

use crate::runtime::kernels::Kernels;
use crate::runtime::trace_cache::TraceCache;
use crate::runtime::PlanInputs;
use crate::support::error::{Context, Result};
use crate::workflows::deploy::{measure_arena, ArenaToAllocate};

/// `model` (`ops` operators) traced on real TFLM's `kernels` on every core
/// of `targets`, combined into what holds on all of them: per operator the
/// largest scratch and the smallest O_s (an operator with no O_s on one
/// core gets none).
pub(super) fn plan_inputs_on_every_target(
    model: &ModelFile,
    ops: usize,
    kernels: Kernels,
    targets: &[Arch],
    cache: &TraceCache,
) -> Result<PlanInputs> {
    let mut all = targets.iter().map(|&target| {
        crate::runtime::plan_inputs(model, ops, kernels, target, cache)
            .with_context(|| format!("tracing {} on {target}", model.source))
    });
    let first = all.next().expect("one target at least")?;
    all.try_fold(first, |acc, next| Ok(combine_plan_inputs(acc, &next?)))
}

/// What holds on both `a`'s core and `b`'s: the larger scratch, the smaller
/// O_s, per operator.
fn combine_plan_inputs(mut a: PlanInputs, b: &PlanInputs) -> PlanInputs {
    for (i, s) in a.scratch.iter_mut().enumerate() {
        *s = (*s).max(b.scratch.get(i).copied().unwrap_or(0));
    }
    keep_min(&mut a.overlaps.by_op, &b.overlaps.by_op);
    keep_min(&mut a.overlaps.by_spec, &b.overlaps.by_spec);
    a
}

/// `mine` keeps only the keys `theirs` has too, each with the smaller value.
fn keep_min<K: std::hash::Hash + Eq>(mine: &mut HashMap<K, u64>, theirs: &HashMap<K, u64>) {
    mine.retain(|k, v| match theirs.get(k) {
        Some(&t) => {
            *v = (*v).min(t);
            true
        }
        None => false,
    });
}

/// The arena to allocate for `model` (`.tflite` bytes with its plan, run on
/// `inputs`) on every core of `targets`: the largest measured, with which
/// TFLM runs on each; the first failure otherwise.
pub(super) fn largest_arena(
    model: &[u8],
    inputs: &[u8],
    kernels: Kernels,
    targets: &[Arch],
    cache: &TraceCache,
) -> Result<ArenaToAllocate> {
    let mut largest: Option<ArenaToAllocate> = None;
    for &target in targets {
        let arena = measure_arena(model, inputs, kernels, target, None, cache)
            .with_context(|| format!("on {target}"))?;
        if largest.as_ref().is_none_or(|l| arena.bytes > l.bytes) {
            largest = Some(arena);
        }
    }
    Ok(largest.expect("one target at least"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use memtrace_model::planner::overlap::TracedOverlaps;

    fn inputs(scratch: &[u64], by_op: &[(usize, u64)], by_spec: &[(&str, u64)]) -> PlanInputs {
        PlanInputs {
            scratch: scratch.to_vec(),
            overlaps: TracedOverlaps {
                by_op: by_op.iter().copied().collect(),
                by_spec: by_spec.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            },
        }
    }

    #[test]
    fn combined_inputs_take_the_larger_scratch_and_the_smaller_overlap() {
        // The KWS average pool: 8000 B of O_s and 256 B of scratch on the
        // DSP path, 64 B and none on the pure-C path.
        let dsp = inputs(&[0, 256, 16], &[(0, 490), (1, 8000), (2, 12)], &[("a", 5)]);
        let pure_c = inputs(&[0, 0], &[(0, 490), (1, 64)], &[("a", 7), ("b", 1)]);
        let both = combine_plan_inputs(dsp, &pure_c);
        assert_eq!(both.scratch, vec![0, 256, 16]);
        let by_op: HashMap<usize, u64> = [(0, 490), (1, 64)].into_iter().collect();
        assert_eq!(
            both.overlaps.by_op, by_op,
            "op 2 has no O_s on the M0: none"
        );
        let by_spec: HashMap<String, u64> = [("a".to_string(), 5)].into_iter().collect();
        assert_eq!(both.overlaps.by_spec, by_spec);
    }
}
