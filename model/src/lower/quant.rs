//! TFLite's quantisation arithmetic, as TFLM's kernels compute it in their
//! `Prepare`: fixed-point multipliers, activation ranges, and the scale and
//! zero point an activation tensor has (or gets, for zoo models).

use crate::{Activation, Dtype, Quantization, Tensor};

/// The activation scale zoo models get.
const ACT_SCALE: f64 = 0.05;

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

/// (scale, zero point) of an activation tensor; `softmax_out` selects TFLM's
/// fixed softmax output parameters when the model has none.
pub(super) fn act_q(t: &Tensor, softmax_out: bool) -> (f64, i32) {
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

/// The quantised range of an 8-bit type.
fn qrange(d: Dtype) -> (i32, i32) {
    match d {
        Dtype::Uint8 => (0, 255),
        _ => (-128, 127),
    }
}

/// TFLite `CalculateActivationRangeQuantized`.
pub(super) fn act_range(act: Activation, d: Dtype, scale: f64, zp: i32) -> (i32, i32) {
    let (qmin, qmax) = qrange(d);
    let q = |v: f64| zp + (v / scale).round() as i32;
    match act {
        Activation::Relu => (qmin.max(zp), qmax),
        Activation::Relu6 => (qmin.max(zp), qmax.min(q(6.0))),
        Activation::ReluN1To1 => (qmin.max(q(-1.0)), qmax.min(q(1.0))),
        _ => (qmin, qmax),
    }
}

/// The float clamp of a fused activation.
pub(super) fn float_range(act: Activation) -> (f32, f32) {
    match act {
        Activation::Relu => (0.0, f32::MAX),
        Activation::Relu6 => (0.0, 6.0),
        Activation::ReluN1To1 => (-1.0, 1.0),
        _ => (f32::MIN, f32::MAX),
    }
}

/// Per-tensor quantisation of one scale and zero point.
pub(super) fn per_tensor(scale: f64, zp: i32) -> Option<Quantization> {
    Some(Quantization {
        scale: vec![scale as f32],
        zero_point: vec![zp as i64],
        quantized_dimension: 0,
    })
}
