//! Call chains: which functions called the code at a guest PC, walked from
//! the guest's stack with the DWARF call-frame information (CFI) of the ELF.
//!
//! The harness and the CMSIS-NN builds have no frame pointers (`-O2`) and no
//! unwind tables (`-fno-unwind-tables`), so neither a frame-pointer chain nor
//! `.ARM.exidx` describes their frames; `-g` makes GCC put the same CFI into
//! `.debug_frame` instead. x86-64 objects built with GCC's defaults carry it
//! in `.eh_frame` (kept by the harness linker script): both are read.
//!
//! One step: find the FDE that covers the PC, evaluate its row for the PC
//! (gimli's `UnwindSection` machinery), compute the CFA from the row's rule,
//! restore the saved registers from the stack, and take the return-address
//! column as the caller's PC. A function whose row does not save the return
//! address (a Cortex-M leaf, which keeps it in LR) keeps the register's
//! value. The walk stops at a PC without CFI (start-up code written in
//! assembly), a return address outside the executable segments (the
//! poisoned LR the entry point starts with), a CFA that does not grow (a
//! corrupt stack), or `max` frames.

use std::borrow::Cow;
use std::sync::Arc;

use gimli::{
    BaseAddresses, CfaRule, CieOrFde, DebugFrame, EhFrame, FrameDescriptionEntry, RegisterRule,
    UnwindContext, UnwindSection,
};
use object::{Object, ObjectSection};

use crate::arch::{Machine, Registers};
use crate::elf::{Arch, ElfImage};

type Reader = gimli::EndianArcSlice<gimli::RunTimeEndian>;

/// Which section an FDE came from.
#[derive(Clone, Copy)]
enum Section {
    Debug,
    Eh,
}

struct Entry {
    start: u64,
    end: u64,
    section: Section,
    fde: FrameDescriptionEntry<Reader>,
}

/// The CFI of one image, indexed by address.
pub(crate) struct Unwinder {
    arch: Arch,
    debug_frame: DebugFrame<Reader>,
    eh_frame: EhFrame<Reader>,
    bases: BaseAddresses,
    /// Every FDE, sorted by start address.
    entries: Vec<Entry>,
    ctx: Box<UnwindContext<usize>>,
}

impl Unwinder {
    /// The unwinder of `image`, or `None` when it has no CFI at all.
    pub(crate) fn for_image(image: &ElfImage) -> Option<Unwinder> {
        let file = object::File::parse(&*image.bytes).ok()?;
        let endian = if file.is_little_endian() {
            gimli::RunTimeEndian::Little
        } else {
            gimli::RunTimeEndian::Big
        };
        let section = |name: &str| {
            let s = file.section_by_name(name);
            let address = s.as_ref().map_or(0, |s| s.address());
            let data: Cow<[u8]> = s
                .and_then(|s| s.uncompressed_data().ok())
                .unwrap_or(Cow::Borrowed(&[]));
            (address, Reader::new(Arc::from(&*data), endian))
        };
        let (_, debug) = section(".debug_frame");
        let (eh_address, eh) = section(".eh_frame");
        let mut debug_frame = DebugFrame::from(debug);
        let mut eh_frame = EhFrame::from(eh);
        // Version-1 CIEs (GCC's .debug_frame) do not say their address size.
        let address_size = image.arch.word_bytes() as u8;
        debug_frame.set_address_size(address_size);
        eh_frame.set_address_size(address_size);
        let bases = BaseAddresses::default().set_eh_frame(eh_address);
        let mut entries = Vec::new();
        collect(&debug_frame, &bases, Section::Debug, &mut entries);
        collect(&eh_frame, &bases, Section::Eh, &mut entries);
        if entries.is_empty() {
            return None;
        }
        entries.sort_by_key(|e| e.start);
        Some(Unwinder {
            arch: image.arch,
            debug_frame,
            eh_frame,
            bases,
            entries,
            ctx: Box::new(UnwindContext::new()),
        })
    }

    /// The return addresses of the frames below the one `regs` describe
    /// (its PC and registers at an instruction), innermost caller first, at
    /// most `max`; Thumb bits cleared. `read` reads guest memory.
    pub(crate) fn callers(
        &mut self,
        image: &ElfImage,
        mut regs: Registers,
        read: impl Fn(u64, &mut [u8]) -> bool,
        max: usize,
    ) -> Vec<u64> {
        let arch = self.arch;
        let (sp, pc) = (arch.dwarf_sp(), arch.dwarf_pc());
        let word = arch.word_bytes();
        let read_word = |address: u64| {
            let mut bytes = [0u8; 8];
            read(address, &mut bytes[..word]).then(|| u64::from_le_bytes(bytes))
        };
        let mut out = Vec::new();
        let Some(first) = regs.get(pc) else {
            return out;
        };
        // The innermost frame is at its PC; an outer one inside its call
        // instruction, just before the return address.
        let mut lookup = arch.code_address(first);
        let mut last_cfa: Option<u64> = None;
        while out.len() < max {
            let Some(entry) = entry_at(&self.entries, lookup) else {
                // A leaf without CFI (newlib's assembly `memcpy`) has not
                // moved its return address: its caller's frame is the
                // registers as they are, at that address.
                match leaf_return(arch, image, &regs, &read, &read_word).filter(|_| out.is_empty())
                {
                    Some((ra, sp_after)) => {
                        out.push(ra);
                        regs.set(pc, Some(ra));
                        regs.set(sp, Some(sp_after));
                        lookup = ra - 1;
                        continue;
                    }
                    None => break,
                }
            };
            let row = match entry.section {
                Section::Debug => entry.fde.unwind_info_for_address(
                    &self.debug_frame,
                    &self.bases,
                    &mut self.ctx,
                    lookup,
                ),
                Section::Eh => entry.fde.unwind_info_for_address(
                    &self.eh_frame,
                    &self.bases,
                    &mut self.ctx,
                    lookup,
                ),
            };
            let Ok(row) = row else {
                break;
            };
            let cfa = match row.cfa() {
                CfaRule::RegisterAndOffset { register, offset } => match regs.get(register.0) {
                    Some(v) => v.wrapping_add(*offset as u64),
                    None => break,
                },
                CfaRule::Expression(_) => break,
            };
            if last_cfa.is_some_and(|last| cfa <= last) {
                break;
            }
            let mut next = regs.clone();
            for (register, rule) in row.registers() {
                let value = match rule {
                    RegisterRule::SameValue => regs.get(register.0),
                    RegisterRule::Offset(o) => read_word(cfa.wrapping_add(*o as u64)),
                    RegisterRule::ValOffset(o) => Some(cfa.wrapping_add(*o as u64)),
                    RegisterRule::Register(r) => regs.get(r.0),
                    _ => None,
                };
                next.set(register.0, value);
            }
            next.set(sp, Some(cfa));
            let Some(ra) = next.get(entry.fde.cie().return_address_register().0) else {
                break;
            };
            let ra = arch.code_address(ra);
            if ra == 0 || !image.is_executable(ra, 1) {
                break;
            }
            out.push(ra);
            next.set(pc, Some(ra));
            regs = next;
            lookup = ra - 1;
            last_cfa = Some(cfa);
        }
        out
    }
}

/// The caller of a frame-0 function without CFI, as a leaf leaves it:
/// the link register (Arm LR, RISC-V `ra`), or on x86-64 the word at the
/// stack pointer (the `call`'s push, before the leaf pushes anything).
/// Only an address just after a call instruction counts, so a register
/// the leaf reused, or a stack it already moved, is no caller. Returns
/// the return address and the caller's stack pointer.
fn leaf_return(
    arch: Arch,
    image: &ElfImage,
    regs: &Registers,
    read: &impl Fn(u64, &mut [u8]) -> bool,
    read_word: &impl Fn(u64) -> Option<u64>,
) -> Option<(u64, u64)> {
    let sp = regs.get(arch.dwarf_sp())?;
    let (raw, sp_after) = match arch {
        Arch::X86_64 => (read_word(sp)?, sp.wrapping_add(8)),
        Arch::Riscv32 => (regs.get(1)?, sp),
        _ => (regs.get(14)?, sp),
    };
    let ra = arch.code_address(raw);
    let thumb_ok = !arch.is_cortex_m() || raw & 1 == 1;
    let after_call = follows_call(arch, ra, |at, out| read(at, out));
    (ra > 0 && thumb_ok && image.is_executable(ra - 1, 1) && after_call).then_some((ra, sp_after))
}

/// Whether the instruction that ends at `ra` is a call: Thumb `BL`/`BLX
/// label` (32-bit) or `BLX Rm`; RISC-V `jal`/`jalr` linking `ra` (or
/// compressed `c.jal`/`c.jalr`); x86-64 `call rel32` or `call r/m`.
fn follows_call(arch: Arch, ra: u64, read: impl Fn(u64, &mut [u8]) -> bool) -> bool {
    let bytes = |back: u64, n: usize| -> Option<Vec<u8>> {
        let mut b = vec![0u8; n];
        read(ra.checked_sub(back)?, &mut b).then_some(b)
    };
    let half = |back: u64| bytes(back, 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    match arch {
        Arch::X86_64 => {
            let e8 = bytes(5, 1).is_some_and(|b| b[0] == 0xE8);
            // `FF /2` with a ModRM of 2, 3, 6 or 7 bytes back (register,
            // [reg], disp8, disp32 forms, optionally REX-prefixed).
            let ff = [2u64, 3, 4, 6, 7]
                .iter()
                .any(|&back| bytes(back, 2).is_some_and(|b| b[0] == 0xFF && (b[1] >> 3) & 7 == 2));
            e8 || ff
        }
        Arch::Riscv32 => {
            let jal = bytes(4, 4).is_some_and(|b| {
                let i = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                let rd = (i >> 7) & 31;
                matches!(i & 0x7F, 0x6F | 0x67) && rd == 1
            });
            let c = half(2).is_some_and(|h| {
                // c.jalr: 1001 rs1 00000 10 (rs1 ≠ 0); c.jal (RV32): 001 … 01.
                (h & 0xF07F == 0x9002 && (h >> 7) & 31 != 0) || h & 0xE003 == 0x2001
            });
            jal || c
        }
        _ => {
            let blx_reg = half(2).is_some_and(|h| h & 0xFF87 == 0x4780);
            let bl = match (half(4), half(2)) {
                (Some(first), Some(second)) => {
                    first & 0xF800 == 0xF000 && second & 0xC000 == 0xC000
                }
                _ => false,
            };
            blx_reg || bl
        }
    }
}

/// The FDE of `entries` (sorted) that covers `pc`.
fn entry_at(entries: &[Entry], pc: u64) -> Option<&Entry> {
    let i = entries.partition_point(|e| e.start <= pc);
    let e = entries.get(i.checked_sub(1)?)?;
    (pc < e.end).then_some(e)
}

/// Adds every FDE of `section` to `entries`.
fn collect<S: UnwindSection<Reader>>(
    section: &S,
    bases: &BaseAddresses,
    which: Section,
    entries: &mut Vec<Entry>,
) {
    let mut iter = section.entries(bases);
    while let Ok(Some(entry)) = iter.next() {
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let Ok(fde) = partial.parse(S::cie_from_offset) else {
            continue;
        };
        if fde.len() == 0 {
            continue;
        }
        entries.push(Entry {
            start: fde.initial_address(),
            end: fde.end_address(),
            section: which,
            fde,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A harness guest (built by `make -C harness-c`, as the tracer's
    /// integration tests need too).
    fn image(target: &str) -> ElfImage {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../harness-c/build")
            .join(target)
            .join("stack-overflow.elf");
        assert!(path.exists(), "build the guests first: make -C harness-c");
        ElfImage::load(&path).unwrap()
    }

    #[test]
    fn unreadable_or_endless_stacks_end_the_chain_without_a_panic() {
        for target in ["cortex-m4", "x86_64"] {
            let image = image(target);
            let arch = image.arch;
            let mut unwinder = Unwinder::for_image(&image).expect("the guest has CFI");
            let descend = image.symbol("descend").unwrap().address & !1;
            let mut regs = Registers::default();
            regs.set(arch.dwarf_pc(), Some(descend));
            regs.set(arch.dwarf_sp(), Some(0x2000_0000));
            // Nothing readable, no LR: no caller.
            let none = unwinder.callers(&image, regs.clone(), |_, _| false, 100);
            assert!(none.is_empty(), "{target}: {none:x?}");
            // A stack that returns into `descend` forever: bounded by `max`.
            let ra = (descend + 8).to_le_bytes();
            let endless = |_: u64, out: &mut [u8]| {
                out.copy_from_slice(&ra[..out.len()]);
                true
            };
            regs.set(14, Some(descend + 8)); // Cortex-M4's LR (x86-64: rsi, unused)
            let chain = unwinder.callers(&image, regs.clone(), endless, 100);
            assert_eq!(chain.len(), 100, "{target}");
            assert!(chain.iter().all(|&a| a == descend + 8), "{target}");
            // A PC that no FDE covers: no caller.
            regs.set(arch.dwarf_pc(), Some(0x10));
            assert!(unwinder.callers(&image, regs, endless, 100).is_empty());
        }
    }
}
