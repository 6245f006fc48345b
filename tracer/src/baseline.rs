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

use crate::arch::Machine;
use crate::elf::ElfImage;
use crate::error::{GuestContext, TraceError};
use crate::machine::{
    emulator_error, fast_stores, load_segments, map_pages, read_guest_string, write_inputs,
    GuestInputs, Job, PAGE,
};
use crate::session::StopSwitch;

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
}

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
