//! Byte-level cold ranges, measured from a whole-model trace of TFLM.
//!
//! [`ByteCold`] is an [`Analysis`] of one run of a model on the TFLM runner
//! (one layer window per operator, after the `load_input` windows). For every byte of
//! every arena tensor it records, per window that touches it, the first and
//! the last access (retired instructions, counted over the layer windows one
//! after the other). When the tensor's last reader has run, its bytes are
//! grouped into *classes*: bytes accessed by the same operator positions. A
//! class's gaps are the stretches between two accessing positions (and, when
//! the class is not accessed by the tensor's last reader, the dead tail up to
//! it); each gap gives the last access before it and the first after it as
//! instruction intervals over the class's bytes.
//!
//! Graph level (Algorithm 2) assumes every access touches every byte; here a
//! consumer that never reads some bytes (a strided 1×1 convolution skipping
//! odd rows and columns, a VALID pool that drops a border) leaves those
//! bytes idle longer than the tensor: a partial spill could move them out
//! for longer. Accesses are attributed by the buffer they go through (its
//! id in its window, [`BufferTensors`]), never by address or by name, so
//! tensors sharing arena bytes at other times, or a name, do not mix.
//!
//! (Past 500 lines for its unit tests, which feed the analysis windows,
//! buffers and accesses by hand.)

use std::collections::HashMap;

use memtrace_abi::{Analysis, Buffer, Event, LayerInfo, Role};
use serde::Serialize;

use memtrace_model::cold::graph_cold_ranges;
use memtrace_model::Model;

/// Name the runner gives the windows that copy graph inputs into the arena.
pub use memtrace_abi::runner::LOAD_INPUT;

/// Which model tensor each buffer a window declares is: buffer id → tensor
/// index, per window. The guest's declarations say it (for the TFLM runner,
/// input k is id k and output j is id 32 + j, docs/protocol.md); names
/// would not, as a model may leave tensors unnamed or name two alike.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BufferTensors {
    /// Per operator window, by position in the execution order.
    pub ops: Vec<Vec<(u32, usize)>>,
    /// Per `load_input` window, by the graph input it loads (its
    /// `input=<i>` parameter).
    pub inputs: Vec<Vec<(u32, usize)>>,
}

impl BufferTensors {
    /// The table of the window `layer` at operator `position`.
    fn of(&self, layer: &LayerInfo, position: usize) -> &[(u32, usize)] {
        let table = if layer.op == LOAD_INPUT {
            load_input_index(&layer.params).and_then(|i| self.inputs.get(i))
        } else {
            self.ops.get(position)
        };
        table.map_or(&[], Vec::as_slice)
    }
}

/// The graph input a `load_input` window loads, from its `input=<i>`.
fn load_input_index(params: &str) -> Option<usize> {
    params
        .split(',')
        .find_map(|kv| kv.strip_prefix("input="))
        .and_then(|v| v.trim().parse().ok())
}

/// One layer window of the run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OpWindow {
    /// Position in the execution order (`load_input` windows count as 0, the
    /// position at which Algorithm 2 defines graph inputs).
    pub position: usize,
    /// Layer name (the operator's, or `load_input`).
    pub name: String,
    /// Operator (TFLM's tag: `CONV_2D`, ..., or `load_input`).
    pub op: String,
    /// Instructions before the window (over all earlier windows).
    pub start: u64,
    /// Instructions at its end.
    pub end: u64,
}

/// Bytes `offset + k·stride .. offset + k·stride + len` for `k < count`: a
/// run of bytes, repeated at a fixed stride (rows or pixels a strided
/// consumer skips).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ByteRuns {
    /// First byte of the first run (tensor-relative).
    pub offset: u64,
    /// Bytes per run.
    pub len: u64,
    /// Distance between the starts of two runs (`len` or more; 0 when
    /// `count` is 1).
    pub stride: u64,
    /// Number of runs.
    pub count: u64,
}

/// `[min, max]` of a quantity over a class's bytes.
pub type Span = [u64; 2];

/// A stretch in which a class of bytes is not accessed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ByteGap {
    /// Position of the access that opens it.
    pub from: usize,
    /// Position of the access that closes it; `None` for the dead tail: no
    /// access follows, the arena keeps the bytes until the tensor's last
    /// reader (`last`) has run.
    pub to: Option<usize>,
    /// Algorithm 2's length: `to − from`, or `last − from` for the tail.
    pub span: usize,
    /// Operators that run while the bytes sit in the arena unaccessed:
    /// `to − from − 1`, or `last − from` for the tail.
    pub idle_ops: usize,
    /// Instruction of each byte's last access before the gap.
    pub last_before: Span,
    /// Instruction of each byte's first access after it (`None`: tail).
    pub first_after: Option<Span>,
    /// Per byte, instructions from its last access before to its first
    /// access after (tail: to the end of the `last` window).
    pub idle_instructions: Span,
}

/// Bytes of one tensor accessed at the same positions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ByteClass {
    /// Positions whose windows access these bytes (empty: never accessed).
    pub positions: Vec<usize>,
    /// Per position, instructions from a byte's first to its last access in
    /// that window (min and max over the bytes): 0 for bytes accessed once
    /// (or, on the MMIO path, only within one block).
    pub busy_instructions: Vec<Span>,
    /// Number of bytes.
    pub bytes: u64,
    /// Where they are in the tensor.
    pub runs: Vec<ByteRuns>,
    /// The gaps, in time order.
    pub gaps: Vec<ByteGap>,
    /// Index into `gaps` of the one with the most idle operators (the first
    /// on ties, like Algorithm 2), if any.
    pub longest: Option<usize>,
}

impl ByteClass {
    /// Idle operators of the longest gap (0 without one).
    pub fn longest_idle_ops(&self) -> usize {
        self.longest.map_or(0, |g| self.gaps[g].idle_ops)
    }
}

/// Byte-level cold ranges of one arena tensor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ByteColdTensor {
    /// Tensor index in the model.
    pub tensor: usize,
    /// Bytes of the tensor.
    pub bytes: u64,
    /// Its last graph-level access (where its bytes are freed).
    pub last: usize,
    /// Classes, by their first byte.
    pub classes: Vec<ByteClass>,
}

impl ByteColdTensor {
    /// The most idle operators any byte has in one gap.
    pub fn longest_idle_ops(&self) -> usize {
        self.classes
            .iter()
            .map(ByteClass::longest_idle_ops)
            .max()
            .unwrap_or(0)
    }

    /// Σ over bytes of the idle operators of the byte's longest gap: the
    /// arena time (bytes × ops) that spilling each byte for its own longest
    /// gap would free.
    pub fn idle_cost(&self) -> u64 {
        self.classes
            .iter()
            .map(|c| c.bytes * c.longest_idle_ops() as u64)
            .sum()
    }

    /// Bytes whose longest gap has more than `idle_ops` idle operators.
    pub fn bytes_idle_longer_than(&self, idle_ops: usize) -> u64 {
        self.classes
            .iter()
            .filter(|c| c.longest_idle_ops() > idle_ops)
            .map(|c| c.bytes)
            .sum()
    }
}

/// What the run showed: its windows and every tracked tensor's classes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ByteColdRun {
    /// Every layer window, in run order.
    pub windows: Vec<OpWindow>,
    /// One entry per tracked tensor, by tensor index.
    pub tensors: Vec<ByteColdTensor>,
    /// Accesses the model cannot explain (a tensor touched after its last
    /// graph-level access, a window beyond the execution order); empty on a
    /// consistent run.
    pub problems: Vec<String>,
}

/// One window's accesses to one tensor: per byte, first and last instruction
/// (`u64::MAX` first: untouched).
struct Touch {
    position: usize,
    first: Vec<u64>,
    last: Vec<u64>,
}

/// A tensor being traced.
struct Tracked {
    bytes: u64,
    /// Position after whose window the tensor is classified and dropped.
    last: usize,
    touches: Vec<Touch>,
    done: bool,
}

/// The byte-level cold range analysis (an [`Analysis`]) of one run of
/// `model` in `order`.
pub struct ByteCold {
    attribution: BufferTensors,
    /// Buffer id → tensor of the open window.
    window: Vec<(u32, usize)>,
    tracked: HashMap<usize, Tracked>,
    /// Buffer id → tracked tensor of the open window (weights, biases and
    /// scratch are not tracked).
    buffers: Vec<(u32, usize)>,
    /// Position of the open window.
    position: usize,
    /// Operator windows seen so far.
    op_windows: usize,
    layer: Option<(String, String)>,
    /// Instructions before the open window.
    t_layer: u64,
    ops: usize,
    run: ByteColdRun,
}

impl ByteCold {
    /// Tracks every arena tensor `order` reads or writes (scratch tensors,
    /// which live inside one operator, are not), attributing each window's
    /// buffers by `attribution`.
    pub fn new(model: &Model, order: &[usize], attribution: BufferTensors) -> Self {
        let mut tracked = HashMap::new();
        for r in graph_cold_ranges(model, order) {
            tracked.insert(
                r.tensor,
                Tracked {
                    bytes: r.bytes,
                    last: r.last,
                    touches: Vec::new(),
                    done: false,
                },
            );
        }
        ByteCold {
            attribution,
            window: Vec::new(),
            tracked,
            buffers: Vec::new(),
            position: 0,
            op_windows: 0,
            layer: None,
            t_layer: 0,
            ops: order.len(),
            run: ByteColdRun::default(),
        }
    }

    /// Classifies what is still open (a run that stopped early) and returns
    /// the result, tensors by index.
    pub fn finish(mut self) -> ByteColdRun {
        let open: Vec<usize> = self
            .tracked
            .iter()
            .filter(|(_, t)| !t.done)
            .map(|(&i, _)| i)
            .collect();
        for t in open {
            self.classify(t);
        }
        self.run.tensors.sort_by_key(|t| t.tensor);
        self.run
    }

    /// Groups the bytes of tensor `t` into classes and frees its touches.
    fn classify(&mut self, t: usize) {
        let Some(tr) = self.tracked.get_mut(&t) else {
            return;
        };
        tr.done = true;
        let touches = std::mem::take(&mut tr.touches);
        let (bytes, last) = (tr.bytes, tr.last);
        let end_of_last = self
            .run
            .windows
            .iter()
            .rev()
            .find(|w| w.position == last && w.op != LOAD_INPUT)
            .map_or(self.t_layer, |w| w.end);
        self.run.tensors.push(ByteColdTensor {
            tensor: t,
            bytes,
            last,
            classes: classes(&touches, bytes, last, end_of_last),
        });
    }
}

/// Running min/max of a gap over a class's bytes.
struct GapAcc {
    from: usize,
    to: Option<usize>,
    last_before: Span,
    first_after: Span,
    idle: Span,
}

impl GapAcc {
    fn new(from: usize, to: Option<usize>) -> Self {
        GapAcc {
            from,
            to,
            last_before: [u64::MAX, 0],
            first_after: [u64::MAX, 0],
            idle: [u64::MAX, 0],
        }
    }

    fn observe(&mut self, before: u64, after: u64) {
        widen(&mut self.last_before, before);
        widen(&mut self.first_after, after);
        widen(&mut self.idle, after.saturating_sub(before));
    }

    fn finish(self, last: usize) -> ByteGap {
        let (span, idle_ops) = match self.to {
            Some(to) => (to - self.from, to - self.from - 1),
            None => (last - self.from, last - self.from),
        };
        ByteGap {
            from: self.from,
            to: self.to,
            span,
            idle_ops,
            last_before: self.last_before,
            first_after: self.to.map(|_| self.first_after),
            idle_instructions: self.idle,
        }
    }
}

fn widen(span: &mut Span, v: u64) {
    span[0] = span[0].min(v);
    span[1] = span[1].max(v);
}

/// A class being built.
struct ClassAcc {
    positions: Vec<usize>,
    busy: Vec<Span>,
    bytes: u64,
    /// Maximal runs of consecutive bytes, `[start, end)`.
    runs: Vec<(u64, u64)>,
    gaps: Vec<GapAcc>,
}

/// Classes of a tensor of `bytes` bytes from its windows' `touches` (in
/// position order); `last` is its last graph-level access and `end_of_last`
/// the instruction at which that window ended.
fn classes(touches: &[Touch], bytes: u64, last: usize, end_of_last: u64) -> Vec<ByteClass> {
    let mut index: HashMap<Vec<u16>, usize> = HashMap::new();
    let mut accs: Vec<ClassAcc> = Vec::new();
    let mut key: Vec<u16> = Vec::new();
    let mut previous: Option<usize> = None;
    for b in 0..bytes as usize {
        key.clear();
        key.extend(
            touches
                .iter()
                .enumerate()
                .filter(|(_, w)| w.first[b] != u64::MAX)
                .map(|(i, _)| i as u16),
        );
        let class = match index.get(key.as_slice()) {
            Some(&c) => c,
            None => {
                let positions: Vec<usize> =
                    key.iter().map(|&i| touches[i as usize].position).collect();
                let mut gaps: Vec<GapAcc> = positions
                    .windows(2)
                    .map(|p| GapAcc::new(p[0], Some(p[1])))
                    .collect();
                if let Some(&p) = positions.last().filter(|&&p| p < last) {
                    gaps.push(GapAcc::new(p, None));
                }
                index.insert(key.clone(), accs.len());
                accs.push(ClassAcc {
                    busy: vec![[u64::MAX, 0]; positions.len()],
                    positions,
                    bytes: 0,
                    runs: Vec::new(),
                    gaps,
                });
                accs.len() - 1
            }
        };
        let acc = &mut accs[class];
        acc.bytes += 1;
        match acc.runs.last_mut() {
            Some(run) if previous == Some(class) && run.1 == b as u64 => run.1 += 1,
            _ => acc.runs.push((b as u64, b as u64 + 1)),
        }
        previous = Some(class);
        for (busy, &i) in acc.busy.iter_mut().zip(&key) {
            let w = &touches[i as usize];
            widen(busy, w.last[b] - w.first[b]);
        }
        for (g, pair) in key.windows(2).enumerate() {
            let before = touches[pair[0] as usize].last[b];
            let after = touches[pair[1] as usize].first[b];
            acc.gaps[g].observe(before, after);
        }
        if let (Some(&i), Some(tail)) = (key.last(), acc.gaps.last_mut()) {
            if tail.to.is_none() {
                tail.observe(touches[i as usize].last[b], end_of_last);
            }
        }
    }
    let mut out: Vec<ByteClass> = accs
        .into_iter()
        .map(|acc| {
            let gaps: Vec<ByteGap> = acc.gaps.into_iter().map(|g| g.finish(last)).collect();
            let mut longest: Option<usize> = None;
            for (i, g) in gaps.iter().enumerate() {
                if longest.is_none_or(|l| g.idle_ops > gaps[l].idle_ops) {
                    longest = Some(i);
                }
            }
            ByteClass {
                positions: acc.positions,
                busy_instructions: acc.busy,
                bytes: acc.bytes,
                runs: progressions(&acc.runs),
                gaps,
                longest,
            }
        })
        .collect();
    out.sort_by_key(|c| c.runs.first().map_or(0, |r| r.offset));
    out
}

/// Maximal runs `[start, end)` as arithmetic progressions of equal runs.
pub fn progressions(runs: &[(u64, u64)]) -> Vec<ByteRuns> {
    let mut out: Vec<ByteRuns> = Vec::new();
    for &(start, end) in runs {
        let len = end - start;
        if let Some(p) = out.last_mut() {
            if p.len == len {
                if p.count == 1 && start > p.offset {
                    p.stride = start - p.offset;
                    p.count = 2;
                    continue;
                }
                if p.offset + p.count * p.stride == start {
                    p.count += 1;
                    continue;
                }
            }
        }
        out.push(ByteRuns {
            offset: start,
            len,
            stride: 0,
            count: 1,
        });
    }
    out
}

impl Analysis for ByteCold {
    fn layer_begin(&mut self, layer: &LayerInfo) {
        self.buffers.clear();
        if layer.op == LOAD_INPUT {
            self.position = 0;
        } else {
            self.position = self.op_windows;
            self.op_windows += 1;
            if self.position >= self.ops {
                self.run.problems.push(format!(
                    "window {} (`{}`) is beyond the {} operators of the order",
                    layer.index, layer.name, self.ops
                ));
            }
        }
        self.window = self.attribution.of(layer, self.position).to_vec();
        self.layer = Some((layer.name.clone(), layer.op.clone()));
    }

    fn buffer(&mut self, b: &Buffer) {
        if matches!(
            b.role,
            Role::Weights | Role::Bias | Role::Scratch | Role::Persistent
        ) {
            return;
        }
        let tensor = self.window.iter().find(|(id, _)| *id == b.id);
        if let Some(&(_, t)) = tensor.filter(|(_, t)| self.tracked.contains_key(t)) {
            self.buffers.push((b.id, t));
        }
    }

    fn events(&mut self, events: &[Event]) {
        let position = self.position;
        for e in events {
            let Some(&(_, t)) = self.buffers.iter().find(|(id, _)| *id == e.buffer) else {
                continue;
            };
            let Some(tr) = self.tracked.get_mut(&t) else {
                continue;
            };
            if tr.done {
                continue;
            }
            if tr.touches.last().is_none_or(|w| w.position != position) {
                tr.touches.push(Touch {
                    position,
                    first: vec![u64::MAX; tr.bytes as usize],
                    last: vec![0; tr.bytes as usize],
                });
            }
            let w = tr.touches.last_mut().expect("pushed above");
            let time = self.t_layer + e.t;
            let start = (e.offset as u64).min(tr.bytes) as usize;
            let end = (e.offset as u64 + e.size as u64).min(tr.bytes) as usize;
            for b in start..end {
                if w.first[b] == u64::MAX {
                    w.first[b] = time;
                }
                w.last[b] = time;
            }
        }
    }

    fn layer_end(&mut self, instructions: u64) {
        let (name, op) = self.layer.take().unwrap_or_default();
        let is_op = op != LOAD_INPUT;
        self.run.windows.push(OpWindow {
            position: self.position,
            name,
            op,
            start: self.t_layer,
            end: self.t_layer + instructions,
        });
        self.t_layer += instructions;
        self.buffers.clear();
        if is_op {
            let ending: Vec<usize> = self
                .tracked
                .iter()
                .filter(|(_, t)| !t.done && t.last == self.position)
                .map(|(&i, _)| i)
                .collect();
            for t in ending {
                self.classify(t);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(position: usize, times: &[Option<(u64, u64)>]) -> Touch {
        Touch {
            position,
            first: times.iter().map(|t| t.map_or(u64::MAX, |t| t.0)).collect(),
            last: times.iter().map(|t| t.map_or(0, |t| t.1)).collect(),
        }
    }

    /// Four bytes written at 0 (instructions 10..13); bytes 0 and 2 read at
    /// 1 (100, 101), all read at 4 (400..403): bytes 1 and 3 idle from their
    /// write to position 4, bytes 0 and 2 from position 1.
    #[test]
    fn bytes_a_consumer_skips_form_their_own_class() {
        let w = touch(
            0,
            &[
                Some((10, 10)),
                Some((11, 11)),
                Some((12, 12)),
                Some((13, 13)),
            ],
        );
        let r = touch(1, &[Some((100, 100)), None, Some((101, 101)), None]);
        let z = touch(
            4,
            &[
                Some((400, 400)),
                Some((401, 401)),
                Some((402, 402)),
                Some((403, 403)),
            ],
        );
        let c = classes(&[w, r, z], 4, 4, 500);
        assert_eq!(c.len(), 2);
        let (read, skipped) = (&c[0], &c[1]);
        assert_eq!(read.positions, vec![0, 1, 4]);
        assert_eq!(
            read.runs,
            vec![ByteRuns {
                offset: 0,
                len: 1,
                stride: 2,
                count: 2
            }]
        );
        assert_eq!(read.longest_idle_ops(), 2);
        let g = &read.gaps[read.longest.unwrap()];
        assert_eq!((g.from, g.to), (1, Some(4)));
        assert_eq!(g.last_before, [100, 101]);
        assert_eq!(g.first_after, Some([400, 402]));
        assert_eq!(g.idle_instructions, [300, 301]);
        assert_eq!(skipped.positions, vec![0, 4]);
        assert_eq!(skipped.bytes, 2);
        let g = &skipped.gaps[0];
        assert_eq!((g.from, g.to, g.span, g.idle_ops), (0, Some(4), 4, 3));
        assert_eq!(g.idle_instructions, [390, 390]);
        assert_eq!(read.busy_instructions, vec![[0, 0]; 3]);
    }

    /// A byte the last reader does not touch is dead from its last access
    /// to the end of that reader.
    #[test]
    fn a_byte_left_unread_by_the_last_reader_has_a_dead_tail() {
        let w = touch(0, &[Some((1, 1)), Some((2, 2))]);
        let r = touch(3, &[Some((30, 35)), None]);
        let c = classes(&[w, r], 2, 3, 40);
        assert_eq!(c[0].busy_instructions, vec![[0, 0], [5, 5]]);
        let tail = &c[1].gaps[0];
        assert_eq!(c[1].positions, vec![0]);
        assert_eq!((tail.to, tail.span, tail.idle_ops), (None, 3, 3));
        assert_eq!(tail.first_after, None);
        assert_eq!(tail.idle_instructions, [38, 38]);
        let t = ByteColdTensor {
            tensor: 0,
            bytes: 2,
            last: 3,
            classes: c,
        };
        assert_eq!(t.idle_cost(), 2 + 3);
        assert_eq!(t.bytes_idle_longer_than(2), 1);
    }

    fn window(index: usize, op: &str, params: &str) -> LayerInfo {
        LayerInfo {
            index,
            name: format!("{index}:{op}"),
            op: op.into(),
            params: params.into(),
            spec: None,
        }
    }

    fn declare(id: u32, role: Role, name: &str, size: u32) -> Buffer {
        Buffer {
            id,
            role,
            name: name.into(),
            base: 0,
            size,
            elem_size: 1,
        }
    }

    fn access(buffer: u32, t: u64, offset: u32, size: u32) -> Event {
        Event {
            t,
            seq: t,
            pc: 0,
            buffer,
            offset,
            size,
            kind: memtrace_abi::AccessKind::Load,
        }
    }

    /// x → a → b: buffers are attributed by their id in the window, so two
    /// tensors the guest declares under one name (or under another
    /// tensor's) stay apart.
    #[test]
    fn buffers_are_attributed_by_id_not_by_name() {
        use memtrace_model::zoo::GraphBuilder;
        use memtrace_model::{Activation, Dtype, OpKind};
        let mut g = GraphBuilder::new("ids", Dtype::Int8);
        let x = g.input("x", &[1, 2, 2, 1]);
        let a = g.pool(OpKind::MaxPool, "a", x, 1, 1);
        let b = g.conv2d("b", a, 1, 1, 1, Activation::None);
        let model = g.finish(&[b]);
        let table = BufferTensors {
            ops: vec![vec![(0, x), (32, a)], vec![(0, a), (32, b)]],
            inputs: vec![vec![(32, x)]],
        };
        let mut cold = ByteCold::new(&model, &[0, 1], table);
        cold.layer_begin(&window(0, LOAD_INPUT, "input=0"));
        cold.buffer(&declare(32, Role::Output, "same", 4));
        cold.events(&[access(32, 1, 0, 4)]);
        cold.layer_end(10);
        cold.layer_begin(&window(1, "MAX_POOL_2D", "index=0"));
        cold.buffer(&declare(0, Role::Input, "same", 4));
        cold.buffer(&declare(32, Role::Output, "same", 4));
        cold.events(&[access(0, 2, 0, 4), access(32, 3, 0, 4)]);
        cold.layer_end(10);
        cold.layer_begin(&window(2, "CONV_2D", "index=1"));
        cold.buffer(&declare(0, Role::Input, "x", 4));
        cold.buffer(&declare(32, Role::Output, "x", 4));
        // b's first two bytes only: a name would have put them in x.
        cold.events(&[access(0, 1, 0, 4), access(32, 2, 0, 2)]);
        cold.layer_end(10);
        let run = cold.finish();
        assert!(run.problems.is_empty(), "{:?}", run.problems);
        let of = |t: usize| run.tensors.iter().find(|c| c.tensor == t).unwrap();
        let positions = |t: usize| -> Vec<Vec<usize>> {
            of(t).classes.iter().map(|c| c.positions.clone()).collect()
        };
        assert_eq!(positions(x), vec![vec![0]]);
        assert_eq!(positions(a), vec![vec![0, 1]]);
        assert_eq!(positions(b), vec![vec![1], vec![]]);
        assert_eq!(load_input_index("input=3"), Some(3));
        assert_eq!(load_input_index("index=3"), None);
    }

    #[test]
    fn runs_at_a_fixed_stride_become_one_progression() {
        let runs = [(0, 4), (8, 12), (16, 20), (21, 22), (30, 31)];
        let p = progressions(&runs);
        assert_eq!(
            p,
            vec![
                ByteRuns {
                    offset: 0,
                    len: 4,
                    stride: 8,
                    count: 3
                },
                ByteRuns {
                    offset: 21,
                    len: 1,
                    stride: 9,
                    count: 2
                }
            ]
        );
    }
}
