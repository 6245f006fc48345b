//! The arguments of `verify`'s emulated model runs:
//! the input data, the target and the executor.

use std::path::PathBuf;

use clap::Args;
use memtrace_driver::kernels::Kernels;
use memtrace_tracer::Arch;

/// Seed, input, target, kernel library and executor of a model run.
#[derive(Args, Debug, Clone)]
pub struct ExecutorArgs {
    /// Seed of the generated input (and of the weights of zoo models).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Raw bytes of the (first) graph input, instead of seeded data.
    #[arg(long, value_name = "FILE")]
    pub input: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = Arch::CortexM4)]
    pub target: Arch,
    /// Kernel library of the executor (cmsis-nn: executor-cmsis.elf; verify
    /// also compares its outputs with the TFLM reference kernels').
    #[arg(long, value_enum, default_value_t = Kernels::Tflm)]
    pub kernels: Kernels,
    /// The executor ELF (default: harness-c/build/TARGET/executor.elf, or
    /// executor-cmsis.elf with --kernels cmsis-nn).
    #[arg(long, value_name = "ELF")]
    pub executor: Option<PathBuf>,
}
