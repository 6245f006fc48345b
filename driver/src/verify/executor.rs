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

use std::path::Path;
use std::time::Instant;

use memtrace_analyzer::shadow::Clobber;
use memtrace_analyzer::verify::{
    digest, mismatched_bytes, KernelsComparison, PlacedTensorReport, PlanRunReport,
    UsedOverlapReport, VerifyReport,
};
use memtrace_model::planner::{self, Overlaps, Plan, PlanOptions, PlannerKind, TracedOverlaps};
use memtrace_model::{Accumulator, Model};
use memtrace_tracer::ElfImage;

use super::{read_plan_file, VerifyOptions};
use crate::common::{check_output, load_model};
use crate::error::{Context, Result};
use crate::executor_run::{executor, ExecutorRun, Outcome, Placement, Watch};
use crate::kernels::Kernels;
use crate::provenance::{OverlapChoice, OverlapProvenance};
use crate::reference::{cached_reference_run, traced_overlaps, Reference};
use crate::spill::{transform, SpillRun};
use crate::{bail, failed};

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
    let names = model.tensor_names();
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
            outputs: r.run.outcome.outputs.clone(),
            traced: Some(r),
        });
    }
    Ok(ReferenceKernels {
        outputs: library_outputs(req, Kernels::Tflm, base, input)?,
        traced: None,
    })
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
    let py = match req.oracle_python() {
        Some(py) if req.accumulator == Accumulator::Int32 => py,
        _ => return Ok(None),
    };
    let bytes = crate::tflm::model_bytes(&req.model, req.seed)?;
    let layout: Vec<_> = model
        .outputs
        .iter()
        .map(|&t| crate::oracle::OutputLayout {
            name: model.tensors[t].name.clone(),
            dtype: Some(model.tensors[t].dtype),
            bytes: model.tensors[t].bytes,
        })
        .collect();
    crate::oracle::compare(
        &py,
        &bytes,
        model.inputs.len(),
        &layout,
        &reference.inputs,
        &reference.outputs,
    )
    .map(Some)
}

/// Layers of a reference run that read back their own output.
fn output_readers(r: &Reference) -> Vec<String> {
    let layers = &r.run.outcome.layers;
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
    let read = read_plan_file(path, &r.model, &r.placement.offsets, req)?;
    warnings.extend(read.warnings);
    // The report's plan column names the file, and which plan of a `plan`
    // document was taken.
    let source = match &read.taken {
        Some((taken, _)) => format!("{}: {taken}", path.display()),
        None => path.display().to_string(),
    };
    let (offsets, arena_bytes) = (read.offsets, read.arena);
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
        overlap: source,
    })
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
    if req.planner == Some(PlannerKind::Tinyseg) {
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
    let options = PlanOptions::default();
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
    Ok(PlanUnderTest {
        placement: Placement::of(&plan, model),
        planner: name.to_string(),
        cached: false,
        overlap: plan.overlap.clone(),
        plan: Some(plan),
        model: None,
        spill: None,
    })
}

/// The warning for a `.tflite` that carries an offline plan: memtrace's
/// executor places the tensors itself, so that plan (whose it is said) is
/// not the one checked here.
fn embedded_plan_note(model: &str) -> Result<Option<String>> {
    if model.starts_with("zoo:") {
        return Ok(None);
    }
    let bytes = crate::tflm::model_bytes(model, 1)?;
    if memtrace_model::tflite::read_offline(&bytes)
        .with_context(|| format!("reading {model}"))?
        .is_none()
    {
        return Ok(None);
    }
    Ok(Some(format!(
        "{model} carries an embedded offline plan (OfflineMemoryAllocation), {}; memtrace's \
         executor places the tensors itself and does not check it: `--runtime tflm` verifies it",
        crate::plan_file::EmbeddedOrigin::of(&bytes).describe()
    )))
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
    let mut warnings: Vec<String> = embedded_plan_note(&req.model)?.into_iter().collect();
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
    let ref_out = &reference.run.outcome;
    if let (Some(path), Some(a), Some(b)) = (&req.plot, &ref_out.trace, &plan_out.trace) {
        memtrace_analyzer::plot::arena::render(&[a, b], path)?;
    }
    let mismatched = mismatched_bytes(&ref_out.outputs, &plan_out.outputs);
    let reference_kernels = tflm.as_ref().map(|t| {
        let m = mismatched_bytes(&t.outputs, &ref_out.outputs);
        KernelsComparison {
            against: Kernels::Tflm,
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
        target: req.target,
        seed: req.seed,
        kernels: req.kernels,
        executor: image.path.display().to_string(),
        overlap_kernels,
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
                storage_op_instructions: crate::spill::storage_op_instructions(
                    plan_out
                        .layers
                        .iter()
                        .map(|l| (l.op.as_str(), l.instructions)),
                ),
                instructions: (plan_out.instructions, ref_out.instructions),
                planning_seconds: *seconds,
            }
            .report()
        }),
        warnings,
    })
}
