//! `memtrace bench`: tracing cost measured side by side in one run (overhead
//! against plain Unicorn, against Valgrind lackey, peak memory), or the O_s
//! cost ladder with `--ladder`.

use memtrace_model::source::ModelSource;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use memtrace_driver::workflows::bench::ladder::{ladder, TABLE_ONE};
use memtrace_driver::workflows::bench::{bench, BenchOptions};

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Directory holding cortex-m4/ and x86_64/ guest builds (default: the
    /// harness build of the source tree memtrace was built from, not the
    /// working directory's).
    #[arg(long)]
    pub build_dir: Option<PathBuf>,
    /// Layer for the overhead and Valgrind comparisons (≥ 10 M instructions).
    #[arg(
        long,
        default_value = "op=conv2d,dtype=int8,input=1x32x32x16,filter=32x1x1x16,padding=same"
    )]
    pub job: String,
    /// Layer for the peak-RSS measurement (≥ 50 M events).
    #[arg(
        long,
        default_value = "op=conv2d,dtype=int8,input=1x32x32x64,filter=64x3x3x64,padding=same"
    )]
    pub rss_job: String,
    /// Timed repetitions; the fastest is reported.
    #[arg(long, default_value_t = 3)]
    pub repeat: u32,
    /// Skip the Valgrind comparison.
    #[arg(long)]
    pub no_valgrind: bool,
    /// Skip the peak-RSS measurement.
    #[arg(long)]
    pub no_rss: bool,
    /// Only measure the O_s cost ladder (analytic ns, algorithmic ms, traced
    /// s on one layer) and `validate` throughput, on cortex-m4/suite.elf.
    #[arg(long)]
    pub ladder: bool,
    /// Layer of the ladder (default: the DMO paper's Table I layer).
    #[arg(long, default_value = TABLE_ONE)]
    pub ladder_job: String,
    /// Random configurations per (op, dtype) for the throughput measurement.
    #[arg(long, default_value_t = 25)]
    pub ladder_configs: usize,
    /// Only time TinySeg's planning (`--planner tinyseg`) on these models.
    #[arg(long, value_name = "MODEL", num_args = 0.., default_missing_value = "zoo:tiny_unet_80x120_int8")]
    pub tinyseg: Option<Vec<ModelSource>>,
    /// Only time whole models traced on real TFLM against the same runs in
    /// Unicorn without hooks (default: every model of ../shared/models).
    #[arg(long, value_name = "MODEL", num_args = 0..)]
    pub models: Option<Vec<ModelSource>>,
}

pub fn run(args: BenchArgs) -> Result<ExitCode> {
    // Model paths and layer specs are the user's: printed escaped.
    let mut out = memtrace_driver::support::text::TerminalSafe::new(std::io::stdout().lock());
    let build_dir = args.build_dir.clone().unwrap_or_else(default_build_dir);
    if let Some(models) = &args.models {
        let models = if models.is_empty() {
            shared_models()?
        } else {
            models.clone()
        };
        memtrace_driver::workflows::bench::models::bench_models(
            &models,
            &build_dir,
            args.repeat,
            &mut out,
        )?;
    } else if let Some(models) = &args.tinyseg {
        memtrace_driver::support::spill::bench_tinyseg(models, args.repeat, &mut out)?;
    } else if args.ladder {
        ladder(
            &build_dir.join("cortex-m4/suite.elf"),
            &args.ladder_job,
            args.ladder_configs,
            &mut out,
        )?;
    } else {
        bench(
            &BenchOptions {
                build_dir,
                job: args.job,
                rss_job: args.rss_job,
                repeat: args.repeat,
                no_valgrind: args.no_valgrind,
                no_rss: args.no_rss,
            },
            &mut out,
        )?;
    }
    std::io::Write::flush(&mut out)?;
    Ok(ExitCode::SUCCESS)
}

/// Every `.tflite` of `../shared/models` (the public models beside the
/// repository), sorted.
fn shared_models() -> Result<Vec<ModelSource>> {
    let dir = std::path::Path::new("../shared/models");
    let mut models: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| anyhow::anyhow!("{}: {e}; name the models", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "tflite"))
        .collect();
    models.sort();
    Ok(models.into_iter().map(ModelSource::File).collect())
}

/// The first harness build folder memtrace looks for guests in (the source
/// tree's), whether or not it holds them yet: the errors then name it.
fn default_build_dir() -> PathBuf {
    memtrace_driver::runtime::kernels::guest_roots()
        .into_iter()
        .next()
        .unwrap_or_else(|| PathBuf::from("harness-c/build"))
}
