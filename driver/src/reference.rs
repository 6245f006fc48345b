//! The reference run of a model on memtrace's executor: the library's
//! scratch tensors added, TFLM's greedy plan without overlaps, every read
//! checked by the shadow map, and every operator's O_s traced in its layer
//! window — the `traced` O_s source of `plan` and `verify` alike. A second
//! run of the same executor, model, input and budget comes from the trace
//! cache.

use memtrace_analyzer::verify::OpOverlapReport;
use memtrace_model::planner::{Plan, TracedOverlaps};
use memtrace_model::Model;
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::executor_run::{ExecutorRun, Outcome, Placement, Watch};
use crate::trace_cache::TraceCache;

/// One library's model (with its scratch tensors) and its un-overlapped
/// reference run under TFLM's greedy plan.
pub(crate) struct Reference {
    /// The model with the library's scratch tensors.
    pub model: Model,
    /// TFLM's greedy plan of it, without overlaps.
    pub plan: Plan,
    pub placement: Placement,
    /// What the run left, and what the trace cache keeps of it.
    pub run: ReferenceRun,
    /// Taken from the trace cache, not run.
    pub cached: bool,
}

/// What the trace cache keeps of a reference run: the rest is computed
/// from it.
#[derive(Serialize, Deserialize)]
pub(crate) struct ReferenceRun {
    /// Scratch bytes per operator, as the library answered.
    scratch: Vec<u64>,
    pub outcome: Outcome,
}

/// `base` with `scratch` tensors, TFLM's greedy plan of it and its
/// placement.
fn greedy_reference(base: &Model, scratch: &[u64]) -> Result<(Model, Plan, Placement)> {
    let model = base.with_scratch(scratch);
    let plan = Plan::tflm_greedy(&model)?;
    let placement = Placement::of(&plan, &model);
    Ok((model, plan, placement))
}

impl Reference {
    /// The reference of `base` whose run (traced now, or kept) is `run`.
    fn of(base: &Model, run: ReferenceRun, cached: bool) -> Result<Reference> {
        let (model, plan, placement) = greedy_reference(base, &run.scratch)?;
        Ok(Reference {
            model,
            plan,
            placement,
            run,
            cached,
        })
    }
}

/// Adds `run`'s scratch tensors to `base` and runs it under the greedy plan.
pub(crate) fn reference_run(
    run: &ExecutorRun<'_>,
    base: &Model,
    watch: Watch<'_>,
) -> Result<Reference> {
    let scratch = run.scratch_needs(base)?;
    let (model, plan, placement) = greedy_reference(base, &scratch)?;
    let outcome = run.traced(&model, &placement, watch)?;
    Ok(Reference {
        model,
        plan,
        placement,
        run: ReferenceRun { scratch, outcome },
        cached: false,
    })
}

/// [`reference_run`], taken from `cache` when an earlier run had the same
/// executor, model, input and budget. A run that draws its picture, is
/// timed against Unicorn without hooks (`--baseline`) or feeds other
/// analyses is always run.
pub(crate) fn cached_reference_run(
    run: &ExecutorRun<'_>,
    base: &Model,
    watch: Watch<'_>,
    cache: &TraceCache,
) -> Result<Reference> {
    if watch.plot_title.is_some() || watch.baseline || !watch.analyses.is_empty() {
        return reference_run(run, base, watch);
    }
    let key = run.cache_key("executor-verify-reference-v1", base);
    if let Some(kept) = cache.get::<ReferenceRun>(&key) {
        return Reference::of(base, kept, true);
    }
    let r = reference_run(run, base, watch)?;
    // A clean run only: a clobber in the reference is a finding to show
    // again, not a result to keep.
    if r.run.outcome.clobbers.is_empty() {
        cache.put(&key, &r.run);
    }
    Ok(r)
}

/// Traced O_s per operator of a reference run, from its layers (after the
/// `load_input` windows, one per operator in execution order).
pub(crate) fn traced_overlaps(r: &Reference) -> (TracedOverlaps, Vec<OpOverlapReport>) {
    let model = &r.model;
    let names = model.tensor_names();
    let op_layers = &r.run.outcome.layers[model.inputs.len().min(r.run.outcome.layers.len())..];
    let mut traced = TracedOverlaps::default();
    let mut report = Vec::new();
    for (step, &op) in r.plan.order.iter().enumerate() {
        let o = &model.ops[op];
        let ov = op_layers.get(step).and_then(|l| l.overlap);
        if let Some(ov) = ov {
            traced.by_op.insert(op, ov.monotone_bytes);
        }
        // The input the executor declares first (buffer id 0), whose O_s
        // the layer measures: TRANSPOSE_CONV's third operand.
        let input = o.data_input().unwrap_or(o.inputs[0]);
        report.push(OpOverlapReport {
            op: names[o.outputs[0]].clone(),
            index: op,
            input: names[input].clone(),
            output: names[o.outputs[0]].clone(),
            input_bytes: model.tensors[input].bytes,
            output_bytes: model.tensors[o.outputs[0]].bytes,
            monotone_bytes: ov.map(|v| v.monotone_bytes),
            exact_bytes: ov.map(|v| v.exact_bytes),
            reverse_exact_bytes: ov.map(|v| v.reverse_exact_bytes),
        });
    }
    (traced, report)
}
