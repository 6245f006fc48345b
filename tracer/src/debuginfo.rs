//! PC -> function and file:line, from DWARF (gimli + addr2line), loaded lazily:
//! only error reports and event tables that ask for locations pay for it.

use std::borrow::Cow;
use std::sync::Arc;

use object::{Object, ObjectSection};

use crate::elf::{Arch, ElfImage};
use crate::error::CodeLocation;

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
        let pc = match image.arch {
            Arch::CortexM4 => pc & !1,
            Arch::X86_64 => pc,
        };
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
    /// The chain of functions at `pc` (Thumb bit ignored), innermost first:
    /// the inlined function the PC is really in, then each function it was
    /// inlined into, ending with the function that owns the code. Without
    /// DWARF for the PC, the one frame of the symbol containing it (no file);
    /// empty when no symbol contains it either.
    pub fn frames(&self, image: &ElfImage, pc: u64) -> Vec<Frame> {
        let pc = pc & !1;
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
fn short_path(path: &str) -> String {
    let parts: Vec<&str> = path.rsplitn(3, '/').collect();
    match parts.as_slice() {
        [file, dir, _] => format!("{dir}/{file}"),
        _ => path.to_owned(),
    }
}

fn load_context(bytes: &Arc<[u8]>) -> Result<addr2line::Context<Reader>, gimli::Error> {
    let file = object::File::parse(&**bytes).map_err(|_| gimli::Error::Io)?;
    let endian = if file.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    let dwarf = gimli::Dwarf::load(|id| -> Result<Reader, gimli::Error> {
        let data: Cow<[u8]> = file
            .section_by_name(id.name())
            .and_then(|s| s.uncompressed_data().ok())
            .unwrap_or(Cow::Borrowed(&[]));
        Ok(gimli::EndianArcSlice::new(Arc::from(&*data), endian))
    })?;
    addr2line::Context::from_dwarf(dwarf)
}
