//! Arena planning (`memtrace plan`): every arena planner on one model, side by side (the DMO
//! paper's Table III), each plan checked by the independent validator.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use memtrace_abi::LayerSpec;
use memtrace_analyzer::model::{self, tflite, Accumulator, Model};
use memtrace_analyzer::planner::overlap::{OverlapMethod, TracedOverlaps};
use memtrace_analyzer::planner::plot::{plot_comparison, plot_plan};
use memtrace_analyzer::planner::report::{compare, compare_all, Comparison};
use memtrace_analyzer::planner::{OverlapSource, Overlaps, PlanOptions, PlannerKind};
use memtrace_analyzer::tinyseg::report::TinysegPlan;
use memtrace_tracer::{Arch, ElfImage};

use crate::common::{check_output, threads};
use crate::error::{Context, Result};
use crate::kernels::{harness_guest, Kernels};
use crate::scratch::with_library_scratch;
use crate::spill::{transform, SpillOptions};
use crate::sweep::trace_specs;
use crate::verify_tflm::Runtime;
use crate::{bail, failed};

/// Where the O_s of a plan comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum OverlapChoice {
    /// Traced from the compiled kernels.
    Traced,
    /// The paper's Algorithm 2 on the reference loop nest.
    Algorithmic,
    /// The paper's closed-form bounds.
    Analytic,
    /// No overlap.
    None,
}

impl OverlapChoice {
    /// The analyzer's method, or `None` for traced O_s.
    pub fn method(self) -> Option<OverlapMethod> {
        match self {
            OverlapChoice::Traced => None,
            OverlapChoice::Algorithmic => Some(OverlapMethod::Algorithmic),
            OverlapChoice::Analytic => Some(OverlapMethod::Analytic),
            OverlapChoice::None => Some(OverlapMethod::None),
        }
    }
}

/// What to plan and what to write.
#[derive(Debug, Clone)]
pub struct PlanRequest {
    /// A `.tflite` file or `zoo:NAME`.
    pub model: String,
    /// One planner, or all of them.
    pub planner: Option<PlannerKind>,
    /// Where O_s comes from.
    pub overlap: OverlapChoice,
    /// Kernel library the plan is for: its scratch buffers become tensors,
    /// and traced O_s come from its suite.
    pub kernels: Kernels,
    /// Kernel suite traced for [`OverlapChoice::Traced`] (default: the
    /// library's Cortex-M4 suite).
    pub suite: Option<PathBuf>,
    /// Picture of every plan.
    pub plot: Option<PathBuf>,
    /// A copy of the model with the best plan as `OfflineMemoryAllocation`.
    pub emit_offline: Option<PathBuf>,
    /// Offsets and sizes are multiples of this.
    pub alignment: u64,
    /// Accumulator of every TRANSPOSE_CONV (int16: TinySeg's temporary
    /// tensor quantisation, half the scratch).
    pub accumulator: Accumulator,
    /// TinySeg's options (with `planner` = `tinyseg`).
    pub spill: SpillOptions,
    /// The runtime the plan is for: with real TFLM, the scratch buffers and
    /// traced O_s come from a run of the model itself on TFLM's runner.
    pub runtime: Runtime,
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

/// Every requested planner on the model, side by side; draws and emits what
/// was asked for. Returns the comparison and, with `emit_offline`, a line
/// saying what was written.
pub fn plan(req: &PlanRequest) -> Result<(PlanOutcome, Option<String>)> {
    for path in req.plot.iter().chain(&req.emit_offline) {
        check_output(path, &[Path::new(&req.model)])?;
    }
    if req.emit_offline.is_some() && req.model.starts_with("zoo:") {
        bail!("--emit-offline needs a .tflite model to copy; a zoo model has none");
    }
    let model = match req.runtime {
        Runtime::Tflm => crate::verify_tflm::load_for_tflm(&req.model)?,
        Runtime::Executor => {
            model::load(&req.model).with_context(|| format!("loading {}", req.model))?
        }
    }
    .with_transpose_conv_accumulator(req.accumulator);
    let file_tensors = model.tensors.len();
    let (model, overlaps) = match req.runtime {
        Runtime::Tflm => {
            let traced = crate::tflm::plan_inputs(&req.model, model.ops.len(), req.kernels)?;
            let model = model.with_scratch(&traced.scratch);
            let overlaps = match req.overlap.method() {
                None => Overlaps::compute(&model, &traced.overlaps),
                Some(method) => Overlaps::compute(&model, &method as &dyn OverlapSource),
            };
            (model, overlaps)
        }
        Runtime::Executor => {
            let model = library_model(model, req.kernels)?;
            let overlaps = overlaps(&model, req)?;
            (model, overlaps)
        }
    };
    let opts = PlanOptions {
        alignment: req.alignment.max(1),
        // TFLM runs the operators in the model's order.
        model_order_only: req.runtime == Runtime::Tflm,
        ..PlanOptions::default()
    };
    if req.planner == Some(PlannerKind::Tinyseg) {
        if req.emit_offline.is_some() {
            bail!("--emit-offline: TinySeg's spill and fetch operators have no TFLite builtin");
        }
        // Zoo models get verify's seeded weights, which decide where an
        // int16 accumulator is exact.
        let seed = req.model.starts_with("zoo:").then_some(1);
        let (optimized, seconds) = transform(&model, &overlaps, &req.spill, &opts, seed)?;
        if let Some(path) = &req.plot {
            plot_plan(&optimized.graph.model, &optimized.plan, path)?;
        }
        let report = TinysegPlan::new(&optimized, req.spill.target_bytes, seconds);
        return Ok((PlanOutcome::Tinyseg(Box::new(report)), None));
    }
    let comparison = match req.planner {
        None => compare_all(&model, &overlaps, &opts)?,
        Some(kind) => compare(&model, &overlaps, &[(kind, kind.uses_overlap())], &opts)?,
    };
    if let Some(path) = &req.plot {
        plot_comparison(&model, &comparison, path)?;
    }
    let emitted = match &req.emit_offline {
        Some(dest) => Some(emit(&req.model, &model, file_tensors, &comparison, dest)?),
        None => None,
    };
    Ok((PlanOutcome::Comparison(comparison), emitted))
}

/// `model` with the scratch tensors `kernels` needs: asked of its Cortex-M4
/// executor, or for TFLM's reference kernels computed the way their
/// `Prepare` requests them ([`Model::with_reference_scratch`]; the
/// reference executor's query gives the same bytes, tests/verify_tiny_unet.rs).
fn library_model(model: Model, kernels: Kernels) -> Result<Model> {
    if kernels == Kernels::Tflm {
        return Ok(model.with_reference_scratch());
    }
    let exe = harness_guest(Arch::CortexM4, kernels.executor_file(), "--kernels tflm")?;
    with_library_scratch(&ElfImage::load(&exe)?, &model, 1)
}

/// O_s of every operator from the chosen method.
fn overlaps(model: &Model, req: &PlanRequest) -> Result<Overlaps> {
    Ok(match req.overlap.method() {
        None => {
            let suite = match &req.suite {
                Some(s) => s.clone(),
                None => harness_guest(Arch::CortexM4, req.kernels.suite_file(), "--suite")?,
            };
            Overlaps::compute(model, &traced(model, &suite)?)
        }
        Some(method) => Overlaps::compute(model, &method as &dyn OverlapSource),
    })
}

/// Traces each distinct layer configuration of the model through the
/// compiled kernel suite and keeps its monotone O_s.
pub fn traced(model: &Model, suite: &Path) -> Result<TracedOverlaps> {
    let image = ElfImage::load(suite)?;
    let mut specs: Vec<LayerSpec> = Vec::new();
    for op in 0..model.ops.len() {
        if let Some(spec) = model.layer_spec(op) {
            if !specs.contains(&spec) {
                specs.push(spec);
            }
        }
    }
    let names: Vec<String> = (0..specs.len()).map(|i| format!("layer {i}")).collect();
    let rows = trace_specs(&image, &specs, &names, 1, threads(None), 20_000_000_000);
    let mut by_spec = HashMap::new();
    for (spec, row) in specs.iter().zip(rows) {
        let Some(bytes) = row.monotone_bytes else {
            bail!(
                "tracing {spec} through {} failed: {}",
                suite.display(),
                row.error.unwrap_or_else(|| "no O_s".into())
            );
        };
        by_spec.insert(spec.to_string(), bytes);
    }
    Ok(TracedOverlaps {
        by_op: HashMap::new(),
        by_spec,
    })
}

/// Writes the best plan's offsets of the file's own `file_tensors` tensors;
/// the scratch tensors added after them are TFLM's to place (it plans
/// scratch buffers online around the offline ones).
fn emit(
    source: &str,
    model: &Model,
    file_tensors: usize,
    comparison: &Comparison,
    dest: &Path,
) -> Result<String> {
    let plan = comparison
        .best_plan()
        .ok_or_else(|| failed!("no plan to emit"))?;
    let mut offsets = plan.offline_offsets(model);
    offsets.truncate(file_tensors);
    let report = tflite::write_offline(Path::new(source), &offsets, dest)?;
    Ok(format!(
        "wrote {} ({} planner, {} B arena) with OfflineMemoryAllocation in buffer {}",
        dest.display(),
        plan.planner,
        plan.peak_bytes.unwrap_or(0),
        report.buffer_index
    ))
}
