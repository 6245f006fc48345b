//! Exact retired-instruction time.
//!
//! Unicorn reports each translated block as it starts; summing block lengths
//! gives the instructions retired before the current block, and the position of
//! the (hook-synchronised) PC inside the block gives the rest. Thumb-2
//! instruction lengths follow from the first halfword, so the block's
//! instruction boundaries are computed once per block address and cached.
//! x86-64 lengths are not decodable this cheaply; there a per-instruction
//! hook counts instead (see `session`).

use std::collections::HashMap;

/// Hashes guest addresses with one multiply: block lookups are on the hot path
/// and need no DoS resistance.
#[derive(Default, Clone, Copy)]
pub struct AddressHasher(u64);

impl std::hash::Hasher for AddressHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type AddressMap<V> = HashMap<u64, V, std::hash::BuildHasherDefault<AddressHasher>>;

/// Slots of the direct-mapped cache in front of the block map.
const CACHE_SLOTS: usize = 1 << 12;

/// Counts retired instructions for Thumb code from block starts.
#[derive(Debug)]
pub struct ThumbClock {
    /// Block address -> index into `starts`.
    blocks: AddressMap<u32>,
    /// (block address, index) by low address bits: most block starts hit here
    /// and skip the hash map, which matters at millions of blocks per second.
    cache: Box<[(u64, u32)]>,
    /// Byte offset of every instruction from its block's start, per block.
    starts: Vec<Box<[u16]>>,
    /// Instructions retired before the current block.
    retired: u64,
    current_start: u64,
    current: Option<u32>,
}

/// True when a Thumb halfword starts a 32-bit instruction.
pub fn is_wide_thumb(first_halfword: u16) -> bool {
    matches!(first_halfword >> 11, 0b11101..=0b11111)
}

/// Offsets of the instructions in Thumb code `bytes`.
pub fn thumb_instruction_starts(bytes: &[u8]) -> Box<[u16]> {
    let mut starts = Vec::with_capacity(bytes.len() / 2);
    let mut at = 0usize;
    while at + 1 < bytes.len() {
        starts.push(at as u16);
        let hw = u16::from_le_bytes([bytes[at], bytes[at + 1]]);
        at += if is_wide_thumb(hw) { 4 } else { 2 };
    }
    starts.into_boxed_slice()
}

impl Default for ThumbClock {
    fn default() -> Self {
        ThumbClock {
            blocks: AddressMap::default(),
            cache: vec![(u64::MAX, 0); CACHE_SLOTS].into_boxed_slice(),
            starts: Vec::new(),
            retired: 0,
            current_start: 0,
            current: None,
        }
    }
}

impl ThumbClock {
    fn slot(address: u64) -> usize {
        (address as usize >> 1) & (CACHE_SLOTS - 1)
    }

    /// A block of `size` bytes at `address` starts; `code` reads its bytes
    /// the first time the block is seen.
    pub fn block_start(&mut self, address: u64, size: u32, code: impl FnOnce() -> Vec<u8>) {
        if let Some(prev) = self.current {
            self.retired += self.starts[prev as usize].len() as u64;
        }
        let slot = Self::slot(address);
        let index = match self.cache[slot] {
            (a, i) if a == address => i,
            _ => {
                let starts = &mut self.starts;
                let i = *self.blocks.entry(address).or_insert_with(|| {
                    let bytes = code();
                    let n = (size as usize).min(bytes.len());
                    starts.push(thumb_instruction_starts(&bytes[..n]));
                    (starts.len() - 1) as u32
                });
                self.cache[slot] = (address, i);
                i
            }
        };
        self.current_start = address;
        self.current = Some(index);
    }

    /// Index, since the start of the run, of the instruction at `pc` in the
    /// current block.
    pub fn now(&self, pc: u64) -> u64 {
        let within = match self.current {
            Some(i) if pc >= self.current_start => {
                let off = (pc - self.current_start) as u16;
                self.starts[i as usize].partition_point(|&s| s < off) as u64
            }
            _ => 0,
        };
        self.retired + within
    }

    /// True when the block at `address` has been decoded before.
    pub fn knows(&self, address: u64) -> bool {
        self.cache[Self::slot(address)].0 == address || self.blocks.contains_key(&address)
    }

    /// Instructions retired before the current block.
    pub fn retired_before_block(&self) -> u64 {
        self.retired
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thumb_lengths_follow_the_first_halfword() {
        // movs r0,#1 (16-bit); ldr.w r1,[r2] (32-bit: f8d2 1000); bx lr (16-bit)
        let code = [0x01, 0x20, 0xd2, 0xf8, 0x00, 0x10, 0x70, 0x47];
        assert_eq!(&*thumb_instruction_starts(&code), &[0, 2, 6]);
    }

    #[test]
    fn time_is_blocks_before_plus_position_in_block() {
        let mut c = ThumbClock::default();
        let code = vec![0x01, 0x20, 0xd2, 0xf8, 0x00, 0x10, 0x70, 0x47];
        c.block_start(0x100, 8, || code.clone());
        assert_eq!(c.now(0x100), 0);
        assert_eq!(c.now(0x106), 2);
        c.block_start(0x200, 8, || code.clone());
        assert_eq!(c.now(0x202), 3 + 1);
        // A cached block is not decoded again.
        c.block_start(0x100, 8, || panic!("decoded twice"));
        assert_eq!(c.now(0x100), 6);
    }
}
