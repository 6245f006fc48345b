//! `memtrace verify`: a plan proven on real TensorFlow Lite
//! Micro in the emulator, with TFLM's own allocator and kernels.
//!
//! 1. The reference run: TFLM lays out the arena with its own greedy planner
//!    and runs the model; a shadow map watches every arena byte, and each
//!    operator's O_s is traced on the way (the `traced` source, from this
//!    kernel build or from `--overlap-from`'s).
//! 2. memtrace plans the model (with the scratch buffers TFLM gave each
//!    operator) and writes the plan into a copy of the model as
//!    `OfflineMemoryAllocation`.
//! 3. The plan run: TFLM honours the offline plan; the shadow map finds any
//!    read of a byte that no longer holds its tensor, and the outputs must be
//!    bit-exact with the reference run's — and with PyPI `tflite-micro` on
//!    the host when it is installed ([`crate::oracle`]).

use std::time::Instant;

use serde::Serialize;

use memtrace_abi::tflm::{op_index, Placement, TflmResult, LOAD_INPUT};
use memtrace_analyzer::layer_stats::LayerStats;
use memtrace_analyzer::plot::arena::ArenaTrace;
use memtrace_analyzer::report::LayerReport;
use memtrace_analyzer::shadow::{Clobber, ShadowMap};
use memtrace_analyzer::tinyseg::SpillReport;
use memtrace_analyzer::verify::{digest, mismatched_bytes};
use memtrace_model::graph::{read_graph, TfliteGraph};
use memtrace_model::planner::{self, Overlaps, Plan, PlanOptions, PlannerKind, TracedOverlaps};
use memtrace_model::{self as model, tflite, Model};
use memtrace_tracer::{Arch, ElfImage};

use super::VerifyOptions;
use crate::common::{exit_text, run_without_hooks};
use crate::deploy::{measure_arena_on, MeasuredPlan};
use crate::error::{Context, Result};
use crate::kernels::Kernels;
use crate::oracle::{self, OracleComparison};
use crate::plan_file::{EmbeddedOrigin, PlanProvenance};
use crate::spill::{storage_op_instructions, SpillRun};
use crate::tflm::{
    model_bytes, scratch_needs, target_runner, trace_layers, ModelRun, ScratchWatch,
};
use crate::trace_cache::TraceCache;
use crate::{bail, failed};

/// One run of TFLM in a verification.
#[derive(Debug, Clone, Serialize)]
pub struct TflmRunReport {
    /// Who placed the tensors: `tflm` (TFLM's own greedy planner) or the
    /// memtrace planner whose plan TFLM honoured.
    pub planner: String,
    /// O_s source of the plan (`none` for TFLM's own).
    pub overlap: String,
    /// The arena memtrace's plan needs (for TFLM's own plan: memtrace's
    /// `tflm-greedy` prediction of it).
    pub planned_bytes: u64,
    /// `MicroInterpreter::arena_used_bytes()`.
    pub arena_used_bytes: u64,
    /// The head TFLM used: planned tensors and scratch buffers.
    pub head_bytes: u64,
    /// The tail TFLM used: persistent buffers.
    pub tail_bytes: u64,
    /// Clobbered reads found in this run.
    pub clobbers: usize,
    /// Guest instructions of the whole run.
    pub instructions: u64,
    /// Emulator runs its trace took: 2 when a second run counted the
    /// instructions on the other core, 1 for one timed run, 0 when it came
    /// from the trace cache.
    pub runs: u32,
    /// Wall-clock seconds of the traced run.
    pub seconds: f64,
    /// Wall-clock seconds of the same run in Unicorn without hooks
    /// (`--baseline`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub untraced_seconds: Option<f64>,
    /// Taken from the trace cache: `seconds` is the time the run took when
    /// it was traced.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub cached: bool,
}

/// An operator's O_s as traced on TFLM.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct TflmOpOverlap {
    /// Operator index in the model.
    pub index: usize,
    /// TFLM's operator name.
    pub op: String,
    /// Its first output tensor.
    pub output: String,
    /// The input whose O_s was traced (the first arena input).
    pub input: Option<String>,
    /// Monotone O_s in bytes (what the planner credits).
    pub monotone_bytes: Option<u64>,
    /// Exact O_s in bytes.
    pub exact_bytes: Option<u64>,
}

/// Where a tensor was planned and where TFLM put it in the plan run.
#[derive(Debug, Clone, Serialize)]
pub struct TensorPlacement {
    /// Tensor name.
    pub name: String,
    /// Its bytes.
    pub bytes: u64,
    /// Offset in memtrace's plan.
    pub planned_offset: Option<u64>,
    /// Offset from the arena head TFLM used in the plan run.
    pub tflm_offset: Option<u64>,
    /// Offset in TFLM's own plan (the reference run).
    pub reference_offset: Option<u64>,
}

/// What `verify` found.
#[derive(Debug, Clone, Serialize)]
pub struct TflmVerifyReport {
    /// The model.
    pub model: String,
    /// Always `tflm`: the runtime the plan was proven on.
    pub runtime: &'static str,
    /// Runner architecture.
    pub target: Arch,
    /// TFLM's kernels in both runs.
    pub kernels: Kernels,
    /// Kernels whose traces gave the plan's traced O_s.
    pub overlap_kernels: Kernels,
    /// Seed of the generated input (and of a zoo model's weights).
    pub seed: u64,
    /// The `--input` file the graph inputs came from instead of the seed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
    /// The TFLM runner guest that ran both plans.
    pub runner: String,
    /// TFLM's own plan.
    pub reference: TflmRunReport,
    /// memtrace's plan, run by TFLM as `OfflineMemoryAllocation`.
    pub plan: TflmRunReport,
    /// Clobbered reads of the plan run.
    pub clobbers: Vec<Clobber>,
    /// The plan run's outputs equal the reference run's.
    pub bit_exact: bool,
    /// Output bytes that differ.
    pub mismatched_bytes: u64,
    /// Bytes of all graph outputs.
    pub output_bytes: u64,
    /// Digest of the reference run's outputs.
    pub output_digest: String,
    /// The reference run's outputs, hex.
    pub output_hex: String,
    /// The same model and input in PyPI `tflite-micro` on the host.
    pub oracle: Option<OracleComparison>,
    /// The oracle was not asked for (`--no-oracle`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub oracle_off: bool,
    /// Every operator's traced O_s.
    pub traced_overlaps: Vec<TflmOpOverlap>,
    /// Every arena tensor: planned offset and where TFLM put it.
    pub tensors: Vec<TensorPlacement>,
    /// Tensors the model's own `OfflineMemoryAllocation` placed, when it
    /// carried one: the reference run and the host oracle ran the model
    /// without it (TFLM's own plan).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedded_plan_tensors: Option<usize>,
    /// Whose that embedded plan is: memtrace's (with its provenance) or of
    /// unknown origin.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedded_plan_origin: Option<EmbeddedOrigin>,
    /// Which plan of a `plan --format json` document `--plan` took, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan_taken: Option<String>,
    /// Warnings (a plan file made for other kernels, `--allow-foreign-plan`).
    pub warnings: Vec<String>,
    /// Wall-clock seconds of the whole verification.
    pub seconds: f64,
    /// The arena a firmware must allocate for the plan under test, measured
    /// on this runner ([`crate::deploy`]).
    pub arena_to_allocate: MeasuredPlan,
    /// TinySeg's steps and what the run says of them (`--planner tinyseg`):
    /// the plan run is of the transformed model, whose storage operators
    /// are the runner's custom operators.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tinyseg: Option<SpillReport>,
    /// The model as TFLM ran it under the plan under test (with the plan as
    /// `OfflineMemoryAllocation`): what `--emit-offline` writes once proven.
    #[serde(skip)]
    pub plan_model: Vec<u8>,
}

impl TflmVerifyReport {
    /// Clean (no clobber), bit-exact, and equal to the host oracle if it ran.
    pub fn ok(&self) -> bool {
        self.clobbers.is_empty()
            && self
                .tinyseg
                .as_ref()
                .is_none_or(|t| t.storage_clobbers.is_empty())
            && self.bit_exact
            && self.oracle.as_ref().is_none_or(|o| o.agrees())
    }

    /// Where the inputs came from: the `--input` file, or the seed (a zoo
    /// model's weights come from the seed either way).
    fn data_source(&self) -> String {
        match (&self.input, self.model.starts_with("zoo:")) {
            (Some(file), true) => format!("weights from seed {}, input {file}", self.seed),
            (Some(file), false) => format!("input {file}"),
            (None, _) => format!("seed {}", self.seed),
        }
    }

    /// The human-readable report.
    pub fn to_text(&self) -> String {
        let mut s = format!(
            "{} on real TFLM ({} kernels, {}), {}\nrunner: {}\n",
            self.model,
            self.kernels,
            self.target,
            self.data_source(),
            self.runner
        );
        s += &format!(
            "{:<28} {:>12} {:>12} {:>10} {:>10} {:>9} {:>14}\n",
            "run", "planned B", "TFLM used B", "head B", "tail B", "clobbers", "instructions"
        );
        for r in [&self.reference, &self.plan] {
            s += &format!(
                "{:<28} {:>12} {:>12} {:>10} {:>10} {:>9} {:>14}\n",
                format!("{} ({})", r.planner, r.overlap),
                r.planned_bytes,
                r.arena_used_bytes,
                r.head_bytes,
                r.tail_bytes,
                r.clobbers,
                r.instructions
            );
        }
        if let Some(n) = self.embedded_plan_tensors {
            s += &format!(
                "model: carries an embedded offline plan (OfflineMemoryAllocation, {n} tensors \
                 placed){}; the reference run and the host oracle ran it without, with TFLM's own \
                 plan\n",
                self.embedded_plan_origin
                    .as_ref()
                    .map(|o| format!(", {}", o.describe()))
                    .unwrap_or_default()
            );
        }
        if let Some(taken) = &self.plan_taken {
            s += &format!("plan file: {taken}\n");
        }
        if self.reference.cached {
            s += "reference: TFLM's own plan from the trace cache (--no-cache runs it again)\n";
        }
        for r in [&self.reference, &self.plan] {
            if let Some(u) = r.untraced_seconds {
                s += &format!(
                    "time    {}: traced {:.2} s, untraced {:.3} s, slowdown {:.1}x\n",
                    r.planner,
                    r.seconds,
                    u,
                    r.seconds / u.max(1e-9)
                );
            }
        }
        for c in &self.clobbers {
            s += &format!(
                "CLOBBER: operator `{}` read `{}` at byte {} ({} B), overwritten by {}\n",
                c.op,
                c.tensor,
                c.offset,
                c.bytes,
                c.overwritten_by
                    .as_ref()
                    .map(|w| format!("`{}` of operator `{}`", w.tensor, w.op))
                    .unwrap_or_else(|| "nothing (never written)".into())
            );
        }
        if let (Some(c), true) = (self.clobbers.first(), self.plan.planner == EMBEDDED) {
            s += &format!(
                "culprit: the model's embedded offline plan (OfflineMemoryAllocation{}) is \
                 unsafe on the {} kernels: operator `{}` reads `{}` after its bytes were \
                 overwritten\n",
                self.embedded_plan_origin
                    .as_ref()
                    .map(|o| format!(", {}", o.describe()))
                    .unwrap_or_default(),
                self.kernels,
                c.op,
                c.tensor
            );
        }
        s += &format!(
            "outputs: {} B, {} (plan vs TFLM's own plan: {} B differ)\n",
            self.output_bytes,
            if self.bit_exact {
                "bit-exact"
            } else {
                "DIFFERENT"
            },
            self.mismatched_bytes
        );
        if let Some(t) = &self.tinyseg {
            s += &t.to_text();
        }
        match &self.oracle {
            Some(o) => s += &o.to_text(),
            None if self.oracle_off => s += "host oracle: not run (--no-oracle)\n",
            None => {
                s +=
                    "host oracle: not run (no Python with tflite-micro; set MEMTRACE_TFLM_PYTHON)\n"
            }
        }
        s += &self.arena_to_allocate.to_text();
        s += &format!("result: {}\n", if self.ok() { "OK" } else { "FAILED" });
        s
    }
}

/// A traced TFLM run with the shadow map and per-operator O_s.
struct ShadowRun {
    result: memtrace_abi::tflm::TflmResult,
    /// The shadow map's clobbered reads.
    clobbers: Vec<Clobber>,
    /// Layers that read the graph outputs.
    readers: Vec<String>,
    layers: Vec<LayerReport>,
    /// Taken from the trace cache (then `layers` is empty and `trace` none).
    cached: bool,
    /// The arena-wide access picture (`--plot`).
    trace: Option<ArenaTrace>,
    instructions: u64,
    /// The storage region after the run (read back when watched).
    storage: Vec<u8>,
    /// Reads of storage bytes that did not hold the tensor fetched.
    storage_clobbers: Vec<Clobber>,
    /// Emulator runs of the trace (`RunSummary::runs`; 0 from the cache).
    runs: u32,
    seconds: f64,
    untraced_seconds: Option<f64>,
}

/// What a shadow run watches besides the shadow map.
struct Watch<'a> {
    /// Arena bytes under the shadow map (TFLM's head starts at the arena's
    /// start).
    bytes: u64,
    /// Layers that read the graph outputs.
    output_readers: &'a [String],
    /// Title and width in bytes of the arena picture (`--plot`).
    plot: Option<(String, u64)>,
    /// Also time the run without hooks (`--baseline`).
    baseline: bool,
    /// Watch where the scratch buffers write: the plan under test may
    /// place them over a live tensor; TFLM's own plan, traced for O_s, does
    /// not.
    scratch: bool,
    /// Trace with two runs at once ([`ModelRun::split`]).
    split: bool,
    /// Watch the runner's storage region with a shadow map of its own and
    /// read it back (a model with TinySeg's storage operators).
    storage: bool,
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
        .symbol(memtrace_abi::tflm::symbols::ARENA)
        .ok_or_else(|| failed!("{} has no arena", image.path.display()))?
        .address;
    // The picture shows every scratch access; the shadow map needs only
    // where scratch may write.
    let scratch = match (watch.scratch, &watch.plot) {
        (false, _) => ScratchWatch::Untraced,
        (true, Some(_)) => ScratchWatch::Traced,
        (true, None) => ScratchWatch::WrittenWhole,
    };
    let run = ModelRun {
        scratch,
        split: watch.split,
        storage: watch.storage,
        ..ModelRun::whole(image, model, inputs, max_instructions)
    };
    let storage_region = watch
        .storage
        .then(|| crate::tflm::runner_storage(image))
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
    let access = crate::common::access_path(trace.is_some());
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
    result: CachedResult,
    readers: Vec<String>,
    overlaps: TracedOverlaps,
    op_overlaps: Vec<TflmOpOverlap>,
    instructions: u64,
    seconds: f64,
}

/// [`TflmResult`] with the fields its report leaves out.
#[derive(Serialize, serde::Deserialize)]
struct CachedResult {
    #[serde(flatten)]
    reported: TflmResult,
    output_bytes: Vec<u8>,
    tensors: Vec<memtrace_abi::tflm::TensorPlace>,
    scratch: Vec<memtrace_abi::tflm::ScratchPlace>,
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

/// memtrace's `tflm-greedy` prediction of TFLM's head for `model`.
fn greedy_prediction(model: &Model) -> Result<u64> {
    let plan = Plan::tflm_greedy(model)?;
    Ok(plan.arena_bytes(model))
}

/// The graph inputs' bytes: `--input` (all inputs, concatenated) or seeded.
fn inputs_of(req: &VerifyOptions, graph: &TfliteGraph) -> Result<Vec<u8>> {
    crate::tflm::run_inputs(req.input.as_deref(), req.seed, graph)
}

/// Verifies a plan on real TFLM (see the module docs).
pub fn verify_tflm(req: &VerifyOptions) -> Result<TflmVerifyReport> {
    let started = Instant::now();
    let subject = Subject::load(req)?;
    let (mut reference, own_overlaps, own_report) = own_plan_run(req, &subject)?;
    let overlap_kernels = req.overlap_kernels.unwrap_or(req.kernels);
    let (source_overlaps, traced_report) = if overlap_kernels == req.kernels {
        (own_overlaps, own_report)
    } else {
        foreign_overlaps(req, &subject, overlap_kernels)?
    };

    // 2. memtrace's plan, with TFLM's scratch buffers as tensors.
    let model = &subject.model;
    let planned_model = model.with_scratch(&scratch_needs(&reference.result, model.ops.len()));
    // memtrace's tflm-greedy prediction of TFLM's head, with TFLM's scratch.
    let predicted = greedy_prediction(&planned_model)?;
    let mut warnings: Vec<String> = subject
        .origin
        .as_ref()
        .and_then(|o| {
            o.foreign_kernels_warning(
                req.kernels,
                &format!(
                    "This verify checks it on {k}; to deploy on {k}, re-plan for them (`memtrace \
                     plan MODEL --kernels {k} --emit-offline OUT`)",
                    k = req.kernels.name()
                ),
            )
        })
        .into_iter()
        .collect();
    let mut plan_taken = None;
    // TinySeg plans a transformed model, which TFLM runs instead of the
    // model under the plan.
    let tinyseg = match (&req.plan, req.planner) {
        (None, Some(PlannerKind::Tinyseg)) => Some(super::tflm_tinyseg::plan(
            req,
            &subject.bytes,
            &scratch_needs(&reference.result, model.ops.len()),
            &source_overlaps,
        )?),
        _ => None,
    };
    let under_test = match (&req.plan, &subject.embedded) {
        _ if tinyseg.is_some() => tinyseg_under_test(req, tinyseg.as_ref())?,
        (Some(path), _) => {
            let reference_offsets = planned_reference_offsets(&planned_model, &reference.result);
            let graph_tensors = subject.graph.tensors.len();
            let (under_test, notes, taken) =
                plan_from_file(req, path, &planned_model, &reference_offsets, graph_tensors)?;
            warnings.extend(notes);
            plan_taken = taken;
            under_test
        }
        (None, Some(embedded)) if req.embedded_plan => embedded_plan(&planned_model, embedded)?,
        _ => plan_from_planner(req, &planned_model, &source_overlaps)?,
    };
    let mut offsets = under_test.offsets.clone();
    // What TFLM runs under the plan: the model, or TinySeg's transformation.
    let (run_bytes, run_graph) = match &tinyseg {
        Some(t) => {
            warnings.extend(t.warnings.iter().cloned());
            warnings.extend(crate::spill::target_missed(
                req.spill.target_bytes,
                t.optimized.steps.last().map(|s| s.peak_bytes),
            ));
            if under_test.arena > subject.arena_limit {
                bail!(
                    "{}: the plan's arena of {} bytes is larger than the runner's arena of {} bytes",
                    under_test.label(),
                    under_test.arena,
                    subject.arena_limit
                );
            }
            (&t.bytes, &t.graph)
        }
        None => {
            check_arena_fits(&under_test, &planned_model, subject.arena_limit)?;
            offsets.truncate(subject.graph.tensors.len());
            (&subject.bytes, &subject.graph)
        }
    };

    // 3. TFLM runs memtrace's plan, beside the host oracle.
    let readers = match &tinyseg {
        Some(t) => super::tflm_tinyseg::readers_after(&reference.readers, &t.optimized),
        None => reference.readers.clone(),
    };
    let (mut planned, oracle) = plan_run(
        req,
        &subject,
        PlanSubject {
            bytes: run_bytes,
            readers: &readers,
            storage: tinyseg.is_some(),
        },
        &reference,
        &under_test,
        &offsets,
    )?;
    let reference_head = reference.result.head_bytes;
    if let (Some(path), Some(a), Some(b)) =
        (&req.plot, reference.trace.as_mut(), planned.trace.as_mut())
    {
        // Each panel states its own plan's sizes: both are drawn on the
        // larger extent.
        a.title = format!("TFLM's own plan: head {reference_head} B");
        b.title = format!(
            "{} ({}) on TFLM: {} B planned, head {} B",
            under_test.planner, under_test.overlap, under_test.arena, planned.result.head_bytes
        );
        memtrace_analyzer::plot::arena::render(&[a, b], path)?;
    }
    let a = &reference.result.output_bytes;
    let b = &planned.result.output_bytes;
    let mismatched = mismatched_bytes(a, b);
    let planned_bytes = under_test.arena;
    let arena_to_allocate = deploy_figures(req, &subject, run_bytes, &under_test, &offsets)?;
    let tinyseg_report = tinyseg.as_ref().map(|t| {
        SpillRun {
            optimized: &t.optimized,
            options: req.spill,
            storage: &planned.storage,
            storage_clobbers: planned.storage_clobbers.clone(),
            storage_op_instructions: storage_op_instructions(
                planned
                    .layers
                    .iter()
                    .map(|l| (l.op.as_str(), l.instructions)),
            ),
            instructions: (planned.instructions, reference.instructions),
            planning_seconds: t.seconds,
        }
        .report()
    });
    Ok(TflmVerifyReport {
        model: req.model.clone(),
        runtime: "tflm",
        target: req.target,
        kernels: req.kernels,
        overlap_kernels,
        seed: req.seed,
        input: req.input.as_ref().map(|p| p.display().to_string()),
        runner: subject.image.path.display().to_string(),
        reference: run_report(&reference, "tflm".into(), "none".into(), predicted),
        plan: run_report(
            &planned,
            under_test.planner,
            under_test.overlap,
            planned_bytes,
        ),
        clobbers: planned.clobbers.clone(),
        bit_exact: mismatched == 0,
        mismatched_bytes: mismatched,
        output_bytes: a.len() as u64,
        output_digest: digest(a),
        output_hex: a.iter().map(|x| format!("{x:02x}")).collect(),
        oracle,
        oracle_off: !req.oracle,
        traced_overlaps: traced_report,
        tensors: tensor_placements(
            run_graph,
            &offsets,
            tinyseg.as_ref().map(|t| t.original.as_slice()),
            &reference,
            &planned,
        ),
        embedded_plan_tensors: subject
            .embedded
            .as_ref()
            .map(|o| o.iter().filter(|&&v| v >= 0).count()),
        embedded_plan_origin: subject.origin.clone(),
        plan_taken,
        warnings,
        seconds: started.elapsed().as_secs_f64(),
        tinyseg: tinyseg_report,
        plan_model: arena_to_allocate.1,
        arena_to_allocate: arena_to_allocate.0,
    })
}

/// The arena a firmware must allocate for the plan under test (TFLM's
/// refusal of the model at any arena is a note, not an error: the proof
/// above already says what failed), and the model with that plan.
fn deploy_figures(
    req: &VerifyOptions,
    subject: &Subject,
    run_bytes: &[u8],
    under_test: &UnderTest,
    offsets: &[i64],
) -> Result<(MeasuredPlan, Vec<u8>)> {
    // The plan's provenance goes into the model, as `plan --emit-offline`
    // writes it: `run` and `verify` of the written model then say whose it is.
    let note = PlanProvenance {
        planner: Some(under_test.planner.clone()),
        ..PlanProvenance::new(&req.model, req.kernels, req.target, "tflm", req.overlap)?
    }
    .to_metadata()?;
    let model = tflite::emit_offline_noted(run_bytes, offsets, Some(&note))?.bytes;
    let (arena, not_measured) = match measure_arena_on(
        &subject.image,
        &model,
        &subject.inputs,
        req.kernels,
        &req.cache,
    ) {
        Ok(a) => (Some(a), None),
        Err(e) => (None, Some(e.to_string())),
    };
    let measured = MeasuredPlan {
        planner: under_test.planner.clone(),
        overlap: under_test.overlap.clone(),
        planned_bytes: under_test.arena,
        arena,
        not_measured,
    };
    Ok((measured, model))
}

/// What a TFLM verify runs: the model's bytes, graph and memtrace model,
/// the inputs, and the runner.
struct Subject {
    /// The model without any `OfflineMemoryAllocation` it carried: what
    /// TFLM's own plan, the host oracle and every plan under test start from.
    bytes: Vec<u8>,
    /// The offsets of the offline plan the model carried, if any.
    embedded: Option<Vec<i64>>,
    /// Whose that plan is.
    origin: Option<EmbeddedOrigin>,
    graph: TfliteGraph,
    model: Model,
    inputs: Vec<u8>,
    image: ElfImage,
    /// Bytes of the runner's arena: the bound of every size a plan or the
    /// model asks for.
    arena_limit: u64,
}

impl Subject {
    fn load(req: &VerifyOptions) -> Result<Subject> {
        if let Some(p) = &req.plot {
            crate::common::check_output(p, &[std::path::Path::new(&req.model)])?;
        }
        let given = model_bytes(&req.model, req.seed)?;
        let graph = read_graph(&given).with_context(|| format!("reading {}", req.model))?;
        // TFLM's own plan is the reference: an offline plan the model
        // carries is taken out of every run but the one that verifies it.
        let embedded =
            tflite::read_offline(&given).with_context(|| format!("reading {}", req.model))?;
        let origin = embedded.as_ref().map(|_| EmbeddedOrigin::of(&given));
        let bytes = match embedded {
            Some(_) => tflite::strip_offline(&given)
                .with_context(|| format!("reading {}", req.model))?
                .unwrap_or(given),
            None => given,
        };
        if graph.outputs.is_empty() {
            bail!(
                "{} has no graph outputs: there is nothing to compare",
                req.model
            );
        }
        let name = req
            .model
            .rsplit('/')
            .next()
            .unwrap_or(&req.model)
            .to_string();
        let model = match req.model.strip_prefix("zoo:") {
            Some(_) => model::source::load(&req.model)?,
            None => tflite::import_for_tflm(&name, &bytes)
                .with_context(|| format!("planning {}", req.model))?,
        };
        let (path, image) =
            target_runner(req.target, req.kernels, req.runner.as_deref(), "--runner")?;
        let arena_limit = crate::tflm::runner_arena_bytes(&image)?;
        check_tensors_fit(&model, arena_limit, &path)?;
        let inputs = inputs_of(req, &graph)?;
        Ok(Subject {
            bytes,
            embedded,
            origin,
            graph,
            model,
            inputs,
            image,
            arena_limit,
        })
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

/// Refuses a model with a tensor TFLM could never hold in the runner's
/// arena of `limit` bytes (checked before any size is taken from the
/// model): constants live in the model, everything else in the arena.
fn check_tensors_fit(model: &Model, limit: u64, runner: &std::path::Path) -> Result<()> {
    let names = model.tensor_names();
    for (t, tensor) in model.tensors.iter().enumerate() {
        if !tensor.is_constant && tensor.bytes > limit {
            bail!(
                "tensor `{}` needs {} bytes, more than the runner's arena of {limit} bytes ({})",
                names[t],
                tensor.bytes,
                runner.display()
            );
        }
    }
    Ok(())
}

/// Refuses a plan under test whose arena exceeds the runner's arena of
/// `limit` bytes, naming the first tensor that ends beyond it (or the
/// plan's arena when every tensor fits).
fn check_arena_fits(under_test: &UnderTest, model: &Model, limit: u64) -> Result<()> {
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
fn own_plan_run(
    req: &VerifyOptions,
    subject: &Subject,
) -> Result<(ShadowRun, TracedOverlaps, Vec<TflmOpOverlap>)> {
    // The shadow map's extent, before TFLM has said what its scratch is.
    let estimate = greedy_prediction(&subject.model.with_reference_scratch())?;
    let watched = watched_bytes(estimate, subject.arena_limit);
    // The run depends on nothing but the runner, the model, the inputs and
    // the shadow map's extent.
    let key = TraceCache::key(
        "tflm-verify-reference-v1",
        &[
            &subject.image.bytes,
            &subject.bytes,
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
        &subject.bytes,
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
    if !run.clobbers.is_empty() {
        bail!(
            "TFLM's own plan clobbers ({} reads): the shadow map or the runner is wrong",
            run.clobbers.len()
        );
    }
    let overlaps = crate::tflm::traced_overlaps(&run.layers);
    let report = op_overlaps(&subject.graph, &run.layers);
    if cacheable {
        req.cache
            .put(&key, &CachedReference::new(&run, &overlaps, &report));
    }
    Ok((run, overlaps, report))
}

/// The O_s traced on another kernel build's runner (`--overlap-from`).
fn foreign_overlaps(
    req: &VerifyOptions,
    subject: &Subject,
    kernels: Kernels,
) -> Result<(TracedOverlaps, Vec<TflmOpOverlap>)> {
    let (_, other) = target_runner(req.target, kernels, None, "--runner")?;
    let layers = trace_layers(
        &other,
        &subject.bytes,
        &subject.inputs,
        req.max_instructions,
    )?
    .1;
    Ok((
        crate::tflm::traced_overlaps(&layers),
        op_overlaps(&subject.graph, &layers),
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
struct PlanSubject<'a> {
    /// The `.tflite` (without a plan).
    bytes: &'a [u8],
    /// Its layers that read their own output (from the reference run).
    readers: &'a [String],
    /// It has storage operators: watch and read back the storage region.
    storage: bool,
}

/// TFLM's run of the plan under test (tensors at `offsets`, as
/// `OfflineMemoryAllocation`) with the shadow map, while the host oracle
/// runs the model on the other core.
fn plan_run(
    req: &VerifyOptions,
    subject: &Subject,
    run: PlanSubject<'_>,
    reference: &ShadowRun,
    under_test: &UnderTest,
    offsets: &[i64],
) -> Result<(ShadowRun, Option<OracleComparison>)> {
    let offline = tflite::emit_offline(run.bytes, offsets)?;
    let graph = &subject.graph;
    let extent = under_test.arena.max(reference.result.head_bytes);
    let python = req.oracle_python();
    let split = python.is_none() || reference.seconds >= ONE_RUN_BESIDE_THE_ORACLE;
    let (planned, oracle) = std::thread::scope(|scope| {
        let oracle = python.as_deref().map(|py| {
            scope.spawn(move || {
                oracle::compare(
                    py,
                    &subject.bytes,
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

/// The graph outputs as the oracle compares them: name, element type,
/// bytes.
fn output_layout(graph: &TfliteGraph) -> Vec<oracle::OutputLayout> {
    graph
        .outputs
        .iter()
        .map(|&t| oracle::OutputLayout {
            name: graph.tensor_name(t),
            dtype: graph.tensors[t].dtype,
            bytes: graph.tensors[t].bytes.unwrap_or(0),
        })
        .collect()
}

/// One run's report.
fn run_report(r: &ShadowRun, planner: String, overlap: String, planned: u64) -> TflmRunReport {
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

/// Every tensor memtrace planned or TFLM placed: its planned offset and
/// where TFLM put it in both runs.
///
/// `original` maps a tensor of `graph` to the reference run's model when
/// the plan run ran another one (TinySeg's transformation).
fn tensor_placements(
    graph: &TfliteGraph,
    offsets: &[i64],
    original: Option<&[Option<usize>]>,
    reference: &ShadowRun,
    planned: &ShadowRun,
) -> Vec<TensorPlacement> {
    let in_reference = |t: usize| match original {
        Some(map) => map
            .get(t)
            .copied()
            .flatten()
            .and_then(|r| head_offset(&reference.result, r)),
        None => head_offset(&reference.result, t),
    };
    (0..graph.tensors.len())
        .filter(|&t| offsets[t] >= 0 || in_reference(t).is_some())
        .map(|t| TensorPlacement {
            name: graph.tensor_name(t),
            bytes: graph.tensors[t].bytes.unwrap_or(0),
            planned_offset: u64::try_from(offsets[t]).ok(),
            tflm_offset: head_offset(&planned.result, t),
            reference_offset: in_reference(t),
        })
        .collect()
}

/// Where TFLM put tensor `t`, from the start of its head (`None` outside
/// the arena).
fn head_offset(r: &TflmResult, t: usize) -> Option<u64> {
    match r.tensors.get(t).map(|p| p.placement) {
        Some(Placement::Arena { offset }) => offset.checked_sub(r.head_offset),
        _ => None,
    }
}

/// The placement under test: offline offsets of every tensor (-1 for TFLM
/// to place), the arena it needs, and who made it.
struct UnderTest {
    offsets: Vec<i64>,
    arena: u64,
    planner: String,
    overlap: String,
}

impl UnderTest {
    /// What an error calls this plan: the file it came from, or its planner.
    fn label(&self) -> String {
        match self.planner.as_str() {
            "file" => self.overlap.clone(),
            EMBEDDED => "the model's embedded offline plan".into(),
            p => format!("the {p} plan"),
        }
    }
}

/// `--plan FILE`: the listed tensors at their offsets, every other arena
/// tensor where TFLM's own plan put it; with the warnings to give: the plan
/// was made for other kernels (`--allow-foreign-plan`), or it moves a
/// scratch tensor (index `graph_tensors` on), which TFLM places itself.
fn plan_from_file(
    req: &VerifyOptions,
    path: &std::path::Path,
    model: &Model,
    reference: &[Option<u64>],
    graph_tensors: usize,
) -> Result<(UnderTest, Vec<String>, Option<String>)> {
    let read = super::read_plan_file(path, model, reference, req)?;
    let (offsets, arena) = (read.offsets, read.arena);
    let mut warnings = read.warnings;
    let names = model.tensor_names();
    // A `plan` document's scratch offsets are memtrace's model of TFLM's,
    // not a user's choice: TFLM placing them itself is no news.
    let scratch_from = match read.taken {
        Some(_) => offsets.len(),
        None => graph_tensors,
    };
    for t in scratch_from..offsets.len().min(reference.len()) {
        if let (Some(o), Some(r)) = (offsets[t], reference[t]) {
            if o != r {
                warnings.push(format!(
                    "{}: scratch tensor `{}` at offset {o} is not given to TFLM, which places \
                     scratch buffers itself (at {r} in its own plan); the shadow map checks \
                     where it put it",
                    path.display(),
                    names[t]
                ));
            }
        }
    }
    let under_test = UnderTest {
        offsets: offsets.iter().map(|o| o.map_or(-1, |v| v as i64)).collect(),
        arena,
        planner: "file".into(),
        // Names the file, and which plan of a `plan` document was taken.
        overlap: match &read.taken {
            Some((taken, _)) => format!("{}: {taken}", path.display()),
            None => path.display().to_string(),
        },
    };
    let taken = read
        .taken
        .map(|(taken, why)| format!("{}: took {taken}, {why}", path.display()));
    Ok((under_test, warnings, taken))
}

/// Where TFLM's own plan put each tensor memtrace plans (`None` for the
/// others): the offsets a plan file's unlisted tensors keep. A variable
/// tensor lives in TFLM's persistent tail, not its head; giving it its
/// reference address as a head offset would ask TFLM for a head reaching
/// into the tail, so it stays TFLM's to place.
fn planned_reference_offsets(model: &Model, reference: &TflmResult) -> Vec<Option<u64>> {
    let mut offsets: Vec<Option<u64>> = (0..model.tensors.len())
        .map(|t| {
            let tensor = &model.tensors[t];
            let planned = !tensor.is_constant && !tensor.is_variable && !tensor.in_storage;
            head_offset(reference, t)
                .filter(|&o| planned && o.saturating_add(tensor.bytes) <= reference.head_bytes)
        })
        .collect();
    // A scratch tensor stands for its operator's scratch buffers: where
    // TFLM put the first of them.
    for (op, o) in model.ops.iter().enumerate() {
        let Some(t) = o.scratch else { continue };
        offsets[t] = reference
            .scratch
            .iter()
            .filter(|s| s.op as usize == op)
            .filter_map(|s| s.offset.checked_sub(reference.head_offset))
            .min();
    }
    offsets
}

/// TinySeg's plan of its transformed model, as the plan under test.
fn tinyseg_under_test(
    req: &VerifyOptions,
    tinyseg: Option<&super::tflm_tinyseg::TinysegPlan>,
) -> Result<UnderTest> {
    let t = tinyseg.ok_or_else(|| failed!("no TinySeg plan"))?;
    Ok(UnderTest {
        offsets: t.offsets.clone(),
        arena: t.arena,
        planner: format!("tinyseg+{}", req.spill.base.name()),
        overlap: t.optimized.plan.overlap.clone(),
    })
}

/// Planner name of the offline plan a model carried, as the report shows it.
const EMBEDDED: &str = "embedded";

/// The offline plan the model carried (its `OfflineMemoryAllocation`), as
/// the plan under test: `offsets` has one entry per tensor of the model's
/// graph (the scratch tensors after them stay TFLM's to place).
fn embedded_plan(model: &Model, offsets: &[i64]) -> Result<UnderTest> {
    if offsets.len() > model.tensors.len() {
        bail!(
            "the model's OfflineMemoryAllocation has {} offsets, its graph {} tensors",
            offsets.len(),
            model.tensors.len()
        );
    }
    let arena = offsets
        .iter()
        .zip(&model.tensors)
        .filter_map(|(&o, t)| u64::try_from(o).ok().map(|o| o.saturating_add(t.bytes)))
        .max()
        .unwrap_or(0);
    Ok(UnderTest {
        offsets: offsets.to_vec(),
        arena,
        planner: EMBEDDED.into(),
        overlap: "OfflineMemoryAllocation".into(),
    })
}

/// The planner's placement, in the model's operator order (TFLM's).
fn plan_from_planner(
    req: &VerifyOptions,
    model: &Model,
    traced: &memtrace_model::planner::TracedOverlaps,
) -> Result<UnderTest> {
    let overlaps = match req.overlap.method() {
        None => Overlaps::compute(model, traced),
        Some(method) => Overlaps::compute(model, &method),
    };
    let options = PlanOptions {
        model_order_only: true,
        ..PlanOptions::default()
    };
    let plan = match req.planner {
        Some(kind) => planner::run(model, kind, &overlaps, &options)?,
        None => planner::report::best(model, &overlaps, &options)?
            .ok_or_else(|| failed!("no planner applies to this model"))?,
    };
    let name = plan.planner.name();
    if plan.tensors.is_empty() {
        bail!(
            "planner {name} does not apply to this model: {}",
            plan.note.clone().unwrap_or_default()
        );
    }
    if plan.order.iter().enumerate().any(|(i, &op)| i != op) {
        bail!(
            "planner {name} reorders operators; TFLM runs them in the model's order, so its plan \
             cannot be given to TFLM"
        );
    }
    Ok(UnderTest {
        offsets: plan.offline_offsets(model),
        arena: plan.arena_bytes(model),
        planner: name.into(),
        overlap: plan.overlap.clone(),
    })
}

/// The traced O_s of every operator, for the report.
fn op_overlaps(graph: &TfliteGraph, layers: &[LayerReport]) -> Vec<TflmOpOverlap> {
    layers
        .iter()
        .filter(|l| l.name != LOAD_INPUT)
        .filter_map(|l| {
            let index = op_index(&l.params)?;
            let op = graph.ops.get(index)?;
            Some(TflmOpOverlap {
                index,
                op: op.name.clone(),
                output: op
                    .outputs
                    .first()
                    .map(|&t| graph.tensor_name(t as usize))
                    .unwrap_or_default(),
                input: l.overlap.as_ref().map(|o| o.input.clone()),
                monotone_bytes: l.overlap.as_ref().map(|o| o.monotone_bytes),
                exact_bytes: l.overlap.as_ref().map(|o| o.exact_bytes),
            })
        })
        .collect()
}
