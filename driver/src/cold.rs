//! Cold ranges of a model (`memtrace cold`): TinySeg's graph-level analysis
//! next to byte-level cold ranges measured from one run of the executor.
//!
//! The run is `memtrace verify`'s reference run: TFLM's greedy plan without
//! overlaps (the arena TinySeg starts from, and the placement the picture
//! shows). No input shares bytes with its operator's output there, so every
//! access goes through exactly one tensor's buffer; accesses are attributed
//! by buffer, so tensors that share bytes at other times never mix.

use std::path::{Path, PathBuf};
use std::time::Instant;

use memtrace_analyzer::cold::{tensor_colds, ByteCold, ColdReport};
use memtrace_model::planner::Plan;
use memtrace_tracer::Arch;

use crate::common::{check_output, load_model};
use crate::error::Result;
use crate::executor_run::{executor, ExecutorRun, Placement, Watch};
use crate::kernels::Kernels;

/// What to analyse, and how.
#[derive(Debug, Clone)]
pub struct ColdOptions {
    /// `MODEL.tflite` or `zoo:NAME`.
    pub model: String,
    /// Seed of the generated input (and of zoo weights).
    pub seed: u64,
    /// Raw bytes of the first graph input.
    pub input: Option<PathBuf>,
    /// Architecture of the executor.
    pub target: Arch,
    /// Kernel library of the executor.
    pub kernels: Kernels,
    /// The executor ELF (default: the harness build).
    pub executor: Option<PathBuf>,
    /// Fig. 12-style picture of the cold ranges.
    pub plot: Option<PathBuf>,
    /// The picture's time axis in instructions instead of operator positions.
    pub plot_instructions: bool,
    /// The report file (checked before the run).
    pub out: Option<PathBuf>,
    /// Observe accesses with memory hooks: each access's own instruction
    /// instead of its block's.
    pub exact_time: bool,
    /// Instruction budget of the run.
    pub max_instructions: u64,
}

/// Runs the model once under TFLM's greedy plan and reports every arena
/// tensor's cold ranges at graph and byte level (and draws them).
pub fn cold(req: &ColdOptions) -> Result<ColdReport> {
    let started = Instant::now();
    let (base, input) = load_model(&req.model, req.input.as_deref(), Default::default())?;
    for out in req.plot.iter().chain(&req.out) {
        check_output(out, &[Path::new(&req.model)])?;
    }
    if let Some(p) = &req.plot {
        memtrace_analyzer::plot::is_svg(p)?;
    }
    let image = executor(req.target, req.kernels, req.executor.as_deref())?;
    let run = ExecutorRun {
        image: &image,
        seed: req.seed,
        max_instructions: req.max_instructions,
        input: input.as_deref(),
    };
    let model = run.with_scratch(&base)?;
    let plan = Plan::tflm_greedy(&model)?;
    let placement = Placement::of(&plan, &model);
    let mut bytes = ByteCold::new(&model, &plan.order);
    let outcome = run.traced(
        &model,
        &placement,
        Watch {
            analyses: vec![&mut bytes],
            exact_time: req.exact_time,
            ..Watch::default()
        },
    )?;
    let run = bytes.finish();
    let report = ColdReport {
        model: model.name.clone(),
        target: req.target,
        kernels: req.kernels,
        seed: req.seed,
        planner: plan.planner,
        arena_bytes: placement.arena_bytes,
        access_path: outcome.access,
        instructions: run.windows.last().map_or(0, |w| w.end),
        tensors: tensor_colds(&model, &plan.order, &placement.offsets, &run),
        windows: run.windows,
        clobbers: outcome.clobbers.clone(),
        problems: run.problems,
        seconds: started.elapsed().as_secs_f64(),
    };
    if let Some(path) = &req.plot {
        memtrace_analyzer::cold::plot::render(&report, &model, &plan, req.plot_instructions, path)?;
    }
    Ok(report)
}
