//! Memcheck for an unmodified program's heap: the live blocks newlib's
//! allocator hands out (its entry points hooked by symbol), a shadow byte
//! per heap byte, and a check of every load and store to the heap against
//! them — overruns, use after free, double and invalid frees, reads of
//! bytes never written since allocation, `calloc` arguments whose product
//! overflows — plus the leak scan at exit. The host's accesses for a
//! semihosting call are checked the same way (`host_access`), and stores
//! into read-only memory are recorded here as findings (`note`).
//!
//! The allocator's own accesses (headers, free lists) are its business: while
//! an allocator call is in flight nothing is checked. Library code that
//! legitimately reads past what a program wrote (word-at-a-time `strlen`,
//! `memcpy`'s tails) is handled as Valgrind does: an aligned load that is
//! partly inside a block is no overrun, and the string and copy functions
//! are not checked for definedness (`memcpy` and `memmove` carry it over).
//!
//! Call stacks are raw here (a PC and return addresses); `program.rs`
//! unwinds them and resolves them to source lines at the end.
//!
//! One file of about 900 lines, a fifth of them tests: the blocks, the
//! shadow and the checks share one state, and each check reads the others.

use std::collections::{BTreeMap, HashMap};

/// A call stack as the hooks see it: the PC, then the return addresses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct RawStack {
    pub pc: u64,
    pub returns: Vec<u64>,
}

/// What a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FindingKind {
    /// An access outside every block, beside one (past its end or before
    /// its start).
    Overrun,
    /// An access to a freed block.
    UseAfterFree,
    /// A read of heap bytes never written since their allocation.
    Uninitialised,
    /// `free` of a block already freed.
    DoubleFree,
    /// `free` or `realloc` of a pointer no allocation returned.
    InvalidFree,
    /// An access to heap memory in no block and near none.
    InvalidAccess,
    /// An allocator call whose arguments cannot mean what they say:
    /// `calloc(n, m)` whose product does not fit 32 bits.
    FishyArgument,
    /// A store into a segment the ELF loads without write permission
    /// (code, constants), or a semihosting call's write there.
    ReadOnlyWrite,
}

impl FindingKind {
    /// The name suppressions and JSON use.
    pub fn name(self) -> &'static str {
        match self {
            FindingKind::Overrun => "overrun",
            FindingKind::UseAfterFree => "use-after-free",
            FindingKind::Uninitialised => "uninitialised",
            FindingKind::DoubleFree => "double-free",
            FindingKind::InvalidFree => "invalid-free",
            FindingKind::InvalidAccess => "invalid-access",
            FindingKind::FishyArgument => "fishy-argument",
            FindingKind::ReadOnlyWrite => "read-only-write",
        }
    }
}

/// The allocator's entry points and the copy functions memcheck hooks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Call {
    /// `malloc(size)`.
    Malloc { size: u32 },
    /// `calloc(n, m)`: defined (zeroed) bytes, `n × m` of them as the
    /// 32-bit allocator computes it.
    Calloc { n: u32, m: u32 },
    /// `realloc(ptr, size)`.
    Realloc { ptr: u32, size: u32 },
    /// `memalign(align, size)`.
    Memalign { size: u32 },
    /// `free(ptr)`.
    Free { ptr: u32 },
}

/// The functions hooked by name, and which argument register each of
/// theirs starts at (newlib's `_r` functions take the reentrancy
/// structure first).
pub(crate) const ALLOCATOR: [(&str, usize); 10] = [
    ("_malloc_r", 1),
    ("_calloc_r", 1),
    ("_realloc_r", 1),
    ("_memalign_r", 1),
    ("_free_r", 1),
    ("malloc", 0),
    ("calloc", 0),
    ("realloc", 0),
    ("memalign", 0),
    ("free", 0),
];

/// The call a hooked allocator function `name` makes with `args` (from
/// its first argument register on).
pub(crate) fn decode_call(name: &str, args: &[u32]) -> Option<Call> {
    let a = |i: usize| args.get(i).copied().unwrap_or(0);
    Some(match name.trim_start_matches("_").trim_end_matches("_r") {
        "malloc" => Call::Malloc { size: a(0) },
        "calloc" => Call::Calloc { n: a(0), m: a(1) },
        "realloc" => Call::Realloc {
            ptr: a(0),
            size: a(1),
        },
        "memalign" => Call::Memalign { size: a(1) },
        "free" => Call::Free { ptr: a(0) },
        _ => return None,
    })
}

/// Functions whose loads are not checked for definedness (they read whole
/// words past what a string or a copy's source holds); `memcpy` and
/// `memmove` also carry definedness to their destination themselves.
pub(crate) const LENIENT: [&str; 14] = [
    "memcpy",
    "memmove",
    "memset",
    "memcmp",
    "memchr",
    "strlen",
    "strnlen",
    "strcmp",
    "strncmp",
    "strcpy",
    "strncpy",
    "strchr",
    "__aeabi_memcpy",
    "__aeabi_memmove",
];

/// The copy functions whose definedness memcheck carries over at entry.
pub(crate) const COPIES: [&str; 4] = ["memcpy", "memmove", "__aeabi_memcpy", "__aeabi_memmove"];

/// Shadow states of a heap byte.
const OUTSIDE: u8 = 0;
const FREED: u8 = 1;
const UNDEFINED: u8 = 2;
const DEFINED: u8 = 3;

/// How far from a block an access still counts as its overrun.
const NEAR: u64 = 4096;

/// Most distinct findings kept (each later one is counted in its first).
const MAX_FINDINGS: usize = 1000;

#[derive(Clone, Debug)]
pub(crate) struct Block {
    pub size: u64,
    pub allocated: RawStack,
    pub freed: Option<RawStack>,
}

/// One finding before its stacks are resolved.
#[derive(Clone, Debug)]
pub(crate) struct RawFinding {
    pub kind: FindingKind,
    pub message: String,
    pub stack: RawStack,
    /// The block it concerns: start and the block.
    pub block: Option<(u64, Block)>,
    pub count: u64,
    /// An overrun's bytes outside its block.
    pub extent: Option<Extent>,
}

/// The bytes outside its block an overrun touched: `[lo, hi)`, the hull of
/// its accesses there, and how it says what it did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Extent {
    pub lo: u64,
    pub hi: u64,
    pub write: bool,
    /// A copy function's whole range (`memcpy` writes `n` bytes at …),
    /// rather than the instructions' accesses.
    pub copy: Option<(&'static str, u64, u64)>,
}

impl Extent {
    /// Bytes past the end of (or before) the block `[start, start+size)`.
    fn bytes(&self, start: u64, size: u64) -> u64 {
        let end = start + size;
        if self.lo >= end {
            self.hi - end
        } else {
            start.saturating_sub(self.lo)
        }
    }

    /// "write of 32 B past the end of a 256-byte block" and the range.
    fn describe(&self, start: u64, block: &Block) -> String {
        let n = self.bytes(start, block.size);
        let state = if block.freed.is_some() { "freed " } else { "" };
        let side = if self.lo >= start + block.size {
            "past the end of"
        } else {
            "before"
        };
        let what = format!("{n} B {side} a {state}{}-byte block", block.size);
        match self.copy {
            Some((function, at, len)) => {
                let verb = if self.write { "writes" } else { "reads" };
                format!(
                    "{function} {verb} {len} B at {at:#x}: {what} ([{:#x}, {:#x}))",
                    self.lo, self.hi
                )
            }
            None => {
                let verb = if self.write { "write" } else { "read" };
                format!(
                    "invalid {verb} of {n} B {side} a {state}{}-byte block ([{:#x}, {:#x}))",
                    block.size, self.lo, self.hi
                )
            }
        }
    }
}

/// An allocator call in flight.
struct Pending {
    call: Option<Call>,
    ret: u64,
    sp: u64,
    stack: RawStack,
    /// Realloc: the old block's shadow bytes.
    old: Vec<u8>,
}

/// The heap's blocks and shadow.
pub(crate) struct Memcheck {
    base: u64,
    shadow: Vec<u8>,
    pub live: BTreeMap<u64, Block>,
    freed: BTreeMap<u64, Block>,
    pending: Vec<Pending>,
    /// Code ranges of the lenient functions, sorted.
    lenient: Vec<(u64, u64)>,
    /// Code ranges of the copy functions, sorted.
    copies: Vec<(u64, u64)>,
    pub findings: Vec<RawFinding>,
    seen: HashMap<(FindingKind, u64), usize>,
    /// Whether some instruction overran a block (its later accesses next to
    /// the bytes it overran extend the finding).
    overran: bool,
    /// The overruns of the last copy entered, per direction (write, read):
    /// its instructions' accesses there are that finding's.
    copy_overruns: [Option<usize>; 2],
    pub allocations: u64,
    pub frees: u64,
    pub bytes_allocated: u64,
    /// Why no heap is checked ([`Memcheck::without_heap`]).
    pub heap_unchecked: Option<&'static str>,
}

impl Memcheck {
    /// Memcheck of the heap `[base, limit)`; the code ranges of the lenient
    /// functions ([`LENIENT`]) and of the copy functions ([`COPIES`]).
    pub(crate) fn new(
        base: u64,
        limit: u64,
        mut lenient: Vec<(u64, u64)>,
        mut copies: Vec<(u64, u64)>,
    ) -> Memcheck {
        lenient.sort_unstable();
        copies.sort_unstable();
        Memcheck {
            base,
            shadow: vec![OUTSIDE; (limit - base) as usize],
            live: BTreeMap::new(),
            freed: BTreeMap::new(),
            pending: Vec::new(),
            lenient,
            copies,
            findings: Vec::new(),
            seen: HashMap::new(),
            overran: false,
            copy_overruns: [None, None],
            allocations: 0,
            frees: 0,
            bytes_allocated: 0,
            heap_unchecked: None,
        }
    }

    /// Memcheck of no heap, for `why` (a program without allocator
    /// symbols): its findings are those outside the heap.
    pub(crate) fn without_heap(why: &'static str) -> Memcheck {
        Memcheck {
            heap_unchecked: Some(why),
            ..Memcheck::new(0, 0, Vec::new(), Vec::new())
        }
    }

    /// True while an allocator call is in flight: its accesses are its own.
    pub(crate) fn in_allocator(&self) -> bool {
        !self.pending.is_empty()
    }

    /// An allocator function was entered (`ret`, `sp`: where and with which
    /// stack pointer it returns). Only the outermost call counts; calls the
    /// allocator makes to itself are its own. Returns a finding to report
    /// when the call is a bad free, and whether to skip the call (a bad
    /// free would corrupt newlib's heap and crash the program).
    pub(crate) fn enter(&mut self, call: Option<Call>, ret: u64, sp: u64, stack: RawStack) -> bool {
        let outer = self.pending.is_empty();
        let call = call.filter(|_| outer);
        let mut old = Vec::new();
        let mut skip = false;
        match call {
            Some(Call::Free { ptr }) if ptr != 0 => {
                skip = !self.check_free(ptr as u64, &stack, "free");
            }
            Some(Call::Calloc { n, m }) => self.check_calloc(n, m, &stack),
            Some(Call::Realloc { ptr, .. }) if ptr != 0 => {
                if self.check_free(ptr as u64, &stack, "realloc") {
                    let size = self.live[&(ptr as u64)].size;
                    old = self.shadow_of(ptr as u64, size).to_vec();
                } else {
                    skip = true;
                }
            }
            _ => {}
        }
        if !skip {
            self.pending.push(Pending {
                call,
                ret,
                sp,
                stack,
                old,
            });
        }
        skip
    }

    /// A block starts at `pc` with the stack pointer `sp`: completes the
    /// allocator calls that return there; `r0` reads their result.
    pub(crate) fn block(&mut self, pc: u64, sp: u64, r0: impl Fn() -> u32) {
        while let Some(top) = self.pending.last() {
            if top.ret != pc || top.sp != sp {
                return;
            }
            let Some(done) = self.pending.pop() else {
                return;
            };
            if let Some(call) = done.call {
                self.complete(call, r0() as u64, done.stack, done.old);
            }
        }
    }

    fn complete(&mut self, call: Call, result: u64, stack: RawStack, old: Vec<u8>) {
        match call {
            Call::Malloc { size } | Call::Memalign { size } => {
                self.allocate(result, size as u64, UNDEFINED, stack)
            }
            Call::Calloc { n, m } => {
                // newlib's `calloc` multiplies in 32 bits: an overflowing
                // product wraps, and the block it returns has the wrapped
                // size (one that checks the product returns NULL).
                let size = n.wrapping_mul(m) as u64;
                self.allocate(result, size, DEFINED, stack)
            }
            Call::Free { ptr } => self.release(ptr as u64, stack),
            Call::Realloc { ptr, size } => {
                let (ptr, size) = (ptr as u64, size as u64);
                if ptr != 0 && (result != 0 || size == 0) {
                    self.release(ptr, stack.clone());
                }
                if result != 0 {
                    self.allocate(result, size, UNDEFINED, stack);
                    let keep = old.len().min(size as usize);
                    if let Some(s) = self.shadow_range(result, keep as u64) {
                        s.copy_from_slice(&old[..keep]);
                    }
                }
            }
        }
    }

    fn allocate(&mut self, start: u64, size: u64, state: u8, stack: RawStack) {
        if start == 0 {
            return;
        }
        self.allocations += 1;
        self.bytes_allocated += size;
        // Freed blocks the new one reuses are gone.
        let end = start + size.max(1);
        let stale: Vec<u64> = self
            .freed
            .range(..end)
            .filter(|(s, b)| **s + b.size.max(1) > start)
            .map(|(s, _)| *s)
            .collect();
        for s in stale {
            self.freed.remove(&s);
        }
        if let Some(shadow) = self.shadow_range(start, size) {
            shadow.fill(state);
        }
        self.live.insert(
            start,
            Block {
                size,
                allocated: stack,
                freed: None,
            },
        );
    }

    fn release(&mut self, start: u64, stack: RawStack) {
        let Some(mut block) = self.live.remove(&start) else {
            return;
        };
        self.frees += 1;
        if let Some(shadow) = self.shadow_range(start, block.size) {
            shadow.fill(FREED);
        }
        block.freed = Some(stack);
        self.freed.insert(start, block);
    }

    /// Valgrind's "fishy argument": `calloc(n, m)` whose product needs more
    /// than 32 bits is reported at the call.
    fn check_calloc(&mut self, n: u32, m: u32, stack: &RawStack) {
        let product = n as u64 * m as u64;
        if product <= u32::MAX as u64 {
            return;
        }
        let message = format!(
            "calloc's arguments overflow: {n} × {m} = {product} does not fit 32 bits (a 32-bit allocator's product wraps to {} B)",
            n.wrapping_mul(m)
        );
        self.report(FindingKind::FishyArgument, message, stack.clone(), None);
    }

    /// Whether `ptr` may be freed; a finding when not.
    fn check_free(&mut self, ptr: u64, stack: &RawStack, what: &str) -> bool {
        if self.live.contains_key(&ptr) {
            return true;
        }
        let (kind, message, block) = match self.freed.get(&ptr) {
            Some(b) => (
                FindingKind::DoubleFree,
                format!("{what} of {ptr:#x}, a {}-byte block already freed", b.size),
                Some((ptr, b.clone())),
            ),
            None => (
                FindingKind::InvalidFree,
                format!(
                    "{what} of {ptr:#x}, which no allocation returned{}",
                    self.describe(ptr)
                        .map(|(d, _)| format!(" ({d})"))
                        .unwrap_or_default()
                ),
                self.describe(ptr).and_then(|(_, b)| b),
            ),
        };
        self.report(kind, message, stack.clone(), block);
        false
    }

    /// Checks a load or store of `size` bytes at `address` by the
    /// instruction at `pc`; `stack` unwinds the call stack when a new
    /// finding needs it.
    pub(crate) fn access(
        &mut self,
        pc: u64,
        write: bool,
        address: u64,
        size: u64,
        stack: impl FnOnce() -> RawStack,
    ) {
        if self.in_allocator() {
            return;
        }
        let lenient = in_ranges(&self.lenient, pc);
        let Some(shadow) = self.shadow_range(address, size) else {
            return;
        };
        let states: Vec<u8> = shadow.to_vec();
        let inside = states.iter().any(|&s| s >= UNDEFINED);
        // Valgrind's partial-loads-ok: an aligned load partly inside a block
        // reads the block's bytes (word-at-a-time string and copy code).
        let partial_ok = !write && inside && size.is_power_of_two() && address.is_multiple_of(size);
        let mut bad: Option<u64> = None;
        let mut undefined = false;
        for (i, &s) in states.iter().enumerate() {
            match s {
                OUTSIDE | FREED if !partial_ok && bad.is_none() => bad = Some(address + i as u64),
                UNDEFINED if !write && !lenient => undefined = true,
                _ => {}
            }
        }
        // A copy's stores carry its source's definedness, set at entry.
        if write && !in_ranges(&self.copies, pc) {
            if let Some(shadow) = self.shadow_range(address, size) {
                for s in shadow.iter_mut().filter(|s| **s == UNDEFINED) {
                    *s = DEFINED;
                }
            }
        }
        let verb = if write { "write" } else { "read" };
        if let Some(at) = bad {
            if self.in_copy_overrun(pc, write, at) || self.extend_overrun(pc, address, size, true) {
                return;
            }
            let (kind, what, block) = self.outside_block(at);
            let message = format!("invalid {verb} of {size} B at {address:#x}: {at:#x} is {what}");
            let extent = match (&block, kind) {
                (Some((start, b)), FindingKind::Overrun) => {
                    let lo = address.max(if at >= *start {
                        start + b.size
                    } else {
                        address
                    });
                    let hi = if at >= *start {
                        address + size
                    } else {
                        (address + size).min(*start)
                    };
                    Some(Extent {
                        lo,
                        hi,
                        write,
                        copy: None,
                    })
                }
                _ => None,
            };
            let stack = stack();
            self.report_with(kind, pc, message, stack, block, extent);
        } else if self.overran && self.extend_overrun(pc, address, size, false) {
            // An access continuing an overrun is that finding's.
        } else if undefined && !self.seen_before(FindingKind::Uninitialised, pc) {
            let (what, block) = self.undefined_in(address);
            let message = format!("read of {size} B at {address:#x}: {what}");
            self.report(FindingKind::Uninitialised, message, stack(), block);
        }
    }

    /// Whether `at`, a byte outside every block accessed by the copy
    /// function's instruction `pc`, is one of the bytes the last copy's
    /// range was found to overrun: then the access is that finding's.
    fn in_copy_overrun(&mut self, pc: u64, write: bool, at: u64) -> bool {
        let Some(i) = self.copy_overruns[!write as usize] else {
            return false;
        };
        let inside = self.findings[i]
            .extent
            .is_some_and(|e| (e.lo..e.hi).contains(&at));
        if inside && in_ranges(&self.copies, pc) {
            self.findings[i].count += 1;
            return true;
        }
        false
    }

    /// The instruction `pc` overran a block before: an access of it that
    /// continues the bytes it overran (the next element of the same loop,
    /// even where another block lies) extends that finding.
    /// `outside`: the access is outside every block (it is the finding's
    /// then, extending it or not); inside one, it is only when it extends.
    fn extend_overrun(&mut self, pc: u64, address: u64, size: u64, outside: bool) -> bool {
        let Some(&i) = self.seen.get(&(FindingKind::Overrun, pc)) else {
            return false;
        };
        let f = &mut self.findings[i];
        let mut extended = false;
        if let (Some(e), Some((start, b))) = (f.extent.as_mut(), f.block.as_ref()) {
            let end = start + b.size;
            let far = |a: u64| a.abs_diff(end).min(a.abs_diff(*start)) <= NEAR;
            if e.lo >= end && address <= e.hi && address + size > e.hi && far(address + size) {
                e.hi = address + size;
                extended = true;
            } else if e.lo < end && address + size >= e.lo && address < e.lo && far(address) {
                e.lo = address;
                extended = true;
            }
            if extended {
                f.message = e.describe(*start, b);
            }
        }
        if extended || outside {
            f.count += 1;
        }
        extended || outside
    }

    /// `function` (a copy) entered to write `[dst, dst+n)` from `[src,
    /// src+n)`: a range that starts in a live block and runs past its end
    /// is an overrun of that block by exactly the bytes past it, whatever
    /// lies there (another block, a gap), found at the call (`stack`).
    pub(crate) fn copy_range(
        &mut self,
        function: &'static str,
        (dst, src, n): (u64, u64, u64),
        mut stack: impl FnMut() -> RawStack,
    ) {
        self.copy_overruns = [None, None];
        if self.in_allocator() || n == 0 {
            return;
        }
        for (write, at) in [(true, dst), (false, src)] {
            let Some((start, block)) = self.block_at(at) else {
                continue;
            };
            let end = start + block.size;
            let Some(last) = at.checked_add(n).filter(|&e| e > end) else {
                continue;
            };
            let extent = Extent {
                lo: end,
                hi: last.min(end + NEAR),
                write,
                copy: Some((function, at, n)),
            };
            let stack = stack();
            // One finding per call site and direction, not per copy
            // function: the caller is what is wrong.
            let key = stack.returns.first().copied().unwrap_or(stack.pc) | (write as u64) << 63;
            let message = extent.describe(start, &block);
            let index = match self.seen.get(&(FindingKind::Overrun, key)) {
                Some(&i) => {
                    let f = &mut self.findings[i];
                    f.count += 1;
                    if let Some(e) = f.extent.as_mut().filter(|e| e.lo == extent.lo) {
                        e.hi = e.hi.max(extent.hi);
                        f.message = e.describe(start, &block);
                    }
                    Some(i)
                }
                None => {
                    self.report_with(
                        FindingKind::Overrun,
                        key,
                        message,
                        stack,
                        Some((start, block)),
                        Some(extent),
                    );
                    self.seen.get(&(FindingKind::Overrun, key)).copied()
                }
            };
            self.copy_overruns[!write as usize] = index;
        }
    }

    /// What an access to `at`, a heap byte in no live block, is: its kind,
    /// in words, and the block it concerns.
    fn outside_block(&self, at: u64) -> (FindingKind, String, Option<(u64, Block)>) {
        match self.describe(at) {
            Some((what, Some((start, b)))) if b.freed.is_some() => {
                (FindingKind::UseAfterFree, what, Some((start, b)))
            }
            Some((what, block)) => (FindingKind::Overrun, what, block),
            None => (
                FindingKind::InvalidAccess,
                "in no heap block and near none".to_owned(),
                None,
            ),
        }
    }

    /// Words for a read of unwritten bytes at `address`, and their block.
    fn undefined_in(&self, address: u64) -> (String, Option<(u64, Block)>) {
        let block = self.block_at(address);
        let what = format!(
            "heap bytes never written since their allocation{}",
            block
                .as_ref()
                .map(|(s, b)| format!(" ({} B into a {}-byte block)", address - s, b.size))
                .unwrap_or_default()
        );
        (what, block)
    }

    /// The host's access to `[address, address+size)` on the program's
    /// behalf (`call`, a semihosting call, reads a buffer out of the guest
    /// or writes one into it) checked as the program's own would be: no
    /// freed or unallocated heap bytes, and no unwritten ones read out.
    /// The finding is that of the call's instruction `pc` (`stack`).
    pub(crate) fn host_access(
        &mut self,
        call: &str,
        write: bool,
        (address, size): (u64, u64),
        pc: u64,
        stack: impl FnOnce() -> RawStack,
    ) {
        let Some(shadow) = self.shadow_range(address, size) else {
            return;
        };
        let bad = shadow.iter().position(|&s| s < UNDEFINED);
        let undefined = shadow.iter().position(|&s| s == UNDEFINED);
        let verb = if write { "writes" } else { "reads" };
        let done = format!("{call} {verb} {size} B at {address:#x}");
        if let Some(i) = bad {
            let at = address + i as u64;
            let (kind, what, block) = self.outside_block(at);
            if !self.seen_before(kind, pc) {
                self.report(kind, format!("{done}: {at:#x} is {what}"), stack(), block);
            }
        } else if let Some(i) = undefined.filter(|_| !write) {
            if !self.seen_before(FindingKind::Uninitialised, pc) {
                let (what, block) = self.undefined_in(address + i as u64);
                let message = format!("{done}: {what}");
                self.report(FindingKind::Uninitialised, message, stack(), block);
            }
        }
    }

    /// A finding of `kind` at the instruction `pc` (a store into read-only
    /// memory): `message` and `stack` are made only for a new one.
    pub(crate) fn note(
        &mut self,
        kind: FindingKind,
        pc: u64,
        message: impl FnOnce() -> String,
        stack: impl FnOnce() -> RawStack,
    ) {
        if !self.seen_before(kind, pc) {
            self.report(kind, message(), stack(), None);
        }
    }

    /// `memcpy`/`memmove(dst, src, n)` entered: the destination's live bytes
    /// take the source's definedness (outside the heap, defined).
    pub(crate) fn copy(&mut self, dst: u64, src: u64, n: u64) {
        if self.in_allocator() || n > 1 << 26 {
            return;
        }
        let from: Vec<u8> = match self.shadow_range(src, n) {
            Some(s) => s
                .iter()
                .map(|&b| if b == UNDEFINED { UNDEFINED } else { DEFINED })
                .collect(),
            None => vec![DEFINED; n as usize],
        };
        if let Some(to) = self.shadow_range(dst, n) {
            for (t, f) in to.iter_mut().zip(from) {
                if *t >= UNDEFINED {
                    *t = f;
                }
            }
        }
    }

    /// Host writes (semihosting calls filling a buffer) define bytes.
    pub(crate) fn host_wrote(&mut self, address: u64, n: u64) {
        if let Some(s) = self.shadow_range(address, n) {
            for b in s.iter_mut().filter(|b| **b == UNDEFINED) {
                *b = DEFINED;
            }
        }
    }

    fn seen_before(&mut self, kind: FindingKind, pc: u64) -> bool {
        match self.seen.get(&(kind, pc)) {
            Some(&i) => {
                self.findings[i].count += 1;
                true
            }
            None => false,
        }
    }

    fn report(
        &mut self,
        kind: FindingKind,
        message: String,
        stack: RawStack,
        block: Option<(u64, Block)>,
    ) {
        let pc = stack.pc;
        self.report_with(kind, pc, message, stack, block, None);
    }

    /// A new finding, known by `(kind, key)` from then on (`key`: its
    /// instruction, or a copy's call site).
    fn report_with(
        &mut self,
        kind: FindingKind,
        key: u64,
        message: String,
        stack: RawStack,
        block: Option<(u64, Block)>,
        extent: Option<Extent>,
    ) {
        if self.seen_before(kind, key) || self.findings.len() >= MAX_FINDINGS {
            return;
        }
        let message = match (&extent, &block) {
            (Some(e), Some((start, b))) => e.describe(*start, b),
            _ => message,
        };
        self.overran |= extent.is_some();
        self.seen.insert((kind, key), self.findings.len());
        self.findings.push(RawFinding {
            kind,
            message,
            stack,
            block,
            count: 1,
            extent,
        });
    }

    /// The findings, an overrun's instructions joined into one finding per
    /// block, direction and call (the same callers): a loop unrolled into
    /// several stores, a copy's word and byte stores, is one overrun of
    /// the bytes all of them reached.
    pub(crate) fn coalesced(&self) -> Vec<RawFinding> {
        let mut out: Vec<RawFinding> = Vec::new();
        for f in &self.findings {
            let same = out.iter_mut().find(|g| {
                g.kind == f.kind
                    && g.stack.returns == f.stack.returns
                    && g.block.as_ref().map(|b| b.0) == f.block.as_ref().map(|b| b.0)
                    && match (g.extent, f.extent) {
                        (Some(a), Some(b)) => {
                            a.write == b.write && a.copy.is_none() && b.copy.is_none()
                        }
                        _ => false,
                    }
            });
            match same {
                Some(g) => {
                    g.count += f.count;
                    if let (Some(a), Some(b), Some((start, block))) =
                        (g.extent.as_mut(), f.extent, g.block.as_ref())
                    {
                        a.lo = a.lo.min(b.lo);
                        a.hi = a.hi.max(b.hi);
                        g.message = a.describe(*start, block);
                    }
                }
                None => out.push(f.clone()),
            }
        }
        out
    }

    /// Where `at` lies relative to the nearest block (live or freed), in
    /// words, and that block; `None` when no block is within [`NEAR`].
    fn describe(&self, at: u64) -> Option<(String, Option<(u64, Block)>)> {
        let mut best: Option<(u64, String, u64, &Block)> = None;
        for map in [&self.live, &self.freed] {
            let below = map.range(..=at).next_back();
            let above = map.range(at + 1..).next();
            for (&start, b) in below.into_iter().chain(above) {
                let end = start + b.size;
                let state = if b.freed.is_some() { "freed " } else { "" };
                let (distance, words) = if at < start {
                    (
                        start - at,
                        format!("{} B before a {state}{}-byte block", start - at, b.size),
                    )
                } else if at >= end {
                    (
                        at - end + 1,
                        format!(
                            "{} B past the end of a {state}{}-byte block",
                            at - end,
                            b.size
                        ),
                    )
                } else {
                    (
                        0,
                        format!("{} B inside a {state}{}-byte block", at - start, b.size),
                    )
                };
                if distance <= NEAR && best.as_ref().is_none_or(|x| distance < x.0) {
                    best = Some((distance, words, start, b));
                }
            }
        }
        best.map(|(_, words, start, b)| (words, Some((start, b.clone()))))
    }

    fn block_at(&self, at: u64) -> Option<(u64, Block)> {
        let (&start, b) = self.live.range(..=at).next_back()?;
        (at < start + b.size).then(|| (start, b.clone()))
    }

    fn shadow_of(&mut self, start: u64, size: u64) -> &[u8] {
        self.shadow_range(start, size).map_or(&[], |s| &*s)
    }

    /// The shadow bytes of `[address, address+size)` clipped to the heap.
    fn shadow_range(&mut self, address: u64, size: u64) -> Option<&mut [u8]> {
        let len = self.shadow.len() as u64;
        let first = address.checked_sub(self.base)?;
        if first >= len {
            return None;
        }
        let last = first.saturating_add(size).min(len);
        Some(&mut self.shadow[first as usize..last as usize])
    }

    /// The live blocks no pointer reaches: a word-aligned scan of `roots`
    /// (the program's data, stack and registers), then of every reached
    /// block's bytes (`read`). Returns `(start, reachable)` per live block.
    pub(crate) fn reachability(
        &self,
        roots: &[Vec<u8>],
        read: impl Fn(u64, u64) -> Vec<u8>,
    ) -> Vec<(u64, bool)> {
        let starts: Vec<(u64, u64)> = self.live.iter().map(|(s, b)| (*s, b.size)).collect();
        let find = |w: u64| -> Option<usize> {
            let i = starts.partition_point(|(s, _)| *s <= w);
            let (s, size) = *starts.get(i.checked_sub(1)?)?;
            (w < s + size.max(1)).then_some(i - 1)
        };
        let mut reached = vec![false; starts.len()];
        let mut work: Vec<usize> = Vec::new();
        let scan = |bytes: &[u8], reached: &mut Vec<bool>, work: &mut Vec<usize>| {
            for w in bytes.chunks_exact(4) {
                let w = u32::from_le_bytes([w[0], w[1], w[2], w[3]]) as u64;
                if let Some(i) = find(w) {
                    if !reached[i] {
                        reached[i] = true;
                        work.push(i);
                    }
                }
            }
        };
        for r in roots {
            scan(r, &mut reached, &mut work);
        }
        while let Some(i) = work.pop() {
            let (s, size) = starts[i];
            let bytes = read(s & !3, size + (s & 3));
            scan(&bytes, &mut reached, &mut work);
        }
        starts.iter().map(|(s, _)| *s).zip(reached).collect()
    }
}

/// Whether `pc` lies in one of the sorted code ranges.
fn in_ranges(ranges: &[(u64, u64)], pc: u64) -> bool {
    let i = ranges.partition_point(|r| r.0 <= pc);
    i > 0 && pc < ranges[i - 1].1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(pc: u64) -> RawStack {
        RawStack {
            pc,
            returns: vec![],
        }
    }

    fn heap() -> Memcheck {
        Memcheck::new(0x1000, 0x2000, vec![(0x500, 0x510)], vec![])
    }

    fn malloc(m: &mut Memcheck, size: u32, at: u32) {
        m.enter(Some(Call::Malloc { size }), 0x100, 0x8000, stack(0x90));
        m.block(0x100, 0x8000, || at);
    }

    #[test]
    fn an_overrun_names_the_block_and_how_far_past_its_end() {
        let mut m = heap();
        malloc(&mut m, 10, 0x1008);
        m.access(0x200, true, 0x1008, 4, || stack(0x200));
        m.access(0x204, true, 0x1012, 1, || stack(0x204));
        assert_eq!(m.findings.len(), 1);
        let f = &m.findings[0];
        assert_eq!(f.kind, FindingKind::Overrun);
        assert!(
            f.message
                .contains("write of 1 B past the end of a 10-byte block"),
            "{}",
            f.message
        );
        assert_eq!(f.block.as_ref().map(|b| b.0), Some(0x1008));
        // The same instruction again is counted, not listed twice, and
        // the bytes it reaches grow with it.
        m.access(0x204, true, 0x1013, 1, || stack(0x204));
        assert_eq!((m.findings.len(), m.findings[0].count), (1, 2));
        assert!(m.findings[0].message.contains("write of 2 B past the end"));
    }

    #[test]
    fn reads_of_unwritten_bytes_and_of_freed_blocks_are_found() {
        let mut m = heap();
        malloc(&mut m, 16, 0x1010);
        m.access(0x300, true, 0x1010, 4, || stack(0x300));
        m.access(0x304, false, 0x1010, 4, || stack(0x304));
        assert!(m.findings.is_empty());
        m.access(0x308, false, 0x1014, 4, || stack(0x308));
        assert_eq!(m.findings[0].kind, FindingKind::Uninitialised);
        // Inside a lenient function (a string routine), no definedness check.
        m.access(0x504, false, 0x1018, 4, || stack(0x504));
        assert_eq!(m.findings.len(), 1);
        m.enter(Some(Call::Free { ptr: 0x1010 }), 0x120, 0x8000, stack(0x94));
        m.block(0x120, 0x8000, || 0);
        m.access(0x30c, false, 0x1010, 4, || stack(0x30c));
        assert_eq!(m.findings[1].kind, FindingKind::UseAfterFree);
        // A second free is skipped and reported.
        let skip = m.enter(Some(Call::Free { ptr: 0x1010 }), 0x120, 0x8000, stack(0x98));
        assert!(skip);
        assert_eq!(m.findings[2].kind, FindingKind::DoubleFree);
    }

    #[test]
    fn an_aligned_word_load_partly_inside_a_block_is_no_overrun() {
        let mut m = heap();
        malloc(&mut m, 5, 0x1100);
        m.access(0x400, true, 0x1100, 4, || stack(0x400));
        m.access(0x402, true, 0x1104, 1, || stack(0x402));
        m.access(0x404, false, 0x1104, 4, || stack(0x404));
        assert!(m.findings.is_empty(), "{:?}", m.findings);
        // Unaligned, it is one.
        m.access(0x406, false, 0x1103, 4, || stack(0x406));
        assert_eq!(m.findings[0].kind, FindingKind::Overrun);
    }

    #[test]
    fn calloc_is_defined_realloc_keeps_definedness_and_leaks_are_unreached_blocks() {
        let mut m = heap();
        m.enter(
            Some(Call::Calloc { n: 2, m: 4 }),
            0x100,
            0x8000,
            stack(0x90),
        );
        m.block(0x100, 0x8000, || 0x1200);
        m.access(0x500 - 4, false, 0x1200, 4, || stack(0x4fc));
        assert!(m.findings.is_empty());
        m.enter(
            Some(Call::Realloc {
                ptr: 0x1200,
                size: 16,
            }),
            0x100,
            0x8000,
            stack(0x90),
        );
        m.block(0x100, 0x8000, || 0x1300);
        m.access(0x600, false, 0x1304, 4, || stack(0x600));
        assert!(m.findings.is_empty(), "{:?}", m.findings);
        m.access(0x604, false, 0x1308, 4, || stack(0x604));
        assert_eq!(m.findings[0].kind, FindingKind::Uninitialised);
        malloc(&mut m, 8, 0x1400);
        // A root points at 0x1300 only.
        let roots = vec![0x1300u32.to_le_bytes().to_vec()];
        let reach = m.reachability(&roots, |_, n| vec![0; n as usize]);
        assert_eq!(reach, vec![(0x1300, true), (0x1400, false)]);
    }

    #[test]
    fn a_calloc_whose_product_needs_33_bits_is_fishy_and_its_block_has_the_wrapped_size() {
        let mut m = heap();
        let (n, size) = (0x1000_0001u32, 16u32);
        m.enter(
            Some(Call::Calloc { n, m: size }),
            0x100,
            0x8000,
            stack(0x90),
        );
        m.block(0x100, 0x8000, || 0x1200);
        assert_eq!(m.findings[0].kind, FindingKind::FishyArgument);
        assert_eq!(m.findings[0].stack.pc, 0x90);
        // 0x1000_0001 × 16 = 2^32 + 16: the 32-bit product is 16.
        assert!(
            m.findings[0]
                .message
                .contains("268435457 × 16 = 4294967312"),
            "{}",
            m.findings[0].message
        );
        assert_eq!(m.live[&0x1200].size, 16);
        m.access(0x200, true, 0x1200 + 15, 1, || stack(0x200));
        assert_eq!(m.findings.len(), 1);
        m.access(0x204, true, 0x1200 + 20, 1, || stack(0x204));
        assert_eq!(m.findings[1].kind, FindingKind::Overrun);
        assert!(m.findings[1]
            .message
            .contains("5 B past the end of a 16-byte block"));
    }

    #[test]
    fn host_accesses_of_freed_and_unwritten_bytes_are_findings_named_after_the_call() {
        let mut m = heap();
        malloc(&mut m, 16, 0x1010);
        m.access(0x300, true, 0x1010, 8, || stack(0x300));
        // Written bytes go out quietly; unwritten ones are reported.
        m.host_access("SYS_WRITE", false, (0x1010, 8), 0x700, || stack(0x700));
        assert!(m.findings.is_empty());
        m.host_access("SYS_WRITE", false, (0x1010, 12), 0x700, || stack(0x700));
        assert_eq!(m.findings[0].kind, FindingKind::Uninitialised);
        assert!(m.findings[0]
            .message
            .starts_with("SYS_WRITE reads 12 B at 0x1010"));
        // Writes into a live block are fine and define it.
        m.host_access("SYS_READ", true, (0x1018, 8), 0x704, || stack(0x704));
        m.host_wrote(0x1018, 8);
        m.access(0x308, false, 0x1018, 4, || stack(0x308));
        assert_eq!(m.findings.len(), 1);
        m.enter(Some(Call::Free { ptr: 0x1010 }), 0x120, 0x8000, stack(0x94));
        m.block(0x120, 0x8000, || 0);
        m.host_access("SYS_READ", true, (0x1014, 4), 0x704, || stack(0x704));
        let f = &m.findings[1];
        assert_eq!(f.kind, FindingKind::UseAfterFree);
        assert!(
            f.message.starts_with("SYS_READ writes 4 B at 0x1014"),
            "{}",
            f.message
        );
        assert_eq!(f.block.as_ref().map(|b| b.0), Some(0x1010));
        // Memory outside the heap is not memcheck's.
        m.host_access("SYS_WRITE", false, (0x3000, 4), 0x708, || stack(0x708));
        assert_eq!(m.findings.len(), 2);
    }

    #[test]
    fn a_copy_past_a_block_is_one_overrun_of_exactly_the_bytes_past_it_even_into_the_next_block() {
        let mut m = Memcheck::new(0x1000, 0x2000, vec![], vec![(0x500, 0x540)]);
        malloc(&mut m, 48, 0x1100);
        malloc(&mut m, 256, 0x1138);
        let call = || RawStack {
            pc: 0x500,
            returns: vec![0x800],
        };
        // 64 B copied into the 48 B block: 16 B past it, 8 of them in the
        // next block (which memcheck alone cannot tell from its own).
        m.copy_range("memcpy", (0x1100, 0x1800, 64), call);
        assert_eq!(m.findings.len(), 1);
        assert!(
            m.findings[0]
                .message
                .contains("memcpy writes 64 B at 0x1100: 16 B past the end of a 48-byte block"),
            "{}",
            m.findings[0].message
        );
        // The copy's stores in the gap are that finding's.
        m.access(0x520, true, 0x1130, 4, || stack(0x520));
        m.access(0x524, true, 0x1134, 4, || stack(0x524));
        assert_eq!((m.findings.len(), m.findings[0].count), (1, 3));
        // The same call again is the same finding.
        m.copy_range("memcpy", (0x1100, 0x1800, 64), call);
        assert_eq!((m.coalesced().len(), m.findings[0].count), (1, 4));
    }

    #[test]
    fn memcheck_without_a_heap_finds_nothing_in_it() {
        let mut m = Memcheck::without_heap("no allocator");
        m.access(0x200, true, 0x1000, 4, || stack(0x200));
        m.host_access("SYS_WRITE", false, (0x1000, 4), 0x700, || stack(0x700));
        assert!(m.findings.is_empty());
        assert_eq!(m.heap_unchecked, Some("no allocator"));
    }
}
