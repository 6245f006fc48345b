//! Whole-model verification (`memtrace verify`): run a whole model in the
//! emulator under the reference plan (TFLM greedy, no overlaps) and under a
//! chosen plan, check every read of the arena with the shadow map, and
//! compare the outputs bit by bit.
//!
//! Both runs use the executor of one kernel library ([`Kernels`]); its
//! scratch buffers are asked of the library and planned as tensors. The
//! reference run also traces every operator's O_s (monotone, first input
//! against output), which is the `traced` overlap source of the plan — from
//! the same library, or from another one (`overlap_kernels`) to show what a
//! plan certified for one library does on another. A library other than
//! TFLM's reference kernels is also compared, output for output, with them.

use std::path::{Path, PathBuf};
use std::time::Instant;

use memtrace_analyzer::shadow::Clobber;
use memtrace_analyzer::verify::{
    digest, KernelsComparison, OpOverlapReport, PlacedTensorReport, PlanRunReport,
    UsedOverlapReport, VerifyReport,
};
use memtrace_io::input::{read_limited, read_text_limited, MAX_INPUT_FILE, MAX_TEXT_FILE};
use memtrace_model::planner::{self, Overlaps, Plan, PlanOptions, PlannerKind, TracedOverlaps};
use memtrace_model::{self as model, Accumulator, Model};
use memtrace_tracer::{Arch, ElfImage};
use serde::{Deserialize, Serialize};

use crate::common::check_output;
use crate::error::{Context, Result};
use crate::executor_run::{ExecutorRun, Outcome, Placement, Watch};
use crate::kernels::{check_built_with, harness_guest, Kernels};
use crate::plan::{OverlapChoice, OverlapProvenance};
use crate::spill::{transform, SpillOptions, SpillRun};
use crate::trace_cache::TraceCache;
use crate::{bail, failed};

/// What to verify, and how.
#[derive(Debug, Clone)]
pub struct VerifyOptions {
    /// `MODEL.tflite` or `zoo:NAME`.
    pub model: String,
    /// Planner of the verified plan.
    pub planner: PlannerKind,
    /// O_s source of the plan.
    pub overlap: OverlapChoice,
    /// A placement file to verify instead of a planner's plan.
    pub plan: Option<PathBuf>,
    /// Seed of the generated input (and of zoo weights).
    pub seed: u64,
    /// Raw bytes of the first graph input.
    pub input: Option<PathBuf>,
    /// Architecture of the executor.
    pub target: Arch,
    /// Kernel library of the executor.
    pub kernels: Kernels,
    /// Library whose traces give the plan's traced O_s (default: `kernels`).
    pub overlap_kernels: Option<Kernels>,
    /// The executor ELF (default: `harness-c/build/TARGET/` and the
    /// library's executor file).
    pub executor: Option<PathBuf>,
    /// Arena-wide trace picture of both runs.
    pub plot: Option<PathBuf>,
    /// Also time the plan's program without hooks.
    pub baseline: bool,
    /// Instruction budget of each run.
    pub max_instructions: u64,
    /// TinySeg's base planner and target (with `planner` = `tinyseg`).
    pub spill: SpillOptions,
    /// Accumulator of every TRANSPOSE_CONV, in both runs (int16: TinySeg's
    /// temporary tensor quantisation).
    pub accumulator: Accumulator,
    /// What runs the model: memtrace's executor or real TFLM.
    pub runtime: crate::verify_tflm::Runtime,
    /// Check a `plan` file made for another kernel library than `kernels`
    /// (with a warning) instead of refusing it.
    pub allow_foreign_plan: bool,
    /// Runs kept from earlier verifies ([`crate::trace_cache::TraceCache`]).
    pub cache: crate::trace_cache::TraceCache,
}

/// A `--plan` file. Unknown keys are errors that name them (a misspelt
/// `"arena_btes"` must not be ignored).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanFile {
    tensors: Vec<PlanFileTensor>,
    arena_bytes: Option<u64>,
    /// The kernel library the plan was made for (`tflm`, `cmsis-nn`).
    kernels: Option<String>,
    /// The O_s source the plan was made with (`traced`, `analytic`, ...).
    #[allow(dead_code)]
    overlap: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanFileTensor {
    name: String,
    offset: u64,
}

/// The executor of `kernels` for `target`: the ELF at `path` when given,
/// the harness build otherwise.
pub(crate) fn executor(target: Arch, kernels: Kernels, path: Option<&Path>) -> Result<ElfImage> {
    let path = match path {
        Some(p) => p.to_path_buf(),
        None => harness_guest(target, kernels.executor_file(), "--executor")?,
    };
    let image = ElfImage::load(&path)?;
    // A kernel suite would ignore the program and report nonsense.
    if image.symbol("memtrace_job").is_some() || image.symbol("memtrace_arena").is_none() {
        bail!(
            "{} is not a model executor (it has {}): pass harness-c/build/TARGET/{}",
            path.display(),
            if image.symbol("memtrace_job").is_some() {
                "a kernel suite's memtrace_job mailbox"
            } else {
                "no memtrace_arena to load a model program into"
            },
            kernels.executor_file()
        );
    }
    check_built_with(&image, kernels, "executor", kernels.executor_file())?;
    if image.arch != target {
        bail!(
            "{} is a {} executor but --target is {}",
            path.display(),
            image.arch.name(),
            target.name()
        );
    }
    Ok(image)
}

/// The executor of `kernels` for `req`: `--executor` for the library under
/// test, the harness build for any other.
fn executor_for(req: &VerifyOptions, kernels: Kernels) -> Result<ElfImage> {
    let path = req.executor.as_deref().filter(|_| kernels == req.kernels);
    executor(req.target, kernels, path)
}

/// How `req` runs `image`.
fn runner<'a>(
    req: &VerifyOptions,
    image: &'a ElfImage,
    input: Option<&'a [u8]>,
) -> ExecutorRun<'a> {
    ExecutorRun {
        image,
        seed: req.seed,
        max_instructions: req.max_instructions,
        input,
    }
}

fn run_report(model: &Model, under: &PlanUnderTest, outcome: &Outcome) -> PlanRunReport {
    let names = memtrace_model::lower::tensor_names(model);
    PlanRunReport {
        seconds: outcome.seconds,
        untraced_seconds: outcome.untraced_seconds,
        planner: under.planner.clone(),
        overlap: under.overlap.clone(),
        arena_bytes: under.placement.arena_bytes,
        instructions: outcome.instructions,
        clobbers: outcome.clobbers.clone(),
        tensors: under
            .placement
            .offsets
            .iter()
            .enumerate()
            .filter_map(|(i, o)| {
                o.map(|offset| PlacedTensorReport {
                    tensor: i,
                    name: names[i].clone(),
                    offset,
                    size: model.tensors[i].bytes,
                })
            })
            .collect(),
        cached: under.cached,
        overlaps_used: under
            .plan
            .as_ref()
            .map(|p| {
                p.overlaps_used
                    .iter()
                    .map(|u| UsedOverlapReport {
                        op: names[model.ops[u.op].outputs[0]].clone(),
                        input: names[u.input].clone(),
                        output: names[u.output].clone(),
                        bytes: u.bytes,
                        safe_bytes: u.safe_bytes,
                    })
                    .collect()
            })
            .unwrap_or_default(),
    }
}

/// One library's model (with its scratch tensors) and its un-overlapped
/// reference run under TFLM's greedy plan.
pub(crate) struct Reference {
    model: Model,
    plan: Plan,
    placement: Placement,
    outcome: Outcome,
    /// Taken from the trace cache, not run.
    cached: bool,
}

/// What the trace cache keeps of a reference run: the rest is computed
/// from it.
#[derive(Serialize, Deserialize)]
struct CachedReference {
    /// Scratch bytes per operator, as the library answered.
    scratch: Vec<u64>,
    outcome: Outcome,
}

impl Reference {
    /// The reference of `base` with `scratch` tensors, whose run left
    /// `outcome`.
    fn new(base: &Model, scratch: &[u64], outcome: Outcome, cached: bool) -> Result<Reference> {
        let model = base.with_scratch(scratch);
        let plan = Plan::tflm_greedy(&model)?;
        Ok(Reference {
            placement: Placement::of(&plan, &model),
            model,
            plan,
            outcome,
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
    Ok(scratch_and_reference(run, base, watch)?.1)
}

/// The scratch bytes per operator `run`'s library needs, and the reference
/// run of `base` with them.
fn scratch_and_reference(
    run: &ExecutorRun<'_>,
    base: &Model,
    watch: Watch<'_>,
) -> Result<(Vec<u64>, Reference)> {
    let scratch = run.scratch_needs(base)?;
    let model = base.with_scratch(&scratch);
    let plan = Plan::tflm_greedy(&model)?;
    let outcome = run.traced(&model, &Placement::of(&plan, &model), watch)?;
    let reference = Reference::new(base, &scratch, outcome, false)?;
    Ok((scratch, reference))
}

/// [`reference_run`], taken from `cache` when an earlier run had the same
/// executor, model, input and budget. A run that draws its picture or is
/// timed against Unicorn without hooks (`--baseline`) is always run.
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
    if let Some(c) = cache.get::<CachedReference>(&key) {
        return Reference::new(base, &c.scratch, c.outcome, true);
    }
    let (scratch, r) = scratch_and_reference(run, base, watch)?;
    // A clean run only: a clobber in the reference is a finding to show
    // again, not a result to keep.
    if !r.outcome.clobbers.is_empty() {
        return Ok(r);
    }
    let kept = CachedReference {
        scratch,
        outcome: r.outcome,
    };
    cache.put(&key, &kept);
    Reference::new(base, &kept.scratch, kept.outcome, false)
}

/// The reference run of `kernels`' executor (another library's than the
/// one under test).
fn library_reference(
    req: &VerifyOptions,
    kernels: Kernels,
    base: &Model,
    input: Option<&[u8]>,
) -> Result<Reference> {
    let image = executor_for(req, kernels)?;
    let watch = Watch {
        baseline: req.baseline,
        ..Watch::default()
    };
    cached_reference_run(&runner(req, &image, input), base, watch, &req.cache)
}

/// The outputs of `kernels`' executor under TFLM's greedy plan, run without
/// hooks: all a library comparison needs. Kept in the trace cache like a
/// reference run.
fn library_outputs(
    req: &VerifyOptions,
    kernels: Kernels,
    base: &Model,
    input: Option<&[u8]>,
) -> Result<Vec<u8>> {
    let image = executor_for(req, kernels)?;
    let run = runner(req, &image, input);
    req.cache
        .fetch(&run.cache_key("executor-greedy-outputs-v1", base), || {
            let model = run.with_scratch(base)?;
            let plan = Plan::tflm_greedy(&model)?;
            run.outputs(&model, &Placement::of(&plan, &model))
        })
}

/// TFLM's reference kernels beside another library: their outputs, and
/// their traced reference run when the plan's O_s come from them.
struct ReferenceKernels {
    outputs: Vec<u8>,
    traced: Option<Reference>,
}

/// Runs TFLM's reference kernels on `base`: traced when their O_s are
/// needed, otherwise without hooks.
fn reference_kernels(
    req: &VerifyOptions,
    base: &Model,
    input: Option<&[u8]>,
    traced: bool,
) -> Result<ReferenceKernels> {
    if traced {
        let r = library_reference(req, Kernels::Tflm, base, input)?;
        return Ok(ReferenceKernels {
            outputs: r.outcome.outputs.clone(),
            traced: Some(r),
        });
    }
    Ok(ReferenceKernels {
        outputs: library_outputs(req, Kernels::Tflm, base, input)?,
        traced: None,
    })
}

/// Traced O_s per operator of a reference run, from its layers (after the
/// `load_input` windows, one per operator in execution order).
pub(crate) fn traced_overlaps(r: &Reference) -> (TracedOverlaps, Vec<OpOverlapReport>) {
    let model = &r.model;
    let names = memtrace_model::lower::tensor_names(model);
    let op_layers = &r.outcome.layers[model.inputs.len().min(r.outcome.layers.len())..];
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

/// The reference run's outputs against PyPI `tflite-micro` on the same
/// model file and inputs, when the host oracle is installed. Not for a model
/// memtrace changed (an int16 TRANSPOSE_CONV accumulator is no TFLM
/// arithmetic).
fn host_oracle(
    req: &VerifyOptions,
    model: &Model,
    reference: &Outcome,
) -> Result<Option<crate::oracle::OracleComparison>> {
    if req.accumulator != Accumulator::Int32 || crate::oracle::python().is_none() {
        return Ok(None);
    }
    let bytes = crate::verify_tflm::model_bytes(&req.model, req.seed)?;
    crate::oracle::compare(
        &bytes,
        model.inputs.len(),
        model.outputs.len(),
        &reference.inputs,
        &reference.outputs,
        model
            .outputs
            .iter()
            .any(|&t| model.tensors[t].dtype == memtrace_model::DataType::Float32),
    )
}

/// Layers of a reference run that read back their own output.
fn output_readers(r: &Reference) -> Vec<String> {
    let layers = &r.outcome.layers;
    layers
        .iter()
        .filter(|l| l.reads_output)
        .map(|l| l.name.clone())
        .collect()
}

/// The placement under test (or the reference's, for its report).
struct PlanUnderTest {
    /// The model the plan is for, when it is not the reference's (TinySeg
    /// transforms it).
    model: Option<Model>,
    /// TinySeg's transformation and its planning time.
    spill: Option<(memtrace_model::tinyseg::Optimized, f64)>,
    plan: Option<Plan>,
    placement: Placement,
    planner: String,
    overlap: String,
    /// Its run was taken from the trace cache.
    cached: bool,
}

impl PlanUnderTest {
    /// The reference run's own plan: TFLM's greedy, without overlaps.
    fn reference(r: &Reference) -> PlanUnderTest {
        PlanUnderTest {
            model: None,
            spill: None,
            plan: Some(r.plan.clone()),
            placement: r.placement.clone(),
            planner: "tflm-greedy".into(),
            overlap: "none".into(),
            cached: r.cached,
        }
    }
}

/// The placement of `--plan FILE`: listed tensors moved, the others at their
/// reference offsets, model order.
fn plan_from_file(
    path: &std::path::Path,
    r: &Reference,
    req: &VerifyOptions,
    warnings: &mut Vec<String>,
) -> Result<PlanUnderTest> {
    let text = read_text_limited(path, MAX_TEXT_FILE, "plan files")?;
    let (offsets, arena_bytes) = placement_from_plan(&r.model, &r.placement.offsets, &text)
        .with_context(|| path.display().to_string())?;
    if let Some(made_for) = plan_kernels(&text).with_context(|| path.display().to_string())? {
        if made_for != req.kernels {
            let what = format!(
                "{}: the plan was made for the {} kernels, not {} (--kernels): its overlaps \
                 may corrupt data on {}",
                path.display(),
                made_for.name(),
                req.kernels.name(),
                req.kernels.name()
            );
            if !req.allow_foreign_plan {
                bail!(
                    "{what}; pass --allow-foreign-plan to check it on {} anyway",
                    req.kernels.name()
                );
            }
            warnings.push(what);
        }
    }
    Ok(PlanUnderTest {
        model: None,
        spill: None,
        plan: None,
        placement: Placement {
            order: (0..r.model.ops.len()).collect(),
            offsets,
            arena_bytes,
        },
        planner: "file".to_string(),
        cached: false,
        overlap: path.display().to_string(),
    })
}

/// The tensor offsets and arena size a plan file's `text` gives `model`
/// (`{"tensors": [{"name", "offset"}], "arena_bytes"}`): listed tensors at
/// their offsets, the others at their `reference` offsets; the arena
/// `arena_bytes`, which every placed tensor must fit (an error names the
/// first that does not), or without it the end of the last tensor.
pub fn placement_from_plan(
    model: &Model,
    reference: &[Option<u64>],
    text: &str,
) -> Result<(Vec<Option<u64>>, u64)> {
    let names = memtrace_model::lower::tensor_names(model);
    let file: PlanFile = serde_json::from_str(text).map_err(|e| failed!("not a plan file: {e}"))?;
    let mut offsets = reference.to_vec();
    for t in &file.tensors {
        let i = names
            .iter()
            .position(|n| *n == t.name)
            .ok_or_else(|| failed!("no tensor `{}`", t.name))?;
        if offsets[i].is_none() {
            bail!("tensor `{}` is not an arena tensor", t.name);
        }
        offsets[i] = Some(t.offset);
    }
    let mut end = 0u64;
    for (i, o) in offsets.iter().enumerate() {
        let Some(o) = *o else { continue };
        let bytes = model.tensors[i].bytes;
        let Some(e) = o.checked_add(bytes) else {
            bail!(
                "tensor `{}` at offset {o} + {bytes} bytes does not fit any arena",
                names[i]
            );
        };
        if let Some(arena) = file.arena_bytes.filter(|&a| e > a) {
            bail!(
                "tensor `{}` at offset {o} + {bytes} bytes ends at byte {e}, beyond the plan's \
                 \"arena_bytes\": {arena}",
                names[i]
            );
        }
        end = end.max(e);
    }
    Ok((offsets, file.arena_bytes.unwrap_or(end)))
}

/// The kernel library a plan file says it was made for (`"kernels"`), if it
/// says.
pub fn plan_kernels(text: &str) -> Result<Option<Kernels>> {
    let file: PlanFile = serde_json::from_str(text).map_err(|e| failed!("not a plan file: {e}"))?;
    file.kernels
        .map(|name| {
            Kernels::from_name(&name)
                .ok_or_else(|| failed!("unknown \"kernels\": \"{name}\" (known: tflm, cmsis-nn)"))
        })
        .transpose()
}

/// The planner's placement of `model` with O_s from `traced` or a method.
fn plan_from_planner(
    req: &VerifyOptions,
    model: &Model,
    traced: &TracedOverlaps,
) -> Result<PlanUnderTest> {
    let overlaps = match req.overlap.method() {
        None => Overlaps::compute(model, traced),
        Some(method) => Overlaps::compute(model, &method),
    };
    let kind = req.planner;
    if kind == PlannerKind::Tinyseg {
        let (optimized, seconds) = transform(
            model,
            &overlaps,
            &req.spill,
            &PlanOptions::default(),
            Some(req.seed),
        )?;
        let m = &optimized.graph.model;
        return Ok(PlanUnderTest {
            placement: Placement::of(&optimized.plan, m),
            planner: format!("tinyseg+{}", req.spill.base.name()),
            cached: false,
            overlap: optimized.plan.overlap.clone(),
            plan: Some(optimized.plan.clone()),
            model: Some(m.clone()),
            spill: Some((optimized, seconds)),
        });
    }
    let plan = planner::run(model, kind, &overlaps, &PlanOptions::default())?;
    if plan.tensors.is_empty() {
        bail!(
            "planner {} does not apply to this model: {}",
            kind.name(),
            plan.note.clone().unwrap_or_default()
        );
    }
    Ok(PlanUnderTest {
        placement: Placement::of(&plan, model),
        planner: kind.name().to_string(),
        cached: false,
        overlap: plan.overlap.clone(),
        plan: Some(plan),
        model: None,
        spill: None,
    })
}

/// Bytes that differ between two output images (a length difference counts).
fn mismatched_bytes(a: &[u8], b: &[u8]) -> u64 {
    a.iter().zip(b).filter(|(x, y)| x != y).count() as u64
        + (a.len() as i64 - b.len() as i64).unsigned_abs()
}

/// The model at `source` (`MODEL.tflite` or `zoo:NAME`) and the first
/// graph input's bytes (`--input`), checked.
pub(crate) fn load_model(
    source: &str,
    input: Option<&Path>,
    accumulator: Accumulator,
) -> Result<(Model, Option<Vec<u8>>)> {
    let model = model::source::load(source)
        .with_context(|| format!("loading {source}"))?
        .with_transpose_conv_accumulator(accumulator);
    model.validate()?;
    let input_data = input
        .map(|p| read_limited(p, MAX_INPUT_FILE, "--input files"))
        .transpose()?;
    if let (Some(data), Some(&first)) = (&input_data, model.inputs.first()) {
        let t = &model.tensors[first];
        if data.len() as u64 != t.bytes {
            bail!(
                "--input has {} bytes; graph input `{}` ({} {:?}) needs {}",
                data.len(),
                t.name,
                t.dtype,
                t.shape,
                t.bytes
            );
        }
    }
    Ok((model, input_data))
}

/// Runs the model under the reference plan and under the chosen plan, and
/// reports clobbers, bit-exactness and the O_s each operator traced.
pub fn verify(req: &VerifyOptions) -> Result<VerifyReport> {
    let started = Instant::now();
    let (base, input_data) = load_model(&req.model, req.input.as_deref(), req.accumulator)?;
    if base.outputs.is_empty() {
        bail!(
            "{}: the model has no graph outputs, so no run can be compared with another",
            req.model
        );
    }
    if let Some(p) = &req.plot {
        check_output(p, &[Path::new(&req.model)])?;
    }
    let input = input_data.as_deref();
    let image = executor_for(req, req.kernels)?;
    let run = runner(req, &image, input);
    let overlap_kernels = req.overlap_kernels.unwrap_or(req.kernels);
    // TFLM's reference kernels, when another library is under test: for the
    // outputs (without hooks), and traced when the plan is to be certified
    // on them. The run depends on nothing the library's own runs make, so
    // it runs on the other core beside them, and is waited for where it is
    // first needed.
    let mut tflm_pending = (req.kernels != Kernels::Tflm).then(|| {
        let (req, base, input) = (req.clone(), base.clone(), input_data.clone());
        let traced = overlap_kernels == Kernels::Tflm;
        std::thread::spawn(move || reference_kernels(&req, &base, input.as_deref(), traced))
    });
    let finish = |h: std::thread::JoinHandle<Result<ReferenceKernels>>| {
        h.join()
            .unwrap_or_else(|_| Err(failed!("the reference-kernel run's thread panicked")))
    };
    let watch = |title: Option<String>| Watch {
        plot_title: req.plot.as_ref().and(title),
        baseline: req.baseline,
        ..Watch::default()
    };
    let reference = cached_reference_run(
        &run,
        &base,
        watch(Some("reference (tflm-greedy)".into())),
        &req.cache,
    )?;
    let mut tflm = None;
    if overlap_kernels == Kernels::Tflm {
        tflm = tflm_pending.take().map(finish).transpose()?;
    }
    let overlap_source = match overlap_kernels {
        k if k == req.kernels || k == Kernels::Tflm => None,
        k => Some(library_reference(req, k, &base, input)?),
    };
    let source = match (&tflm, &overlap_source) {
        _ if overlap_kernels == req.kernels => &reference,
        (
            Some(ReferenceKernels {
                traced: Some(t), ..
            }),
            _,
        ) => t,
        (_, Some(o)) => o,
        _ => &reference,
    };
    let (traced, traced_report) = traced_overlaps(source);
    let model = &reference.model;
    let mut warnings = Vec::new();
    let under_test = match &req.plan {
        Some(path) => plan_from_file(path, &reference, req, &mut warnings)?,
        None => {
            let provenance = OverlapProvenance {
                kernels: req.kernels,
                source: req.overlap,
                modelled: match req.overlap {
                    OverlapChoice::Traced => Some(overlap_kernels),
                    OverlapChoice::Algorithmic | OverlapChoice::Analytic => Some(Kernels::Tflm),
                    OverlapChoice::None => None,
                },
            };
            warnings.extend(provenance.warning());
            let under_test = plan_from_planner(req, model, &traced)?;
            if let Some((optimized, _)) = &under_test.spill {
                warnings.extend(crate::spill::target_missed(
                    req.spill.target_bytes,
                    optimized.plan.peak_bytes,
                ));
            }
            under_test
        }
    };
    let plan_model = under_test.model.as_ref().unwrap_or(model);
    let title = format!("{} ({})", under_test.planner, under_test.overlap);
    let plan_out = run.traced(
        plan_model,
        &under_test.placement,
        Watch {
            output_readers: output_readers(&reference),
            ..watch(Some(title))
        },
    )?;
    if let Some(h) = tflm_pending.take() {
        tflm = Some(finish(h)?);
    }
    let ref_out = &reference.outcome;
    if let (Some(path), Some(a), Some(b)) = (&req.plot, &ref_out.trace, &plan_out.trace) {
        memtrace_analyzer::plot::arena::render(&[a, b], path)?;
    }
    let mismatched = mismatched_bytes(&ref_out.outputs, &plan_out.outputs);
    let reference_kernels = tflm.as_ref().map(|t| {
        let m = mismatched_bytes(&t.outputs, &ref_out.outputs);
        KernelsComparison {
            against: Kernels::Tflm.name().into(),
            mismatched_bytes: m,
            bit_exact: m == 0,
            output_digest: digest(&t.outputs),
        }
    });
    let clobbers: Vec<Clobber> = plan_out.clobbers.clone();
    let oracle = host_oracle(req, &base, ref_out)?;
    Ok(VerifyReport {
        runtime: "executor",
        model: model.name.clone(),
        target: req.target.name().into(),
        seed: req.seed,
        kernels: req.kernels.name().into(),
        overlap_kernels: overlap_kernels.name().into(),
        reference: run_report(model, &PlanUnderTest::reference(&reference), ref_out),
        plan: run_report(plan_model, &under_test, &plan_out),
        clobbers,
        bit_exact: mismatched == 0,
        mismatched_bytes: mismatched,
        output_bytes: ref_out.outputs.len() as u64,
        output_digest: digest(&ref_out.outputs),
        output_hex: ref_out.outputs.iter().map(|b| format!("{b:02x}")).collect(),
        output_distinct_bytes: {
            let mut seen = [false; 256];
            ref_out
                .outputs
                .iter()
                .for_each(|&b| seen[b as usize] = true);
            seen.iter().filter(|&&x| x).count()
        },
        reference_kernels,
        oracle,
        traced_overlaps: traced_report,
        seconds: started.elapsed().as_secs_f64(),
        tinyseg: under_test.spill.as_ref().map(|(optimized, seconds)| {
            SpillRun {
                optimized,
                options: req.spill,
                storage: &plan_out.storage,
                storage_clobbers: plan_out.storage_clobbers.clone(),
                layers: &plan_out.layers,
                instructions: (plan_out.instructions, ref_out.instructions),
                planning_seconds: *seconds,
            }
            .report()
        }),
        warnings,
    })
}
