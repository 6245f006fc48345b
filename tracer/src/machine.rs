//! The guest machine: an engine of the image's architecture with its memory
//! mapped, its segments loaded and the host's inputs (job mailbox, preloaded
//! bytes) written — the same for traced runs (`session`) and untraced ones
//! (`baseline`), which differ only in how a few pages are mapped.

use unicorn_engine::{MemType, Prot, TlbEntry, TlbType, Unicorn};

use memtrace_abi::spec::JOB_WORDS;

use crate::arch::Machine;
use crate::elf::{Arch, ElfImage};
use crate::error::TraceError;

/// Guest page size.
pub(crate) const PAGE: u64 = 0x1000;

/// A layer configuration written into the guest's job mailbox.
#[derive(Clone, Debug)]
pub struct Job {
    /// The layer configuration.
    pub spec: memtrace_abi::LayerSpec,
    /// Seed of the guest's data generator.
    pub seed: u32,
}

/// What the host writes into guest memory before the first instruction.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct GuestInputs<'a> {
    pub job: Option<&'a Job>,
    /// `(address, bytes)` written after the job, e.g. a model program.
    pub preload: &'a [(u64, Vec<u8>)],
}

pub(crate) fn emulator_error(what: &str, e: unicorn_engine::uc_error) -> TraceError {
    TraceError::Emulator(format!("{what}: {e:?}"))
}

/// Page-aligned, merged address ranges covering all loadable segments.
pub(crate) fn page_ranges(image: &ElfImage) -> Vec<(u64, u64)> {
    let ranges: Vec<(u64, u64)> = image
        .segments
        .iter()
        .map(|s| {
            let start = s.address & !(PAGE - 1);
            let end = (s.address + s.size).div_ceil(PAGE) * PAGE;
            (start, end)
        })
        .collect();
    merged_ranges(ranges)
}

/// `ranges` sorted, with overlapping or touching ranges merged into one.
pub(crate) fn merged_ranges(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (s, e) in ranges {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    merged
}

/// `[start, end)` less the page at `hole` (if any), as up to two ranges.
fn around(start: u64, end: u64, hole: Option<u64>) -> impl Iterator<Item = (u64, u64)> {
    let parts = match hole {
        Some(h) => [(start, end.min(h)), (start.max(h + PAGE), end)],
        None => [(start, end), (end, end)],
    };
    parts.into_iter().filter(|(s, e)| s < e)
}

/// Maps all pages of the image's segments as ordinary RAM, except the page
/// `hole`, which the caller maps itself.
pub(crate) fn map_pages<D>(
    uc: &mut Unicorn<'_, D>,
    image: &ElfImage,
    hole: Option<u64>,
) -> Result<(), TraceError> {
    for (start, end) in page_ranges(image) {
        for (s, e) in around(start, end, hole) {
            uc.mem_map(s, e - s, Prot::ALL)
                .and_then(|()| set_permissions(uc, image, s, e, Prot::NONE))
                .map_err(|err| {
                    emulator_error(&format!("mapping guest memory {s:#x}..{e:#x}"), err)
                })?;
        }
    }
    Ok(())
}

/// Gives the guest pages `[start, end)` (page-aligned) their permissions,
/// less `without`: every permission on pages an executable segment loads,
/// read and write on the others. Unicorn sends every store to an
/// executable page through its slow path (it may have to discard code
/// translated from it), so data pages must not be executable.
pub(crate) fn set_permissions<D>(
    uc: &mut Unicorn<'_, D>,
    image: &ElfImage,
    start: u64,
    end: u64,
    without: Prot,
) -> Result<(), unicorn_engine::uc_error> {
    for (first, last, executable) in page_runs(image, start, end) {
        let prot = if executable {
            Prot::ALL
        } else {
            Prot::READ | Prot::WRITE
        };
        uc.mem_protect(first, last - first, Prot(prot.0 & !without.0))?;
    }
    Ok(())
}

/// The guest memory `[start, end)` (aligned to the engine's page, which may
/// be smaller than [`PAGE`]) as maximal runs `(first, end, executable)`:
/// whether an executable segment loads them.
pub(crate) fn page_runs(image: &ElfImage, start: u64, end: u64) -> Vec<(u64, u64, bool)> {
    let mut runs: Vec<(u64, u64, bool)> = Vec::new();
    for page in (start..end).step_by(PAGE as usize) {
        let page_end = (page + PAGE).min(end);
        let executable = image.is_executable(page, page_end - page);
        match runs.last_mut() {
            Some(run) if run.2 == executable => run.1 = page_end,
            _ => runs.push((page, page_end, executable)),
        }
    }
    runs
}

/// The System Control Block page of a Cortex-M (CPACR is at 0xE000ED88).
const CONTROL_PAGE: u64 = 0xE000_E000;

/// Maps a Cortex-M image's System Control Block page as plain memory,
/// unless a segment covers it: memtrace's guests built for a board enable
/// the FPU and Helium there at start (`-DMEMTRACE_ENABLE_CPACR`, which
/// QEMU needs), and Unicorn, which models no SCB and runs floating point
/// without it, takes the store and goes on. (`check`, which runs programs
/// as built, reports any access there instead.)
pub(crate) fn map_control_page<D>(
    uc: &mut Unicorn<'_, D>,
    image: &ElfImage,
) -> Result<(), TraceError> {
    if !image.arch.is_cortex_m() || image.is_loaded(CONTROL_PAGE, 1) {
        return Ok(());
    }
    uc.mem_map(CONTROL_PAGE, PAGE, Prot::READ | Prot::WRITE)
        .map_err(|e| emulator_error("mapping the System Control Block page", e))
}

/// Writes the segments' initialised bytes, skipping the page `hole` (an MMIO
/// page holds no initialised data).
pub(crate) fn load_segments<D>(
    uc: &mut Unicorn<'_, D>,
    image: &ElfImage,
    hole: Option<u64>,
) -> Result<(), TraceError> {
    for seg in &image.segments {
        let end = seg.address + seg.data.len() as u64;
        for (s, e) in around(seg.address, end, hole) {
            let data = &seg.data[(s - seg.address) as usize..(e - seg.address) as usize];
            uc.mem_write(s, data)
                .map_err(|err| emulator_error(&format!("loading segment at {s:#x}"), err))?;
        }
    }
    Ok(())
}

/// Writes the job mailbox and the preloaded bytes; both must lie in memory
/// the image loads.
pub(crate) fn write_inputs<D>(
    uc: &mut Unicorn<'_, D>,
    image: &ElfImage,
    inputs: GuestInputs<'_>,
) -> Result<(), TraceError> {
    for (address, bytes) in input_writes(image, inputs)? {
        uc.mem_write(address, &bytes)
            .map_err(|e| emulator_error("writing the guest's inputs", e))?;
    }
    Ok(())
}

/// The host's inputs as `(address, bytes)` writes into guest memory: the
/// job mailbox, then the preloaded ranges, each checked to lie in the
/// image's loaded memory.
pub(crate) fn input_writes(
    image: &ElfImage,
    inputs: GuestInputs<'_>,
) -> Result<Vec<(u64, Vec<u8>)>, TraceError> {
    let mut writes = Vec::with_capacity(inputs.preload.len() + 1);
    if let Some(job) = inputs.job {
        writes.push(job_write(image, job)?);
    }
    for (address, bytes) in inputs.preload {
        if !image.is_loaded(*address, bytes.len() as u64) {
            return Err(TraceError::Emulator(format!(
                "preload of {} bytes at {address:#x} is outside the guest's loaded memory",
                bytes.len()
            )));
        }
        writes.push((*address, bytes.clone()));
    }
    Ok(writes)
}

fn job_write(image: &ElfImage, job: &Job) -> Result<(u64, Vec<u8>), TraceError> {
    let needed = JOB_WORDS * 4;
    let mailbox = image
        .symbol(memtrace_abi::symbols::JOB)
        .filter(|s| s.size as usize >= needed && image.is_loaded(s.address, needed as u64))
        .ok_or_else(|| TraceError::NoJobMailbox {
            path: image.path.clone(),
            needed,
        })?;
    let bytes: Vec<u8> = job
        .spec
        .job_words(job.seed)
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect();
    Ok((mailbox.address, bytes))
}

/// Reads a NUL-terminated UTF-8 guest string of at most `MAX_STRING` bytes
/// at `address` with `read` (true when the whole range was readable).
pub(crate) fn read_guest_string(
    mut read: impl FnMut(u64, &mut [u8]) -> bool,
    address: u64,
    what: &str,
) -> Result<String, String> {
    use memtrace_abi::protocol::MAX_STRING;
    let unterminated =
        || format!("{what} at {address:#x} is not NUL-terminated within {MAX_STRING} bytes");
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 32];
    while bytes.len() < MAX_STRING {
        let at = address + bytes.len() as u64;
        // Near the end of mapped memory a whole chunk is unreadable: then
        // one byte at a time.
        let got = if read(at, &mut chunk) {
            &chunk[..]
        } else if read(at, &mut chunk[..1]) {
            &chunk[..1]
        } else {
            return Err(format!("{what} at {address:#x} is not in guest memory"));
        };
        if let Some(nul) = got.iter().position(|&b| b == 0) {
            bytes.extend_from_slice(&got[..nul]);
            if bytes.len() >= MAX_STRING {
                return Err(unterminated());
            }
            return String::from_utf8(bytes)
                .map_err(|_| format!("{what} at {address:#x} is not UTF-8"));
        }
        bytes.extend_from_slice(got);
    }
    Err(unterminated())
}

/// Lets the guest's stores to data pages run at full speed.
///
/// Unicorn's own TLB gives a page the permissions of the architecture's
/// memory map, in which a Cortex-M's SRAM (like all memory of an x86-64
/// guest without paging) is executable; and Unicorn never takes a page whose
/// TLB entry allows execution off the slow path for stores (it must check
/// each store for translated code to discard). So every store to the stack
/// or the arena went through that helper: about half of a convolution's
/// run. Here the TLB is filled by the host instead, with the permissions the
/// pages are mapped with asked for by each access: a data access gets read
/// and write, a fetch everything. Unicorn still checks every fetch against
/// the mapping (`set_permissions`), so code runs only where it did before.
pub(crate) fn fast_stores<D>(uc: &mut Unicorn<'_, D>, arch: Arch) -> Result<(), TraceError> {
    uc.ctl_set_tlb_type(TlbType::VIRTUAL)
        .map_err(|e| emulator_error("choosing the host-filled TLB", e))?;
    uc.add_tlb_hook(1, 0, move |uc, page, access| {
        let perms = if access == MemType::FETCH {
            // A fetch is filled while a block is translated: Unicorn restored
            // nothing, and the IT state is the one the previous block stored
            // when it ended inside an IT block at this page's boundary (it
            // must survive: `harness-c/guests/it_block.c`).
            Prot::ALL
        } else {
            // Unicorn restored the accessing instruction's state before asking.
            arch.clear_stale_it_state(uc);
            Prot::READ | Prot::WRITE
        };
        Some(TlbEntry { paddr: page, perms })
    })
    .map_err(|e| emulator_error("hooking the TLB fill", e))?;
    Ok(())
}
