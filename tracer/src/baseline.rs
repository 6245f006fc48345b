//! The same guest in Unicorn with no hooks: the reference `memtrace bench`
//! measures tracing overhead against.
//!
//! Only the page holding `memtrace_port` is mapped as MMIO, so the run can stop
//! at the guest's EXIT command; every other access stays on Unicorn's fast path.

use unicorn_engine::Unicorn;

use memtrace_abi::protocol::{Command, PortDecoder, MARKER_OFFSET};

use crate::elf::ElfImage;
use crate::error::TraceError;
use crate::machine::{
    emulator_error, load_segments, map_pages, write_inputs, GuestInputs, Job, PAGE,
};

#[derive(Default)]
struct PortState {
    decoder: PortDecoder,
    exit: Option<i32>,
}

/// Runs `image` to its EXIT command without hooks and returns the exit code.
pub fn run_untraced(image: &ElfImage, job: Option<&Job>) -> Result<i32, TraceError> {
    run_untraced_with(image, job, &[])
}

/// [`run_untraced`], with `preload` written into guest memory first (as
/// [`crate::TraceOptions::preload`]), e.g. the executor's model program.
pub fn run_untraced_with(
    image: &ElfImage,
    job: Option<&Job>,
    preload: &[(u64, Vec<u8>)],
) -> Result<i32, TraceError> {
    let port = image.protocol_port()?;
    let port_page = port.address & !(PAGE - 1);
    let mut uc = image.arch.new_engine(PortState::default())?;
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
                    if let Ok(Command::Exit { code }) = state.decoder.command(value as u32) {
                        state.exit = Some(code);
                        let _ = uc.emu_stop();
                    }
                } else if at == port.address {
                    let _ = state.decoder.push(value as u32);
                }
            },
        ),
    )
    .map_err(|e| emulator_error("mapping the port page", e))?;
    load_segments(&mut uc, image, Some(port_page))?;
    write_inputs(&mut uc, image, GuestInputs { job, preload })?;
    let result = uc.emu_start(image.arch.start_address(image.entry), 0, 0, 0);
    match (uc.get_data().exit, result) {
        (Some(code), _) => Ok(code),
        (None, r) => Err(TraceError::Emulator(format!(
            "untraced run stopped at pc {:#x} without EXIT ({r:?})",
            uc.pc_read().unwrap_or(0)
        ))),
    }
}
