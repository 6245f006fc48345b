//! What a run ran on and how it was watched: the guest architecture, the
//! kernel library of the harness builds, and the access path. Reports carry
//! these enums and write them by their names (serde and `Display` alike).

use std::fmt;

use serde::{Deserialize, Serialize};

/// The guest architectures memtrace emulates: one Cortex-M core each (the
/// CPU model Unicorn runs, Thumb only), a 32-bit RISC-V core, and x86-64 as
/// a host.
///
/// Cortex-M cores differ in what a kernel library compiles to: CMSIS-NN
/// takes its pure-C paths on the M0 and M3 and its DSP (SIMD) paths on the
/// M4, M7 and M33, which read and write memory in other orders and ask for
/// other scratch. O_s and plans therefore belong to a core.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Arch {
    /// ARMv6-M, emulated as a Cortex-M0. The Cortex-M0+ has the same
    /// instruction set (it adds an MPU, a vector table offset and a faster
    /// pipeline, nothing a trace sees), and Unicorn models no M0+, so
    /// `cortex-m0plus` names this target too.
    #[serde(rename = "cortex-m0", alias = "cortex-m0plus")]
    #[cfg_attr(feature = "clap", value(name = "cortex-m0", alias = "cortex-m0plus"))]
    CortexM0,
    /// ARMv7-M (Thumb-2, no DSP extension, no FPU), emulated as a Cortex-M3.
    #[serde(rename = "cortex-m3")]
    #[cfg_attr(feature = "clap", value(name = "cortex-m3"))]
    CortexM3,
    /// ARMv7E-M Thumb-2 with the DSP extension and a single-precision FPU,
    /// emulated as a Cortex-M4.
    #[serde(rename = "cortex-m4")]
    #[cfg_attr(feature = "clap", value(name = "cortex-m4"))]
    CortexM4,
    /// ARMv7E-M with a double-precision FPU (FPv5), emulated as a
    /// Cortex-M7.
    #[serde(rename = "cortex-m7")]
    #[cfg_attr(feature = "clap", value(name = "cortex-m7"))]
    CortexM7,
    /// ARMv8-M Mainline with the DSP extension and a single-precision FPU
    /// (FPv5), emulated as a Cortex-M33.
    #[serde(rename = "cortex-m33")]
    #[cfg_attr(feature = "clap", value(name = "cortex-m33"))]
    CortexM33,
    /// ARMv8.1-M Mainline with the DSP extension, Helium (MVE) and an FPv5
    /// FPU: the Cortex-M55. Unicorn has no such core: it runs on the QEMU
    /// engine (`mps3-an547`).
    #[serde(rename = "cortex-m55")]
    #[cfg_attr(feature = "clap", value(name = "cortex-m55"))]
    CortexM55,
    /// 32-bit RISC-V, RV32IMAC (the ESP32-C6's instruction set; code built
    /// for RV32IMC, the ESP32-C3's, runs on it unchanged), no FPU: float is
    /// done in software. Emulated as Unicorn's generic RV32 core.
    #[serde(rename = "riscv32")]
    #[cfg_attr(feature = "clap", value(name = "riscv32"))]
    Riscv32,
    /// x86-64 (SSE2, no AVX), freestanding.
    #[serde(rename = "x86-64")]
    #[cfg_attr(feature = "clap", value(name = "x86-64"))]
    X86_64,
}

impl Arch {
    /// Every target, the Cortex-M cores from the smallest.
    pub const ALL: [Arch; 8] = [
        Arch::CortexM0,
        Arch::CortexM3,
        Arch::CortexM4,
        Arch::CortexM7,
        Arch::CortexM33,
        Arch::CortexM55,
        Arch::Riscv32,
        Arch::X86_64,
    ];

    /// Name used on the command line and in reports (`cortex-m4`, `x86-64`).
    pub fn name(self) -> &'static str {
        match self {
            Arch::CortexM0 => "cortex-m0",
            Arch::CortexM3 => "cortex-m3",
            Arch::CortexM4 => "cortex-m4",
            Arch::CortexM7 => "cortex-m7",
            Arch::CortexM33 => "cortex-m33",
            Arch::CortexM55 => "cortex-m55",
            Arch::Riscv32 => "riscv32",
            Arch::X86_64 => "x86-64",
        }
    }

    /// The target named `name` as [`Arch::name`] spells it (and
    /// `cortex-m0plus` for the Cortex-M0 target).
    pub fn from_name(name: &str) -> Option<Arch> {
        if name == "cortex-m0plus" {
            return Some(Arch::CortexM0);
        }
        Arch::ALL.into_iter().find(|a| a.name() == name)
    }

    /// Whether this is a Cortex-M core (Thumb code, the ARM emulator).
    pub fn is_cortex_m(self) -> bool {
        !matches!(self, Arch::X86_64 | Arch::Riscv32)
    }

    /// Whether Arm's CMSIS-NN is a kernel library of this target. It is
    /// Arm's library for Cortex-M: its pure-C paths would compile
    /// elsewhere, but no RISC-V deployment ships it, so a RISC-V plan is
    /// made with TFLM's reference kernels (x86-64 builds it as a host
    /// check of the library itself).
    pub fn has_cmsis_nn(self) -> bool {
        self != Arch::Riscv32
    }

    /// Whether Unicorn emulates this core; the others run on the QEMU
    /// engine only.
    pub fn unicorn_has(self) -> bool {
        self != Arch::CortexM55
    }

    /// The harness's build folder of this target (`harness-c/build/<dir>`).
    pub fn build_dir(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            core => core.name(),
        }
    }

    /// End (exclusive) of the guest address space a segment may occupy: the
    /// 32-bit space of a Cortex-M or RV32, the canonical lower half (47
    /// bits) of x86-64.
    pub fn address_limit(self) -> u64 {
        match self {
            Arch::X86_64 => 1 << 47,
            _ => 1 << 32,
        }
    }
}

/// How accesses to declared buffers are observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AccessPath {
    /// Memory hooks: every event carries its exact instruction (`t`) and PC.
    #[default]
    Hooks,
    /// Buffer pages mapped as MMIO while their layer is open: several times
    /// faster; events keep their exact order, kinds and sizes, but `t` and
    /// `pc` are those of the block that made them. Layer instruction counts
    /// stay exact. Falls back to `Hooks` for guests without
    /// `memtrace_signal` (built with an older memtrace.h).
    Mmio,
}

impl AccessPath {
    /// Name used on the command line and in reports (`hooks`, `mmio`).
    pub fn name(self) -> &'static str {
        match self {
            AccessPath::Hooks => "hooks",
            AccessPath::Mmio => "mmio",
        }
    }
}

/// The emulator that runs a guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum EngineKind {
    /// Unicorn 2.1, in memtrace's own process: the Cortex-M0, M3, M4, M7
    /// and M33, RISC-V and x86-64.
    #[default]
    Unicorn,
    /// QEMU 10 with memtrace's TCG plugin, as a child process: the
    /// Cortex-M55 (Helium) on the `mps3-an547` board, and Cortex-M builds
    /// linked for that board.
    Qemu,
}

impl EngineKind {
    /// Name used on the command line and in reports (`unicorn`, `qemu`).
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Unicorn => "unicorn",
            EngineKind::Qemu => "qemu",
        }
    }

    /// The engine a core runs on unless told otherwise.
    pub fn default_for(arch: Arch) -> EngineKind {
        if arch.unicorn_has() {
            EngineKind::Unicorn
        } else {
            EngineKind::Qemu
        }
    }
}

/// The ML runtime whose interpreter runs a model: its arena layout, scratch
/// requests and operator order are what a plan for it assumes. One today; a
/// second (ExecuTorch, say) is a variant here and a runner of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Runtime {
    /// TensorFlow Lite Micro's `MicroInterpreter` (the `tflm-runner*.elf`
    /// guests).
    #[default]
    Tflm,
}

impl Runtime {
    /// The runtime's name in reports and plan files.
    pub fn name(self) -> &'static str {
        match self {
            Runtime::Tflm => "tflm",
        }
    }
}

/// A kernel library of the harness builds: the same operator compiled from
/// two libraries can walk memory in different orders.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Kernels {
    /// TensorFlow Lite Micro's reference kernels (`suite.elf`, `tflm-runner.elf`).
    #[default]
    Tflm,
    /// Arm CMSIS-NN (`suite-cmsis.elf`, `tflm-runner-cmsis.elf`), built from
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

    /// The library named `name` as [`Kernels::name`] spells it.
    pub fn from_name(name: &str) -> Option<Kernels> {
        [Kernels::Tflm, Kernels::CmsisNn]
            .into_iter()
            .find(|k| k.name() == name)
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

macro_rules! display_by_name {
    ($($t:ty),*) => {$(
        impl fmt::Display for $t {
            /// The name, padded as the format asks.
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.pad(self.name())
            }
        }
    )*};
}

display_by_name!(Arch, AccessPath, EngineKind, Kernels);

#[cfg(test)]
mod tests {
    use super::*;

    fn json<T: Serialize>(value: T) -> String {
        serde_json::to_string(&value).unwrap()
    }

    #[test]
    fn names_are_the_serialised_names() {
        for a in Arch::ALL {
            assert_eq!(json(a), format!("\"{}\"", a.name()));
            assert_eq!(a.to_string(), a.name());
            assert_eq!(Arch::from_name(a.name()), Some(a));
        }
        let m0plus: Arch = serde_json::from_str("\"cortex-m0plus\"").unwrap();
        assert_eq!(m0plus, Arch::CortexM0);
        assert_eq!(Arch::from_name("cortex-m0plus"), Some(Arch::CortexM0));
        for p in [AccessPath::Hooks, AccessPath::Mmio] {
            assert_eq!(json(p), format!("\"{}\"", p.name()));
            assert_eq!(format!("{p:>6}"), format!("{:>6}", p.name()));
        }
        for k in [Kernels::Tflm, Kernels::CmsisNn] {
            assert_eq!(json(k), format!("\"{}\"", k.name()));
            assert_eq!(Kernels::from_name(k.name()), Some(k));
        }
    }
}
