//! `memtrace`: the command-line front end. Each subcommand lives in `cmd/`
//! and only wires the tracer and the analyzer together.

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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => cmd::run::run(args),
        Command::Bench(args) => cmd::bench::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(1)
        }
    }
}
