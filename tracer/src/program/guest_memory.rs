//! What may be done to an unmodified program's memory outside its heap
//! blocks: the host's accesses for a semihosting call, checked by memcheck
//! like the program's own (a buffer read out of freed or unwritten heap, one
//! filled into freed heap), and stores into the segments its ELF loads
//! without write permission — by the program (a finding) or by the host
//! (refused: the call fails as a host's `read` into such memory would).

use std::cell::RefCell;

use unicorn_engine::{HookType, MemType};

use super::{stack_here, Uc};
use crate::arch::Machine;
use crate::elf::ElfImage;
use crate::error::TraceError;
use crate::machine::emulator_error;
use crate::memcheck::FindingKind;
use crate::semihosting::GuestMemory;

/// The `[start, end)` ranges of the segments loaded without `PF_W`.
pub(super) fn read_only_ranges(image: &ElfImage) -> Vec<(u64, u64)> {
    image
        .segments
        .iter()
        .filter(|s| !s.writable)
        .map(|s| (s.address, s.address + s.size))
        .collect()
}

/// Hooks every store into a read-only segment: each is a finding.
pub(super) fn watch_read_only(uc: &mut Uc<'_, '_>) -> Result<(), TraceError> {
    let ranges = read_only_ranges(uc.get_data().image);
    for (start, end) in ranges {
        uc.add_mem_hook(HookType::MEM_WRITE, start, end - 1, on_read_only_store)
            .map_err(|e| emulator_error("installing hooks", e))?;
    }
    Ok(())
}

fn on_read_only_store(
    uc: &mut Uc<'_, '_>,
    _kind: MemType,
    address: u64,
    size: usize,
    _value: i64,
) -> bool {
    let arch = uc.get_data().image.arch;
    let pc = uc.pc_read().unwrap_or(0);
    let image = uc.get_data().image;
    if let Some(mut m) = uc.get_data_mut().memcheck.take() {
        let message = || {
            format!(
                "write of {size} B at {address:#x}, {}",
                read_only_place(image, address)
            )
        };
        m.note(FindingKind::ReadOnlyWrite, pc, message, || {
            stack_here(uc, pc)
        });
        uc.get_data_mut().memcheck = Some(m);
    }
    arch.clear_stale_it_state(uc);
    true
}

/// Where `address`, in a read-only segment, is, in words.
fn read_only_place(image: &ElfImage, address: u64) -> String {
    let what = if let Some(f) = image.function_at(address) {
        format!("the code of `{f}`")
    } else if let Some((o, off)) = image.object_at(address) {
        format!("byte {off} of `{o}`")
    } else {
        "the program's code or constants".to_owned()
    };
    format!("{what}: a segment its ELF loads read-only (no PF_W)")
}

/// The first byte of `[address, address+len)` in a read-only segment.
fn first_read_only(ranges: &[(u64, u64)], address: u64, len: u64) -> Option<u64> {
    let end = address.saturating_add(len);
    ranges
        .iter()
        .filter(|&&(s, e)| len > 0 && address < e && s < end)
        .map(|&(s, _)| s.max(address))
        .min()
}

/// Guest memory for one semihosting call: it notes what the host reads and
/// writes, and refuses writes into read-only segments.
pub(super) struct HostAccess<'u, 'a, 'i> {
    pub uc: &'u mut Uc<'a, 'i>,
    read_only: Vec<(u64, u64)>,
    /// Ranges read, contiguous ones merged (`SYS_WRITE0` reads a byte at
    /// a time).
    reads: RefCell<Vec<(u64, u64)>>,
    writes: Vec<(u64, u64)>,
    /// Writes refused: address, bytes, the first read-only byte.
    refused: Vec<(u64, u64, u64)>,
}

impl<'u, 'a, 'i> HostAccess<'u, 'a, 'i> {
    pub(super) fn new(uc: &'u mut Uc<'a, 'i>) -> Self {
        let read_only = read_only_ranges(uc.get_data().image);
        HostAccess {
            uc,
            read_only,
            reads: RefCell::new(Vec::new()),
            writes: Vec::new(),
            refused: Vec::new(),
        }
    }

    /// Hands what the call did to memcheck, as findings of `call` at the
    /// instruction `pc`; written heap bytes become defined.
    pub(super) fn check(self, call: &str, pc: u64) {
        let HostAccess {
            uc,
            reads,
            writes,
            refused,
            ..
        } = self;
        let image = uc.get_data().image;
        let Some(mut m) = uc.get_data_mut().memcheck.take() else {
            return;
        };
        for range in reads.into_inner() {
            m.host_access(call, false, range, pc, || stack_here(uc, pc));
        }
        for &range in &writes {
            m.host_access(call, true, range, pc, || stack_here(uc, pc));
            m.host_wrote(range.0, range.1);
        }
        for (address, size, at) in refused {
            let message = || {
                format!(
                    "{call} would write {size} B at {address:#x} (the call fails): {at:#x} is {}",
                    read_only_place(image, at)
                )
            };
            m.note(FindingKind::ReadOnlyWrite, pc, message, || {
                stack_here(uc, pc)
            });
        }
        uc.get_data_mut().memcheck = Some(m);
    }
}

impl GuestMemory for HostAccess<'_, '_, '_> {
    fn read(&self, address: u64, out: &mut [u8]) -> bool {
        let n = out.len() as u64;
        let mut reads = self.reads.borrow_mut();
        match reads.last_mut() {
            Some(last) if last.0 + last.1 == address => last.1 += n,
            _ => reads.push((address, n)),
        }
        self.uc.mem_read(address, out).is_ok()
    }

    fn peek(&self, address: u64, out: &mut [u8]) -> bool {
        self.uc.mem_read(address, out).is_ok()
    }

    fn write(&mut self, address: u64, bytes: &[u8]) -> bool {
        let n = bytes.len() as u64;
        if let Some(at) = first_read_only(&self.read_only, address, n) {
            self.refused.push((address, n, at));
            return false;
        }
        self.writes.push((address, n));
        self.uc.mem_write(address, bytes).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_meets_a_read_only_segment_when_any_byte_lies_in_it() {
        let ro = [(0x8000, 0x9000), (0xa000, 0xa100)];
        assert_eq!(first_read_only(&ro, 0x8ffc, 8), Some(0x8ffc));
        assert_eq!(first_read_only(&ro, 0x7ff0, 0x20), Some(0x8000));
        assert_eq!(first_read_only(&ro, 0x9000, 0x1001), Some(0xa000));
        assert_eq!(first_read_only(&ro, 0x9000, 4), None);
        assert_eq!(first_read_only(&ro, 0x8800, 0), None);
        assert_eq!(first_read_only(&ro, 0x7ff0, 0x10), None);
        assert_eq!(first_read_only(&ro, u64::MAX - 2, 8), None);
    }
}
