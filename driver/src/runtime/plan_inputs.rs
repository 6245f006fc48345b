//! What a plan for real TFLM takes from one traced run of the model
//! ([`plan_inputs`]): each operator's traced O_s ([`traced_overlaps`]) and
//! the scratch bytes TFLM gave it ([`scratch_needs`]).

use memtrace_abi::runner::{op_index, TflmResult};
use memtrace_abi::Role;
use memtrace_analyzer::layer_stats::LayerStats;
use memtrace_analyzer::report::LayerReport;
use memtrace_model::planner::TracedOverlaps;
use memtrace_model::source::ModelFile;
use memtrace_tracer::{AccessPath, Arch, ElfImage};

use super::{load_runner, runner_path, seeded_inputs, ModelRun, OpsNeeded};
use crate::runtime::kernels::Kernels;
use crate::runtime::trace_cache::TraceCache;
use crate::support::error::Result;

/// Monotone O_s per operator index from a run's layers: the first arena
/// input against the first output. An operator with more activation inputs
/// than the trace pairs with its output (other than CONCATENATION, whose
/// later inputs never overlap) gets none.
pub fn traced_overlaps(layers: &[LayerReport]) -> TracedOverlaps {
    let mut traced = TracedOverlaps::default();
    for l in layers {
        let Some(op) = op_index(&l.params) else {
            continue;
        };
        let inputs = l.buffers.iter().filter(|b| b.role == Role::Input).count();
        let paired = usize::from(l.overlap.is_some()) + usize::from(l.input2_overlap.is_some());
        if inputs > paired && l.op != "CONCATENATION" {
            continue;
        }
        let values = [&l.overlap, &l.input2_overlap];
        let first = match l.op.as_str() {
            "CONCATENATION" => l.overlap.as_ref().map(|o| o.monotone_bytes),
            _ => values
                .iter()
                .filter_map(|o| o.as_ref().map(|o| o.monotone_bytes))
                .min(),
        };
        if let Some(v) = first {
            traced.by_op.insert(op, v);
        }
    }
    traced
}

/// Every operator of `model` traced on `image` (O_s, counts; no weights
/// declared, scratch untraced): the runner's answer and the layers.
pub(crate) fn trace_model_operators(
    image: &ElfImage,
    model: &[u8],
    inputs: &[u8],
    max_instructions: u64,
) -> Result<(TflmResult, Vec<LayerReport>)> {
    let mut stats = LayerStats::default();
    let outcome = ModelRun::whole(image, model, inputs, max_instructions)
        .without_scratch()
        .trace(AccessPath::Mmio, None, false, &mut [&mut stats])?;
    Ok((outcome.result, stats.layers))
}

/// TFLM's buffer alignment (`MicroArenaBufferAlignment()`): every planned
/// buffer, each scratch buffer on its own, starts and is sized to it.
const TFLM_BUFFER_ALIGNMENT: u64 = 16;

/// Scratch bytes per operator, as TFLM gave them: an operator with several
/// scratch buffers (LSTM asks for four) gets one tensor as large as TFLM's
/// buffers side by side, each rounded up to TFLM's alignment.
pub(crate) fn scratch_needs(result: &TflmResult, ops: usize) -> Vec<u64> {
    let mut needs = vec![0u64; ops];
    for s in &result.scratch {
        if let Some(n) = needs.get_mut(s.op as usize) {
            *n += s.bytes.next_multiple_of(TFLM_BUFFER_ALIGNMENT);
        }
    }
    needs
}

/// Every operator of `model` (read as `graph`) sized from its shapes on
/// `kernels` and `target`, against the scratch TFLM gave it in `result`.
pub(crate) fn size_scratch(
    model: &memtrace_model::Model,
    graph: &memtrace_model::graph::TfliteGraph,
    kernels: Kernels,
    target: Arch,
    result: &TflmResult,
) -> memtrace_model::scratch_sizing::ScratchSizing {
    size_scratch_of(graph, model, kernels, target, &scratch_requested(result))
}

/// Each scratch buffer TFLM gave in `result`: (operator, bytes).
pub(crate) fn scratch_requested(result: &TflmResult) -> Vec<(usize, u64)> {
    result
        .scratch
        .iter()
        .map(|s| (s.op as usize, s.bytes))
        .collect()
}

/// Every operator of `graph` (memtrace's `model` of it) sized from its
/// shapes on `kernels` and `target`, against `requested` (operator, bytes of
/// one scratch buffer it asked for).
pub(crate) fn size_scratch_of(
    graph: &memtrace_model::graph::TfliteGraph,
    model: &memtrace_model::Model,
    kernels: Kernels,
    target: Arch,
    requested: &[(usize, u64)],
) -> memtrace_model::scratch_sizing::ScratchSizing {
    let names: Vec<String> = graph.ops.iter().map(|o| o.name.clone()).collect();
    memtrace_model::scratch_sizing::size_scratch(model, &names, kernels, target, requested)
}

/// What a plan for real TFLM takes from one traced run of the model: the
/// scratch bytes TFLM gave each operator and each operator's traced O_s.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct PlanInputs {
    /// Scratch bytes per operator.
    pub scratch: Vec<u64>,
    /// Monotone O_s per operator.
    pub overlaps: TracedOverlaps,
}

/// Traces `model` (`ops` operators) on the runner of `kernels` for
/// `target` with seeded inputs (seed 1), or takes the result from `cache`
/// when the runner, model and inputs were traced before.
pub(crate) fn plan_inputs(
    model: &ModelFile,
    ops: usize,
    kernels: Kernels,
    target: Arch,
    cache: &TraceCache,
) -> Result<PlanInputs> {
    // TFLM's own plan gives the scratch and O_s, not an offline plan the
    // model may carry.
    let bytes = model.without_offline();
    let graph = &model.graph;
    let inputs = seeded_inputs(graph, 1)?;
    let image = load_runner(
        &runner_path(
            target,
            kernels,
            None,
            "--runner",
            Some(&OpsNeeded::of(graph)),
        )?,
        kernels,
    )?;
    let key = TraceCache::key(
        "tflm-plan-inputs-v1",
        &[&image.bytes, bytes, &inputs, &(ops as u64).to_le_bytes()],
    );
    cache.fetch(&key, || {
        let (result, layers) = trace_model_operators(
            &image,
            bytes,
            &inputs,
            crate::support::common::MAX_INSTRUCTIONS,
        )?;
        Ok(PlanInputs {
            scratch: scratch_needs(&result, ops),
            overlaps: traced_overlaps(&layers),
        })
    })
}
