//! `memtrace table`: write an O_s baseline table of a kernel binary for
//! `memtrace regress` to compare a later build against.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use memtrace_driver::workflows::baseline::{tabulate, TableOptions};
use memtrace_tracer::Arch;

use super::sweep_args::ConfigArgs;

#[derive(Args, Debug)]
pub struct TableArgs {
    /// Kernel-suite binary (ELF for a Cortex-M core, RISC-V or x86-64).
    pub elf: PathBuf,
    /// The core to trace it on (default: the one its build attributes
    /// name); a baseline belongs to the core it was traced on.
    #[arg(long, value_enum)]
    pub target: Option<Arch>,
    /// Where to write the table (JSON).
    #[arg(long, value_name = "baseline.json")]
    pub out: PathBuf,
    /// Leave out the binary's built-in layers (by default they are traced
    /// once, without a job, and recorded by layer name).
    #[arg(long)]
    pub no_builtin: bool,
    #[command(flatten)]
    pub configs: ConfigArgs,
}

pub fn run(args: TableArgs) -> Result<ExitCode> {
    let t = tabulate(&TableOptions {
        elf: args.elf.clone(),
        target: args.target,
        out: args.out.clone(),
        no_builtin: args.no_builtin,
        configs: args.configs.into(),
    })?;
    super::finish(&t, memtrace_driver::Format::Table, None)
}
