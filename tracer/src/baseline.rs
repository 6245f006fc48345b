//! The same guest in Unicorn with no hooks: the reference `memtrace bench`
//! measures tracing overhead against.
//!
//! Only the page holding `memtrace_port` is mapped as MMIO, so the run can stop
//! at the guest's EXIT command; every other access stays on Unicorn's fast path.

use unicorn_engine::{Prot, Unicorn};

use crate::elf::ElfImage;
use crate::error::TraceError;
use crate::protocol::{Command, PortDecoder, MARKER_OFFSET};
use crate::session::{new_engine, page_ranges, start_address, write_job, Job, PAGE};

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
    let emu = |what: &str, e| TraceError::Emulator(format!("{what}: {e:?}"));
    let mut uc = new_engine(image.arch, PortState::default())?;
    for (start, end) in page_ranges(image) {
        // Map around the port page.
        for (s, e) in [
            (start, end.min(port_page)),
            (start.max(port_page + PAGE), end),
        ] {
            if s < e {
                uc.mem_map(s, e - s, Prot::ALL)
                    .map_err(|err| emu("mapping guest memory", err))?;
            }
        }
    }
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
    .map_err(|e| emu("mapping the port page", e))?;
    for seg in &image.segments {
        // The port page holds no initialised data; skip it.
        let end = seg.address + seg.data.len() as u64;
        for (s, e) in [
            (seg.address, end.min(port_page)),
            (seg.address.max(port_page + PAGE), end),
        ] {
            if s < e {
                let data = &seg.data[(s - seg.address) as usize..(e - seg.address) as usize];
                uc.mem_write(s, data)
                    .map_err(|err| emu("loading a segment", err))?;
            }
        }
    }
    if let Some(job) = job {
        write_job(&mut uc, image, job)?;
    }
    for (address, bytes) in preload {
        uc.mem_write(*address, bytes)
            .map_err(|e| emu("writing preloaded guest memory", e))?;
    }
    let result = uc.emu_start(start_address(image), 0, 0, 0);
    match (uc.get_data().exit, result) {
        (Some(code), _) => Ok(code),
        (None, r) => Err(TraceError::Emulator(format!(
            "untraced run stopped at pc {:#x} without EXIT ({r:?})",
            uc.pc_read().unwrap_or(0)
        ))),
    }
}
