//! A layer window in an unmodified program: what a CMSIS-NN API call
//! (`calls.rs`) and a TFLM operator invocation (`tflm_ops.rs`) share once
//! they have found their buffers. The window opens at a function's entry
//! and closes when it returns (the block at its return address, with the
//! stack pointer of its entry); in between every guest access is
//! classified: an access to a buffer becomes load, store or update events,
//! a write elsewhere outside the callee's own stack a stray write, and,
//! when the opener asks for it, a read of the program's data outside the
//! buffers and argument structures a stray read. The same [`Message`]s a
//! marked program's layer makes go to the caller's analyses (counts, O_s,
//! the memory contract), in program order.
//!
//! One window at a time: a function the open one calls belongs to it (a
//! wrapper's kernel, an LSTM's elementwise and activation kernels, an
//! operator's CMSIS-NN calls), and the API functions entered while it is
//! open are counted as its inner calls.

use std::sync::Arc;

use unicorn_engine::{HookType, MemType, RegisterARM};

use memtrace_abi::event::STRAY_WRITES_UNWOUND;
use memtrace_abi::event::{AccessKind, Buffer, Event, LayerInfo, Message, Role, StrayWrite};
use memtrace_abi::spec::LayerSpec;

use super::{reg, stack_here, Layout, Uc};
use crate::arch::Machine;
use crate::machine::emulator_error;

/// Events per message.
const BATCH: usize = 8192;

/// Where the layers' messages go.
pub type Sink<'i> = &'i mut dyn FnMut(Message);

/// One buffer of a layer, as a `memtrace.h` layer declares it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct LayerBuffer {
    pub role: Role,
    pub name: String,
    pub base: u64,
    pub size: u64,
    pub elem_size: u32,
}

/// An API function of the table called inside another layer's window (a
/// wrapper's kernel, an LSTM's elementwise kernels, an operator's CMSIS-NN
/// calls): no layer of its own, its accesses are the enclosing layer's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InnerCall {
    /// The API function.
    pub function: &'static str,
    /// How often it was entered inside the window.
    pub calls: u64,
}

/// Who opened a window: the index of its record in `calls.rs` or
/// `tflm_ops.rs`, which learns at the close what the window saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Owner {
    /// A CMSIS-NN API call.
    Call(usize),
    /// A TFLM operator invocation.
    Operator(usize),
}

/// Loads that read the program's data outside a window's buffers: its data
/// objects, the heap, the caller's stack. An API call is given everything
/// it may read in its arguments; a TFLM operator reads its node, its
/// operator data and the interpreter's structures by design, so its
/// windows watch no reads.
#[derive(Clone, Debug)]
pub(super) struct ReadWatch {
    /// The program's data objects (`[start, end)`, sorted) whose reads are
    /// stray.
    pub objects: Arc<[(u64, u64)]>,
    /// `(address, bytes)` of the argument structures: read, never stray.
    pub structs: Vec<(u64, u64)>,
    /// Stray reads counted.
    pub count: u64,
    /// The first: PC, address, bytes.
    pub first: Option<(u64, u64, u64)>,
}

impl ReadWatch {
    fn in_object(&self, address: u64) -> bool {
        let i = self.objects.partition_point(|&(s, _)| s <= address);
        i > 0 && address < self.objects[i - 1].1
    }
}

/// A window to open: the layer and where its function returns.
pub(super) struct Window {
    pub owner: Owner,
    pub name: String,
    pub op: String,
    pub params: String,
    pub spec: Option<LayerSpec>,
    pub buffers: Vec<LayerBuffer>,
    /// The function's return address (Thumb bit cleared).
    pub return_pc: u64,
    /// The stack pointer at its entry.
    pub entry_sp: u64,
    /// The end of its stack arguments: the callee's to read and write
    /// (AAPCS), with all of the stack below its entry.
    pub stack_arguments: u64,
    pub reads: Option<ReadWatch>,
    /// `[start, end)` of memory the function owns besides its buffers (a
    /// TFLM kernel's persistent op data): its writes there are counted,
    /// no stray writes.
    pub owned: Vec<(u64, u64)>,
}

struct Declared {
    buffer: LayerBuffer,
    id: u32,
    written: Vec<u64>,
}

struct OpenLayer {
    owner: Owner,
    return_pc: u64,
    entry_sp: u64,
    stack_arguments: u64,
    t0: u64,
    seq: u64,
    buffers: Vec<Declared>,
    reads: Option<ReadWatch>,
    hook: Option<unicorn_engine::UcHookId>,
    unwound: u32,
    inner: Vec<InnerCall>,
    owned: Vec<(u64, u64)>,
    owned_writes: u64,
    /// The bytes past a buffer the last copy entered was found to write
    /// (`copy_entered`): its stores there are that stray write's.
    copy_overrun: Option<(u64, u64)>,
}

/// What a window saw, handed to its owner at the close.
pub(super) struct Closed {
    pub owner: Owner,
    pub instructions: u64,
    /// The program ended inside it.
    pub unfinished: bool,
    pub reads: Option<ReadWatch>,
    /// The API functions entered inside it, in order of their first call.
    pub inner_calls: Vec<InnerCall>,
    /// Stores to the memory it owns besides its buffers.
    pub owned_writes: u64,
}

/// The layers of one run: where their messages go, the next index, the
/// open window.
pub(super) struct Layers<'i> {
    sink: Sink<'i>,
    next: usize,
    batch: Vec<Event>,
    open: Option<OpenLayer>,
}

impl<'i> Layers<'i> {
    pub(super) fn new(sink: Sink<'i>) -> Layers<'i> {
        Layers {
            sink,
            next: 0,
            batch: Vec::with_capacity(BATCH),
            open: None,
        }
    }

    /// The index the next window gets.
    pub(super) fn next_index(&self) -> usize {
        self.next
    }

    fn flush(&mut self) {
        if !self.batch.is_empty() {
            let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH));
            (self.sink)(Message::Events(batch));
        }
    }
}

/// Whether a window is open.
pub(super) fn is_open(uc: &Uc<'_, '_>) -> bool {
    uc.get_data()
        .layers
        .as_ref()
        .is_some_and(|l| l.open.is_some())
}

/// Counts an entry of the API function `function` inside the open window
/// (its accesses are already the window's); `false` when none is open.
pub(super) fn inner_call(uc: &mut Uc<'_, '_>, function: &'static str) -> bool {
    let Some(open) = uc
        .get_data_mut()
        .layers
        .as_mut()
        .and_then(|l| l.open.as_mut())
    else {
        return false;
    };
    match open.inner.iter_mut().find(|c| c.function == function) {
        Some(c) => c.calls += 1,
        None => open.inner.push(InnerCall { function, calls: 1 }),
    }
    true
}

/// Opens `window` at the instruction `t0` instructions into the run: the
/// layer's begin and buffers go to the sink, and every access is watched
/// until it closes. Returns the layer's index; `None` when a window is
/// already open or the run traces no layers.
pub(super) fn open(uc: &mut Uc<'_, '_>, window: Window, t0: u64, pc: u64) -> Option<usize> {
    let layers = uc.get_data_mut().layers.as_mut()?;
    if layers.open.is_some() {
        return None;
    }
    let index = layers.next;
    layers.next += 1;
    (layers.sink)(Message::LayerBegin(LayerInfo {
        index,
        name: window.name,
        op: window.op,
        params: window.params,
        spec: window.spec,
    }));
    let mut buffers = Vec::new();
    for (id, b) in window.buffers.into_iter().enumerate() {
        (layers.sink)(Message::BufferDeclared(Buffer {
            id: id as u32,
            role: b.role,
            name: b.name.clone(),
            base: b.base,
            size: b.size as u32,
            elem_size: b.elem_size,
        }));
        buffers.push(Declared {
            written: vec![0; (b.size as usize).div_ceil(64)],
            id: id as u32,
            buffer: b,
        });
    }
    layers.open = Some(OpenLayer {
        owner: window.owner,
        return_pc: window.return_pc,
        entry_sp: window.entry_sp,
        stack_arguments: window.stack_arguments,
        t0,
        seq: 0,
        buffers,
        reads: window.reads,
        hook: None,
        unwound: 0,
        inner: Vec::new(),
        owned: window.owned,
        owned_writes: 0,
        copy_overrun: None,
    });
    match uc.add_mem_hook(HookType::MEM_READ | HookType::MEM_WRITE, 1, 0, on_access) {
        Ok(h) => {
            if let Some(open) = uc
                .get_data_mut()
                .layers
                .as_mut()
                .and_then(|l| l.open.as_mut())
            {
                open.hook = Some(h);
            }
        }
        Err(e) => {
            let message = emulator_error("hooking a layer's accesses", e).to_string();
            super::stop(uc, super::StopKind::Fault, message, pc);
        }
    }
    Some(index)
}

/// Buffers a layer may declare: inside the guest's mapped memory
/// `memory` (`[start, end)` ranges) and sized to fit a `u32`, and
/// overlapping none other but an input its output (the protocol's rule) or
/// a buffer the layer only reads another it only reads. A buffer outside
/// memory makes the layer none (`Err`, why): its sizes come from the
/// guest's arguments, and the analyses allocate in proportion to them. A
/// buffer that overlaps is dropped, and said why: one array passed as two
/// arguments, or shapes that make a buffer reach into the next array (its
/// accesses there are then stray).
pub(super) fn declarable(
    mut buffers: Vec<LayerBuffer>,
    memory: &[(u64, u64)],
) -> Result<(Vec<LayerBuffer>, Vec<String>), String> {
    if let Some(why) = buffers.iter().find_map(|b| outside_memory(b, memory)) {
        return Err(why);
    }
    let mut kept: Vec<LayerBuffer> = Vec::new();
    let mut dropped = Vec::new();
    // Activations first, scratch last: a clash drops the less telling one.
    let rank = |r: Role| match r {
        Role::Input | Role::Output => 0,
        Role::Weights | Role::Bias => 1,
        Role::Scratch | Role::Persistent => 2,
        Role::RedZone => 3,
    };
    buffers.sort_by_key(|b| rank(b.role));
    for mut b in buffers {
        clip_scratch(&mut b, &kept);
        if b.size > u32::MAX as u64 {
            return Err(format!("buffer `{}` of {} B is too large", b.name, b.size));
        }
        // An input may overlap the output (DMO places them so), and
        // buffers the layer only reads may overlap each other.
        let read_only = |r: Role| matches!(r, Role::Input | Role::Weights | Role::Bias);
        let io = |a: Role, b: Role| {
            matches!(
                (a, b),
                (Role::Input, Role::Output) | (Role::Output, Role::Input)
            ) || read_only(a) && read_only(b)
        };
        let clash = kept
            .iter()
            .find(|k| b.base < k.base + k.size && k.base < b.base + b.size && !io(b.role, k.role));
        match clash {
            Some(k) => dropped.push(format!(
                "`{}` [{:#x}, {:#x}) overlaps `{}` [{:#x}, {:#x})",
                b.name,
                b.base,
                b.base + b.size,
                k.name,
                k.base,
                k.base + k.size
            )),
            None => kept.push(b),
        }
    }
    Ok((kept, dropped))
}

/// A scratch buffer that holds the start of a buffer already kept ends
/// there: its size came from the heap block it lies in (callers leave
/// `ctx.size` unset), and a block may hold the scratch, then the output.
fn clip_scratch(b: &mut LayerBuffer, kept: &[LayerBuffer]) {
    if b.role != Role::Scratch {
        return;
    }
    let end = b.base + b.size;
    if let Some(next) = kept
        .iter()
        .map(|k| k.base)
        .filter(|&k| b.base < k && k < end)
        .min()
    {
        b.size = next - b.base;
    }
}

/// Why `b` is no buffer of the guest memory `memory` (mapped `[start,
/// end)` ranges): it wraps past the 32-bit address space, holds more bytes
/// than the guest has, or is not inside one mapped range.
fn outside_memory(b: &LayerBuffer, memory: &[(u64, u64)]) -> Option<String> {
    let mapped: u64 = memory.iter().map(|(s, e)| e - s).sum();
    let end = b.base.checked_add(b.size).filter(|&e| e <= 1 << 32);
    let why = match end {
        _ if b.size > mapped => {
            format!("is larger than the guest's memory ({mapped} B mapped)")
        }
        None => "wraps past the end of the 32-bit address space".to_owned(),
        Some(end) if !memory.iter().any(|&(s, e)| s <= b.base && end <= e) => {
            "is not inside the guest's mapped memory (its segments, heap and stack)".to_owned()
        }
        Some(_) => return None,
    };
    Some(format!(
        "`{}` ({} B at {:#x}) {why}",
        b.name, b.size, b.base
    ))
}

/// A block start: the open window closes when the block is its return
/// address and the stack is back where it was at the entry.
pub(super) fn returning(uc: &Uc<'_, '_>, address: u64) -> bool {
    uc.get_data()
        .layers
        .as_ref()
        .and_then(|l| l.open.as_ref())
        .is_some_and(|o| o.return_pc == address && reg(uc, RegisterARM::SP) == o.entry_sp)
}

/// Ends the open window at `pc` (`unfinished`: the program ended inside
/// it): what it saw, for its owner.
pub(super) fn close(uc: &mut Uc<'_, '_>, pc: u64, unfinished: bool) -> Option<Closed> {
    let now = uc.get_data().clock.now(pc);
    let layers = uc.get_data_mut().layers.as_mut()?;
    let open = layers.open.take()?;
    layers.flush();
    let instructions = now.saturating_sub(open.t0);
    (layers.sink)(Message::LayerEnd { instructions });
    if let Some(h) = open.hook {
        let _ = uc.remove_hook(h);
    }
    Some(Closed {
        owner: open.owner,
        instructions,
        unfinished,
        reads: open.reads,
        inner_calls: open.inner,
        owned_writes: open.owned_writes,
    })
}

fn on_access(uc: &mut Uc<'_, '_>, kind: MemType, address: u64, size: usize, _value: i64) -> bool {
    let pc = uc.pc_read().unwrap_or(0);
    let write = kind == MemType::WRITE;
    let now = uc.get_data().clock.now(pc);
    let layout = uc.get_data().layout;
    let stray = {
        let Some(layers) = uc.get_data_mut().layers.as_mut() else {
            return true;
        };
        record(layers, pc, now, write, address, size as u64, &layout)
    };
    if let Some((at, n)) = stray {
        let unwind = uc
            .get_data()
            .layers
            .as_ref()
            .and_then(|l| l.open.as_ref())
            .is_some_and(|o| o.unwound < STRAY_WRITES_UNWOUND);
        let callers = if unwind {
            stack_here(uc, pc).returns
        } else {
            Vec::new()
        };
        if let Some(layers) = uc.get_data_mut().layers.as_mut() {
            let t = layers.open.as_mut().map_or(0, |o| {
                o.unwound += unwind as u32;
                now.saturating_sub(o.t0)
            });
            layers.flush();
            (layers.sink)(Message::StrayWrite(StrayWrite {
                t,
                pc,
                address: at,
                size: n as u32,
                callers,
            }));
        }
    }
    let arch = uc.get_data().image.arch;
    arch.clear_stale_it_state(uc);
    true
}

/// A copy function entered inside the open window to write `[dst,
/// dst+n)`: a destination that starts in a declared buffer and runs past
/// its end overruns that buffer by exactly the bytes past it, whatever lies
/// there (the next buffer of one heap block, a gap): one stray write of
/// those bytes at the copy's entry `pc`, with its callers. The copy's own
/// stores there are then not reported again.
pub(super) fn copy_entered(uc: &mut Uc<'_, '_>, pc: u64, (dst, n): (u64, u64)) {
    let crossing = {
        let Some(open) = uc
            .get_data_mut()
            .layers
            .as_mut()
            .and_then(|l| l.open.as_mut())
        else {
            return;
        };
        open.copy_overrun = None;
        open.buffers.iter().find_map(|d| {
            let end = d.buffer.base + d.buffer.size;
            let last = dst.checked_add(n)?;
            ((d.buffer.base..end).contains(&dst) && last > end).then_some((end, last))
        })
    };
    let Some((first, last)) = crossing else {
        return;
    };
    let callers = stack_here(uc, pc).returns;
    let now = uc.get_data().clock.now(pc);
    if let Some(layers) = uc.get_data_mut().layers.as_mut() {
        let Some(open) = layers.open.as_mut() else {
            return;
        };
        open.copy_overrun = Some((first, last));
        let t = now.saturating_sub(open.t0);
        layers.flush();
        (layers.sink)(Message::StrayWrite(StrayWrite {
            t,
            pc,
            address: first,
            size: (last - first).min(u32::MAX as u64) as u32,
            callers,
        }));
    }
}

/// One access of the open window: its events; a write's bytes outside
/// every buffer and the callee's stack as `(address, bytes)` (a stray
/// write); a stray read counted.
fn record(
    layers: &mut Layers<'_>,
    pc: u64,
    now: u64,
    write: bool,
    address: u64,
    size: u64,
    layout: &Layout,
) -> Option<(u64, u64)> {
    let open = layers.open.as_mut()?;
    let t = now.saturating_sub(open.t0);
    let end = address + size;
    let mut covered = 0u64;
    for d in &mut open.buffers {
        let (base, stop) = (d.buffer.base, d.buffer.base + d.buffer.size);
        let (lo, hi) = (address.max(base), end.min(stop));
        if lo >= hi {
            continue;
        }
        covered += hi - lo;
        push_events(
            &mut layers.batch,
            &mut open.seq,
            d,
            (lo - base) as u32,
            (hi - base) as u32,
            write,
            t,
            pc,
        );
    }
    let callee_stack = (layout.stack.0..open.stack_arguments).contains(&address);
    let outside = covered < size && !callee_stack;
    let mut stray = None;
    if outside && write {
        // The first byte no buffer holds and the function does not own, to
        // the end of the access.
        let held = |a: u64| {
            open.buffers
                .iter()
                .any(|d| (d.buffer.base..d.buffer.base + d.buffer.size).contains(&a))
        };
        let owned = |a: u64| open.owned.iter().any(|&(s, e)| (s..e).contains(&a));
        let announced = open
            .copy_overrun
            .is_some_and(|(lo, hi)| lo <= address && end <= hi);
        match (address..end).find(|&a| !held(a) && !owned(a)) {
            Some(_) if announced => {}
            Some(first) => stray = Some((first, end - first)),
            None => open.owned_writes += 1,
        }
    } else if let (true, Some(watch)) = (outside, open.reads.as_mut()) {
        let in_struct = watch
            .structs
            .iter()
            .any(|&(s, n)| address < s + n && s < end);
        let caller_stack = (open.stack_arguments..layout.stack.1).contains(&address);
        let heap = (layout.heap.0..layout.heap.1).contains(&address);
        let reads_data = !in_struct && (caller_stack || heap || watch.in_object(address));
        if reads_data {
            watch.count += 1;
            watch.first.get_or_insert((pc, address, size));
        }
    }
    if layers.batch.len() >= BATCH {
        layers.flush();
    }
    stray
}

/// The events of bytes `[first, last)` of buffer `d`: a load, or stores of
/// bytes the window has not written yet and updates of those it has.
#[allow(clippy::too_many_arguments)]
fn push_events(
    batch: &mut Vec<Event>,
    seq: &mut u64,
    d: &mut Declared,
    first: u32,
    last: u32,
    write: bool,
    t: u64,
    pc: u64,
) {
    let mut push = |offset: u32, end: u32, kind| {
        batch.push(Event {
            t,
            seq: *seq,
            pc,
            buffer: d.id,
            offset,
            size: end - offset,
            kind,
        });
        *seq += 1;
    };
    if !write {
        push(first, last, AccessKind::Load);
        return;
    }
    let is_set = |bits: &[u64], i: u32| bits[(i / 64) as usize] >> (i % 64) & 1 == 1;
    let mut start = first;
    while start < last {
        let written = is_set(&d.written, start);
        let mut end = start + 1;
        while end < last && is_set(&d.written, end) == written {
            end += 1;
        }
        let kind = if written {
            AccessKind::Update
        } else {
            AccessKind::Store
        };
        push(start, end, kind);
        start = end;
    }
    for i in first..last {
        d.written[(i / 64) as usize] |= 1 << (i % 64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An open window with one 16-byte buffer at 0x1000 and 32 owned bytes
    /// at 0x2000, its messages dropped.
    fn window_with_owned_memory(sink: Sink<'_>) -> Layers<'_> {
        let mut layers = Layers::new(sink);
        layers.open = Some(OpenLayer {
            owner: Owner::Operator(0),
            return_pc: 0,
            entry_sp: 0,
            stack_arguments: 0x9000,
            t0: 0,
            seq: 0,
            buffers: vec![Declared {
                buffer: LayerBuffer {
                    role: Role::Output,
                    name: "output".into(),
                    base: 0x1000,
                    size: 16,
                    elem_size: 1,
                },
                id: 0,
                written: vec![0],
            }],
            reads: None,
            hook: None,
            unwound: 0,
            inner: Vec::new(),
            owned: vec![(0x2000, 0x2020)],
            owned_writes: 0,
            copy_overrun: None,
        });
        layers
    }

    fn buffer(name: &str, base: u64, size: u64) -> LayerBuffer {
        LayerBuffer {
            role: Role::Input,
            name: name.into(),
            base,
            size,
            elem_size: 1,
        }
    }

    #[test]
    fn a_buffer_outside_guest_memory_makes_no_layer_and_says_why() {
        // 64 KiB of segments and 1 MiB of heap and stack.
        let memory = [(0x0, 0x1_0000), (0x2000_0000, 0x2010_0000)];
        let why = |b| declarable(vec![b], &memory).unwrap_err();
        let huge = why(buffer("input", 0x2000_0000, u32::MAX as u64));
        assert!(huge.contains("`input` (4294967295 B at 0x20000000) is larger than the guest's memory (1114112 B mapped)"), "{huge}");
        let wraps = why(buffer("input", 0xFFFF_FFF0, 0x20));
        assert!(
            wraps.contains("wraps past the end of the 32-bit address space"),
            "{wraps}"
        );
        // Between the two ranges, and straddling a range's end.
        for b in [buffer("x", 0x1000_0000, 16), buffer("x", 0xFFF8, 16)] {
            assert!(why(b).contains("not inside the guest's mapped memory"));
        }
        let (kept, notes) = declarable(vec![buffer("x", 0x2000_0000, 0x10_0000)], &memory).unwrap();
        assert_eq!(
            (kept.len(), notes.len()),
            (1, 0),
            "a buffer as large as its range is one"
        );
    }

    #[test]
    fn writes_to_owned_memory_are_counted_and_only_the_bytes_past_it_are_stray() {
        let mut sink = |_: Message| {};
        let mut layers = window_with_owned_memory(&mut sink);
        let layout = Layout {
            heap: (0x4000, 0x5000),
            stack: (0x8000, 0xA000),
            initial_sp: 0xA000,
            from_vector_table: false,
        };
        // Into the buffer, into the owned bytes: neither is stray.
        assert_eq!(record(&mut layers, 0, 1, true, 0x1000, 4, &layout), None);
        assert_eq!(record(&mut layers, 0, 2, true, 0x2010, 4, &layout), None);
        // Straddling the owned bytes' end: the two bytes past it are.
        assert_eq!(
            record(&mut layers, 0, 3, true, 0x201E, 4, &layout),
            Some((0x2020, 2))
        );
        // Elsewhere: stray, not owned.
        assert_eq!(
            record(&mut layers, 0, 4, true, 0x3000, 4, &layout),
            Some((0x3000, 4))
        );
        let open = layers.open.as_ref().unwrap();
        assert_eq!(open.owned_writes, 1, "one store wholly in owned memory");
    }
}
