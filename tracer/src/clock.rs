//! Exact retired-instruction time from block starts.
//!
//! Unicorn reports each translated block as it starts; summing block lengths
//! gives the instructions retired before the current block, and the position of
//! the (hook-synchronised) PC inside the block gives the rest. A block's
//! instruction boundaries are computed once per block address and cached:
//! Thumb-2 and RISC-V (compressed or not) lengths follow from the first
//! halfword ([`halfword_instruction_starts`]),
//! x86-64 lengths come from a real decoder ([`x86_64_block_layout`], iced-x86).
//! [`BlockClock`] is the same for all; only the boundary function differs.
//!
//! # What one instruction is
//!
//! An instruction counts once when it retires, as the architecture defines it,
//! which is not always what Unicorn's per-instruction (code) hook reports:
//!
//! - **Thumb IT blocks.** The code hook is emitted after the IT condition
//!   check, so it skips instructions whose condition failed; they retire as
//!   no-ops on a Cortex-M4 and the block clock counts them.
//! - **x86-64 `rep` string instructions** (`rep movs`/`stos`/`lods`/`ins`/
//!   `outs`, `repe`/`repne` `cmps`/`scas`). QEMU translates one iteration and
//!   then jumps back to the instruction itself, so each further iteration is a
//!   new one-instruction block at the same address and the code hook fires
//!   once per *pass*: a count that runs out after n >= 1 iterations makes n + 1
//!   passes (the last one only finds RCX = 0), a `repe`/`repne` that stops on
//!   its condition after n iterations makes n, and RCX = 0 on entry makes one.
//!   Architecturally the whole repetition is one instruction, so the block
//!   clock counts it once: a block that starts at the `rep` instruction that
//!   ended the previous block re-enters it and retires nothing new. Every
//!   access of the repetition therefore has the same time (its PC is the `rep`
//!   instruction's), where the code-hook count advances by one per pass.

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

/// Where the instructions of one block start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockLayout {
    /// Byte offset of every instruction from the block's start.
    pub starts: Box<[u16]>,
    /// Offset of the block's last instruction when it is a repeated (`rep`)
    /// x86 string instruction, which Unicorn re-enters as a new block for
    /// each further pass.
    pub repeats_at: Option<u16>,
}

/// Computes the layout of the block at `address` from its code bytes.
pub type LayoutFn = fn(address: u64, bytes: &[u8]) -> BlockLayout;

/// Counts retired instructions from block starts (see the module doc).
#[derive(Debug)]
pub struct BlockClock {
    layout: LayoutFn,
    /// Block address -> index into `layouts`.
    blocks: AddressMap<u32>,
    /// Blocks by low address bits: most block starts hit here and skip the
    /// hash map, which matters at tens of millions of blocks per second.
    cache: Box<[Cached; CACHE_SLOTS]>,
    layouts: Vec<BlockLayout>,
    /// Instructions retired before the current block.
    retired: u64,
    current_start: u64,
    current: Option<u32>,
    /// Instructions of the current block, when it ends in no `rep`
    /// instruction (`u32::MAX` otherwise: the next block start decides).
    current_len: u32,
}

/// A slot of [`BlockClock`]'s direct-mapped cache.
#[derive(Clone, Copy, Debug)]
struct Cached {
    address: u64,
    index: u32,
    /// The block's instruction count, or `u32::MAX` for a block ending in a
    /// `rep` instruction.
    len: u32,
}

impl Cached {
    const EMPTY: Cached = Cached {
        address: u64::MAX,
        index: 0,
        len: 0,
    };
}

/// True when a Thumb halfword starts a 32-bit instruction.
pub fn is_wide_thumb(first_halfword: u16) -> bool {
    matches!(first_halfword >> 11, 0b11101..=0b11111)
}

/// True when a RISC-V halfword starts a 32-bit instruction: its two low bits
/// are `11`; every other value starts a 16-bit compressed one (the C
/// extension). Longer encodings are reserved, and RV32IMAC has none.
pub fn is_wide_riscv(first_halfword: u16) -> bool {
    first_halfword & 0b11 == 0b11
}

/// Offsets of the instructions in `bytes` of an instruction set whose
/// instructions are 2 or 4 bytes long, as `is_wide` tells from the first
/// halfword (Thumb-2, RISC-V with the C extension).
pub fn halfword_instruction_starts(bytes: &[u8], is_wide: fn(u16) -> bool) -> Box<[u16]> {
    let mut starts = Vec::with_capacity(bytes.len() / 2);
    let mut at = 0usize;
    while at + 1 < bytes.len() {
        starts.push(at as u16);
        let hw = u16::from_le_bytes([bytes[at], bytes[at + 1]]);
        at += if is_wide(hw) { 4 } else { 2 };
    }
    starts.into_boxed_slice()
}

/// Layout of a Thumb block (Thumb has no repeated instructions).
pub fn thumb_block_layout(_address: u64, bytes: &[u8]) -> BlockLayout {
    BlockLayout {
        starts: halfword_instruction_starts(bytes, is_wide_thumb),
        repeats_at: None,
    }
}

/// Layout of a RISC-V block (no repeated instructions either).
pub fn riscv_block_layout(_address: u64, bytes: &[u8]) -> BlockLayout {
    BlockLayout {
        starts: halfword_instruction_starts(bytes, is_wide_riscv),
        repeats_at: None,
    }
}

/// Layout of x86-64 code `bytes` loaded at `address`, decoded in 64-bit mode.
///
/// Unicorn's x86 block `size` covers whole instructions: on every block of
/// the test guests the decoder ends exactly at `size`. Should the bytes end
/// inside an instruction, or not decode, that instruction still starts in the
/// block and counts; decoding stops there.
pub fn x86_64_block_layout(address: u64, bytes: &[u8]) -> BlockLayout {
    use iced_x86::{Decoder, DecoderOptions, Instruction};
    let mut decoder = Decoder::with_ip(64, bytes, address, DecoderOptions::NONE);
    let mut starts = Vec::with_capacity(bytes.len() / 3 + 1);
    let mut instruction = Instruction::default();
    let mut last_repeats = false;
    while decoder.can_decode() {
        let at = decoder.position();
        starts.push(at as u16);
        decoder.decode_out(&mut instruction);
        if instruction.is_invalid() {
            last_repeats = false;
            break;
        }
        last_repeats = is_repeated_string(&instruction);
    }
    BlockLayout {
        repeats_at: last_repeats.then(|| *starts.last().expect("decoded one")),
        starts: starts.into_boxed_slice(),
    }
}

/// True for a string instruction with a REP/REPE/REPNE prefix, which the CPU
/// runs as a loop over RCX. (By opcode: `movsd`/`cmpsd` are also SSE2
/// instructions, where F2/F3 is part of the opcode.)
fn is_repeated_string(instruction: &iced_x86::Instruction) -> bool {
    use iced_x86::Code::*;
    (instruction.has_rep_prefix() || instruction.has_repne_prefix())
        && matches!(
            instruction.code(),
            Movsb_m8_m8
                | Movsw_m16_m16
                | Movsd_m32_m32
                | Movsq_m64_m64
                | Cmpsb_m8_m8
                | Cmpsw_m16_m16
                | Cmpsd_m32_m32
                | Cmpsq_m64_m64
                | Stosb_m8_AL
                | Stosw_m16_AX
                | Stosd_m32_EAX
                | Stosq_m64_RAX
                | Lodsb_AL_m8
                | Lodsw_AX_m16
                | Lodsd_EAX_m32
                | Lodsq_RAX_m64
                | Scasb_AL_m8
                | Scasw_AX_m16
                | Scasd_EAX_m32
                | Scasq_RAX_m64
                | Insb_m8_DX
                | Insw_m16_DX
                | Insd_m32_DX
                | Outsb_DX_m8
                | Outsw_DX_m16
                | Outsd_DX_m32
        )
}

impl BlockClock {
    /// A clock whose blocks are decoded by `layout`.
    pub fn new(layout: LayoutFn) -> Self {
        BlockClock {
            layout,
            blocks: AddressMap::default(),
            cache: Box::new([Cached::EMPTY; CACHE_SLOTS]),
            layouts: Vec::new(),
            retired: 0,
            current_start: 0,
            current: None,
            current_len: 0,
        }
    }

    /// The clock for Thumb-2 code.
    pub fn thumb() -> Self {
        Self::new(thumb_block_layout)
    }

    /// The clock for RISC-V code (RV32 with the C extension).
    pub fn riscv() -> Self {
        Self::new(riscv_block_layout)
    }

    /// The clock for x86-64 code.
    pub fn x86_64() -> Self {
        Self::new(x86_64_block_layout)
    }

    fn slot(address: u64) -> usize {
        (address as usize >> 1) & (CACHE_SLOTS - 1)
    }

    /// The block at `address` starts, if it is in the cache and the block
    /// before it ends in no `rep` instruction: the hot path of every block
    /// start, with no decoding and no hashing. False (and nothing changed)
    /// otherwise; then [`BlockClock::block_start`] must be called.
    #[inline]
    pub fn enter_cached(&mut self, address: u64) -> bool {
        let hit = self.cache[Self::slot(address)];
        if hit.address != address || self.current_len == u32::MAX {
            return false;
        }
        self.retired += self.current_len as u64;
        self.current_start = address;
        self.current = Some(hit.index);
        self.current_len = hit.len;
        true
    }

    /// A block of `size` bytes at `address` starts; `code` reads its bytes
    /// the first time the block is seen.
    pub fn block_start(&mut self, address: u64, size: u32, code: impl FnOnce() -> Vec<u8>) {
        if let Some(prev) = self.current {
            let prev = &self.layouts[prev as usize];
            let mut n = prev.starts.len() as u64;
            // Another iteration of the `rep` instruction that ended the
            // previous block: it has not retired yet.
            if let Some(at) = prev.repeats_at {
                if address == self.current_start + at as u64 {
                    n -= 1;
                }
            }
            self.retired += n;
        }
        let slot = Self::slot(address);
        let hit = self.cache[slot];
        let index = if hit.address == address {
            hit.index
        } else {
            let (layouts, layout) = (&mut self.layouts, self.layout);
            let i = *self.blocks.entry(address).or_insert_with(|| {
                let bytes = code();
                let n = (size as usize).min(bytes.len());
                layouts.push(layout(address, &bytes[..n]));
                (layouts.len() - 1) as u32
            });
            let l = &self.layouts[i as usize];
            self.cache[slot] = Cached {
                address,
                index: i,
                len: match l.repeats_at {
                    Some(_) => u32::MAX,
                    None => l.starts.len() as u32,
                },
            };
            i
        };
        self.current_start = address;
        self.current = Some(index);
        self.current_len = self.cache[slot].len;
    }

    /// Index, since the start of the run, of the instruction at `pc` in the
    /// current block.
    pub fn now(&self, pc: u64) -> u64 {
        let within = match self.current {
            // The MMIO path's events carry the block start.
            _ if pc == self.current_start => 0,
            Some(i) if pc > self.current_start => {
                let off = (pc - self.current_start) as u16;
                self.layouts[i as usize]
                    .starts
                    .partition_point(|&s| s < off) as u64
            }
            _ => 0,
        };
        self.retired + within
    }

    /// True when the block at `address` has been decoded before.
    pub fn knows(&self, address: u64) -> bool {
        self.cache[Self::slot(address)].address == address || self.blocks.contains_key(&address)
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
        assert_eq!(
            &*halfword_instruction_starts(&code, is_wide_thumb),
            &[0, 2, 6]
        );
    }

    #[test]
    fn riscv_lengths_follow_the_low_bits() {
        // Encodings from the RISC-V unprivileged spec: c.li a0,1 (16-bit,
        // 0x4505); lw a1,0(a2) (32-bit, 0x00062583); c.jr ra (0x8082).
        let code = [0x05, 0x45, 0x83, 0x25, 0x06, 0x00, 0x82, 0x80];
        assert_eq!(
            &*halfword_instruction_starts(&code, is_wide_riscv),
            &[0, 2, 6]
        );
        assert!(is_wide_riscv(0x2583) && !is_wide_riscv(0x4505));
    }

    #[test]
    fn time_is_blocks_before_plus_position_in_block() {
        let mut c = BlockClock::thumb();
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

    /// Bytes from the Intel SDM opcode tables.
    const MOV_RAX_RCX: [u8; 3] = [0x48, 0x89, 0xc8]; // REX.W 89 /r
    const MOVDQA_XMM0_RSP: [u8; 5] = [0x66, 0x0f, 0x6f, 0x04, 0x24]; // 66 0F 6F /r, SIB
    const NOP5: [u8; 5] = [0x0f, 0x1f, 0x44, 0x00, 0x00]; // nop dword [rax+rax*1+0]
    const MOVABS_RAX: [u8; 10] = [0x48, 0xb8, 1, 2, 3, 4, 5, 6, 7, 8]; // REX.W B8+r io
    const CALL_REL32: [u8; 5] = [0xe8, 0x10, 0x00, 0x00, 0x00];
    const VZEROUPPER: [u8; 3] = [0xc5, 0xf8, 0x77]; // VEX.128.0F.WIG 77
    const REP_MOVSB: [u8; 2] = [0xf3, 0xa4];
    const REP_STOSQ: [u8; 3] = [0xf3, 0x48, 0xab];
    const REPNE_SCASB: [u8; 2] = [0xf2, 0xae];
    const MOVSD_XMM0_XMM1: [u8; 4] = [0xf2, 0x0f, 0x10, 0xc1]; // SSE2: F2 is the opcode
    const REP_RET: [u8; 2] = [0xf3, 0xc3];
    const MOVSB: [u8; 1] = [0xa4];
    const NOP: [u8; 1] = [0x90];

    fn concat(parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }

    #[test]
    fn x86_64_lengths_come_from_the_decoder() {
        let code = concat(&[
            &MOV_RAX_RCX,
            &MOVDQA_XMM0_RSP,
            &NOP5,
            &MOVABS_RAX,
            &CALL_REL32,
            &VZEROUPPER,
            &MOVSD_XMM0_XMM1,
            &REP_RET,
        ]);
        let layout = x86_64_block_layout(0x40_1000, &code);
        assert_eq!(&*layout.starts, &[0, 3, 8, 13, 23, 28, 31, 35]);
        // F2/F3 before a non-string opcode is no repetition.
        assert_eq!(layout.repeats_at, None);
    }

    #[test]
    fn x86_64_repeated_string_instructions_are_marked() {
        for (tail, repeats) in [
            (&REP_MOVSB[..], true),
            (&REP_STOSQ[..], true),
            (&REPNE_SCASB[..], true),
            (&MOVSB[..], false),
            (&MOVSD_XMM0_XMM1[..], false),
        ] {
            let code = concat(&[&MOV_RAX_RCX, tail]);
            let layout = x86_64_block_layout(0x1000, &code);
            assert_eq!(&*layout.starts, &[0, 3], "{tail:02x?}");
            assert_eq!(layout.repeats_at, repeats.then_some(3), "{tail:02x?}");
        }
    }

    #[test]
    fn x86_64_cut_or_invalid_instruction_still_starts() {
        let code = concat(&[&MOV_RAX_RCX, &MOVABS_RAX[..6]]);
        assert_eq!(&*x86_64_block_layout(0, &code).starts, &[0, 3]);
        // 0x06 (push es) is invalid in 64-bit mode: decoding stops there.
        let code = concat(&[&NOP, &[0x06], &NOP]);
        assert_eq!(&*x86_64_block_layout(0, &code).starts, &[0, 1]);
    }

    /// The block sequence Unicorn reports for `mov rax,rcx; rep movsb;
    /// mov rax,rcx; nop` with RCX = 3 (tests/clock.rs checks it): the `rep`
    /// ends the first block and is re-entered as its own block per iteration.
    #[test]
    fn x86_64_rep_iterations_are_one_instruction() {
        let first = concat(&[&MOV_RAX_RCX, &REP_MOVSB]);
        let rep = REP_MOVSB.to_vec();
        let after = concat(&[&MOV_RAX_RCX, &NOP]);
        let mut c = BlockClock::x86_64();
        c.block_start(0x1000, 5, || first.clone());
        assert_eq!(c.now(0x1003), 1);
        for _ in 0..3 {
            c.block_start(0x1003, 2, || rep.clone());
            assert_eq!(c.now(0x1003), 1);
        }
        c.block_start(0x1005, 4, || after.clone());
        assert_eq!(c.now(0x1005), 2);
        assert_eq!(c.now(0x1008), 3);
        // Entering the `rep` block from elsewhere is a new instruction.
        c.block_start(0x1003, 2, || panic!("decoded twice"));
        assert_eq!(c.now(0x1003), 4);
        c.block_start(0x1003, 2, || panic!("decoded twice"));
        assert_eq!(c.now(0x1003), 4);
        c.block_start(0x1005, 4, || panic!("decoded twice"));
        assert_eq!(c.now(0x1008), 6);
    }
}
