//! The stack-overflow watch: a guest whose stack grows past `__stack_bottom`
//! is stopped with a [`TraceError::StackOverflow`] that says how far below
//! the bottom it wrote, how large the stack is and which calls were on it,
//! instead of running on through `.bss` (and, further down, into an unmapped
//! address reported as a plain fault).
//!
//! When the image defines `__stack_bottom` and `__stack_top` (the harness
//! linker scripts do, docs/protocol.md section 11), the pages holding the
//! [`GUARD_BYTES`] below the bottom are write-protected for the whole run
//! (the harness scripts leave that page empty: `__stack_guard`). A store to
//! them makes Unicorn call the `MEM_WRITE_PROT` hook (`guard.rs`), which asks
//! [`StackWatch::overflow`]: a store below the bottom at or just below the
//! stack pointer is the stack's; any other store there (data that shares the
//! page in another layout) is made by the hook and the guest goes on. An
//! access to unmapped memory below the bottom near the stack pointer (a
//! frame larger than the guard) is a stack overflow too (`session.rs`).
//! Loads stay on the fast path; a program whose stack stays in bounds pays
//! one protection change at start.

use memtrace_abi::symbols;
use unicorn_engine::Prot;

use super::{page_ranges, set_permissions, HookUc, Session, Stop, PAGE};
use crate::arch::Machine;
use crate::elf::ElfImage;
use crate::error::{CodeLocation, GuestContext, TraceError};

/// Bytes below the stack bottom whose pages are watched.
pub(super) const GUARD_BYTES: u64 = 4096;

/// How far below the stack pointer a store still counts as the stack's: a
/// push stores below SP before it writes SP back (up to 64 B for 16
/// registers, 128 B for `vpush` of 16 doubles), and x86-64's red zone lets
/// a leaf function use 128 B below RSP.
const BELOW_SP: u64 = 256;

/// Most caller frames unwound for a stack overflow (a recursion deep enough
/// to fill a 256 KiB stack with 8-byte frames has 32 768).
const MAX_FRAMES: usize = 1 << 17;

/// The stack's bounds and its guard pages.
pub(crate) struct StackWatch {
    /// `__stack_bottom` (lowest stack address).
    pub(crate) bottom: u64,
    /// `__stack_top` (one past the highest).
    pub(crate) top: u64,
    /// Watched pages `[start, end)`: those holding `[bottom - GUARD_BYTES,
    /// bottom)`, within the loaded memory.
    pub(crate) zone: (u64, u64),
}

impl StackWatch {
    /// The watch for `image`, when it defines both stack symbols.
    pub(crate) fn for_image(image: &ElfImage) -> Option<StackWatch> {
        let bottom = image.symbol(symbols::STACK_BOTTOM)?.address;
        let top = image.symbol(symbols::STACK_TOP)?.address;
        if bottom >= top {
            return None;
        }
        // Only loaded pages: below them nothing is mapped, and an access
        // there is caught by the unmapped-access hook.
        let zone = page_ranges(image)
            .into_iter()
            .find(|&(s, e)| s < bottom && bottom <= e)
            .map_or((bottom, bottom), |(s, _)| {
                let start = (bottom.saturating_sub(GUARD_BYTES) & !(PAGE - 1)).max(s);
                (start, bottom.div_ceil(PAGE) * PAGE)
            });
        Some(StackWatch { bottom, top, zone })
    }

    /// Whether `address` lies on a watched page.
    pub(super) fn in_zone(&self, address: u64) -> bool {
        (self.zone.0..self.zone.1).contains(&address)
    }

    /// Whether the watched pages meet `[start, end)`.
    pub(super) fn meets(&self, start: u64, end: u64) -> bool {
        start < self.zone.1 && self.zone.0 < end
    }

    /// For an access at `address` made with the stack pointer at `sp`: how
    /// many bytes below the stack bottom it is, when it is the stack's.
    pub(crate) fn overflow(&self, address: u64, sp: u64) -> Option<u64> {
        (address < self.bottom && address.saturating_add(BELOW_SP) >= sp)
            .then(|| self.bottom - address)
    }
}

/// Write-protects the watched pages (at start, and again after anything
/// that remapped or unprotected them).
pub(super) fn protect(uc: &mut HookUc<'_, '_>) -> Result<(), String> {
    let Some((start, end)) = uc.get_data().stack.as_ref().map(|w| w.zone) else {
        return Ok(());
    };
    if start == end {
        return Ok(());
    }
    let image = uc.get_data().image;
    set_permissions(uc, image, start, end, Prot::WRITE)
        .map_err(|e| format!("write-protecting the stack guard {start:#x}..{end:#x}: {e:?}"))
}

/// Stops the run with a stack overflow when the access at `address`, made by
/// the instruction at `pc`, is the stack's and lies below its bottom;
/// whether it did.
pub(super) fn stop_on_overflow(uc: &mut HookUc<'_, '_>, pc: u64, address: u64) -> bool {
    let sp = uc.get_data().image.arch.stack_pointer(uc);
    let below = uc
        .get_data()
        .stack
        .as_ref()
        .and_then(|w| w.overflow(address, sp));
    match below {
        Some(below) => {
            report(uc, pc, address, below);
            true
        }
        None => false,
    }
}

/// Stops the run with a stack overflow: the access at `address`, `below`
/// bytes under the stack bottom, made by the instruction at `pc`.
fn report(uc: &mut HookUc<'_, '_>, pc: u64, address: u64, below: u64) {
    let regs = uc.get_data().image.arch.registers(uc, pc);
    let s = uc.get_data_mut();
    if s.rec.stop.is_some() {
        return;
    }
    let Some(watch) = s.stack.as_ref() else {
        return;
    };
    let stack_bytes = watch.top - watch.bottom;
    let callers = s.callers(regs, MAX_FRAMES);
    let frames = callers.len() + 1;
    let layer = s.rec.layer.as_ref().map(|l| l.name.clone());
    s.rec.stop = Some(Stop::Error(TraceError::StackOverflow {
        below,
        address,
        stack_bytes,
        frames,
        context: Box::new(GuestContext {
            location: CodeLocation {
                pc,
                ..CodeLocation::default()
            },
            layer,
            callers: Session::caller_locations(&callers),
        }),
    }));
    let _ = uc.emu_stop();
}
