//! TinySeg in the workflows: the transformation of a model for `memtrace plan`
//! and `memtrace verify` (`--planner tinyseg --base PLANNER`), and what a
//! verified run tells about it — the compressed size of the bytes it left in
//! storage and the instructions its storage operators retired.

use std::time::Instant;

use memtrace_analyzer::shadow::Clobber;
use memtrace_analyzer::tinyseg::SpillReport;
use memtrace_model::planner::{Overlaps, PlanOptions, PlannerKind};
use memtrace_model::storage_layout;
use memtrace_model::synth::materialize;
use memtrace_model::tinyseg::compress::compress;
use memtrace_model::tinyseg::{optimize, NarrowScratch, Optimized, TinysegOptions};
use memtrace_model::Model;

use crate::support::error::Result;

/// How to run TinySeg.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpillOptions {
    /// The planner TinySeg plans with after every step.
    pub base: PlannerKind,
    /// Stop at this peak (and size partial spills by it).
    pub target_bytes: Option<u64>,
    /// When to narrow accumulator scratch tensors to int16.
    pub narrow_scratch: NarrowScratch,
}

impl Default for SpillOptions {
    fn default() -> Self {
        SpillOptions {
            base: PlannerKind::TflmGreedy,
            target_bytes: None,
            narrow_scratch: NarrowScratch::Exact,
        }
    }
}

/// TinySeg's transformation of `model` and its plan, with the time it took.
/// With `seed`, the model is first given the weights and quantisation `memtrace
/// verify` runs it with, so the transformed model computes with the same
/// constants as the untransformed one.
pub(crate) fn transform(
    model: &Model,
    overlaps: &Overlaps,
    opts: &SpillOptions,
    plan: &PlanOptions,
    seed: Option<u64>,
) -> Result<(Optimized, f64)> {
    let model = match seed {
        Some(seed) => materialize(model, seed),
        None => model.clone(),
    };
    let started = Instant::now();
    let optimized = optimize(
        &model,
        overlaps,
        &TinysegOptions {
            base: opts.base,
            target_bytes: opts.target_bytes,
            narrow_scratch: opts.narrow_scratch,
            plan: plan.clone(),
            ..TinysegOptions::default()
        },
    )?;
    Ok((optimized, started.elapsed().as_secs_f64()))
}

/// TinySeg's options for a model real TFLM runs: no scratch narrowed to
/// int16 (TFLM's TRANSPOSE_CONV requests its int32 accumulator itself, so a
/// plan that halves it would not be the arena TFLM allocates), and the
/// warning to give when `opts`' `--scratch-int16` policy would have
/// narrowed one (TinySeg planned as asked on `model` to find out).
pub(crate) fn for_tflm(
    model: &Model,
    overlaps: &Overlaps,
    opts: &SpillOptions,
    plan: &PlanOptions,
    seed: Option<u64>,
) -> Result<(SpillOptions, Option<String>)> {
    let never = SpillOptions {
        narrow_scratch: NarrowScratch::Never,
        ..*opts
    };
    if opts.narrow_scratch == NarrowScratch::Never {
        return Ok((never, None));
    }
    let (asked, _) = transform(model, overlaps, opts, plan, seed)?;
    let narrowed = asked
        .steps
        .iter()
        .any(|s| s.action == memtrace_model::tinyseg::StepAction::ScratchInt16);
    let warning = narrowed.then(|| {
        format!(
            "--scratch-int16 {}: TFLM's TRANSPOSE_CONV keeps its int32 accumulator, so no scratch \
             was narrowed (docs/tinyseg.md, \"What was dropped\")",
            format!("{:?}", opts.narrow_scratch).to_lowercase()
        )
    });
    Ok((never, warning))
}

/// The storage operators, as layer windows name them: the TFLM runner's
/// custom operators.
const STORAGE_OPS: [&str; 9] = [
    "spill",
    "fetch",
    "fetch_concat",
    "fetch_conv2d",
    "MEMTRACE_SPILL",
    "MEMTRACE_SPILL_KEEP",
    "MEMTRACE_FETCH",
    "MEMTRACE_FETCH_CONCAT",
    "MEMTRACE_FETCH_CONV_2D",
];

/// Instructions inside the storage operators' windows, from each layer's
/// operator name and instructions.
pub fn storage_op_instructions<'a>(layers: impl Iterator<Item = (&'a str, u64)>) -> u64 {
    layers
        .filter(|(op, _)| STORAGE_OPS.contains(op))
        .map(|(_, n)| n)
        .sum()
}

/// What a verified run of the transformed model tells: each step's spilled
/// tensor compressed as it lay in `storage` after the run, the storage check
/// and the instruction costs.
pub struct SpillRun<'a> {
    /// The transformation that ran.
    pub optimized: &'a Optimized,
    /// Options it ran with.
    pub options: SpillOptions,
    /// The storage region after the run.
    pub storage: &'a [u8],
    /// Reads of storage bytes that did not hold the fetched tensor.
    pub storage_clobbers: Vec<Clobber>,
    /// Instructions inside the storage operators ([`storage_op_instructions`]).
    pub storage_op_instructions: u64,
    /// Instructions of the plan run and of the reference run.
    pub instructions: (u64, u64),
    /// Seconds TinySeg took to plan.
    pub planning_seconds: f64,
}

impl SpillRun<'_> {
    /// The report of the run.
    pub fn report(self) -> SpillReport {
        let model = &self.optimized.graph.model;
        let (offsets, storage_bytes) = storage_layout(model);
        let mut steps = self.optimized.steps.clone();
        let mut compressed_total = 0;
        for step in &mut steps {
            let Some(name) = &step.stored else { continue };
            let Some(t) = model.tensors.iter().position(|t| &t.name == name) else {
                continue;
            };
            let (Some(at), bytes) = (offsets[t], model.tensors[t].bytes) else {
                continue;
            };
            let Some(data) = self.storage.get(at as usize..(at + bytes) as usize) else {
                continue;
            };
            let c = compress(data, model.tensors[t].dtype.size() as usize).bytes();
            step.compressed_bytes = Some(c);
            compressed_total += c;
        }
        SpillReport {
            base: self.options.base.name().into(),
            target_bytes: self.options.target_bytes,
            spilled_bytes: self.optimized.spilled_bytes(),
            compressed_bytes: compressed_total,
            storage_bytes,
            storage_clobbers: self.storage_clobbers,
            extra_instructions: self.instructions.0 as i64 - self.instructions.1 as i64,
            storage_op_instructions: self.storage_op_instructions,
            planning_seconds: self.planning_seconds,
            steps,
        }
    }
}

/// TinySeg's planning time on each of `models`
/// with each base planner and every scratch policy's step, written to `out`
/// with the target the issue sets (< 1 s on Tiny U-Net).
pub fn bench_tinyseg(
    models: &[memtrace_model::source::ModelSource],
    repeat: u32,
    out: &mut impl std::io::Write,
) -> Result<()> {
    use memtrace_model::planner::OverlapMethod;
    use memtrace_model::tinyseg::bench::time_tinyseg;
    writeln!(
        out,
        "[tinyseg] planning time (fastest of {repeat}; transformations, re-plans and validation included)"
    )?;
    writeln!(
        out,
        "  {:<28} {:<12} {:<7} {:>10} {:>6} {:>10} {:>10}",
        "model", "base", "int16", "seconds", "steps", "peak B", "after B"
    )?;
    for name in models {
        let model = name.load()?.with_reference_scratch();
        let model = materialize(&model, 1);
        let overlaps = Overlaps::compute(&model, &OverlapMethod::Analytic);
        for base in [PlannerKind::TflmGreedy, PlannerKind::DmoHeap] {
            for narrow in [NarrowScratch::Exact, NarrowScratch::Always] {
                let opts = TinysegOptions {
                    base,
                    narrow_scratch: narrow,
                    ..TinysegOptions::default()
                };
                let t = time_tinyseg(&model, &overlaps, &opts, repeat)?;
                writeln!(
                    out,
                    "  {:<28} {:<12} {:<7} {:>10.6} {:>6} {:>10} {:>10}  {}",
                    t.model,
                    t.base,
                    format!("{narrow:?}").to_lowercase(),
                    t.seconds,
                    t.steps,
                    t.peaks.0,
                    t.peaks.1,
                    if t.seconds < 1.0 {
                        "< 1 s: met"
                    } else {
                        ">= 1 s: NOT met"
                    }
                )?;
            }
        }
    }
    Ok(())
}

/// The warning of a TinySeg run that stopped above its `--target-bytes`
/// (every spill and fusion tried), if it did.
pub(crate) fn target_missed(target: Option<u64>, peak: Option<u64>) -> Option<String> {
    let (target, peak) = (target?, peak?);
    (peak > target).then(|| {
        format!(
            "--target-bytes {target} was not reached: the final peak is {peak} bytes, {} above it",
            peak - target
        )
    })
}
