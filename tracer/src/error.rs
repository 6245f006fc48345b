//! Everything that can go wrong while loading or tracing a guest, each with
//! enough context (file, layer, guest PC and source line) to act on.

use std::fmt;
use std::path::PathBuf;

/// A guest code address resolved through the ELF symbols and DWARF line table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CodeLocation {
    pub pc: u64,
    pub function: Option<String>,
    pub file: Option<String>,
    pub line: Option<u32>,
    /// When the PC is in inlined code (such as memtrace.h's helpers), the
    /// function it was inlined into, as "name (file:line)".
    pub inlined_into: Option<String>,
}

impl fmt::Display for CodeLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pc {:#x}", self.pc)?;
        if let Some(func) = &self.function {
            write!(f, " in `{func}`")?;
        }
        match (&self.file, self.line) {
            (Some(file), Some(line)) => write!(f, " ({file}:{line})"),
            (Some(file), None) => write!(f, " ({file})"),
            _ => Ok(()),
        }?;
        if let Some(caller) = &self.inlined_into {
            write!(f, " inlined into `{caller}`")?;
        }
        Ok(())
    }
}

/// Where in the guest's protocol stream an error happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuestContext {
    pub location: CodeLocation,
    /// Name of the open layer, if any.
    pub layer: Option<String>,
}

impl fmt::Display for GuestContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(layer) = &self.layer {
            write!(f, "in layer `{layer}`, ")?;
        }
        write!(f, "at {}", self.location)
    }
}

/// Errors of the tracer.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not an ELF file ({reason})")]
    NotElf { path: PathBuf, reason: String },
    #[error("{path}: unsupported architecture {arch}; memtrace runs ARM Cortex-M (Thumb) and x86-64 ELF executables")]
    UnsupportedArch { path: PathBuf, arch: String },
    #[error("{path}: malformed ELF: {reason}")]
    MalformedElf { path: PathBuf, reason: String },
    #[error(
        "{path} has no `{symbol}` symbol: was it built without memtrace.h? (see docs/protocol.md)"
    )]
    MissingProtocol { path: PathBuf, symbol: &'static str },
    #[error("{path} has no `memtrace_job` mailbox of {needed} bytes, so --job cannot be used with it (is it a memtrace kernel suite?)")]
    NoJobMailbox { path: PathBuf, needed: usize },
    #[error("protocol violation {context}: {message}")]
    Protocol {
        message: String,
        context: Box<GuestContext>,
    },
    #[error("guest fault {context}: {message}")]
    GuestFault {
        message: String,
        context: Box<GuestContext>,
    },
    #[error(
        "instruction budget of {budget} exceeded {context} (raise it with --max-instructions)"
    )]
    BudgetExceeded {
        budget: u64,
        context: Box<GuestContext>,
    },
    #[error("guest stopped {context} without calling memtrace_exit")]
    NoExit { context: Box<GuestContext> },
    #[error("the analysis side stopped reading events")]
    Disconnected,
    #[error("an analysis panicked while consuming the trace")]
    AnalysisPanicked,
    #[error("emulator error: {0}")]
    Emulator(String),
}

/// Result of the tracer's operations.
pub type Result<T, E = TraceError> = std::result::Result<T, E>;
