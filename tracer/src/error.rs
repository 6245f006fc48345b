//! Everything that can go wrong while loading or tracing a guest, each with
//! enough context (file, layer, guest PC and source line) to act on.

use std::fmt;
use std::path::PathBuf;

/// A guest code address resolved through the ELF symbols and DWARF line table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CodeLocation {
    /// Address of the guest instruction.
    pub pc: u64,
    /// Function containing the PC (from DWARF or the symbol table), if known.
    pub function: Option<String>,
    /// Source file of the PC, from the DWARF line table.
    pub file: Option<String>,
    /// Source line of the PC, from the DWARF line table.
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
    /// Guest code location (PC, function, file:line) where the error happened.
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
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// Path of the file.
        path: PathBuf,
        /// Underlying I/O error.
        source: std::io::Error,
    },
    /// The file does not start with an ELF header.
    #[error("{path} is not an ELF file ({reason})")]
    NotElf {
        /// Path of the file.
        path: PathBuf,
        /// Why it is not an ELF file.
        reason: String,
    },
    /// The ELF is neither a Thumb ARM nor an x86-64 executable.
    #[error("{path}: unsupported architecture {arch}; memtrace runs ARM Cortex-M (Thumb) and x86-64 ELF executables")]
    UnsupportedArch {
        /// Path of the ELF file.
        path: PathBuf,
        /// The architecture found.
        arch: String,
    },
    /// A well-formed ELF file of a kind memtrace does not run.
    #[error("{path}: unsupported ELF: {reason}")]
    UnsupportedElf {
        /// The file.
        path: PathBuf,
        /// What it is and what memtrace needs instead.
        reason: String,
    },
    /// The ELF could not be parsed, or has no usable loadable segments.
    #[error("{path}: malformed ELF: {reason}")]
    MalformedElf {
        /// Path of the ELF file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The guest lacks a symbol of the memtrace protocol (`memtrace_port`).
    #[error(
        "{path} has no `{symbol}` symbol: was it built without memtrace.h? (see docs/protocol.md)"
    )]
    MissingProtocol {
        /// Path of the ELF file.
        path: PathBuf,
        /// The missing symbol.
        symbol: &'static str,
    },
    /// A job was given but the guest has no big enough `memtrace_job` mailbox.
    #[error("{path} has no `memtrace_job` mailbox of {needed} bytes, so --job cannot be used with it (is it a memtrace kernel suite?)")]
    NoJobMailbox {
        /// Path of the ELF file.
        path: PathBuf,
        /// Size in bytes the mailbox needs.
        needed: usize,
    },
    /// The guest broke a rule of the port protocol (docs/protocol.md).
    #[error("protocol violation {context}: {message}")]
    Protocol {
        /// What was wrong.
        message: String,
        /// Layer and guest PC of the offending port write.
        context: Box<GuestContext>,
    },
    /// The guest faulted: an unmapped access, an interrupt or exception, or an
    /// emulation error.
    #[error("guest fault {context}: {message}")]
    GuestFault {
        /// What happened (the access, the interrupt, or Unicorn's error).
        message: String,
        /// Layer and guest PC at the fault.
        context: Box<GuestContext>,
    },
    /// The guest retired more instructions than `max_instructions` allows.
    #[error(
        "instruction budget of {budget} exceeded {context} (raise it with --max-instructions)"
    )]
    BudgetExceeded {
        /// The instruction budget (`TraceOptions::max_instructions`).
        budget: u64,
        /// Layer and guest PC when the budget ran out.
        context: Box<GuestContext>,
    },
    /// Emulation ended without the guest calling `memtrace_exit`.
    #[error("guest stopped {context} without calling memtrace_exit")]
    NoExit {
        /// Layer and guest PC where emulation stopped.
        context: Box<GuestContext>,
    },
    /// The analysis side closed its channel before the run ended.
    #[error("the analysis side stopped reading events")]
    Disconnected,
    /// An analysis panicked on its thread.
    #[error("an analysis panicked while consuming the trace")]
    AnalysisPanicked,
    /// Unicorn failed to set up or run the machine (map, write, hook, start).
    #[error("emulator error: {0}")]
    Emulator(String),
}

/// Result of the tracer's operations.
pub type Result<T, E = TraceError> = std::result::Result<T, E>;
