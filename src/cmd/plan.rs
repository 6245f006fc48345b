//! `memtrace plan`: every arena planner on one model, side by side (the DMO
//! paper's Table III), each plan checked by the independent validator.

use std::path::PathBuf;
use std::process::ExitCode;

use super::Format;
use anyhow::Result;
use clap::{Args, ValueEnum};
use memtrace_driver::kernels::{Kernels, Runtime};
use memtrace_driver::plan::{plan, PlanRequest};
use memtrace_driver::provenance::OverlapChoice;
use memtrace_driver::trace_cache::TraceCache;
use memtrace_model::planner::PlannerKind;
use memtrace_model::Accumulator;
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
    pub model: String,
    /// `all`, or one of linear, tflm-greedy, dmo-heap, replacement, reorder,
    /// exact, tinyseg (the transformed model's steps, see --base).
    #[arg(long, default_value = "all", value_parser = planner_choice)]
    pub planner: PlannerChoice,
    #[command(flatten)]
    pub spill: super::spill_args::SpillArgs,
    /// Where O_s comes from: analytic, algorithmic, traced or none. Default:
    /// traced — on real TFLM, the model's own run; on memtrace's executor,
    /// every layer through --suite for any library but tflm, whose loop
    /// nests the analytic default models.
    #[arg(long, value_enum)]
    pub overlap: Option<OverlapChoice>,
    /// Write --emit-offline even when the O_s source models another kernel
    /// library's loop nests than --kernels (e.g. --overlap analytic with
    /// --kernels cmsis-nn): such a plan may corrupt data on --kernels.
    #[arg(long)]
    pub allow_foreign_overlap: bool,
    /// Kernel library the plan is for: cmsis-nn adds each operator's scratch
    /// buffer (asked of executor-cmsis.elf) and traces suite-cmsis.elf.
    #[arg(long, value_enum, default_value_t = Kernels::Tflm)]
    pub kernels: Kernels,
    /// The core the plan is for (real TFLM's runner of that target; the
    /// executor runs on cortex-m4 only).
    #[arg(long, value_enum, default_value_t = Arch::CortexM4)]
    pub target: Arch,
    /// Kernel suite traced for `--overlap traced` (default:
    /// harness-c/build/cortex-m4/suite.elf, or suite-cmsis.elf with
    /// --kernels cmsis-nn).
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
    #[arg(long, value_name = "SIZE", value_parser = memtrace_driver::deploy::parse_size)]
    pub fits: Option<u64>,
    /// Offsets and sizes are multiples of this (TFLM uses 16): a power of
    /// two from 1 to 4096.
    #[arg(long, default_value_t = 16, value_parser = alignment)]
    pub alignment: u64,
    /// TRANSPOSE_CONV accumulator (int16: TinySeg's scratch quantisation).
    #[arg(long, value_enum, default_value_t = Accumulator::Int32)]
    pub accumulator: Accumulator,
    /// The runtime the plan is for: tflm traces the model itself on real
    /// TensorFlow Lite Micro (harness-c/build/cortex-m4/tflm-runner*.elf) for
    /// every operator's scratch buffers and O_s. Default: tflm, except for
    /// what only memtrace's executor runs (--planner tinyseg, --accumulator
    /// int16).
    #[arg(long, value_enum)]
    pub runtime: Option<Runtime>,
    /// Trace every layer again instead of taking O_s traced by an earlier
    /// run of the same guest ELF (the cache: $MEMTRACE_CACHE_DIR, else
    /// ~/.cache/memtrace/traces)
    #[arg(long)]
    pub no_cache: bool,
}

pub fn run(args: PlanArgs) -> Result<ExitCode> {
    let runtime = Runtime::for_request(args.runtime, args.accumulator)
        .unwrap_or_else(|e| super::usage_error(&e));
    if runtime == Runtime::Executor && args.target != Arch::CortexM4 {
        super::usage_error(&format!(
            "--target {}: memtrace's executor plans for cortex-m4 only (real TFLM, the default \
             runtime, runs on every target)",
            args.target.name()
        ));
    }
    args.spill
        .check(args.planner.0 == Some(PlannerKind::Tinyseg));
    let report = plan(&PlanRequest {
        model: args.model,
        planner: args.planner.0,
        overlap: args.overlap,
        allow_foreign_overlap: args.allow_foreign_overlap,
        kernels: args.kernels,
        target: args.target,
        suite: args.suite,
        plot: args.plot,
        emit_offline: args.emit_offline,
        alignment: args.alignment,
        spill: args.spill.options(),
        accumulator: args.accumulator,
        runtime,
        cache: TraceCache::new(!args.no_cache),
        fits: args.fits,
    })?;
    for w in &report.warnings {
        super::say(&format!("WARNING: {w}"));
    }
    if let Some(line) = &report.emitted {
        super::say(line);
    }
    match args.format {
        Format::Json => super::emit(&report.to_json()?)?,
        Format::Table => super::emit(&report.to_table())?,
    }
    if let Some(budget) = report.budget {
        // The table states it; a JSON reader gets it in `budget`, a person
        // on stderr.
        if matches!(args.format, Format::Json) || !budget.fits() {
            eprintln!("{}", budget.message());
        }
        if !budget.fits() {
            return Ok(ExitCode::FAILURE);
        }
    }
    Ok(ExitCode::SUCCESS)
}
