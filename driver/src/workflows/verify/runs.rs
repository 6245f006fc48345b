//! The runs of a verification: TFLM in the emulator under a shadow map
//! ([`shadow_run`]), its own plan (traced for O_s, or from the trace cache)
//! and the plan under test, with the checks that the plan fits the runner.

use std::time::Instant;

use serde::Serialize;

use memtrace_abi::runner::TflmResult;
use memtrace_analyzer::layer_stats::LayerStats;
use memtrace_analyzer::plot::arena::ArenaTrace;
use memtrace_analyzer::report::LayerReport;
use memtrace_analyzer::shadow::{Clobber, ShadowMap};
use memtrace_model::planner::TracedOverlaps;
use memtrace_model::{tflite, Model};
use memtrace_tracer::ElfImage;

use super::report::{op_overlaps, TflmOpOverlap, TflmRunReport};
use super::subject::{greedy_prediction, output_layout, Subject};
use super::under_test::UnderTest;
use super::VerifyOptions;
use crate::runtime::kernels::Kernels;
use crate::runtime::oracle::{self, OracleComparison};
use crate::runtime::trace_cache::TraceCache;
use crate::runtime::{model_runner, trace_model_operators, ModelRun, ScratchWatch};
use crate::support::common::{exit_text, run_without_hooks};
use crate::support::error::Result;
use crate::{bail, failed};

/// A traced TFLM run with the shadow map and per-operator O_s.
pub(super) struct ShadowRun {
    pub(super) result: memtrace_abi::runner::TflmResult,
    /// The shadow map's clobbered reads.
    pub(super) clobbers: Vec<Clobber>,
    /// Reads of bytes the input's producer never wrote (no clobbers).
    pub(super) unwritten_reads: Vec<Clobber>,
    /// Layers that read the graph outputs.
    pub(super) readers: Vec<String>,
    pub(super) layers: Vec<LayerReport>,
    /// Taken from the trace cache (then `layers` is empty and `trace` none).
    pub(super) cached: bool,
    /// The arena-wide access picture (`--plot`).
    pub(super) trace: Option<ArenaTrace>,
    pub(super) instructions: u64,
    /// The storage region after the run (read back when watched).
    pub(super) storage: Vec<u8>,
    /// Reads of storage bytes that did not hold the tensor fetched.
    pub(super) storage_clobbers: Vec<Clobber>,
    /// Emulator runs of the trace (`RunSummary::runs`; 0 from the cache).
    pub(super) runs: u32,
    pub(super) seconds: f64,
    pub(super) untraced_seconds: Option<f64>,
}

/// What a shadow run watches besides the shadow map.
struct Watch<'a> {
    /// Arena bytes under the shadow map (TFLM's head starts at the arena's
    /// start).
    pub(super) bytes: u64,
    /// Layers that read the graph outputs.
    pub(super) output_readers: &'a [String],
    /// Title and width in bytes of the arena picture (`--plot`).
    pub(super) plot: Option<(String, u64)>,
    /// Also time the run without hooks (`--baseline`).
    pub(super) baseline: bool,
    /// Draw every scratch access in the picture (the plan under test may
    /// place scratch over a live tensor; TFLM's own plan does not).
    /// Either way the shadow map sees where scratch may write.
    pub(super) scratch: bool,
    /// Trace with two runs at once ([`ModelRun::split`]).
    pub(super) split: bool,
    /// Watch the runner's storage region with a shadow map of its own and
    /// read it back (a model with TinySeg's storage operators).
    pub(super) storage: bool,
}

/// Runs `model` on `image` with a shadow map over the arena.
fn shadow_run(
    image: &ElfImage,
    model: &[u8],
    inputs: &[u8],
    watch: Watch<'_>,
    max_instructions: u64,
) -> Result<ShadowRun> {
    let arena_at = image
        .symbol(memtrace_abi::runner::symbols::ARENA)
        .ok_or_else(|| failed!("{} has no arena", image.path.display()))?
        .address;
    // The picture of the plan under test shows every scratch access; the
    // shadow map needs only where scratch may write. Never untraced: an
    // operator's second output is declared `scratch` (protocol.md §15),
    // and its reader must find it written.
    let scratch = match (watch.scratch, &watch.plot) {
        (true, Some(_)) => ScratchWatch::Traced,
        _ => ScratchWatch::WrittenWhole,
    };
    let run = ModelRun {
        scratch,
        split: watch.split,
        storage: watch.storage,
        ..ModelRun::whole(image, model, inputs, max_instructions)
    };
    let storage_region = watch
        .storage
        .then(|| crate::runtime::runner_storage(image))
        .transpose()?;
    let untraced_seconds = if watch.baseline {
        let started = Instant::now();
        let untraced = run_without_hooks(image, &run.preload()?, &[], max_instructions)?;
        if untraced.exit_code != 0 {
            bail!(
                "{} {} (run without hooks)",
                image.path.display(),
                exit_text(untraced.exit_code, untraced.exit_reason.as_deref(), "")
            );
        }
        Some(started.elapsed().as_secs_f64())
    } else {
        None
    };
    let started = Instant::now();
    let mut shadow =
        ShadowMap::new(arena_at, watch.bytes).with_output_readers(watch.output_readers.to_vec());
    let mut stats = LayerStats::default();
    let mut trace = watch
        .plot
        .map(|(title, bytes)| ArenaTrace::new(title, arena_at, bytes));
    let mut storage_shadow = storage_region.map(|(at, len)| ShadowMap::new(at, len));
    // The picture places each access at its exact instruction.
    let access = crate::support::common::access_path(trace.is_some());
    let outcome = {
        let mut analyses: Vec<&mut (dyn memtrace_abi::Analysis + Send)> =
            vec![&mut shadow, &mut stats];
        if let Some(t) = trace.as_mut() {
            analyses.push(t);
        }
        if let Some(s) = storage_shadow.as_mut() {
            analyses.push(s);
        }
        run.trace(access, None, false, &mut analyses)?
    };
    let r = &outcome.result;
    if r.head_offset + r.head_bytes > watch.bytes {
        bail!(
            "TFLM's head ({} B at arena offset {}) outgrew the shadow map ({} B)",
            r.head_bytes,
            r.head_offset,
            watch.bytes
        );
    }
    Ok(ShadowRun {
        result: outcome.result,
        readers: shadow
            .layers
            .iter()
            .filter(|l| l.reads_output)
            .map(|l| l.name.clone())
            .collect(),
        clobbers: shadow.clobbers,
        unwritten_reads: shadow.unwritten_reads,
        layers: stats.layers,
        cached: false,
        trace,
        instructions: outcome.summary.instructions,
        storage: outcome.storage,
        storage_clobbers: storage_shadow.map(|s| s.clobbers).unwrap_or_default(),
        runs: outcome.summary.runs,
        seconds: started.elapsed().as_secs_f64(),
        untraced_seconds,
    })
}

/// The run of TFLM's own plan as the trace cache keeps it: what the rest of
/// `verify` reads of it.
#[derive(Serialize, serde::Deserialize)]
struct CachedReference {
    pub(super) result: CachedResult,
    pub(super) readers: Vec<String>,
    pub(super) overlaps: TracedOverlaps,
    pub(super) op_overlaps: Vec<TflmOpOverlap>,
    pub(super) instructions: u64,
    pub(super) seconds: f64,
}

/// [`TflmResult`] with the fields its report leaves out.
#[derive(Serialize, serde::Deserialize)]
struct CachedResult {
    #[serde(flatten)]
    pub(super) reported: TflmResult,
    pub(super) output_bytes: Vec<u8>,
    pub(super) tensors: Vec<memtrace_abi::runner::TensorPlace>,
    pub(super) scratch: Vec<memtrace_abi::runner::ScratchPlace>,
}

impl CachedReference {
    fn new(run: &ShadowRun, overlaps: &TracedOverlaps, report: &[TflmOpOverlap]) -> Self {
        let r = &run.result;
        CachedReference {
            result: CachedResult {
                reported: r.clone(),
                output_bytes: r.output_bytes.clone(),
                tensors: r.tensors.clone(),
                scratch: r.scratch.clone(),
            },
            readers: run.readers.clone(),
            overlaps: overlaps.clone(),
            op_overlaps: report.to_vec(),
            instructions: run.instructions,
            seconds: run.seconds,
        }
    }

    fn into_parts(self) -> (ShadowRun, TracedOverlaps, Vec<TflmOpOverlap>) {
        let r = self.result;
        let run = ShadowRun {
            result: TflmResult {
                output_bytes: r.output_bytes,
                tensors: r.tensors,
                scratch: r.scratch,
                ..r.reported
            },
            clobbers: Vec::new(),
            unwritten_reads: Vec::new(),
            readers: self.readers,
            layers: Vec::new(),
            cached: true,
            trace: None,
            instructions: self.instructions,
            storage: Vec::new(),
            storage_clobbers: Vec::new(),
            runs: 0,
            seconds: self.seconds,
            untraced_seconds: None,
        };
        (run, self.overlaps, self.op_overlaps)
    }
}

/// Bytes the shadow map watches for an arena of `planned` bytes: twice as
/// many and a MiB more, whole pages (TFLM's head may outgrow a prediction),
/// but never more than the runner's arena of `limit` bytes (TFLM's head
/// cannot outgrow it, and the map takes 8 bytes of host memory per byte).
fn watched_bytes(planned: u64, limit: u64) -> u64 {
    planned
        .saturating_mul(2)
        .saturating_add(1 << 20)
        .min(limit)
        .next_multiple_of(4096)
}

/// Refuses a plan under test whose arena exceeds the runner's arena of
/// `limit` bytes, naming the first tensor that ends beyond it (or the
/// plan's arena when every tensor fits).
pub(super) fn check_arena_fits(under_test: &UnderTest, model: &Model, limit: u64) -> Result<()> {
    if under_test.arena <= limit {
        return Ok(());
    }
    let names = model.tensor_names();
    for (t, &o) in under_test.offsets.iter().enumerate() {
        let Ok(o) = u64::try_from(o) else { continue };
        let end = o.saturating_add(model.tensors.get(t).map_or(0, |x| x.bytes));
        if end > limit {
            bail!(
                "{}: tensor `{}` at offset {o} ends at byte {end}, beyond the runner's arena of \
                 {limit} bytes",
                under_test.label(),
                names[t]
            );
        }
    }
    bail!(
        "{}: the plan's arena of {} bytes (\"arena_bytes\") is larger than the runner's arena of \
         {limit} bytes",
        under_test.label(),
        under_test.arena
    )
}

/// Step 1: TFLM's own plan, run with the shadow map and every operator's
/// O_s traced; from the trace cache when an earlier verify ran the same
/// runner, model and inputs.
pub(super) fn own_plan_run(
    req: &VerifyOptions,
    subject: &Subject,
) -> Result<(ShadowRun, TracedOverlaps, Vec<TflmOpOverlap>)> {
    // The shadow map's extent, before TFLM has said what its scratch is.
    let estimate = greedy_prediction(&subject.model().with_reference_scratch())?;
    let watched = watched_bytes(estimate, subject.arena_limit);
    // The run depends on nothing but the runner, the model, the inputs and
    // the shadow map's extent.
    let key = TraceCache::key(
        "tflm-verify-reference-v1",
        &[
            &subject.image.bytes,
            subject.bytes(),
            &subject.inputs,
            &watched.to_le_bytes(),
        ],
    );
    // Not with --plot (which draws the run) or --baseline (which times it).
    let cacheable = req.plot.is_none() && !req.baseline;
    if let Some(c) = cacheable
        .then(|| req.cache.get::<CachedReference>(&key))
        .flatten()
    {
        return Ok(c.into_parts());
    }
    let run = shadow_run(
        &subject.image,
        subject.bytes(),
        &subject.inputs,
        Watch {
            bytes: watched,
            output_readers: &[],
            plot: req.plot.as_ref().map(|_| {
                (
                    "reference (TFLM's own plan)".to_string(),
                    estimate.min(watched),
                )
            }),
            baseline: req.baseline,
            scratch: false,
            split: true,
            storage: false,
        },
        req.max_instructions,
    )?;
    // TFLM placed every buffer itself here: a read of bytes another
    // operator overwrote is a kernel writing where TFLM did not give it
    // memory, or memory it did not declare. Say what was seen.
    if let Some(first) = run.clobbers.first() {
        bail!(
            "in TFLM's own plan, {} read(s) find bytes another operator overwrote (first: {}): \
             a kernel writes outside the buffers TFLM gave it, so no plan can be proven \
             against this run; `memtrace run --strict` names its stray writes",
            run.clobbers.len(),
            first.describe()
        );
    }
    let overlaps = crate::runtime::traced_overlaps(&run.layers);
    let report = op_overlaps(subject.graph(), &run.layers);
    if cacheable {
        req.cache
            .put(&key, &CachedReference::new(&run, &overlaps, &report));
    }
    Ok((run, overlaps, report))
}

/// The O_s traced on another kernel build's runner (`--overlap-from`).
pub(super) fn foreign_overlaps(
    req: &VerifyOptions,
    subject: &Subject,
    kernels: Kernels,
) -> Result<(TracedOverlaps, Vec<TflmOpOverlap>)> {
    let (_, other) = model_runner(req.target, kernels, None, subject.graph())?;
    let layers = trace_model_operators(
        &other,
        subject.bytes(),
        &subject.inputs,
        req.max_instructions,
    )?
    .1;
    Ok((
        crate::runtime::traced_overlaps(&layers),
        op_overlaps(subject.graph(), &layers),
    ))
}

/// A plan run whose model took less than this many seconds to trace (the
/// reference run) is one timed run when the host oracle runs beside it.
///
/// The oracle's Python takes a core for 0.1–0.2 s. Beside it, the second
/// run of a split trace competes with Python instead of using a free core,
/// and the pair costs about twice the CPU of one run: one timed run (its
/// instructions with the clock, and its events) is the faster of the two
/// while it takes less than the untraced run and the oracle together,
/// which on the models measured (docs/user-guide.md, "memtrace bench")
/// holds for a trace of up to about 0.2 s and not for one of 0.35 s or
/// more. Longer runs outlast the oracle and keep both runs.
const ONE_RUN_BESIDE_THE_ORACLE: f64 = 0.2;

/// The instruction budget of the run under a plan: twice the reference
/// run's and 10⁸ more, within `--max-instructions`. The same kernels on
/// the same inputs retire the same instructions wherever the tensors lie,
/// so a plan that makes TFLM loop (a clobbered loop bound or WHILE
/// condition) is stopped at about the reference run's time, not the
/// budget's.
fn plan_budget(max_instructions: u64, reference: u64) -> u64 {
    reference
        .saturating_mul(2)
        .saturating_add(100_000_000)
        .min(max_instructions)
}

/// What the plan under test runs: the model itself, or TinySeg's
/// transformation of it.
pub(super) struct PlanSubject<'a> {
    /// TinySeg's transformed `.tflite` (without a plan); `None`: the
    /// model itself.
    pub(super) transformed: Option<&'a [u8]>,
    /// Its layers that read their own output (from the reference run).
    pub(super) readers: &'a [String],
    /// It has storage operators: watch and read back the storage region.
    pub(super) storage: bool,
}

/// TFLM's run of the plan under test (tensors at `offsets`, as
/// `OfflineMemoryAllocation`) with the shadow map, while the host oracle
/// runs the model on the other core.
pub(super) fn plan_run(
    req: &VerifyOptions,
    subject: &Subject,
    run: PlanSubject<'_>,
    reference: &ShadowRun,
    under_test: &UnderTest,
    offsets: &[i64],
) -> Result<(ShadowRun, Option<OracleComparison>)> {
    // The model's plan is written from its one decode.
    let offline = match run.transformed {
        Some(bytes) => tflite::emit_offline(bytes, offsets)?,
        None => subject.file.with_offline(offsets, None)?,
    };
    let graph = subject.graph();
    let extent = under_test.arena.max(reference.result.head_bytes);
    let python = req.oracle_python();
    let split = python.is_none() || reference.seconds >= ONE_RUN_BESIDE_THE_ORACLE;
    let (planned, oracle) = std::thread::scope(|scope| {
        let oracle = python.as_deref().map(|py| {
            scope.spawn(move || {
                oracle::compare(
                    py,
                    subject.bytes(),
                    graph.inputs.len(),
                    &output_layout(graph),
                    &subject.inputs,
                    &reference.result.output_bytes,
                )
            })
        });
        let planned = shadow_run(
            &subject.image,
            &offline.bytes,
            &subject.inputs,
            Watch {
                bytes: watched_bytes(extent, subject.arena_limit),
                output_readers: run.readers,
                plot: req.plot.as_ref().map(|_| {
                    (
                        format!("{} ({}) on TFLM", under_test.planner, under_test.overlap),
                        extent,
                    )
                }),
                baseline: req.baseline,
                scratch: true,
                split,
                storage: run.storage,
            },
            plan_budget(req.max_instructions, reference.instructions),
        );
        let oracle = oracle
            .map(|thread| {
                thread
                    .join()
                    .unwrap_or_else(|_| Err(failed!("the host oracle's thread panicked")))
            })
            .transpose();
        (planned, oracle)
    });
    Ok((planned?, oracle?))
}

/// One run's report.
pub(super) fn run_report(
    r: &ShadowRun,
    planner: String,
    overlap: String,
    planned: u64,
) -> TflmRunReport {
    TflmRunReport {
        planner,
        overlap,
        planned_bytes: planned,
        arena_used_bytes: r.result.arena_used_bytes,
        head_bytes: r.result.head_bytes,
        tail_bytes: r.result.tail_bytes,
        clobbers: r.clobbers.len(),
        instructions: r.instructions,
        runs: r.runs,
        seconds: r.seconds,
        untraced_seconds: r.untraced_seconds,
        cached: r.cached,
    }
}
