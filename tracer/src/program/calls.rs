//! CMSIS-NN API calls of an unmodified program as layers (`memtrace check`
//! with calls traced): the entry of each API function (`cmsis_api/`) is
//! hooked; at the outermost call its arguments are read by the AAPCS and
//! its buffers declared as a `memtrace.h` layer declares them, and the
//! call is a layer window until it returns (`layer.rs`), with its reads of
//! the program's data outside its buffers and argument structures watched
//! (stray reads). A call made while a window is open opens none: it is
//! counted as an inner call of the open layer, whose accesses it makes.

use std::collections::HashMap;
use std::sync::Arc;

use unicorn_engine::RegisterARM;

use memtrace_abi::spec::LayerSpec;

use super::cmsis_api::layouts::{self, ApiLayouts};
use super::cmsis_api::{read_call, ApiFunction, CallBuffer, CallSite, Family, API};
use super::layer::{self, Closed, InnerCall, LayerBuffer, Owner, ReadWatch, Window};
use super::{reg, Uc};
use crate::arch::Machine;
use crate::debuginfo::TypeLayouts;
use crate::elf::ElfImage;
use crate::memcheck::Memcheck;

/// One API call the program made, as the tracer saw it.
#[derive(Clone, Debug)]
pub struct RawCall {
    /// The layer index of the call (its position among the run's layers).
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
    /// The API functions it called (a wrapper's kernel, an LSTM's
    /// elementwise kernels).
    pub inner_calls: Vec<InnerCall>,
    /// `ctx->buf` of each of its context arguments.
    pub scratch: Vec<u64>,
}

/// The calls of one run.
pub(super) struct Calls {
    entries: HashMap<u64, &'static ApiFunction>,
    /// Data objects of the program (`[start, end)`, sorted) whose reads by a
    /// call outside its buffers are stray: every sized non-code symbol but
    /// the library's own tables.
    objects: Arc<[(u64, u64)]>,
    /// The layouts of the recurrent families' structures.
    layouts: ApiLayouts,
    pub(super) records: Vec<RawCall>,
}

/// Data objects of CMSIS-NN itself, which its kernels read as they please.
const LIBRARY_TABLES: &[&str] = &["sigmoid_table_uint16"];

impl Calls {
    /// The API functions `image` defines; `None` when it defines none.
    pub(super) fn for_image(image: &ElfImage) -> Option<Calls> {
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
        let layouts = structure_layouts(image, &entries);
        Some(Calls {
            entries,
            objects: objects.into(),
            layouts,
            records: Vec::new(),
        })
    }

    /// The entry addresses to hook.
    pub(super) fn entry_points(&self) -> Vec<u64> {
        self.entries.keys().copied().collect()
    }

    /// What the window of record `record` saw.
    pub(super) fn closed(&mut self, record: usize, closed: &Closed) {
        let Some(r) = self.records.get_mut(record) else {
            return;
        };
        r.instructions = closed.instructions;
        r.unfinished = closed.unfinished;
        if let Some(w) = &closed.reads {
            r.stray_reads = w.count;
            r.first_stray_read = w.first;
        }
        r.inner_calls = closed.inner_calls.clone();
    }
}

/// The layouts of the recurrent families' structures: from the program's
/// DWARF when it calls one of them (the DWARF is read only then), v7.0.0's
/// otherwise.
fn structure_layouts(image: &ElfImage, entries: &HashMap<u64, &'static ApiFunction>) -> ApiLayouts {
    let recurrent = entries
        .values()
        .any(|api| matches!(api.family, Family::Svdf { .. } | Family::Lstm));
    if !recurrent {
        return ApiLayouts::V7_0_0;
    }
    ApiLayouts::from_types(&TypeLayouts::load(image, &layouts::STRUCTS, &[]))
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

/// The entry of an API function: a new layer, unless a window is open (a
/// wrapper's kernel belongs to the wrapper's layer, an LSTM's kernels to
/// the LSTM's, an operator's calls to the operator's), where it is counted
/// as an inner call.
pub(super) fn on_entry(uc: &mut Uc<'_, '_>, address: u64) {
    let Some(calls) = uc.get_data().calls.as_ref() else {
        return;
    };
    let Some(&api) = calls.entries.get(&address) else {
        return;
    };
    if layer::inner_call(uc, api.name) {
        return;
    }
    let Some(calls) = uc.get_data().calls.as_ref() else {
        return;
    };
    let objects = calls.objects.clone();
    let layouts = calls.layouts;
    let sp = reg(uc, RegisterARM::SP);
    let return_pc = reg(uc, RegisterARM::LR) & !1;
    let read = {
        let s = uc.get_data();
        let entry = Entry {
            uc,
            sp,
            memcheck: s.memcheck.as_ref(),
        };
        read_call(api, &entry, &layouts).map(|l| {
            let past: Vec<String> = l
                .buffers
                .iter()
                .filter_map(|b| past_heap_block(&entry, b))
                .collect();
            (l, past)
        })
    };
    let t0 = uc.get_data().clock.now(address);
    let image = uc.get_data().image;
    let memory = uc.get_data().layout.regions(image);
    let layer = read.and_then(|(l, past_blocks)| {
        let buffers = l.buffers.iter().map(layer_buffer).collect();
        let (buffers, mut notes) = layer::declarable(buffers, &memory)?;
        notes.extend(buffers.iter().filter_map(|b| past_object(image, b)));
        notes.extend(past_blocks);
        Ok((l, buffers, notes))
    });
    let Some(calls) = uc.get_data_mut().calls.as_mut() else {
        return;
    };
    let record = calls.records.len();
    calls.records.push(RawCall {
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
        inner_calls: Vec::new(),
        scratch: Vec::new(),
    });
    let raw = &mut calls.records[record];
    let (layer, buffers) = match layer {
        Ok((l, buffers, notes)) => {
            raw.notes = notes;
            raw.shapes = l.shapes.clone();
            raw.scratch = l.scratch.clone();
            (l, buffers)
        }
        Err(e) => {
            raw.error = Some(e);
            return;
        }
    };
    let spec = (!layer.spec.is_empty())
        .then(|| LayerSpec::parse(&layer.spec).ok())
        .flatten();
    let params = if spec.is_some() {
        layer.spec.clone()
    } else {
        layer.shapes.clone()
    };
    let index = uc.get_data().layers.as_ref().map_or(0, |l| l.next_index());
    let window = Window {
        owner: Owner::Call(record),
        name: format!("{index}:{}", api.name),
        op: layer.op.to_owned(),
        params,
        spec,
        buffers,
        return_pc,
        entry_sp: sp,
        stack_arguments: sp + 4 * api.stack_arguments(),
        reads: Some(ReadWatch {
            objects,
            structs: layer.structs,
            count: 0,
            first: None,
        }),
        owned: Vec::new(),
    };
    let index = layer::open(uc, window, t0, address);
    if let Some(r) = uc
        .get_data_mut()
        .calls
        .as_mut()
        .and_then(|c| c.records.get_mut(record))
    {
        r.index = index;
    }
}

fn layer_buffer(b: &CallBuffer) -> LayerBuffer {
    LayerBuffer {
        role: b.role,
        name: b.name.to_owned(),
        base: b.base,
        size: b.size,
        elem_size: b.elem_size,
    }
}

/// A buffer that starts in a live heap block and reaches past its end:
/// the caller allocated less than the shapes it gave (memcheck reports
/// the kernel's accesses past it as overruns).
fn past_heap_block(entry: &Entry<'_, '_, '_>, b: &CallBuffer) -> Option<String> {
    let rest = entry.heap_block_rest(b.base)?;
    (b.size > rest).then(|| {
        format!(
            "`{}` ({} B by its shapes) reaches {} B past the end of the heap block it lies in ({rest} B from its start)",
            b.name,
            b.size,
            b.size - rest
        )
    })
}

/// A buffer that starts in a data object of the program and reaches past
/// its end: the caller passed an array shorter than the shapes it gave.
fn past_object(image: &ElfImage, b: &LayerBuffer) -> Option<String> {
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
