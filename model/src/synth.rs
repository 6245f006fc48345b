//! Seeded constants: what a zoo model lacks (weights, biases, shape
//! operands, quantisation) and the graph inputs of a run, deterministic in
//! the seed. Imported models carry their own constants and keep them.
//!
//! Zoo models only know shapes, so they get seeded data: weights uniform in
//! the int8 range (float: ±g·√(3/K)), biases small, and for int8 a fixed
//! activation scale of 0.05 with zero point 0 and weight scales chosen so that
//! an output keeps roughly the spread of its input (real multiplier
//! g / (73·√K)), with g = √2 before a ReLU/ReLU6 (He) and 1 otherwise;
//! softmax outputs use TFLM's required scale 1/256 and zero point −128.

use memtrace_overlap::rng::Rng;

use crate::{Activation, Dtype, Model, Op, OpKind, Quantization, Tensor};

/// Verifier streams start from the seed mixed with the SplitMix64 increment,
/// so that seed 0 is not the all-zero state.
fn stream(seed: u64) -> Rng {
    Rng::new(seed ^ 0x9E37_79B9_7F4A_7C15)
}

/// Fills in what a zoo model lacks, deterministically from `seed`: the data
/// of every constant (weights, biases, reshape shapes) and, for int8/uint8
/// models, the quantisation of activations, weights and biases (see the
/// module docs). Tensors that already have data or
/// quantisation keep it, so imported models are returned unchanged.
pub fn materialize(model: &Model, seed: u64) -> Model {
    let mut m = model.clone();
    let mut rng = stream(seed.wrapping_add(0x5EED));
    quantize_activations(&mut m, model);
    for op in &model.ops {
        match op.kind {
            OpKind::Conv2d
            | OpKind::DepthwiseConv2d
            | OpKind::FullyConnected
            | OpKind::TransposeConv
            | OpKind::FetchConv2d => synthesize_weighted(&mut m, model, op, &mut rng),
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

/// Gives every int8/uint8 activation without quantisation the zoo's (or
/// TFLM's fixed softmax output) scale and zero point.
fn quantize_activations(m: &mut Model, model: &Model) {
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
}

/// He-style gain: a (clipped) ReLU halves the second moment, so without √2
/// a deep model's activations fade to zero.
fn gain(activation: Activation) -> f64 {
    match activation {
        Activation::Relu | Activation::Relu6 => std::f64::consts::SQRT_2,
        _ => 1.0,
    }
}

/// The weight scale a zoo model gets: an output keeps roughly the spread of
/// its input (real multiplier g / (73·√K)).
fn weight_scale(sx: f64, sy: f64, gain: f64, fan_in: usize) -> f64 {
    sy * gain / (sx * 73.0 * (fan_in as f64).sqrt())
}

/// Weights, bias and their quantisation of one weighted operator, where the
/// model has none.
fn synthesize_weighted(m: &mut Model, model: &Model, op: &Op, rng: &mut Rng) {
    let (Some((x, wi, bias)), Some(&y)) = (conv_operands(model, op), op.outputs.first()) else {
        return;
    };
    let out_c = *m.tensors[y].shape.last().unwrap_or(&1) as usize;
    let k = fan_in(model, op);
    let gain = gain(op.options.activation);
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
        w.data = Some(synth_weights(rng, w, k, gain as f32));
    }
    if quantized && w.quantization.is_none() {
        let ws = weight_scale(sx, sy, gain, k);
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
            b.data = Some(synth_bias(rng, b));
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

/// Seeded weights: the int8/uint8 range, or floats in ±g·√(3/K).
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

/// Seeded biases: small, so that they shift outputs without swamping them.
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

/// `n` seeded values of `dtype`, little-endian: the whole range of 8- and
/// 16-bit integers, floats in [−1, 1) (complex numbers: both parts), small
/// wider integers (shape and index operands stay meaningful), booleans as 0
/// or 1.
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
        Dtype::Uint16 => (0..n)
            .flat_map(|_| (rng.int(0, 65535) as u16).to_le_bytes())
            .collect(),
        Dtype::Uint32 => (0..n)
            .flat_map(|_| (rng.int(0, 255) as u32).to_le_bytes())
            .collect(),
        Dtype::Uint64 => (0..n)
            .flat_map(|_| (rng.int(0, 255) as u64).to_le_bytes())
            .collect(),
        Dtype::Float64 => (0..n)
            .flat_map(|_| f64::from(rng.float(-1.0, 1.0)).to_le_bytes())
            .collect(),
        Dtype::Complex64 => (0..2 * n)
            .flat_map(|_| rng.float(-1.0, 1.0).to_le_bytes())
            .collect(),
        Dtype::Complex128 => (0..2 * n)
            .flat_map(|_| f64::from(rng.float(-1.0, 1.0)).to_le_bytes())
            .collect(),
        // One byte per element in the arena, the int4 range.
        Dtype::Int4 => (0..n).map(|_| rng.int(-8, 7) as i8 as u8).collect(),
        // A handle is TFLM's to give; an input of one gets handle 0.
        Dtype::Resource => vec![0; 4 * n],
    }
}

/// The activation scale zoo models get.
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

/// Per-tensor quantisation of one scale and zero point.
fn per_tensor(scale: f64, zp: i32) -> Option<Quantization> {
    Some(Quantization {
        scale: vec![scale as f32],
        zero_point: vec![zp as i64],
        quantized_dimension: 0,
    })
}
