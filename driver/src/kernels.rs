//! Kernel libraries: which build of the harness's guests runs a layer or a
//! model. The same operator compiled from two libraries can walk memory in
//! different orders, so O_s, scratch needs and the safety of an overlapped
//! plan belong to the library build, not to the operator.

use std::path::{Path, PathBuf};

use memtrace_tracer::Arch;

use crate::error::Result;
use crate::failed;

/// A kernel library of the harness builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Kernels {
    /// TensorFlow Lite Micro's reference kernels (`suite.elf`, `executor.elf`).
    Tflm,
    /// Arm CMSIS-NN (`suite-cmsis.elf`, `executor-cmsis.elf`), built from
    /// `CMSIS_NN_DIR`.
    CmsisNn,
}

impl Kernels {
    /// The library's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Kernels::Tflm => "tflm",
            Kernels::CmsisNn => "cmsis-nn",
        }
    }

    /// File name of the library's whole-model executor.
    pub fn executor_file(self) -> &'static str {
        match self {
            Kernels::Tflm => "executor.elf",
            Kernels::CmsisNn => "executor-cmsis.elf",
        }
    }

    /// File name of the TFLM runner built with this library's kernels
    /// (real TensorFlow Lite Micro: `MicroInterpreter` with TFLM's own
    /// reference kernels, or TFLM's CMSIS-NN kernels).
    pub fn runner_file(self) -> &'static str {
        match self {
            Kernels::Tflm => "tflm-runner.elf",
            Kernels::CmsisNn => "tflm-runner-cmsis.elf",
        }
    }

    /// File name of the library's kernel suite.
    pub fn suite_file(self) -> &'static str {
        match self {
            Kernels::Tflm => "suite.elf",
            Kernels::CmsisNn => "suite-cmsis.elf",
        }
    }
}

/// The harness build folder of `arch`.
pub fn build_dir(arch: Arch) -> &'static str {
    match arch {
        Arch::CortexM4 => "cortex-m4",
        Arch::X86_64 => "x86_64",
    }
}

/// `harness-c/build/ARCH/FILE`, from the working directory or the source
/// tree; the error says how to get it.
pub fn harness_guest(arch: Arch, file: &str, option: &str) -> Result<PathBuf> {
    let rel = Path::new("harness-c/build")
        .join(build_dir(arch))
        .join(file);
    let candidates = [
        rel.clone(),
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(&rel),
    ];
    candidates
        .iter()
        .find(|p| p.exists())
        .cloned()
        .ok_or_else(|| {
            let cmsis = if file.contains("cmsis") {
                " with CMSIS_NN_DIR=/path/to/CMSIS-NN"
            } else {
                ""
            };
            failed!(
                "{} not found: build the guests (`make -C harness-c`{cmsis}) or pass {option}",
                rel.display()
            )
        })
}
