//! ELF images: architecture, loadable segments and symbols, read with `object`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};

use crate::arch::Machine;
use crate::attributes::ArmBuild;
use crate::error::TraceError;

pub use memtrace_abi::target::Arch;

/// Most guest memory (all loadable segments together, whole pages) an ELF
/// may ask for: the tracer backs every segment with host memory.
pub const MAX_GUEST_MEMORY: u64 = 1 << 30;

/// Largest ELF file [`ElfImage::load`] reads.
pub const MAX_ELF_FILE: u64 = 1 << 30;

/// Reads the ELF file `path` through the bounded reader
/// ([`memtrace_io::input::read_limited`]: regular files only, never more than
/// `limit + 1` bytes), with its refusals said as ELF errors.
fn read_regular_file(path: &Path, limit: u64) -> Result<Vec<u8>, TraceError> {
    use memtrace_io::ReadError;
    let refuse = |reason: String| TraceError::NotElf {
        path: path.to_owned(),
        reason,
    };
    memtrace_io::input::read_limited(path, limit, "ELF files").map_err(|e| match e {
        ReadError::Io { source, .. } => TraceError::Io {
            path: path.to_owned(),
            source,
        },
        ReadError::NotRegular { kind, .. } => TraceError::NotRegular {
            path: path.to_owned(),
            kind,
        },
        ReadError::TooLarge { limit, what, .. } => {
            refuse(format!("larger than the {limit}-byte limit for {what}"))
        }
    })
}

/// Checks the loadable segments `(p_vaddr, p_memsz)` against the guest
/// address space of `arch` before anything is mapped or allocated: each
/// segment must end inside it, no two may overlap, and together (in whole
/// pages) they may not exceed [`MAX_GUEST_MEMORY`].
pub fn check_segments(arch: Arch, segments: &[(u64, u64)]) -> Result<(), String> {
    const PAGE: u64 = 0x1000;
    let limit = arch.address_limit();
    let mut ranges = Vec::with_capacity(segments.len());
    for (i, &(address, size)) in segments.iter().enumerate() {
        if size == 0 {
            continue;
        }
        let end = address.checked_add(size).filter(|&e| e <= limit).ok_or_else(|| {
            format!(
                "loadable segment {i} at {address:#x} with p_memsz {size:#x} does not fit the {} guest address space (below {limit:#x})",
                arch.name()
            )
        })?;
        ranges.push((address, end, i));
    }
    ranges.sort_unstable();
    for pair in ranges.windows(2) {
        let ((a0, a1, ai), (b0, b1, bi)) = (pair[0], pair[1]);
        if b0 < a1 {
            return Err(format!(
                "loadable segments {ai} ({a0:#x}..{a1:#x}) and {bi} ({b0:#x}..{b1:#x}) overlap"
            ));
        }
    }
    // Whole pages, as they are mapped (two segments may share a page).
    let mut total = 0u64;
    let mut mapped_end = 0u64;
    for &(start, end, _) in &ranges {
        let first = (start & !(PAGE - 1)).max(mapped_end);
        let last = end.div_ceil(PAGE) * PAGE;
        if last > first {
            total += last - first;
        }
        mapped_end = mapped_end.max(last);
    }
    if total > MAX_GUEST_MEMORY {
        return Err(format!(
            "its loadable segments need {total} bytes of guest memory, more than the {MAX_GUEST_MEMORY}-byte limit"
        ));
    }
    Ok(())
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
    /// Mapped writable (`PF_W`); a store into a segment without it writes
    /// the program's code or constants.
    pub writable: bool,
}

/// A symbol's name as its source spells it: C++ names demangled
/// (`_ZL6kModel` is `kModel`), others as they are.
pub fn source_name(symbol: &str) -> String {
    addr2line::demangle(symbol, gimli::DW_LANG_C_plus_plus).unwrap_or_else(|| symbol.to_owned())
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
    /// Guest architecture: from the ELF header, and for an Arm executable
    /// the core its build attributes name (Cortex-M4 without them), or the
    /// core [`ElfImage::on_target`] chose.
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
    /// Its Arm build attributes, when it has them.
    arm_build: Option<ArmBuild>,
}

/// The build attributes of an Arm executable (`None` for other machines and
/// for Arm executables without a `.ARM.attributes` section).
fn arm_build(path: &Path, file: &object::File<'_>) -> Result<Option<ArmBuild>, TraceError> {
    use object::ObjectSection;
    if file.architecture() != object::Architecture::Arm {
        return Ok(None);
    }
    let Some(section) = file.section_by_name(".ARM.attributes") else {
        return Ok(None);
    };
    let malformed = |reason: String| TraceError::MalformedElf {
        path: path.to_owned(),
        reason,
    };
    let data = section
        .data()
        .map_err(|e| malformed(format!(".ARM.attributes: {e}")))?;
    ArmBuild::parse(data).map(Some).map_err(malformed)
}

impl ElfImage {
    /// Reads and checks an ELF executable: a regular file of at most
    /// [`MAX_ELF_FILE`] bytes.
    pub fn load(path: &Path) -> Result<ElfImage, TraceError> {
        let bytes = read_regular_file(path, MAX_ELF_FILE)?;
        Self::parse(path, bytes.into())
    }

    /// Parses ELF bytes; `path` names them in errors.
    pub fn parse(path: &Path, bytes: Arc<[u8]>) -> Result<ElfImage, TraceError> {
        if !bytes.starts_with(b"\x7fELF") {
            return Err(TraceError::NoElfMagic {
                path: path.to_owned(),
                first_bytes: memtrace_io::input::first_bytes(&bytes),
            });
        }
        // Unicorn's ARM and x86-64 guests are little-endian; a big-endian
        // image would load with every word byte-swapped. EI_DATA (byte 5)
        // says which, before any field is read in either byte order.
        const ELFDATA2MSB: u8 = 2;
        if bytes.get(5) == Some(&ELFDATA2MSB) {
            return Err(TraceError::UnsupportedElf {
                path: path.to_owned(),
                reason: "unsupported: big-endian (memtrace runs little-endian Cortex-M and \
                         x86-64 executables)"
                    .into(),
            });
        }
        let file = object::File::parse(&*bytes).map_err(|e| TraceError::MalformedElf {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
        // The kind first: an object file not linked yet has no entry point,
        // so its architecture check would only confuse.
        check_executable(path, &file)?;
        let raw_entry = file.entry();
        let arm_build = arm_build(path, &file)?;
        let arch = arch_of(path, &file, raw_entry, arm_build.as_ref())?;
        // Sizes and places first: nothing below allocates from them unchecked.
        let places: Vec<(u64, u64)> = file
            .segments()
            .map(|seg| (seg.address(), seg.size()))
            .collect();
        check_segments(arch, &places).map_err(|reason| TraceError::MalformedElf {
            path: path.to_owned(),
            reason,
        })?;
        let segments = segments_of(path, &file)?;
        let (symbols, functions, objects) = symbols_of(&file, arch);
        Ok(ElfImage {
            path: path.to_owned(),
            arch,
            entry: raw_entry & !1,
            segments,
            symbols,
            functions,
            objects,
            bytes,
            arm_build,
        })
    }

    /// The image run as `target`: its own architecture, or (an Arm
    /// executable) another Cortex-M core that implements everything its
    /// build attributes say it uses. Refused with the reason otherwise.
    pub fn on_target(mut self, target: Arch) -> Result<ElfImage, TraceError> {
        if target == self.arch {
            return Ok(self);
        }
        let refusal = match (&self.arm_build, self.arch.is_cortex_m()) {
            (_, false) => Some(format!("it is an {} executable", self.arch.name())),
            (Some(build), true) => build.refusal(target),
            // No build attributes: nothing says it needs more than any core.
            (None, true) => (!target.is_cortex_m()).then(|| "it is an ARM executable".into()),
        };
        match refusal {
            Some(reason) => Err(TraceError::WrongCore {
                path: self.path.clone(),
                target: target.name(),
                reason,
            }),
            None => {
                self.arch = target;
                Ok(self)
            }
        }
    }

    /// What the executable's `.ARM.attributes` say it needs of the core
    /// (`None` for x86-64, or an Arm executable without them).
    pub fn arm_build(&self) -> Option<&ArmBuild> {
        self.arm_build.as_ref()
    }

    /// The `memtrace_port` protocol object every memtrace guest defines.
    pub fn protocol_port(&self) -> Result<Symbol, TraceError> {
        self.symbol(memtrace_abi::symbols::PORT)
            .ok_or_else(|| TraceError::MissingProtocol {
                path: self.path.clone(),
                symbol: memtrace_abi::symbols::PORT,
            })
    }

    /// Whether `pc` lies in `memtrace_signal`, the function every protocol
    /// command's store is made in.
    pub fn in_signal(&self, pc: u64) -> bool {
        self.symbol(memtrace_abi::symbols::SIGNAL)
            .is_some_and(|f| pc >= f.address && pc < f.address + f.size.max(1))
    }

    /// The symbol named `name`, preferring a global definition over local ones.
    pub fn symbol(&self, name: &str) -> Option<Symbol> {
        self.symbols.get(name).copied()
    }

    /// Every function symbol: start address, size and (mangled) name, by
    /// address.
    pub fn functions(&self) -> impl Iterator<Item = (u64, u64, &str)> {
        self.functions.iter().map(|(a, s, n)| (*a, *s, n.as_str()))
    }

    /// Every data object of non-zero size: address, size and name, by
    /// address.
    pub fn objects(&self) -> impl Iterator<Item = (u64, u64, &str)> {
        self.objects.iter().map(|(a, s, n)| (*a, *s, n.as_str()))
    }

    /// Names of the image's function symbols, in address order.
    pub fn function_names(&self) -> impl Iterator<Item = &str> {
        self.functions().map(|(_, _, name)| name)
    }

    /// The function symbol containing `pc`, if any.
    pub fn function_at(&self, pc: u64) -> Option<&str> {
        let i = self.functions.partition_point(|(a, _, _)| *a <= pc);
        let (addr, size, name) = self.functions.get(i.checked_sub(1)?)?;
        (pc < addr.saturating_add((*size).max(1))).then_some(name.as_str())
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
        let end = address.saturating_add(len).saturating_add(PAGE - 1) & !(PAGE - 1);
        let start = address & !(PAGE - 1);
        self.segments.iter().filter(|s| s.executable).any(|s| {
            let (s0, s1) = (
                s.address & !(PAGE - 1),
                (s.address + s.size).div_ceil(PAGE) * PAGE,
            );
            s0 < end && start < s1
        })
    }

    /// What of the image lies at `address`, in words, when it is not code:
    /// ``data (`table`+4, segment 1 [0x20000000, 0x20000400))``, or
    /// `None` when no data segment holds it (for a jump that left the
    /// code: where it went).
    pub fn data_at(&self, address: u64) -> Option<String> {
        let (i, seg) = self.segments.iter().enumerate().find(|(_, s)| {
            !s.executable && (s.address..s.address.saturating_add(s.size)).contains(&address)
        })?;
        let object = self
            .object_at(address)
            .map_or(String::new(), |(name, off)| match off {
                0 => format!("`{name}`, "),
                off => format!("`{name}`+{off}, "),
            });
        Some(format!(
            "data ({object}segment {i} [{:#x}, {:#x}))",
            seg.address,
            seg.address + seg.size
        ))
    }

    /// The bytes the image loads at `[address, address+len)`, when one
    /// segment's file contents hold them all.
    pub fn bytes_at(&self, address: u64, len: u64) -> Option<&[u8]> {
        self.segments.iter().find_map(|s| {
            let start = address.checked_sub(s.address)?;
            let end = start.checked_add(len)?;
            s.data
                .get(usize::try_from(start).ok()?..usize::try_from(end).ok()?)
        })
    }

    /// True when `[address, address+len)` lies inside a loadable segment.
    pub fn is_loaded(&self, address: u64, len: u64) -> bool {
        self.segments
            .iter()
            .any(|s| address >= s.address && address.saturating_add(len) <= s.address + s.size)
    }
}

/// Refuses an ELF file that is no statically linked executable, saying what
/// it is.
fn check_executable(path: &Path, file: &object::File<'_>) -> Result<(), TraceError> {
    if file.kind() != object::ObjectKind::Executable {
        let kind = match file.kind() {
            object::ObjectKind::Dynamic => {
                "a dynamically linked (or position-independent) executable or shared library"
                    .to_owned()
            }
            object::ObjectKind::Relocatable => "a relocatable object (not linked yet)".to_owned(),
            object::ObjectKind::Core => "a core dump".to_owned(),
            other => format!("an ELF file of kind {other:?}"),
        };
        return Err(TraceError::UnsupportedElf {
            path: path.to_owned(),
            reason: format!(
                "it is {kind}; memtrace runs statically linked, freestanding executables (build with the harness linker scripts, docs/protocol.md §11)"
            ),
        });
    }
    Ok(())
}

/// The core an executable runs on: its architecture, and on Arm the core
/// its build attributes name (the Cortex-M4 without them).
fn arch_of(
    path: &Path,
    file: &object::File<'_>,
    raw_entry: u64,
    arm_build: Option<&ArmBuild>,
) -> Result<Arch, TraceError> {
    Ok(match (file.architecture(), file.is_64()) {
        (object::Architecture::Arm, false) => {
            if raw_entry & 1 == 0 {
                return Err(TraceError::UnsupportedArch {
                    path: path.to_owned(),
                    arch: "ARM (A32 entry point, not Thumb)".into(),
                });
            }
            // The core its build attributes name; one without them
            // (another toolchain's) runs on the Cortex-M4 as before.
            match arm_build {
                Some(build) => build.default_core().ok_or_else(|| {
                    let reason = build
                        .refusal(Arch::CortexM33)
                        .unwrap_or_else(|| "no emulated core runs it".into());
                    TraceError::UnsupportedArch {
                        path: path.to_owned(),
                        arch: format!("ARM, which no emulated Cortex-M core runs: {reason}"),
                    }
                })?,
                None => Arch::CortexM4,
            }
        }
        (object::Architecture::X86_64, true) => Arch::X86_64,
        (object::Architecture::Riscv32, false) => Arch::Riscv32,
        (object::Architecture::Riscv64, _) => {
            return Err(TraceError::UnsupportedArch {
                path: path.to_owned(),
                arch: "RV64 (64-bit RISC-V); memtrace emulates RV32 cores: build with \
                       -march=rv32imac -mabi=ilp32"
                    .into(),
            })
        }
        (other, _) => {
            return Err(TraceError::UnsupportedArch {
                path: path.to_owned(),
                arch: format!("{other:?}"),
            })
        }
    })
}

/// The loadable segments, each with its file bytes and permissions.
fn segments_of(path: &Path, file: &object::File<'_>) -> Result<Vec<Segment>, TraceError> {
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
        let (executable, writable) = match seg.flags() {
            object::SegmentFlags::Elf { p_flags, .. } => (
                p_flags.contains(object::elf::PF_X),
                p_flags.contains(object::elf::PF_W),
            ),
            _ => (true, true),
        };
        segments.push(Segment {
            address: seg.address(),
            size: seg.size(),
            data: data.to_vec(),
            executable,
            writable,
        });
    }
    if segments.is_empty() {
        return Err(TraceError::MalformedElf {
            path: path.to_owned(),
            reason: "no loadable segments".into(),
        });
    }
    Ok(segments)
}

/// An address, a size and a name: a function or a data object.
type Placed = Vec<(u64, u64, String)>;

/// Symbols by name (a global definition over a local one), and the
/// functions and data objects by address.
fn symbols_of(file: &object::File<'_>, arch: Arch) -> (HashMap<String, Symbol>, Placed, Placed) {
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
        let address = if is_function {
            arch.code_address(sym.address())
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
    (symbols, functions, objects)
}
