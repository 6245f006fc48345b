//! CMSIS-NN API calls of an unmodified program as layers (`memtrace check`
//! with calls traced): the entry of each API function (`cmsis_api.rs`) is
//! hooked; at the outermost call its arguments are read by the AAPCS and
//! its buffers declared as a `memtrace.h` layer declares them; until it
//! returns (the block at its return address, with the stack pointer of its
//! entry), every guest access is classified: an access to a buffer becomes
//! load, store or update events, a write elsewhere outside the callee's own
//! stack a stray write, a read of the program's data outside the call's
//! buffers and argument structures a stray read. The same [`Message`]s a
//! marked program's layer makes go to the caller's analyses (counts, O_s,
//! the memory contract), in program order.
//!
//! One file over 500 lines: a call's life (entry, every access, return)
//! shares one state, and splitting it would scatter that state's rules.

use std::collections::HashMap;

use unicorn_engine::{HookType, MemType, RegisterARM};

use memtrace_abi::event::STRAY_WRITES_UNWOUND;
use memtrace_abi::event::{AccessKind, Buffer, Event, LayerInfo, Message, Role, StrayWrite};
use memtrace_abi::spec::LayerSpec;

use super::cmsis_api::{read_call, ApiFunction, CallBuffer, CallLayer, CallSite, API};
use super::{reg, stack_here, Layout, Uc};
use crate::arch::Machine;
use crate::elf::ElfImage;
use crate::machine::emulator_error;
use crate::memcheck::Memcheck;

/// Events per message.
const BATCH: usize = 8192;

/// Where the layers' messages go.
pub type Sink<'i> = &'i mut dyn FnMut(Message);

/// One API call the program made, as the tracer saw it.
#[derive(Clone, Debug)]
pub struct RawCall {
    /// The layer index of the call (its position among the traced calls).
    pub index: Option<usize>,
    /// The API function.
    pub function: &'static str,
    /// Its return address (the call site is the instruction before it).
    pub return_address: u64,
    /// The shapes its arguments give.
    pub shapes: String,
    /// Why it is no layer (an argument structure that is not one).
    pub error: Option<String>,
    /// Instructions retired inside the call.
    pub instructions: u64,
    /// Loads outside its buffers, argument structures and own stack that
    /// read the program's data, heap or the caller's stack.
    pub stray_reads: u64,
    /// The first of them: PC, address, bytes.
    pub first_stray_read: Option<(u64, u64, u64)>,
    /// The call had not returned when the program ended.
    pub unfinished: bool,
    /// What is wrong with the buffers its arguments describe: one not
    /// declared (it overlaps another), one that reaches past the array the
    /// caller passed.
    pub notes: Vec<String>,
}

struct Declared {
    buffer: CallBuffer,
    id: u32,
    written: Vec<u64>,
}

struct OpenCall {
    record: usize,
    return_pc: u64,
    entry_sp: u64,
    /// The end of its stack arguments: the callee's to read and write
    /// (AAPCS), with all of the stack below its entry.
    stack_arguments: u64,
    t0: u64,
    seq: u64,
    buffers: Vec<Declared>,
    structs: Vec<(u64, u64)>,
    hook: Option<unicorn_engine::UcHookId>,
    unwound: u32,
}

/// The calls of one run.
pub(super) struct Calls<'i> {
    entries: HashMap<u64, &'static ApiFunction>,
    sink: Sink<'i>,
    open: Option<OpenCall>,
    layers: usize,
    batch: Vec<Event>,
    /// Data objects of the program (`[start, end)`, sorted) whose reads by a
    /// call outside its buffers are stray: every sized non-code symbol but
    /// the library's own tables.
    objects: Vec<(u64, u64)>,
    pub(super) records: Vec<RawCall>,
}

/// Data objects of CMSIS-NN itself, which its kernels read as they please.
const LIBRARY_TABLES: &[&str] = &["sigmoid_table_uint16"];

impl<'i> Calls<'i> {
    /// The API functions `image` defines; `None` when it defines none.
    pub(super) fn for_image(image: &ElfImage, sink: Sink<'i>) -> Option<Calls<'i>> {
        let entries: HashMap<u64, &'static ApiFunction> = API
            .iter()
            .filter_map(|api| {
                let s = image.symbol(api.name).filter(|s| s.is_function)?;
                Some((image.arch.code_address(s.address), api))
            })
            .collect();
        if entries.is_empty() {
            return None;
        }
        let mut objects: Vec<(u64, u64)> = image
            .objects()
            .filter(|(_, size, name)| *size > 0 && !LIBRARY_TABLES.contains(name))
            .map(|(a, s, _)| (a, a + s))
            .collect();
        objects.sort_unstable();
        Some(Calls {
            entries,
            sink,
            open: None,
            layers: 0,
            batch: Vec::with_capacity(BATCH),
            objects,
            records: Vec::new(),
        })
    }

    /// The entry addresses to hook.
    pub(super) fn entry_points(&self) -> Vec<u64> {
        self.entries.keys().copied().collect()
    }

    fn flush(&mut self) {
        if !self.batch.is_empty() {
            let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH));
            (self.sink)(Message::Events(batch));
        }
    }

    fn in_object(&self, address: u64) -> bool {
        let i = self.objects.partition_point(|&(s, _)| s <= address);
        i > 0 && address < self.objects[i - 1].1
    }
}

/// The guest at an API function's entry.
struct Entry<'a, 'u, 'i> {
    uc: &'a Uc<'u, 'i>,
    sp: u64,
    memcheck: Option<&'a Memcheck>,
}

impl CallSite for Entry<'_, '_, '_> {
    fn arg(&self, i: usize) -> u32 {
        use RegisterARM::*;
        match i {
            0..=3 => reg(self.uc, [R0, R1, R2, R3][i]) as u32,
            _ => self.word(self.sp + 4 * (i as u64 - 4)).unwrap_or(0),
        }
    }
    fn word(&self, address: u64) -> Option<u32> {
        let mut b = [0u8; 4];
        self.uc.mem_read(address, &mut b).ok()?;
        Some(u32::from_le_bytes(b))
    }
    fn heap_block_rest(&self, address: u64) -> Option<u64> {
        let (start, block) = self.memcheck?.live.range(..=address).next_back()?;
        (address < start + block.size).then(|| start + block.size - address)
    }
}

/// The entry of an API function: a new layer, unless a call is open (a
/// wrapper's kernel belongs to the wrapper's layer).
pub(super) fn on_entry(uc: &mut Uc<'_, '_>, address: u64) {
    let Some(calls) = uc.get_data().calls.as_ref() else {
        return;
    };
    if calls.open.is_some() {
        return;
    }
    let Some(&api) = calls.entries.get(&address) else {
        return;
    };
    let sp = reg(uc, RegisterARM::SP);
    let return_pc = reg(uc, RegisterARM::LR) & !1;
    let read = {
        let s = uc.get_data();
        let entry = Entry {
            uc,
            sp,
            memcheck: s.memcheck.as_ref(),
        };
        read_call(api, &entry)
    };
    let t0 = uc.get_data().clock.now(address);
    let image = uc.get_data().image;
    let layer = read.and_then(declarable).map(|(l, mut notes)| {
        notes.extend(l.buffers.iter().filter_map(|b| past_object(image, b)));
        (l, notes)
    });
    let Some(calls) = uc.get_data_mut().calls.as_mut() else {
        return;
    };
    let record = calls.records.len();
    let mut raw = RawCall {
        index: None,
        function: api.name,
        return_address: return_pc,
        shapes: String::new(),
        error: None,
        instructions: 0,
        stray_reads: 0,
        first_stray_read: None,
        unfinished: false,
        notes: Vec::new(),
    };
    let layer = match layer {
        Ok((l, notes)) => {
            raw.notes = notes;
            l
        }
        Err(e) => {
            raw.error = Some(e);
            calls.records.push(raw);
            return;
        }
    };
    let index = calls.layers;
    calls.layers += 1;
    raw.index = Some(index);
    raw.shapes = layer.shapes.clone();
    calls.records.push(raw);
    let spec = (!layer.spec.is_empty())
        .then(|| LayerSpec::parse(&layer.spec).ok())
        .flatten();
    let params = if spec.is_some() {
        layer.spec.clone()
    } else {
        layer.shapes.clone()
    };
    (calls.sink)(Message::LayerBegin(LayerInfo {
        index,
        name: format!("{index}:{}", api.name),
        op: layer.op.to_owned(),
        params,
        spec,
    }));
    let mut buffers = Vec::new();
    for (id, b) in layer.buffers.into_iter().enumerate() {
        (calls.sink)(Message::BufferDeclared(Buffer {
            id: id as u32,
            role: b.role,
            name: b.name.to_owned(),
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
    calls.open = Some(OpenCall {
        record,
        return_pc,
        entry_sp: sp,
        t0,
        seq: 0,
        buffers,
        structs: layer.structs,
        stack_arguments: sp + 4 * api.stack_arguments(),
        hook: None,
        unwound: 0,
    });
    match uc.add_mem_hook(HookType::MEM_READ | HookType::MEM_WRITE, 1, 0, on_access) {
        Ok(h) => {
            if let Some(open) = uc
                .get_data_mut()
                .calls
                .as_mut()
                .and_then(|c| c.open.as_mut())
            {
                open.hook = Some(h);
            }
        }
        Err(e) => {
            let message = emulator_error("hooking a CMSIS-NN call", e).to_string();
            super::stop(uc, super::StopKind::Fault, message, address);
        }
    }
}

/// Buffers a layer may declare: sized to fit a `u32`, and overlapping
/// none other but an input its output (the protocol's rule). A buffer that
/// breaks it is dropped, and said why: one array passed as two arguments,
/// or shapes that make a buffer reach into the next array (its accesses
/// there are then stray).
fn declarable(mut layer: CallLayer) -> Result<(CallLayer, Vec<String>), String> {
    let mut kept: Vec<CallBuffer> = Vec::new();
    let mut dropped = Vec::new();
    // Activations first, scratch last: a clash drops the less telling one.
    let rank = |r: Role| match r {
        Role::Input | Role::Output => 0,
        Role::Weights | Role::Bias => 1,
        Role::Scratch => 2,
    };
    layer.buffers.sort_by_key(|b| rank(b.role));
    for b in layer.buffers {
        if b.size > u32::MAX as u64 {
            return Err(format!("buffer `{}` of {} B is too large", b.name, b.size));
        }
        // An input may overlap the output (DMO places them so), and
        // buffers the call only reads may overlap each other.
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
    layer.buffers = kept;
    Ok((layer, dropped))
}

/// A buffer that starts in a data object of the program and reaches past
/// its end: the caller passed an array shorter than the shapes it gave.
fn past_object(image: &ElfImage, b: &CallBuffer) -> Option<String> {
    let (start, size, name) = image
        .objects()
        .find(|&(s, n, _)| (s..s + n).contains(&b.base))?;
    let end = start + size;
    (b.base + b.size > end).then(|| {
        format!(
            "`{}` ({} B by its shapes) reaches {} B past the end of `{name}` ({size} B)",
            b.name,
            b.size,
            b.base + b.size - end
        )
    })
}

/// A block start: the open call returns when the block is its return
/// address and the stack is back where it was at the entry.
pub(super) fn on_block(uc: &mut Uc<'_, '_>, address: u64) {
    let returning = uc
        .get_data()
        .calls
        .as_ref()
        .and_then(|c| c.open.as_ref())
        .is_some_and(|o| o.return_pc == address && reg(uc, RegisterARM::SP) == o.entry_sp);
    if returning {
        close(uc, address, false);
    }
}

/// Ends the open call at `pc` (`unfinished`: the program ended inside it).
pub(super) fn close(uc: &mut Uc<'_, '_>, pc: u64, unfinished: bool) {
    let now = uc.get_data().clock.now(pc);
    let Some(calls) = uc.get_data_mut().calls.as_mut() else {
        return;
    };
    let Some(open) = calls.open.take() else {
        return;
    };
    calls.flush();
    let instructions = now.saturating_sub(open.t0);
    (calls.sink)(Message::LayerEnd { instructions });
    let record = &mut calls.records[open.record];
    record.instructions = instructions;
    record.unfinished = unfinished;
    if let Some(h) = open.hook {
        let _ = uc.remove_hook(h);
    }
}

fn on_access(uc: &mut Uc<'_, '_>, kind: MemType, address: u64, size: usize, _value: i64) -> bool {
    let pc = uc.pc_read().unwrap_or(0);
    let write = kind == MemType::WRITE;
    let now = uc.get_data().clock.now(pc);
    let layout = uc.get_data().layout;
    let stray = {
        let Some(calls) = uc.get_data_mut().calls.as_mut() else {
            return true;
        };
        record(calls, pc, now, write, address, size as u64, &layout)
    };
    if let Some((at, n)) = stray {
        let unwind = uc
            .get_data()
            .calls
            .as_ref()
            .and_then(|c| c.open.as_ref())
            .is_some_and(|o| o.unwound < STRAY_WRITES_UNWOUND);
        let callers = if unwind {
            stack_here(uc, pc).returns
        } else {
            Vec::new()
        };
        if let Some(calls) = uc.get_data_mut().calls.as_mut() {
            let t = calls.open.as_mut().map_or(0, |o| {
                o.unwound += unwind as u32;
                now.saturating_sub(o.t0)
            });
            calls.flush();
            (calls.sink)(Message::StrayWrite(StrayWrite {
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

/// One access of the open call: its events; a write's bytes outside every
/// buffer and the callee's stack as `(address, bytes)` (a stray write); a
/// stray read counted.
fn record(
    calls: &mut Calls<'_>,
    pc: u64,
    now: u64,
    write: bool,
    address: u64,
    size: u64,
    layout: &Layout,
) -> Option<(u64, u64)> {
    let open = calls.open.as_mut()?;
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
            &mut calls.batch,
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
        // The first byte no buffer holds, to the end of the access.
        let first = (address..end)
            .find(|&a| {
                !open
                    .buffers
                    .iter()
                    .any(|d| (d.buffer.base..d.buffer.base + d.buffer.size).contains(&a))
            })
            .unwrap_or(address);
        stray = Some((first, end - first));
    } else if outside {
        let in_struct = open
            .structs
            .iter()
            .any(|&(s, n)| address < s + n && s < end);
        let record = open.record;
        let caller_stack = (open.stack_arguments..layout.stack.1).contains(&address);
        let heap = (layout.heap.0..layout.heap.1).contains(&address);
        let reads_data = !in_struct && (caller_stack || heap || calls.in_object(address));
        if reads_data {
            let r = &mut calls.records[record];
            r.stray_reads += 1;
            r.first_stray_read.get_or_insert((pc, address, size));
        }
    }
    if calls.batch.len() >= BATCH {
        calls.flush();
    }
    stray
}

/// The events of bytes `[first, last)` of buffer `d`: a load, or stores of
/// bytes the call has not written yet and updates of those it has.
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
