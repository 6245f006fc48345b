//! Each operator's lowering: its kernel parameters (quantisation as TFLM's
//! `Prepare` computes it), its extra inputs and its constant tensors, one
//! function per kind of operator.

use memtrace_abi::out_size;
use memtrace_abi::program::{ProgramOp, ProgramTensor, TensorData};

use super::context::{dims_of, program_dtype, Lowering, OpLowering};
use super::error::LowerError;
use super::quant::{act_q, act_range, float_range, quantize_multiplier};
use super::synth::{bias_data, conv_operands, fan_in, gain, weight_data, weight_scale};
use crate::{Accumulator, Activation, Dtype, Model, Op, OpKind, Tensor};

/// TFLite's `ComputePaddingHeightWidth` for one dimension, as the
/// executor's parameter word holds it.
pub(super) fn pad(stride: u32, dilation: u32, input: u32, filter: u32, output: u32) -> i32 {
    memtrace_abi::geometry::pad_before(stride, dilation, input, filter, output) as i32
}

/// The operator record of model operator `index`.
pub(super) fn lower_op(cx: &mut Lowering<'_>, index: usize) -> Result<ProgramOp, LowerError> {
    let mut o = OpLowering::start(cx, index)?;
    let op = o.op;
    let lowered = match op.kind {
        OpKind::Conv2d
        | OpKind::DepthwiseConv2d
        | OpKind::FullyConnected
        | OpKind::TransposeConv
        | OpKind::FetchConv2d => lower_weighted(cx, &mut o),
        OpKind::Spill | OpKind::SpillKeep => lower_spill(&mut o),
        OpKind::Fetch | OpKind::Reshape | OpKind::Squeeze => lower_copy(&o),
        OpKind::FetchConcat => lower_fetch_concat(cx, &mut o),
        OpKind::Concatenation => lower_concatenation(cx, &mut o),
        OpKind::MaxPool | OpKind::AveragePool => lower_pool(&mut o),
        OpKind::Add => lower_add(cx, &mut o),
        OpKind::Softmax => {
            lower_softmax(&mut o);
            Ok(())
        }
        OpKind::Quantize | OpKind::Dequantize => lower_quantize(&mut o),
        OpKind::Relu | OpKind::Relu6 | OpKind::ReluN1To1 => lower_relu(&mut o),
        OpKind::Pad => lower_pad(cx, &mut o),
        other => Err(format!("{} has no executor kernel", other.tflite_name())),
    };
    lowered.map_err(|reason| cx.fail(index, reason))?;
    let params_text = cx
        .model
        .layer_spec(index)
        .map(|s| s.to_string())
        .unwrap_or_default();
    let scratch = op.scratch.map(|t| cx.arena_tensor(t, index)).transpose()?;
    Ok(ProgramOp {
        kind: op.kind,
        dtype: o.dtype,
        name: cx.names[op.outputs[0]].clone(),
        params_text,
        inputs: o.inputs,
        weights: o.weights,
        bias: o.bias,
        output: o.output,
        params: o.params,
        per_channel: o.per_channel,
        scratch,
    })
}

/// An error of an operator's own lowering: its reason, or a [`LowerError`]
/// from making a tensor, whose reason it takes.
type OpResult = Result<(), String>;

/// The reason of a [`LowerError`] (an operator's helpers report reasons;
/// [`lower_op`] names the operator).
fn reason(e: LowerError) -> String {
    e.reason
}

/// CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED, TRANSPOSE_CONV and TinySeg's
/// FETCH_CONV_2D: weights and bias as constants, the output rescaling per
/// channel, the window.
fn lower_weighted(cx: &mut Lowering<'_>, o: &mut OpLowering<'_>) -> OpResult {
    let (model, op) = (cx.model, o.op);
    if op.kind == OpKind::TransposeConv {
        check_transpose_conv(op, o.dtype)?;
    }
    let (_, wi, bias_index) = conv_operands(model, op).ok_or("no weights")?;
    // FETCH_CONV_2D: the second activation it concatenates, the axis and the
    // shape of the concatenation it convolves.
    let mut conv_input_shape = o.x.shape.clone();
    if op.kind == OpKind::FetchConv2d {
        let parts = model.fetch_conv_parts(op)?;
        if let Some(&second) = parts.activations.get(1) {
            o.inputs
                .push(cx.arena_tensor(second, o.index).map_err(reason)?);
        }
        o.params.axis = parts.axis as i32;
        conv_input_shape = parts.input_shape;
    }
    let wt = &model.tensors[wi];
    check_weights(cx, o, wi)?;
    let fc_per_channel = fully_connected_per_channel(cx, o, wt, wi)?;
    let w_scales = weight_scales(model, o, wt, fc_per_channel);
    let w_zp = wt
        .quantization
        .as_ref()
        .and_then(|q| q.zero_point.first().copied())
        .unwrap_or(0) as i32;
    weighted_constants(cx, o, wi, w_zp, bias_index)?;
    if o.quantized() {
        o.params.weights_offset = if o.dtype == Dtype::Uint8 { -w_zp } else { 0 };
        let ms: Vec<(i32, i32)> = w_scales
            .iter()
            .map(|ws| quantize_multiplier(o.sx * ws / o.sy))
            .collect();
        (o.params.output_multiplier, o.params.output_shift) = ms[0];
        if o.dtype == Dtype::Int8 && (op.kind != OpKind::FullyConnected || fc_per_channel) {
            o.per_channel = ms;
        }
    }
    match op.kind {
        OpKind::TransposeConv => transpose_conv_window(o, wt),
        OpKind::FullyConnected => Ok(()),
        _ => conv_window(o, wt, &conv_input_shape),
    }
}

/// Refuses a hybrid operator (float input, quantised weights) rather than
/// run it to outputs TFLM would not give.
fn check_weights(cx: &Lowering<'_>, o: &OpLowering<'_>, wi: usize) -> OpResult {
    let wt = &cx.model.tensors[wi];
    if o.x.dtype == Dtype::Float32 && wt.dtype != Dtype::Float32 {
        return Err(format!(
            "a hybrid operator (float32 input `{}`, {} weights `{}`): TFLM \
             refuses to prepare hybrid models and the executor has no such kernel",
            cx.names[o.op.inputs[0]], wt.dtype, cx.names[wi]
        ));
    }
    Ok(())
}

/// Whether a FULLY_CONNECTED's weights are quantised per output unit (which
/// the executor takes for int8 only, one scale per unit).
fn fully_connected_per_channel(
    cx: &Lowering<'_>,
    o: &OpLowering<'_>,
    wt: &Tensor,
    wi: usize,
) -> Result<bool, String> {
    let per_channel = o.op.kind == OpKind::FullyConnected
        && wt
            .quantization
            .as_ref()
            .is_some_and(|q| q.scale.windows(2).any(|w| w[0] != w[1]));
    if per_channel {
        let scales = wt.quantization.as_ref().map_or(&[][..], |q| &q.scale[..]);
        if o.dtype != Dtype::Int8 || scales.len() != out_channels(o.y) {
            return Err(format!(
                "weights `{}` are quantised per channel ({} scales): the \
                 executor's FULLY_CONNECTED takes one scale per output unit \
                 of an int8 model",
                cx.names[wi],
                scales.len()
            ));
        }
    }
    Ok(per_channel)
}

/// Output channels (units) of a tensor: its last dimension.
fn out_channels(t: &Tensor) -> usize {
    *t.shape.last().unwrap_or(&1) as usize
}

/// Weight scales: per output channel (convolutions, per-channel fully
/// connected) or one; the model's, or the zoo's.
fn weight_scales(model: &Model, o: &OpLowering<'_>, wt: &Tensor, fc_per_channel: bool) -> Vec<f64> {
    let channels = if o.op.kind == OpKind::FullyConnected && !fc_per_channel {
        1
    } else {
        out_channels(o.y)
    };
    match &wt.quantization {
        Some(q) if !q.scale.is_empty() => (0..channels)
            .map(|c| q.scale[c.min(q.scale.len() - 1)] as f64)
            .collect(),
        _ => {
            let ws = weight_scale(
                o.sx,
                o.sy,
                gain(o.op.options.activation),
                fan_in(model, o.op),
            );
            vec![ws; channels]
        }
    }
}

/// The weights and bias as constant tensors of the program.
fn weighted_constants(
    cx: &mut Lowering<'_>,
    o: &mut OpLowering<'_>,
    wi: usize,
    w_zp: i32,
    bias_index: Option<usize>,
) -> OpResult {
    let model = cx.model;
    let wt = &model.tensors[wi];
    let k = fan_in(model, o.op);
    let wdata = weight_data(&mut cx.rng, wt, k, gain(o.op.options.activation) as f32);
    let wd = program_dtype(wt.dtype).ok_or_else(|| format!("weights type {}", wt.dtype))?;
    o.weights = Some(cx.push(ProgramTensor {
        name: cx.names[wi].clone(),
        dtype: wd,
        dims: wt.shape.clone(),
        zero_point: w_zp,
        data: TensorData::Constant(wdata),
    }));
    if let Some(bi) = bias_index {
        let bt = &model.tensors[bi];
        let bd = program_dtype(bt.dtype).ok_or_else(|| format!("bias type {}", bt.dtype))?;
        let bdata = bias_data(&mut cx.rng, bt);
        o.bias = Some(cx.push(ProgramTensor {
            name: cx.names[bi].clone(),
            dtype: bd,
            dims: dims_of(bt),
            zero_point: 0,
            data: TensorData::Constant(bdata),
        }));
    }
    Ok(())
}

/// A convolution's window: TFLite's padding and the filter extents; a
/// depthwise convolution's multiplier from its filter.
fn conv_window(o: &mut OpLowering<'_>, wt: &Tensor, input_shape: &[u32]) -> OpResult {
    let (i4, f4, o4) = (
        crate::shape4(input_shape),
        crate::shape4(&wt.shape),
        crate::shape4(&o.y.shape),
    );
    let (Some(i4), Some(f4), Some(o4)) = (i4, f4, o4) else {
        return Err("tensors of rank > 4".into());
    };
    let (stride, dilation) = (o.op.options.stride, o.op.options.dilation);
    let p = &mut o.params;
    p.pad_h = pad(stride.0, dilation.0, i4[1], f4[1], o4[1]);
    p.pad_w = pad(stride.1, dilation.1, i4[2], f4[2], o4[2]);
    p.filter_h = f4[1] as i32;
    p.filter_w = f4[2] as i32;
    if o.op.kind == OpKind::DepthwiseConv2d && i4[3] > 0 {
        p.depth_multiplier = (f4[3] / i4[3]).max(1) as i32;
    }
    Ok(())
}

/// A transpose convolution's window and accumulator width.
fn transpose_conv_window(o: &mut OpLowering<'_>, wt: &Tensor) -> OpResult {
    let p = &mut o.params;
    (p.pad_h, p.pad_w, p.filter_h, p.filter_w) =
        transpose_conv_padding(o.op, o.x, wt, o.y).ok_or("tensors of rank > 4")?;
    p.accumulator_bytes = match o.op.options.accumulator {
        Accumulator::Int32 => 0,
        Accumulator::Int16 => 2,
    };
    Ok(())
}

/// TinySeg's SPILL (sends the tail) and SPILL_KEEP (keeps the head).
fn lower_spill(o: &mut OpLowering<'_>) -> OpResult {
    if o.y.bytes > o.x.bytes || o.y.dtype != o.x.dtype {
        return Err("the output is not a part of the input".into());
    }
    if o.op.kind == OpKind::Spill {
        o.params.copy_from = (o.x.bytes - o.y.bytes) as i32;
    }
    Ok(())
}

/// Byte copies: TinySeg's FETCH, RESHAPE and SQUEEZE.
fn lower_copy(o: &OpLowering<'_>) -> OpResult {
    if o.y.bytes != o.x.bytes {
        return Err("input and output sizes differ".into());
    }
    Ok(())
}

/// TinySeg's FETCH_CONCAT: exactly two inputs.
fn lower_fetch_concat(cx: &mut Lowering<'_>, o: &mut OpLowering<'_>) -> OpResult {
    let [_, second] = o.op.inputs[..] else {
        return Err("concatenates other than two inputs".into());
    };
    o.inputs
        .push(cx.arena_tensor(second, o.index).map_err(reason)?);
    o.params.axis = concatenation_axis(cx.model, o.op)?;
    Ok(())
}

/// CONCATENATION of up to `MEMTRACE_PROGRAM_MAX_INPUTS` inputs.
fn lower_concatenation(cx: &mut Lowering<'_>, o: &mut OpLowering<'_>) -> OpResult {
    o.params.axis = concatenation_axis(cx.model, o.op)?;
    for &t in o.op.inputs.iter().skip(1) {
        o.inputs.push(cx.arena_tensor(t, o.index).map_err(reason)?);
    }
    Ok(())
}

/// MAX_POOL_2D and AVERAGE_POOL_2D: the window and its padding.
fn lower_pool(o: &mut OpLowering<'_>) -> OpResult {
    let (Some(i4), Some(o4)) = (crate::shape4(&o.x.shape), crate::shape4(&o.y.shape)) else {
        return Err("tensors of rank > 4".into());
    };
    let (fh, fw) = o.op.options.filter;
    let stride = o.op.options.stride;
    let p = &mut o.params;
    p.filter_h = fh as i32;
    p.filter_w = fw as i32;
    p.pad_h = pad(stride.0, 1, i4[1], fh, o4[1]);
    p.pad_w = pad(stride.1, 1, i4[2], fw, o4[2]);
    Ok(())
}

/// ADD of two inputs of the output's shape; quantised, TFLite's rescaling of
/// both inputs to twice the larger scale.
fn lower_add(cx: &mut Lowering<'_>, o: &mut OpLowering<'_>) -> OpResult {
    let model = cx.model;
    let x2 = *o.op.inputs.get(1).ok_or("one input")?;
    if model.tensors[x2].shape != o.y.shape || o.x.shape != o.y.shape {
        return Err("broadcasting ADD is not supported".into());
    }
    o.inputs.push(cx.arena_tensor(x2, o.index).map_err(reason)?);
    if o.quantized() {
        let (sx, sy) = (o.sx, o.sy);
        let (s2, z2) = act_q(&model.tensors[x2], false);
        let p = &mut o.params;
        p.input2_offset = -z2;
        p.left_shift = 20;
        let twice = 2.0 * sx.max(s2);
        (p.input1_multiplier, p.input1_shift) = quantize_multiplier(sx / twice);
        (p.input2_multiplier, p.input2_shift) = quantize_multiplier(s2 / twice);
        (p.output_multiplier, p.output_shift) =
            quantize_multiplier(twice / ((1 << 20) as f64 * sy));
    }
    Ok(())
}

/// SOFTMAX; quantised, TFLite's `PreprocessSoftmaxScaling` (beta 1, 5
/// integer bits).
fn lower_softmax(o: &mut OpLowering<'_>) {
    if o.quantized() {
        let real = (o.sx * (1u64 << 26) as f64).min((1u64 << 31) as f64 - 1.0);
        let (m, shift) = quantize_multiplier(real);
        let p = &mut o.params;
        p.softmax_multiplier = m;
        p.softmax_left_shift = shift;
        let radius = 31.0 * (1u64 << 26) as f64 / 2f64.powi(shift);
        p.diff_min = -(radius.floor() as i32);
    }
}

/// QUANTIZE (float to int8/uint8, the output's parameters) and DEQUANTIZE
/// (int8/uint8 to float, the input's).
fn lower_quantize(o: &mut OpLowering<'_>) -> OpResult {
    let quantize = o.op.kind == OpKind::Quantize;
    let (s, z) = if quantize { (o.sy, o.zy) } else { (o.sx, o.zx) };
    o.params.quant_scale = s as f32;
    o.params.quant_zero_point = z;
    let ok = if quantize {
        o.dtype == Dtype::Float32 && matches!(o.y.dtype, Dtype::Int8 | Dtype::Uint8)
    } else {
        o.quantized() && o.y.dtype == Dtype::Float32
    };
    if !ok {
        return Err(format!("{} -> {} is not supported", o.x.dtype, o.y.dtype));
    }
    Ok(())
}

/// RELU, RELU6 and RELU_N1_TO_1: the RELU kernel with the operator's clamp.
fn lower_relu(o: &mut OpLowering<'_>) -> OpResult {
    let act = match o.op.kind {
        OpKind::Relu => Activation::Relu,
        OpKind::Relu6 => Activation::Relu6,
        _ => Activation::ReluN1To1,
    };
    (o.params.act_min, o.params.act_max) = act_range(act, o.y.dtype, o.sy, o.zy);
    (o.params.float_min, o.params.float_max) = float_range(act);
    if o.dtype == Dtype::Uint8 {
        return Err("uint8 activations are not supported".into());
    }
    Ok(())
}

/// PAD: the paddings as a constant `[4, 2]` int32 tensor.
fn lower_pad(cx: &mut Lowering<'_>, o: &mut OpLowering<'_>) -> OpResult {
    let amounts = pad_amounts(cx.model, o.op, o.x)?;
    let pi = *o.op.inputs.get(1).ok_or("no paddings")?;
    o.weights = Some(cx.push(ProgramTensor {
        name: cx.names[pi].clone(),
        dtype: Dtype::Int32,
        dims: vec![4, 2],
        zero_point: 0,
        data: TensorData::Constant(amounts.iter().flat_map(|v| v.to_le_bytes()).collect()),
    }));
    Ok(())
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
pub(super) fn transpose_conv_padding(
    op: &Op,
    x: &Tensor,
    w: &Tensor,
    y: &Tensor,
) -> Option<(i32, i32, i32, i32)> {
    crate::shape4(&x.shape)?;
    let (f4, o4) = (crate::shape4(&w.shape)?, crate::shape4(&y.shape)?);
    let (sh, sw) = (op.options.stride.0, op.options.stride.1);
    // The forward convolution's extent of the transpose conv's output.
    let forward = |size: u32, filter: u32, stride: u32| -> u32 {
        let (size, filter, stride) = (size as u64, filter as u64, stride.max(1) as u64);
        out_size(op.options.padding, size, filter, stride, 1).unwrap_or(0) as u32
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
