//! The MMIO access path ([`super::AccessPath::Mmio`]): no memory hooks at all.
//!
//! Any memory hook sends every guest load and store through Unicorn's slow
//! helper, whatever its range (docs/measurements.md, "Emulator costs behind the tracer's design"). This path installs none. Instead,
//! the page of `memtrace_port` and, while a selected layer is open, the pages
//! of its declared buffers are *served*: their RAM mapping is replaced by MMIO
//! whose callbacks read and write the same host memory and record the
//! events. All other memory stays on Unicorn's fast path.
//!
//! Guest RAM is host memory (`ram.rs`) mapped with `mem_map_ptr`, so serving
//! and releasing pages moves no data.
//!
//! MMIO callbacks are not told the PC. So events get the current block's
//! address as `pc` and the instructions retired before that block as `t`;
//! their order (`seq`), sizes and kinds are exact, and O_s depends only on
//! order. Commands still get exact times: the MARKER store is made by the
//! guest's `memtrace_signal()` (memtrace.h), and a code hook on that function
//! alone, which costs nothing elsewhere, reports the storing instruction.

use std::ffi::{c_uint, c_void};

use memtrace_abi::symbols;
use unicorn_engine::{uc_engine, uc_mmio_map, Prot, Unicorn};

use super::{emulator_error, port_store, HookUc, Session, PAGE, PORT_SIZE};
use crate::elf::ElfImage;
use crate::error::TraceError;

/// A run of guest pages now served as MMIO.
struct Region {
    base: u64,
    len: u64,
    /// Index of its range of guest RAM (`GuestRam::range`).
    ram: usize,
    /// The port page: served for the whole run.
    permanent: bool,
    /// What the callbacks of a buffer region are given: held, never read
    /// here, because Unicorn points at it until the region is unmapped.
    _target: Option<Box<Target>>,
}

/// The user data of a buffer region's callbacks: its session and slot.
///
/// Buffer regions take every traced access, so their callbacks are
/// registered with `uc_mmio_map` directly: the crate's `mmio_map` wraps each
/// call in a proxy that upgrades a weak engine handle and calls a boxed
/// closure. Their accesses need only the session; the port page, whose
/// commands need the engine, keeps the crate's closures.
struct Target {
    session: *mut c_void,
    slot: usize,
}

/// State of the MMIO path.
pub(super) struct Served {
    /// Slots of served regions; a callback knows its slot. Slots of released
    /// regions are reused.
    regions: Vec<Option<Region>>,
    port: u64,
    /// `[start, end)` of `memtrace_signal`.
    signal: (u64, u64),
    /// The instruction of `memtrace_signal` its code hook saw last.
    signal_pc: u64,
    /// Served accesses that touched no traced byte
    /// ([`crate::RunSummary::idle_dispatches`]).
    pub(super) idle_dispatches: u64,
}

impl Served {
    /// The MMIO path for `image`, if it was built with a `memtrace_signal`.
    pub(super) fn for_image(image: &ElfImage, port: u64) -> Option<Served> {
        let signal = image.symbol(symbols::SIGNAL)?;
        Some(Served {
            regions: Vec::new(),
            port,
            signal: (signal.address, signal.address + signal.size.max(1)),
            signal_pc: 0,
            idle_dispatches: 0,
        })
    }

    /// The instruction of a MARKER store made in the block at `block`: the
    /// store that the code hook just saw when the block is part of
    /// `memtrace_signal`; otherwise (a hand-written store) the block's start.
    fn command_pc(&self, block: u64) -> u64 {
        if (self.signal.0..self.signal.1).contains(&block) {
            self.signal_pc
        } else {
            block
        }
    }

    fn is_served(&self, page: u64) -> bool {
        self.regions
            .iter()
            .flatten()
            .any(|r| page >= r.base && page < r.base + r.len)
    }
}

/// Serves the port page and hooks `memtrace_signal`; before the first
/// instruction.
pub(super) fn install(uc: &mut Unicorn<'_, Session<'_>>) -> Result<(), TraceError> {
    let Some(served) = uc.get_data().served.as_ref() else {
        return Ok(());
    };
    let (port, signal) = (served.port, served.signal);
    let page = port & !(PAGE - 1);
    serve(uc, page, page + PAGE, true).map_err(TraceError::Emulator)?;
    uc.add_code_hook(signal.0, signal.1 - 1, |uc: &mut HookUc<'_, '_>, pc, _| {
        if let Some(s) = uc.get_data_mut().served.as_mut() {
            s.signal_pc = pc;
        }
    })
    .map_err(|e| emulator_error("hooking memtrace_signal", e))?;
    Ok(())
}

/// Serves every page of `[start, end)` that is not served yet, together
/// with the buffer regions it touches.
///
/// Pages are the engine's own (1 KiB on the Cortex-M4, 4 KiB on x86-64), the
/// smallest unit Unicorn maps: every access to a served page costs an MMIO
/// dispatch, also one to an untraced buffer beside the traced ones, such as
/// a CMSIS-NN kernel's scratch, which it reads over and over.
///
/// A layer's buffers usually lie end to end (an arena), and each served
/// region is a region of Unicorn's memory map, which its slow path looks up
/// on every access with a one-entry cache (the last region hit). A kernel
/// that reads its input and its filter in turn would miss that cache at every
/// access if they were two regions, so touching buffer regions are merged
/// into one when the merged range is still one range of guest RAM and holds
/// no code.
pub(super) fn serve_range(uc: &mut HookUc<'_, '_>, start: u64, end: u64) -> Result<(), String> {
    let page = uc
        .ctl_get_page_size()
        .map(u64::from)
        .map_err(|e| format!("reading the engine's page size: {e:?}"))?;
    let (mut lo, mut hi) = (start & !(page - 1), end.div_ceil(page) * page);
    while let Some(slot) = touching_region(uc.get_data(), lo, hi) {
        let s = uc.get_data_mut().served.as_mut().expect("MMIO path");
        let region = s.regions[slot].take().expect("a served region");
        lo = lo.min(region.base);
        hi = hi.max(region.base + region.len);
        unserve(uc, region)?;
    }
    let served = |uc: &HookUc<'_, '_>, p: u64| {
        uc.get_data()
            .served
            .as_ref()
            .is_some_and(|s| s.is_served(p))
    };
    let mut at = lo;
    while at < hi {
        if served(uc, at) {
            at += page;
            continue;
        }
        let mut run_end = at + page;
        while run_end < hi && !served(uc, run_end) {
            run_end += page;
        }
        serve(uc, at, run_end, false)?;
        at = run_end;
    }
    Ok(())
}

/// The slot of a buffer region that overlaps or touches the pages
/// `[lo, hi)` and can be merged with them into one region.
fn touching_region(s: &Session<'_>, lo: u64, hi: u64) -> Option<usize> {
    let served = s.served.as_ref()?;
    served.regions.iter().position(|r| {
        r.as_ref().is_some_and(|r| {
            let (a, b) = (lo.min(r.base), hi.max(r.base + r.len));
            !r.permanent
                && r.base <= hi
                && lo <= r.base + r.len
                && s.ram.index(a, b - a) == Some(r.ram)
                && !s.image.is_executable(a, b - a)
        })
    })
}

/// Replaces the RAM mapping of `[start, end)` (page-aligned) by MMIO.
fn serve(uc: &mut HookUc<'_, '_>, start: u64, end: u64, permanent: bool) -> Result<(), String> {
    let range = format!("{start:#x}..{end:#x}");
    if uc.get_data().image.is_executable(start, end - start) {
        return Err(format!(
            "guest pages {range} hold code as well as traced data; \
             trace with --exact-time (memory hooks) instead"
        ));
    }
    let ram = uc
        .get_data()
        .ram
        .index(start, end - start)
        .ok_or_else(|| format!("guest pages {range} are not one range of guest RAM"))?;
    let session = std::ptr::from_mut(uc.get_data_mut()).cast::<c_void>();
    let s = uc.get_data_mut().served.as_mut().expect("MMIO path");
    let slot = s
        .regions
        .iter()
        .position(Option::is_none)
        .unwrap_or(s.regions.len());
    // The box's contents stay put when the region moves into its slot.
    let mut target = (!permanent).then(|| Box::new(Target { session, slot }));
    let user_data = target.as_mut().map_or(std::ptr::null_mut(), |t| {
        std::ptr::from_mut(t.as_mut()).cast()
    });
    let region = Some(Region {
        base: start,
        len: end - start,
        ram,
        permanent,
        _target: target,
    });
    match s.regions.get_mut(slot) {
        Some(free) => *free = region,
        None => s.regions.push(region),
    }
    uc.mem_unmap(start, end - start)
        .map_err(|e| format!("unmapping guest pages {range}: {e:?}"))?;
    let mapped = if permanent {
        uc.mmio_map(
            start,
            end - start,
            Some(move |uc: &mut HookUc<'_, '_>, offset: u64, size: usize| {
                uc.get_data_mut().served_read(slot, offset, size)
            }),
            Some(
                move |uc: &mut HookUc<'_, '_>, offset: u64, size: usize, value: u64| {
                    on_port_page_write(uc, slot, offset, size, value)
                },
            ),
        )
    } else {
        map_buffer_region(uc, start, end - start, user_data)
    };
    mapped.map_err(|e| format!("mapping guest pages {range} as MMIO: {e:?}"))
}

/// Maps `[start, start + len)` as MMIO whose callbacks go straight to the
/// session, given the region's [`Target`] as `user_data`.
fn map_buffer_region(
    uc: &mut HookUc<'_, '_>,
    start: u64,
    len: u64,
    user_data: *mut c_void,
) -> Result<(), unicorn_engine::uc_error> {
    // SAFETY: the callbacks have Unicorn's MMIO signatures; `user_data`
    // points into the region's boxed target, which the region keeps until
    // it is unmapped (`release_layer_pages`), and the session outlives the
    // engine's runs.
    let err = unsafe {
        uc_mmio_map(
            uc.get_handle(),
            start,
            len,
            Some(buffer_read),
            user_data,
            Some(buffer_write),
            user_data,
        )
    };
    if err == unicorn_engine::uc_error::OK {
        Ok(())
    } else {
        Err(err)
    }
}

/// Unicorn's read callback of a buffer region.
unsafe extern "C" fn buffer_read(
    _: *mut uc_engine,
    offset: u64,
    size: c_uint,
    data: *mut c_void,
) -> u64 {
    // SAFETY: `data` is the region's `Target` (`map_buffer_region`), and
    // Unicorn holds no other reference to the session while it calls back.
    let target = unsafe { &*data.cast::<Target>() };
    let session = unsafe { &mut *target.session.cast::<Session<'_>>() };
    session.served_read(target.slot, offset, size as usize)
}

/// Unicorn's write callback of a buffer region.
unsafe extern "C" fn buffer_write(
    _: *mut uc_engine,
    offset: u64,
    size: c_uint,
    value: u64,
    data: *mut c_void,
) {
    // SAFETY: as in `buffer_read`.
    let target = unsafe { &*data.cast::<Target>() };
    let session = unsafe { &mut *target.session.cast::<Session<'_>>() };
    session.served_write(target.slot, offset, size as usize, value);
}

/// Gives the pages served for a layer back to RAM.
pub(super) fn release_layer_pages(uc: &mut HookUc<'_, '_>) -> Result<(), String> {
    let released: Vec<Region> = match uc.get_data_mut().served.as_mut() {
        Some(s) => s
            .regions
            .iter_mut()
            .filter(|r| r.as_ref().is_some_and(|r| !r.permanent))
            .filter_map(Option::take)
            .collect(),
        None => return Ok(()),
    };
    for region in released {
        unserve(uc, region)?;
    }
    Ok(())
}

/// Maps a served region's pages as RAM again; its callback target is
/// dropped only after the unmapping.
fn unserve(uc: &mut HookUc<'_, '_>, region: Region) -> Result<(), String> {
    let (base, len) = (region.base, region.len);
    let ptr = uc.get_data().ram.range(region.ram).at(base);
    let range = format!("{base:#x}..{:#x}", base + len);
    uc.mem_unmap(base, len)
        .map_err(|e| format!("unmapping MMIO pages {range}: {e:?}"))?;
    drop(region);
    // SAFETY: as in `ram::map`; `ptr` is inside the same allocation.
    unsafe { uc.mem_map_ptr(base, len, Prot::ALL, ptr as *mut c_void) }
        .and_then(|()| {
            let image = uc.get_data().image;
            super::set_permissions(uc, image, base, base + len, Prot::NONE)
        })
        .map_err(|e| format!("remapping guest pages {range}: {e:?}"))?;
    if uc
        .get_data()
        .stack
        .as_ref()
        .is_some_and(|w| w.meets(base, base + len))
    {
        super::stack::protect(uc)?;
    }
    Ok(())
}

/// Host pointer and clipped size of an access to served region `slot`.
fn host_access(
    s: &Session<'_>,
    slot: usize,
    offset: u64,
    size: usize,
) -> Option<(u64, *mut u8, usize)> {
    let sv = s.served.as_ref()?;
    let r = sv.regions.get(slot)?.as_ref()?;
    let address = r.base + offset;
    let n = size.min(8).min(r.len.saturating_sub(offset) as usize);
    Some((address, s.ram.range(r.ram).at(address), n))
}

/// The `n` (at most 8) little-endian bytes at `host`.
///
/// Guest accesses are 1, 2, 4 or 8 bytes: a load of that fixed size is one
/// host instruction, where a copy of run-time length is a call.
///
/// # Safety
/// `host` must be valid for reads of `n` bytes.
#[inline]
unsafe fn load_le(host: *const u8, n: usize) -> u64 {
    // SAFETY: the caller's; unaligned reads of exactly `n` bytes.
    unsafe {
        match n {
            1 => u64::from(host.read()),
            2 => u64::from(u16::from_le(host.cast::<u16>().read_unaligned())),
            4 => u64::from(u32::from_le(host.cast::<u32>().read_unaligned())),
            8 => u64::from_le(host.cast::<u64>().read_unaligned()),
            _ => {
                let mut word = [0u8; 8];
                std::ptr::copy_nonoverlapping(host, word.as_mut_ptr(), n.min(8));
                u64::from_le_bytes(word)
            }
        }
    }
}

/// Stores the low `n` (at most 8) bytes of `value` at `host`, little-endian
/// (see [`load_le`]).
///
/// # Safety
/// `host` must be valid for writes of `n` bytes.
#[inline]
unsafe fn store_le(host: *mut u8, n: usize, value: u64) {
    // SAFETY: the caller's; unaligned writes of exactly `n` bytes.
    unsafe {
        match n {
            1 => host.write(value as u8),
            2 => host.cast::<u16>().write_unaligned((value as u16).to_le()),
            4 => host.cast::<u32>().write_unaligned((value as u32).to_le()),
            8 => host.cast::<u64>().write_unaligned(value.to_le()),
            _ => std::ptr::copy_nonoverlapping(value.to_le_bytes().as_ptr(), host, n.min(8)),
        }
    }
}

impl Session<'_> {
    /// A load from served region `slot`: the bytes, and its events.
    fn served_read(&mut self, slot: usize, offset: u64, size: usize) -> u64 {
        let Some((address, host, n)) = host_access(self, slot, offset, size) else {
            return 0;
        };
        // SAFETY: `host_access` clipped the access to the served region.
        let value = unsafe { load_le(host, n) };
        self.record_access(false, address, n as u64);
        value
    }

    /// A store to served buffer region `slot`: the bytes, its events and
    /// the stray-write check.
    fn served_write(&mut self, slot: usize, offset: u64, size: usize, value: u64) {
        let Some((address, host, n)) = host_access(self, slot, offset, size) else {
            return;
        };
        // SAFETY: as in `served_read`.
        unsafe { store_le(host, n, value) };
        self.served_written(address, n as u64);
    }

    /// The events of `n` bytes stored at `address`, and the stray-write
    /// check.
    fn served_written(&mut self, address: u64, n: u64) {
        self.record_access(true, address, n);
        if let Some((first, len)) = self.stray_part(address, n) {
            // No registers here: the hook path's re-trace unwinds the callers.
            let pc = self.block_address;
            self.stray_write(pc, first, len, Vec::new());
        }
    }
}

/// A store to the port page: a protocol command at the port, else an
/// ordinary store (the page's other bytes are guest data).
fn on_port_page_write(uc: &mut HookUc<'_, '_>, slot: usize, offset: u64, size: usize, value: u64) {
    let s = uc.get_data_mut();
    let Some((address, host, n)) = host_access(s, slot, offset, size) else {
        return;
    };
    // SAFETY: as in `served_read`.
    unsafe { store_le(host, n, value) };
    let served = s.served.as_mut().expect("MMIO path");
    if address >= served.port && address < served.port + PORT_SIZE {
        // Without a clock there is no block hook, so no block address.
        let pc = match s.clock {
            super::Clock::Off => served.signal_pc,
            _ => served.command_pc(s.block_address),
        };
        port_store(uc, address, size, value as i64, pc);
        return;
    }
    s.served_written(address, n as u64);
}
