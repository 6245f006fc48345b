//! Loadable segments are checked against the guest address space before
//! anything is mapped or allocated. Each case is a copy of
//! a real harness ELF with one program-header field patched in place.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::guest;
use memtrace_tracer::elf::{check_segments, MAX_GUEST_MEMORY};
use memtrace_tracer::{Arch, ElfImage, TraceError};

/// One PT_LOAD program header: where its fields are in the file.
#[derive(Debug, Clone, Copy)]
struct LoadHeader {
    vaddr: u64,
    memsz: u64,
    /// File offsets of `p_vaddr` and `p_memsz`.
    vaddr_at: usize,
    memsz_at: usize,
    /// Width of those fields (4 for ELF32, 8 for ELF64).
    width: usize,
}

fn read_le(bytes: &[u8], at: usize, width: usize) -> u64 {
    let mut v = 0u64;
    for i in (0..width).rev() {
        v = (v << 8) | bytes[at + i] as u64;
    }
    v
}

fn write_le(bytes: &mut [u8], at: usize, width: usize, value: u64) {
    for i in 0..width {
        bytes[at + i] = (value >> (8 * i)) as u8;
    }
}

/// The PT_LOAD headers of a little-endian ELF32 or ELF64, read by hand (an
/// independent reader: not `object`).
fn load_headers(bytes: &[u8]) -> Vec<LoadHeader> {
    assert_eq!(&bytes[..4], b"\x7fELF");
    assert_eq!(bytes[5], 1, "little-endian");
    let is64 = bytes[4] == 2;
    let (phoff, phentsize, phnum) = if is64 {
        (
            read_le(bytes, 0x20, 8) as usize,
            read_le(bytes, 0x36, 2) as usize,
            read_le(bytes, 0x38, 2) as usize,
        )
    } else {
        (
            read_le(bytes, 0x1c, 4) as usize,
            read_le(bytes, 0x2a, 2) as usize,
            read_le(bytes, 0x2c, 2) as usize,
        )
    };
    let (vaddr_off, memsz_off, width) = if is64 { (16, 40, 8) } else { (8, 20, 4) };
    (0..phnum)
        .map(|i| phoff + i * phentsize)
        .filter(|&h| read_le(bytes, h, 4) == 1) // PT_LOAD
        .map(|h| LoadHeader {
            vaddr: read_le(bytes, h + vaddr_off, width),
            memsz: read_le(bytes, h + memsz_off, width),
            vaddr_at: h + vaddr_off,
            memsz_at: h + memsz_off,
            width,
        })
        .collect()
}

/// The suite of `target` with the `index`-th PT_LOAD's memsz (and, if
/// given, vaddr) replaced.
fn patched(target: &str, index: usize, memsz: u64, vaddr: Option<u64>) -> (Vec<u8>, LoadHeader) {
    let mut bytes = std::fs::read(guest(target, "suite.elf")).unwrap();
    let headers = load_headers(&bytes);
    let h = headers[index];
    write_le(&mut bytes, h.memsz_at, h.width, memsz);
    if let Some(v) = vaddr {
        write_le(&mut bytes, h.vaddr_at, h.width, v);
    }
    (bytes, h)
}

fn malformed_reason(target: &str, bytes: Vec<u8>) -> String {
    let path = Path::new(target).join("patched.elf");
    let started = Instant::now();
    let err = ElfImage::parse(&path, bytes.into()).expect_err("a bad segment must be refused");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "refusing took {:?}",
        started.elapsed()
    );
    match err {
        TraceError::MalformedElf { reason, .. } => reason,
        other => panic!("expected a malformed-ELF error, got {other}"),
    }
}

#[test]
fn the_hand_reader_agrees_with_the_loader_and_an_identity_patch_loads() {
    for target in ["cortex-m4", "x86_64"] {
        let bytes = std::fs::read(guest(target, "suite.elf")).unwrap();
        let headers = load_headers(&bytes);
        let image = ElfImage::parse(Path::new("x.elf"), bytes.clone().into()).unwrap();
        let hand: Vec<(u64, u64)> = headers
            .iter()
            .filter(|h| h.memsz > 0)
            .map(|h| (h.vaddr, h.memsz))
            .collect();
        let loaded: Vec<(u64, u64)> = image.segments.iter().map(|s| (s.address, s.size)).collect();
        assert_eq!(hand, loaded, "{target}");
        // Writing back the same value changes nothing: the patcher is exact.
        let last = headers.len() - 1;
        let (same, _) = patched(target, last, headers[last].memsz, None);
        assert_eq!(same, bytes, "{target}");
    }
}

#[test]
fn x86_64_segment_of_two_to_the_fifty_one_bytes_is_refused_before_allocation() {
    // The reported case: `memory allocation of 2251799813713920 bytes failed`.
    let (bytes, h) = patched("x86_64", 2, 2_251_799_813_713_920 - 0x60_0000, None);
    let reason = malformed_reason("x86_64", bytes);
    assert!(reason.contains("address space"), "{reason}");
    assert!(reason.contains(&format!("{:#x}", h.vaddr)), "{reason}");
}

#[test]
fn x86_64_segment_whose_end_wraps_around_is_refused() {
    let (bytes, _) = patched("x86_64", 2, u64::MAX - 0x1000, None);
    let reason = malformed_reason("x86_64", bytes);
    assert!(reason.contains("address space"), "{reason}");
}

#[test]
fn cortex_m4_segment_of_0xfffffff0_bytes_is_refused() {
    // The reported case: the code segment grown over everything after it.
    let (bytes, _) = patched("cortex-m4", 0, 0xffff_fff0, None);
    let reason = malformed_reason("cortex-m4", bytes);
    assert!(reason.contains("0xfffffff0"), "{reason}");
    assert!(reason.contains("cortex-m4"), "{reason}");
}

#[test]
fn overlapping_segments_inside_the_address_space_are_refused() {
    for target in ["cortex-m4", "x86_64"] {
        let bytes = std::fs::read(guest(target, "suite.elf")).unwrap();
        let headers = load_headers(&bytes);
        // Grow segment 0 to end one byte inside segment 1.
        let memsz = headers[1].vaddr - headers[0].vaddr + 1;
        let (bytes, _) = patched(target, 0, memsz, None);
        let reason = malformed_reason(target, bytes);
        assert!(reason.contains("overlap"), "{target}: {reason}");
        // One byte less touches without overlapping: it loads.
        let (ok, _) = patched(target, 0, memsz - 1, None);
        ElfImage::parse(Path::new("x.elf"), ok.into())
            .unwrap_or_else(|e| panic!("{target}: adjacent segments must load: {e}"));
    }
}

#[test]
fn more_guest_memory_than_the_limit_is_refused() {
    // Inside the x86-64 address space, no overlap, but 2 GiB of RAM in the
    // last segment (the storage region: nothing lies above it).
    let bytes = std::fs::read(guest("x86_64", "suite.elf")).unwrap();
    let headers = load_headers(&bytes);
    let last = headers.len() - 1;
    let (grown, _) = patched("x86_64", last, 2 << 30, None);
    let reason = malformed_reason("x86_64", grown);
    assert!(reason.contains("limit"), "{reason}");
    // Just under the limit (with the other segments' pages) still loads.
    let others: u64 = headers[..last]
        .iter()
        .map(|h| h.memsz.div_ceil(0x1000) * 0x1000)
        .sum();
    let (ok, _) = patched("x86_64", last, MAX_GUEST_MEMORY - others, None);
    ElfImage::parse(Path::new("x.elf"), ok.into()).unwrap();
}

#[test]
fn segment_checks_count_shared_pages_once() {
    // Two segments in one page are 4 KiB of guest memory, not 8.
    let limit_pages = MAX_GUEST_MEMORY / 0x1000;
    let segs = [
        (0x1000, 0x800),
        (0x1800, 0x800),
        (0x2000, (limit_pages - 1) * 0x1000),
    ];
    assert_eq!(check_segments(Arch::CortexM4, &segs), Ok(()));
    let over = [
        (0x1000, 0x800),
        (0x1800, 0x801),
        (0x3000, (limit_pages - 1) * 0x1000),
    ];
    assert!(check_segments(Arch::CortexM4, &over).is_err());
    // A segment may end exactly at the top of the 32-bit space, not beyond.
    assert_eq!(
        check_segments(Arch::CortexM4, &[(0xffff_f000, 0x1000)]),
        Ok(())
    );
    assert!(check_segments(Arch::CortexM4, &[(0xffff_f000, 0x1001)]).is_err());
}
