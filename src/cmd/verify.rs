//! `memtrace verify`: run a whole model in the emulator under the reference
//! plan (TFLM greedy, no overlaps) and under a chosen plan, check every read
//! of the arena with the shadow map, and compare the outputs bit by bit.

use std::path::PathBuf;
use std::process::ExitCode;

use super::Format;
use anyhow::Result;
use clap::Args;
use memtrace_driver::runtime::kernels::Kernels;
use memtrace_driver::runtime::plan_file::PlanPick;
use memtrace_driver::support::common::check_output;
use memtrace_driver::support::provenance::OverlapChoice;
use memtrace_driver::workflows::deploy::{header_path, Deployment};
use memtrace_driver::workflows::verify::verify;
use memtrace_driver::workflows::verify::VerifyOptions;
use memtrace_model::planner::PlannerKind;
use memtrace_model::source::ModelSource;

#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// `MODEL.tflite` or `zoo:NAME`.
    pub model: ModelSource,
    /// Planner of the verified plan (default: the smallest plan of every
    /// planner, the one `plan --emit-offline` writes; tinyseg: the
    /// transformed model, see --base). With --plan: which plan of a `memtrace
    /// plan` document to take.
    #[arg(long, value_enum)]
    pub planner: Option<PlannerKind>,
    #[command(flatten)]
    pub spill: super::spill_args::SpillArgs,
    /// O_s source of the plan: traced (from the reference run), algorithmic,
    /// analytic, none. Default: traced.
    #[arg(long, value_enum)]
    pub overlap: Option<OverlapChoice>,
    /// Verify this placement instead of a planner's: JSON
    /// `{"tensors": [{"name": ..., "offset": ...}], "arena_bytes": N,
    /// "kernels": "tflm"|"cmsis-nn"}` (tensors not listed keep their
    /// reference offsets; model order; a plan made for another library than
    /// --kernels is refused), or what `memtrace plan --format json` prints
    /// (its smallest plan, or --planner's; refused for another model or
    /// target).
    #[arg(long, value_name = "PLAN.json")]
    pub plan: Option<PathBuf>,
    /// Check a --plan file whose "kernels" names another library than
    /// --kernels (with a warning) instead of refusing it.
    #[arg(long, requires = "plan")]
    pub allow_foreign_plan: bool,
    #[command(flatten)]
    pub run: super::model_run_args::ModelRunArgs,
    /// Take the traced O_s from this library's run instead (e.g. check a
    /// plan certified for tflm on cmsis-nn). Not with --plan, whose file
    /// gives the placement.
    #[arg(long, value_enum, value_name = "KERNELS", conflicts_with = "plan")]
    pub overlap_from: Option<Kernels>,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Draw the arena-wide access trace of both runs side by side (x =
    /// arena offset, y = instruction; the paper's Fig. 2) to a .png or .svg.
    #[arg(long, value_name = "OUT.png|OUT.svg")]
    pub plot: Option<PathBuf>,
    /// Also run the plan's program in Unicorn without hooks and report the
    /// tracing slowdown against it.
    #[arg(long)]
    pub baseline: bool,
    /// Run TFLM's own plan again instead of taking it (its outputs, scratch
    /// and traced O_s) from an earlier verify of the same runner, model and
    /// input (the trace cache: $MEMTRACE_CACHE_DIR, else
    /// ~/.cache/memtrace/traces)
    #[arg(long)]
    pub no_cache: bool,
    /// Do not compare the outputs with real TFLM on the host (PyPI
    /// `tflite-micro`, which takes a core for about 0.1 s beside the plan
    /// run); the shadow map and the comparison with the reference run stay.
    #[arg(long)]
    pub no_oracle: bool,
    /// Stop a guest that runs longer than this many instructions.
    #[arg(long, default_value_t = memtrace_driver::support::common::MAX_INSTRUCTIONS)]
    pub max_instructions: u64,
    /// Only int32 (TFLM's own); int16 was dropped with memtrace's executor.
    #[arg(long, hide = true, value_parser = super::accumulator_value)]
    pub accumulator: Option<String>,
    /// Only tflm, the default (memtrace's executor was retired).
    #[arg(long, hide = true, value_parser = super::runtime_value)]
    pub runtime: Option<String>,
    /// Once the plan is proven (result OK), write the model with it as
    /// OfflineMemoryAllocation to OUT.tflite and its C header to OUT.h
    /// (kTensorArenaSize, the model bytes; docs/deploy.md). Nothing is
    /// written when the proof fails. Real TFLM only.
    #[arg(long, value_name = "OUT.tflite")]
    pub emit_offline: Option<PathBuf>,
    /// The firmware's arena budget (e.g. 128K, 131072, 0.5M): exit 1 with
    /// the shortfall in bytes when the arena to allocate exceeds it (and
    /// write no --emit-offline files), say what is left when it fits.
    /// Real TFLM only.
    #[arg(long, value_name = "SIZE", value_parser = memtrace_driver::workflows::deploy::parse_size)]
    pub fits: Option<u64>,
}

pub fn run(args: VerifyArgs) -> Result<ExitCode> {
    if args.plan.is_some() && args.overlap.is_some() && args.planner.is_none() {
        super::usage_error(
            "--overlap with --plan only picks, beside --planner, one plan of a `memtrace plan` \
             document (the plan file gives the placement)",
        );
    }
    // With --plan, --planner (and --overlap) pick one plan of a `plan`
    // document that holds several.
    let pick = args
        .plan
        .as_ref()
        .and(args.planner)
        .map(|planner| PlanPick {
            planner,
            overlap: args.overlap,
        });
    let overlap = args.overlap.unwrap_or(OverlapChoice::Traced);
    if args.overlap_from.is_some() && overlap != OverlapChoice::Traced {
        super::usage_error(&format!(
            "--overlap-from has no effect with --overlap {} (it picks the library whose traces \
             give traced O_s)",
            overlap.name()
        ));
    }
    let planner = args.planner;
    args.spill.check(planner == Some(PlannerKind::Tinyseg));
    let format = args.format;
    let embedded_plan = args.plan.is_none() && args.planner.is_none() && args.overlap.is_none();
    let deploy = Deployment {
        dest: args.emit_offline,
        fits: args.fits,
    };
    if let Some(dest) = &deploy.dest {
        let Some(model) = args.model.path() else {
            super::usage_error(
                "--emit-offline needs a .tflite model to copy; a zoo model has none",
            );
        };
        if let Some(why) = memtrace_driver::workflows::deploy::deployment_refusal(dest) {
            super::usage_error(&why);
        }
        check_output(dest, &[model])?;
        check_output(&header_path(dest), &[model, dest])?;
    }
    let opts = VerifyOptions {
        model: args.model,
        planner,
        overlap,
        plan: args.plan,
        seed: args.run.seed,
        input: args.run.input,
        target: args.run.target,
        kernels: args.run.kernels,
        overlap_kernels: args.overlap_from,
        runner: args.run.runner,
        plot: args.plot,
        baseline: args.baseline,
        max_instructions: args.max_instructions,
        spill: args.spill.options(),
        allow_foreign_plan: args.allow_foreign_plan,
        deploy,
        cache: memtrace_driver::runtime::trace_cache::TraceCache::new(!args.no_cache),
        oracle: !args.no_oracle,
        embedded_plan,
        pick,
    };
    super::finish(&verify(&opts)?, format.into(), None)
}
