//! `memtrace regress`: re-trace a baseline with another build of the kernel
//! library; exit 1 when any layer's safe overlap shrank (plans built on the
//! baseline are unsafe for it), its memory contract broke, or a baseline
//! layer is missing or cannot be traced.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, ValueEnum};
use memtrace_driver::workflows::check;
use memtrace_driver::workflows::regress::{
    check_report_path, regress, regress_unit_tests, RegressOptions, UnitTestOptions,
    DEFAULT_INSTRUCTION_THRESHOLD,
};
use memtrace_tracer::Arch;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Format {
    Markdown,
    Json,
}

impl From<Format> for memtrace_driver::Format {
    fn from(format: Format) -> Self {
        match format {
            Format::Markdown => Self::Markdown,
            Format::Json => Self::Json,
        }
    }
}

#[derive(Args, Debug)]
pub struct RegressArgs {
    /// Baseline written by `memtrace table` (with --unit-tests: the folder
    /// of unit-test programs built against the old release, or one program).
    pub baseline: PathBuf,
    /// The new build of the kernel binary (with --unit-tests: the same
    /// tests built against the new release).
    pub elf: PathBuf,
    /// The core to trace the new build on. A baseline traced on another
    /// core is compared only when this is given: the comparison is then
    /// across cores (what a plan made for one core risks on another).
    #[arg(long, value_enum)]
    pub target: Option<Arch>,
    /// Compare a library's own unit tests built against two releases under
    /// `memtrace check`: Unity's verdicts, memcheck's findings, and each
    /// API call's O_s, memory contract and instructions.
    #[arg(long)]
    pub unit_tests: bool,
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
    /// Report a layer's instruction count as a speed regression or gain
    /// when it changed by more than this many percent.
    #[arg(long, default_value_t = DEFAULT_INSTRUCTION_THRESHOLD, value_name = "PERCENT", value_parser = percent)]
    pub instruction_threshold: f64,
}

fn percent(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(p) if p.is_finite() && p >= 0.0 => Ok(p),
        _ => Err(format!("`{text}` is not a percentage (a number ≥ 0)")),
    }
}

pub fn run(args: RegressArgs) -> Result<ExitCode> {
    if let Some(out) = &args.out {
        if args.unit_tests {
            check_report_path(out, &args.baseline, &args.elf)?;
        }
        memtrace_driver::support::common::check_output(out, &[&args.baseline, &args.elf])?;
    }
    if args.unit_tests {
        if args.target.is_some() {
            super::usage_error(
                "--target has no effect with --unit-tests (the unit-test programs run on the \
                 core their build attributes name)",
            );
        }
        if args.jobs.is_some() {
            super::usage_error(
                "--jobs has no effect with --unit-tests (the suites run one by one)",
            );
        }
        let report = regress_unit_tests(&UnitTestOptions {
            old: args.baseline,
            new: args.elf,
            max_instructions: args.max_instructions,
            heap_bytes: check::HEAP_BYTES,
            stack_bytes: check::STACK_BYTES,
            instruction_threshold: args.instruction_threshold,
        })?;
        return super::finish(&report, args.format.into(), args.out.as_deref());
    }
    let report = regress(&RegressOptions {
        baseline: args.baseline,
        elf: args.elf,
        target: args.target,
        jobs: args.jobs,
        max_instructions: args.max_instructions,
        instruction_threshold: args.instruction_threshold,
    })?;
    super::finish(&report, args.format.into(), args.out.as_deref())
}
