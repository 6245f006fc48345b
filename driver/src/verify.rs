//! Whole-model verification (`memtrace verify`): run a whole model in the emulator under the reference
//! plan (TFLM greedy, no overlaps) and under a chosen plan, check every read
//! of the arena with the shadow map, and compare the outputs bit by bit.
//!
//! The reference run also traces every operator's O_s (monotone, first input
//! against output), which is the `traced` overlap source of the plan.

use std::path::{Path, PathBuf};
use std::time::Instant;

use memtrace_abi::program::TensorData;
use memtrace_abi::Analysis;
use memtrace_analyzer::model::{self, Model};
use memtrace_analyzer::planner::{self, Overlaps, Plan, PlanOptions, PlannerKind, TracedOverlaps};
use memtrace_analyzer::verify::plot::ArenaTrace;
use memtrace_analyzer::verify::{
    lower, Clobber, LowerInput, OpOverlapReport, PlacedTensorReport, PlanRunReport, ShadowMap,
    UsedOverlapReport, VerifyReport,
};
use memtrace_tracer::{Arch, ElfImage, TraceOptions};
use serde::Deserialize;

use crate::common::{check_writable, trace_with};
use crate::error::{Context, Error, Result};
use crate::plan::OverlapChoice;
use crate::run::access_path;
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
    /// The executor ELF (default: `harness-c/build/TARGET/executor.elf`).
    pub executor: Option<PathBuf>,
    /// Arena-wide trace picture of both runs.
    pub plot: Option<PathBuf>,
    /// Also time the plan's program without hooks.
    pub baseline: bool,
    /// Instruction budget of each run.
    pub max_instructions: u64,
}

/// The harness build folder of `arch`.
fn build_dir(arch: Arch) -> &'static str {
    match arch {
        Arch::CortexM4 => "cortex-m4",
        Arch::X86_64 => "x86_64",
    }
}

#[derive(Deserialize)]
struct PlanFile {
    tensors: Vec<PlanFileTensor>,
    arena_bytes: Option<u64>,
}

#[derive(Deserialize)]
struct PlanFileTensor {
    name: String,
    offset: u64,
}

fn executor_path(opts: &VerifyOptions) -> Result<PathBuf> {
    if let Some(p) = &opts.executor {
        return Ok(p.clone());
    }
    let rel = Path::new("harness-c/build")
        .join(build_dir(opts.target))
        .join("executor.elf");
    let candidates = [
        rel.clone(),
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(&rel),
    ];
    candidates
        .iter()
        .find(|p| p.exists())
        .cloned()
        .ok_or_else(|| {
            failed!(
                "{} not found: build the guests (`make -C harness-c`) or pass --executor",
                rel.display()
            )
        })
}

/// Result of one emulated run.
struct Outcome {
    seconds: f64,
    /// Wall-clock seconds of the same program without hooks (--baseline).
    untraced_seconds: Option<f64>,
    shadow: ShadowMap,
    trace: Option<ArenaTrace>,
    instructions: u64,
    outputs: Vec<u8>,
}

/// Lowers and runs `model` with tensors at `offsets`, executing `order`.
#[allow(clippy::too_many_arguments)]
fn execute(
    image: &ElfImage,
    model: &Model,
    order: &[usize],
    offsets: &[Option<u64>],
    arena_bytes: u64,
    opts: &VerifyOptions,
    input_data: Option<&[u8]>,
    plot_title: Option<String>,
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
    let preload = vec![(arena.address, encoded.bytes)];
    let untraced_seconds = if opts.baseline {
        let t = Instant::now();
        let code = memtrace_tracer::baseline::run_untraced_with(image, None, &preload)?;
        if code != 0 {
            bail!("the untraced executor exited with code {code}");
        }
        Some(t.elapsed().as_secs_f64())
    } else {
        None
    };
    let started = Instant::now();
    let mut shadow = ShadowMap::new(base, arena_bytes);
    let mut trace = plot_title.map(|t| ArenaTrace::new(t, base, arena_bytes));
    // Only the arena plot needs each access's exact instruction.
    let access = access_path(trace.is_some());
    let summary = {
        let mut analyses: Vec<&mut (dyn Analysis + Send)> = vec![&mut shadow];
        if let Some(t) = trace.as_mut() {
            analyses.push(t);
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
            "the executor exited with code {} (3: no program, 4: unsupported operator)",
            summary.exit_code
        );
    }
    Ok(Outcome {
        seconds: started.elapsed().as_secs_f64(),
        untraced_seconds,
        shadow,
        trace,
        instructions: summary.instructions,
        outputs: summary.memory.concat(),
    })
}

fn offsets_of(model: &Model, plan: &Plan) -> Vec<Option<u64>> {
    let mut o = vec![None; model.tensors.len()];
    for t in &plan.tensors {
        o[t.tensor] = Some(t.offset);
    }
    o
}

fn arena_of(plan: &Plan, model: &Model) -> u64 {
    plan.peak_bytes.unwrap_or_else(|| {
        plan.tensors
            .iter()
            .map(|t| t.offset + model.tensors[t.tensor].bytes.max(t.size))
            .max()
            .unwrap_or(0)
    })
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
    let names = memtrace_analyzer::verify::lower::tensor_names(model);
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

/// Runs the model under the reference plan and under the chosen plan, and
/// reports clobbers, bit-exactness and the O_s each operator traced.
pub fn verify(req: &VerifyOptions) -> Result<VerifyReport> {
    let started = Instant::now();
    let model = model::load(&req.model).with_context(|| format!("loading {}", req.model))?;
    model.validate()?;
    let kind = req.planner;
    let input_data = req
        .input
        .as_ref()
        .map(|p| {
            std::fs::read(p).map_err(|source| Error::Io {
                action: "read --input",
                path: p.clone(),
                source,
            })
        })
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
    if let Some(p) = &req.plot {
        check_writable(p)?;
    }
    let exe = executor_path(req)?;
    let image = ElfImage::load(&exe)?;
    let opts = PlanOptions::default();
    let names = memtrace_analyzer::verify::lower::tensor_names(&model);

    // Reference: TFLM's greedy plan, no overlaps, model order.
    let reference = planner::run(
        &model,
        PlannerKind::TflmGreedy,
        &Overlaps::none(&model),
        &opts,
    )?;
    let ref_offsets = offsets_of(&model, &reference);
    let ref_arena = arena_of(&reference, &model);
    let ref_out = execute(
        &image,
        &model,
        &reference.order,
        &ref_offsets,
        ref_arena,
        req,
        input_data.as_deref(),
        req.plot
            .as_ref()
            .map(|_| "reference (tflm-greedy)".to_string()),
    )?;

    // Traced O_s per operator, from the reference run's layers (after the
    // `load_input` windows, one per operator in execution order).
    let op_layers: Vec<_> = ref_out
        .shadow
        .layers
        .iter()
        .skip(model.inputs.len())
        .cloned()
        .collect();
    let mut traced = TracedOverlaps::default();
    let mut traced_report = Vec::new();
    for (step, &op) in reference.order.iter().enumerate() {
        let o = &model.ops[op];
        let layer = op_layers.get(step);
        let ov = layer.and_then(|l| l.overlap);
        if let Some(ov) = ov {
            traced.by_op.insert(op, ov.monotone_bytes);
        }
        traced_report.push(OpOverlapReport {
            op: names[o.outputs[0]].clone(),
            index: op,
            input: names[o.inputs[0]].clone(),
            output: names[o.outputs[0]].clone(),
            input_bytes: model.tensors[o.inputs[0]].bytes,
            output_bytes: model.tensors[o.outputs[0]].bytes,
            monotone_bytes: ov.map(|v| v.monotone_bytes),
            exact_bytes: ov.map(|v| v.exact_bytes),
            reverse_exact_bytes: ov.map(|v| v.reverse_exact_bytes),
        });
    }

    // The plan under test.
    let (plan, offsets, arena_bytes, order, planner_name, overlap_name) = match &req.plan {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
                action: "read",
                path: path.clone(),
                source,
            })?;
            let file: PlanFile = serde_json::from_str(&text)
                .map_err(|e| failed!("{}: not a plan file: {e}", path.display()))?;
            let mut offsets = ref_offsets.clone();
            for t in &file.tensors {
                let i = names
                    .iter()
                    .position(|n| *n == t.name)
                    .ok_or_else(|| failed!("{}: no tensor `{}`", path.display(), t.name))?;
                if offsets[i].is_none() {
                    bail!(
                        "{}: tensor `{}` is not an arena tensor",
                        path.display(),
                        t.name
                    );
                }
                offsets[i] = Some(t.offset);
            }
            let end = offsets
                .iter()
                .enumerate()
                .filter_map(|(i, o)| o.map(|o| o + model.tensors[i].bytes))
                .max()
                .unwrap_or(0);
            let arena = file.arena_bytes.unwrap_or(end).max(end);
            (
                None,
                offsets,
                arena,
                (0..model.ops.len()).collect::<Vec<_>>(),
                "file".to_string(),
                path.display().to_string(),
            )
        }
        None => {
            let overlaps = match req.overlap.method() {
                None => Overlaps::compute(&model, &traced),
                Some(method) => Overlaps::compute(&model, &method),
            };
            let plan = planner::run(&model, kind, &overlaps, &opts)?;
            if plan.tensors.is_empty() {
                bail!(
                    "planner {} does not apply to this model: {}",
                    kind.name(),
                    plan.note.clone().unwrap_or_default()
                );
            }
            let offsets = offsets_of(&model, &plan);
            let arena = arena_of(&plan, &model);
            let order = plan.order.clone();
            let overlap = plan.overlap.clone();
            (
                Some(plan),
                offsets,
                arena,
                order,
                kind.name().to_string(),
                overlap,
            )
        }
    };
    let plan_out = execute(
        &image,
        &model,
        &order,
        &offsets,
        arena_bytes,
        req,
        input_data.as_deref(),
        req.plot
            .as_ref()
            .map(|_| format!("{planner_name} ({overlap_name})")),
    )?;
    if let (Some(path), Some(a), Some(b)) = (&req.plot, &ref_out.trace, &plan_out.trace) {
        memtrace_analyzer::verify::plot::render(&[a, b], path)?;
    }
    let mismatched = ref_out
        .outputs
        .iter()
        .zip(&plan_out.outputs)
        .filter(|(a, b)| a != b)
        .count() as u64
        + (ref_out.outputs.len() as i64 - plan_out.outputs.len() as i64).unsigned_abs();
    let clobbers: Vec<Clobber> = plan_out.shadow.clobbers.clone();
    let report = VerifyReport {
        model: model.name.clone(),
        target: req.target.name().into(),
        seed: req.seed,
        reference: run_report(
            &model,
            "tflm-greedy",
            "none",
            &ref_offsets,
            ref_arena,
            Some(&reference),
            &ref_out,
        ),
        plan: run_report(
            &model,
            &planner_name,
            &overlap_name,
            &offsets,
            arena_bytes,
            plan.as_ref(),
            &plan_out,
        ),
        clobbers,
        bit_exact: mismatched == 0,
        mismatched_bytes: mismatched,
        output_bytes: ref_out.outputs.len() as u64,
        output_digest: memtrace_analyzer::verify::digest(&ref_out.outputs),
        output_hex: ref_out.outputs.iter().map(|b| format!("{b:02x}")).collect(),
        output_distinct_bytes: {
            let mut seen = [false; 256];
            ref_out
                .outputs
                .iter()
                .for_each(|&b| seen[b as usize] = true);
            seen.iter().filter(|&&x| x).count()
        },
        traced_overlaps: traced_report,
        seconds: started.elapsed().as_secs_f64(),
    };
    Ok(report)
}
