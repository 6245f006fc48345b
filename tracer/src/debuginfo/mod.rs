//! PC -> function and file:line, from DWARF (gimli + addr2line), loaded lazily:
//! only error reports and event tables that ask for locations pay for it.
//! Also the layouts of named structures and the values of named
//! enumerators ([`TypeLayouts`]), for reading a program's own data
//! structures from guest memory without hard-coding their offsets
//! (`layouts.rs`).

mod layouts;

pub use layouts::{Member, StructLayout, TypeLayouts};

use std::borrow::Cow;
use std::sync::Arc;

use object::{Object, ObjectSection};

use crate::arch::Machine;
use crate::elf::ElfImage;
use crate::error::{CodeLocation, TraceError};

type Reader = gimli::EndianArcSlice<gimli::RunTimeEndian>;

/// One function of the chain of inlined calls at a PC.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Frame {
    /// Function name, demangled (C++ names with their parameter list).
    pub function: Option<String>,
    /// Full path of the source file of this function's code at the PC, from
    /// the DWARF line table: the PC's own line for the innermost frame, the
    /// call site of the next inner frame for the others.
    pub file: Option<String>,
    /// Source line in `file`.
    pub line: Option<u32>,
}

/// Source-level view of a guest binary.
pub struct DebugInfo {
    context: Option<addr2line::Context<Reader>>,
}

impl DebugInfo {
    /// Loads the DWARF sections; a binary without them still resolves
    /// functions through its symbol table.
    pub fn load(image: &ElfImage) -> DebugInfo {
        DebugInfo {
            context: load_context(&image.bytes).ok(),
        }
    }

    /// Resolves `pc` (on Cortex-M4 the Thumb bit is ignored; x86-64
    /// instructions may start at odd addresses).
    pub fn locate(&self, image: &ElfImage, pc: u64) -> CodeLocation {
        let pc = image.arch.code_address(pc);
        let mut loc = CodeLocation {
            pc,
            function: image.function_at(pc).map(str::to_owned),
            file: None,
            line: None,
            inlined_into: None,
        };
        if let Some(ctx) = &self.context {
            if let Ok(mut frames) = ctx.find_frames(pc).skip_all_loads() {
                // Innermost first: the inlined function the PC is really in,
                // then the functions it was inlined into.
                let mut described = Vec::new();
                while let Ok(Some(frame)) = frames.next() {
                    let name = frame
                        .function
                        .as_ref()
                        .and_then(|f| f.demangle().ok())
                        .map(|n| n.into_owned());
                    let (file, line) = frame
                        .location
                        .map(|l| (l.file.map(short_path), l.line))
                        .unwrap_or((None, None));
                    described.push((name, file, line));
                }
                if let Some((name, file, line)) = described.first().cloned() {
                    loc.function = name.or(loc.function);
                    loc.file = file;
                    loc.line = line;
                }
                if described.len() > 1 {
                    let (name, file, line) = described.last().cloned().unwrap_or_default();
                    loc.inlined_into = Some(format!(
                        "{}{}",
                        name.unwrap_or_else(|| "?".into()),
                        match (file, line) {
                            (Some(f), Some(l)) => format!(" ({f}:{l})"),
                            _ => String::new(),
                        }
                    ));
                }
            }
        }
        loc
    }
}

impl DebugInfo {
    /// The calls that led to the instruction at `pc`, innermost first, as
    /// code locations (function, short file path, line): the functions its
    /// code is inlined into, then for each of `return_addresses` (the
    /// physical callers the tracer unwound, [`crate::TraceError`]'s
    /// `callers`) the call instruction just before it, with the functions
    /// inlined there. Each location's `pc` is the return address of its
    /// physical frame (`pc` itself for the first ones).
    pub fn call_chain(
        &self,
        image: &ElfImage,
        pc: u64,
        return_addresses: &[u64],
    ) -> Vec<CodeLocation> {
        let at = |pc: u64, frames: Vec<Frame>| -> Vec<CodeLocation> {
            frames
                .into_iter()
                .map(|f| CodeLocation {
                    pc,
                    function: f.function,
                    file: f.file.as_deref().map(short_path),
                    line: f.line,
                    inlined_into: None,
                })
                .collect()
        };
        let mut chain = at(pc, self.frames(image, pc));
        if !chain.is_empty() {
            chain.remove(0);
        }
        let mut seen: std::collections::HashMap<u64, Vec<CodeLocation>> = Default::default();
        for &ra in return_addresses {
            let sites = seen
                .entry(ra)
                .or_insert_with(|| at(ra, self.frames(image, ra.saturating_sub(1))));
            chain.extend(sites.iter().cloned());
        }
        chain
    }

    /// The chain of functions at `pc` (on Cortex-M4 the Thumb bit ignored),
    /// innermost first:
    /// the inlined function the PC is really in, then each function it was
    /// inlined into, ending with the function that owns the code. Without
    /// DWARF for the PC, the one frame of the symbol containing it (no file);
    /// empty when no symbol contains it either.
    pub fn frames(&self, image: &ElfImage, pc: u64) -> Vec<Frame> {
        let pc = image.arch.code_address(pc);
        let mut out = Vec::new();
        if let Some(ctx) = &self.context {
            if let Ok(mut frames) = ctx.find_frames(pc).skip_all_loads() {
                while let Ok(Some(frame)) = frames.next() {
                    let (file, line) = frame
                        .location
                        .map(|l| (l.file.map(str::to_owned), l.line))
                        .unwrap_or((None, None));
                    out.push(Frame {
                        function: frame
                            .function
                            .as_ref()
                            .and_then(|f| f.demangle().ok())
                            .map(|n| n.into_owned()),
                        file,
                        line,
                    });
                }
            }
        }
        if out.is_empty() {
            if let Some(name) = image.function_at(pc) {
                out.push(Frame {
                    function: Some(name.to_owned()),
                    ..Frame::default()
                });
            }
        }
        out
    }
}

/// The last two path components keep messages short but unambiguous.
pub fn short_path(path: &str) -> String {
    let parts: Vec<&str> = path.rsplitn(3, '/').collect();
    match parts.as_slice() {
        [file, dir, _] => format!("{dir}/{file}"),
        _ => path.to_owned(),
    }
}

fn load_context(bytes: &Arc<[u8]>) -> Result<addr2line::Context<Reader>, gimli::Error> {
    addr2line::Context::from_dwarf(load_dwarf(bytes)?)
}

fn load_dwarf(bytes: &Arc<[u8]>) -> Result<gimli::Dwarf<Reader>, gimli::Error> {
    let file = object::File::parse(&**bytes).map_err(|_| gimli::Error::Io)?;
    let endian = if file.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    gimli::Dwarf::load(|id| -> Result<Reader, gimli::Error> {
        let data: Cow<[u8]> = file
            .section_by_name(id.name())
            .and_then(|s| s.uncompressed_data().ok())
            .unwrap_or(Cow::Borrowed(&[]));
        Ok(gimli::EndianArcSlice::new(Arc::from(&*data), endian))
    })
}

/// Fills function and file:line into the error's guest context, for the
/// PC and for each caller (at its call instruction, just before the return
/// address; with the functions inlined there).
pub(crate) fn with_locations(mut err: TraceError, image: &ElfImage) -> TraceError {
    let ctx = match &mut err {
        TraceError::Protocol { context, .. }
        | TraceError::GuestFault { context, .. }
        | TraceError::StackOverflow { context, .. }
        | TraceError::BudgetExceeded { context, .. }
        | TraceError::LoopsForever { context }
        | TraceError::TimeLimit { context, .. }
        | TraceError::NoExit { context } => context,
        _ => return err,
    };
    let debug = DebugInfo::load(image);
    ctx.location = debug.locate(image, ctx.location.pc);
    let returns: Vec<u64> = ctx.callers.iter().map(|c| c.pc).collect();
    if !returns.is_empty() {
        ctx.callers = debug.call_chain(image, ctx.location.pc, &returns);
        // The chain starts with the functions the PC is inlined into.
        ctx.location.inlined_into = None;
    }
    err
}
