//! The same guest in Unicorn with no hooks (but the TLB fill that keeps
//! stores fast, as in traced runs): the reference `memtrace bench` measures
//! tracing overhead against, and the run of a guest whose only product is
//! the memory it leaves (a model's outputs), which needs no trace.
//!
//! Only the page holding `memtrace_port` is mapped as MMIO, so the run can stop
//! at the guest's EXIT command; every other access stays on Unicorn's fast path.
//! With no block hook there is no instruction clock, so a guest that never
//! exits is stopped by a time limit instead of an instruction budget.

use std::time::Duration;

use crossbeam_channel::RecvTimeoutError;

use unicorn_engine::Unicorn;

use memtrace_abi::protocol::{Command, PortDecoder, MARKER_OFFSET};

use crate::arch::{Machine, Registers};
use crate::elf::ElfImage;
use crate::error::{CodeLocation, GuestContext, TraceError};
use crate::machine::{
    emulator_error, fast_stores, load_segments, map_pages, read_guest_string, write_inputs,
    GuestInputs, Job, PAGE,
};
use crate::session::StopSwitch;
use crate::unwind::Unwinder;

/// What an untraced run writes first, reads back after, and how long it may
/// take.
#[derive(Clone, Copy, Debug, Default)]
pub struct UntracedOptions<'a> {
    /// Kernel-suite job for the `memtrace_job` mailbox.
    pub job: Option<&'a Job>,
    /// Bytes written into guest memory first (as
    /// [`crate::TraceOptions::preload`]), e.g. the TFLM runner's model and inputs.
    pub preload: &'a [(u64, Vec<u8>)],
    /// Guest ranges `(address, length)` read back after the exit.
    pub readback: &'a [(u64, u64)],
    /// Wall time after which a guest that has not exited is stopped
    /// ([`TraceError::TimeLimit`]); `None` waits for ever.
    pub time_limit: Option<Duration>,
    /// Unicorn as it comes, for `memtrace bench`'s comparison: its own TLB,
    /// which sends every store to a data page through its slow path
    /// (`machine::fast_stores`, which every other run uses).
    pub stock: bool,
}

/// How an untraced run ended.
#[derive(Clone, Debug)]
pub struct UntracedRun {
    /// Exit code the guest passed to `memtrace_exit`.
    pub exit_code: i32,
    /// Why the guest exited, if it said so (`memtrace_exit_reason`).
    pub exit_reason: Option<String>,
    /// The ranges of [`UntracedOptions::readback`], in the same order.
    pub memory: Vec<Vec<u8>>,
}

#[derive(Default)]
struct PortState {
    decoder: PortDecoder,
    exit: Option<i32>,
    /// Guest address of the text of the last REASON command.
    reason: Option<u64>,
    /// The branch to itself the guest entered, and its registers there.
    looping: Option<(u64, Registers)>,
}

/// Most places of a branch to itself an untraced run hooks.
const MAX_SELF_BRANCH_SITES: usize = 256;

/// The places in `image`'s code that hold a branch to itself
/// ([`Machine::loops_forever`]), with its length: an untraced run hooks
/// the blocks that start there (Unicorn calls a bounded block hook only
/// for blocks in its range, so no other block pays) and stops at once
/// instead of at its time limit.
fn self_branch_sites(image: &ElfImage) -> Vec<(u64, u32)> {
    let read = |at: u64, out: &mut [u8]| {
        image.segments.iter().any(|s| {
            let Some(off) = at.checked_sub(s.address) else {
                return false;
            };
            match s.data.get(off as usize..off as usize + out.len()) {
                Some(b) => {
                    out.copy_from_slice(b);
                    true
                }
                None => false,
            }
        })
    };
    let step = if image.arch == crate::elf::Arch::X86_64 {
        1
    } else {
        2
    };
    let mut sites = Vec::new();
    for seg in image.segments.iter().filter(|s| s.executable) {
        for off in (0..seg.data.len()).step_by(step) {
            let address = seg.address + off as u64;
            let fits = [2usize, 4, 5].into_iter().find(|&n| {
                seg.data
                    .get(off..off + n)
                    .is_some_and(|code| image.arch.loops_forever(address, code, read))
            });
            if let Some(n) = fits {
                sites.push((address, n as u32));
                if sites.len() == MAX_SELF_BRANCH_SITES {
                    return sites;
                }
            }
        }
    }
    sites
}

/// Hooks the blocks at `image`'s branches to itself: one entered stops
/// the run, its place and registers noted for the call chain.
fn hook_self_branches(uc: &mut Unicorn<'_, PortState>, image: &ElfImage) -> Result<(), TraceError> {
    let arch = image.arch;
    for (at, length) in self_branch_sites(image) {
        uc.add_block_hook(at, at, move |uc, address, size| {
            // A longer block starting there is no loop.
            if size == length {
                let regs = arch.registers(uc, address);
                uc.get_data_mut().looping = Some((address, regs));
                let _ = uc.emu_stop();
            }
        })
        .map_err(|e| emulator_error("hooking a branch to itself", e))?;
    }
    Ok(())
}

/// The error of a run stopped at the branch to itself at `pc`, with the
/// calls that led there unwound from the registers `regs` it had.
fn looping_error(
    uc: &Unicorn<'_, PortState>,
    image: &ElfImage,
    pc: u64,
    regs: Registers,
) -> TraceError {
    let returns = Unwinder::for_image(image).map_or(Vec::new(), |mut u| {
        u.callers(
            image,
            regs,
            |a, out| uc.mem_read(a, out).is_ok(),
            LOOP_FRAMES,
        )
    });
    let mut context = GuestContext::at(pc, None);
    context.callers = returns
        .into_iter()
        .map(|pc| CodeLocation {
            pc,
            ..CodeLocation::default()
        })
        .collect();
    TraceError::LoopsForever { context }
}

/// Most caller frames unwound for a loop.
const LOOP_FRAMES: usize = 64;

/// Runs `image` to its EXIT command without hooks.
pub fn run_untraced(
    image: &ElfImage,
    options: UntracedOptions<'_>,
) -> Result<UntracedRun, TraceError> {
    let port = image.protocol_port()?;
    let port_page = port.address & !(PAGE - 1);
    let mut uc = image.arch.new_engine(PortState::default())?;
    if !options.stock {
        fast_stores(&mut uc, image.arch)?;
    }
    map_pages(&mut uc, image, Some(port_page))?;
    crate::machine::map_control_page(&mut uc, image)?;
    uc.mmio_map(
        port_page,
        PAGE,
        Some(|_: &mut Unicorn<'_, PortState>, _: u64, _: usize| 0u64),
        Some(
            move |uc: &mut Unicorn<'_, PortState>, offset: u64, _size: usize, value: u64| {
                let at = port_page + offset;
                let state = uc.get_data_mut();
                if at == port.address + MARKER_OFFSET {
                    match state.decoder.command(value as u32) {
                        Ok(Command::Exit { code }) => {
                            state.exit = Some(code);
                            let _ = uc.emu_stop();
                        }
                        Ok(Command::Reason { text }) => state.reason = Some(text),
                        _ => {}
                    }
                } else if at == port.address {
                    let _ = state.decoder.push(value as u32);
                }
            },
        ),
    )
    .map_err(|e| emulator_error("mapping the port page", e))?;
    load_segments(&mut uc, image, Some(port_page))?;
    hook_self_branches(&mut uc, image)?;
    write_inputs(
        &mut uc,
        image,
        GuestInputs {
            job: options.job,
            preload: options.preload,
        },
    )?;
    let limit = StopSwitch::default();
    let result = std::thread::scope(|scope| {
        let attached = limit.attach(&uc);
        let (running, ended) = crossbeam_channel::bounded::<()>(0);
        if let Some(time_limit) = options.time_limit {
            // Not Unicorn's own `timeout`: its timer thread reads a clock
            // that every engine created on another thread briefly turns from
            // monotonic to wall time (`init_get_clock` sets a process-wide
            // flag), which can make it fire at once.
            let limit = &limit;
            scope.spawn(move || {
                if ended.recv_timeout(time_limit) == Err(RecvTimeoutError::Timeout) {
                    limit.stop();
                }
            });
        }
        let result = uc.emu_start(image.arch.start_address(image.entry), 0, 0, 0);
        drop(attached);
        drop(running);
        result
    });
    let pc = uc.pc_read().unwrap_or(0);
    let context = || GuestContext::at(pc, None);
    let Some(exit_code) = uc.get_data().exit else {
        if let Some((at, regs)) = uc.get_data_mut().looping.take() {
            let err = looping_error(&uc, image, at, regs);
            return Err(crate::debuginfo::with_locations(err, image));
        }
        let err = match (result, options.time_limit) {
            (Err(e), _) => TraceError::GuestFault {
                message: format!("untraced run stopped: {e:?}"),
                context: context(),
            },
            (Ok(()), Some(time_limit)) if limit.requested() => TraceError::TimeLimit {
                seconds: time_limit.as_secs_f64(),
                context: context(),
            },
            (Ok(()), _) => TraceError::NoExit { context: context() },
        };
        return Err(crate::debuginfo::with_locations(err, image));
    };
    let exit_reason = uc.get_data().reason.and_then(|text| {
        read_guest_string(|at, out| uc.mem_read(at, out).is_ok(), text, "exit reason").ok()
    });
    let mut memory = Vec::with_capacity(options.readback.len());
    for &(address, len) in options.readback {
        let mut bytes = vec![0u8; len as usize];
        uc.mem_read(address, &mut bytes)
            .map_err(|e| emulator_error(&format!("reading back {address:#x}"), e))?;
        memory.push(bytes);
    }
    Ok(UntracedRun {
        exit_code,
        exit_reason,
        memory,
    })
}
