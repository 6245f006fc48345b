//! `memtrace validate`: sweep layer configurations through a compiled kernel
//! and check every O_s method against the trace (DMO Table II, generalised).
//!
//! Exit status (docs/user-guide.md, "Errors and exit codes"): 0 when every
//! configuration passes; 1 when any violates a check (analytic > traced
//! monotone, algorithmic ≠ traced monotone, exact < monotone) or could not be
//! traced (e.g. the guest rejected it); 2 only for a malformed command line.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;

use super::TableFormat;
use memtrace_driver::workflows::validate::{validate, ValidateOptions};

use super::sweep_args::ConfigArgs;

#[derive(Args, Debug)]
pub struct ValidateArgs {
    /// Kernel-suite binary (ELF for Cortex-M4 or x86-64) with the job mailbox.
    pub elf: PathBuf,
    #[command(flatten)]
    pub configs: ConfigArgs,
    #[arg(long, value_enum, default_value_t = TableFormat::Table)]
    pub format: TableFormat,
    /// Write the report here instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

pub fn run(args: ValidateArgs) -> Result<ExitCode> {
    let report = validate(&ValidateOptions {
        elf: args.elf,
        configs: args.configs.into(),
        out: args.out.clone(),
    })?;
    super::finish(&report, args.format.into(), args.out.as_deref())
}
