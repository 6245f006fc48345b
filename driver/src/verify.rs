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

use std::path::PathBuf;
use std::time::Instant;

use memtrace_abi::program::TensorData;
use memtrace_abi::Analysis;
use memtrace_analyzer::plot::arena::ArenaTrace;
use memtrace_analyzer::shadow::{Clobber, ShadowMap};
use memtrace_analyzer::verify::{
    digest, KernelsComparison, OpOverlapReport, PlacedTensorReport, PlanRunReport,
    UsedOverlapReport, VerifyReport,
};
use memtrace_io::input::{read_limited, read_text_limited, MAX_INPUT_FILE, MAX_TEXT_FILE};
use memtrace_model::lower::{lower, LowerInput};
use memtrace_model::planner::{self, Overlaps, Plan, PlanOptions, PlannerKind, TracedOverlaps};
use memtrace_model::{self as model, Accumulator, Model};
use memtrace_tracer::{Arch, ElfImage, TraceOptions};
use serde::Deserialize;

use crate::common::{check_output, trace_with};
use crate::error::{Context, Result};
use crate::kernels::{check_built_with, harness_guest, Kernels};
use crate::placement::{arena_of, greedy, offsets_of};
use crate::plan::{OverlapChoice, OverlapProvenance};
use crate::run::access_path;
use crate::scratch::with_library_scratch;
use crate::spill::{transform, SpillOptions, SpillRun};
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

/// The executor of `kernels`: `--executor` for the library under test, the
/// harness build otherwise.
pub(crate) fn executor(req: &VerifyOptions, kernels: Kernels) -> Result<ElfImage> {
    let path = match &req.executor {
        Some(p) if kernels == req.kernels => p.clone(),
        _ => harness_guest(req.target, kernels.executor_file(), "--executor")?,
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
    if image.arch != req.target {
        bail!(
            "{} is a {} executor but --target is {}",
            path.display(),
            image.arch.name(),
            req.target.name()
        );
    }
    Ok(image)
}

/// Analyses another workflow adds to a run, and whether they need each
/// access's exact instruction (the hook access path).
#[derive(Default)]
pub(crate) struct Extra<'a> {
    pub analyses: Vec<&'a mut (dyn Analysis + Send)>,
    pub exact_time: bool,
}

/// Result of one emulated run.
pub(crate) struct Outcome {
    seconds: f64,
    /// Wall-clock seconds of the same program without hooks (--baseline).
    untraced_seconds: Option<f64>,
    pub shadow: ShadowMap,
    trace: Option<ArenaTrace>,
    pub instructions: u64,
    /// The access path the run used.
    pub access: memtrace_tracer::AccessPath,
    outputs: Vec<u8>,
    /// The graph inputs the program carried, concatenated in order.
    inputs: Vec<u8>,
    /// The storage region after the run (empty when the program spills
    /// nothing) and the shadow map that checked it.
    storage: Vec<u8>,
    storage_shadow: Option<ShadowMap>,
}

/// Lowers and runs `model` with tensors at `offsets`, executing `order`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn execute(
    image: &ElfImage,
    model: &Model,
    order: &[usize],
    offsets: &[Option<u64>],
    arena_bytes: u64,
    opts: &VerifyOptions,
    input_data: Option<&[u8]>,
    plot_title: Option<String>,
    output_readers: &[String],
    mut extra: Extra<'_>,
) -> Result<Outcome> {
    let program = lower(
        model,
        &LowerInput {
            order,
            offsets,
            arena_bytes,
            seed: opts.seed,
            input_data,
        },
    )?;
    let inputs: Vec<u8> = program.inputs.iter().flat_map(|(_, b)| b.clone()).collect();
    let encoded = program.encode()?;
    let arena = image
        .symbol("memtrace_arena")
        .ok_or_else(|| failed!("{} has no memtrace_arena symbol", image.path.display()))?;
    let arena_end = image.symbol("memtrace_arena_end").map(|s| s.address);
    let base = arena.address + encoded.arena_offset;
    if let Some(end) = arena_end {
        if base + arena_bytes > end {
            bail!(
                "program ({} bytes) and arena ({arena_bytes} bytes) do not fit the executor's arena ({} bytes)",
                encoded.arena_offset,
                end - arena.address
            );
        }
    }
    let readback: Vec<(u64, u64)> = program
        .outputs
        .iter()
        .map(|&o| {
            let t = &program.tensors[o as usize];
            let off = match t.data {
                TensorData::Arena { offset } => offset,
                _ => 0,
            };
            (base + off, t.bytes())
        })
        .collect();
    let storage_at = storage_region(image, program.storage_bytes)?;
    let mut readback = readback;
    if let Some(at) = storage_at {
        readback.push((at, program.storage_bytes));
    }
    let preload = vec![(arena.address, encoded.bytes)];
    let untraced_seconds = if opts.baseline {
        Some(crate::common::untraced_seconds(
            image, &preload, "executor",
        )?)
    } else {
        None
    };
    let started = Instant::now();
    let mut shadow = ShadowMap::new(base, arena_bytes).with_output_readers(output_readers.to_vec());
    let mut trace = plot_title.map(|t| ArenaTrace::new(t, base, arena_bytes));
    let mut storage_shadow = storage_at.map(|at| ShadowMap::new(at, program.storage_bytes));
    // Only the arena plot (or an extra analysis) needs each access's exact
    // instruction.
    let access = access_path(trace.is_some() || extra.exact_time);
    let summary = {
        let mut analyses: Vec<&mut (dyn Analysis + Send)> = vec![&mut shadow];
        if let Some(t) = trace.as_mut() {
            analyses.push(t);
        }
        if let Some(t) = storage_shadow.as_mut() {
            analyses.push(t);
        }
        for a in extra.analyses.iter_mut() {
            analyses.push(&mut **a);
        }
        trace_with(
            image,
            TraceOptions {
                max_instructions: opts.max_instructions,
                preload,
                readback,
                access,
                ..TraceOptions::default()
            },
            &mut analyses,
        )?
    };
    if summary.exit_code != 0 {
        bail!(
            "{} {}",
            image.path.display(),
            crate::common::exit_text(
                summary.exit_code,
                summary.exit_reason.as_deref(),
                "3: no program, 4: unsupported operator, 6: scratch missing, 7: the kernel \
                 library reported an error; docs/protocol.md §9"
            )
        );
    }
    let mut memory = summary.memory;
    let storage = match storage_at {
        Some(_) => memory.pop().unwrap_or_default(),
        None => Vec::new(),
    };
    Ok(Outcome {
        seconds: started.elapsed().as_secs_f64(),
        untraced_seconds,
        shadow,
        trace,
        instructions: summary.instructions,
        access: summary.access,
        outputs: memory.concat(),
        inputs,
        storage,
        storage_shadow,
    })
}

/// Guest address of the executor's storage region when a program needs
/// `bytes` of it (`None` for none); an error when it has no such region or
/// the region is too small.
fn storage_region(image: &ElfImage, bytes: u64) -> Result<Option<u64>> {
    if bytes == 0 {
        return Ok(None);
    }
    let (Some(start), Some(end)) = (
        image.symbol("memtrace_storage"),
        image.symbol("memtrace_storage_end"),
    ) else {
        bail!(
            "{} has no storage region (memtrace_storage): rebuild it with harness-c's linker scripts",
            image.path.display()
        );
    };
    if start.address + bytes > end.address {
        bail!(
            "the program spills {bytes} bytes, more than the executor's storage region ({} bytes)",
            end.address - start.address
        );
    }
    Ok(Some(start.address))
}

fn run_report(
    model: &Model,
    planner: &str,
    overlap: &str,
    offsets: &[Option<u64>],
    arena_bytes: u64,
    plan: Option<&Plan>,
    outcome: &Outcome,
) -> PlanRunReport {
    let names = memtrace_model::lower::tensor_names(model);
    PlanRunReport {
        seconds: outcome.seconds,
        untraced_seconds: outcome.untraced_seconds,
        planner: planner.into(),
        overlap: overlap.into(),
        arena_bytes,
        instructions: outcome.instructions,
        clobbers: outcome.shadow.clobbers.clone(),
        tensors: offsets
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
        overlaps_used: plan
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
    offsets: Vec<Option<u64>>,
    arena: u64,
    outcome: Outcome,
}

/// Adds `image`'s scratch tensors to `base` and runs it under the greedy plan.
pub(crate) fn reference_run(
    image: &ElfImage,
    base: &Model,
    req: &VerifyOptions,
    input_data: Option<&[u8]>,
    plot_title: Option<String>,
) -> Result<Reference> {
    let model = with_library_scratch(image, base, req.seed)?;
    let plan = greedy(&model)?;
    let offsets = offsets_of(&model, &plan);
    let arena = arena_of(&plan, &model);
    let outcome = execute(
        image,
        &model,
        &plan.order,
        &offsets,
        arena,
        req,
        input_data,
        plot_title,
        &[],
        Extra::default(),
    )?;
    Ok(Reference {
        model,
        plan,
        offsets,
        arena,
        outcome,
    })
}

/// The reference run of `kernels`' executor (another library's than the
/// one under test).
fn library_reference(
    req: &VerifyOptions,
    kernels: Kernels,
    base: &Model,
    input: Option<&[u8]>,
) -> Result<Reference> {
    reference_run(&executor(req, kernels)?, base, req, input, None)
}

/// Traced O_s per operator of a reference run, from its layers (after the
/// `load_input` windows, one per operator in execution order).
pub(crate) fn traced_overlaps(r: &Reference) -> (TracedOverlaps, Vec<OpOverlapReport>) {
    let model = &r.model;
    let names = memtrace_model::lower::tensor_names(model);
    let op_layers =
        &r.outcome.shadow.layers[model.inputs.len().min(r.outcome.shadow.layers.len())..];
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
            .any(|&t| model.tensors[t].dtype == memtrace_model::Dtype::Float32),
    )
}

/// Layers of a reference run that read back their own output.
fn output_readers(r: &Reference) -> Vec<String> {
    let layers = &r.outcome.shadow.layers;
    layers
        .iter()
        .filter(|l| l.reads_output)
        .map(|l| l.name.clone())
        .collect()
}

/// The placement under test.
struct PlanUnderTest {
    /// The model the plan is for, when it is not the reference's (TinySeg
    /// transforms it).
    model: Option<Model>,
    /// TinySeg's transformation and its planning time.
    spill: Option<(memtrace_model::tinyseg::Optimized, f64)>,
    plan: Option<Plan>,
    offsets: Vec<Option<u64>>,
    arena: u64,
    order: Vec<usize>,
    planner: String,
    overlap: String,
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
    let (offsets, arena) = placement_from_plan(&r.model, &r.offsets, &text)
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
        offsets,
        arena,
        order: (0..r.model.ops.len()).collect(),
        planner: "file".to_string(),
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
            offsets: offsets_of(m, &optimized.plan),
            arena: arena_of(&optimized.plan, m),
            order: optimized.plan.order.clone(),
            planner: format!("tinyseg+{}", req.spill.base.name()),
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
        offsets: offsets_of(model, &plan),
        arena: arena_of(&plan, model),
        order: plan.order.clone(),
        planner: kind.name().to_string(),
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

/// The model and the first graph input's bytes (`--input`), checked.
pub(crate) fn load_model(req: &VerifyOptions) -> Result<(Model, Option<Vec<u8>>)> {
    let model = model::source::load(&req.model)
        .with_context(|| format!("loading {}", req.model))?
        .with_transpose_conv_accumulator(req.accumulator);
    model.validate()?;
    let input_data = req
        .input
        .as_ref()
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
    let (base, input_data) = load_model(req)?;
    if base.outputs.is_empty() {
        bail!(
            "{}: the model has no graph outputs, so no run can be compared with another",
            req.model
        );
    }
    if let Some(p) = &req.plot {
        check_output(p, &[std::path::Path::new(&req.model)])?;
    }
    let input = input_data.as_deref();
    let image = executor(req, req.kernels)?;
    let overlap_kernels = req.overlap_kernels.unwrap_or(req.kernels);
    // TFLM's reference kernels, when another library is under test: for the
    // outputs, and for the O_s when the plan is to be certified on them. The
    // run depends on nothing the library's own runs make, so it runs on the
    // other core beside them, and is waited for where it is first needed.
    let mut tflm_pending = (req.kernels != Kernels::Tflm).then(|| {
        let (req, base, input) = (req.clone(), base.clone(), input_data.clone());
        std::thread::spawn(move || library_reference(&req, Kernels::Tflm, &base, input.as_deref()))
    });
    let finish = |h: std::thread::JoinHandle<Result<Reference>>| {
        h.join()
            .unwrap_or_else(|_| Err(failed!("the reference-kernel run's thread panicked")))
    };
    let reference = reference_run(
        &image,
        &base,
        req,
        input,
        req.plot
            .as_ref()
            .map(|_| "reference (tflm-greedy)".to_string()),
    )?;
    let mut tflm = None;
    if overlap_kernels == Kernels::Tflm {
        tflm = tflm_pending.take().map(finish).transpose()?;
    }
    let overlap_source = match overlap_kernels {
        k if k == req.kernels => None,
        Kernels::Tflm => None,
        k => Some(library_reference(req, k, &base, input)?),
    };
    let source = match (overlap_kernels, &tflm, &overlap_source) {
        (k, _, _) if k == req.kernels => &reference,
        (Kernels::Tflm, Some(t), _) => t,
        (_, _, Some(o)) => o,
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
    let plan_out = execute(
        &image,
        plan_model,
        &under_test.order,
        &under_test.offsets,
        under_test.arena,
        req,
        input,
        req.plot
            .as_ref()
            .map(|_| format!("{} ({})", under_test.planner, under_test.overlap)),
        &output_readers(&reference),
        Extra::default(),
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
        let m = mismatched_bytes(&t.outcome.outputs, &ref_out.outputs);
        KernelsComparison {
            against: Kernels::Tflm.name().into(),
            mismatched_bytes: m,
            bit_exact: m == 0,
            output_digest: digest(&t.outcome.outputs),
        }
    });
    let clobbers: Vec<Clobber> = plan_out.shadow.clobbers.clone();
    let oracle = host_oracle(req, &base, ref_out)?;
    Ok(VerifyReport {
        runtime: "executor",
        model: model.name.clone(),
        target: req.target.name().into(),
        seed: req.seed,
        kernels: req.kernels.name().into(),
        overlap_kernels: overlap_kernels.name().into(),
        reference: run_report(
            model,
            "tflm-greedy",
            "none",
            &reference.offsets,
            reference.arena,
            Some(&reference.plan),
            ref_out,
        ),
        plan: run_report(
            plan_model,
            &under_test.planner,
            &under_test.overlap,
            &under_test.offsets,
            under_test.arena,
            under_test.plan.as_ref(),
            &plan_out,
        ),
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
                storage_clobbers: plan_out
                    .storage_shadow
                    .as_ref()
                    .map(|s| s.clobbers.clone())
                    .unwrap_or_default(),
                layers: &plan_out.shadow.layers,
                instructions: (plan_out.instructions, ref_out.instructions),
                planning_seconds: *seconds,
            }
            .report()
        }),
        warnings,
    })
}
