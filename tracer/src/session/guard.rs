//! The stray-write watch (`TraceOptions::stray_writes`): writes made inside a
//! selected layer window to memory that is none of the layer's declared
//! buffers and not the stack. They touch no buffer, so no buffer hook or
//! served page sees them, and a memory hook over all of RAM would send every
//! access through Unicorn's slow path (docs/measurements.md, "Emulator costs behind the tracer's design").
//!
//! Instead, while a selected layer is open, every page the guest loads is
//! write-protected (read and execute stay allowed), except the port page and
//! the stack's pages: code and read-only data count too, since the emulator
//! maps them writable and real hardware would not. A write to a protected page
//! makes Unicorn call the `MEM_WRITE_PROT` hook installed before the first
//! instruction (with the PC synchronised, so it is exact); the hook copies
//! the stored bytes into guest RAM itself (Unicorn drops a store to a
//! read-only page once the hook has handled it), reports the bytes that lie
//! outside the layer's buffers and the stack as a [`StrayWrite`], and lets
//! the guest go on. The protections are restored at layer end. Loads, and
//! stores to unprotected pages, stay on the fast path: a clean kernel pays one
//! protection change per layer.
//!
//! Pages that hold a declared buffer:
//! * hook path: they stay protected, so each store to them also passes the
//!   hook (which finds it inside a buffer); stray bytes next to a buffer are
//!   found with the exact PC;
//! * MMIO path: they are served as MMIO (`mmio.rs`), whose write callback
//!   finds the stray bytes; the PC is then the address of the block.
//!
//! The stack is `[__stack_bottom, __stack_top)` when the image defines both
//! symbols (the harness linker scripts do). Its pages are not protected,
//! except a first page shared with other data, which stays protected (the
//! hook excuses the stack bytes on it; the harness puts `.bss` there and the
//! deepest stack bytes are rarely written). Without the symbols, the stack is
//! taken as `[SP - 1 MiB, SP + 64 KiB)` around the stack pointer at layer
//! begin, whole pages, within the segment that holds SP.

use unicorn_engine::{MemType, Prot};

use memtrace_abi::event::{Message, StrayWrite, STRAY_WRITES_UNWOUND};
use memtrace_abi::symbols;
use memtrace_abi::Role;

use super::{clear_stale_it_state, page_ranges, set_permissions, stack, HookUc, Session, PAGE};
use crate::arch::Machine;
use crate::elf::ElfImage;

/// Stack assumed below the stack pointer without stack symbols.
const STACK_BELOW_SP: u64 = 1 << 20;
/// Caller frames assumed above the stack pointer without stack symbols.
const STACK_ABOVE_SP: u64 = 64 << 10;

/// State of the stray-write watch.
pub(super) struct Guard {
    /// Page ranges of the loaded segments, without the port page.
    loaded: Vec<(u64, u64)>,
    /// `[__stack_bottom, __stack_top)`, when the image defines both.
    stack_symbols: Option<(u64, u64)>,
    /// What is protected while a selected layer is open.
    active: Option<Active>,
    /// Protection changes asked for by commands, made at the next block.
    pending: Vec<Change>,
}

/// A change of the protections, made at the start of the next block: never
/// inside the port hook, whose store Unicorn is still executing (changing
/// protections flushes the TLB entry that store is about to use).
enum Change {
    /// Protect, for a layer that began with the stack pointer at `sp`.
    Begin { sp: u64 },
    /// Restore.
    End,
}

struct Active {
    /// Write-protected page ranges.
    protected: Vec<(u64, u64)>,
    /// The stack's bytes, excused wherever they are written.
    stack: (u64, u64),
}

fn page_floor(a: u64) -> u64 {
    a & !(PAGE - 1)
}

fn page_ceil(a: u64) -> u64 {
    a.div_ceil(PAGE) * PAGE
}

/// `ranges` less `[start, end)`.
fn subtract(ranges: &[(u64, u64)], start: u64, end: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for &(s, e) in ranges {
        if end <= s || e <= start {
            out.push((s, e));
            continue;
        }
        if s < start {
            out.push((s, start));
        }
        if end < e {
            out.push((end, e));
        }
    }
    out
}

impl Guard {
    /// The watch for `image`, whose port page is at `port_page`.
    pub(super) fn for_image(image: &ElfImage, port_page: u64) -> Guard {
        let stack_symbols = match (
            image.symbol(symbols::STACK_BOTTOM),
            image.symbol(symbols::STACK_TOP),
        ) {
            (Some(b), Some(t)) if b.address < t.address => Some((b.address, t.address)),
            _ => None,
        };
        Guard {
            loaded: subtract(&page_ranges(image), port_page, port_page + PAGE),
            stack_symbols,
            active: None,
            pending: Vec::new(),
        }
    }

    /// The pages the watch may write-protect, `[start, end)`, for its
    /// write-protect hooks; `None` (all memory) without stack symbols,
    /// where the stack is is known only at layer begin.
    pub(super) fn hooked_pages(&self) -> Option<Vec<(u64, u64)>> {
        let (bottom, top) = self.stack_symbols?;
        Some(subtract(&self.loaded, page_ceil(bottom), page_ceil(top)))
    }

    /// The stack's byte range while a layer is open.
    fn stack(&self) -> Option<(u64, u64)> {
        self.active.as_ref().map(|a| a.stack)
    }
}

impl Session<'_> {
    /// The part of the write `[address, address + size)` that lies outside
    /// the open layer's buffers and the stack, as (first byte, length); none
    /// when the watch is off or every byte is accounted for.
    pub(super) fn stray_part(&self, address: u64, size: u64) -> Option<(u64, u32)> {
        let stack = self.guard.as_ref()?.stack()?;
        let layer = self.rec.layer.as_ref()?;
        // A red zone is declared so that its loads are traced; a store
        // there is as stray as one anywhere else outside the buffers.
        let covered = |a: u64| {
            (stack.0..stack.1).contains(&a)
                || layer
                    .buffers
                    .iter()
                    .filter(|b| b.buffer.role != Role::RedZone)
                    .any(|b| {
                        let base = b.buffer.base;
                        a >= base && a < base + b.buffer.size as u64
                    })
        };
        let mut stray: Option<(u64, u64)> = None;
        for a in address..address + size {
            if !covered(a) {
                stray = Some(stray.map_or((a, a + 1), |(s, _)| (s, a + 1)));
            }
        }
        stray.map(|(s, e)| (s, (e - s) as u32))
    }

    /// Whether `[address, address + size)` lies inside one declared buffer
    /// of the open layer.
    fn in_buffers(&self, address: u64, size: u64) -> bool {
        self.rec.layer.as_ref().is_some_and(|l| {
            l.buffers.iter().any(|b| {
                let base = b.buffer.base;
                address >= base && address + size <= base + b.buffer.size as u64
            })
        })
    }

    /// Reports a stray write made by the instruction at `pc`, called
    /// through `callers` (return addresses, innermost first).
    pub(super) fn stray_write(&mut self, pc: u64, address: u64, size: u32, callers: Vec<u64>) {
        let Some(layer) = self.rec.layer.as_ref() else {
            return;
        };
        let t = self.clock.now(pc) - layer.t0;
        self.rec.send(Message::StrayWrite(StrayWrite {
            t,
            pc,
            address,
            size,
            callers,
        }));
    }

    /// Whether the next stray write of the open layer still gets its callers
    /// unwound (counts it).
    fn unwind_next(&mut self) -> bool {
        match self.rec.layer.as_mut() {
            Some(l) if l.unwound < STRAY_WRITES_UNWOUND => {
                l.unwound += 1;
                true
            }
            _ => false,
        }
    }
}

/// Asks for the watched pages to be write-protected; at `LAYER_BEGIN` of a
/// selected layer.
pub(super) fn begin(uc: &mut HookUc<'_, '_>) {
    let sp = uc.get_data().image.arch.stack_pointer(uc);
    if let Some(g) = uc.get_data_mut().guard.as_mut() {
        g.pending.push(Change::Begin { sp });
    }
}

/// Asks for the watched pages to get their write permission back; at
/// `LAYER_END` of a selected layer (after the MMIO path released its pages).
pub(super) fn end(uc: &mut HookUc<'_, '_>) {
    if let Some(g) = uc.get_data_mut().guard.as_mut() {
        g.pending.push(Change::End);
    }
}

/// Whether a protection change waits for the next block.
pub(super) fn pending(s: &Session<'_>) -> bool {
    s.guard.as_ref().is_some_and(|g| !g.pending.is_empty())
}

/// Makes the protection changes asked for; at the start of a block.
pub(super) fn apply(uc: &mut HookUc<'_, '_>) -> Result<(), String> {
    let changes = match uc.get_data_mut().guard.as_mut() {
        Some(g) => std::mem::take(&mut g.pending),
        None => return Ok(()),
    };
    for change in changes {
        match change {
            Change::Begin { sp } => protect(uc, sp)?,
            Change::End => restore(uc)?,
        }
    }
    Ok(())
}

/// Write-protects the watched pages of a layer that began with the stack
/// pointer at `sp`.
fn protect(uc: &mut HookUc<'_, '_>, sp: u64) -> Result<(), String> {
    let Some(guard) = uc.get_data().guard.as_ref() else {
        return Ok(());
    };
    let (stack, unprotected) = match guard.stack_symbols {
        // A first page shared with other data stays protected.
        Some((bottom, top)) => ((bottom, top), (page_ceil(bottom), page_ceil(top))),
        None => {
            let (lo, hi) = (
                page_floor(sp.saturating_sub(STACK_BELOW_SP)),
                page_ceil(sp.saturating_add(STACK_ABOVE_SP)),
            );
            // Within the loaded range that holds SP.
            let (lo, hi) = guard
                .loaded
                .iter()
                .find(|(s, e)| (*s..*e).contains(&sp))
                .map_or((lo, hi), |&(s, e)| (lo.max(s), hi.min(e)));
            ((lo, hi), (lo, hi))
        }
    };
    let protected = subtract(&guard.loaded, unprotected.0, unprotected.1);
    for &(start, end) in &protected {
        let image = uc.get_data().image;
        set_permissions(uc, image, start, end, Prot::WRITE)
            .map_err(|e| format!("write-protecting guest pages {start:#x}..{end:#x}: {e:?}"))?;
    }
    if let Some(g) = uc.get_data_mut().guard.as_mut() {
        g.active = Some(Active { protected, stack });
    }
    Ok(())
}

/// Gives the watched pages their write permission back.
fn restore(uc: &mut HookUc<'_, '_>) -> Result<(), String> {
    let Some(active) = uc
        .get_data_mut()
        .guard
        .as_mut()
        .and_then(|g| g.active.take())
    else {
        return Ok(());
    };
    for &(start, end) in &active.protected {
        let image = uc.get_data().image;
        set_permissions(uc, image, start, end, Prot::NONE)
            .map_err(|e| format!("restoring guest pages {start:#x}..{end:#x}: {e:?}"))?;
    }
    // The stack's guard pages stay watched for the whole run.
    stack::protect(uc)
}

/// A store to a write-protected page: a stack overflow when it is the
/// stack's, below its bottom (`stack.rs`); otherwise it stores it, and
/// reports the bytes outside the layer's buffers and the stack.
pub(super) fn on_write_prot(
    uc: &mut HookUc<'_, '_>,
    _kind: MemType,
    address: u64,
    size: usize,
    value: i64,
) -> bool {
    let pc = uc.pc_read().unwrap_or(0);
    clear_stale_it_state(uc);
    let arch = uc.get_data().image.arch;
    let (in_zone, below_bottom) = uc
        .get_data()
        .stack
        .as_ref()
        .map_or((false, false), |w| (w.in_zone(address), address < w.bottom));
    // A store into a declared buffer (every one passes here on the hook
    // path) is the kernel's: no need to ask where the stack pointer is.
    if below_bottom
        && !uc.get_data().in_buffers(address, size as u64)
        && stack::stop_on_overflow(uc, pc, address)
    {
        return false;
    }
    let s = uc.get_data_mut();
    let watching = s.guard.as_ref().and_then(Guard::stack).is_some();
    if !watching && !in_zone {
        // Not a page this tracer protected: the guest's own fault.
        return false;
    }
    let n = size.min(8);
    // Unicorn discards the store itself once this hook has handled it.
    if !s.ram.write(address, &value.to_le_bytes()[..n]) {
        return false;
    }
    // A misaligned store comes back byte by byte (Unicorn splits it after
    // this hook): those calls report it.
    if !watching || (n > 1 && !address.is_multiple_of(n as u64)) {
        return true;
    }
    if let Some((first, len)) = s.stray_part(address, n as u64) {
        let callers = if s.unwind_next() {
            let regs = arch.registers(uc, pc);
            uc.get_data_mut().callers(regs, STRAY_FRAMES)
        } else {
            Vec::new()
        };
        uc.get_data_mut().stray_write(pc, first, len, callers);
    }
    true
}

/// Most caller frames unwound for a stray write.
const STRAY_FRAMES: usize = 64;
