//! Arena planning (`memtrace plan`): every arena planner on one model, side by side (the DMO
//! paper's Table III), each plan checked by the independent validator.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use memtrace_abi::LayerSpec;
use memtrace_analyzer::plot::plan::{plot_comparison, plot_plan};
use memtrace_analyzer::tinyseg::TinysegPlan;
use memtrace_model::planner::overlap::TracedOverlaps;
use memtrace_model::planner::report::{compare, compare_all, Comparison};
use memtrace_model::planner::{OverlapSource, Overlaps, PlanOptions, PlannerKind};
use memtrace_model::{tflite, Model};
use memtrace_tracer::{Arch, ElfImage};

use crate::bail;
use crate::common::{check_output, threads};
use crate::deploy::{measure_arena, Budget, MeasuredPlan};
use crate::error::{Context, Result};
use crate::kernels::{library_of, Kernels};
use crate::plan_file::PlanProvenance;
use crate::provenance::{OverlapChoice, OverlapProvenance};
use crate::spill::{transform, SpillOptions};
use crate::sweep::{Depth, Sweep};
use crate::trace_cache::TraceCache;

/// What to plan and what to write.
#[derive(Debug, Clone)]
pub struct PlanRequest {
    /// A `.tflite` file or `zoo:NAME`.
    pub model: String,
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

/// What `memtrace plan` found, and for which library and O_s source.
#[derive(Debug)]
pub struct PlanReport {
    /// The plans.
    pub outcome: PlanOutcome,
    /// The library the plans are for and whose loop nests their O_s model.
    pub provenance: OverlapProvenance,
    /// What the user must know (a foreign O_s source); printed on stderr by
    /// the binary and recorded in the JSON as `warnings`.
    pub warnings: Vec<String>,
    /// With `emit_offline`: a line saying what was written.
    pub emitted: Option<String>,
    /// The O_s the plans with overlaps credited, per operator index (0
    /// where the source has none).
    pub op_overlap_bytes: Vec<u64>,
    /// The arena a firmware must allocate for the best plan (the one
    /// `--emit-offline` writes), measured on real TFLM, or why not.
    pub deploy: Option<MeasuredPlan>,
    /// `--fits`: the arena to allocate against the budget.
    pub budget: Option<Budget>,
    /// Model digest, kernels, target and TFLM build the plans are for
    /// (`verify --plan` checks them).
    pub plan_provenance: PlanProvenance,
}

impl PlanReport {
    /// Text table, then the arena to allocate and the budget.
    pub fn to_table(&self) -> String {
        let mut s = self.outcome.to_table();
        if let Some(d) = &self.deploy {
            s += &d.to_text();
        }
        if let Some(b) = &self.budget {
            s += &format!("{}\n", b.message());
        }
        s
    }

    /// Pretty JSON with a final newline: the outcome's document with
    /// `kernels` (the library the plans are for), `overlap_source`,
    /// `overlap_kernels` (whose loop nests the O_s model, `null` for none),
    /// `foreign_overlap`, `warnings` and `op_overlap_bytes` (the O_s per
    /// operator index) added.
    pub fn to_json(&self) -> Result<String> {
        let text = match &self.outcome {
            PlanOutcome::Comparison(c) => serde_json::to_string_pretty(&self.document(c))?,
            PlanOutcome::Tinyseg(t) => serde_json::to_string_pretty(&self.document(t.as_ref()))?,
        };
        Ok(text + "\n")
    }

    fn document<'a, T: serde::Serialize>(&'a self, outcome: &'a T) -> Document<'a, T> {
        let p = &self.provenance;
        Document {
            outcome,
            kernels: p.kernels.name(),
            overlap_source: p.source.name(),
            overlap_kernels: p.modelled.map(|k| k.name()),
            foreign_overlap: p.is_foreign(),
            warnings: &self.warnings,
            op_overlap_bytes: &self.op_overlap_bytes,
            arena_to_allocate: self.deploy.as_ref(),
            budget: self.budget.as_ref(),
            provenance: &self.plan_provenance,
        }
    }
}

/// The JSON document of a [`PlanReport`]: the outcome's fields, then the
/// provenance (serialised in this order).
#[derive(serde::Serialize)]
struct Document<'a, T: serde::Serialize> {
    #[serde(flatten)]
    outcome: &'a T,
    kernels: &'a str,
    overlap_source: &'a str,
    overlap_kernels: Option<&'a str>,
    foreign_overlap: bool,
    warnings: &'a [String],
    op_overlap_bytes: &'a [u64],
    arena_to_allocate: Option<&'a MeasuredPlan>,
    budget: Option<&'a Budget>,
    provenance: &'a PlanProvenance,
}

/// What `memtrace plan` found.
#[derive(Debug)]
pub enum PlanOutcome {
    /// The planners side by side.
    Comparison(Comparison),
    /// TinySeg's steps and final plan.
    Tinyseg(Box<TinysegPlan>),
}

impl PlanOutcome {
    /// Text table.
    pub fn to_table(&self) -> String {
        match self {
            PlanOutcome::Comparison(c) => c.to_table(),
            PlanOutcome::Tinyseg(t) => t.to_table(),
        }
    }

    /// Pretty JSON with a final newline.
    pub fn to_json(&self) -> Result<String> {
        Ok(match self {
            PlanOutcome::Comparison(c) => serde_json::to_string_pretty(c)?,
            PlanOutcome::Tinyseg(t) => serde_json::to_string_pretty(t)?,
        } + "\n")
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
    for path in req.plot.iter().chain(&req.emit_offline) {
        check_output(path, &[Path::new(&req.model)])?;
    }
    if let Some(dest) = &req.emit_offline {
        check_output(
            &crate::deploy::header_path(dest),
            &[Path::new(&req.model), dest],
        )?;
    }
    if req.emit_offline.is_some() && req.model.starts_with("zoo:") {
        bail!("--emit-offline needs a .tflite model to copy; a zoo model has none");
    }
    let (provenance, suite) = provenance(req)?;
    let plan_provenance = PlanProvenance::new(
        &req.model,
        req.kernels,
        req.target,
        "tflm",
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
    let model = crate::tflm::load_for_tflm(&req.model)?;
    let file_tensors = model.tensors.len();
    // The model itself traced on real TFLM: its scratch buffers, and with a
    // traced source every operator's O_s (with --suite, those the suite
    // does not run).
    let traced_run = crate::tflm::plan_inputs(
        &req.model,
        model.ops.len(),
        req.kernels,
        req.target,
        &req.cache,
    )?;
    let model = model.with_scratch(&traced_run.scratch);
    let overlaps = match (provenance.source.method(), &suite) {
        (Some(method), _) => Overlaps::compute(&model, &method as &dyn OverlapSource),
        (None, Some(suite)) => {
            // Operators the suite does not run (RESHAPE, SOFTMAX, ...) keep
            // the O_s traced on TFLM.
            let mut from_suite = traced(&model, suite, &req.cache)?;
            from_suite.by_op = traced_run
                .overlaps
                .by_op
                .iter()
                .filter(|(&op, _)| model.layer_spec(op).is_none())
                .map(|(&op, &bytes)| (op, bytes))
                .collect();
            Overlaps::compute(&model, &from_suite)
        }
        (None, None) => Overlaps::compute(&model, &traced_run.overlaps),
    };
    let opts = PlanOptions {
        alignment: req.alignment.max(1),
        // TFLM runs the operators in the model's order.
        model_order_only: true,
        ..PlanOptions::default()
    };
    if req.planner == Some(PlannerKind::Tinyseg) {
        if req.emit_offline.is_some() {
            // The transformed model is only worth writing once TFLM ran it
            // with the scratch its kernels actually ask for.
            bail!(
                "--emit-offline with --planner tinyseg: use `memtrace verify MODEL.tflite \
                 --planner tinyseg --emit-offline OUT.tflite`, which writes the transformed model \
                 (TinySeg's storage operators as custom operators) once TFLM ran it"
            );
        }
        // Zoo models get verify's seeded weights.
        let seed = req.model.starts_with("zoo:").then_some(1);
        let mut warnings = warnings;
        let (spill, warning) = crate::spill::for_tflm(&model, &overlaps, &req.spill, &opts, seed)?;
        warnings.extend(warning);
        let (optimized, seconds) = transform(&model, &overlaps, &spill, &opts, seed)?;
        if let Some(path) = &req.plot {
            plot_plan(&optimized.graph.model, &optimized.plan, path)?;
        }
        let report = TinysegPlan::new(&optimized, req.spill.target_bytes, seconds);
        warnings.extend(crate::spill::target_missed(
            req.spill.target_bytes,
            optimized.plan.peak_bytes,
        ));
        return Ok(PlanReport {
            outcome: PlanOutcome::Tinyseg(Box::new(report)),
            provenance,
            warnings,
            emitted: None,
            op_overlap_bytes: overlaps.per_op.clone(),
            deploy: None,
            budget: None,
            plan_provenance,
        });
    }
    let comparison = match req.planner {
        None => compare_all(&model, &overlaps, &opts)?,
        Some(kind) => compare(&model, &overlaps, &[(kind, kind.uses_overlap())], &opts)?,
    };
    if let Some(path) = &req.plot {
        plot_comparison(&model, &comparison, path)?;
    }
    let deployable = deployable(req, &model, file_tensors, &comparison, &plan_provenance)?;
    let deploy = deployable.as_ref().map(|d| d.measured.clone());
    let budget = match (req.fits, &deploy) {
        (None, _) => None,
        (Some(budget_bytes), Some(MeasuredPlan { arena: Some(a), .. })) => Some(Budget {
            budget_bytes,
            arena_bytes: a.bytes,
        }),
        (Some(_), d) => bail!(
            "--fits needs the arena to allocate, which was not measured: {}",
            d.as_ref()
                .and_then(|d| d.not_measured.clone())
                .unwrap_or_else(|| "no plan applies".into())
        ),
    };
    let emitted = match (&req.emit_offline, deployable) {
        (Some(dest), Some(d)) => Some(emit(req, &d, budget, dest)?),
        (Some(_), None) => bail!("no plan to emit"),
        (None, _) => None,
    };
    Ok(PlanReport {
        outcome: PlanOutcome::Comparison(comparison),
        provenance,
        warnings,
        emitted,
        op_overlap_bytes: overlaps.per_op,
        deploy,
        budget,
        plan_provenance,
    })
}

/// The best plan written into the model, and the arena TFLM needs for it.
struct Deployable {
    measured: MeasuredPlan,
    /// The `.tflite` with the plan as `OfflineMemoryAllocation`, when
    /// measured.
    emitted: Option<tflite::EmitReport>,
}

/// The best plan's offsets of the file's own `file_tensors` tensors in a
/// copy of the model (the scratch tensors added after them are TFLM's to
/// place: it plans scratch buffers online around the offline ones), and the
/// arena TFLM needs for that copy, measured on the runner of `req.kernels`.
/// `None` for a zoo model without `--emit-offline` or `--fits` (it has no
/// `.tflite` of its own) or when no plan applies. Without a runner the
/// measurement is a note, unless the header or the budget needs it.
fn deployable(
    req: &PlanRequest,
    model: &Model,
    file_tensors: usize,
    comparison: &Comparison,
    provenance: &PlanProvenance,
) -> Result<Option<Deployable>> {
    let Some(plan) = comparison.best_plan() else {
        return Ok(None);
    };
    if req.model.starts_with("zoo:") {
        return Ok(None);
    }
    let needed = req.emit_offline.is_some() || req.fits.is_some();
    let measured = |arena, not_measured| MeasuredPlan {
        planner: plan.planner.name().into(),
        overlap: plan.overlap.clone(),
        planned_bytes: plan.peak_bytes.unwrap_or(0),
        arena,
        not_measured,
    };
    let mut offsets = plan.offline_offsets(model);
    offsets.truncate(file_tensors);
    // The plan's provenance goes beside it, as the `memtrace_plan` entry.
    let note = PlanProvenance {
        planner: Some(plan.planner.name().to_string()),
        ..provenance.clone()
    }
    .to_metadata()?;
    let emitted = crate::tflm::model_bytes(&req.model, 1)
        .and_then(|source| Ok(tflite::emit_offline_noted(&source, &offsets, Some(&note))?));
    let emitted = match emitted {
        Ok(e) => e,
        Err(e) if !needed => {
            return Ok(Some(Deployable {
                measured: measured(None, Some(e.to_string())),
                emitted: None,
            }))
        }
        Err(e) => return Err(e),
    };
    // A model TFLM refuses still gets its plan written (without a header);
    // only the budget cannot do without the number.
    // The inputs `plan`'s traced run used (seed 1).
    let arena = memtrace_model::graph::read_graph(&emitted.bytes)
        .map_err(crate::error::Error::from)
        .and_then(|graph| crate::tflm::seeded_inputs(&graph, 1))
        .and_then(|inputs| {
            measure_arena(
                &emitted.bytes,
                &inputs,
                req.kernels,
                req.target,
                None,
                &req.cache,
            )
        });
    let (arena, not_measured) = match arena {
        Ok(a) => (Some(a), None),
        Err(e) if req.fits.is_none() => (None, Some(e.to_string())),
        Err(e) => {
            return Err(e).with_context(|| {
                "measuring the arena to allocate on real TFLM (docs/deploy.md)".to_string()
            })
        }
    };
    Ok(Some(Deployable {
        measured: measured(arena, not_measured),
        emitted: Some(emitted),
    }))
}

/// Traces each distinct layer configuration of the model through the
/// compiled kernel suite and keeps its monotone O_s; a configuration
/// traced before through the same suite comes from `cache`.
pub fn traced(model: &Model, suite: &Path, cache: &TraceCache) -> Result<TracedOverlaps> {
    let image = ElfImage::load(suite)?;
    let key = |spec: &LayerSpec| {
        TraceCache::key(
            "suite-monotone-os-v1",
            &[&image.bytes, spec.to_string().as_bytes()],
        )
    };
    let mut by_spec = HashMap::new();
    let mut specs: Vec<LayerSpec> = Vec::new();
    for op in 0..model.ops.len() {
        let Some(spec) = model.layer_spec(op) else {
            continue;
        };
        if by_spec.contains_key(&spec.to_string()) || specs.contains(&spec) {
            continue;
        }
        match cache.get::<u64>(&key(&spec)) {
            Some(bytes) => {
                by_spec.insert(spec.to_string(), bytes);
            }
            None => specs.push(spec),
        }
    }
    let names: Vec<String> = (0..specs.len()).map(|i| format!("layer {i}")).collect();
    let rows = Sweep {
        image: &image,
        depth: Depth::Overlap,
        seed: 1,
        threads: threads(None),
        max_instructions: 20_000_000_000,
    }
    .specs(&specs, &names);
    for (spec, row) in specs.iter().zip(rows) {
        let Some(bytes) = row.monotone_bytes else {
            bail!(
                "tracing {spec} through {} failed: {}",
                suite.display(),
                row.error.unwrap_or_else(|| "no O_s".into())
            );
        };
        cache.put(&key(spec), &bytes);
        by_spec.insert(spec.to_string(), bytes);
    }
    Ok(TracedOverlaps {
        by_op: HashMap::new(),
        by_spec,
    })
}

/// Writes the deployable model and its header (unless it misses the
/// `--fits` budget); the line saying what was written.
fn emit(req: &PlanRequest, d: &Deployable, budget: Option<Budget>, dest: &Path) -> Result<String> {
    let m = &d.measured;
    let Some(emitted) = &d.emitted else {
        bail!("no plan to emit");
    };
    let Some(arena) = &m.arena else {
        memtrace_io::output::write_atomically(dest, |w| {
            std::io::Write::write_all(w, &emitted.bytes)
                .map_err(|e| memtrace_io::output::write_error(dest, e))
        })?;
        return Ok(format!(
            "wrote {} ({} planner, head {} B) with OfflineMemoryAllocation in buffer {}; \
             no header: the arena to allocate was not measured: {}",
            dest.display(),
            m.planner,
            m.planned_bytes,
            emitted.buffer_index,
            m.not_measured.as_deref().unwrap_or("unknown reason")
        ));
    };
    if let Some(b) = budget.filter(|b| !b.fits()) {
        return Ok(format!(
            "did not write {}: the arena to allocate ({} B) misses the --fits budget by {} B",
            dest.display(),
            arena.bytes,
            b.arena_bytes - b.budget_bytes
        ));
    }
    let header = crate::deploy::write_measured_plan(
        dest,
        &emitted.bytes,
        m,
        arena,
        "plan --emit-offline",
        &req.model,
        false,
    )?;
    Ok(format!(
        "wrote {} and {} ({} planner, head {} B; arena to allocate {} B on TFLM {} kernels, {}) \
         with OfflineMemoryAllocation in buffer {}",
        dest.display(),
        header.display(),
        m.planner,
        m.planned_bytes,
        arena.bytes,
        arena.kernels,
        arena.target,
        emitted.buffer_index
    ))
}
