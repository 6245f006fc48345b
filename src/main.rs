//! `memtrace`: the command-line front end. Each subcommand lives in `cmd/`:
//! it parses its arguments, calls one workflow of `memtrace-driver` and
//! prints the report.

mod cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Valgrind-style memory tracer for ML kernels on microcontrollers.
#[derive(Parser)]
#[command(name = "memtrace", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Trace layers of a kernel binary and report buffers, accesses and O_s.
    Run(cmd::run::RunArgs),
    /// Measure tracing overhead against plain Unicorn and Valgrind.
    Bench(cmd::bench::BenchArgs),
    /// Sweep layer configurations through a compiled kernel and check the
    /// analytic and algorithmic O_s against the traces.
    Validate(cmd::validate::ValidateArgs),
    /// Write an O_s baseline table of a kernel binary (for `regress`).
    Table(cmd::table::TableArgs),
    /// Compare a kernel binary's O_s against a baseline table; exit 1 when
    /// any layer's safe overlap shrank.
    Regress(cmd::regress::RegressArgs),
    /// Plan a model's tensor arena with every planner, with and without DMO.
    Plan(cmd::plan::PlanArgs),
    /// Run a whole model under a plan: shadow-map clobber check and
    /// bit-exact outputs against an un-overlapped run.
    Verify(cmd::verify::VerifyArgs),
    /// Cold ranges of a model's tensors: TinySeg's graph-level analysis and
    /// byte-level cold ranges from a traced run on real TFLM.
    Cold(cmd::cold::ColdArgs),
    /// Built-in models: list them, export one as .tflite.
    Zoo(cmd::zoo::ZooArgs),
    /// Run an unmodified Cortex-M program as it was built (Arm
    /// semihosting) with a memory checker: heap overruns, use after free,
    /// uninitialised reads, bad frees, leaks, stack overflow.
    Check(cmd::check::CheckArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => cmd::run::run(args),
        Command::Bench(args) => cmd::bench::run(args),
        Command::Validate(args) => cmd::validate::run(args),
        Command::Table(args) => cmd::table::run(args),
        Command::Regress(args) => cmd::regress::run(args),
        Command::Verify(args) => cmd::verify::run(args),
        Command::Cold(args) => cmd::cold::run(args),
        Command::Zoo(args) => cmd::zoo::run(args),
        Command::Plan(args) => cmd::plan::run(args),
        Command::Check(args) => cmd::check::run(args),
    };
    match result {
        Ok(code) => code,
        // A reader that closed the pipe (`| head`) wants no more: end quietly.
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            cmd::say(&format!("error: {}", error_text(&err)));
            ExitCode::from(1)
        }
    }
}

/// The error and its causes, each said once: library errors already include
/// their cause in their own message, so a cause whose text is already there
/// is not repeated.
fn error_text(err: &anyhow::Error) -> String {
    let mut text = err.to_string();
    for cause in err.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}

/// Whether the error is a write to a pipe whose reader has gone.
fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
