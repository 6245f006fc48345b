//! `memtrace check`: run an unmodified Cortex-M program as it was built,
//! with memcheck (docs/check.md).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use memtrace_driver::workflows::check::{self, CheckOptions, Operators, Suppressions};

use super::Format;

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The program: a Cortex-M ELF executable (the core its build
    /// attributes name), e.g. built with
    /// `arm-none-eabi-gcc --specs=rdimon.specs` (Arm semihosting).
    pub program: PathBuf,
    /// The program's arguments (after `--`).
    #[arg(last = true)]
    pub args: Vec<String>,
    /// Findings not to report (docs/check.md: `KIND FUNCTION-PATTERN` a line).
    #[arg(long, value_name = "FILE")]
    pub suppressions: Option<PathBuf>,
    /// `table`: the program's output as it comes, then the report on stderr;
    /// `json`: one JSON document on stdout (the output inside it).
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
    /// Stop the program after this many instructions.
    #[arg(long, default_value_t = check::MAX_INSTRUCTIONS)]
    pub max_instructions: u64,
    /// Heap bytes, where the program's linker script places none: 0 to
    /// 1073741824 (1 GiB).
    #[arg(long, default_value_t = check::HEAP_BYTES,
          value_parser = clap::value_parser!(u64).range(0..=check::MAX_HEAP))]
    pub heap: u64,
    /// Stack bytes, where the program's linker script places none: 1024 to
    /// 1073741824 (1 GiB).
    #[arg(long, default_value_t = check::STACK_BYTES,
          value_parser = clap::value_parser!(u64).range(check::MIN_STACK..=check::MAX_STACK))]
    pub stack: u64,
    /// Do not trace the program's CMSIS-NN API calls as layers
    /// (docs/check.md, "API calls as layers").
    #[arg(long)]
    pub no_calls: bool,
    /// Require TFLM's interpreter: trace each operator invocation as a
    /// layer, and fail (saying why) when the program has none to trace. By
    /// default operators are traced when the program has an interpreter
    /// (docs/check.md, "TFLM operators as layers").
    #[arg(long, conflicts_with = "no_operators")]
    pub operators: bool,
    /// Do not trace TFLM's operator invocations as layers.
    #[arg(long)]
    pub no_operators: bool,
    /// Run the program without memcheck (semihosting and faults only).
    #[arg(long)]
    pub no_memcheck: bool,
    /// Exit status when memtrace found errors (findings, lost blocks, a
    /// fault, a stack overflow, the budget run out).
    #[arg(long, default_value_t = 99, value_parser = clap::value_parser!(u8).range(1..))]
    pub error_exitcode: u8,
}

pub fn run(args: CheckArgs) -> Result<ExitCode> {
    let suppressions = match &args.suppressions {
        Some(path) => Suppressions::load(path)?,
        None => Suppressions::default(),
    };
    let report = check::check(&CheckOptions {
        program: args.program.clone(),
        args: args.args.clone(),
        max_instructions: args.max_instructions,
        heap_bytes: args.heap,
        stack_bytes: args.stack,
        memcheck: !args.no_memcheck,
        echo: !matches!(args.format, Format::Json),
        suppressions,
        calls: !args.no_calls,
        operators: match (args.operators, args.no_operators) {
            (true, _) => Operators::Required,
            (_, true) => Operators::Off,
            _ => Operators::Found,
        },
    })?;
    let answer = check::CheckAnswer {
        report: &report,
        error_exitcode: args.error_exitcode,
    };
    super::finish(&answer, args.format.into(), None)
}
