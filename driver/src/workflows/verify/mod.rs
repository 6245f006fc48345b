//! `memtrace verify`: a plan proven on real TensorFlow Lite Micro in the
//! emulator, with TFLM's own allocator and kernels.
//!
//! 1. The reference run: TFLM lays out the arena with its own greedy planner
//!    and runs the model; a shadow map watches every arena byte, and each
//!    operator's O_s is traced on the way (the `traced` source, from this
//!    kernel build or from `--overlap-from`'s) (`runs`).
//! 2. memtrace plans the model (with the scratch buffers TFLM gave each
//!    operator), or takes the plan a file or the model gives
//!    (`under_test`; TinySeg's transformed models in `tinyseg`), and
//!    writes it into a copy of the model as `OfflineMemoryAllocation`.
//! 3. The plan run: TFLM honours the offline plan; the shadow map finds any
//!    read of a byte that no longer holds its tensor, and the outputs must be
//!    bit-exact with the reference run's — and with PyPI `tflite-micro` on
//!    the host when it is installed ([`crate::runtime::oracle`]).
//!
//! [`verify`] does the three and fills the [`VerifyReport`]; with the plan
//! proven, it measures the arena a firmware must allocate ([`crate::workflows::deploy`]).

mod report;
mod runs;
mod subject;
mod tinyseg;
mod under_test;

pub use report::{KernelCheck, TensorPlacement, TflmOpOverlap, TflmRunReport, VerifyReport};
pub use under_test::placement_from_plan;

use std::path::PathBuf;

use crate::runtime::plan_file::PlanPick;
use crate::support::provenance::OverlapChoice;
use crate::support::spill::SpillOptions;
use std::time::Instant;

use memtrace_abi::Runtime;
use memtrace_analyzer::verify::{digest, mismatched_bytes};
use memtrace_model::planner::PlannerKind;
use memtrace_model::source::ModelSource;
use memtrace_model::tflite;
use memtrace_tracer::Arch;

use crate::runtime::kernels::Kernels;
use crate::runtime::plan_file::PlanProvenance;
use crate::runtime::scratch_needs;
use crate::runtime::trace_cache::TraceCache;
use crate::support::error::Result;
use crate::support::spill::{storage_op_instructions, SpillRun};
use crate::workflows::deploy::{measure_arena_on, Deployed, Deployment, MeasuredPlan};
use report::tensor_placements;
use runs::{check_arena_fits, foreign_overlaps, own_plan_run, plan_run, run_report, PlanSubject};
use subject::{greedy_prediction, Subject};
use under_test::{
    embedded_plan, plan_from_file, plan_from_planner, planned_reference_offsets,
    tinyseg_under_test, UnderTest,
};

/// What to verify, and how.
#[derive(Debug, Clone)]
pub struct VerifyOptions {
    /// The model: a `.tflite` file or a zoo model.
    pub model: ModelSource,
    /// Planner of the verified plan; `None`: the smallest plan of every
    /// planner ([`memtrace_model::planner::report::best`]), the one
    /// `plan --emit-offline` writes.
    pub planner: Option<PlannerKind>,
    /// O_s source of the plan.
    pub overlap: OverlapChoice,
    /// A placement file to verify instead of a planner's plan.
    pub plan: Option<PathBuf>,
    /// Seed of the generated input (and of zoo weights).
    pub seed: u64,
    /// Raw bytes of the graph inputs, concatenated in input order.
    pub input: Option<PathBuf>,
    /// Architecture of the runner.
    pub target: Arch,
    /// Kernel library of the runner.
    pub kernels: Kernels,
    /// Library whose traces give the plan's traced O_s (default: `kernels`).
    pub overlap_kernels: Option<Kernels>,
    /// The TFLM runner ELF (default: `harness-c/build/TARGET/` and the
    /// library's runner file).
    pub runner: Option<PathBuf>,
    /// Arena-wide trace picture of both runs.
    pub plot: Option<PathBuf>,
    /// Also time the plan's program without hooks.
    pub baseline: bool,
    /// Instruction budget of each run.
    pub max_instructions: u64,
    /// TinySeg's base planner and target (with `planner` = `tinyseg`).
    pub spill: SpillOptions,
    /// Check a `plan` file made for another kernel library than `kernels`
    /// (with a warning) instead of refusing it.
    pub allow_foreign_plan: bool,
    /// The files and budget check asked for once the plan is proven.
    pub deploy: Deployment,
    /// Runs kept from earlier verifies ([`crate::runtime::trace_cache::TraceCache`]).
    pub cache: TraceCache,
    /// Compare the outputs with the host oracle when one is installed
    /// (false: `--no-oracle`).
    pub oracle: bool,
    /// On real TFLM, verify the offline plan the model carries
    /// (`OfflineMemoryAllocation`) when it has one, instead of planning
    /// (the command line's choice when neither `--plan` nor `--planner`
    /// nor `--overlap` is given).
    pub embedded_plan: bool,
    /// Which plan of a `plan --format json` document with several `--plan`
    /// takes (`--planner` with `--plan`; default: the smallest, the one
    /// `--emit-offline` writes).
    pub pick: Option<PlanPick>,
}

impl VerifyOptions {
    /// The host oracle's Python when this verify compares with it.
    pub fn oracle_python(&self) -> Option<PathBuf> {
        self.oracle.then(crate::runtime::oracle::python).flatten()
    }
}

/// Verifies a plan on real TFLM (see the module docs).
pub fn verify(req: &VerifyOptions) -> Result<VerifyReport> {
    let started = Instant::now();
    let subject = Subject::load(req)?;
    let (mut reference, own_overlaps, own_report) = own_plan_run(req, &subject)?;
    let kernels = check_kernels(req, &subject, &reference.result)?;
    let overlap_kernels = req.overlap_kernels.unwrap_or(req.kernels);
    let (source_overlaps, traced_report) = if overlap_kernels == req.kernels {
        (own_overlaps, own_report)
    } else {
        foreign_overlaps(req, &subject, overlap_kernels)?
    };

    // 2. memtrace's plan, with TFLM's scratch buffers as tensors.
    let model = subject.model();
    let planned_model = model.with_scratch(&scratch_needs(&reference.result, model.ops.len()));
    // memtrace's tflm-greedy prediction of TFLM's head, with TFLM's scratch.
    let predicted = greedy_prediction(&planned_model)?;
    let mut warnings: Vec<String> = foreign_plan_warning(req, &subject).into_iter().collect();
    // TinySeg plans a transformed model, which TFLM runs instead of the
    // model under the plan.
    let tinyseg = match (&req.plan, req.planner) {
        (None, Some(PlannerKind::Tinyseg)) => Some(tinyseg::plan(
            req,
            &subject.file,
            &scratch_needs(&reference.result, model.ops.len()),
            &source_overlaps,
        )?),
        _ => None,
    };
    let (under_test, plan_taken) = choose_under_test(
        req,
        &subject,
        &planned_model,
        &reference.result,
        tinyseg.as_ref(),
        &source_overlaps,
        &mut warnings,
    )?;
    let mut offsets = under_test.offsets.clone();
    // What TFLM runs under the plan: the model, or TinySeg's transformation.
    let run_graph = match &tinyseg {
        Some(t) => {
            warnings.extend(t.warnings.iter().cloned());
            warnings.extend(crate::support::spill::target_missed(
                req.spill.target_bytes,
                t.optimized.steps.last().map(|s| s.peak_bytes),
            ));
            t.check_fits(&under_test, subject.arena_limit)?;
            &t.graph
        }
        None => {
            check_arena_fits(&under_test, &planned_model, subject.arena_limit)?;
            offsets.truncate(subject.graph().tensors.len());
            subject.graph()
        }
    };

    // 3. TFLM runs memtrace's plan, beside the host oracle.
    let readers = match &tinyseg {
        Some(t) => tinyseg::readers_after(&reference.readers, &t.optimized),
        None => reference.readers.clone(),
    };
    let transformed = tinyseg.as_ref().map(|t| t.bytes.as_slice());
    let (mut planned, oracle) = plan_run(
        req,
        &subject,
        PlanSubject {
            transformed,
            readers: &readers,
            storage: tinyseg.is_some(),
        },
        &reference,
        &under_test,
        &offsets,
    )?;
    if let Some(path) = &req.plot {
        draw_both_runs(path, &mut reference, &mut planned, &under_test)?;
    }
    let a = &reference.result.output_bytes;
    let b = &planned.result.output_bytes;
    let mismatched = mismatched_bytes(a, b);
    let planned_bytes = under_test.arena;
    let arena_to_allocate = deploy_figures(req, &subject, transformed, &under_test, &offsets)?;
    let tinyseg_report = tinyseg
        .as_ref()
        .map(|t| spill_report(req, t, &planned, &reference));
    let mut report = VerifyReport {
        model: req.model.clone(),
        runtime: Runtime::Tflm,
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
        unwritten_reads: planned.unwritten_reads.clone(),
        bit_exact: mismatched == 0,
        mismatched_bytes: mismatched,
        output_bytes: a.len() as u64,
        output_digest: digest(a),
        output_hex: a.iter().map(|x| format!("{x:02x}")).collect(),
        kernel_check: kernels.contract,
        scratch_sizing: kernels.scratch,
        reference_kernels: kernels.against_reference,
        reference_kernels_not_compared: kernels.not_compared,
        oracle,
        oracle_off: !req.oracle,
        traced_overlaps: traced_report,
        tensors: tensor_placements(
            run_graph,
            &offsets,
            tinyseg.as_ref().map(|t| t.original.as_slice()),
            &reference.result,
            &planned.result,
        ),
        embedded_plan_tensors: subject
            .embedded()
            .map(|o| o.iter().filter(|&&v| v >= 0).count()),
        embedded_plan_origin: subject.origin.clone(),
        plan_taken,
        warnings,
        seconds: started.elapsed().as_secs_f64(),
        tinyseg: tinyseg_report,
        plan_model: arena_to_allocate.1,
        arena_to_allocate: arena_to_allocate.0,
        budget: None,
        deployed: Deployed::default(),
    };
    report.deployed = req.deploy.finish(
        report.ok(),
        &report.plan_model,
        &report.arena_to_allocate,
        &report.model.to_string(),
    )?;
    report.budget = report.deployed.budget;
    Ok(report)
}

/// The loud warning for a model whose embedded plan memtrace made for
/// other kernels than this verify's, if it is one.
fn foreign_plan_warning(req: &VerifyOptions, subject: &Subject) -> Option<String> {
    subject.origin.as_ref()?.foreign_kernels_warning(
        req.kernels,
        &format!(
            "This verify checks it on {k}; to deploy on {k}, re-plan for them (`memtrace plan \
             MODEL --kernels {k} --emit-offline OUT`)",
            k = req.kernels.name()
        ),
    )
}

/// The plan under test: TinySeg's, a plan file's (with its notes added to
/// `warnings`, and which plan of the file was taken), the model's
/// embedded one, or a planner's.
fn choose_under_test(
    req: &VerifyOptions,
    subject: &Subject,
    planned_model: &memtrace_model::Model,
    reference: &memtrace_abi::runner::TflmResult,
    tinyseg: Option<&tinyseg::TinysegPlan>,
    source_overlaps: &memtrace_model::planner::TracedOverlaps,
    warnings: &mut Vec<String>,
) -> Result<(UnderTest, Option<String>)> {
    Ok(match (&req.plan, subject.embedded()) {
        _ if tinyseg.is_some() => (tinyseg_under_test(req, tinyseg)?, None),
        (Some(path), _) => {
            let reference_offsets = planned_reference_offsets(planned_model, reference);
            let (under_test, notes, taken) = plan_from_file(
                req,
                &subject.file,
                path,
                planned_model,
                &reference_offsets,
                subject.graph().tensors.len(),
            )?;
            warnings.extend(notes);
            (under_test, taken)
        }
        (None, Some(embedded)) if req.embedded_plan => {
            (embedded_plan(planned_model, embedded)?, None)
        }
        _ => (
            plan_from_planner(req, planned_model, source_overlaps)?,
            None,
        ),
    })
}

/// `--plot`: TFLM's own plan and the plan under test, side by side, each
/// panel stating its own plan's sizes (both drawn on the larger extent).
fn draw_both_runs(
    path: &std::path::Path,
    reference: &mut runs::ShadowRun,
    planned: &mut runs::ShadowRun,
    under_test: &UnderTest,
) -> Result<()> {
    let reference_head = reference.result.head_bytes;
    let planned_head = planned.result.head_bytes;
    if let (Some(a), Some(b)) = (reference.trace.as_mut(), planned.trace.as_mut()) {
        a.title = format!("TFLM's own plan: head {reference_head} B");
        b.title = format!(
            "{} ({}) on TFLM: {} B planned, head {planned_head} B",
            under_test.planner, under_test.overlap, under_test.arena
        );
        memtrace_analyzer::plot::arena::render(&[a, b], path)?;
    }
    Ok(())
}

/// What TinySeg's transformed model did on TFLM: its storage, the storage
/// operators' cost, its instructions against the reference run's.
fn spill_report(
    req: &VerifyOptions,
    t: &tinyseg::TinysegPlan,
    planned: &runs::ShadowRun,
    reference: &runs::ShadowRun,
) -> memtrace_analyzer::tinyseg::SpillReport {
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
}

/// The arena a firmware must allocate for the plan under test, written into
/// `transformed` (TinySeg's model) or the model itself, and that model
/// (TFLM's refusal of it at any arena is a note, not an error: the proof
/// above already says what failed).
fn deploy_figures(
    req: &VerifyOptions,
    subject: &Subject,
    transformed: Option<&[u8]>,
    under_test: &UnderTest,
    offsets: &[i64],
) -> Result<(MeasuredPlan, Vec<u8>)> {
    // The plan's provenance goes into the model, as `plan --emit-offline`
    // writes it: `run` and `verify` of the written model then say whose it is.
    let note = PlanProvenance {
        planner: Some(under_test.planner.clone()),
        ..PlanProvenance::new(
            &subject.file,
            req.kernels,
            req.target,
            Runtime::Tflm,
            req.overlap,
        )?
    }
    .to_metadata()?;
    // TinySeg's transformed model, or the file from its one decode.
    let model = match transformed {
        Some(bytes) => tflite::emit_offline_noted(bytes, offsets, Some(&note))?,
        None => subject.file.with_offline(offsets, Some(&note))?,
    }
    .bytes;
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

/// With CMSIS-NN's kernels, every operator against TFLM's reference kernels
/// on the same core ([`crate::runtime::compare_operators`]): the comparison,
/// or why it was not made. Beside an explicit `--runner`
/// (`…/tflm-runner-cmsis<suffix>.elf`), the reference runner is
/// `tflm-runner<suffix>.elf` of the same folder.
/// What verify found of the kernels themselves, apart from any plan.
struct KernelFindings {
    /// The memory contract, in a red-zoned run.
    contract: KernelCheck,
    /// Each operator's scratch sized from its shapes against what it asked.
    scratch: memtrace_model::scratch_sizing::ScratchSizing,
    /// CMSIS-NN's outputs against the reference kernels', per operator.
    against_reference: Option<crate::runtime::OperatorComparison>,
    /// Why they were not compared, when they were not.
    not_compared: Option<String>,
}

/// The kernels' contract in a red-zoned run (where no neighbour can hide
/// an overrun), their scratch against TFLM's `reference` run, and
/// CMSIS-NN's outputs against the reference kernels'.
fn check_kernels(
    req: &VerifyOptions,
    subject: &Subject,
    reference: &memtrace_abi::runner::TflmResult,
) -> Result<KernelFindings> {
    let (against_reference, not_compared) = against_reference_kernels(req, subject)?;
    let zoned = Instant::now();
    let contract = KernelCheck::of(
        &crate::runtime::red_zoned_check(
            &subject.image,
            subject.bytes(),
            &subject.inputs,
            req.max_instructions,
            crate::support::common::access_path(false),
            None,
        )?,
        zoned.elapsed().as_secs_f64(),
    );
    let scratch = crate::runtime::size_scratch(
        subject.model(),
        subject.graph(),
        req.kernels,
        req.target,
        reference,
    );
    Ok(KernelFindings {
        contract,
        scratch,
        against_reference,
        not_compared,
    })
}

fn against_reference_kernels(
    req: &VerifyOptions,
    subject: &Subject,
) -> Result<(Option<crate::runtime::OperatorComparison>, Option<String>)> {
    if req.kernels != Kernels::CmsisNn {
        return Ok((None, None));
    }
    let reference = match &req.runner {
        Some(explicit) => {
            let name = explicit.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let sibling = name
                .strip_prefix("tflm-runner-cmsis")
                .map(|rest| explicit.with_file_name(format!("tflm-runner{rest}")));
            match sibling {
                Some(p) if p.is_file() => crate::runtime::load_runner(&p, Kernels::Tflm),
                Some(p) => {
                    return Ok((
                        None,
                        Some(format!("no reference-kernels runner at {}", p.display())),
                    ))
                }
                None => {
                    return Ok((
                        None,
                        Some(format!(
                            "--runner {} is not named tflm-runner-cmsis*.elf, so its \
                             reference-kernels runner is unknown",
                            explicit.display()
                        )),
                    ))
                }
            }
        }
        // The runner there is: a verify does not build a second runner
        // for the comparison (that would double a first verify's wait).
        None => crate::runtime::target_runner(req.target, Kernels::Tflm, None, "--runner", None)
            .map(|(_, image)| image),
    };
    let reference = match reference {
        Ok(image) => image,
        Err(e) => return Ok((None, Some(e.to_string()))),
    };
    let compared = crate::runtime::compare_operators(
        &subject.image,
        &reference,
        subject.graph(),
        subject.bytes(),
        &subject.inputs,
        req.max_instructions,
    );
    Ok(match compared {
        Ok(c) => (Some(c), None),
        Err(e) => (None, Some(format!("{e:#}"))),
    })
}
