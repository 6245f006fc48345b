//! The memory an unmodified program gets: its segments, a heap above them
//! (or where its linker script puts one), a stack above a gap of unmapped
//! guard memory (or where its linker script puts one), and the stack
//! pointer it starts with.

use crate::elf::ElfImage;
use crate::machine::PAGE;

/// Unmapped bytes between the heap's end and the stack's lowest address:
/// a stack that overflows faults there instead of writing into the heap.
pub const GUARD_GAP: u64 = 64 * 1024;

/// Where a program's memory is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Layout {
    /// Heap `[start, end)`.
    pub heap: (u64, u64),
    /// Stack `[lowest, top)`.
    pub stack: (u64, u64),
    /// The stack pointer at the first instruction.
    pub initial_sp: u64,
    /// Whether the initial SP came from the image's vector table.
    pub from_vector_table: bool,
}

/// Names linker scripts give the heap's and the stack's bounds (CMSIS
/// device scripts, STM32 scripts, the memtrace harness).
const HEAP_START: [&str; 4] = ["__HeapBase", "end", "_end", "__end__"];
const HEAP_END: [&str; 1] = ["__HeapLimit"];
const STACK_TOP: [&str; 3] = ["__StackTop", "_estack", "__stack_top"];
const STACK_BOTTOM: [&str; 3] = ["__StackLimit", "__stack_bottom", "_sstack"];
/// Vector tables by name and by section.
const VECTOR_SYMBOLS: [&str; 5] = [
    "__isr_vector",
    "__Vectors",
    "g_pfnVectors",
    "__vector_table",
    "memtrace_vectors",
];

fn first_symbol(image: &ElfImage, names: &[&str]) -> Option<u64> {
    names
        .iter()
        .find_map(|n| image.symbol(n))
        .map(|s| s.address)
}

/// Most heap `check` gives a program (`--heap`, or its linker script's):
/// memcheck keeps a shadow byte per heap byte.
pub const MAX_HEAP: u64 = 1 << 30;
/// Most stack (`--stack`, or its linker script's).
pub const MAX_STACK: u64 = 1 << 30;
/// Least stack: newlib's start-up code alone needs some hundred bytes.
pub const MIN_STACK: u64 = 1 << 10;
/// The end of the 32-bit address space.
const ADDRESS_LIMIT: u64 = 1 << 32;

impl Layout {
    /// The layout of `image` with `heap_bytes` of heap and `stack_bytes` of
    /// stack where its linker script does not place them; `Err` says why
    /// they do not fit (a size out of range, or past the 32-bit address
    /// space), before anything is allocated for them.
    pub fn of(image: &ElfImage, heap_bytes: u64, stack_bytes: u64) -> Result<Layout, String> {
        if heap_bytes > MAX_HEAP {
            return Err(format!(
                "a heap of {heap_bytes} B is more than the {MAX_HEAP} B `check` gives (--heap takes 0 to {MAX_HEAP})"
            ));
        }
        if !(MIN_STACK..=MAX_STACK).contains(&stack_bytes) {
            return Err(format!(
                "a stack of {stack_bytes} B is out of range (--stack takes {MIN_STACK} to {MAX_STACK})"
            ));
        }
        let image_end = image
            .segments
            .iter()
            .map(|s| s.address.saturating_add(s.size))
            .max()
            .unwrap_or(0);
        let heap_start = first_symbol(image, &HEAP_START).unwrap_or(image_end);
        let heap_start = heap_start.div_ceil(8).saturating_mul(8);
        let heap_end = first_symbol(image, &HEAP_END)
            .filter(|&e| e > heap_start)
            .unwrap_or(heap_start.saturating_add(heap_bytes));
        let named_top = first_symbol(image, &STACK_TOP);
        let named_bottom = first_symbol(image, &STACK_BOTTOM);
        let stack = match (named_bottom, named_top) {
            (Some(b), Some(t)) if b < t => (b, t),
            (None, Some(t)) if t > stack_bytes => (t - stack_bytes, t),
            _ => {
                let bottom = heap_end
                    .max(image_end)
                    .saturating_add(GUARD_GAP)
                    .div_ceil(PAGE)
                    .saturating_mul(PAGE);
                (bottom, bottom.saturating_add(stack_bytes))
            }
        };
        let described = || {
            format!(
                "its heap ({heap_start:#x}..{heap_end:#x}) and stack ({:#x}..{:#x})",
                stack.0, stack.1
            )
        };
        if stack.1 > ADDRESS_LIMIT || heap_end > ADDRESS_LIMIT {
            return Err(format!(
                "{} do not fit the 32-bit address space; give a smaller --heap or --stack",
                described()
            ));
        }
        if heap_end - heap_start > MAX_HEAP || stack.1 - stack.0 > MAX_STACK {
            return Err(format!(
                "{} are larger than `check` gives (a heap of at most {MAX_HEAP} B, a stack of at most {MAX_STACK} B)",
                described()
            ));
        }
        let (initial_sp, from_vector_table) = match vector_sp(image) {
            Some(sp) => (sp, true),
            None => (stack.1, false),
        };
        Ok(Layout {
            heap: (heap_start, heap_end),
            stack,
            initial_sp,
            from_vector_table,
        })
    }

    /// The page-aligned ranges to map: segments, heap and stack, merged.
    pub fn regions(&self, image: &ElfImage) -> Vec<(u64, u64)> {
        let mut ranges: Vec<(u64, u64)> = crate::machine::page_ranges(image);
        // An empty heap (`--heap 0`) maps nothing.
        for (s, e) in [self.heap, self.stack].into_iter().filter(|(s, e)| s < e) {
            ranges.push((s & !(PAGE - 1), e.div_ceil(PAGE) * PAGE));
        }
        crate::machine::merged_ranges(ranges)
    }
}

/// The initial SP of the image's vector table: word 0, when word 1 is the
/// entry point (its reset handler).
fn vector_sp(image: &ElfImage) -> Option<u64> {
    let table = first_symbol(image, &VECTOR_SYMBOLS)?;
    let word = |at: u64| {
        image.segments.iter().find_map(|s| {
            let off = at.checked_sub(s.address)? as usize;
            let b = s.data.get(off..off + 4)?;
            Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u64)
        })
    };
    let (sp, reset) = (word(table)?, word(table + 4)?);
    (reset & !1 == image.entry && sp != 0).then_some(sp)
}
