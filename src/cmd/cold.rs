//! `memtrace cold`: every arena tensor's cold ranges — TinySeg's graph-level
//! Algorithm 2 and byte level from one traced run of the model on real
//! TFLM — as a table, JSON or CSV, and a Fig. 12-style picture.

use memtrace_model::source::ModelSource;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, ValueEnum};

use super::TableFormat;
use memtrace_driver::workflows::cold::{cold, ColdOptions};

/// The time axis of the picture.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PlotTime {
    /// Operator positions, one step each (TinySeg's figures).
    Positions,
    /// Instructions the run took (operator windows only).
    Instructions,
}

#[derive(Args, Debug)]
pub struct ColdArgs {
    /// `MODEL.tflite` or `zoo:NAME`.
    pub model: ModelSource,
    #[command(flatten)]
    pub run: super::model_run_args::ModelRunArgs,
    #[arg(long, value_enum, default_value_t = TableFormat::Table)]
    pub format: TableFormat,
    /// Write the report here instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Draw the arena over time with the cold ranges (TinySeg's Fig. 12):
    /// x = operator position, y = arena offset; .png or .svg.
    #[arg(long, value_name = "OUT.png|OUT.svg")]
    pub plot: Option<PathBuf>,
    /// Time axis of the picture.
    #[arg(long, value_enum, default_value_t = PlotTime::Positions)]
    pub plot_time: PlotTime,
    /// Observe accesses with memory hooks: every time is the access's own
    /// instruction, not its block's (several times slower).
    #[arg(long)]
    pub exact_time: bool,
    /// Stop a guest that runs longer than this many instructions.
    #[arg(long, default_value_t = memtrace_driver::support::common::MAX_INSTRUCTIONS)]
    pub max_instructions: u64,
}

pub fn run(args: ColdArgs) -> Result<ExitCode> {
    let report = cold(&ColdOptions {
        model: args.model,
        seed: args.run.seed,
        input: args.run.input,
        target: args.run.target,
        kernels: args.run.kernels,
        runner: args.run.runner,
        plot: args.plot,
        plot_instructions: args.plot_time == PlotTime::Instructions,
        out: args.out.clone(),
        exact_time: args.exact_time,
        max_instructions: args.max_instructions,
    })?;
    super::finish(&report, args.format.into(), args.out.as_deref())
}
