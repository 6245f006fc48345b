//! Which emulator runs a traced guest. Both engines drive the same
//! engine-blind protocol and event recorder (`record`): an engine
//! implements `record::Guest` — guest memory, the call of
//! `memtrace_signal`, the instruction index — and reports each access to a
//! traced range and each store to the port; everything above (events,
//! analyses, every workflow) does not know which engine ran.

pub use memtrace_abi::target::EngineKind;
use std::path::PathBuf;

/// The emulator a run uses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Engine {
    /// Unicorn 2.1 in this process: the Cortex-M0, M3, M4, M7 and M33,
    /// RISC-V and x86-64.
    #[default]
    Unicorn,
    /// QEMU 10 as a child process with memtrace's plugin: the Cortex-M55
    /// (Helium) and the other Cortex-M cores QEMU's boards have.
    Qemu(QemuConfig),
}

impl Engine {
    /// The kind of this engine.
    pub fn kind(&self) -> EngineKind {
        match self {
            Engine::Unicorn => EngineKind::Unicorn,
            Engine::Qemu(_) => EngineKind::Qemu,
        }
    }
}

/// Where QEMU and the plugin are, and the board and core to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QemuConfig {
    /// `qemu-system-arm`, version 10 or later (plugin API 4).
    pub qemu: PathBuf,
    /// memtrace's plugin, `libmemtrace-qemu.so`.
    pub plugin: PathBuf,
    /// QEMU's `-machine`, e.g. `mps3-an547`.
    pub machine: String,
    /// QEMU's `-cpu`, e.g. `cortex-m55`.
    pub cpu: String,
}
