//! Algorithmic safe overlap O_s (DMO paper, Section III-C, Algorithm 2).
//!
//! For every operator the memtrace kernel suite runs, this module re-runs the
//! loop nest of the TFLM reference kernel it models — same loops, same order,
//! same border handling — with the arithmetic removed, and feeds the input
//! byte offsets read and the output byte ranges written into a streaming
//! accumulator of the *monotone* O_s (`docs/overlap.md` §1):
//!
//! ```text
//! M_k = max end byte (offset + size) of the output writes 0..=k
//! m_k = min input byte offset read strictly after write k   (IB if none)
//! O_s = max(0, min_k (OB - M_k + m_k))
//! ```
//!
//! # Steps
//!
//! Every kernel modelled here is a sequence of *steps*: some input reads, then
//! exactly one output write (one output element). A read and a write of the same
//! step are ordered read first, as in the compiled code (the loads feed the
//! value that is stored). Only the minimum input offset read between two
//! consecutive writes matters for the monotone O_s (see the proof in
//! `Monotone`), so the innermost tap loops (`filter_y`, `filter_x`,
//! `in_channel` / the FC depth loop) are collapsed to the offset of their first
//! in-bounds tap, which is their minimum: the set of in-bounds taps of a window
//! is a rectangle (rows × columns, each bounded independently, exactly as the
//! kernels' `is_point_inside_image` test or the pools' `filter_*_start/end`
//! clipping), and the NHWC offset grows with the row, then the column, then the
//! channel. The brute-force reference in the tests enumerates every tap instead
//! and must agree exactly.
//!
//! # What the compiled kernels do
//!
//! The model assumes element-sized accesses. A compiler may merge loads of one
//! step (e.g. the contiguous int8 `in_channel` run of `conv2d`) or stores into
//! wider accesses; that cannot change the monotone value, because a merged load
//! starts at the lowest element it covers and a merged store ends at the highest.
//! Merging *across* steps (hoisting the next step's loads above this step's
//! store, or vectorising `relu`/`add`) would be needed to change it, and the
//! kernels' input and output pointers are not `restrict`, so the compiler must
//! keep those loads after the store unless it versions the loop with a runtime
//! alias check (GCC `-O3` can) — in which case an overlapped (DMO) placement
//! takes the scalar path anyway. For `matmul` we model the statement
//! `C[m][n] += A[m][k] * B[k][n]` literally, i.e. one load of `A[m][k]` per
//! `(k, m, n)` step; a kernel that loads `A[m][k]` once per `(k, m)` before the
//! `n` loop has fewer reads but the same O_s (0, decided by the zeroing pass).
//!
//! The per-op loop orders, from the `tfmicro` 0.1.0 reference kernels:
//!
//! | op | loops (outer → inner) | reads | write |
//! |---|---|---|---|
//! | conv2d (f32 `reference_ops::Conv`, int8 `reference_integer_ops::ConvPerChannel`) | b, out_y, out_x, out_c, filter_y, filter_x, in_c | in-bounds taps only | `[b, out_y, out_x, out_c]` |
//! | depthwise_conv2d (`DepthwiseConv`, `DepthwiseConvPerChannel`) | b, out_y, out_x, ic, m, filter_y, filter_x | in-bounds taps, channel `ic` | `[b, out_y, out_x, ic·mult + m]` |
//! | max/average_pool (f32 and int8) | b, out_y, out_x, c, filter_y, filter_x | window clipped by `filter_{x,y}_{start,end}`; no dilation | `[b, out_y, out_x, c]` |
//! | fully_connected (f32, int8) | b, out_c, d | `input[b·depth + d]` | `output[out_c + units·b]` |
//! | add (f32, int8) | i | `input1[i]` (and `input2[i]`, another buffer) | `output[i]` |
//! | relu | i | `input[i]` | `output[i]` |
//! | matmul (memtrace's own) | zero pass m, n; then k, m, n | `A[m][k]` | `C[m][n]` |
//! | transpose_conv f32 (`reference_ops::TransposeConv`) | zero pass; b, in_y, in_x, in_c, filter_y, filter_x, out_c; bias pass | `input[b, in_y, in_x, in_c]` in the scatter | zero pass, `[b, out_y, out_x, out_c]` (in-bounds), bias pass |
//! | transpose_conv int8 (`reference_integer_ops::TransposeConv`) | scatter into the int32 scratch; then b, y, x, c | none after the first output write | `[b, y, x, c]` |
//! | concatenation (`reference_ops::Concatenation`) | outer index, input, element (`memcpy`) | the element of the input being copied | `output` in order |
//! | pad (`reference_ops::Pad`) | b, h, w, c of the output | `input[i]`, `i` counting interior elements | `output` in order |
//!
//! Float and int8 variants of all of these have identical loop nests in this
//! TFLM version, except transpose_conv: the float kernel accumulates in the
//! output (zeroed first, so nothing of the input may overlap it: O_s = 0),
//! the int8 kernel in a separate int32 scratch buffer and writes the output
//! only after reading all of the input (O_s = IB).
//!
//! # Ops with two inputs
//!
//! O_s is a property of one input/output pair. [`algorithmic_overlap`] is the
//! first input's; [`algorithmic_overlap_of_input`] gives input `k`'s. For
//! `add` both inputs are read at the same step (the same value); for
//! `concatenation` they are not (docs/overlap.md §6).

use memtrace_abi::spec::{Dtype, LayerSpec, OpKind};

/// minR / maxW curves of a layer, in bytes, for plotting (paper Figs. 5–7).
///
/// `x` is the step index: step `k` is the `k`-th output write of the kernel.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Curves {
    /// Output buffer size OB in bytes.
    pub output_bytes: u64,
    /// (First) input buffer size IB in bytes.
    pub input_bytes: u64,
    /// Number of output writes (steps) of the kernel.
    pub total_steps: u64,
    /// The monotone O_s, computed over every step (not only the sampled ones).
    pub overlap: u64,
    /// The step `k` whose term `OB - M_k + m_k` is the minimum (the binding
    /// write), or `None` if the minimum is `IB` from the final write only.
    pub binding_step: Option<u64>,
    /// Sampled points, in increasing step order; the first and the last step
    /// are always included. Every sampled point is exact (not averaged).
    pub points: Vec<CurvePoint>,
}

/// One sampled step of [`Curves`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CurvePoint {
    /// Step index `k`.
    pub step: u64,
    /// `M_k`: max end byte (offset + size) of the output writes `0..=k` (maxW).
    pub max_write_end: u64,
    /// `m_k`: min input byte offset read strictly after write `k`, or IB if
    /// there is none (minR).
    pub min_future_read: u64,
}

/// Monotone O_s in bytes of `spec` run through the TFLM reference kernel it
/// models (memtrace's own kernel for `matmul`). `None` for an op without a
/// method (all current ops have one).
pub fn algorithmic_overlap(spec: &LayerSpec) -> Option<u64> {
    algorithmic_overlap_of_input(spec, 0)
}

/// Monotone O_s in bytes of activation input `input` (0, or 1 for `add` and
/// `concatenation`) against the output; `None` when the op has no such
/// input.
pub fn algorithmic_overlap_of_input(spec: &LayerSpec, input: usize) -> Option<u64> {
    let ib = spec.input_bytes_of(input)?;
    let mut acc = Monotone::new(spec.output_bytes(), ib, true);
    walk_input(spec, input, &mut acc)?;
    Some(acc.finish())
}

/// minR / maxW curves of `spec`, sampled at most `max_points` steps (at least 2;
/// `0` means every step). Memory is `O(max_points)`; the kernel loops run once.
pub fn algorithmic_curves(spec: &LayerSpec, max_points: usize) -> Option<Curves> {
    let total = step_count(spec)?;
    let mut sink = CurveSink::new(spec, total, max_points);
    walk(spec, &mut sink)?;
    Some(sink.finish())
}

/// Number of output writes (steps) the modelled kernel performs.
pub(crate) fn step_count(spec: &LayerSpec) -> Option<u64> {
    let out: u64 = spec.output.iter().map(|&d| d as u64).product();
    Some(match spec.op {
        OpKind::Matmul => {
            // zeroing pass + one update per (k, m, n)
            out + out * spec.input[3] as u64
        }
        // zeroing pass + one update per in-bounds tap + bias pass
        OpKind::TransposeConv if spec.dtype == Dtype::Float32 => {
            2 * out + transpose_conv_taps(spec)
        }
        _ => out,
    })
}

/// In-bounds (input element, filter tap, output channel) triples of a
/// transpose conv: the scatter updates of the float reference kernel. The
/// row and column tests are independent, so it is a product of per-axis
/// counts.
fn transpose_conv_taps(spec: &LayerSpec) -> u64 {
    let g = Geometry::of(spec);
    // pairs (i, f) with 0 <= i·s − p + f < o
    let axis = |size: i64, k: i64, s: i64, p: i64, o: i64| -> u64 {
        (0..size)
            .map(|i| {
                let origin = i * s - p;
                let lo = (-origin).max(0);
                let hi = k.min(o - origin);
                (hi - lo).max(0) as u64
            })
            .sum()
    };
    let rows = axis(g.ih, g.kh, g.sh, g.ph, g.oh);
    let cols = axis(g.iw, g.kw, g.sw, g.pw, g.ow);
    g.n as u64 * g.id as u64 * g.od as u64 * rows * cols
}

/// Receives the steps of a kernel, in program order.
pub(crate) trait StepSink {
    /// One step: the minimum input byte offset read since the previous write
    /// (`None` if the step reads no input), then one output write.
    /// Returns `false` to stop the walk early.
    fn step(&mut self, min_read: Option<u64>, write_offset: u64, write_size: u64) -> bool;
}

/// Streaming monotone O_s accumulator, O(1) memory.
///
/// The minimum over writes `k` of `OB - M_k + m_k` equals the minimum over
/// input reads `r` (that follow at least one write) of `OB - M(r) + r`, where
/// `M(r)` is the max write end before the read, together with the term
/// `OB - M_last + IB` of the last write: for a fixed read the largest (hence
/// binding) `M_k` among the writes before it is the latest one, because `M_k`
/// never decreases. So a forward pass needs only the running `M` and the running
/// minimum, and within a step only the minimum read offset matters.
pub(crate) struct Monotone {
    ob: i64,
    ib: i64,
    max_end: Option<u64>,
    best: i64,
    /// Write index of the binding term (`None`: IB / none yet).
    binding: Option<u64>,
    writes: u64,
    early_exit: bool,
}

impl Monotone {
    pub(crate) fn new(output_bytes: u64, input_bytes: u64, early_exit: bool) -> Self {
        Monotone {
            ob: output_bytes as i64,
            ib: input_bytes as i64,
            max_end: None,
            best: i64::MAX,
            binding: None,
            writes: 0,
            early_exit,
        }
    }

    /// The monotone O_s in bytes.
    pub(crate) fn finish(&self) -> u64 {
        self.final_min().max(0) as u64
    }

    fn final_min(&self) -> i64 {
        match self.max_end {
            Some(m) => self.best.min(self.ob - m as i64 + self.ib),
            None => self.ib,
        }
    }
}

impl StepSink for Monotone {
    #[inline]
    fn step(&mut self, min_read: Option<u64>, write_offset: u64, write_size: u64) -> bool {
        if let (Some(r), Some(m)) = (min_read, self.max_end) {
            let term = self.ob - m as i64 + r as i64;
            if term < self.best {
                self.best = term;
                self.binding = Some(self.writes - 1);
            }
        }
        let end = write_offset + write_size;
        self.max_end = Some(self.max_end.map_or(end, |m| m.max(end)));
        self.writes += 1;
        // Once a term is <= 0 the result is 0 whatever follows.
        !(self.early_exit && self.best <= 0)
    }
}

/// Samples `M_k` and bucketed minimum reads at `max_points` steps, then a
/// reverse pass turns bucket minima into exact `m_k` at the sampled steps.
struct CurveSink {
    total: u64,
    npoints: u64,
    /// Step index of the next sample to record.
    next_sample: u64,
    /// Index of the next sample.
    next_index: u64,
    samples: Vec<(u64, u64)>, // (step, M_k)
    /// `bucket[i]`: min read in steps (sample_i, sample_{i+1}]
    buckets: Vec<u64>,
    monotone: Monotone,
    step: u64,
    ib: u64,
}

impl CurveSink {
    fn new(spec: &LayerSpec, total: u64, max_points: usize) -> Self {
        let npoints = if max_points == 0 || max_points as u64 >= total {
            total
        } else {
            (max_points as u64).max(2)
        };
        CurveSink {
            total,
            npoints,
            next_sample: 0,
            next_index: 0,
            samples: Vec::with_capacity(npoints as usize),
            buckets: Vec::with_capacity(npoints as usize),
            monotone: Monotone::new(spec.output_bytes(), spec.input_bytes(), false),
            step: 0,
            ib: spec.input_bytes(),
        }
    }

    fn sample_step(&self, i: u64) -> u64 {
        if self.npoints <= 1 {
            return 0;
        }
        ((i as u128 * (self.total - 1) as u128) / (self.npoints - 1) as u128) as u64
    }

    fn finish(self) -> Curves {
        let mut points: Vec<CurvePoint> = Vec::with_capacity(self.samples.len());
        let mut future = self.ib;
        for (i, &(step, max_end)) in self.samples.iter().enumerate().rev() {
            future = future.min(self.buckets[i]);
            points.push(CurvePoint {
                step,
                max_write_end: max_end,
                min_future_read: future,
            });
        }
        points.reverse();
        let overlap = self.monotone.finish();
        let binding_step = if self.monotone.best <= self.monotone.final_min() {
            self.monotone.binding
        } else {
            None
        };
        Curves {
            output_bytes: self.monotone.ob as u64,
            input_bytes: self.ib,
            total_steps: self.total,
            overlap,
            binding_step,
            points,
        }
    }
}

impl StepSink for CurveSink {
    fn step(&mut self, min_read: Option<u64>, write_offset: u64, write_size: u64) -> bool {
        if let (Some(r), Some(b)) = (min_read, self.buckets.last_mut()) {
            *b = (*b).min(r);
        }
        self.monotone.step(min_read, write_offset, write_size);
        if self.step == self.next_sample && self.next_index < self.npoints {
            self.samples
                .push((self.step, self.monotone.max_end.unwrap_or(0)));
            self.buckets.push(u64::MAX);
            self.next_index += 1;
            self.next_sample = self.sample_step(self.next_index);
        }
        self.step += 1;
        true
    }
}

/// Shape and parameters of a layer (NHWC), as signed 64-bit for index maths:
/// `n, ih, iw, id` input, `oh, ow, od` output, `kh, kw` window, `sh, sw`
/// stride, `dh, dw` dilation, `ph, pw` TFLite before-padding, `mult` depth
/// multiplier.
#[derive(Clone, Copy, Debug)]
pub struct Geometry {
    /// Batch count.
    pub n: i64,
    /// Input height.
    pub ih: i64,
    /// Input width.
    pub iw: i64,
    /// Input depth (channels).
    pub id: i64,
    /// Output height.
    pub oh: i64,
    /// Output width.
    pub ow: i64,
    /// Output depth (channels).
    pub od: i64,
    /// Window height.
    pub kh: i64,
    /// Window width.
    pub kw: i64,
    /// Stride along the height.
    pub sh: i64,
    /// Stride along the width.
    pub sw: i64,
    /// Dilation along the height.
    pub dh: i64,
    /// Dilation along the width.
    pub dw: i64,
    /// TFLite padding rows before the first input row.
    pub ph: i64,
    /// TFLite padding columns before the first input column.
    pub pw: i64,
    /// Depth multiplier (depthwise convolution).
    pub mult: i64,
}

impl Geometry {
    /// The geometry of `spec`: its shapes, window, stride, dilation, padding and depth multiplier.
    pub fn of(spec: &LayerSpec) -> Geometry {
        let i = |v: u32| v as i64;
        Geometry {
            n: i(spec.input[0]),
            ih: i(spec.input[1]),
            iw: i(spec.input[2]),
            id: i(spec.input[3]),
            oh: i(spec.output[1]),
            ow: i(spec.output[2]),
            od: i(spec.output[3]),
            kh: i(spec.filter[1]),
            kw: i(spec.filter[2]),
            sh: i(spec.stride.0),
            sw: i(spec.stride.1),
            dh: i(spec.dilation.0),
            dw: i(spec.dilation.1),
            ph: i(spec.pad.0),
            pw: i(spec.pad.1),
            mult: i(spec.depth_multiplier),
        }
    }
}

/// First in-bounds coordinate of a (dilated) conv/depthwise window axis:
/// the smallest `origin + dil·f` with `0 <= f < k` and `0 <= origin + dil·f <
/// size` — the kernels' `is_point_inside_image` test, per axis.
#[inline]
fn first_tap(origin: i64, dil: i64, k: i64, size: i64) -> Option<i64> {
    let f0 = if origin >= 0 {
        0
    } else {
        (-origin + dil - 1) / dil
    };
    if f0 >= k {
        return None;
    }
    let p = origin + dil * f0;
    (p < size).then_some(p)
}

/// First coordinate of a pool window axis clipped like TFLM:
/// `filter_start = max(0, -origin)`, `filter_end = min(k, size - origin)`.
#[inline]
fn first_pool_tap(origin: i64, k: i64, size: i64) -> Option<i64> {
    let start = (-origin).max(0);
    let end = k.min(size - origin);
    (start < end).then_some(origin + start)
}

/// Runs the modelled kernel's loop nest of `spec` into `sink`, with the
/// reads of the first input. `None` for ops without a model.
pub(crate) fn walk<S: StepSink>(spec: &LayerSpec, sink: &mut S) -> Option<()> {
    walk_input(spec, 0, sink)
}

/// [`walk`] with the reads of activation input `input` (the other inputs'
/// reads are of other buffers and do not count). `None` when the op has no
/// such input.
pub(crate) fn walk_input<S: StepSink>(spec: &LayerSpec, input: usize, sink: &mut S) -> Option<()> {
    spec.input_bytes_of(input)?;
    let t = spec.dtype.size();
    let g = Geometry::of(spec);
    match spec.op {
        OpKind::TransposeConv => walk_transpose_conv(spec, &g, t, sink),
        OpKind::Concatenation => walk_concatenation(spec, input, t, sink),
        OpKind::Pad => walk_pad(spec, t, sink),
        OpKind::Conv2d | OpKind::DepthwiseConv2d | OpKind::MaxPool | OpKind::AveragePool => {
            walk_windowed(spec.op, &g, t, sink);
        }
        OpKind::FullyConnected => {
            // batches = flat size of the output without its last dim; the input
            // is read as [batches, depth].
            let units = spec.output[3] as u64;
            let batches =
                (spec.output[0] as u64) * (spec.output[1] as u64) * (spec.output[2] as u64);
            let depth = spec.filter[3] as u64;
            'fc: for b in 0..batches {
                for c in 0..units {
                    // for d in 0..depth: input[b*depth + d] — first is the minimum
                    let read = (depth > 0).then_some(b * depth * t);
                    if !sink.step(read, (c + units * b) * t, t) {
                        break 'fc;
                    }
                }
            }
        }
        OpKind::Add | OpKind::Relu => {
            let n: u64 = spec.output.iter().map(|&d| d as u64).product();
            for i in 0..n {
                if !sink.step(Some(i * t), i * t, t) {
                    break;
                }
            }
        }
        OpKind::Matmul => {
            let m_rows = spec.input[2] as u64;
            let k_depth = spec.input[3] as u64;
            let n_cols = spec.filter[3] as u64;
            'mm: {
                for m in 0..m_rows {
                    for n in 0..n_cols {
                        if !sink.step(None, (m * n_cols + n) * t, t) {
                            break 'mm;
                        }
                    }
                }
                for k in 0..k_depth {
                    for m in 0..m_rows {
                        for n in 0..n_cols {
                            // C[m][n] += A[m][k] * B[k][n]
                            if !sink.step(Some((m * k_depth + k) * t), (m * n_cols + n) * t, t) {
                                break 'mm;
                            }
                        }
                    }
                }
            }
        }
        // A LayerSpec holds kernel-suite ops only.
        _ => return None,
    }
    Some(())
}

/// The reference transpose conv. Float: zero the output (writes only),
/// scatter each input element into every output it influences (a read, then
/// an update), add the bias (updates only). int8: the scatter goes to the
/// int32 scratch buffer, so the first output write comes after the last
/// input read: the output pass is a sequence of writes with no input read
/// after any of them.
fn walk_transpose_conv<S: StepSink>(spec: &LayerSpec, g: &Geometry, t: u64, sink: &mut S) {
    let out_elems: u64 = spec.output.iter().map(|&d| d as u64).product();
    let flat_pass = |sink: &mut S| (0..out_elems).all(|i| sink.step(None, i * t, t));
    if spec.dtype == Dtype::Int8 {
        flat_pass(sink);
        return;
    }
    if !flat_pass(sink) {
        return;
    }
    let ti = t as i64;
    for b in 0..g.n {
        for iy in 0..g.ih {
            for ix in 0..g.iw {
                for ic in 0..g.id {
                    let read = (((b * g.ih + iy) * g.iw + ix) * g.id + ic) * ti;
                    let (oy0, ox0) = (iy * g.sh - g.ph, ix * g.sw - g.pw);
                    for fy in 0..g.kh {
                        for fx in 0..g.kw {
                            let (oy, ox) = (oy0 + fy, ox0 + fx);
                            if oy < 0 || oy >= g.oh || ox < 0 || ox >= g.ow {
                                continue;
                            }
                            for oc in 0..g.od {
                                let w = (((b * g.oh + oy) * g.ow + ox) * g.od + oc) * ti;
                                if !sink.step(Some(read as u64), w as u64, t) {
                                    return;
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    flat_pass(sink);
}

/// The reference concatenation: for every outer index, each input's chunk
/// (its extent along the axis times the inner size) copied in turn; a step
/// reads input `input` only while its own chunk is copied.
fn walk_concatenation<S: StepSink>(spec: &LayerSpec, input: usize, t: u64, sink: &mut S) {
    let (Some(in2), Some(axis)) = (spec.input2, spec.axis) else {
        return;
    };
    let axis = axis as usize;
    let prod = |s: &[u32]| s.iter().map(|&d| d as u64).product::<u64>();
    let outer = prod(&spec.output[..axis]);
    let inner = prod(&spec.output[axis + 1..]);
    let chunks = [spec.input[axis] as u64 * inner, in2[axis] as u64 * inner];
    let mut out = 0u64;
    for k in 0..outer {
        for (i, &c) in chunks.iter().enumerate() {
            for j in 0..c {
                let read = (i == input).then_some((k * c + j) * t);
                if !sink.step(read, out * t, t) {
                    return;
                }
                out += 1;
            }
        }
    }
}

/// The reference pad: the output in order; an interior element reads the
/// next input element (the kernel's `*in_ptr++`), a padding one reads
/// nothing.
fn walk_pad<S: StepSink>(spec: &LayerSpec, t: u64, sink: &mut S) {
    let Some(p) = spec.paddings else {
        return;
    };
    let o = spec.output.map(|d| d as u64);
    let inside = |k: usize, v: u64| v >= p.before[k] as u64 && v < o[k] - p.after[k] as u64;
    let (mut read, mut write) = (0u64, 0u64);
    for b in 0..o[0] {
        for h in 0..o[1] {
            for w in 0..o[2] {
                for d in 0..o[3] {
                    let interior = inside(0, b) && inside(1, h) && inside(2, w) && inside(3, d);
                    let r = interior.then(|| {
                        read += 1;
                        (read - 1) * t
                    });
                    if !sink.step(r, write * t, t) {
                        return;
                    }
                    write += 1;
                }
            }
        }
    }
}

fn walk_windowed<S: StepSink>(op: OpKind, g: &Geometry, t: u64, sink: &mut S) {
    let pool = matches!(op, OpKind::MaxPool | OpKind::AveragePool);
    // Column of the first in-bounds tap, per out_x (depends on out_x only).
    let first_x: Vec<Option<i64>> = (0..g.ow)
        .map(|ox| {
            let origin = ox * g.sw - g.pw;
            if pool {
                first_pool_tap(origin, g.kw, g.iw)
            } else {
                first_tap(origin, g.dw, g.kw, g.iw)
            }
        })
        .collect();
    let t = t as i64;
    for b in 0..g.n {
        for oy in 0..g.oh {
            let origin_y = oy * g.sh - g.ph;
            let ry = if pool {
                first_pool_tap(origin_y, g.kh, g.ih)
            } else {
                first_tap(origin_y, g.dh, g.kh, g.ih)
            };
            for (ox, rx) in first_x.iter().enumerate() {
                let ox = ox as i64;
                // element offset of channel 0 of the first in-bounds tap
                let base = match (ry, *rx) {
                    (Some(y), Some(x)) => Some(((b * g.ih + y) * g.iw + x) * g.id),
                    _ => None,
                };
                let out_base = ((b * g.oh + oy) * g.ow + ox) * g.od;
                match op {
                    OpKind::Conv2d => {
                        // out_c, then filter_y, filter_x, in_c: min read is in_c 0
                        for oc in 0..g.od {
                            let r = base.map(|e| (e * t) as u64);
                            if !sink.step(r, ((out_base + oc) * t) as u64, t as u64) {
                                return;
                            }
                        }
                    }
                    OpKind::DepthwiseConv2d => {
                        for ic in 0..g.id {
                            let r = base.map(|e| ((e + ic) * t) as u64);
                            for m in 0..g.mult {
                                let oc = m + ic * g.mult;
                                if !sink.step(r, ((out_base + oc) * t) as u64, t as u64) {
                                    return;
                                }
                            }
                        }
                    }
                    _ => {
                        for c in 0..g.id {
                            let r = base.map(|e| ((e + c) * t) as u64);
                            if !sink.step(r, ((out_base + c) * t) as u64, t as u64) {
                                return;
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use memtrace_abi::spec::{Dtype, LayerSpecBuilder, Padding};
    use std::ops::Range;

    pub(crate) use crate::rng::Rng;

    /// A random small valid configuration of `op` (retries until `LayerSpec`
    /// accepts it). Shapes stay small so that the brute force is fast.
    pub(crate) fn random_spec(rng: &mut Rng, op: OpKind, dtype: Dtype) -> LayerSpec {
        loop {
            let n = if rng.chance(20) { 2 } else { 1 };
            let h = rng.range(1, 9);
            let w = rng.range(1, 9);
            let c = rng.range(1, 5);
            let kh = rng.range(1, 4);
            let kw = rng.range(1, 4);
            let padding = if rng.chance(50) {
                Padding::Same
            } else {
                Padding::Valid
            };
            let mut b = LayerSpecBuilder::new(op, dtype, [n, h, w, c])
                .stride(rng.range(1, 3), rng.range(1, 3))
                .padding(padding);
            if rng.chance(25) {
                b = b.dilation(rng.range(1, 3), rng.range(1, 3));
            }
            b = match op {
                OpKind::Conv2d => b.filter([rng.range(1, 5), kh, kw, c]),
                OpKind::DepthwiseConv2d => {
                    let m = rng.range(1, 3);
                    b.depth_multiplier(m).filter([1, kh, kw, c * m])
                }
                OpKind::MaxPool | OpKind::AveragePool => b.filter([1, kh, kw, 1]),
                OpKind::FullyConnected => {
                    // keep the [.., depth] input but vary batches and units
                    b.filter([1, 1, rng.range(1, 12), c])
                }
                OpKind::Matmul => {
                    let k = rng.range(1, 6);
                    b = LayerSpecBuilder::new(op, dtype, [1, 1, rng.range(1, 8), k]);
                    b.filter([1, 1, k, rng.range(1, 8)])
                }
                OpKind::Add | OpKind::Relu => b,
                OpKind::TransposeConv => {
                    let oc = rng.range(1, 4);
                    let (s, padding) = (b.stride, b.padding);
                    b = b.filter([oc, kh, kw, c]);
                    if rng.chance(30) {
                        // any output a conv2d maps back to the input
                        let mut pick = |size: u32, k: u32, s: u32| match padding {
                            Padding::Same => rng.range((size - 1) * s + 1, size * s),
                            Padding::Valid => {
                                rng.range((size - 1) * s + k, (size - 1) * s + k + s - 1)
                            }
                        };
                        let (oh, ow) = (pick(h, kh, s.0), pick(w, kw, s.1));
                        b = b.output([n, oh, ow, oc]);
                    }
                    b
                }
                OpKind::Concatenation => {
                    let axis = rng.range(0, 3);
                    let mut in2 = [n, h, w, c];
                    in2[axis as usize] = rng.range(1, 4);
                    LayerSpecBuilder::new(op, dtype, [n, h, w, c]).concat(in2, axis)
                }
                OpKind::Pad => {
                    let mut amounts = || [0, 1, 2, 3].map(|_| rng.range(0, 2));
                    let (before, after) = (amounts(), amounts());
                    LayerSpecBuilder::new(op, dtype, [n, h, w, c]).paddings(before, after)
                }
                op => panic!("{op:?} is not a kernel-suite op"),
            };
            if let Ok(spec) = b.build() {
                return spec;
            }
        }
    }

    /// One access of the naive kernels: an input read or an output write
    /// (byte offset, size). Filter, bias, second-input and output reads are not
    /// input-buffer accesses and do not appear.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(crate) enum Ev {
        Read(u64, u64),
        Write(u64, u64),
    }

    /// A straightforward reimplementation of every kernel loop nest, emitting
    /// every single access (all taps, all channels) — the brute-force reference.
    pub(crate) fn naive_events(spec: &LayerSpec) -> Vec<Ev> {
        naive_events_of_input(spec, 0)
    }

    /// [`naive_events`] with the reads of activation input `input` (add's
    /// second input is read at the same offsets as its first).
    pub(crate) fn naive_events_of_input(spec: &LayerSpec, input: usize) -> Vec<Ev> {
        let n = Naive {
            spec,
            geometry: Geometry::of(spec),
            t: spec.dtype.size(),
            input,
        };
        let mut ev = Vec::new();
        match spec.op {
            OpKind::Conv2d => naive_conv2d(&n, &mut ev),
            OpKind::DepthwiseConv2d => naive_depthwise_conv2d(&n, &mut ev),
            OpKind::MaxPool | OpKind::AveragePool => naive_pool(&n, &mut ev),
            OpKind::FullyConnected => naive_fully_connected(&n, &mut ev),
            OpKind::Add | OpKind::Relu => naive_elementwise(&n, &mut ev),
            OpKind::TransposeConv => naive_transpose_conv(&n, &mut ev),
            OpKind::Concatenation => naive_concatenation(&n, &mut ev),
            OpKind::Pad => naive_pad(&n, &mut ev),
            OpKind::Matmul => naive_matmul(&n, &mut ev),
            op => panic!("{op:?} is not a kernel-suite op"),
        }
        ev
    }

    /// What every naive loop nest reads: the layer, its geometry, the
    /// element size and which activation input's reads to emit.
    pub(crate) struct Naive<'a> {
        spec: &'a LayerSpec,
        geometry: Geometry,
        t: u64,
        input: usize,
    }

    /// Byte offset of element (b, y, x, c) in an NHWC tensor of height `h`,
    /// width `w` and depth `d`, elements of `t` bytes.
    fn nhwc_offset(t: u64) -> impl Fn(i64, i64, i64, i64, i64, i64, i64) -> u64 {
        move |b, y, x, c, h, w, d| ((((b * h + y) * w + x) * d + c) as u64) * t
    }

    /// The reads of output pixel (b, oy, ox)'s input window, channels
    /// `channels` innermost: what one convolution step reads.
    fn window_reads(n: &Naive<'_>, at: (i64, i64, i64), channels: Range<i64>, ev: &mut Vec<Ev>) {
        let (g, t) = (&n.geometry, n.t);
        let off = nhwc_offset(t);
        let (b, oy, ox) = at;
        let (x0, y0) = (ox * g.sw - g.pw, oy * g.sh - g.ph);
        for fy in 0..g.kh {
            for fx in 0..g.kw {
                let (ix, iy) = (x0 + g.dw * fx, y0 + g.dh * fy);
                if ix >= 0 && ix < g.iw && iy >= 0 && iy < g.ih {
                    for ic in channels.clone() {
                        ev.push(Ev::Read(off(b, iy, ix, ic, g.ih, g.iw, g.id), t));
                    }
                }
            }
        }
    }

    /// The naive loop nest of `Conv2d`.
    fn naive_conv2d(n: &Naive<'_>, ev: &mut Vec<Ev>) {
        let (g, t) = (&n.geometry, n.t);
        let off = nhwc_offset(t);
        for b in 0..g.n {
            for oy in 0..g.oh {
                for ox in 0..g.ow {
                    for oc in 0..g.od {
                        window_reads(n, (b, oy, ox), 0..g.id, ev);
                        ev.push(Ev::Write(off(b, oy, ox, oc, g.oh, g.ow, g.od), t));
                    }
                }
            }
        }
    }

    /// The naive loop nest of `DepthwiseConv2d`.
    fn naive_depthwise_conv2d(n: &Naive<'_>, ev: &mut Vec<Ev>) {
        let (g, t) = (&n.geometry, n.t);
        let off = nhwc_offset(t);
        for b in 0..g.n {
            for oy in 0..g.oh {
                for ox in 0..g.ow {
                    for ic in 0..g.id {
                        for m in 0..g.mult {
                            let oc = m + ic * g.mult;
                            window_reads(n, (b, oy, ox), ic..ic + 1, ev);
                            ev.push(Ev::Write(off(b, oy, ox, oc, g.oh, g.ow, g.od), t));
                        }
                    }
                }
            }
        }
    }

    /// The naive loop nest of `MaxPool`, `AveragePool`.
    fn naive_pool(n: &Naive<'_>, ev: &mut Vec<Ev>) {
        let (g, t) = (&n.geometry, n.t);
        let off = nhwc_offset(t);
        for b in 0..g.n {
            for oy in 0..g.oh {
                for ox in 0..g.ow {
                    for c in 0..g.id {
                        let x0 = ox * g.sw - g.pw;
                        let y0 = oy * g.sh - g.ph;
                        let fxs = (-x0).max(0);
                        let fxe = g.kw.min(g.iw - x0);
                        let fys = (-y0).max(0);
                        let fye = g.kh.min(g.ih - y0);
                        for fy in fys..fye {
                            for fx in fxs..fxe {
                                ev.push(Ev::Read(off(b, y0 + fy, x0 + fx, c, g.ih, g.iw, g.id), t));
                            }
                        }
                        ev.push(Ev::Write(off(b, oy, ox, c, g.oh, g.ow, g.od), t));
                    }
                }
            }
        }
    }

    /// The naive loop nest of `FullyConnected`.
    fn naive_fully_connected(n: &Naive<'_>, ev: &mut Vec<Ev>) {
        let (spec, t) = (n.spec, n.t);
        let batches: u64 = spec.output[..3].iter().map(|&d| d as u64).product();
        let units = spec.output[3] as u64;
        let depth = spec.filter[3] as u64;
        for b in 0..batches {
            for c in 0..units {
                for d in 0..depth {
                    ev.push(Ev::Read((b * depth + d) * t, t));
                }
                ev.push(Ev::Write((c + units * b) * t, t));
            }
        }
    }

    /// The naive loop nest of `Add`, `Relu`.
    fn naive_elementwise(n: &Naive<'_>, ev: &mut Vec<Ev>) {
        let (spec, t) = (n.spec, n.t);
        let n: u64 = spec.input.iter().map(|&d| d as u64).product();
        for i in 0..n {
            ev.push(Ev::Read(i * t, t));
            ev.push(Ev::Write(i * t, t));
        }
    }

    /// The naive loop nest of `TransposeConv`.
    fn naive_transpose_conv(n: &Naive<'_>, ev: &mut Vec<Ev>) {
        let (spec, g, t) = (n.spec, &n.geometry, n.t);
        let off = nhwc_offset(t);
        let out_n: u64 = spec.output.iter().map(|&d| d as u64).product();
        let float = spec.dtype == Dtype::Float32;
        if float {
            ev.extend((0..out_n).map(|i| Ev::Write(i * t, t)));
        }
        for b in 0..g.n {
            for iy in 0..g.ih {
                for ix in 0..g.iw {
                    for ic in 0..g.id {
                        for fy in 0..g.kh {
                            for fx in 0..g.kw {
                                for oc in 0..g.od {
                                    let oy = iy * g.sh - g.ph + fy;
                                    let ox = ix * g.sw - g.pw + fx;
                                    if oy < 0 || oy >= g.oh || ox < 0 || ox >= g.ow {
                                        continue;
                                    }
                                    ev.push(Ev::Read(off(b, iy, ix, ic, g.ih, g.iw, g.id), t));
                                    // float accumulates in the output,
                                    // int8 in its scratch buffer
                                    if float {
                                        ev.push(Ev::Write(off(b, oy, ox, oc, g.oh, g.ow, g.od), t));
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        // float: the bias pass; int8: the requantising output pass
        ev.extend((0..out_n).map(|i| Ev::Write(i * t, t)));
    }

    /// The naive loop nest of `Concatenation`.
    fn naive_concatenation(n: &Naive<'_>, ev: &mut Vec<Ev>) {
        let (spec, t, input) = (n.spec, n.t, n.input);
        let (in2, axis) = (spec.input2.unwrap(), spec.axis.unwrap() as usize);
        let shapes = [spec.input, in2];
        let before: u64 = spec.output[..axis].iter().map(|&d| d as u64).product();
        let after: u64 = spec.output[axis + 1..].iter().map(|&d| d as u64).product();
        let mut out = 0;
        for k in 0..before {
            for (i, shape) in shapes.iter().enumerate() {
                let copy = shape[axis] as u64 * after;
                for j in 0..copy {
                    if i == input {
                        ev.push(Ev::Read((k * copy + j) * t, t));
                    }
                    ev.push(Ev::Write(out * t, t));
                    out += 1;
                }
            }
        }
    }

    /// The naive loop nest of `Pad`.
    fn naive_pad(n: &Naive<'_>, ev: &mut Vec<Ev>) {
        let (spec, t) = (n.spec, n.t);
        let p = spec.paddings.unwrap();
        let o = spec.output;
        let mut read = 0;
        let mut write = 0;
        for b in 0..o[0] {
            for y in 0..o[1] {
                for x in 0..o[2] {
                    for c in 0..o[3] {
                        let at = [b, y, x, c];
                        let interior =
                            (0..4).all(|k| at[k] >= p.before[k] && at[k] < o[k] - p.after[k]);
                        if interior {
                            ev.push(Ev::Read(read * t, t));
                            read += 1;
                        }
                        ev.push(Ev::Write(write * t, t));
                        write += 1;
                    }
                }
            }
        }
    }

    /// The naive loop nest of `Matmul`.
    fn naive_matmul(n: &Naive<'_>, ev: &mut Vec<Ev>) {
        let (spec, t) = (n.spec, n.t);
        let (mm, kk, nn) = (
            spec.input[2] as u64,
            spec.input[3] as u64,
            spec.filter[3] as u64,
        );
        for m in 0..mm {
            for n in 0..nn {
                ev.push(Ev::Write((m * nn + n) * t, t));
            }
        }
        for k in 0..kk {
            for m in 0..mm {
                for n in 0..nn {
                    ev.push(Ev::Read((m * kk + k) * t, t));
                    ev.push(Ev::Write((m * nn + n) * t, t));
                }
            }
        }
    }

    /// Per write k: (M_k, m_k) straight from the definition.
    pub(crate) fn literal_curves(events: &[Ev], ib: u64) -> Vec<(u64, u64)> {
        let mut suffix = vec![ib; events.len() + 1];
        for i in (0..events.len()).rev() {
            suffix[i] = match events[i] {
                Ev::Read(o, _) => suffix[i + 1].min(o),
                Ev::Write(..) => suffix[i + 1],
            };
        }
        let mut max_end = 0;
        let mut out = Vec::new();
        for (i, e) in events.iter().enumerate() {
            if let Ev::Write(o, s) = *e {
                max_end = max_end.max(o + s);
                out.push((max_end, suffix[i + 1]));
            }
        }
        out
    }

    /// Monotone O_s applying the definition literally.
    pub(crate) fn monotone_literal(events: &[Ev], ob: u64, ib: u64) -> u64 {
        literal_curves(events, ib)
            .iter()
            .map(|&(m, r)| ob as i64 - m as i64 + r as i64)
            .min()
            .unwrap_or(ib as i64)
            .max(0) as u64
    }

    /// Exact O_s: largest o <= IB such that no o' in [0, o] lets a write
    /// clobber an input byte read later.
    pub(crate) fn exact_literal(events: &[Ev], ob: u64, ib: u64) -> u64 {
        let mut first_write = vec![u64::MAX; ob as usize];
        let mut last_read: Vec<Option<u64>> = vec![None; ib as usize];
        let mut step = 0u64;
        for e in events {
            match *e {
                Ev::Read(o, s) => {
                    for r in o..o + s {
                        last_read[r as usize] = Some(step);
                    }
                }
                Ev::Write(o, s) => {
                    for w in o..o + s {
                        if first_write[w as usize] == u64::MAX {
                            first_write[w as usize] = step;
                        }
                    }
                    step += 1;
                }
            }
        }
        for o in 0..=ib {
            for (w, &fw) in first_write.iter().enumerate() {
                if fw == u64::MAX {
                    continue;
                }
                let r = w as i64 - ob as i64 + o as i64;
                if r < 0 || r >= ib as i64 {
                    continue;
                }
                if matches!(last_read[r as usize], Some(s) if s > fw) {
                    return o - 1; // o >= 1 here: o = 0 gives r < 0
                }
            }
        }
        ib
    }

    const DTYPES: [Dtype; 2] = [Dtype::Float32, Dtype::Int8];

    fn table_one() -> LayerSpec {
        LayerSpec::parse(
            "op=depthwise_conv2d,dtype=f32,input=1x112x112x96,filter=1x3x3x96,stride=2,padding=same",
        )
        .unwrap()
    }

    #[test]
    fn table_one_layer_is_exactly_the_output_buffer() {
        let s = table_one();
        assert_eq!(step_count(&s), Some(301_056));
        assert_eq!(algorithmic_overlap(&s), Some(1_204_224));
    }

    #[test]
    fn relu_and_add_give_the_output_size_and_matmul_zero() {
        for dtype in DTYPES {
            for op in [OpKind::Relu, OpKind::Add] {
                let s = LayerSpecBuilder::new(op, dtype, [1, 7, 5, 3])
                    .build()
                    .unwrap();
                assert_eq!(algorithmic_overlap(&s), Some(s.output_bytes()), "{s}");
            }
            let s = LayerSpec::parse(&format!(
                "op=matmul,dtype={},input=1x1x6x4,filter=1x1x4x5",
                dtype.spec_name()
            ))
            .unwrap();
            assert_eq!(algorithmic_overlap(&s), Some(0));
        }
    }

    #[test]
    fn algorithmic_equals_brute_force_monotone_for_random_configs() {
        let mut rng = Rng::new(0x5EED_0001);
        let mut exact_checked = 0;
        for op in OpKind::SUITE {
            for dtype in DTYPES {
                for _ in 0..300 {
                    let s = random_spec(&mut rng, op, dtype);
                    for input in 0..op.inputs() {
                        let ev = naive_events_of_input(&s, input);
                        let (ob, ib) = (s.output_bytes(), s.input_bytes_of(input).unwrap());
                        let brute = monotone_literal(&ev, ob, ib);
                        assert_eq!(
                            algorithmic_overlap_of_input(&s, input),
                            Some(brute),
                            "{s} input {input}"
                        );
                        if ob * ib <= 200_000 {
                            let exact = exact_literal(&ev, ob, ib);
                            assert!(exact >= brute, "exact {exact} < monotone {brute}: {s}");
                            exact_checked += 1;
                        }
                    }
                }
            }
        }
        assert!(exact_checked > 1000, "{exact_checked}");
        // Inputs an op does not have have no O_s.
        let relu = random_spec(&mut rng, OpKind::Relu, Dtype::Float32);
        assert_eq!(algorithmic_overlap_of_input(&relu, 1), None);
    }

    #[test]
    fn the_new_ops_have_the_o_s_their_loop_nests_imply() {
        let p = |t: &str| LayerSpec::parse(t).unwrap();
        // Concatenation along channels of 20 pixels: each input may lie
        // wholly in the output's end (docs/overlap.md §6).
        let c = p("op=concatenation,dtype=int8,input=1x4x5x3,input2=1x4x5x2,axis=3");
        assert_eq!(algorithmic_overlap_of_input(&c, 0), Some(60));
        assert_eq!(algorithmic_overlap_of_input(&c, 1), Some(40));
        let pad = p("op=pad,dtype=f32,input=1x4x5x3,pad_before=0x1x2x0,pad_after=0x1x1x0");
        assert_eq!(pad.output, [1, 6, 8, 3]);
        assert_eq!(algorithmic_overlap(&pad), Some(240));
        // Transpose conv: float zeroes the output before reading (0), int8
        // reads everything before writing the output (IB).
        let t = "input=1x5x6x3,filter=4x3x3x3,stride=2,padding=same";
        let f = p(&format!("op=transpose_conv,dtype=f32,{t}"));
        let i = p(&format!("op=transpose_conv,dtype=int8,{t}"));
        assert_eq!(
            (algorithmic_overlap(&f), algorithmic_overlap(&i)),
            (Some(0), Some(90))
        );
        // Steps: zero pass, one per in-bounds tap, bias pass (float).
        let taps = naive_events(&f)
            .iter()
            .filter(|e| matches!(e, Ev::Read(..)))
            .count() as u64;
        assert_eq!(step_count(&f), Some(2 * 480 + taps));
        assert_eq!(step_count(&i), Some(480));
    }

    #[test]
    fn curves_match_the_definition_at_every_sampled_step() {
        let mut rng = Rng::new(0x5EED_0002);
        for op in OpKind::SUITE {
            for dtype in DTYPES {
                for i in 0..40 {
                    let s = random_spec(&mut rng, op, dtype);
                    let ev = naive_events(&s);
                    let lit = literal_curves(&ev, s.input_bytes());
                    let max_points = [0, 2, 3, 17][i % 4];
                    let c = algorithmic_curves(&s, max_points).unwrap();
                    assert_eq!(c.total_steps as usize, lit.len(), "{s}");
                    assert_eq!(Some(c.overlap), algorithmic_overlap(&s));
                    let want = if max_points == 0 || max_points >= lit.len() {
                        lit.len()
                    } else {
                        max_points
                    };
                    assert_eq!(c.points.len(), want, "{s}");
                    assert_eq!(c.points.first().unwrap().step, 0);
                    assert_eq!(c.points.last().unwrap().step as usize, lit.len() - 1);
                    for p in &c.points {
                        let (m, r) = lit[p.step as usize];
                        assert_eq!(
                            (p.max_write_end, p.min_future_read),
                            (m, r),
                            "{s} step {}",
                            p.step
                        );
                    }
                    let min_term = lit
                        .iter()
                        .map(|&(m, r)| s.output_bytes() as i64 - m as i64 + r as i64)
                        .min()
                        .unwrap();
                    if let Some(k) = c.binding_step {
                        let (m, r) = lit[k as usize];
                        assert_eq!(
                            s.output_bytes() as i64 - m as i64 + r as i64,
                            min_term,
                            "{s}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn table_one_curves_are_cheap_and_bounded() {
        let c = algorithmic_curves(&table_one(), 1000).unwrap();
        assert_eq!(c.points.len(), 1000);
        assert_eq!(c.overlap, 1_204_224);
        // the first write's term is binding: OB - 4 + 4
        assert_eq!(c.binding_step, Some(0));
        let last = c.points.last().unwrap();
        assert_eq!(last.max_write_end, c.output_bytes);
        assert_eq!(last.min_future_read, c.input_bytes);
    }
}
