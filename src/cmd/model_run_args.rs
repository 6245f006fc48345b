//! The arguments of one emulated model run that `verify` and `cold` share:
//! the input data, the target, the kernel library and the TFLM runner.

use std::path::PathBuf;

use clap::Args;
use memtrace_driver::runtime::kernels::Kernels;
use memtrace_tracer::Arch;

/// Seed, input, target, kernel library and runner of a model run.
#[derive(Args, Debug, Clone)]
pub struct ModelRunArgs {
    /// Seed of the generated input (and of the weights of zoo models).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Raw bytes of the graph inputs, concatenated in input order, instead
    /// of seeded data.
    #[arg(long, value_name = "FILE")]
    pub input: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = Arch::CortexM4)]
    pub target: Arch,
    /// TFLM's kernels: tflm (its reference kernels, tflm-runner.elf) or
    /// cmsis-nn (its CMSIS-NN kernels, tflm-runner-cmsis.elf).
    #[arg(long, value_enum, default_value_t = Kernels::Tflm)]
    pub kernels: Kernels,
    /// The TFLM runner ELF (default: harness-c/build/TARGET/tflm-runner.elf,
    /// or tflm-runner-cmsis.elf with --kernels cmsis-nn).
    // `--executor`, its old name, is still accepted (not offered) for one
    // release.
    #[arg(long, value_name = "ELF", alias = "executor")]
    pub runner: Option<PathBuf>,
}
