//! Guest RAM of a traced run: host memory owned here and mapped into the
//! emulator with `mem_map_ptr`, on both access paths.
//!
//! Owning the bytes lets the tracer change how pages are mapped without
//! moving data: the MMIO path serves a layer's buffer pages as MMIO and gives
//! them back, and the stray-write watch (`guard.rs`) write-protects pages
//! while a layer is open. Unicorn splits a region it allocated itself by
//! copying all of it; a region over host memory it splits by pointer. The
//! 1 MiB chunks bound what one split or unmap touches. Callbacks read and
//! write the bytes directly, which never re-enters the emulator.

use std::ffi::c_void;

use unicorn_engine::{Prot, Unicorn};

use super::{emulator_error, page_ranges, set_permissions, Session};
use crate::elf::ElfImage;
use crate::error::TraceError;

/// Size of the regions guest memory is mapped in (a multiple of pages).
const RAM_CHUNK: usize = 1 << 20;

/// Zeroed host memory backing a range of guest RAM.
pub(super) struct HostRam {
    guest: u64,
    ptr: *mut u8,
    len: usize,
}

impl HostRam {
    fn new(guest: u64, len: usize) -> HostRam {
        let ptr = Box::into_raw(vec![0u8; len].into_boxed_slice()) as *mut u8;
        HostRam { guest, ptr, len }
    }

    fn contains(&self, address: u64, len: u64) -> bool {
        address >= self.guest && address + len <= self.guest + self.len as u64
    }

    /// Host pointer of guest `address` (inside this range).
    pub(super) fn at(&self, address: u64) -> *mut u8 {
        debug_assert!(self.contains(address, 0));
        // SAFETY: in bounds of the allocation, checked by the callers.
        unsafe { self.ptr.add((address - self.guest) as usize) }
    }
}

impl Drop for HostRam {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` came from `Box<[u8]>::into_raw` in `new`, and
        // Unicorn, which also points here, is closed before its data drops.
        unsafe {
            drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                self.ptr, self.len,
            )))
        };
    }
}

/// All guest RAM: one host allocation per merged range of loaded pages.
pub(super) struct GuestRam {
    ranges: Vec<HostRam>,
}

impl GuestRam {
    /// Host memory for every page of `image`'s loadable segments.
    pub(super) fn for_image(image: &ElfImage) -> GuestRam {
        GuestRam {
            ranges: page_ranges(image)
                .into_iter()
                .map(|(start, end)| HostRam::new(start, (end - start) as usize))
                .collect(),
        }
    }

    /// The range holding all of `[address, address + len)`.
    pub(super) fn index(&self, address: u64, len: u64) -> Option<usize> {
        self.ranges.iter().position(|r| r.contains(address, len))
    }

    /// Range `i` (an index from [`GuestRam::index`]).
    pub(super) fn range(&self, i: usize) -> &HostRam {
        &self.ranges[i]
    }

    /// Copies guest RAM at `address` into `out`; false outside guest RAM.
    pub(super) fn read(&self, address: u64, out: &mut [u8]) -> bool {
        let Some(i) = self.index(address, out.len() as u64) else {
            return false;
        };
        // SAFETY: the range is inside the allocation (`index`); the emulator
        // is not running guest code while a callback runs.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ranges[i].at(address), out.as_mut_ptr(), out.len())
        };
        true
    }

    /// Copies `bytes` into guest RAM at `address`, bypassing page
    /// protections; false outside guest RAM.
    pub(super) fn write(&self, address: u64, bytes: &[u8]) -> bool {
        let Some(i) = self.index(address, bytes.len() as u64) else {
            return false;
        };
        // SAFETY: as in `read`.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ranges[i].at(address), bytes.len())
        };
        true
    }
}

/// Maps guest RAM onto its host memory (instead of `mem_map`).
pub(super) fn map(uc: &mut Unicorn<'_, Session<'_>>) -> Result<(), TraceError> {
    let ranges: Vec<(u64, usize, *mut u8)> = uc
        .get_data()
        .ram
        .ranges
        .iter()
        .map(|r| (r.guest, r.len, r.ptr))
        .collect();
    for (guest, len, ptr) in ranges {
        // Unmapping part of a region makes Unicorn unmap and flush all of it
        // first; chunks bound that cost per served buffer.
        for at in (0..len).step_by(RAM_CHUNK) {
            let n = RAM_CHUNK.min(len - at);
            let start = guest + at as u64;
            // SAFETY: `ptr` points to `len` bytes that live as long as the
            // session, which Unicorn owns and outlives its last use of them.
            let end = start + n as u64;
            unsafe { uc.mem_map_ptr(start, n as u64, Prot::ALL, ptr.add(at) as *mut c_void) }
                .and_then(|()| {
                    let image = uc.get_data().image;
                    set_permissions(uc, image, start, end, Prot::NONE)
                })
                .map_err(|e| {
                    emulator_error(
                        &format!("mapping guest memory {start:#x}..{:#x}", start + n as u64),
                        e,
                    )
                })?;
        }
    }
    Ok(())
}
