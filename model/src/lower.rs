//! From a [`Model`] and a placement to the executor's [`Program`]: kernel
//! parameters, quantisation computed the way TFLM's kernels compute it in
//! their `Prepare` (multipliers and shifts from the tensors' scales), and the
//! constant data.
//!
//! Imported `.tflite` models carry their weights and quantisation. Zoo models
//! only know shapes, so they get seeded data: weights uniform in the int8
//! range (float: ±g·√(3/K)), biases small, and for int8 a fixed activation
//! scale of 0.05 with zero point 0 and weight scales chosen so that an output
//! keeps roughly the spread of its input (real multiplier g / (73·√K)), with
//! g = √2 before a ReLU/ReLU6 (He) and 1 otherwise; softmax outputs use TFLM's
//! required scale 1/256 and zero point −128.

use memtrace_abi::program::{OpParams, Program, ProgramOp, ProgramTensor, TensorData};

use crate::{Accumulator, Activation, Dtype, Model, Op, OpKind, Quantization, Tensor};

use memtrace_overlap::rng::Rng;

/// Verifier streams start from the seed mixed with the SplitMix64 increment,
/// so that seed 0 is not the all-zero state.
fn stream(seed: u64) -> Rng {
    Rng::new(seed ^ 0x9E37_79B9_7F4A_7C15)
}

/// TFLite `QuantizeMultiplier`: `m ≈ q · 2^(shift − 31)`, q in [2^30, 2^31).
pub(crate) fn quantize_multiplier(m: f64) -> (i32, i32) {
    if m == 0.0 || !m.is_finite() {
        return (0, 0);
    }
    // frexp: m = frac · 2^exp with frac in [0.5, 1).
    let mut exp = m.abs().log2().floor() as i32 + 1;
    let mut frac = m / 2f64.powi(exp);
    if frac.abs() >= 1.0 {
        frac /= 2.0;
        exp += 1;
    } else if frac.abs() < 0.5 {
        frac *= 2.0;
        exp -= 1;
    }
    let mut q = (frac * (1i64 << 31) as f64).round() as i64;
    if q == 1i64 << 31 {
        q /= 2;
        exp += 1;
    }
    if exp < -31 {
        return (0, 0);
    }
    (q as i32, exp)
}

/// What cannot be lowered.
#[derive(Debug, thiserror::Error)]
#[error("{}", self.describe())]
pub struct LowerError {
    /// The operator (meaningless for the whole-model kinds
    /// [`LowerSubject::Input`] and [`LowerSubject::Placement`]).
    pub op: usize,
    /// What cannot be lowered.
    pub kind: LowerSubject,
    /// Why the executor cannot run it.
    pub reason: String,
}

/// What a [`LowerError`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LowerSubject {
    /// An operator of this kind.
    Operator(OpKind),
    /// The input file.
    Input,
    /// The tensors' offsets and the arena size.
    Placement,
}

impl LowerError {
    fn describe(&self) -> String {
        match self.kind {
            LowerSubject::Input | LowerSubject::Placement => {
                format!("cannot run the model in the executor: {}", self.reason)
            }
            LowerSubject::Operator(kind) => format!(
                "cannot run operator {} ({}) in the executor: {}",
                self.op,
                kind.tflite_name(),
                self.reason
            ),
        }
    }
}

/// `d` if the executor's program has tensors of that type.
fn dtype(d: Dtype) -> Option<Dtype> {
    d.program_code().map(|_| d)
}

const ACT_SCALE: f64 = 0.05;

/// (scale, zero point) of an activation tensor; `softmax_out` selects TFLM's
/// fixed softmax output parameters when the model has none.
fn act_q(t: &Tensor, softmax_out: bool) -> (f64, i32) {
    if let Some(q) = &t.quantization {
        if let (Some(&s), zp) = (q.scale.first(), q.zero_point.first().copied()) {
            if s > 0.0 {
                return (s as f64, zp.unwrap_or(0) as i32);
            }
        }
    }
    match (softmax_out, t.dtype) {
        (true, Dtype::Uint8) => (1.0 / 256.0, 0),
        (true, _) => (1.0 / 256.0, -128),
        (false, Dtype::Uint8) => (ACT_SCALE, 128),
        _ => (ACT_SCALE, 0),
    }
}

fn qrange(d: Dtype) -> (i32, i32) {
    match d {
        Dtype::Uint8 => (0, 255),
        _ => (-128, 127),
    }
}

/// TFLite `CalculateActivationRangeQuantized`.
fn act_range(act: Activation, d: Dtype, scale: f64, zp: i32) -> (i32, i32) {
    let (qmin, qmax) = qrange(d);
    let q = |v: f64| zp + (v / scale).round() as i32;
    match act {
        Activation::Relu => (qmin.max(zp), qmax),
        Activation::Relu6 => (qmin.max(zp), qmax.min(q(6.0))),
        Activation::ReluN1To1 => (qmin.max(q(-1.0)), qmax.min(q(1.0))),
        _ => (qmin, qmax),
    }
}

fn float_range(act: Activation) -> (f32, f32) {
    match act {
        Activation::Relu => (0.0, f32::MAX),
        Activation::Relu6 => (0.0, 6.0),
        Activation::ReluN1To1 => (-1.0, 1.0),
        _ => (f32::MIN, f32::MAX),
    }
}

/// TFLite's `ComputePaddingHeightWidth` for one dimension, as the
/// executor's parameter word holds it.
fn pad(stride: u32, dilation: u32, input: u32, filter: u32, output: u32) -> i32 {
    memtrace_abi::geometry::pad_before(stride, dilation, input, filter, output) as i32
}

/// Everything `lower` needs besides the model.
pub struct LowerInput<'a> {
    /// Execution order (operator indices).
    pub order: &'a [usize],
    /// Arena offset of every tensor the plan places (`None` for constants).
    pub offsets: &'a [Option<u64>],
    /// Size of the activation arena in bytes.
    pub arena_bytes: u64,
    /// Seed of the generated weights and input data.
    pub seed: u64,
    /// Raw bytes of the first graph input, instead of seeded data.
    pub input_data: Option<&'a [u8]>,
}

/// Unique buffer names: the tensor's name, with `#index` when two tensors
/// share it (or it is empty).
pub fn tensor_names(model: &Model) -> Vec<String> {
    let mut count = std::collections::HashMap::new();
    for t in &model.tensors {
        *count.entry(t.name.as_str()).or_insert(0) += 1;
    }
    model
        .tensors
        .iter()
        .enumerate()
        .map(|(i, t)| {
            if t.name.is_empty() || count[t.name.as_str()] > 1 {
                format!("{}#{i}", t.name)
            } else {
                t.name.clone()
            }
        })
        .collect()
}

fn per_tensor(scale: f64, zp: i32) -> Option<Quantization> {
    Some(Quantization {
        scale: vec![scale as f32],
        zero_point: vec![zp as i64],
        quantized_dimension: 0,
    })
}

/// (input, filter, bias) of a convolution, transpose convolution or fully
/// connected operator; for a `FETCH_CONV_2D` the input is its first
/// concatenated activation.
fn conv_operands(model: &Model, op: &Op) -> Option<(usize, usize, Option<usize>)> {
    if op.kind == OpKind::FetchConv2d {
        let parts = model.fetch_conv_parts(op).ok()?;
        return Some((parts.activations[0], parts.filter, parts.bias));
    }
    Some((
        op.data_input()?,
        *op.inputs.get(1)?,
        op.inputs.get(bias_position(op.kind)).copied(),
    ))
}

/// Alignment of storage tensors in the storage region.
pub(crate) const STORAGE_ALIGN: u64 = 16;

/// Where each storage tensor ([`Tensor::in_storage`]) lies in the storage
/// region — every one in its own slot, `STORAGE_ALIGN`-aligned, in tensor
/// order — and the bytes the region needs.
pub fn storage_layout(model: &Model) -> (Vec<Option<u64>>, u64) {
    let mut end = 0u64;
    let offsets = model
        .tensors
        .iter()
        .map(|t| {
            t.in_storage.then(|| {
                let at = end;
                end = (end + t.bytes).div_ceil(STORAGE_ALIGN) * STORAGE_ALIGN;
                at
            })
        })
        .collect();
    (offsets, end)
}

/// Fills in what a zoo model lacks, deterministically from `seed`: the data
/// of every constant (weights, biases, reshape shapes) and, for int8/uint8
/// models, the quantisation of activations, weights and biases (see the
/// module docs). Tensors that already have data or quantisation keep it, so
/// imported models are returned unchanged.
pub fn materialize(model: &Model, seed: u64) -> Model {
    let mut m = model.clone();
    let mut rng = stream(seed.wrapping_add(0x5EED));
    let producers = model.producers();
    for (i, t) in m.tensors.iter_mut().enumerate() {
        if !t.is_constant
            && matches!(t.dtype, Dtype::Int8 | Dtype::Uint8)
            && t.quantization.is_none()
        {
            let softmax = producers[i].is_some_and(|p| model.ops[p].kind == OpKind::Softmax);
            let (s, z) = act_q(t, softmax);
            t.quantization = per_tensor(s, z);
        }
    }
    for op in &model.ops {
        match op.kind {
            OpKind::Conv2d
            | OpKind::DepthwiseConv2d
            | OpKind::FullyConnected
            | OpKind::TransposeConv
            | OpKind::FetchConv2d => {
                let (Some((x, wi, bias)), Some(&y)) =
                    (conv_operands(model, op), op.outputs.first())
                else {
                    continue;
                };
                let out_c = *m.tensors[y].shape.last().unwrap_or(&1) as usize;
                let k = fan_in(model, op);
                let gain = match op.options.activation {
                    Activation::Relu | Activation::Relu6 => std::f64::consts::SQRT_2,
                    _ => 1.0,
                };
                let (sx, _) = act_q(&m.tensors[x], false);
                let (sy, _) = act_q(&m.tensors[y], false);
                let quantized = matches!(m.tensors[x].dtype, Dtype::Int8 | Dtype::Uint8);
                let channels = if op.kind == OpKind::FullyConnected {
                    1
                } else {
                    out_c
                };
                let w = &mut m.tensors[wi];
                if w.data.is_none() {
                    w.data = Some(synth_weights(&mut rng, w, k, gain as f32));
                }
                if quantized && w.quantization.is_none() {
                    let ws = sy * gain / (sx * 73.0 * (k as f64).sqrt());
                    w.quantization = Some(Quantization {
                        scale: vec![ws as f32; channels],
                        zero_point: vec![if w.dtype == Dtype::Uint8 { 128 } else { 0 }; channels],
                        quantized_dimension: if op.kind == OpKind::DepthwiseConv2d {
                            3
                        } else {
                            0
                        },
                    });
                }
                let w_scales: Vec<f32> = w
                    .quantization
                    .as_ref()
                    .map(|q| q.scale.clone())
                    .unwrap_or_default();
                if let Some(bi) = bias {
                    let b = &mut m.tensors[bi];
                    if b.data.is_none() {
                        b.data = Some(synth_bias(&mut rng, b));
                    }
                    if quantized && b.quantization.is_none() && !w_scales.is_empty() {
                        b.quantization = Some(Quantization {
                            scale: w_scales.iter().map(|&ws| (sx * ws as f64) as f32).collect(),
                            zero_point: vec![0; w_scales.len()],
                            quantized_dimension: 0,
                        });
                    }
                }
            }
            OpKind::Reshape => {
                if let (Some(&si), Some(&y)) = (op.inputs.get(1), op.outputs.first()) {
                    fill_shape_operand(&mut m, si, y);
                }
            }
            _ => {}
        }
        if op.kind == OpKind::TransposeConv {
            if let (Some(&si), Some(&y)) = (op.inputs.first(), op.outputs.first()) {
                fill_shape_operand(&mut m, si, y);
            }
        }
    }
    m
}

/// Gives the constant int32 shape operand `si` the dimensions of tensor `y`,
/// unless it has data already or does not have one element per dimension.
fn fill_shape_operand(m: &mut Model, si: usize, y: usize) {
    let shape: Vec<u8> = m.tensors[y]
        .shape
        .iter()
        .flat_map(|&d| (d as i32).to_le_bytes())
        .collect();
    let st = &mut m.tensors[si];
    if st.data.is_none() && st.dtype == Dtype::Int32 && st.bytes == shape.len() as u64 {
        st.data = Some(shape);
    }
}

/// Position of the bias among a weighted operator's inputs.
fn bias_position(kind: OpKind) -> usize {
    match kind {
        OpKind::TransposeConv => 3,
        _ => 2,
    }
}

/// Products summed into one output element: the weights per output channel
/// (or unit), except for a transpose convolution, whose scatter adds the
/// input channels of only the kernel taps that land on an output position
/// (`⌈KH/SH⌉·⌈KW/SW⌉` of them).
fn fan_in(model: &Model, op: &Op) -> usize {
    let (Some((_, wi, _)), Some(&y)) = (conv_operands(model, op), op.outputs.first()) else {
        return 1;
    };
    let w = &model.tensors[wi];
    if op.kind == OpKind::TransposeConv {
        if let [_, kh, kw, c] = w.shape[..] {
            let (sh, sw) = (op.options.stride.0.max(1), op.options.stride.1.max(1));
            return (c * kh.div_ceil(sh) * kw.div_ceil(sw)).max(1) as usize;
        }
    }
    let out_c = *model.tensors[y].shape.last().unwrap_or(&1) as usize;
    (w.elements() as usize / out_c.max(1)).max(1)
}

/// Largest arena a program can describe: the executor's program format
/// holds arena sizes and offsets as 32-bit signed words.
pub(crate) const MAX_ARENA_BYTES: u64 = i32::MAX as u64;

/// Checks a placement before anything is sized from it: the arena fits the
/// program format (`MAX_ARENA_BYTES`), and every placed tensor's
/// `offset + bytes` is computed without overflow and lies inside the arena.
/// Errors name the tensor.
pub fn check_placement(
    model: &Model,
    offsets: &[Option<u64>],
    arena_bytes: u64,
) -> Result<(), LowerError> {
    let placement = |reason: String| LowerError {
        op: 0,
        kind: LowerSubject::Placement,
        reason,
    };
    if arena_bytes > MAX_ARENA_BYTES {
        return Err(placement(format!(
            "an arena of {arena_bytes} bytes is larger than the executor's limit of {MAX_ARENA_BYTES} bytes"
        )));
    }
    if offsets.len() > model.tensors.len() {
        return Err(placement(format!(
            "{} offsets for a model of {} tensors",
            offsets.len(),
            model.tensors.len()
        )));
    }
    let names = tensor_names(model);
    for (t, offset) in offsets.iter().enumerate() {
        let Some(offset) = *offset else { continue };
        let bytes = model.tensors[t].bytes;
        match offset.checked_add(bytes) {
            Some(end) if end <= arena_bytes => {}
            _ => {
                return Err(placement(format!(
                    "tensor `{}` at arena offset {offset} + {bytes} bytes does not fit the arena of {arena_bytes} bytes",
                    names[t]
                )))
            }
        }
    }
    Ok(())
}

/// Output channels (units) of a tensor: its last dimension.
fn out_c_of(t: &Tensor) -> usize {
    *t.shape.last().unwrap_or(&1) as usize
}

/// Checks that no operator has two of its arena buffers overlapping, except
/// an input with the output (what DMO does, and the only overlap the guest
/// protocol allows between the buffers of one layer, docs/protocol.md §3):
/// a scratch buffer over an input, or two inputs over each other, is a plan
/// error naming both tensors, found here before anything runs.
pub(crate) fn check_operator_buffers(
    model: &Model,
    offsets: &[Option<u64>],
) -> Result<(), LowerError> {
    let names = tensor_names(model);
    let placed = |t: usize| -> Option<(u64, u64)> {
        let o = offsets.get(t).copied().flatten()?;
        let bytes = model.tensors.get(t)?.bytes;
        (bytes > 0).then(|| (o, o.saturating_add(bytes)))
    };
    for (oi, op) in model.ops.iter().enumerate() {
        // (tensor, is the output, what it is to the operator)
        let mut buffers: Vec<(usize, bool, &str)> = Vec::new();
        for &t in &op.inputs {
            buffers.push((t, false, "input"));
        }
        for &t in &op.outputs {
            buffers.push((t, true, "output"));
        }
        if let Some(t) = op.scratch {
            buffers.push((t, false, "scratch buffer"));
        }
        buffers.dedup_by_key(|b| b.0);
        for (i, &(a, a_out, a_what)) in buffers.iter().enumerate() {
            for &(b, b_out, b_what) in &buffers[i + 1..] {
                let lone_output = a_out != b_out && (a_what == "input" || b_what == "input");
                if a == b || lone_output {
                    continue;
                }
                let (Some((a0, a1)), Some((b0, b1))) = (placed(a), placed(b)) else {
                    continue;
                };
                if a0 < b1 && b0 < a1 {
                    return Err(LowerError {
                        op: oi,
                        kind: LowerSubject::Placement,
                        reason: format!(
                            "the plan overlaps two buffers of operator {oi} ({} `{}`): {a_what} \
                             `{}` at [{a0}, {a1}) and {b_what} `{}` at [{b0}, {b1}); only an \
                             input may overlap its operator's output",
                            op.kind.tflite_name(),
                            op.outputs.first().map_or("", |&t| names[t].as_str()),
                            names[a],
                            names[b],
                        ),
                    });
                }
            }
        }
    }
    Ok(())
}

/// Lowers `model` with tensors at `input.offsets` (after [`materialize`]).
/// The placement is checked first ([`check_placement`]).
pub fn lower(model: &Model, input: &LowerInput<'_>) -> Result<Program, LowerError> {
    check_placement(model, input.offsets, input.arena_bytes)?;
    check_operator_buffers(model, input.offsets)?;
    let materialized = materialize(model, input.seed);
    let model = &materialized;
    let names = tensor_names(model);
    let producers = model.producers();
    let mut rng = stream(input.seed);
    let (storage, storage_bytes) = storage_layout(model);
    let fail = |op: usize, reason: String| LowerError {
        op,
        kind: LowerSubject::Operator(model.ops[op].kind),
        reason,
    };
    // Program tensor index per model tensor, created on first use.
    let mut map: Vec<Option<u32>> = vec![None; model.tensors.len()];
    let mut tensors: Vec<ProgramTensor> = Vec::new();
    let is_softmax_out =
        |t: usize| producers[t].is_some_and(|p| model.ops[p].kind == OpKind::Softmax);
    let mut arena_tensor =
        |t: usize, op: usize, tensors: &mut Vec<ProgramTensor>| -> Result<u32, LowerError> {
            if let Some(i) = map[t] {
                return Ok(i);
            }
            let m = &model.tensors[t];
            let d = dtype(m.dtype)
                .ok_or_else(|| fail(op, format!("tensor `{}` has type {}", m.name, m.dtype)))?;
            let data = match storage[t] {
                Some(offset) => TensorData::Storage { offset },
                None => TensorData::Arena {
                    offset: input.offsets.get(t).copied().flatten().ok_or_else(|| {
                        fail(op, format!("tensor `{}` has no place in the plan", m.name))
                    })?,
                },
            };
            let (_, zp) = act_q(m, is_softmax_out(t));
            tensors.push(ProgramTensor {
                name: names[t].clone(),
                dtype: d,
                dims: if m.shape.is_empty() {
                    vec![1]
                } else {
                    m.shape.clone()
                },
                zero_point: zp,
                data,
            });
            map[t] = Some(tensors.len() as u32 - 1);
            Ok(tensors.len() as u32 - 1)
        };
    let mut ops = Vec::new();
    for &oi in input.order {
        let op = &model.ops[oi];
        let x = op.data_input().ok_or_else(|| fail(oi, "no input".into()))?;
        let y = *op
            .outputs
            .first()
            .ok_or_else(|| fail(oi, "no output".into()))?;
        let xt = &model.tensors[x];
        let yt = &model.tensors[y];
        let d = dtype(xt.dtype)
            .filter(|d| *d != Dtype::Int32)
            .ok_or_else(|| fail(oi, format!("input type {}", xt.dtype)))?;
        let xi = arena_tensor(x, oi, &mut tensors)?;
        let yi = arena_tensor(y, oi, &mut tensors)?;
        let (sx, zx) = act_q(xt, false);
        let (sy, zy) = act_q(yt, op.kind == OpKind::Softmax);
        let quantized = d != Dtype::Float32;
        let mut p = OpParams {
            stride_h: op.options.stride.0 as i32,
            stride_w: op.options.stride.1 as i32,
            dilation_h: op.options.dilation.0 as i32,
            dilation_w: op.options.dilation.1 as i32,
            depth_multiplier: op.options.depth_multiplier as i32,
            input_offset: -zx,
            output_offset: zy,
            beta: 1.0,
            ..OpParams::default()
        };
        (p.act_min, p.act_max) = act_range(op.options.activation, yt.dtype, sy, zy);
        (p.float_min, p.float_max) = float_range(op.options.activation);
        let mut weights = None;
        let mut bias = None;
        let mut inputs = vec![xi];
        let mut per_channel = Vec::new();
        let kind = match op.kind {
            OpKind::Conv2d
            | OpKind::DepthwiseConv2d
            | OpKind::FullyConnected
            | OpKind::TransposeConv
            | OpKind::FetchConv2d => {
                if op.kind == OpKind::TransposeConv {
                    check_transpose_conv(op, d).map_err(|reason| fail(oi, reason))?;
                }
                let (_, wi, bias_index) =
                    conv_operands(model, op).ok_or_else(|| fail(oi, "no weights".into()))?;
                // FETCH_CONV_2D: the second activation it concatenates, the
                // axis and the shape of the concatenation it convolves.
                let mut conv_input_shape = xt.shape.clone();
                if op.kind == OpKind::FetchConv2d {
                    let parts = model.fetch_conv_parts(op).map_err(|e| fail(oi, e))?;
                    if let Some(&second) = parts.activations.get(1) {
                        inputs.push(arena_tensor(second, oi, &mut tensors)?);
                    }
                    p.axis = parts.axis as i32;
                    conv_input_shape = parts.input_shape;
                }
                let wt = &model.tensors[wi];
                // Refused rather than run to outputs TFLM would not give.
                if xt.dtype == Dtype::Float32 && wt.dtype != Dtype::Float32 {
                    return Err(fail(
                        oi,
                        format!(
                            "a hybrid operator (float32 input `{}`, {} weights `{}`): TFLM \
                             refuses to prepare hybrid models and the executor has no such kernel",
                            names[op.inputs[0]], wt.dtype, names[wi]
                        ),
                    ));
                }
                let fc_per_channel = op.kind == OpKind::FullyConnected
                    && wt
                        .quantization
                        .as_ref()
                        .is_some_and(|q| q.scale.windows(2).any(|w| w[0] != w[1]));
                if fc_per_channel {
                    let scales = wt.quantization.as_ref().map_or(&[][..], |q| &q.scale[..]);
                    if d != Dtype::Int8 || scales.len() != out_c_of(yt) {
                        return Err(fail(
                            oi,
                            format!(
                                "weights `{}` are quantised per channel ({} scales): the \
                                 executor's FULLY_CONNECTED takes one scale per output unit \
                                 of an int8 model",
                                names[wi],
                                scales.len()
                            ),
                        ));
                    }
                }
                let out_c = *yt.shape.last().unwrap_or(&1) as usize;
                let k = fan_in(model, op);
                let depthwise = op.kind == OpKind::DepthwiseConv2d;
                // He-style gain: a (clipped) ReLU halves the second moment,
                // so without √2 a deep model's activations fade to zero.
                let gain = match op.options.activation {
                    Activation::Relu | Activation::Relu6 => std::f64::consts::SQRT_2,
                    _ => 1.0,
                };
                // Weight scales: per output channel (conv, depthwise) or one.
                let channels = if op.kind == OpKind::FullyConnected && !fc_per_channel {
                    1
                } else {
                    out_c
                };
                let w_scales: Vec<f64> = match &wt.quantization {
                    Some(q) if !q.scale.is_empty() => (0..channels)
                        .map(|c| q.scale[c.min(q.scale.len() - 1)] as f64)
                        .collect(),
                    _ => vec![sy * gain / (sx * 73.0 * (k as f64).sqrt()); channels],
                };
                let w_zp = wt
                    .quantization
                    .as_ref()
                    .and_then(|q| q.zero_point.first().copied())
                    .unwrap_or(0) as i32;
                let wdata = match &wt.data {
                    Some(b) if b.len() as u64 == wt.bytes => b.clone(),
                    _ => synth_weights(&mut rng, wt, k, gain as f32),
                };
                let wd = dtype(wt.dtype)
                    .ok_or_else(|| fail(oi, format!("weights type {}", wt.dtype)))?;
                tensors.push(ProgramTensor {
                    name: names[wi].clone(),
                    dtype: wd,
                    dims: wt.shape.clone(),
                    zero_point: w_zp,
                    data: TensorData::Constant(wdata),
                });
                weights = Some(tensors.len() as u32 - 1);
                if let Some(bi) = bias_index {
                    let bt = &model.tensors[bi];
                    let bd = dtype(bt.dtype)
                        .ok_or_else(|| fail(oi, format!("bias type {}", bt.dtype)))?;
                    let bdata = match &bt.data {
                        Some(b) if b.len() as u64 == bt.bytes => b.clone(),
                        _ => synth_bias(&mut rng, bt),
                    };
                    tensors.push(ProgramTensor {
                        name: names[bi].clone(),
                        dtype: bd,
                        dims: if bt.shape.is_empty() {
                            vec![1]
                        } else {
                            bt.shape.clone()
                        },
                        zero_point: 0,
                        data: TensorData::Constant(bdata),
                    });
                    bias = Some(tensors.len() as u32 - 1);
                }
                if quantized {
                    p.weights_offset = if d == Dtype::Uint8 { -w_zp } else { 0 };
                    let ms: Vec<(i32, i32)> = w_scales
                        .iter()
                        .map(|ws| quantize_multiplier(sx * ws / sy))
                        .collect();
                    (p.output_multiplier, p.output_shift) = ms[0];
                    if d == Dtype::Int8 && (op.kind != OpKind::FullyConnected || fc_per_channel) {
                        per_channel = ms;
                    }
                }
                if op.kind == OpKind::TransposeConv {
                    (p.pad_h, p.pad_w, p.filter_h, p.filter_w) =
                        transpose_conv_padding(op, xt, wt, yt)
                            .ok_or_else(|| fail(oi, "tensors of rank > 4".into()))?;
                    p.accumulator_bytes = match op.options.accumulator {
                        Accumulator::Int32 => 0,
                        Accumulator::Int16 => 2,
                    };
                } else if op.kind != OpKind::FullyConnected {
                    let (i4, f4, o4) = (
                        crate::shape4(&conv_input_shape),
                        crate::shape4(&wt.shape),
                        crate::shape4(&yt.shape),
                    );
                    let (Some(i4), Some(f4), Some(o4)) = (i4, f4, o4) else {
                        return Err(fail(oi, "tensors of rank > 4".into()));
                    };
                    p.pad_h = pad(
                        op.options.stride.0,
                        op.options.dilation.0,
                        i4[1],
                        f4[1],
                        o4[1],
                    );
                    p.pad_w = pad(
                        op.options.stride.1,
                        op.options.dilation.1,
                        i4[2],
                        f4[2],
                        o4[2],
                    );
                    p.filter_h = f4[1] as i32;
                    p.filter_w = f4[2] as i32;
                    if depthwise && i4[3] > 0 {
                        p.depth_multiplier = (f4[3] / i4[3]).max(1) as i32;
                    }
                }
                op.kind
            }
            OpKind::Spill | OpKind::SpillKeep => {
                if yt.bytes > xt.bytes || yt.dtype != xt.dtype {
                    return Err(fail(oi, "the output is not a part of the input".into()));
                }
                // SPILL sends the tail; SPILL_KEEP keeps the head.
                if op.kind == OpKind::Spill {
                    p.copy_from = (xt.bytes - yt.bytes) as i32;
                }
                op.kind
            }
            OpKind::Fetch => {
                if yt.bytes != xt.bytes {
                    return Err(fail(oi, "input and output sizes differ".into()));
                }
                op.kind
            }
            OpKind::FetchConcat => {
                let [_, second] = op.inputs[..] else {
                    return Err(fail(oi, "concatenates other than two inputs".into()));
                };
                inputs.push(arena_tensor(second, oi, &mut tensors)?);
                p.axis = concatenation_axis(model, op).map_err(|reason| fail(oi, reason))?;
                op.kind
            }
            OpKind::Concatenation => {
                p.axis = concatenation_axis(model, op).map_err(|reason| fail(oi, reason))?;
                for &t in op.inputs.iter().skip(1) {
                    inputs.push(arena_tensor(t, oi, &mut tensors)?);
                }
                op.kind
            }
            OpKind::MaxPool | OpKind::AveragePool => {
                let (Some(i4), Some(o4)) = (crate::shape4(&xt.shape), crate::shape4(&yt.shape))
                else {
                    return Err(fail(oi, "tensors of rank > 4".into()));
                };
                let (fh, fw) = op.options.filter;
                p.filter_h = fh as i32;
                p.filter_w = fw as i32;
                p.pad_h = pad(op.options.stride.0, 1, i4[1], fh, o4[1]);
                p.pad_w = pad(op.options.stride.1, 1, i4[2], fw, o4[2]);
                op.kind
            }
            OpKind::Add => {
                let x2 = *op
                    .inputs
                    .get(1)
                    .ok_or_else(|| fail(oi, "one input".into()))?;
                if model.tensors[x2].shape != yt.shape || xt.shape != yt.shape {
                    return Err(fail(oi, "broadcasting ADD is not supported".into()));
                }
                inputs.push(arena_tensor(x2, oi, &mut tensors)?);
                if quantized {
                    let (s2, z2) = act_q(&model.tensors[x2], false);
                    p.input2_offset = -z2;
                    p.left_shift = 20;
                    let twice = 2.0 * sx.max(s2);
                    (p.input1_multiplier, p.input1_shift) = quantize_multiplier(sx / twice);
                    (p.input2_multiplier, p.input2_shift) = quantize_multiplier(s2 / twice);
                    (p.output_multiplier, p.output_shift) =
                        quantize_multiplier(twice / ((1 << 20) as f64 * sy));
                }
                op.kind
            }
            OpKind::Softmax => {
                if quantized {
                    // TFLite PreprocessSoftmaxScaling (beta 1, 5 integer bits).
                    let real = (sx * (1u64 << 26) as f64).min((1u64 << 31) as f64 - 1.0);
                    let (m, shift) = quantize_multiplier(real);
                    p.softmax_multiplier = m;
                    p.softmax_left_shift = shift;
                    let radius = 31.0 * (1u64 << 26) as f64 / 2f64.powi(shift);
                    p.diff_min = -(radius.floor() as i32);
                }
                op.kind
            }
            OpKind::Reshape | OpKind::Squeeze => {
                if xt.bytes != yt.bytes {
                    return Err(fail(oi, "input and output sizes differ".into()));
                }
                op.kind
            }
            OpKind::Quantize | OpKind::Dequantize => {
                let (s, z) = if op.kind == OpKind::Quantize {
                    (sy, zy)
                } else {
                    (sx, zx)
                };
                p.quant_scale = s as f32;
                p.quant_zero_point = z;
                let ok = if op.kind == OpKind::Quantize {
                    d == Dtype::Float32 && matches!(yt.dtype, Dtype::Int8 | Dtype::Uint8)
                } else {
                    quantized && yt.dtype == Dtype::Float32
                };
                if !ok {
                    return Err(fail(
                        oi,
                        format!("{} -> {} is not supported", xt.dtype, yt.dtype),
                    ));
                }
                op.kind
            }
            OpKind::Relu | OpKind::Relu6 | OpKind::ReluN1To1 => {
                let act = match op.kind {
                    OpKind::Relu => Activation::Relu,
                    OpKind::Relu6 => Activation::Relu6,
                    _ => Activation::ReluN1To1,
                };
                (p.act_min, p.act_max) = act_range(act, yt.dtype, sy, zy);
                (p.float_min, p.float_max) = float_range(act);
                if d == Dtype::Uint8 {
                    return Err(fail(oi, "uint8 activations are not supported".into()));
                }
                op.kind
            }
            OpKind::Pad => {
                let amounts = pad_amounts(model, op, xt).map_err(|e| fail(oi, e))?;
                let pi = *op
                    .inputs
                    .get(1)
                    .ok_or_else(|| fail(oi, "no paddings".into()))?;
                tensors.push(ProgramTensor {
                    name: names[pi].clone(),
                    dtype: Dtype::Int32,
                    dims: vec![4, 2],
                    zero_point: 0,
                    data: TensorData::Constant(
                        amounts.iter().flat_map(|v| v.to_le_bytes()).collect(),
                    ),
                });
                weights = Some(tensors.len() as u32 - 1);
                op.kind
            }
            other => {
                return Err(fail(
                    oi,
                    format!("{} has no executor kernel", other.tflite_name()),
                ));
            }
        };
        let params_text = model
            .layer_spec(oi)
            .map(|s| s.to_string())
            .unwrap_or_default();
        let scratch = op
            .scratch
            .map(|t| arena_tensor(t, oi, &mut tensors))
            .transpose()?;
        ops.push(ProgramOp {
            kind,
            dtype: d,
            name: names[y].clone(),
            params_text,
            inputs,
            weights,
            bias,
            output: yi,
            params: p,
            per_channel,
            scratch,
        });
    }
    let mut graph_inputs = Vec::new();
    for (k, &t) in model.inputs.iter().enumerate() {
        let Some(i) = map[t] else { continue };
        let m = &model.tensors[t];
        let data = match input.input_data {
            Some(d) if k == 0 => {
                if d.len() as u64 != m.bytes {
                    return Err(LowerError {
                        op: 0,
                        kind: LowerSubject::Input,
                        reason: format!(
                            "the input file has {} bytes, graph input `{}` ({} {:?}) needs {}",
                            d.len(),
                            m.name,
                            m.dtype,
                            m.shape,
                            m.bytes
                        ),
                    });
                }
                d.to_vec()
            }
            _ => synth_input(&mut rng, m),
        };
        graph_inputs.push((i, data));
    }
    let outputs = model.outputs.iter().filter_map(|&t| map[t]).collect();
    Ok(Program {
        tensors,
        ops,
        inputs: graph_inputs,
        outputs,
        arena_bytes: input.arena_bytes,
        storage_bytes,
        query_scratch: false,
    })
}

/// A PAD's constant `[rank, 2]` int32 paddings as the executor takes them:
/// `[before, after]` of N, H, W and C, a lower rank's missing outer
/// dimensions 0 (as TFLM extends them). The output must be the input grown
/// by them.
fn pad_amounts(model: &Model, op: &Op, x: &Tensor) -> Result<[i32; 8], String> {
    let p = op
        .inputs
        .get(1)
        .map(|&i| &model.tensors[i])
        .ok_or("no paddings input")?;
    let rank = x.shape.len();
    let data = match &p.data {
        Some(d) if p.dtype == Dtype::Int32 && rank <= 4 && d.len() == rank * 8 => d,
        _ => {
            return Err(format!(
                "the paddings `{}` are not a constant int32 [{rank}, 2] tensor",
                p.name
            ))
        }
    };
    let word = |i: usize| {
        i32::from_le_bytes([
            data[4 * i],
            data[4 * i + 1],
            data[4 * i + 2],
            data[4 * i + 3],
        ])
    };
    let mut amounts = [0i32; 8];
    for d in 0..rank {
        amounts[2 * (4 - rank + d)] = word(2 * d);
        amounts[2 * (4 - rank + d) + 1] = word(2 * d + 1);
    }
    let y = op
        .outputs
        .first()
        .map(|&o| &model.tensors[o])
        .ok_or("no output")?;
    let grows = y.shape.len() == rank
        && (0..rank).all(|d| {
            let (b, a) = (amounts[2 * (4 - rank + d)], amounts[2 * (4 - rank + d) + 1]);
            b >= 0 && a >= 0 && y.shape[d] as i64 == x.shape[d] as i64 + b as i64 + a as i64
        });
    if !grows {
        return Err(format!(
            "output {:?} is not input {:?} grown by the paddings {amounts:?}",
            y.shape, x.shape
        ));
    }
    Ok(amounts)
}

/// What the executor's TRANSPOSE_CONV runs: int8 (tfmicro 0.1.0 has the
/// float kernel only in `reference_ops.h`, which needs Eigen and does not
/// build freestanding) without a fused activation (TFLM's int8 kernel
/// computes its clamp for `kTfLiteActNone` whatever the options say, so a
/// fused activation would silently differ from the model).
fn check_transpose_conv(op: &Op, d: Dtype) -> Result<(), String> {
    if d != Dtype::Int8 {
        return Err(format!(
            "{} transpose convolution has no executor kernel (int8 only)",
            match d {
                Dtype::Float32 => "float32",
                Dtype::Uint8 => "uint8",
                _ => "this",
            }
        ));
    }
    if op.options.activation != Activation::None {
        return Err(format!(
            "fused activation {:?}: TFLM's int8 kernel ignores it",
            op.options.activation
        ));
    }
    Ok(())
}

/// TFLM's transpose-convolution padding (`CalculateOpData`: TFLite's
/// `ComputePaddingHeightWidth` with the *output* extents as the input of a
/// forward convolution of the same window, stride and padding), and the
/// filter extents: `(pad_h, pad_w, filter_h, filter_w)`.
fn transpose_conv_padding(
    op: &Op,
    x: &Tensor,
    w: &Tensor,
    y: &Tensor,
) -> Option<(i32, i32, i32, i32)> {
    crate::shape4(&x.shape)?;
    let (f4, o4) = (crate::shape4(&w.shape)?, crate::shape4(&y.shape)?);
    let (sh, sw) = (op.options.stride.0, op.options.stride.1);
    let forward = |size: u32, filter: u32, stride: u32| -> u32 {
        let stride = stride.max(1);
        match op.options.padding {
            crate::Padding::Same => size.div_ceil(stride),
            crate::Padding::Valid => (size + stride).saturating_sub(filter) / stride,
        }
    };
    Some((
        pad(sh, 1, o4[1], f4[1], forward(o4[1], f4[1], sh)),
        pad(sw, 1, o4[2], f4[2], forward(o4[2], f4[2], sw)),
        f4[1] as i32,
        f4[2] as i32,
    ))
}

/// The concatenation axis, non-negative in the output's rank (TFLM's
/// `CalculatePositiveAxis`), once the operator is known to be what TFLM runs:
/// no fused activation, at most `MEMTRACE_PROGRAM_MAX_INPUTS` inputs of one
/// element type, and for uint8 the output's scale and zero point on every
/// input (the kernel copies bytes; TFLM's int8 kernel copies whatever the
/// scales, so int8 is not checked).
fn concatenation_axis(model: &Model, op: &Op) -> Result<i32, String> {
    use memtrace_abi::program::MEMTRACE_PROGRAM_MAX_INPUTS;
    let y = &model.tensors[op.outputs[0]];
    if op.options.activation != Activation::None {
        return Err("a fused activation (TFLM requires none)".into());
    }
    if op.inputs.len() > MEMTRACE_PROGRAM_MAX_INPUTS {
        return Err(format!(
            "{} inputs (at most {MEMTRACE_PROGRAM_MAX_INPUTS})",
            op.inputs.len()
        ));
    }
    for &t in &op.inputs {
        let x = &model.tensors[t];
        if x.dtype != y.dtype {
            return Err(format!(
                "input `{}` is {}, the output {}",
                x.name, x.dtype, y.dtype
            ));
        }
        if y.dtype == Dtype::Uint8 && act_q(x, false) != act_q(y, false) {
            return Err(format!(
                "uint8 input `{}` is quantised differently from the output",
                x.name
            ));
        }
    }
    let rank = y.shape.len().max(1) as i32;
    let axis = op.options.axis.unwrap_or(-1);
    let axis = if axis < 0 { axis + rank } else { axis };
    if !(0..rank).contains(&axis) {
        return Err(format!("axis {axis} outside rank {rank}"));
    }
    Ok(axis)
}

fn synth_weights(rng: &mut Rng, t: &Tensor, k: usize, gain: f32) -> Vec<u8> {
    let n = t.elements() as usize;
    match t.dtype {
        Dtype::Float32 => {
            let a = gain * (3.0 / k as f32).sqrt();
            (0..n)
                .flat_map(|_| rng.float(-a, a).to_le_bytes())
                .collect()
        }
        Dtype::Uint8 => (0..n).map(|_| rng.int(0, 255) as u8).collect(),
        _ => (0..n).map(|_| rng.int(-127, 127) as i8 as u8).collect(),
    }
}

fn synth_bias(rng: &mut Rng, t: &Tensor) -> Vec<u8> {
    let n = t.elements() as usize;
    match t.dtype {
        Dtype::Float32 => (0..n)
            .flat_map(|_| rng.float(-0.1, 0.1).to_le_bytes())
            .collect(),
        _ => (0..n)
            .flat_map(|_| (rng.int(-512, 512) as i32).to_le_bytes())
            .collect(),
    }
}

/// Seeded graph input: the whole int8/uint8 range, or floats in [−1, 1).
pub(crate) fn synth_input(rng: &mut Rng, t: &Tensor) -> Vec<u8> {
    synth_values(rng, t.dtype, t.elements() as usize)
}

/// `n` seeded values of `dtype`, little-endian: the whole range of 8- and
/// 16-bit integers, floats in [−1, 1), small wider integers (shape and
/// index operands stay meaningful), booleans as 0 or 1.
pub fn synth_values(rng: &mut Rng, dtype: Dtype, n: usize) -> Vec<u8> {
    match dtype {
        Dtype::Float32 => (0..n)
            .flat_map(|_| rng.float(-1.0, 1.0).to_le_bytes())
            .collect(),
        Dtype::Uint8 => (0..n).map(|_| rng.int(0, 255) as u8).collect(),
        Dtype::Int16 => (0..n)
            .flat_map(|_| (rng.int(-32768, 32767) as i16).to_le_bytes())
            .collect(),
        Dtype::Int32 => (0..n)
            .flat_map(|_| (rng.int(-128, 127) as i32).to_le_bytes())
            .collect(),
        Dtype::Int64 => (0..n)
            .flat_map(|_| rng.int(-128, 127).to_le_bytes())
            .collect(),
        Dtype::Bool => (0..n).map(|_| rng.int(0, 1) as u8).collect(),
        Dtype::Float16 => (0..n)
            .flat_map(|_| (rng.int(0, 0x3bff) as u16).to_le_bytes())
            .collect(),
        Dtype::Int8 => (0..n).map(|_| rng.int(-128, 127) as i8 as u8).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantize_multiplier_matches_tflite_conventions() {
        assert_eq!(quantize_multiplier(0.5), (1 << 30, 0));
        assert_eq!(quantize_multiplier(0.25), (1 << 30, -1));
        assert_eq!(quantize_multiplier(1.0), (1 << 30, 1));
        let (q, s) = quantize_multiplier(0.0123);
        let back = q as f64 * 2f64.powi(s - 31);
        assert!((back - 0.0123).abs() < 1e-9, "{q} {s}");
        assert!(q >= 1 << 30);
    }

    #[test]
    fn placements_beyond_any_arena_are_refused_naming_the_tensor() {
        let model = crate::zoo::build("mobilenet_v1_0.25_128_int8").unwrap();
        let arena = model.arena_tensors();
        let first = arena[0];
        let name = tensor_names(&model)[first].clone();
        // A valid placement: every arena tensor side by side.
        let mut offsets = vec![None; model.tensors.len()];
        let mut end = 0u64;
        for &t in &arena {
            offsets[t] = Some(end);
            end += model.tensors[t].bytes;
        }
        let lower_with = |offsets: &[Option<u64>], arena_bytes: u64| {
            lower(
                &model,
                &LowerInput {
                    order: &(0..model.ops.len()).collect::<Vec<_>>(),
                    offsets,
                    arena_bytes,
                    seed: 1,
                    input_data: None,
                },
            )
        };
        let program = lower_with(&offsets, end).unwrap();
        assert_eq!(program.arena_bytes, end);
        // An arena of u64::MAX bytes (the reported panic: capacity overflow).
        let e = lower_with(&offsets, u64::MAX).unwrap_err().to_string();
        assert!(
            e.contains(&u64::MAX.to_string()) && e.contains("limit"),
            "{e}"
        );
        // Offsets whose end wraps around, or lies beyond the arena.
        for bad in [u64::MAX, u64::MAX - 3, end] {
            let mut o = offsets.clone();
            o[first] = Some(bad);
            let e = lower_with(&o, end).unwrap_err().to_string();
            assert!(e.contains(&format!("`{name}`")), "{e}");
            assert!(e.contains(&bad.to_string()), "{e}");
        }
        // The last byte of the arena is still inside it.
        let mut o = offsets.clone();
        o[first] = Some(end - model.tensors[first].bytes);
        lower_with(&o, end).unwrap();
    }

    #[test]
    fn transpose_conv_padding_is_tflm_s() {
        // TFLM: ComputePaddingHeightWidth(stride, 1, output extent, filter,
        // padding) with the forward window's output size; by hand:
        // total = (forward - 1) * stride + filter - output, padding total / 2.
        let tconv = |padding, k: u32, s: u32, input: u32, output: u32| {
            let mut g = crate::zoo::GraphBuilder::new("t", Dtype::Int8);
            let x = g.input("x", &[1, input, input, 4]);
            let y = g.transpose_conv("y", x, 8, k, s);
            let mut m = g.finish(&[y]);
            m.ops[0].options.padding = padding;
            m.tensors[y].shape = vec![1, output, output, 8];
            let t = &m.tensors;
            let op = &m.ops[0];
            transpose_conv_padding(op, &t[op.inputs[2]], &t[op.inputs[1]], &t[y]).unwrap()
        };
        use crate::Padding::{Same, Valid};
        // Tiny U-Net's 2x2 stride 2: forward 10, total (10-1)*2+2-20 = 0.
        assert_eq!(tconv(Valid, 2, 2, 10, 20), (0, 0, 2, 2));
        // 3x3 stride 2 SAME to 20: forward 10, total 1: padding 0.
        assert_eq!(tconv(Same, 3, 2, 10, 20), (0, 0, 3, 3));
        // 4x4 stride 2 SAME to 20: total 2: padding 1.
        assert_eq!(tconv(Same, 4, 2, 10, 20), (1, 1, 4, 4));
        // 3x3 stride 1 VALID to 12: forward 10, total 0.
        assert_eq!(tconv(Valid, 3, 1, 10, 12), (0, 0, 3, 3));
    }

    /// Tiny U-Net's int8 lowering at a side-by-side placement, with `edit`
    /// applied to the model first.
    fn lower_tiny_unet(edit: impl Fn(&mut Model)) -> Result<Program, LowerError> {
        let mut model = crate::zoo::build("tiny_unet_80x120_int8")
            .unwrap()
            .with_reference_scratch();
        edit(&mut model);
        let mut offsets = vec![None; model.tensors.len()];
        let mut end = 0u64;
        for t in model.arena_tensors() {
            offsets[t] = Some(end);
            end += model.tensors[t].bytes;
        }
        let order: Vec<usize> = (0..model.ops.len()).collect();
        lower(
            &model,
            &LowerInput {
                order: &order,
                offsets: &offsets,
                arena_bytes: end,
                seed: 1,
                input_data: None,
            },
        )
    }

    #[test]
    fn tiny_unet_lowers_its_transpose_convs_and_concatenations() {
        let p = lower_tiny_unet(|_| {}).unwrap();
        let up = &p.ops[11];
        assert_eq!(up.kind, OpKind::TransposeConv);
        // The activation input (operand 2), not the output-shape operand.
        assert_eq!(p.tensors[up.inputs[0] as usize].dims, [1, 10, 15, 64]);
        assert_eq!(p.tensors[up.weights.unwrap() as usize].dims, [16, 2, 2, 64]);
        assert_eq!(
            p.tensors[up.scratch.unwrap() as usize].bytes(),
            20 * 30 * 16 * 4
        );
        assert_eq!(up.per_channel.len(), 16);
        assert_eq!((up.params.act_min, up.params.act_max), (-128, 127));
        assert_eq!(up.params.accumulator_bytes, 0);
        let cat = &p.ops[12];
        assert_eq!(cat.kind, OpKind::Concatenation);
        assert_eq!(cat.params.axis, 3);
        let dims: Vec<&[u32]> = cat
            .inputs
            .iter()
            .map(|&t| &p.tensors[t as usize].dims[..])
            .collect();
        assert_eq!(dims, [&[1, 20, 30, 32][..], &[1, 20, 30, 16][..]]);
        // TinySeg's int16 accumulator: the flag and half the scratch.
        let p16 = lower_tiny_unet(|m| {
            *m = m
                .with_transpose_conv_accumulator(crate::Accumulator::Int16)
                .with_reference_scratch()
        })
        .unwrap();
        assert_eq!(p16.ops[11].params.accumulator_bytes, 2);
        assert_eq!(
            p16.tensors[p16.ops[11].scratch.unwrap() as usize].bytes(),
            20 * 30 * 16 * 2
        );
    }

    #[test]
    fn what_the_executor_cannot_run_is_refused_naming_the_operator() {
        let e = lower_tiny_unet(|m| m.ops[11].options.activation = Activation::Relu)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("operator 11 (TRANSPOSE_CONV)") && e.contains("Relu"),
            "{e}"
        );
        let e = lower_tiny_unet(|m| m.ops[12].options.activation = Activation::Relu)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("operator 12 (CONCATENATION)") && e.contains("activation"),
            "{e}"
        );
        let e = lower_tiny_unet(|m| m.ops[12].options.axis = Some(4))
            .unwrap_err()
            .to_string();
        assert!(e.contains("axis 4"), "{e}");
        // Float: tfmicro 0.1.0 has no freestanding float TRANSPOSE_CONV.
        let float = crate::zoo::build("tiny_unet_80x120").unwrap();
        let mut offsets = vec![None; float.tensors.len()];
        let mut end = 0u64;
        for t in float.arena_tensors() {
            offsets[t] = Some(end);
            end += float.tensors[t].bytes;
        }
        let order: Vec<usize> = (0..float.ops.len()).collect();
        let e = lower(
            &float,
            &LowerInput {
                order: &order,
                offsets: &offsets,
                arena_bytes: end,
                seed: 1,
                input_data: None,
            },
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("operator 11 (TRANSPOSE_CONV)") && e.contains("float32"),
            "{e}"
        );
    }

    #[test]
    fn same_padding_follows_tflite() {
        assert_eq!(pad(2, 1, 128, 3, 64), 0);
        assert_eq!(pad(1, 1, 64, 3, 64), 1);
        assert_eq!(pad(1, 1, 4, 4, 1), 0);
    }
}
