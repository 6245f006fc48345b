//! The shadow map of an arena (docs/verify.md): for every arena byte, which tensor
//! last wrote it and in which layer. A read, through a buffer of role
//! `input`, of a byte that does not hold that input tensor is a clobber.
//!
//! Tensors are identified by their buffer names (the TFLM runner names
//! buffers after the model's tensors, made unique by
//! `memtrace_model::Model::tensor_names`). Writes through any
//! buffer of a layer — output, or an input that overlaps the output — are
//! writes of the layer's output tensor, except writes through a `scratch`
//! buffer, which hold the scratch tensor. Accesses outside the arena (weights
//! and biases in the model) are not tracked.
//!
//! A RESHAPE is the identity on bytes, and TFLM's copies nothing when its output is placed exactly
//! on its input (same address and size): the input's bytes *are* the output.
//! So at the end of such an aliased reshape layer, every byte of the output
//! that still holds the input tensor is recorded as holding the output
//! tensor, written by that layer. Bytes that no longer hold the input (an
//! earlier clobber) are left alone, so a later read still reports them.
//!
//! Alongside, the monotone and exact O_s of every layer's first input against
//! its output are accumulated ([`OverlapAccumulator`]), so the reference run
//! of `memtrace verify` also yields the traced O_s of every operator.

use std::collections::HashMap;

use memtrace_abi::{Buffer, Event, LayerInfo, Role};
use serde::{Deserialize, Serialize};

use memtrace_abi::Analysis;
use memtrace_overlap::empirical::{EmpiricalOverlap, OverlapAccumulator};

/// Who wrote a byte.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Writer {
    /// Layer (operator) name.
    pub op: String,
    /// Name of the tensor that was written.
    pub tensor: String,
}

/// Reads of destroyed bytes of one tensor by one operator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Clobber {
    /// The reading operator (layer name) and its position among the layers.
    pub op: String,
    /// Position of the reading layer in the run (0-based).
    pub layer_index: usize,
    /// The input tensor that was expected.
    pub tensor: String,
    /// Tensor-relative byte offset of the first clobbered read.
    pub offset: u64,
    /// Clobbered bytes read (counted per read access byte).
    pub bytes: u64,
    /// The layer/tensor that last wrote the first clobbered byte; `None`
    /// when no layer ever wrote it.
    pub overwritten_by: Option<Writer>,
}

impl Clobber {
    /// What was seen, in a few words: "operator `a` read `t` at byte 4
    /// (8 B), overwritten by `u` of operator `b`".
    pub fn describe(&self) -> String {
        format!("{}, overwritten by {}", self.read(), self.writer())
    }

    /// An unwritten read in a few words: "operator `a` read `t` at byte 4
    /// (8 B), which holds `u` of operator `b`".
    pub fn describe_unwritten(&self) -> String {
        format!("{}, which holds {}", self.read(), self.writer())
    }

    fn read(&self) -> String {
        format!(
            "operator `{}` read `{}` at byte {} ({} B)",
            self.op, self.tensor, self.offset, self.bytes
        )
    }

    fn writer(&self) -> String {
        self.overwritten_by
            .as_ref()
            .map(|w| format!("`{}` of operator `{}`", w.tensor, w.op))
            .unwrap_or_else(|| "nothing (never written)".into())
    }
}

/// Per-layer result besides clobbers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerOverlap {
    /// Layer (operator) name.
    pub name: String,
    /// Size in bytes of the layer's first input (buffer id 0).
    pub input_bytes: u64,
    /// Size in bytes of the layer's output.
    pub output_bytes: u64,
    /// O_s of the first input against the output (`None` without both).
    pub overlap: Option<EmpiricalOverlap>,
    /// The layer loaded bytes of its own output buffer (an accumulating
    /// kernel, e.g. CMSIS-NN's max pool comparing into its output).
    pub reads_output: bool,
    /// The kernel that ran (the layer's `op`).
    pub op: String,
    /// Guest instructions retired inside the layer's window.
    pub instructions: u64,
}

/// Kernels that are the identity on bytes and skip their copy when output
/// and input are the same memory: TFLM's RESHAPE (`kernels/reshape.cc`), as
/// the TFLM runner names its layer.
const ALIASING_KERNELS: [&str; 1] = ["RESHAPE"];

#[derive(Default)]
struct Current {
    name: String,
    /// The layer's operator (kernel name).
    op: String,
    index: usize,
    buffers: HashMap<u32, Buffer>,
    output_tensor: Option<u32>,
    acc: Option<OverlapAccumulator>,
    input_bytes: u64,
    output_bytes: u64,
    /// The layer loaded bytes of its output buffer.
    reads_output: bool,
    /// The layer reads back its output in the un-overlapped reference run.
    known_output_reader: bool,
}

/// The clobber checker (an [`Analysis`]).
pub struct ShadowMap {
    base: u64,
    bytes: u64,
    /// Per byte: tensor id + 1 (0 = never written).
    owner: Vec<u32>,
    /// Per byte: layer index that wrote it.
    writer: Vec<u32>,
    tensors: HashMap<String, u32>,
    tensor_names: Vec<String>,
    layer_names: Vec<String>,
    cur: Option<Current>,
    by_key: HashMap<(usize, u32), usize>,
    /// Clobbered reads found so far, one per (layer, input tensor).
    pub clobbers: Vec<Clobber>,
    /// Per tensor: which of its bytes its producer wrote (through the
    /// producing layer's output).
    produced: HashMap<u32, Vec<bool>>,
    unwritten_by_key: HashMap<(usize, u32), usize>,
    /// Reads of input bytes the input's producer never wrote, which still
    /// hold an earlier tensor (a kernel that writes part of its output, as
    /// TFLM's SignalEnergy writes only its bins' range). No layout destroyed
    /// them, so they are no clobbers; `overwritten_by` is what they hold.
    pub unwritten_reads: Vec<Clobber>,
    /// Per-layer results, in run order.
    pub layers: Vec<LayerOverlap>,
    /// Layers that read back their own output (from a reference run).
    output_readers: std::collections::HashSet<String>,
}

impl ShadowMap {
    /// Tracks the arena `[base, base + bytes)` (guest addresses).
    pub fn new(base: u64, bytes: u64) -> Self {
        ShadowMap {
            base,
            bytes,
            owner: vec![0; bytes as usize],
            writer: vec![0; bytes as usize],
            tensors: HashMap::new(),
            tensor_names: Vec::new(),
            layer_names: Vec::new(),
            cur: None,
            by_key: HashMap::new(),
            clobbers: Vec::new(),
            produced: HashMap::new(),
            unwritten_by_key: HashMap::new(),
            unwritten_reads: Vec::new(),
            layers: Vec::new(),
            output_readers: Default::default(),
        }
    }

    /// Tells the checker which layers read back their own output (from the
    /// un-overlapped reference run, where [`LayerOverlap::reads_output`]
    /// says so unambiguously). When such a layer's input overlaps its
    /// output, a load of a byte it has already written is a read of its own
    /// output, not of a clobbered input — the address cannot tell the two
    /// apart, the reference run can. Layers that never read their output
    /// keep the strict check.
    pub fn with_output_readers(mut self, layers: impl IntoIterator<Item = String>) -> Self {
        self.output_readers = layers.into_iter().collect();
        self
    }

    fn tensor_id(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.tensors.get(name) {
            return id;
        }
        let id = self.tensor_names.len() as u32;
        self.tensor_names.push(name.to_string());
        self.tensors.insert(name.to_string(), id);
        id
    }
}

impl ShadowMap {
    /// Notes that `tensor` (its buffer at `base`, `size` bytes) was written
    /// at the arena bytes `[s0, s1)` by its producer.
    fn mark_produced(&mut self, tensor: u32, base: u64, size: u32, s0: usize, s1: usize) {
        let bytes = self
            .produced
            .entry(tensor)
            .or_insert_with(|| vec![false; size as usize]);
        // The arena bytes as offsets into the tensor, clipped to it.
        let start = (self.base + s0 as u64).saturating_sub(base) as usize;
        let end = ((self.base + s1 as u64).saturating_sub(base) as usize).min(bytes.len());
        if start < end {
            bytes[start..end].fill(true);
        }
    }

    /// Whether `tensor`'s producer wrote the tensor's byte at `offset`.
    fn was_produced(&self, tensor: u32, offset: u64) -> bool {
        self.produced
            .get(&tensor)
            .and_then(|bytes| bytes.get(offset as usize).copied())
            .unwrap_or(false)
    }

    /// One more byte of `tensor` read by the current layer `cur` at arena
    /// byte `s` that does not hold it: a clobber, or, when its producer
    /// never wrote it, an unwritten read.
    fn note_foreign_read(&mut self, cur: &Current, tensor: u32, s: usize, offset: u64) {
        let key = (cur.index, tensor);
        // Only a producer that wrote some of its tensor leaves the rest by
        // its own choice; a tensor it wrote none of must be written to be
        // read.
        let unwritten = self.produced.contains_key(&tensor) && !self.was_produced(tensor, offset);
        let (list, index) = if unwritten {
            (&mut self.unwritten_reads, &mut self.unwritten_by_key)
        } else {
            (&mut self.clobbers, &mut self.by_key)
        };
        if let Some(&i) = index.get(&key) {
            let c = &mut list[i];
            c.bytes += 1;
            c.offset = c.offset.min(offset);
            return;
        }
        let overwritten_by = (self.owner[s] != 0).then(|| Writer {
            op: self.layer_names[self.writer[s] as usize].clone(),
            tensor: self.tensor_names[(self.owner[s] - 1) as usize].clone(),
        });
        index.insert(key, list.len());
        list.push(Clobber {
            op: cur.name.clone(),
            layer_index: cur.index,
            tensor: self.tensor_names[tensor as usize].clone(),
            offset,
            bytes: 1,
            overwritten_by,
        });
    }

    /// An aliased identity layer (see the module docs): the output bytes
    /// that still hold an input placed at the very same address and size now
    /// hold the output tensor.
    fn alias_output(&mut self, cur: &Current) {
        let (Some(out), Some(output)) = (
            cur.output_tensor,
            cur.buffers.values().find(|b| b.role == Role::Output),
        ) else {
            return;
        };
        let layer = (self.layer_names.len() - 1) as u32;
        let (lo, hi) = (self.base, self.base.saturating_add(self.bytes));
        for input in cur
            .buffers
            .values()
            .filter(|b| b.role == Role::Input && b.base == output.base && b.size == output.size)
        {
            let Some(&tensor) = self.tensors.get(&input.name) else {
                continue;
            };
            let start = input.base.max(lo);
            let end = input.base.saturating_add(input.size as u64).min(hi);
            if start >= end {
                continue;
            }
            let (s0, s1) = ((start - lo) as usize, (end - lo) as usize);
            for s in s0..s1 {
                if self.owner[s] == tensor + 1 {
                    self.owner[s] = out + 1;
                    self.writer[s] = layer;
                }
            }
            // The alias is the whole output: bytes that no longer hold the
            // input are the input's clobbers, carried over.
            self.mark_produced(out, output.base, output.size, s0, s1);
        }
    }
}

impl Analysis for ShadowMap {
    /// Counts, O_s and ownership follow the events' order (`seq`) alone.
    fn reads_event_times(&self) -> bool {
        false
    }

    fn layer_begin(&mut self, layer: &LayerInfo) {
        self.layer_names.push(layer.name.clone());
        self.cur = Some(Current {
            name: layer.name.clone(),
            op: layer.op.clone(),
            index: layer.index,
            known_output_reader: self.output_readers.contains(&layer.name),
            ..Current::default()
        });
    }

    fn buffer(&mut self, b: &Buffer) {
        let id = self.tensor_id(&b.name);
        let Some(cur) = self.cur.as_mut() else {
            return;
        };
        if b.role == Role::Output {
            cur.output_tensor = Some(id);
            cur.output_bytes = b.size as u64;
        }
        if b.role == Role::Input && b.id == 0 {
            cur.input_bytes = b.size as u64;
        }
        cur.buffers.insert(b.id, b.clone());
        if cur.acc.is_none() {
            let input = cur
                .buffers
                .values()
                .filter(|x| x.role == Role::Input)
                .min_by_key(|x| x.id);
            let output = cur.buffers.values().find(|x| x.role == Role::Output);
            if let (Some(i), Some(o)) = (input, output) {
                cur.acc = Some(OverlapAccumulator::new(
                    i.id,
                    i.size as u64,
                    o.id,
                    o.size as u64,
                ));
            }
        }
    }

    fn events(&mut self, events: &[Event]) {
        let Some(mut cur) = self.cur.take() else {
            return;
        };
        if let Some(acc) = cur.acc.as_mut() {
            acc.observe(events);
        }
        let layer = (self.layer_names.len() - 1) as u32;
        // Per declared buffer: (id, base, role, tensor id), scanned linearly
        // (a layer declares a handful).
        let bufs: Vec<(u32, u64, Role, u32)> = cur
            .buffers
            .values()
            .map(|b| (b.id, b.base, b.role, self.tensors[&b.name]))
            .collect();
        let output_at = cur
            .buffers
            .values()
            .find(|b| b.role == Role::Output)
            .map(|b| (b.base, b.size));
        let (lo, hi) = (self.base, self.base + self.bytes);
        for e in events {
            let Some(&(_, base, role, tensor)) = bufs.iter().find(|b| b.0 == e.buffer) else {
                continue;
            };
            let start = (base + e.offset as u64).max(lo);
            let end = (base + e.offset as u64 + e.size as u64).min(hi);
            if start >= end {
                continue;
            }
            let (s0, s1) = ((start - lo) as usize, (end - lo) as usize);
            if e.kind == memtrace_abi::AccessKind::Load {
                if role == Role::Output {
                    cur.reads_output = true;
                }
                if role != Role::Input {
                    continue;
                }
                if self.owner[s0..s1].iter().all(|&o| o == tensor + 1) {
                    continue;
                }
                // An output reader loading bytes it wrote itself (see
                // `with_output_readers`).
                if cur.known_output_reader
                    && cur.output_tensor.is_some_and(|out| {
                        self.owner[s0..s1].iter().all(|&o| o == out + 1)
                            && self.writer[s0..s1].iter().all(|&w| w == layer)
                    })
                {
                    continue;
                }
                for s in s0..s1 {
                    if self.owner[s] != tensor + 1 {
                        let offset = (lo + s as u64) - base;
                        self.note_foreign_read(&cur, tensor, s, offset);
                    }
                }
            } else if matches!(role, Role::Scratch | Role::Persistent) {
                // Scratch and an operator's own state hold themselves, not
                // the output.
                self.owner[s0..s1].fill(tensor + 1);
                self.writer[s0..s1].fill(layer);
            } else if let Some(out) = cur.output_tensor {
                self.owner[s0..s1].fill(out + 1);
                self.writer[s0..s1].fill(layer);
                if let Some((base, size)) = output_at {
                    self.mark_produced(out, base, size, s0, s1);
                }
            }
        }
        self.cur = Some(cur);
    }

    fn layer_end(&mut self, instructions: u64) {
        if let Some(cur) = self.cur.take() {
            if ALIASING_KERNELS.contains(&cur.op.as_str()) {
                self.alias_output(&cur);
            }
            self.layers.push(LayerOverlap {
                name: cur.name,
                input_bytes: cur.input_bytes,
                output_bytes: cur.output_bytes,
                overlap: cur.acc.map(|a| a.result()),
                reads_output: cur.reads_output,
                op: cur.op,
                instructions,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memtrace_abi::AccessKind;

    fn buf(id: u32, role: Role, name: &str, base: u64, size: u32) -> Buffer {
        Buffer {
            id,
            role,
            name: name.into(),
            base,
            size,
            elem_size: 1,
        }
    }

    fn ev(seq: u64, buffer: u32, offset: u32, size: u32, kind: AccessKind) -> Event {
        Event {
            t: seq,
            seq,
            pc: 0,
            buffer,
            offset,
            size,
            kind,
        }
    }

    fn layer(index: usize, name: &str) -> LayerInfo {
        LayerInfo {
            index,
            name: name.into(),
            op: "x".into(),
            params: String::new(),
            spec: None,
        }
    }

    #[test]
    fn a_read_of_an_overwritten_byte_names_the_writer() {
        let mut m = ShadowMap::new(0x1000, 64);
        m.layer_begin(&layer(0, "load_input"));
        m.buffer(&buf(2, Role::Output, "a", 0x1010, 16));
        m.events(&[ev(0, 2, 0, 16, AccessKind::Store)]);
        m.layer_end(0);
        // op1: a (at 16..32) -> b at 8..24: overlaps a's first 8 bytes.
        m.layer_begin(&layer(1, "op1"));
        m.buffer(&buf(0, Role::Input, "a", 0x1010, 16));
        m.buffer(&buf(2, Role::Output, "b", 0x1008, 16));
        // Writes b[8..12] = a[0..4] before reading a[0..4]: clobber.
        m.events(&[
            ev(0, 2, 8, 4, AccessKind::Store),
            ev(1, 0, 0, 4, AccessKind::Store),
            ev(2, 0, 0, 4, AccessKind::Load),
            ev(3, 0, 4, 4, AccessKind::Load),
        ]);
        m.layer_end(0);
        assert_eq!(m.clobbers.len(), 1);
        let c = &m.clobbers[0];
        assert_eq!(
            (c.op.as_str(), c.tensor.as_str(), c.offset, c.bytes),
            ("op1", "a", 0, 4)
        );
        assert_eq!(
            c.overwritten_by,
            Some(Writer {
                op: "op1".into(),
                tensor: "b".into()
            })
        );
    }

    /// `pool` reads input `a` and accumulates into its output `b` placed on
    /// `a`: it writes b[0..4] (a copy of a[0..4]), then reads b[0..4] back —
    /// at the same addresses, so the tracer reports it as a load of `a` too.
    fn output_reader_run(known: bool) -> ShadowMap {
        let mut m = ShadowMap::new(0, 64);
        if known {
            m = m.with_output_readers(["pool".to_string()]);
        }
        m.layer_begin(&layer(0, "load_input"));
        m.buffer(&buf(2, Role::Output, "a", 0, 16));
        m.events(&[ev(0, 2, 0, 16, AccessKind::Store)]);
        m.layer_end(0);
        m.layer_begin(&layer(1, "pool"));
        m.buffer(&buf(0, Role::Input, "a", 0, 16));
        m.buffer(&buf(2, Role::Output, "b", 0, 8));
        m.events(&[
            ev(0, 0, 0, 4, AccessKind::Load),
            ev(1, 2, 0, 4, AccessKind::Load),
            ev(2, 0, 0, 4, AccessKind::Store),
            ev(3, 2, 0, 4, AccessKind::Store),
            ev(4, 0, 0, 4, AccessKind::Load),
            ev(5, 2, 0, 4, AccessKind::Load),
            ev(6, 0, 4, 4, AccessKind::Load),
        ]);
        m.layer_end(0);
        m
    }

    #[test]
    fn a_known_output_reader_reading_back_its_own_bytes_is_no_clobber() {
        assert!(output_reader_run(true).clobbers.is_empty());
        assert!(output_reader_run(true).layers[1].reads_output);
        // Without the reference run's word, the address says "input": flagged.
        let strict = output_reader_run(false);
        assert_eq!(strict.clobbers.len(), 1);
        assert_eq!(
            (strict.clobbers[0].offset, strict.clobbers[0].bytes),
            (0, 4)
        );
    }

    #[test]
    fn a_known_output_reader_still_clobbers_bytes_another_layer_wrote() {
        let mut m = ShadowMap::new(0, 64).with_output_readers(["pool".to_string()]);
        m.layer_begin(&layer(0, "load_input"));
        m.buffer(&buf(2, Role::Output, "a", 0, 16));
        m.events(&[ev(0, 2, 0, 16, AccessKind::Store)]);
        m.layer_end(0);
        m.layer_begin(&layer(1, "other"));
        m.buffer(&buf(2, Role::Output, "z", 8, 8));
        m.events(&[ev(0, 2, 0, 8, AccessKind::Store)]);
        m.layer_end(0);
        m.layer_begin(&layer(2, "pool"));
        m.buffer(&buf(0, Role::Input, "a", 0, 16));
        m.buffer(&buf(2, Role::Output, "b", 32, 8));
        m.events(&[ev(0, 0, 8, 4, AccessKind::Load)]);
        m.layer_end(0);
        assert_eq!(m.clobbers.len(), 1);
        assert_eq!(m.clobbers[0].overwritten_by.as_ref().unwrap().op, "other");
    }

    fn layer_op(index: usize, name: &str, op: &str) -> LayerInfo {
        LayerInfo {
            op: op.into(),
            ..layer(index, name)
        }
    }

    /// input -> (load) a; op1 writes b over bytes `[16, 32)`; then `alias`
    /// (kernel `op`) with input b and output c both at `c_at`, writing
    /// nothing; then op3 reads c.
    fn aliased_run(op: &str, c_at: u64, clobber_first: bool) -> ShadowMap {
        let mut m = ShadowMap::new(0, 64);
        m.layer_begin(&layer(0, "load_input"));
        m.buffer(&buf(2, Role::Output, "a", 0, 16));
        m.events(&[ev(0, 2, 0, 16, AccessKind::Store)]);
        m.layer_end(0);
        m.layer_begin(&layer_op(1, "op1", "max_pool"));
        m.buffer(&buf(0, Role::Input, "a", 0, 16));
        m.buffer(&buf(2, Role::Output, "b", 16, 16));
        m.events(&[
            ev(0, 0, 0, 16, AccessKind::Load),
            ev(1, 2, 0, 16, AccessKind::Store),
        ]);
        m.layer_end(0);
        if clobber_first {
            // Someone else overwrites b's first 4 bytes before the reshape.
            m.layer_begin(&layer_op(2, "rogue", "relu"));
            m.buffer(&buf(2, Role::Output, "r", 16, 4));
            m.events(&[ev(0, 2, 0, 4, AccessKind::Store)]);
            m.layer_end(0);
        }
        m.layer_begin(&layer_op(3, "alias", op));
        m.buffer(&buf(0, Role::Input, "b", 16, 16));
        m.buffer(&buf(2, Role::Output, "c", c_at, 16));
        m.layer_end(0);
        m.layer_begin(&layer_op(4, "op3", "fully_connected"));
        m.buffer(&buf(0, Role::Input, "c", c_at, 16));
        m.buffer(&buf(2, Role::Output, "d", 48, 4));
        m.events(&[ev(0, 0, 0, 16, AccessKind::Load)]);
        m.layer_end(0);
        m
    }

    #[test]
    fn an_aliased_reshape_hands_its_bytes_to_its_output() {
        // The mnist_forecast_model case: the reshape's output is its input.
        let m = aliased_run("RESHAPE", 16, false);
        assert!(m.clobbers.is_empty(), "{:?}", m.clobbers);
        // A kernel that is not the identity gets no such credit: its output
        // must be written to be read.
        let m = aliased_run("relu", 16, false);
        assert_eq!(m.clobbers.len(), 1);
        assert_eq!(m.clobbers[0].bytes, 16);
        // Nor does a reshape whose output is elsewhere and not written.
        let m = aliased_run("RESHAPE", 32, false);
        assert_eq!(m.clobbers.len(), 1);
        assert_eq!(m.clobbers[0].overwritten_by, None);
    }

    #[test]
    fn an_aliased_reshape_does_not_launder_a_clobbered_input() {
        let m = aliased_run("RESHAPE", 16, true);
        assert_eq!(m.clobbers.len(), 1, "{:?}", m.clobbers);
        let c = &m.clobbers[0];
        assert_eq!((c.op.as_str(), c.tensor.as_str()), ("op3", "c"));
        assert_eq!((c.offset, c.bytes), (0, 4));
        assert_eq!(
            c.overwritten_by,
            Some(Writer {
                op: "rogue".into(),
                tensor: "r".into()
            })
        );
    }

    #[test]
    fn reads_of_what_was_written_are_clean_and_unwritten_bytes_are_not() {
        let mut m = ShadowMap::new(0, 32);
        m.layer_begin(&layer(0, "load_input"));
        m.buffer(&buf(2, Role::Output, "a", 0, 8));
        m.events(&[ev(0, 2, 0, 4, AccessKind::Store)]);
        m.layer_end(0);
        m.layer_begin(&layer(1, "op"));
        m.buffer(&buf(0, Role::Input, "a", 0, 8));
        m.buffer(&buf(1, Role::Input, "z", 24, 4));
        m.buffer(&buf(2, Role::Output, "b", 16, 8));
        m.events(&[
            ev(0, 0, 0, 4, AccessKind::Load),
            ev(1, 0, 4, 4, AccessKind::Load),
            ev(2, 1, 0, 4, AccessKind::Load),
        ]);
        m.layer_end(0);
        // Bytes of `a` its producer left unwritten: an unwritten read.
        assert_eq!(m.unwritten_reads.len(), 1, "{:?}", m.unwritten_reads);
        assert_eq!(m.unwritten_reads[0].offset, 4);
        assert_eq!(m.unwritten_reads[0].overwritten_by, None);
        // `z`, which no layer wrote at all, read: a clobber.
        assert_eq!(m.clobbers.len(), 1, "{:?}", m.clobbers);
        assert_eq!(m.clobbers[0].tensor, "z");
        assert_eq!(m.clobbers[0].overwritten_by, None);
    }

    /// A producer that writes only part of its output (TFLM's SignalEnergy
    /// writes only its bins' range) leaves the rest holding an earlier
    /// tensor: its reader loads bytes no layout destroyed, an unwritten
    /// read, not a clobber. Bytes it wrote and another layer overwrote
    /// stay clobbers (and so does a tensor its producer wrote none of:
    /// `an_aliased_reshape_hands_its_bytes_to_its_output`).
    #[test]
    fn bytes_a_producer_never_wrote_are_unwritten_reads_not_clobbers() {
        let mut m = ShadowMap::new(0, 32);
        m.layer_begin(&layer(0, "first"));
        m.buffer(&buf(2, Role::Output, "a", 0, 8));
        m.events(&[ev(0, 2, 0, 8, AccessKind::Store)]);
        m.layer_end(0);
        m.layer_begin(&layer(1, "partial"));
        m.buffer(&buf(2, Role::Output, "b", 0, 8));
        m.events(&[ev(0, 2, 0, 4, AccessKind::Store)]);
        m.layer_end(0);
        m.layer_begin(&layer(2, "overwrites"));
        m.buffer(&buf(2, Role::Output, "c", 0, 2));
        m.events(&[ev(0, 2, 0, 2, AccessKind::Store)]);
        m.layer_end(0);
        m.layer_begin(&layer(3, "reader"));
        m.buffer(&buf(0, Role::Input, "b", 0, 8));
        m.buffer(&buf(2, Role::Output, "d", 16, 8));
        m.events(&[ev(0, 0, 0, 8, AccessKind::Load)]);
        m.layer_end(0);
        assert_eq!(m.clobbers.len(), 1, "{:?}", m.clobbers);
        assert_eq!((m.clobbers[0].offset, m.clobbers[0].bytes), (0, 2));
        assert_eq!(m.clobbers[0].overwritten_by.as_ref().unwrap().tensor, "c");
        assert_eq!(m.unwritten_reads.len(), 1, "{:?}", m.unwritten_reads);
        let u = &m.unwritten_reads[0];
        assert_eq!((u.offset, u.bytes), (4, 4));
        assert_eq!(u.overwritten_by.as_ref().unwrap().tensor, "a");
    }

    /// A map over TinySeg's storage region (`memtrace verify` runs one
    /// beside the arena's): SPILL layers write their storage tensor through
    /// their output buffer, FETCH layers read it through an input. Two
    /// spills whose storage slots overlap leave the first one's fetch
    /// reading the second one's bytes.
    #[test]
    fn a_fetch_of_storage_bytes_another_spill_overwrote_is_a_clobber() {
        let spill = |m: &mut ShadowMap, i: usize, name: &str, stored: &str, at: u64| {
            m.layer_begin(&layer_op(i, name, "spill"));
            m.buffer(&buf(0, Role::Input, "victim", 0x100, 16));
            m.buffer(&buf(2, Role::Output, stored, at, 16));
            m.events(&[
                ev(0, 0, 0, 16, AccessKind::Load),
                ev(1, 2, 0, 16, AccessKind::Store),
            ]);
            m.layer_end(0);
        };
        let fetch = |m: &mut ShadowMap, i: usize, stored: &str, at: u64| {
            m.layer_begin(&layer_op(i, "fetch", "fetch"));
            m.buffer(&buf(0, Role::Input, stored, at, 16));
            m.buffer(&buf(2, Role::Output, "fetched", 0x100, 16));
            m.events(&[ev(0, 0, 0, 16, AccessKind::Load)]);
            m.layer_end(0);
        };
        // Storage at 0x1000; the arena tensors at 0x100 lie outside it.
        let mut clean = ShadowMap::new(0x1000, 64);
        spill(&mut clean, 0, "spill_a", "a/spilled", 0x1000);
        spill(&mut clean, 1, "spill_b", "b/spilled", 0x1010);
        fetch(&mut clean, 2, "a/spilled", 0x1000);
        assert!(clean.clobbers.is_empty(), "{:?}", clean.clobbers);
        let mut bad = ShadowMap::new(0x1000, 64);
        spill(&mut bad, 0, "spill_a", "a/spilled", 0x1000);
        spill(&mut bad, 1, "spill_b", "b/spilled", 0x1008);
        fetch(&mut bad, 2, "a/spilled", 0x1000);
        assert_eq!(bad.clobbers.len(), 1);
        let c = &bad.clobbers[0];
        assert_eq!((c.tensor.as_str(), c.offset, c.bytes), ("a/spilled", 8, 8));
        assert_eq!(c.overwritten_by.as_ref().unwrap().op, "spill_b");
    }
}
