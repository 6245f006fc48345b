//! ELF images: architecture, loadable segments and symbols, read with `object`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};

use crate::error::TraceError;

/// The guest architectures memtrace emulates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Arch {
    /// ARMv7E-M Thumb-2, emulated as a Cortex-M4.
    #[serde(rename = "cortex-m4")]
    #[cfg_attr(feature = "clap", value(name = "cortex-m4"))]
    CortexM4,
    /// x86-64 (SSE2, no AVX), freestanding.
    #[serde(rename = "x86-64")]
    #[cfg_attr(feature = "clap", value(name = "x86-64"))]
    X86_64,
}

impl Arch {
    /// Name used on the command line and in reports (`cortex-m4`, `x86-64`).
    pub fn name(self) -> &'static str {
        match self {
            Arch::CortexM4 => "cortex-m4",
            Arch::X86_64 => "x86-64",
        }
    }
}

/// A PT_LOAD segment.
#[derive(Clone, Debug)]
pub struct Segment {
    /// Guest address of the first byte (`p_vaddr`).
    pub address: u64,
    /// Bytes in memory (`p_memsz`); the tail beyond `data` is zero.
    pub size: u64,
    /// Initialised bytes from the file (`p_filesz` of them).
    pub data: Vec<u8>,
    /// Mapped executable (`PF_X`).
    pub executable: bool,
}

/// A named guest object or function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Symbol {
    /// Address with the Thumb bit cleared.
    pub address: u64,
    /// Size in bytes (`st_size`; 0 when the symbol has none).
    pub size: u64,
    /// Whether the symbol is a function (`STT_FUNC`), not an object.
    pub is_function: bool,
}

/// A loaded guest executable.
#[derive(Clone, Debug)]
pub struct ElfImage {
    /// File the image was read from.
    pub path: PathBuf,
    /// Guest architecture, from the ELF header.
    pub arch: Arch,
    /// Entry point with the Thumb bit cleared.
    pub entry: u64,
    /// Loadable (`PT_LOAD`) segments of non-zero size, in file order.
    pub segments: Vec<Segment>,
    symbols: HashMap<String, Symbol>,
    /// Functions sorted by address, for PC -> function without DWARF.
    functions: Vec<(u64, u64, String)>,
    /// Data objects of non-zero size sorted by address, for address -> name.
    objects: Vec<(u64, u64, String)>,
    /// The whole file, kept for lazy DWARF loading.
    pub bytes: Arc<[u8]>,
}

impl ElfImage {
    /// Reads and checks an ELF executable.
    pub fn load(path: &Path) -> Result<ElfImage, TraceError> {
        let bytes = std::fs::read(path).map_err(|source| TraceError::Io {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(path, bytes.into())
    }

    /// Parses ELF bytes; `path` names them in errors.
    pub fn parse(path: &Path, bytes: Arc<[u8]>) -> Result<ElfImage, TraceError> {
        let not_elf = |reason: String| TraceError::NotElf {
            path: path.to_owned(),
            reason,
        };
        if !bytes.starts_with(b"\x7fELF") {
            return Err(not_elf("no \\x7fELF magic".into()));
        }
        let file = object::File::parse(&*bytes).map_err(|e| TraceError::MalformedElf {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
        let raw_entry = file.entry();
        let arch = match (file.architecture(), file.is_64()) {
            (object::Architecture::Arm, false) => {
                if raw_entry & 1 == 0 {
                    return Err(TraceError::UnsupportedArch {
                        path: path.to_owned(),
                        arch: "ARM (A32 entry point, not Thumb)".into(),
                    });
                }
                Arch::CortexM4
            }
            (object::Architecture::X86_64, true) => Arch::X86_64,
            (other, _) => {
                return Err(TraceError::UnsupportedArch {
                    path: path.to_owned(),
                    arch: format!("{other:?}"),
                })
            }
        };
        if file.kind() != object::ObjectKind::Executable {
            return Err(TraceError::MalformedElf {
                path: path.to_owned(),
                reason: format!(
                    "it is a {:?} file, not a statically linked executable",
                    file.kind()
                ),
            });
        }
        let mut segments = Vec::new();
        for seg in file.segments() {
            let data = seg.data().map_err(|e| TraceError::MalformedElf {
                path: path.to_owned(),
                reason: format!("segment at {:#x}: {e}", seg.address()),
            })?;
            if seg.size() == 0 {
                continue;
            }
            if (data.len() as u64) > seg.size() {
                return Err(TraceError::MalformedElf {
                    path: path.to_owned(),
                    reason: format!(
                        "segment at {:#x} has more file bytes than memory",
                        seg.address()
                    ),
                });
            }
            let executable = match seg.flags() {
                object::SegmentFlags::Elf { p_flags, .. } => p_flags.contains(object::elf::PF_X),
                _ => true,
            };
            segments.push(Segment {
                address: seg.address(),
                size: seg.size(),
                data: data.to_vec(),
                executable,
            });
        }
        if segments.is_empty() {
            return Err(TraceError::MalformedElf {
                path: path.to_owned(),
                reason: "no loadable segments".into(),
            });
        }
        let mut symbols = HashMap::new();
        let mut functions = Vec::new();
        let mut objects = Vec::new();
        for sym in file.symbols() {
            let Ok(name) = sym.name() else { continue };
            // ARM mapping symbols ($t, $d, $a) mark code/data, not names.
            if name.is_empty() || name.starts_with('$') {
                continue;
            }
            let is_function = sym.kind() == SymbolKind::Text;
            let address = if is_function && arch == Arch::CortexM4 {
                sym.address() & !1
            } else {
                sym.address()
            };
            let s = Symbol {
                address,
                size: sym.size(),
                is_function,
            };
            if is_function {
                functions.push((address, sym.size(), name.to_owned()));
            } else if sym.kind() == SymbolKind::Data && sym.size() > 0 {
                objects.push((address, sym.size(), name.to_owned()));
            }
            // Prefer global definitions over local ones of the same name.
            if sym.is_global() || !symbols.contains_key(name) {
                symbols.insert(name.to_owned(), s);
            }
        }
        functions.sort();
        objects.sort();
        Ok(ElfImage {
            path: path.to_owned(),
            arch,
            entry: raw_entry & !1,
            segments,
            symbols,
            functions,
            objects,
            bytes,
        })
    }

    /// The `memtrace_port` protocol object every memtrace guest defines.
    pub fn protocol_port(&self) -> Result<Symbol, TraceError> {
        self.symbol("memtrace_port")
            .ok_or_else(|| TraceError::MissingProtocol {
                path: self.path.clone(),
                symbol: "memtrace_port",
            })
    }

    /// The symbol named `name`, preferring a global definition over local ones.
    pub fn symbol(&self, name: &str) -> Option<Symbol> {
        self.symbols.get(name).copied()
    }

    /// The function symbol containing `pc`, if any.
    pub fn function_at(&self, pc: u64) -> Option<&str> {
        let i = self.functions.partition_point(|(a, _, _)| *a <= pc);
        let (addr, size, name) = self.functions.get(i.checked_sub(1)?)?;
        (pc < addr + (*size).max(1)).then_some(name.as_str())
    }

    /// The data object containing `address` and the offset into it, if any.
    pub fn object_at(&self, address: u64) -> Option<(&str, u64)> {
        let i = self.objects.partition_point(|(a, _, _)| *a <= address);
        let (start, size, name) = self.objects.get(i.checked_sub(1)?)?;
        (address < start + size).then_some((name.as_str(), address - start))
    }

    /// True when a page of `[address, address+len)` holds part of an
    /// executable segment.
    pub fn is_executable(&self, address: u64, len: u64) -> bool {
        const PAGE: u64 = 0x1000;
        let (start, end) = (address & !(PAGE - 1), (address + len).div_ceil(PAGE) * PAGE);
        self.segments.iter().filter(|s| s.executable).any(|s| {
            let (s0, s1) = (
                s.address & !(PAGE - 1),
                (s.address + s.size).div_ceil(PAGE) * PAGE,
            );
            s0 < end && start < s1
        })
    }

    /// True when `[address, address+len)` lies inside a loadable segment.
    pub fn is_loaded(&self, address: u64, len: u64) -> bool {
        self.segments
            .iter()
            .any(|s| address >= s.address && address + len <= s.address + s.size)
    }
}
