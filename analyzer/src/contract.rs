//! The kernel memory contract, checked per layer (docs/user-guide.md,
//! "The memory contract").
//!
//! A layer window promises that the kernel touches only the memory it
//! declared, the way it declared it:
//!
//! * (a) `stray_write`: no write to memory that is none of the layer's
//!   buffers and not the stack — the tracer's stray writes
//!   ([`memtrace_abi::StrayWrite`]), which only it can see;
//! * (b) `output_read_before_write`: no read of an output byte the layer has
//!   not written yet (bytes the output shares with an input, as in a DMO
//!   placement, hold the input and are exempt);
//! * (c) `input_write`: no write to an input (bytes it shares with an output
//!   are exempt: the output may overwrite them);
//! * (d) `weights_write`: no write to weights or bias;
//! * (e) `scratch_unused`: a scratch buffer is used up to its end — the
//!   high-water mark of the bytes the layer writes equals the declared size.
//!   Writes, not loads: a scratch byte that is only read holds nothing the
//!   layer put there, and loads are not seen byte-exactly on the MMIO access
//!   path (an unaligned load reaches the callbacks as the two aligned words
//!   around it), while stores are on both paths;
//! * (f) `out_of_bounds_read`: no load from a red zone, the bytes right
//!   before or after a buffer that a red-zoned run declares (role
//!   `red_zone`): a kernel reading past its input or scratch. A store there
//!   is a stray write, rule (a).
//!
//! [`ContractCheck`] reports, per rule, the number of violating accesses and
//! the first one (PC, buffer, offset, size). A stray write also says which
//! declared buffer it lies nearest to and how far past its end or before its
//! start it reaches ([`Nearest`]; per layer, the farthest reach of all its
//! stray writes), and carries the return addresses the tracer unwound. It
//! knows PCs, not source lines: the driver, which has the ELF, fills in
//! function and file:line of the PC and of each caller, and names the memory
//! of a stray write after the guest's symbols.

use memtrace_abi::{AccessKind, Analysis, Buffer, Event, LayerInfo, Role, StrayWrite};
use serde::Serialize;

use crate::kernel::Library;

/// Where a stray write lies next to a declared buffer of its layer.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    /// At or after the buffer's end.
    AfterEnd,
    /// Before the buffer's start.
    BeforeStart,
}

/// The declared buffer a stray write lies nearest to.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Nearest {
    /// The buffer's name.
    pub buffer: String,
    /// Which side of it the write lies on.
    pub side: Side,
    /// How far the write reaches beyond the buffer: past its end, from the
    /// end to the last stray byte (a one-byte store just after the buffer
    /// reaches 1 B past its end); before its start, from the first stray
    /// byte to the start.
    pub bytes: u64,
}

impl Nearest {
    /// The declared buffer of `buffers` nearest to the stray bytes
    /// `[address, address + size)`, by the gap between them (a tie goes to
    /// the buffer the bytes follow); `None` without buffers.
    pub fn of<'a>(
        buffers: impl IntoIterator<Item = &'a Buffer>,
        address: u64,
        size: u64,
    ) -> Option<Nearest> {
        let end = address + size;
        buffers
            .into_iter()
            .map(|b| {
                let (start, stop) = (b.base, b.base + b.size as u64);
                if address >= stop {
                    (address - stop, Side::AfterEnd, end - stop, b)
                } else {
                    (
                        start.saturating_sub(end),
                        Side::BeforeStart,
                        start - address,
                        b,
                    )
                }
            })
            .min_by_key(|&(gap, side, _, _)| (gap, side))
            .map(|(_, side, bytes, b)| Nearest {
                buffer: b.name.clone(),
                side,
                bytes,
            })
    }

    /// "1 B past the end of `fc_out`", "16 B before the start of `x`".
    pub fn describe(&self) -> String {
        let side = match self.side {
            Side::AfterEnd => "past the end of",
            Side::BeforeStart => "before the start of",
        };
        format!("{} B {side} `{}`", self.bytes, self.buffer)
    }
}

/// One function on the way to a violation, from DWARF.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, Default)]
pub struct CallSite {
    /// The function, demangled.
    pub function: Option<String>,
    /// Its source file (the last two path components).
    pub file: Option<String>,
    /// The line of the call (or of the inlined code) in `file`.
    pub line: Option<u32>,
    /// Full path of `file`, to tell library code from the user's.
    #[serde(skip)]
    pub path: Option<String>,
}

impl CallSite {
    /// Whether this is code of a kernel library (CMSIS-NN, the TFLM
    /// reference kernels) or of memtrace's run-time (`harness-c/rt/`: the
    /// libc shims, start-up code), rather than the program's own.
    pub fn is_library(&self) -> bool {
        let path = self.path.as_deref().or(self.file.as_deref());
        Library::of_path(path).is_kernel_library()
            || path.is_some_and(|p| p.replace('\\', "/").contains("harness-c/rt/"))
    }

    fn describe(&self) -> String {
        let name = self.function.as_deref().unwrap_or("?");
        match (&self.file, self.line) {
            (Some(file), Some(line)) => format!("`{name}` ({file}:{line})"),
            _ => format!("`{name}`"),
        }
    }
}

/// One access that breaks a rule, or the unused part of a scratch buffer.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, Default)]
pub struct Violation {
    /// Guest PC of the access (`null` for `scratch_unused`).
    pub pc: Option<u64>,
    /// Retired-instruction index of the access since layer begin.
    pub t: Option<u64>,
    /// Function of `pc` (innermost, when inlined); filled in from DWARF.
    pub function: Option<String>,
    /// Source file of `pc`; filled in from DWARF.
    pub file: Option<String>,
    /// Source line of `pc`; filled in from DWARF.
    pub line: Option<u32>,
    /// The declared buffer, or for a stray write the guest symbol the
    /// address lies in (`null` when none does).
    pub buffer: Option<String>,
    /// Guest address of the first byte (stray writes only).
    pub address: Option<u64>,
    /// Byte offset in `buffer` (from the symbol's start for a stray write).
    pub offset: u64,
    /// Bytes concerned.
    pub size: u64,
    /// What the access did (`null` for `scratch_unused`).
    pub access: Option<AccessKind>,
    /// For a stray write: the layer's declared buffer nearest to it.
    pub nearest: Option<Nearest>,
    /// For a stray write: the allocation it hit, in words, when the caller
    /// knows one (`memtrace check`'s heap blocks): "in the heap, 4 B past
    /// the end of the 48-byte block at 0x12238 …". It is named first, the
    /// nearest buffer after it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// The return addresses of the calls that led to the access, innermost
    /// first, as the tracer unwound them (stray writes only).
    #[serde(skip)]
    pub return_addresses: Vec<u64>,
    /// The calls that led to the access, innermost caller first: the
    /// functions the PC's code is inlined into, then each caller at its
    /// call (with the functions inlined there); filled in from DWARF.
    pub callers: Vec<CallSite>,
}

/// Callers [`Violation::describe`] names at most.
const DESCRIBED_CALLERS: usize = 8;

impl Violation {
    /// One line for warnings, e.g. "1 B store to 0x2010102a, 1 B past the
    /// end of `fc_out`, at 0x8001304 fc_clamp (examples/net.c:60), called
    /// from `main` (examples/net.c:90)": [`Violation::summary`] and the
    /// callers up to the first one in the program's own code (not a kernel
    /// library, not memtrace's run-time).
    pub fn describe(&self) -> String {
        let mut text = self.summary();
        let user = self.callers.iter().position(|c| !c.is_library());
        let shown = user.map_or(self.callers.len(), |i| i + 1);
        let shown = shown.min(DESCRIBED_CALLERS);
        if shown > 0 {
            let chain: Vec<String> = self.callers[..shown]
                .iter()
                .map(CallSite::describe)
                .collect();
            text.push_str(", called from ");
            text.push_str(&chain.join(", from "));
            if shown < self.callers.len() && user.is_none_or(|u| u >= shown) {
                text.push_str(", …");
            }
        }
        text
    }

    /// One line for tables, without callers, e.g. "4 B store to
    /// `contract_stray`+0 (0x20100000) at 0x8001304 kernel_global_write
    /// (guests/contract.c:60)".
    pub fn summary(&self) -> String {
        let what = match (&self.buffer, self.address, &self.nearest) {
            (Some(b), Some(a), _) => format!("`{b}`+{} ({a:#x})", self.offset),
            (Some(b), None, _) => format!("`{b}`+{}", self.offset),
            (None, Some(a), Some(_)) => format!("{a:#x}"),
            (None, Some(a), None) => format!("{a:#x} (no symbol)"),
            (None, None, _) => "?".to_owned(),
        };
        let what = match (&self.region, &self.nearest) {
            (Some(r), Some(n)) => format!("{what} {r} (nearest buffer: {}),", n.describe()),
            (Some(r), None) => format!("{what} {r},"),
            (None, Some(n)) => format!("{what}, {},", n.describe()),
            (None, None) => what,
        };
        let Some(pc) = self.pc else {
            return format!("{} B never written from {what} on", self.size);
        };
        let access = match self.access {
            Some(AccessKind::Load) => "load from",
            Some(AccessKind::Update) => "update of",
            _ => "store to",
        };
        let mut at = format!("{pc:#x}");
        if let Some(f) = &self.function {
            at.push_str(&format!(" {f}"));
        }
        if let (Some(file), Some(line)) = (&self.file, self.line) {
            at.push_str(&format!(" ({file}:{line})"));
        }
        format!("{} B {access} {what} at {at}", self.size)
    }
}

/// The outcome of one rule in one layer.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, Default)]
pub struct RuleReport {
    /// No violation.
    pub ok: bool,
    /// Violating accesses (for `scratch_unused`: scratch buffers not used to
    /// their end).
    pub violations: u64,
    /// The first violation, in program order.
    pub first: Option<Violation>,
}

impl RuleReport {
    fn clean() -> RuleReport {
        RuleReport {
            ok: true,
            violations: 0,
            first: None,
        }
    }

    fn add(&mut self, violation: impl FnOnce() -> Violation) {
        self.ok = false;
        self.violations += 1;
        if self.first.is_none() {
            self.first = Some(violation());
        }
    }
}

/// How much of a declared scratch buffer the layer used: the bytes it wrote.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ScratchUse {
    /// Buffer name.
    pub buffer: String,
    /// Declared size in bytes.
    pub declared_bytes: u64,
    /// One past the highest byte offset written (0 when never written).
    pub high_water_bytes: u64,
    /// Distinct bytes written.
    pub written_bytes: u64,
    /// Bytes written past the declared end by stray writes that continue
    /// the buffer (within its declared size again): the scratch the kernel
    /// used beyond what its size function declared.
    #[serde(skip_serializing_if = "is_zero")]
    pub overrun_bytes: u64,
}

impl ScratchUse {
    /// The bytes the kernel used: its high-water mark, or the declared size
    /// plus the overrun past it.
    pub fn used_bytes(&self) -> u64 {
        if self.overrun_bytes > 0 {
            self.declared_bytes + self.overrun_bytes
        } else {
            self.high_water_bytes
        }
    }
}

/// The memory contract of one layer.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ContractReport {
    /// Position of the layer in the run (0-based), as in its `LayerReport`.
    #[serde(skip)]
    pub index: usize,
    /// Every rule holds.
    pub ok: bool,
    /// (a) writes outside the declared buffers and the stack.
    pub stray_write: RuleReport,
    /// (b) reads of output bytes not yet written by the layer.
    pub output_read_before_write: RuleReport,
    /// (c) writes to an input buffer.
    pub input_write: RuleReport,
    /// (d) writes to a weights or bias buffer.
    pub weights_write: RuleReport,
    /// (e) scratch buffers whose high-water mark is below their size.
    pub scratch_unused: RuleReport,
    /// (f) loads from a red zone next to a buffer (red-zoned runs only).
    pub out_of_bounds_read: RuleReport,
    /// Use of each declared scratch buffer.
    pub scratch: Vec<ScratchUse>,
    /// How far the layer's stray writes reach beyond the declared buffers
    /// they lie nearest to: per buffer and side, the farthest of all of
    /// them (so "16 B past the end of `scratch`" for a scratch buffer
    /// declared 16 B smaller than the kernel uses).
    pub stray_reach: Vec<Nearest>,
    /// Writes outside the declared buffers made by the runtime around the
    /// kernel (e.g. TFLM's interpreter resetting its temporary allocations
    /// between operators): not the kernel's, so no violation.
    #[serde(skip_serializing_if = "is_zero")]
    pub runtime_writes: u64,
    /// The layer ran a kernel library (CMSIS-NN, the TFLM reference
    /// kernels), which sizes its own scratch buffers: bytes of them it never
    /// writes (CMSIS-NN pads each im2col column, older releases asked for
    /// buffers a kernel path does not use) are its padding. `scratch_unused`
    /// still reports them, as information: `ok` holds without that rule.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub library_scratch: bool,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl ContractReport {
    /// The rules with their JSON names, in the order (a) to (e).
    pub fn rules(&self) -> [(&'static str, &RuleReport); 6] {
        [
            ("stray_write", &self.stray_write),
            ("output_read_before_write", &self.output_read_before_write),
            ("input_write", &self.input_write),
            ("weights_write", &self.weights_write),
            ("scratch_unused", &self.scratch_unused),
            ("out_of_bounds_read", &self.out_of_bounds_read),
        ]
    }

    /// Takes the layer's unused scratch as its kernel library's own padding
    /// (see [`ContractReport::library_scratch`]): information, not a
    /// violation.
    pub fn excuse_library_scratch(&mut self) {
        self.library_scratch = !self.scratch_unused.ok;
        let ok = self.violated().next().is_none();
        self.ok = ok;
    }

    /// The rules this layer violates: every rule that does not hold, except
    /// unused scratch that its kernel library sized.
    pub fn violated(&self) -> impl Iterator<Item = (&'static str, &RuleReport)> {
        let excused = self.library_scratch;
        self.rules()
            .into_iter()
            .filter(move |(name, r)| !(r.ok || excused && *name == "scratch_unused"))
    }

    /// The first violations that have a PC (rules (a) to (d) and (f)).
    pub fn violations_with_pc(&self) -> impl Iterator<Item = &Violation> {
        [
            &self.stray_write,
            &self.output_read_before_write,
            &self.input_write,
            &self.weights_write,
            &self.out_of_bounds_read,
        ]
        .into_iter()
        .filter_map(|r| r.first.as_ref())
        .filter(|v| v.pc.is_some())
    }

    /// Mutable access to the first violations that have a PC.
    pub fn violations_with_pc_mut(&mut self) -> impl Iterator<Item = &mut Violation> {
        [
            &mut self.stray_write,
            &mut self.output_read_before_write,
            &mut self.input_write,
            &mut self.weights_write,
            &mut self.out_of_bounds_read,
        ]
        .into_iter()
        .filter_map(|r| r.first.as_mut())
        .filter(|v| v.pc.is_some())
    }
}

/// A set of byte offsets, as long as its highest offset: a buffer's
/// declared size comes from the guest, its accesses from what it really
/// touched.
#[derive(Default)]
struct Bits(Vec<u64>);

impl Bits {
    fn get(&self, i: u64) -> bool {
        self.0
            .get((i / 64) as usize)
            .is_some_and(|w| w >> (i % 64) & 1 == 1)
    }
    fn set(&mut self, i: u64) {
        let word = (i / 64) as usize;
        if word >= self.0.len() {
            self.0.resize(word + 1, 0);
        }
        self.0[word] |= 1 << (i % 64);
    }
    fn count(&self) -> u64 {
        self.0.iter().map(|w| w.count_ones() as u64).sum()
    }
}

/// A declared buffer and what the checks track of it.
struct Tracked {
    buffer: Buffer,
    /// Outputs and scratch: bytes written so far.
    bytes: Bits,
    /// Offsets `[start, end)` shared with a buffer of the other side of the
    /// input/output pair: exempt from rules (b) and (c).
    shared: Vec<(u64, u64)>,
    high_water: u64,
    /// Scratch: one past the highest byte written beyond the declared end.
    overrun: u64,
}

impl Tracked {
    fn is_shared(&self, offset: u64) -> bool {
        self.shared.iter().any(|&(s, e)| (s..e).contains(&offset))
    }
}

struct Current {
    report: ContractReport,
    buffers: Vec<Tracked>,
    /// buffer id -> index in `buffers`.
    slot: Vec<Option<usize>>,
}

/// Checks the memory contract of every traced layer. Rule (a) needs a trace
/// that watches stray writes (`TraceOptions::stray_writes`); without one it
/// reports none.
#[derive(Default)]
pub struct ContractCheck {
    current: Option<Current>,
    /// Finished layers, in order.
    pub layers: Vec<ContractReport>,
    /// Code ranges `[start, end)` of the runtime around the kernels: stray
    /// writes made there are counted as `runtime_writes`, not violations.
    runtime_code: Vec<(u64, u64)>,
}

impl ContractCheck {
    /// A check whose stray writes from the code ranges `runtime_code` (the
    /// runtime's own bookkeeping inside a layer's window) are no violation.
    pub fn with_runtime_code(runtime_code: Vec<(u64, u64)>) -> ContractCheck {
        ContractCheck {
            runtime_code,
            ..ContractCheck::default()
        }
    }
}

impl Current {
    fn event(&mut self, e: &Event) {
        let Some(Some(i)) = self.slot.get(e.buffer as usize) else {
            return;
        };
        let b = &mut self.buffers[*i];
        let (start, end) = (e.offset as u64, e.offset as u64 + e.size as u64);
        let violation = |b: &Tracked, offset: u64| Violation {
            pc: Some(e.pc),
            t: Some(e.t),
            buffer: Some(b.buffer.name.clone()),
            offset,
            size: end - offset,
            access: Some(e.kind),
            ..Violation::default()
        };
        let write = e.kind != AccessKind::Load;
        let r = &mut self.report;
        match b.buffer.role {
            Role::Output if write => (start..end).for_each(|o| b.bytes.set(o)),
            Role::Output => {
                if let Some(o) = (start..end).find(|&o| !b.bytes.get(o) && !b.is_shared(o)) {
                    r.output_read_before_write.add(|| violation(b, o));
                }
            }
            Role::Input if write => {
                if let Some(o) = (start..end).find(|&o| !b.is_shared(o)) {
                    r.input_write.add(|| violation(b, o));
                }
            }
            Role::Weights | Role::Bias if write => r.weights_write.add(|| violation(b, start)),
            Role::Scratch if write => {
                (start..end).for_each(|o| b.bytes.set(o));
                b.high_water = b.high_water.max(end);
            }
            Role::RedZone if !write => {
                let address = b.buffer.base + start;
                let nearest = Nearest::of(
                    self.buffers
                        .iter()
                        .map(|t| &t.buffer)
                        .filter(|b| b.role != Role::RedZone),
                    address,
                    end - start,
                );
                self.report.out_of_bounds_read.add(|| Violation {
                    pc: Some(e.pc),
                    t: Some(e.t),
                    address: Some(address),
                    size: end - start,
                    access: Some(e.kind),
                    nearest,
                    ..Violation::default()
                });
            }
            _ => {}
        }
    }

    /// Counts a stray write whose nearest buffer is a scratch buffer it
    /// follows, within that buffer's declared size again, as its overrun: the
    /// kernel using more scratch than declared. A write farther away is not.
    fn note_overrun(&mut self, nearest: &Nearest) {
        let Some(t) = self
            .buffers
            .iter_mut()
            .find(|t| t.buffer.role == Role::Scratch && t.buffer.name == nearest.buffer)
        else {
            return;
        };
        let window = (t.buffer.size as u64).max(16);
        if nearest.side == Side::AfterEnd && nearest.bytes <= window {
            t.overrun = t.overrun.max(nearest.bytes);
        }
    }

    /// Recomputes which bytes inputs and outputs share.
    fn share(&mut self) {
        let io = |r: Role| matches!(r, Role::Input | Role::Output);
        let spans: Vec<(Role, u64, u64)> = self
            .buffers
            .iter()
            .map(|t| {
                let b = &t.buffer;
                (b.role, b.base, b.base + b.size as u64)
            })
            .collect();
        for t in self.buffers.iter_mut().filter(|t| io(t.buffer.role)) {
            let (base, end) = (t.buffer.base, t.buffer.base + t.buffer.size as u64);
            t.shared = spans
                .iter()
                .filter(|(role, _, _)| io(*role) && *role != t.buffer.role)
                .filter_map(|&(_, s, e)| {
                    let (lo, hi) = (s.max(base), e.min(end));
                    (lo < hi).then(|| (lo - base, hi - base))
                })
                .collect();
        }
    }
}

impl Analysis for ContractCheck {
    fn layer_begin(&mut self, layer: &LayerInfo) {
        self.current = Some(Current {
            report: ContractReport {
                index: layer.index,
                ok: true,
                stray_write: RuleReport::clean(),
                output_read_before_write: RuleReport::clean(),
                input_write: RuleReport::clean(),
                weights_write: RuleReport::clean(),
                scratch_unused: RuleReport::clean(),
                out_of_bounds_read: RuleReport::clean(),
                scratch: Vec::new(),
                stray_reach: Vec::new(),
                runtime_writes: 0,
                library_scratch: false,
            },
            buffers: Vec::new(),
            slot: Vec::new(),
        });
    }

    fn buffer(&mut self, buffer: &Buffer) {
        let Some(cur) = self.current.as_mut() else {
            return;
        };
        let id = buffer.id as usize;
        if cur.slot.len() <= id {
            cur.slot.resize(id + 1, None);
        }
        cur.slot[id] = Some(cur.buffers.len());
        cur.buffers.push(Tracked {
            bytes: Bits::default(),
            buffer: buffer.clone(),
            shared: Vec::new(),
            high_water: 0,
            overrun: 0,
        });
        cur.share();
    }

    fn events(&mut self, events: &[Event]) {
        if let Some(cur) = self.current.as_mut() {
            events.iter().for_each(|e| cur.event(e));
        }
    }

    fn stray_write(&mut self, w: &StrayWrite) {
        let runtime = self
            .runtime_code
            .iter()
            .any(|&(lo, hi)| (lo..hi).contains(&w.pc));
        if let Some(cur) = self.current.as_mut() {
            if runtime {
                cur.report.runtime_writes += 1;
                return;
            }
            let declared = cur
                .buffers
                .iter()
                .map(|t| &t.buffer)
                .filter(|b| b.role != Role::RedZone);
            let nearest = Nearest::of(declared, w.address, w.size as u64);
            if let Some(n) = &nearest {
                cur.note_overrun(n);
                let reach = &mut cur.report.stray_reach;
                match reach
                    .iter_mut()
                    .find(|r| r.buffer == n.buffer && r.side == n.side)
                {
                    Some(r) => r.bytes = r.bytes.max(n.bytes),
                    None => reach.push(n.clone()),
                }
            }
            cur.report.stray_write.add(|| Violation {
                pc: Some(w.pc),
                t: Some(w.t),
                address: Some(w.address),
                size: w.size as u64,
                access: Some(AccessKind::Store),
                nearest,
                return_addresses: w.callers.clone(),
                ..Violation::default()
            });
        }
    }

    fn layer_end(&mut self, _instructions: u64) {
        let Some(mut cur) = self.current.take() else {
            return;
        };
        for t in cur
            .buffers
            .iter()
            .filter(|t| t.buffer.role == Role::Scratch)
        {
            let declared = t.buffer.size as u64;
            cur.report.scratch.push(ScratchUse {
                buffer: t.buffer.name.clone(),
                declared_bytes: declared,
                high_water_bytes: t.high_water,
                written_bytes: t.bytes.count(),
                overrun_bytes: t.overrun,
            });
            if t.high_water < declared {
                cur.report.scratch_unused.add(|| Violation {
                    buffer: Some(t.buffer.name.clone()),
                    offset: t.high_water,
                    size: declared - t.high_water,
                    ..Violation::default()
                });
            }
        }
        let r = &mut cur.report;
        r.ok = r.rules().iter().all(|(_, rule)| rule.ok);
        self.layers.push(cur.report);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buffer(id: u32, role: Role, base: u64, size: u32) -> Buffer {
        Buffer {
            id,
            role,
            name: format!("b{id}"),
            base,
            size,
            elem_size: 1,
        }
    }

    fn event(buffer: u32, offset: u32, size: u32, kind: AccessKind) -> Event {
        Event {
            t: offset as u64,
            seq: 0,
            pc: 0x100 + offset as u64,
            buffer,
            offset,
            size,
            kind,
        }
    }

    fn layer(buffers: &[Buffer], events: &[Event]) -> ContractReport {
        let mut c = ContractCheck::default();
        c.layer_begin(&LayerInfo {
            index: 0,
            name: "l".into(),
            op: "custom".into(),
            params: String::new(),
            spec: None,
        });
        buffers.iter().for_each(|b| c.buffer(b));
        c.events(events);
        c.layer_end(0);
        c.layers.pop().unwrap()
    }

    #[test]
    fn a_kernel_that_reads_only_what_it_wrote_is_clean() {
        let r = layer(
            &[
                buffer(0, Role::Input, 0, 8),
                buffer(1, Role::Output, 100, 8),
                buffer(2, Role::Scratch, 200, 4),
            ],
            &[
                event(0, 0, 8, AccessKind::Load),
                event(2, 0, 4, AccessKind::Store),
                event(1, 0, 8, AccessKind::Store),
                event(1, 4, 4, AccessKind::Load),
                event(1, 4, 4, AccessKind::Update),
            ],
        );
        assert!(r.ok, "{r:?}");
        assert_eq!(r.scratch[0].high_water_bytes, 4);
    }

    #[test]
    fn each_rule_reports_its_first_violation_and_counts_all() {
        let r = layer(
            &[
                buffer(0, Role::Input, 0, 8),
                buffer(1, Role::Output, 100, 8),
                buffer(2, Role::Weights, 200, 8),
                buffer(3, Role::Bias, 300, 8),
                buffer(4, Role::Scratch, 400, 16),
            ],
            &[
                event(1, 0, 2, AccessKind::Store),
                event(1, 1, 2, AccessKind::Load),
                event(1, 6, 1, AccessKind::Load),
                event(0, 3, 1, AccessKind::Store),
                event(2, 5, 2, AccessKind::Store),
                event(3, 0, 4, AccessKind::Update),
                event(4, 2, 2, AccessKind::Store),
                event(4, 10, 2, AccessKind::Load),
            ],
        );
        assert!(!r.ok);
        let b = r.output_read_before_write.first.as_ref().unwrap();
        assert_eq!((b.offset, b.size, b.pc), (2, 1, Some(0x101)));
        assert_eq!(r.output_read_before_write.violations, 2);
        let c = r.input_write.first.as_ref().unwrap();
        assert_eq!((c.buffer.as_deref(), c.offset, c.size), (Some("b0"), 3, 1));
        assert_eq!(r.weights_write.violations, 2);
        let e = r.scratch_unused.first.as_ref().unwrap();
        assert_eq!((e.offset, e.size, e.pc), (4, 12, None));
        assert_eq!(r.scratch[0].written_bytes, 2);
        assert!(r.stray_write.ok);
    }

    #[test]
    fn bytes_an_input_shares_with_the_output_are_exempt() {
        // DMO: the input's first half lies over the output's second half.
        let r = layer(
            &[
                buffer(0, Role::Input, 104, 8),
                buffer(1, Role::Output, 100, 8),
            ],
            &[
                event(1, 4, 4, AccessKind::Load),
                event(0, 0, 4, AccessKind::Load),
                event(1, 4, 4, AccessKind::Store),
                event(0, 0, 4, AccessKind::Store),
            ],
        );
        assert!(r.ok, "{r:?}");
        let r = layer(
            &[
                buffer(0, Role::Input, 104, 8),
                buffer(1, Role::Output, 100, 8),
            ],
            &[
                event(1, 3, 2, AccessKind::Load),
                event(0, 4, 1, AccessKind::Store),
            ],
        );
        assert_eq!(r.output_read_before_write.first.unwrap().offset, 3);
        assert_eq!(r.input_write.first.unwrap().offset, 4);
    }

    #[test]
    fn stray_writes_are_counted() {
        let mut c = ContractCheck::default();
        c.layer_begin(&LayerInfo {
            index: 3,
            name: "l".into(),
            op: "custom".into(),
            params: String::new(),
            spec: None,
        });
        for pc in [0x10, 0x20] {
            c.stray_write(&StrayWrite {
                t: 1,
                pc,
                address: 0x2000,
                size: 4,
                callers: Vec::new(),
            });
        }
        c.layer_end(0);
        let r = &c.layers[0];
        assert_eq!((r.index, r.stray_write.violations), (3, 2));
        let v = r.stray_write.first.as_ref().unwrap();
        assert_eq!((v.pc, v.address, v.size), (Some(0x10), Some(0x2000), 4));
    }

    #[test]
    fn a_stray_write_names_the_nearest_buffer_and_how_far_it_reaches() {
        let buffers = [
            buffer(0, Role::Input, 0x100, 0x40),
            buffer(1, Role::Output, 0x200, 10),
            buffer(2, Role::Scratch, 0x300, 128),
        ];
        let near = |address, size| Nearest::of(&buffers, address, size).unwrap().describe();
        // One byte just after the output: the classic off-by-one.
        assert_eq!(near(0x20a, 1), "1 B past the end of `b1`");
        // A word 12 B after the scratch: it reaches 16 B past its end.
        assert_eq!(near(0x38c, 4), "16 B past the end of `b2`");
        // Before the input's start, and nearer to it than to anything else.
        assert_eq!(near(0xf0, 4), "16 B before the start of `b0`");
        // Between two buffers: the nearer one (the output ends 6 B before).
        assert_eq!(near(0x210, 2), "8 B past the end of `b1`");
        assert!(Nearest::of(&[], 0, 1).is_none());
    }

    #[test]
    fn the_layer_keeps_the_farthest_reach_of_its_stray_writes() {
        let mut c = ContractCheck::default();
        c.layer_begin(&LayerInfo {
            index: 0,
            name: "conv".into(),
            op: "conv2d".into(),
            params: String::new(),
            spec: None,
        });
        c.buffer(&buffer(4, Role::Scratch, 0x1000, 128));
        for offset in [0, 4, 8, 12] {
            c.stray_write(&StrayWrite {
                t: offset,
                pc: 0x10,
                address: 0x1080 + offset,
                size: 4,
                callers: vec![0x2000, 0x3000],
            });
        }
        c.layer_end(0);
        let r = &c.layers[0];
        let first = r.stray_write.first.as_ref().unwrap();
        assert_eq!(
            first.nearest.as_ref().unwrap().describe(),
            "4 B past the end of `b4`"
        );
        assert_eq!(first.return_addresses, vec![0x2000, 0x3000]);
        assert_eq!(r.stray_write.violations, 4);
        assert_eq!(r.stray_reach.len(), 1);
        assert_eq!(r.stray_reach[0].describe(), "16 B past the end of `b4`");
    }

    #[test]
    fn described_callers_stop_at_the_first_frame_of_the_program() {
        let site = |function: &str, path: &str, line| {
            let mut short: Vec<&str> = path.rsplit('/').take(2).collect();
            short.reverse();
            CallSite {
                function: Some(function.into()),
                file: Some(short.join("/")),
                line: Some(line),
                path: Some(path.into()),
            }
        };
        let v = Violation {
            pc: Some(0x80),
            function: Some("memcpy".into()),
            file: Some("rt/libc_shims.c".into()),
            line: Some(26),
            address: Some(0x20101000),
            size: 4,
            access: Some(AccessKind::Store),
            nearest: Some(Nearest {
                buffer: "scratch".into(),
                side: Side::AfterEnd,
                bytes: 4,
            }),
            callers: vec![
                site(
                    "arm_memcpy_s8",
                    "/x/cmsis-nn/Include/arm_nnsupportfunctions.h",
                    1635,
                ),
                site(
                    "arm_convolve_s8",
                    "/x/cmsis-nn/Source/arm_convolve_s8.c",
                    202,
                ),
                site("run_conv", "/home/me/net/net.c", 61),
                site("main", "/home/me/net/net.c", 99),
            ],
            ..Violation::default()
        };
        assert_eq!(
            v.describe(),
            "4 B store to 0x20101000, 4 B past the end of `scratch`, at 0x80 memcpy \
             (rt/libc_shims.c:26), called from `arm_memcpy_s8` (Include/arm_nnsupportfunctions.h:1635), \
             from `arm_convolve_s8` (Source/arm_convolve_s8.c:202), from `run_conv` (net/net.c:61)"
        );
        // The table's summary leaves the callers out.
        assert!(!v.summary().contains("called from"));
    }

    #[test]
    fn stray_writes_of_the_runtime_are_counted_apart() {
        let mut c = ContractCheck::with_runtime_code(vec![(0x100, 0x200)]);
        c.layer_begin(&LayerInfo {
            index: 0,
            name: "l".into(),
            op: "CONV_2D".into(),
            params: String::new(),
            spec: None,
        });
        for pc in [0x100, 0x1ff, 0x200] {
            c.stray_write(&StrayWrite {
                t: 1,
                pc,
                address: 0x2000,
                size: 4,
                callers: Vec::new(),
            });
        }
        c.layer_end(0);
        let r = &c.layers[0];
        assert_eq!(r.runtime_writes, 2);
        assert_eq!(r.stray_write.violations, 1, "0x200 is past the range");
        assert_eq!(r.stray_write.first.as_ref().unwrap().pc, Some(0x200));
    }

    #[test]
    fn stray_writes_continuing_a_scratch_buffer_are_its_overrun() {
        let mut c = ContractCheck::default();
        c.layer_begin(&LayerInfo {
            index: 0,
            name: "l".into(),
            op: "conv2d".into(),
            params: String::new(),
            spec: None,
        });
        // 32 B declared at 0x1000; the kernel fills it and 16 B more, then
        // writes somewhere unrelated (0x5000), which is no overrun.
        c.buffer(&buffer(0, Role::Scratch, 0x1000, 32));
        c.events(&[event(0, 0, 32, AccessKind::Store)]);
        for (address, size) in [(0x1020, 8), (0x1028, 8), (0x5000, 4)] {
            c.stray_write(&StrayWrite {
                t: 1,
                pc: 0x10,
                address,
                size,
                callers: Vec::new(),
            });
        }
        c.layer_end(0);
        let r = &c.layers[0];
        assert_eq!(r.stray_write.violations, 3);
        let s = &r.scratch[0];
        assert_eq!((s.declared_bytes, s.high_water_bytes), (32, 32));
        assert_eq!((s.overrun_bytes, s.used_bytes()), (16, 48));
    }
}
