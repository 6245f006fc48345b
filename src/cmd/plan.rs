//! `memtrace plan`: every arena planner on one model, side by side (the DMO
//! paper's Table III), each plan checked by the independent validator.

use memtrace_model::source::ModelSource;
use std::path::PathBuf;
use std::process::ExitCode;

use super::Format;
use anyhow::Result;
use clap::{Args, ValueEnum};
use memtrace_driver::runtime::kernels::Kernels;
use memtrace_driver::runtime::trace_cache::TraceCache;
use memtrace_driver::support::provenance::OverlapChoice;
use memtrace_driver::workflows::plan::{plan, PlanRequest};
use memtrace_model::planner::PlannerKind;
use memtrace_tracer::Arch;

/// `all` (`None`), or one planner.
#[derive(Clone, Copy, Debug)]
pub struct PlannerChoice(Option<PlannerKind>);

fn planner_choice(text: &str) -> Result<PlannerChoice, String> {
    if text == "all" {
        return Ok(PlannerChoice(None));
    }
    let known: Vec<&str> = PlannerKind::ALL.iter().map(|p| p.name()).collect();
    let known = known.join(", ");
    <PlannerKind as ValueEnum>::from_str(text, false)
        .map(|k| PlannerChoice(Some(k)))
        .map_err(|_| format!("unknown planner `{text}` (known: all, {known}, tinyseg)"))
}

/// A power of two from 1 to 4096.
fn alignment(text: &str) -> Result<u64, String> {
    let a = text.parse::<u64>().unwrap_or(0);
    (a.is_power_of_two() && a <= 4096)
        .then_some(a)
        .ok_or_else(|| format!("`{text}` is not a power of two from 1 to 4096"))
}

#[derive(Args, Debug)]
pub struct PlanArgs {
    /// A `.tflite` file or a built-in model, e.g. `zoo:mobilenet_v1_0.25_128_int8`.
    pub model: ModelSource,
    /// `all`, or one of linear, tflm-greedy, dmo-heap, replacement, reorder,
    /// exact, tinyseg (the transformed model's steps, see --base).
    #[arg(long, default_value = "all", value_parser = planner_choice)]
    pub planner: PlannerChoice,
    #[command(flatten)]
    pub spill: super::spill_args::SpillArgs,
    /// Where O_s comes from: analytic, algorithmic, traced or none. Default:
    /// traced — the model's own run on real TFLM (or, with --suite, every
    /// layer through that kernel suite).
    #[arg(long, value_enum)]
    pub overlap: Option<OverlapChoice>,
    /// Write --emit-offline even when the O_s source models another kernel
    /// library's loop nests than --kernels (e.g. --overlap analytic with
    /// --kernels cmsis-nn): such a plan may corrupt data on --kernels.
    #[arg(long)]
    pub allow_foreign_overlap: bool,
    /// Kernel library the plan is for: its TFLM runner's run gives each
    /// operator's scratch buffers and traced O_s.
    #[arg(long, value_enum, default_value_t = Kernels::Tflm)]
    pub kernels: Kernels,
    /// The core the plan is for (real TFLM's runner of that target).
    /// Several, comma-separated (cortex-m0,cortex-m4,cortex-m33): one plan
    /// that holds on each, with every operator's smallest O_s and largest
    /// scratch over them, and the largest arena to allocate.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "cortex-m4")]
    pub target: Vec<Arch>,
    /// Take traced O_s from this kernel suite instead, each distinct layer
    /// traced through it (e.g. a suite built from another CMSIS-NN release);
    /// scratch buffers, and the O_s of operators the suite does not run,
    /// still come from the model's run on TFLM.
    #[arg(long)]
    pub suite: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Draw the arena allocation of every plan (.svg or .png).
    #[arg(long, value_name = "OUT.svg")]
    pub plot: Option<PathBuf>,
    /// Write the best plan (or --planner's) into a copy of the model as TFLM
    /// `OfflineMemoryAllocation` metadata, and beside it OUT.h, the C header
    /// a firmware includes: kTensorArenaSize (the arena to allocate, measured
    /// on real TFLM) and the model bytes (docs/deploy.md).
    #[arg(long, value_name = "OUT.tflite")]
    pub emit_offline: Option<PathBuf>,
    /// The firmware's arena budget (e.g. 128K, 131072, 0.5M): exit 1 with
    /// the shortfall in bytes when the arena to allocate exceeds it (and
    /// write no --emit-offline files), say what is left when it fits.
    #[arg(long, value_name = "SIZE", value_parser = memtrace_driver::workflows::deploy::parse_size)]
    pub fits: Option<u64>,
    /// Offsets and sizes are multiples of this (TFLM uses 16): a power of
    /// two from 1 to 4096.
    #[arg(long, default_value_t = 16, value_parser = alignment)]
    pub alignment: u64,
    /// Only int32 (TFLM's own); int16 was dropped with memtrace's executor.
    #[arg(long, hide = true, value_parser = super::accumulator_value)]
    pub accumulator: Option<String>,
    /// Only tflm, the default (memtrace's executor was retired).
    #[arg(long, hide = true, value_parser = super::runtime_value)]
    pub runtime: Option<String>,
    /// Trace every layer again instead of taking O_s traced by an earlier
    /// run of the same guest ELF (the cache: $MEMTRACE_CACHE_DIR, else
    /// ~/.cache/memtrace/traces)
    #[arg(long)]
    pub no_cache: bool,
}

pub fn run(args: PlanArgs) -> Result<ExitCode> {
    // Each core once, in the order given (the first is the one named first
    // in the plan's provenance).
    let mut targets: Vec<Arch> = Vec::new();
    for t in &args.target {
        if !targets.contains(t) {
            targets.push(*t);
        }
    }
    args.spill
        .check(args.planner.0 == Some(PlannerKind::Tinyseg));
    if let Some(why) = args
        .emit_offline
        .as_deref()
        .and_then(memtrace_driver::workflows::deploy::deployment_refusal)
    {
        super::usage_error(&why);
    }
    let report = plan(&PlanRequest {
        model: args.model,
        planner: args.planner.0,
        overlap: args.overlap,
        allow_foreign_overlap: args.allow_foreign_overlap,
        kernels: args.kernels,
        target: targets[0],
        more_targets: targets[1..].to_vec(),
        suite: args.suite,
        plot: args.plot,
        emit_offline: args.emit_offline,
        alignment: args.alignment,
        spill: args.spill.options(),
        cache: TraceCache::new(!args.no_cache),
        fits: args.fits,
    })?;
    super::finish(&report, args.format.into(), None)
}
