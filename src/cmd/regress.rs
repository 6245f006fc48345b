//! `memtrace regress`: re-trace an O_s baseline with another build of the
//! kernel library; exit 1 when any layer's safe overlap shrank (plans built
//! on the baseline are unsafe for it), or a baseline layer is missing or
//! cannot be traced.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, ValueEnum};
use memtrace_driver::regress::{regress, RegressOptions};

use super::write_report;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Format {
    Markdown,
    Json,
}

#[derive(Args, Debug)]
pub struct RegressArgs {
    /// Baseline written by `memtrace table`.
    pub baseline: PathBuf,
    /// The new build of the kernel binary.
    pub elf: PathBuf,
    #[arg(long, value_enum, default_value_t = Format::Markdown)]
    pub format: Format,
    /// Write the report here instead of stdout.
    #[arg(long, value_name = "REPORT")]
    pub out: Option<PathBuf>,
    /// Worker threads (default: all cores).
    #[arg(long, value_name = "N", value_parser = super::jobs)]
    pub jobs: Option<usize>,
    /// Stop a guest that runs longer than this many instructions.
    #[arg(long, default_value_t = 2_000_000_000, value_name = "N")]
    pub max_instructions: u64,
}

pub fn run(args: RegressArgs) -> Result<ExitCode> {
    if let Some(out) = &args.out {
        memtrace_driver::common::check_output(out, &[&args.baseline, &args.elf])?;
    }
    let report = regress(&RegressOptions {
        baseline: args.baseline,
        elf: args.elf,
        jobs: args.jobs,
        max_instructions: args.max_instructions,
    })?;
    if let Some(w) = report.arch_warning() {
        eprintln!("{w}");
    }
    let text = match args.format {
        Format::Json => serde_json::to_string_pretty(&report)? + "\n",
        Format::Markdown => report.to_markdown(),
    };
    write_report(args.out.as_deref(), &text)?;
    for line in report.failure_lines() {
        eprintln!("{line}");
    }
    eprintln!("{}", report.summary_line());
    Ok(if report.passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
