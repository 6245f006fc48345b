//! Block starts: the clock, the instruction budget, progress and the guard's
//! pending protection changes.
//!
//! Unicorn calls the block hook at every block the guest enters, some
//! hundred million times in a whole-model run, so its cost is a large part
//! of the tracing overhead. The hook is registered with `uc_hook_add`
//! directly rather than through `Unicorn::add_block_hook`, whose proxy
//! upgrades a weak reference and calls a boxed closure on every block; and
//! the common case (a block seen before, nothing due) touches only the
//! clock's cache and three fields of the session.

use std::ffi::c_void;

use unicorn_engine::{uc_engine, uc_hook, uc_hook_add, uc_hook_del, HookType};

use super::{
    emulator_error, guard, Clock, GuestContext, HookUc, Progress, Session, Stop, TraceError,
};
use crate::arch::Machine;

/// The registered block hook; keep it alive until the run has ended.
pub(super) struct BlockHook<'u, 's> {
    /// A handle of the same engine, for the hook's slow path.
    uc: HookUc<'u, 's>,
    /// The engine's session, for the hot path without the handle's
    /// indirections (it lives as long as the engine).
    session: *mut Session<'s>,
    id: uc_hook,
}

impl<'u, 's> BlockHook<'u, 's> {
    /// Hooks every block start of `uc`.
    pub(super) fn install(uc: &mut HookUc<'u, 's>) -> Result<Box<Self>, TraceError> {
        let session = std::ptr::from_mut(uc.get_data_mut());
        let mut hook = Box::new(BlockHook {
            uc: uc.clone(),
            session,
            id: 0,
        });
        let user_data = std::ptr::from_mut::<BlockHook<'u, 's>>(hook.as_mut()).cast::<c_void>();
        let mut id: uc_hook = 0;
        // SAFETY: the callback's signature is Unicorn's block-hook signature
        // (`uc_cb_hookcode_t`); `user_data` points into the box, which the
        // caller keeps until emulation has ended and which unregisters the
        // hook when dropped.
        let err = unsafe {
            uc_hook_add(
                uc.get_handle(),
                &mut id,
                HookType::BLOCK.0 as i32,
                block_entry as *mut c_void,
                user_data,
                1,
                0,
            )
        };
        if err != unicorn_engine::uc_error::OK {
            return Err(emulator_error("installing the block hook", err));
        }
        hook.id = id;
        Ok(hook)
    }
}

impl Drop for BlockHook<'_, '_> {
    fn drop(&mut self) {
        // SAFETY: `id` was returned by `uc_hook_add` on this engine.
        let _ = unsafe { uc_hook_del(self.uc.get_handle(), self.id) };
    }
}

/// Unicorn's entry: only during `emu_start`, on the emulating thread. The
/// common case (a known block, nothing due) returns without a call.
unsafe extern "C" fn block_entry(_: *mut uc_engine, address: u64, size: u32, data: *mut c_void) {
    // SAFETY: `data` is the `BlockHook` of `install`, alive while the hook
    // is registered; `session` is its engine's, and Unicorn holds no other
    // reference to either while it calls a hook.
    let hook = unsafe { &mut *data.cast::<BlockHook<'_, '_>>() };
    let session = unsafe { &mut *hook.session };
    match session.enter_cached_block(address) {
        Entry::Done => {}
        entry => on_block(&mut hook.uc, address, size, entry),
    }
}

/// What the hot path of a block start found.
enum Entry {
    /// A known block and nothing due: done.
    Done,
    /// A known block, entered; a budget, progress or guard check is due.
    Due(u64),
    /// A block the clock has not cached, or a clock that is not the block
    /// clock: nothing changed yet.
    Unknown,
}

impl Session<'_> {
    #[inline]
    fn enter_cached_block(&mut self, address: u64) -> Entry {
        self.block_address = address;
        let Clock::Blocks(clock) = &mut self.clock else {
            return Entry::Unknown;
        };
        if !clock.enter_cached(address) {
            return Entry::Unknown;
        }
        let retired = clock.retired_before_block();
        if retired < self.next_progress && retired <= self.budget && !guard::pending(self) {
            Entry::Done
        } else {
            Entry::Due(retired)
        }
    }
}

/// A block start with something to do: a check due, or a block the clock
/// has not cached.
#[cold]
#[inline(never)]
fn on_block(uc: &mut HookUc<'_, '_>, address: u64, size: u32, entry: Entry) {
    match entry {
        Entry::Done => {}
        Entry::Due(retired) => {
            if apply_guard_changes(uc, address) {
                after_instructions(uc, retired, address);
            }
        }
        Entry::Unknown => enter_block(uc, address, size),
    }
}

/// A block start off the hot path: a block seen for the first time (its
/// code is read and decoded), or the per-instruction clock.
#[inline(never)]
fn enter_block(uc: &mut HookUc<'_, '_>, address: u64, size: u32) {
    if !apply_guard_changes(uc, address) {
        return;
    }
    let known = match &uc.get_data().clock {
        Clock::Blocks(c) => c.knows(address),
        Clock::Counted(n) => {
            // The block's first instruction has not been counted yet.
            let retired = *n;
            // Every block comes here on this (cross-checking) clock: only
            // one as short as a branch is read.
            if size <= MAX_SELF_BRANCH && loops_forever(uc, address, &code_of(uc, address, size)) {
                return stop_looping(uc, address);
            }
            after_instructions(uc, retired, address);
            return;
        }
        // No block hook is installed without a clock.
        Clock::Off => return,
    };
    // Code bytes are read only the first time a block is seen; a block
    // that loops forever is stopped then, so it is never seen again.
    let mut code = Vec::new();
    if !known {
        code = code_of(uc, address, size);
        if loops_forever(uc, address, &code) {
            return stop_looping(uc, address);
        }
    }
    let Clock::Blocks(clock) = &mut uc.get_data_mut().clock else {
        return;
    };
    clock.block_start(address, size, move || code);
    let retired = clock.retired_before_block();
    after_instructions(uc, retired, address);
}

/// Bytes of the longest branch to itself ([`Machine::loops_forever`]).
const MAX_SELF_BRANCH: u32 = 5;

/// The `size` code bytes of the block at `address`.
fn code_of(uc: &HookUc<'_, '_>, address: u64, size: u32) -> Vec<u8> {
    let mut code = vec![0u8; size as usize];
    let _ = uc.mem_read(address, &mut code);
    code
}

/// Whether the block `code` at `address` is a branch to itself.
fn loops_forever(uc: &HookUc<'_, '_>, address: u64, code: &[u8]) -> bool {
    let arch = uc.get_data().image.arch;
    arch.loops_forever(address, code, |a, out| uc.mem_read(a, out).is_ok())
}

/// Stops the run at the block at `address`, which loops forever: the
/// loop's place and the calls that led there.
#[cold]
fn stop_looping(uc: &mut HookUc<'_, '_>, address: u64) {
    let arch = uc.get_data().image.arch;
    let regs = arch.registers(uc, address);
    let s = uc.get_data_mut();
    if s.rec.stop.is_none() {
        let layer = s.rec.layer.as_ref().map(|l| l.name.clone());
        let callers = s.callers(regs, super::FAULT_FRAMES);
        let mut context = GuestContext::at(address, layer);
        context.callers = Session::caller_locations(&callers);
        s.rec.stop = Some(Stop::Error(TraceError::LoopsForever { context }));
    }
    let _ = uc.emu_stop();
}

/// Makes the guard's waiting protection changes; false when that failed and
/// the run stops.
fn apply_guard_changes(uc: &mut HookUc<'_, '_>, address: u64) -> bool {
    if !guard::pending(uc.get_data()) {
        return true;
    }
    if let Err(e) = guard::apply(uc) {
        uc.get_data_mut().rec.fail_guest(e, address, None);
        let _ = uc.emu_stop();
        return false;
    }
    true
}

/// The per-instruction clock's code hook.
pub(super) fn on_instruction(uc: &mut HookUc<'_, '_>, _address: u64, _size: u32) {
    if let Clock::Counted(n) = &mut uc.get_data_mut().clock {
        *n += 1;
    }
}

/// Budget and progress checks, at block or instruction granularity.
#[inline(never)]
fn after_instructions(uc: &mut HookUc<'_, '_>, retired: u64, pc: u64) {
    let s = uc.get_data_mut();
    if retired > s.budget && s.rec.stop.is_none() {
        let budget = s.budget;
        let layer = s.rec.layer.as_ref().map(|l| l.name.clone());
        s.rec.stop = Some(Stop::Error(TraceError::BudgetExceeded {
            budget,
            context: GuestContext::at(pc, layer),
        }));
        let _ = uc.emu_stop();
        return;
    }
    if retired >= s.next_progress {
        s.next_progress = retired + (1 << 24);
        let events = s.rec.events + s.rec.batch.len() as u64;
        if let Some(p) = s.progress.as_mut() {
            p(Progress {
                instructions: retired,
                events,
            });
        }
    }
}
