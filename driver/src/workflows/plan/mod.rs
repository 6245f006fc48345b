//! Arena planning (`memtrace plan`): every arena planner on one model, side by side (the DMO
//! paper's Table III), each plan checked by the independent validator.
//!
//! What `plan` found is in `report` ([`PlanReport`]); `suite` traces O_s
//! through a kernel suite (`--suite`, [`traced`]); `emit` makes the best
//! plan deployable: written into a copy of the model, its arena measured on
//! real TFLM, and the files `--emit-offline` writes; `targets` combines
//! what several cores traced into one plan for all of them
//! (`--target CORE,CORE,…`).

mod emit;
mod report;
mod suite;
mod targets;

pub use report::{PlanOutcome, PlanReport};
pub use suite::traced;

use std::path::{Path, PathBuf};

use memtrace_abi::Runtime;
use memtrace_analyzer::plot::plan::{plot_comparison, plot_plan};
use memtrace_analyzer::tinyseg::TinysegPlan;
use memtrace_model::planner::report::{compare, compare_all};
use memtrace_model::planner::{OverlapSource, Overlaps, PlanOptions, PlannerKind};
use memtrace_model::source::ModelSource;
use memtrace_model::Model;
use memtrace_tracer::{Arch, ElfImage};

use crate::bail;
use crate::runtime::kernels::{library_of, Kernels};
use crate::runtime::plan_file::PlanProvenance;
use crate::runtime::trace_cache::TraceCache;
use crate::runtime::PlanInputs;
use crate::support::common::check_output;
use crate::support::error::{Context, Result};
use crate::support::provenance::{OverlapChoice, OverlapProvenance};
use crate::support::spill::{transform, SpillOptions};
use crate::workflows::deploy::{Budget, MeasuredPlan};
use emit::{deployable, emit};

/// What to plan and what to write.
#[derive(Debug, Clone)]
pub struct PlanRequest {
    /// The model: a `.tflite` file or a zoo model.
    pub model: ModelSource,
    /// One planner, or all of them.
    pub planner: Option<PlannerKind>,
    /// Where O_s comes from (default: traced on real TFLM).
    pub overlap: Option<OverlapChoice>,
    /// Write `emit_offline` even when the O_s model another library's loop
    /// nests than `kernels` (`--allow-foreign-overlap`).
    pub allow_foreign_overlap: bool,
    /// Kernel library the plan is for: its scratch buffers become tensors,
    /// and traced O_s come from its suite.
    pub kernels: Kernels,
    /// The core the plan is for: real TFLM's runner of that target traces
    /// the model and measures the arena.
    pub target: Arch,
    /// Further cores the one plan must hold on: each operator gets its
    /// smallest O_s and its largest scratch over `target` and these, and
    /// the arena to allocate is the largest measured on any of them.
    pub more_targets: Vec<Arch>,
    /// Kernel suite traced for [`OverlapChoice::Traced`] (default: the
    /// library's Cortex-M4 suite).
    pub suite: Option<PathBuf>,
    /// Picture of every plan.
    pub plot: Option<PathBuf>,
    /// A copy of the model with the best plan as `OfflineMemoryAllocation`.
    pub emit_offline: Option<PathBuf>,
    /// Offsets and sizes are multiples of this.
    pub alignment: u64,
    /// TinySeg's options (with `planner` = `tinyseg`).
    pub spill: SpillOptions,
    /// Traced O_s kept from earlier runs ([`TraceCache`]).
    pub cache: TraceCache,
    /// The firmware's arena budget in bytes (`--fits`).
    pub fits: Option<u64>,
}

impl PlanRequest {
    /// Every core the plan is for: `target`, then `more_targets`.
    pub fn targets(&self) -> Vec<Arch> {
        std::iter::once(self.target)
            .chain(self.more_targets.iter().copied())
            .collect()
    }
}

/// The O_s source of `req` and whose loop nests it models: traces model the
/// library of the traced suite (read from its symbols), the algorithmic and
/// analytic methods TFLM's reference kernels.
fn provenance(req: &PlanRequest) -> Result<(OverlapProvenance, Option<PathBuf>)> {
    // On TFLM the model's own run traces every operator: the O_s verify
    // proves by default.
    let source = req.overlap.unwrap_or(OverlapChoice::Traced);
    let (modelled, suite) = match source {
        OverlapChoice::Traced => match &req.suite {
            Some(suite) => (
                Some(library_of(&ElfImage::load(suite)?)),
                Some(suite.clone()),
            ),
            // The model's own run on the library's TFLM runner.
            None => (Some(req.kernels), None),
        },
        OverlapChoice::Algorithmic | OverlapChoice::Analytic => (Some(Kernels::Tflm), None),
        OverlapChoice::None => (None, None),
    };
    let provenance = OverlapProvenance {
        kernels: req.kernels,
        source,
        modelled,
    };
    Ok((provenance, suite))
}

/// Every requested planner on the model, side by side; draws and emits what
/// was asked for. An O_s source that models another library than
/// `req.kernels` is refused for `emit_offline` unless
/// `allow_foreign_overlap`, and warned about in the report.
pub fn plan(req: &PlanRequest) -> Result<PlanReport> {
    check_requested_outputs(req)?;
    let (provenance, suite) = provenance(req)?;
    // Zoo models get verify's seeded weights (seed 1).
    let file = crate::runtime::open_model(&req.model, 1)?;
    let plan_provenance = PlanProvenance::for_targets(
        &file,
        req.kernels,
        &req.targets(),
        Runtime::Tflm,
        provenance.source,
    )?;
    let warnings: Vec<String> = provenance.warning().into_iter().collect();
    if provenance.is_foreign() && req.emit_offline.is_some() && !req.allow_foreign_overlap {
        bail!(
            "refusing to --emit-offline a plan for {}: {} (pass --allow-foreign-overlap to \
             write it anyway)",
            req.kernels.name(),
            provenance.warning().unwrap_or_default()
        );
    }
    let model = file
        .model()
        .with_context(|| format!("loading {}", req.model))?;
    let file_tensors = model.tensors.len();
    // The model itself traced on real TFLM: its scratch buffers, and with a
    // traced source every operator's O_s (with --suite, those the suite
    // does not run), on every core the plan is for.
    let traced_run = targets::plan_inputs_on_every_target(
        &file,
        model.ops.len(),
        req.kernels,
        &req.targets(),
        &req.cache,
    )?;
    let model = model.with_scratch(&traced_run.scratch);
    let overlaps = overlaps_of(req, &model, &provenance, suite.as_deref(), &traced_run)?;
    let opts = PlanOptions {
        alignment: req.alignment.max(1),
        // TFLM runs the operators in the model's order.
        model_order_only: true,
        ..PlanOptions::default()
    };
    let report = |outcome, warnings, emitted, deploy, budget, op_overlap_bytes| PlanReport {
        outcome,
        provenance,
        warnings,
        emitted,
        op_overlap_bytes,
        deploy,
        budget,
        plan_provenance: plan_provenance.clone(),
    };
    if req.planner == Some(PlannerKind::Tinyseg) {
        let (outcome, warnings) = tinyseg_plan(req, &model, &overlaps, &opts, warnings)?;
        return Ok(report(outcome, warnings, None, None, None, overlaps.per_op));
    }
    let comparison = match req.planner {
        None => compare_all(&model, &overlaps, &opts)?,
        Some(kind) => compare(&model, &overlaps, &[(kind, kind.uses_overlap())], &opts)?,
    };
    if let Some(path) = &req.plot {
        plot_comparison(&model, &comparison, path)?;
    }
    let deployable = deployable(
        req,
        &file,
        &model,
        file_tensors,
        &comparison,
        &plan_provenance,
    )?;
    let deploy = deployable.as_ref().map(|d| d.measured.clone());
    let budget = budget_of(req.fits, deploy.as_ref())?;
    let emitted = match (&req.emit_offline, deployable) {
        (Some(dest), Some(d)) => Some(emit(req, &d, budget, dest)?),
        (Some(_), None) => bail!("no plan to emit"),
        (None, _) => None,
    };
    Ok(report(
        PlanOutcome::Comparison(comparison),
        warnings,
        emitted,
        deploy,
        budget,
        overlaps.per_op,
    ))
}

/// Refuses, before any run, what `req` asks to write that it may not: an
/// `--emit-offline` or `--plot` over its own model or a file memtrace does
/// not own, or an `--emit-offline` of a zoo model (which has no file).
fn check_requested_outputs(req: &PlanRequest) -> Result<()> {
    if let Some(why) = req
        .emit_offline
        .as_deref()
        .and_then(crate::workflows::deploy::deployment_refusal)
    {
        bail!("{why}");
    }
    let inputs: Vec<&Path> = req.model.path().into_iter().collect();
    for path in req.plot.iter().chain(&req.emit_offline) {
        check_output(path, &inputs)?;
    }
    if let Some(dest) = &req.emit_offline {
        let inputs: Vec<&Path> = inputs.iter().copied().chain([dest.as_path()]).collect();
        check_output(&crate::workflows::deploy::header_path(dest), &inputs)?;
    }
    if req.emit_offline.is_some() && req.model.is_zoo() {
        bail!("--emit-offline needs a .tflite model to copy; a zoo model has none");
    }
    Ok(())
}

/// Each operator's O_s from the source `provenance` names: a method, the
/// `suite`'s traces (operators it does not run keep the O_s traced on
/// TFLM), or the model's own traced run.
fn overlaps_of(
    req: &PlanRequest,
    model: &Model,
    provenance: &OverlapProvenance,
    suite: Option<&Path>,
    traced_run: &PlanInputs,
) -> Result<Overlaps> {
    Ok(match (provenance.source.method(), suite) {
        (Some(method), _) => Overlaps::compute(model, &method as &dyn OverlapSource),
        (None, Some(suite)) => {
            // Operators the suite does not run (RESHAPE, SOFTMAX, ...) keep
            // the O_s traced on TFLM.
            let mut from_suite = traced(model, suite, &req.cache)?;
            from_suite.by_op = traced_run
                .overlaps
                .by_op
                .iter()
                .filter(|(&op, _)| model.layer_spec(op).is_none())
                .map(|(&op, &bytes)| (op, bytes))
                .collect();
            Overlaps::compute(model, &from_suite)
        }
        (None, None) => Overlaps::compute(model, &traced_run.overlaps),
    })
}

/// `--planner tinyseg`: TinySeg's transformation planned (and drawn), with
/// what it could not do added to `warnings`.
fn tinyseg_plan(
    req: &PlanRequest,
    model: &Model,
    overlaps: &Overlaps,
    opts: &PlanOptions,
    mut warnings: Vec<String>,
) -> Result<(PlanOutcome, Vec<String>)> {
    if req.emit_offline.is_some() {
        // The transformed model is only worth writing once TFLM ran it
        // with the scratch its kernels actually ask for.
        bail!(
            "--emit-offline with --planner tinyseg: use `memtrace verify MODEL.tflite \
             --planner tinyseg --emit-offline OUT.tflite`, which writes the transformed model \
             (TinySeg's storage operators as custom operators) once TFLM ran it"
        );
    }
    let seed = req.model.is_zoo().then_some(1);
    let (spill, warning) =
        crate::support::spill::for_tflm(model, overlaps, &req.spill, opts, seed)?;
    warnings.extend(warning);
    let (optimized, seconds) = transform(model, overlaps, &spill, opts, seed)?;
    if let Some(path) = &req.plot {
        plot_plan(&optimized.graph.model, &optimized.plan, path)?;
    }
    let report = TinysegPlan::new(&optimized, req.spill.target_bytes, seconds);
    warnings.extend(crate::support::spill::target_missed(
        req.spill.target_bytes,
        optimized.plan.peak_bytes,
    ));
    Ok((PlanOutcome::Tinyseg(Box::new(report)), warnings))
}

/// `--fits`: the budget against the arena to allocate, which must have been
/// measured.
fn budget_of(fits: Option<u64>, deploy: Option<&MeasuredPlan>) -> Result<Option<Budget>> {
    Ok(match (fits, deploy) {
        (None, _) => None,
        (Some(budget_bytes), Some(MeasuredPlan { arena: Some(a), .. })) => Some(Budget {
            budget_bytes,
            arena_bytes: a.bytes,
        }),
        (Some(_), d) => bail!(
            "--fits needs the arena to allocate, which was not measured: {}",
            d.and_then(|d| d.not_measured.clone())
                .unwrap_or_else(|| "no plan applies".into())
        ),
    })
}
