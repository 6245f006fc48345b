//! Each op's own rules: which fields it has, what its filter must look
//! like and what output shape it derives (TFLite's shape rules).

use super::{
    shape_text, Activation, LayerSpecBuilder, OpKind, Padding, Shape, SpecError, MAX_DIM,
    MAX_ELEMENTS,
};
use crate::geometry::out_size;

/// The checks every op shares: no empty input, strides, dilations and depth
/// multipliers in range, and the window fields neutral for ops without a
/// window (the canonical text leaves them out, so they could not be read
/// back), the depth multiplier for all but depthwise convolutions.
pub(super) fn check_common_fields(b: &LayerSpecBuilder) -> Result<(), SpecError> {
    let op = b.op;
    if op.job_code().is_none() {
        return Err(not_in_suite(op));
    }
    if b.input.contains(&0) {
        return Err(SpecError::new(format!(
            "input shape {} has a zero dimension",
            shape_text(&b.input)
        )));
    }
    if b.stride.0 == 0 || b.stride.1 == 0 || b.dilation.0 == 0 || b.dilation.1 == 0 {
        return Err(SpecError::new("stride and dilation must be at least 1"));
    }
    if b.depth_multiplier == 0 {
        return Err(SpecError::new("depth_multiplier must be at least 1"));
    }
    let scalars = [
        b.stride.0,
        b.stride.1,
        b.dilation.0,
        b.dilation.1,
        b.depth_multiplier,
    ];
    if scalars.iter().any(|&v| v > MAX_DIM) {
        return Err(SpecError::new(format!(
            "stride, dilation and depth_multiplier must be at most {MAX_DIM}"
        )));
    }
    let window_fields_set =
        b.stride != (1, 1) || b.dilation != (1, 1) || b.padding != Padding::Same;
    if !op.has_window() && window_fields_set {
        return Err(SpecError::new(format!(
            "op {} has no window: stride, dilation and padding do not apply",
            op.name()
        )));
    }
    if op != OpKind::DepthwiseConv2d && b.depth_multiplier != 1 {
        return Err(SpecError::new(format!(
            "depth_multiplier applies to depthwise_conv2d only, not to {}",
            op.name()
        )));
    }
    if b.dtype.job_code().is_none() {
        return Err(SpecError::new(format!(
            "dtype {} is not one the kernel suite runs (f32, int8)",
            b.dtype.spec_name()
        )));
    }
    if b.activation.job_code().is_none() {
        return Err(SpecError::new(format!(
            "activation {} is not one the kernel suite fuses (none, relu, relu6)",
            b.activation.name()
        )));
    }
    Ok(())
}

/// The filter (neutral for ops without one) and the output shape of the
/// layer, by its op's rule.
pub(super) fn filter_and_output(b: &LayerSpecBuilder) -> Result<(Shape, Shape), SpecError> {
    match b.op {
        OpKind::Conv2d | OpKind::DepthwiseConv2d | OpKind::MaxPool | OpKind::AveragePool => {
            window_layer(b)
        }
        OpKind::FullyConnected => fully_connected_layer(b),
        OpKind::Matmul => matmul_layer(b),
        OpKind::TransposeConv => {
            let f = transpose_conv_filter(b)?;
            Ok((f, transpose_conv_output(b, &f)?))
        }
        OpKind::Concatenation => Ok((no_filter(b)?, concatenation_output(b)?)),
        OpKind::Pad => Ok((no_filter(b)?, pad_output(b)?)),
        OpKind::Add | OpKind::Relu => Ok((no_filter(b)?, b.input)),
        op => Err(not_in_suite(op)),
    }
}

/// The error of an op the kernel suite does not run as a layer.
fn not_in_suite(op: OpKind) -> SpecError {
    SpecError::new(format!(
        "op {} is not a kernel-suite layer (known: {})",
        op.name(),
        OpKind::SUITE.map(OpKind::name).join(", ")
    ))
}

/// The filter of `b`, or an error saying the op needs one (`form` shows it).
fn required_filter(b: &LayerSpecBuilder, form: &str) -> Result<Shape, SpecError> {
    b.filter
        .ok_or_else(|| SpecError::new(format!("op {} needs a filter shape ({form})", b.op.name())))
}

/// Convolutions and pools: the window slides over height and width.
fn window_layer(b: &LayerSpecBuilder) -> Result<(Shape, Shape), SpecError> {
    let [n, h, w, _] = b.input;
    let f = required_filter(b, "filter=OxKHxKWxI")?;
    if f.contains(&0) {
        return Err(SpecError::new("filter shape has a zero dimension"));
    }
    let out_c = window_output_channels(b, &f)?;
    let extent = |size: u32, k: u32, s: u32, d: u32| {
        out_size(b.padding, size as u64, k as u64, s as u64, d as u64).unwrap_or(0) as u32
    };
    let oh = extent(h, f[1], b.stride.0, b.dilation.0);
    let ow = extent(w, f[2], b.stride.1, b.dilation.1);
    if oh == 0 || ow == 0 {
        return Err(SpecError::new(format!(
            "the {}x{} window does not fit the {h}x{w} input with valid padding",
            f[1], f[2]
        )));
    }
    Ok((f, [n, oh, ow, out_c]))
}

/// Output channels of a convolution or pool, after checking the filter's
/// depth against the input's.
fn window_output_channels(b: &LayerSpecBuilder, f: &Shape) -> Result<u32, SpecError> {
    let c = b.input[3];
    match b.op {
        OpKind::Conv2d => {
            if f[3] != c {
                return Err(SpecError::new(format!(
                    "conv2d filter depth {} does not match input depth {c}",
                    f[3]
                )));
            }
            Ok(f[0])
        }
        OpKind::DepthwiseConv2d => {
            let depth = c as u64 * b.depth_multiplier as u64;
            if f[0] != 1 || f[3] as u64 != depth {
                return Err(SpecError::new(format!(
                    "depthwise_conv2d filter must be 1xKHxKWx{depth} (input depth {c} × depth_multiplier {})",
                    b.depth_multiplier
                )));
            }
            Ok(f[3])
        }
        _ => {
            if f[0] != 1 || f[3] != 1 {
                return Err(SpecError::new("pool filter must be 1xKHxKWx1 (or KHxKW)"));
            }
            Ok(c)
        }
    }
}

/// Fully connected: every input row times the `UNITSxDEPTH` weights.
fn fully_connected_layer(b: &LayerSpecBuilder) -> Result<(Shape, Shape), SpecError> {
    let [n, h, w, c] = b.input;
    let f = required_filter(b, "filter=UNITSxDEPTH")?;
    if f[0] != 1 || f[1] != 1 || f[2] == 0 || f[3] != c {
        return Err(SpecError::new(format!(
            "fully_connected filter must be UNITSx{c} (input depth {c})"
        )));
    }
    let batches = n as u64 * h as u64 * w as u64;
    if batches > MAX_DIM as u64 {
        return Err(SpecError::new(format!(
            "fully_connected input {} has more than {MAX_DIM} rows",
            shape_text(&b.input)
        )));
    }
    Ok((f, [1, 1, batches as u32, f[2]]))
}

/// Matmul: `MxK` times `KxN`.
fn matmul_layer(b: &LayerSpecBuilder) -> Result<(Shape, Shape), SpecError> {
    let [n, h, w, c] = b.input;
    let f = required_filter(b, "filter=KxN")?;
    if f[0] != 1 || f[1] != 1 || f[2] != c || f[3] == 0 || n != 1 || h != 1 {
        return Err(SpecError::new(format!(
            "matmul needs input=MxK and filter=KxN with matching K (input depth {c})"
        )));
    }
    Ok((f, [1, 1, w, f[3]]))
}

/// A transpose conv's `OCxKHxKWxIC` filter, its depth the input's.
fn transpose_conv_filter(b: &LayerSpecBuilder) -> Result<Shape, SpecError> {
    let c = b.input[3];
    let f = required_filter(b, "filter=OCxKHxKWxIC")?;
    if f.contains(&0) {
        return Err(SpecError::new("filter shape has a zero dimension"));
    }
    if f[3] != c {
        return Err(SpecError::new(format!(
            "transpose_conv filter depth {} does not match input depth {c}",
            f[3]
        )));
    }
    Ok(f)
}

/// Pad: every dimension grows by its before and after amounts.
fn pad_output(b: &LayerSpecBuilder) -> Result<Shape, SpecError> {
    let p = b.paddings.ok_or_else(|| {
        SpecError::new(format!(
            "op {} needs paddings (pad_before=NxHxWxC,pad_after=NxHxWxC)",
            b.op.name()
        ))
    })?;
    let mut out = [0u32; 4];
    for (k, o) in out.iter_mut().enumerate() {
        let d = b.input[k] as u64 + p.before[k] as u64 + p.after[k] as u64;
        if d > MAX_DIM as u64 {
            return Err(SpecError::new(format!(
                "pad output dimension {k} ({d}) is above {MAX_DIM}"
            )));
        }
        *o = d as u32;
    }
    Ok(out)
}

/// Checks that a shape's dimensions and element count are in range.
pub(super) fn check_size(what: &str, shape: &Shape) -> Result<(), SpecError> {
    if shape.iter().any(|&d| d > MAX_DIM) {
        return Err(SpecError::new(format!(
            "{what} shape {} has a dimension above {MAX_DIM}",
            shape_text(shape)
        )));
    }
    let n = shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64));
    if !matches!(n, Some(n) if n <= MAX_ELEMENTS) {
        return Err(SpecError::new(format!(
            "{what} shape {} has more than {MAX_ELEMENTS} elements",
            shape_text(shape)
        )));
    }
    Ok(())
}

/// Rejects the fields of a builder that its op does not have (they would not
/// survive the canonical text) and the fused activations the new ops' TFLM
/// reference kernels do not apply.
pub(super) fn check_op_fields(b: &LayerSpecBuilder) -> Result<(), SpecError> {
    let op = b.op;
    let misplaced = |what: &str, owner: &str| {
        SpecError::new(format!("op {} has no {what} (only {owner} has)", op.name()))
    };
    if op != OpKind::Concatenation && (b.input2.is_some() || b.axis.is_some()) {
        return Err(misplaced("input2 or axis", "concatenation"));
    }
    if op != OpKind::Pad && b.paddings.is_some() {
        return Err(misplaced("pad_before or pad_after", "pad"));
    }
    if op != OpKind::TransposeConv && b.output.is_some() {
        return Err(misplaced("given output shape", "transpose_conv"));
    }
    if op == OpKind::TransposeConv && b.dilation != (1, 1) {
        return Err(SpecError::new(
            "transpose_conv has no dilation (TFLite's TRANSPOSE_CONV has none)",
        ));
    }
    if matches!(
        op,
        OpKind::TransposeConv | OpKind::Concatenation | OpKind::Pad
    ) && b.activation != Activation::None
    {
        return Err(SpecError::new(format!(
            "op {} has no fused activation (its TFLM reference kernel applies none)",
            op.name()
        )));
    }
    Ok(())
}

/// The neutral filter of ops without one; an error if one was given.
fn no_filter(b: &LayerSpecBuilder) -> Result<Shape, SpecError> {
    match b.filter {
        Some(_) => Err(SpecError::new(format!(
            "op {} takes no filter",
            b.op.name()
        ))),
        None => Ok([1, 1, 1, 1]),
    }
}

/// The output of a transpose conv: the given one, which a conv2d with the
/// same filter, stride and padding must map back to the input (what makes
/// TFLite's padding of the layer meaningful), or by default the size
/// TensorFlow's `conv2d_transpose` gives: `in·s` (same) or
/// `in·s + max(k − s, 0)` (valid).
fn transpose_conv_output(b: &LayerSpecBuilder, f: &Shape) -> Result<Shape, SpecError> {
    let [n, h, w, _] = b.input;
    let axis = |size: u32, k: u32, s: u32| -> Result<u32, SpecError> {
        let (size, k, s) = (size as u64, k as u64, s as u64);
        let out = match b.padding {
            Padding::Same => size * s,
            Padding::Valid => size * s + k.saturating_sub(s),
        };
        u32::try_from(out)
            .ok()
            .filter(|&o| o <= MAX_DIM)
            .ok_or_else(|| {
                SpecError::new(format!("transpose_conv output {out} is above {MAX_DIM}"))
            })
    };
    let Some(out) = b.output else {
        return Ok([
            n,
            axis(h, f[1], b.stride.0)?,
            axis(w, f[2], b.stride.1)?,
            f[0],
        ]);
    };
    if out[0] != n || out[3] != f[0] {
        return Err(SpecError::new(format!(
            "transpose_conv output={} must have the input's batch {n} and the filter's {} output channels",
            shape_text(&out),
            f[0]
        )));
    }
    for (k, what, input) in [(1, "height", h), (2, "width", w)] {
        let stride = [b.stride.0, b.stride.1][k - 1];
        let back = out_size(b.padding, out[k] as u64, f[k] as u64, stride as u64, 1).unwrap_or(0);
        if back != input as u64 {
            return Err(SpecError::new(format!(
                "transpose_conv output={} does not fit the input: a conv2d with this filter, stride and padding maps output {what} {} to {back}, not to the input {what} {input}",
                shape_text(&out),
                out[k]
            )));
        }
    }
    Ok(out)
}

/// The output of a concatenation: the inputs agree outside the axis, whose
/// extents add up.
fn concatenation_output(b: &LayerSpecBuilder) -> Result<Shape, SpecError> {
    let (Some(in2), Some(axis)) = (b.input2, b.axis) else {
        return Err(SpecError::new(
            "op concatenation needs input2=NxHxWxC and axis=A",
        ));
    };
    if axis > 3 {
        return Err(SpecError::new(format!(
            "concatenation axis {axis} is not an NHWC axis (0 to 3, or -4 to -1)"
        )));
    }
    if in2.contains(&0) {
        return Err(SpecError::new(format!(
            "input2 shape {} has a zero dimension",
            shape_text(&in2)
        )));
    }
    check_size("input2", &in2)?;
    let a = axis as usize;
    if (0..4).any(|k| k != a && in2[k] != b.input[k]) {
        return Err(SpecError::new(format!(
            "concatenation input2 {} does not match input {} outside axis {axis}",
            shape_text(&in2),
            shape_text(&b.input)
        )));
    }
    let mut out = b.input;
    let sum = b.input[a] as u64 + in2[a] as u64;
    if sum > MAX_DIM as u64 {
        return Err(SpecError::new(format!(
            "concatenation output dimension {axis} ({sum}) is above {MAX_DIM}"
        )));
    }
    out[a] = sum as u32;
    Ok(out)
}
