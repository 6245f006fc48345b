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
    /// The calls that led there, innermost caller first, each at its call
    /// instruction (unwound from the stack with the ELF's call-frame
    /// information; empty when it has none, or for errors the tracer does
    /// not unwind).
    pub callers: Vec<CodeLocation>,
}

impl GuestContext {
    /// The context of guest PC `pc` in `layer`, before its location is
    /// looked up in the debug information.
    pub(crate) fn at(pc: u64, layer: Option<String>) -> Box<Self> {
        Box::new(GuestContext {
            location: CodeLocation {
                pc,
                ..CodeLocation::default()
            },
            layer,
            callers: Vec::new(),
        })
    }
}

impl fmt::Display for GuestContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(layer) = &self.layer {
            write!(f, "in layer `{layer}`, ")?;
        }
        write!(f, "at {}", self.location)?;
        if !self.callers.is_empty() {
            write!(f, ", called from {}", chain_text(&self.callers))?;
        }
        Ok(())
    }
}

/// Caller groups [`chain_text`] names before it says how many frames remain.
const CHAIN_GROUPS: usize = 8;

/// A call chain in words, innermost caller first: consecutive frames at the
/// same call site as one (`` `descend` (stack.c:20) × 8190 ``), up to
/// `main`, at most eight of them.
pub fn chain_text(callers: &[CodeLocation]) -> String {
    let site = |l: &CodeLocation| {
        let name = l.function.as_deref().unwrap_or("?");
        match (&l.file, l.line) {
            (Some(file), Some(line)) => format!("`{name}` ({file}:{line})"),
            _ => format!("`{name}` ({:#x})", l.pc),
        }
    };
    let mut groups: Vec<(String, usize, bool)> = Vec::new();
    let mut shown = 0;
    for l in callers {
        let text = site(l);
        match groups.last_mut() {
            Some((last, n, _)) if *last == text => *n += 1,
            _ => {
                if groups.len() == CHAIN_GROUPS {
                    break;
                }
                groups.push((text, 1, l.function.as_deref() == Some("main")));
            }
        }
        shown += 1;
        if groups.last().is_some_and(|g| g.2) {
            break;
        }
    }
    let mut text = groups
        .iter()
        .map(|(site, n, _)| match n {
            1 => site.clone(),
            n => format!("{site} × {n}"),
        })
        .collect::<Vec<_>>()
        .join(", from ");
    let reached_main = groups.last().is_some_and(|g| g.2);
    if shown < callers.len() && !reached_main {
        text.push_str(&format!(", … ({} more frames)", callers.len() - shown));
    }
    text
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
    /// A directory, FIFO, device or socket where a file was expected.
    #[error("cannot read {path}: it is {kind}, not a regular file")]
    NotRegular {
        /// The path.
        path: PathBuf,
        /// What it is (`a FIFO`, `a directory`, …).
        kind: &'static str,
    },
    /// The file has no ELF magic number: it is something else.
    #[error("{path} is not an ELF file (first bytes {first_bytes})")]
    NoElfMagic {
        /// Path of the file.
        path: PathBuf,
        /// Its first bytes ([`memtrace_io::input::first_bytes`]).
        first_bytes: String,
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
    /// An executable asked to run on a core that lacks what it was built
    /// for (its `.ARM.attributes`).
    #[error("{path} cannot run on the {target} target: {reason}")]
    WrongCore {
        /// Path of the ELF file.
        path: PathBuf,
        /// The target asked for.
        target: &'static str,
        /// What the executable needs that the core lacks.
        reason: String,
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
    /// The memory a program run as built needs (its heap and stack beside
    /// its segments) does not fit guest memory.
    #[error("{path}: {reason}")]
    NoRoom {
        /// Path of the ELF file.
        path: PathBuf,
        /// What does not fit, and the accepted sizes.
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
    /// The guest's stack grew below `__stack_bottom` (docs/protocol.md,
    /// section 11): a recursion without end, a frame too large for the
    /// stack, or a function that calls itself (a `memcpy` compiled into a
    /// call to `memcpy`).
    #[error(
        "stack overflow: {below} B below the stack bottom, at {address:#x} (the stack is {stack_bytes} B; {frames} frames deep), {context}"
    )]
    StackOverflow {
        /// Bytes between the access and the stack bottom.
        below: u64,
        /// Guest address of the access.
        address: u64,
        /// `__stack_top - __stack_bottom`.
        stack_bytes: u64,
        /// Frames on the stack: the faulting function and its callers (as
        /// far as they could be unwound).
        frames: usize,
        /// Layer, guest PC and call chain at the access.
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
    /// The guest entered a branch to itself (`b .`, newlib's nosys
    /// `_exit`, a `while (1);`), which nothing can leave: memtrace raises
    /// no interrupt.
    #[error(
        "the program loops forever {context}: a branch to itself, which nothing can leave (memtrace raises no interrupt)"
    )]
    LoopsForever {
        /// Layer, guest PC and call chain of the loop.
        context: Box<GuestContext>,
    },
    /// An untraced run (which has no instruction clock to budget) did not
    /// exit within its time limit.
    #[error(
        "guest did not exit within {seconds:.0} s {context}, the time limit of a run without hooks (from --max-instructions)"
    )]
    TimeLimit {
        /// The time limit.
        seconds: f64,
        /// Guest PC when the limit ran out.
        context: Box<GuestContext>,
    },
    /// Emulation ended without the guest calling `memtrace_exit`.
    #[error("guest stopped {context} without calling memtrace_exit")]
    NoExit {
        /// Layer and guest PC where emulation stopped.
        context: Box<GuestContext>,
    },
    /// The two runs of a [`crate::ClockMode::Parallel`] trace did not run the
    /// same program: the guest depends on something other than its inputs.
    #[error("the guest ran differently in its two runs (events, and the instruction count): {0}")]
    PassesDiffer(String),
    /// The analysis side closed its channel before the run ended.
    #[error("the analysis side stopped reading events")]
    Disconnected,
    /// An analysis panicked on its thread.
    #[error("an analysis panicked while consuming the trace")]
    AnalysisPanicked,
    /// Unicorn failed to set up or run the machine (map, write, hook, start).
    #[error("emulator error: {0}")]
    Emulator(String),
    /// An unmodified program asked for its command line (`SYS_GET_CMDLINE`)
    /// with a buffer too small for it: run on, it would start without its
    /// arguments.
    #[error(
        "{path}: its command line is {bytes} B with the terminating NUL, more than the {buffer} B buffer the program gave SYS_GET_CMDLINE (newlib's crt0 gives 255 B: at most 254 characters of file name, spaces and arguments); shorten the arguments after `--` or the program's file name"
    )]
    CommandLineTooLong {
        /// The program.
        path: PathBuf,
        /// Bytes of its command line (file name and arguments joined by
        /// spaces) with the NUL.
        bytes: usize,
        /// Bytes of the buffer it asked with.
        buffer: u32,
    },
}

/// Result of the tracer's operations.
pub type Result<T, E = TraceError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    fn site(function: &str, line: u32) -> CodeLocation {
        CodeLocation {
            pc: 0x100,
            function: Some(function.into()),
            file: Some("guests/x.c".into()),
            line: Some(line),
            inlined_into: None,
        }
    }

    #[test]
    fn a_chain_groups_repeated_call_sites_and_stops_at_main() {
        let mut chain = vec![site("descend", 9); 5000];
        chain.extend([site("main", 20), site("memtrace_rt_start", 3)]);
        assert_eq!(
            chain_text(&chain),
            "`descend` (guests/x.c:9) × 5000, from `main` (guests/x.c:20)"
        );
    }

    #[test]
    fn a_long_chain_without_main_says_how_many_frames_it_leaves_out() {
        let chain: Vec<CodeLocation> = (0..20).map(|i| site("f", i)).collect();
        let text = chain_text(&chain);
        assert_eq!(text.matches(", from ").count(), CHAIN_GROUPS - 1, "{text}");
        assert!(text.ends_with(", … (12 more frames)"), "{text}");
        let unknown = CodeLocation {
            pc: 0x8001234,
            ..CodeLocation::default()
        };
        assert_eq!(chain_text(&[unknown]), "`?` (0x8001234)");
    }
}
