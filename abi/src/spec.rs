//! Layer specifications: what one kernel invocation computes, independent of
//! where its buffers live.
//!
//! The same `key=value,...` text is used by `memtrace run --job SPEC`, by the
//! guest's layer-begin `params` string, and by `memtrace validate` configs, so a
//! traced layer can always be re-described to the algorithmic and analytic O_s
//! methods. Output shape and padding follow TFLite's rules
//! (`ComputeOutSize`, `ComputePaddingHeightWidth`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The operators the memtrace kernel suite runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// 2-D convolution.
    Conv2d,
    /// Depthwise 2-D convolution.
    DepthwiseConv2d,
    /// Max pooling.
    MaxPool,
    /// Average pooling.
    AveragePool,
    /// Fully connected layer.
    FullyConnected,
    /// Element-wise addition of two inputs of the same shape.
    Add,
    /// Element-wise ReLU.
    Relu,
    /// Naive accumulating matrix multiply written for memtrace (paper Fig. 3b).
    Matmul,
    /// Transposed 2-D convolution (TFLite `TRANSPOSE_CONV`): the output shape
    /// is given, as TFLite's `output_shape` input gives it.
    TransposeConv,
    /// Concatenation of two inputs along one NHWC axis.
    Concatenation,
    /// Constant padding before and after every NHWC dimension.
    Pad,
}

impl Op {
    /// Every operator, in job-code order.
    pub const ALL: [Op; 11] = [
        Op::Conv2d,
        Op::DepthwiseConv2d,
        Op::MaxPool,
        Op::AveragePool,
        Op::FullyConnected,
        Op::Add,
        Op::Relu,
        Op::Matmul,
        Op::TransposeConv,
        Op::Concatenation,
        Op::Pad,
    ];

    /// Name used in specs, layer-begin markers and reports.
    pub fn name(self) -> &'static str {
        match self {
            Op::Conv2d => "conv2d",
            Op::DepthwiseConv2d => "depthwise_conv2d",
            Op::MaxPool => "max_pool",
            Op::AveragePool => "average_pool",
            Op::FullyConnected => "fully_connected",
            Op::Add => "add",
            Op::Relu => "relu",
            Op::Matmul => "matmul",
            Op::TransposeConv => "transpose_conv",
            Op::Concatenation => "concatenation",
            Op::Pad => "pad",
        }
    }

    /// Code in the job mailbox (`enum memtrace_op` in `memtrace_job.h`).
    pub fn job_code(self) -> i32 {
        match self {
            Op::Conv2d => OP_CONV2D,
            Op::DepthwiseConv2d => OP_DEPTHWISE_CONV2D,
            Op::MaxPool => OP_MAX_POOL,
            Op::AveragePool => OP_AVERAGE_POOL,
            Op::FullyConnected => OP_FULLY_CONNECTED,
            Op::Add => OP_ADD,
            Op::Relu => OP_RELU,
            Op::Matmul => OP_MATMUL,
            Op::TransposeConv => OP_TRANSPOSE_CONV,
            Op::Concatenation => OP_CONCATENATION,
            Op::Pad => OP_PAD,
        }
    }

    /// Ops with a sliding window: stride, dilation, padding and the derived
    /// before-padding `pad` apply (transpose_conv has all but dilation).
    fn has_window(self) -> bool {
        matches!(
            self,
            Op::Conv2d | Op::DepthwiseConv2d | Op::MaxPool | Op::AveragePool | Op::TransposeConv
        )
    }

    /// Number of activation inputs (2 for `add` and `concatenation`).
    pub fn inputs(self) -> usize {
        match self {
            Op::Add | Op::Concatenation => 2,
            _ => 1,
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Op {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Self, SpecError> {
        Op::ALL
            .into_iter()
            .find(|op| op.name() == s)
            .ok_or_else(|| SpecError::new(format!("unknown op `{s}` (known: {})", op_names())))
    }
}

fn op_names() -> String {
    Op::ALL.map(Op::name).join(", ")
}

/// Element type of the layer's tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dtype {
    /// 32-bit float.
    F32,
    /// Signed 8-bit integer (quantised).
    Int8,
}

impl Dtype {
    /// Bytes per element (T_s in the DMO paper).
    pub fn size(self) -> u64 {
        match self {
            Dtype::F32 => 4,
            Dtype::Int8 => 1,
        }
    }
    /// Name used in specs (`f32`, `int8`).
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::Int8 => "int8",
        }
    }
    /// Code in the job mailbox (`enum memtrace_dtype`).
    pub fn job_code(self) -> i32 {
        match self {
            Dtype::F32 => DTYPE_F32,
            Dtype::Int8 => DTYPE_INT8,
        }
    }
}

impl FromStr for Dtype {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Self, SpecError> {
        match s {
            "f32" | "float32" => Ok(Dtype::F32),
            "int8" | "i8" => Ok(Dtype::Int8),
            _ => Err(SpecError::new(format!(
                "unknown dtype `{s}` (known: f32, int8)"
            ))),
        }
    }
}

/// TFLite padding scheme.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Padding {
    /// Output size `ceil(input / stride)`, input padded as needed.
    Same,
    /// No padding: the window stays inside the input.
    Valid,
}

impl Padding {
    fn name(self) -> &'static str {
        match self {
            Padding::Same => "same",
            Padding::Valid => "valid",
        }
    }
}

/// Fused activation applied by the kernel to its output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    /// No activation.
    None,
    /// Clamps outputs below 0 to 0.
    Relu,
    /// Clamps outputs to `[0, 6]`.
    Relu6,
}

impl Activation {
    fn name(self) -> &'static str {
        match self {
            Activation::None => "none",
            Activation::Relu => "relu",
            Activation::Relu6 => "relu6",
        }
    }
    fn job_code(self) -> i32 {
        match self {
            Activation::None => 0,
            Activation::Relu => 1,
            Activation::Relu6 => 2,
        }
    }
}

/// A 4-D NHWC shape.
pub type Shape = [u32; 4];

/// One layer configuration. Construct it with [`LayerSpec::parse`] or
/// [`LayerSpec::new`]; both compute `output` and `pad` and check consistency.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LayerSpec {
    /// Operator of the layer.
    pub op: Op,
    /// Element type of all tensors of the layer.
    pub dtype: Dtype,
    /// N, H, W, C. For `fully_connected` and `matmul`: [1, 1, rows, depth].
    pub input: Shape,
    /// See `harness-c/include/memtrace_job.h` for the per-op meaning.
    pub filter: Shape,
    /// N, H, W, C of the output, derived from the other fields.
    pub output: Shape,
    /// (height, width)
    pub stride: (u32, u32),
    /// (height, width)
    pub dilation: (u32, u32),
    /// Padding scheme (`same` or `valid`).
    pub padding: Padding,
    /// TFLite `PaddingValues` (height, width): rows/cols of zero padding before
    /// the first input row/col.
    pub pad: (u32, u32),
    /// Output channels per input channel of a depthwise convolution.
    pub depth_multiplier: u32,
    /// Fused activation.
    pub activation: Activation,
    /// `concatenation`: the second input's NHWC shape (equal to `input`
    /// outside `axis`); `None` for every other op.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input2: Option<Shape>,
    /// `concatenation`: the NHWC axis (0 = N … 3 = C) the inputs are joined
    /// along; `None` for every other op.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub axis: Option<u32>,
    /// `pad`: elements added before and after each NHWC dimension; `None`
    /// for every other op.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paddings: Option<Paddings>,
}

/// The padding of a `pad` layer: elements added before and after each NHWC
/// dimension (TFLite's `[rank, 2]` paddings tensor, as 4-D).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Paddings {
    /// Elements before the first element of each dimension.
    pub before: Shape,
    /// Elements after the last element of each dimension.
    pub after: Shape,
}

/// A malformed or inconsistent layer specification.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SpecError {
    message: String,
}

impl SpecError {
    fn new(message: impl Into<String>) -> Self {
        SpecError {
            message: message.into(),
        }
    }
}

/// Fields of a spec before derived values are computed.
#[derive(Clone, Debug)]
pub struct LayerSpecBuilder {
    /// Operator of the layer.
    pub op: Op,
    /// Element type of all tensors of the layer.
    pub dtype: Dtype,
    /// N, H, W, C. For `fully_connected` and `matmul`: [1, 1, rows, depth].
    pub input: Shape,
    /// Filter shape; required by every op except `add` and `relu`.
    pub filter: Option<Shape>,
    /// (height, width); default (1, 1).
    pub stride: (u32, u32),
    /// (height, width); default (1, 1).
    pub dilation: (u32, u32),
    /// Padding scheme; default `same`.
    pub padding: Padding,
    /// Output channels per input channel of a depthwise convolution; default 1.
    pub depth_multiplier: u32,
    /// Fused activation; default none.
    pub activation: Activation,
    /// Output shape: required to be consistent for `transpose_conv` (given, as
    /// TFLite's `output_shape` tensor gives it; derived when absent); must
    /// be absent for every other op, whose output is always derived.
    pub output: Option<Shape>,
    /// Second input of `concatenation`.
    pub input2: Option<Shape>,
    /// Axis of `concatenation` (0 … 3).
    pub axis: Option<u32>,
    /// Paddings of `pad`.
    pub paddings: Option<Paddings>,
}

impl LayerSpecBuilder {
    /// Starts a spec of `op` on `input`: no filter, stride and dilation 1, `same`
    /// padding, depth multiplier 1, no activation.
    pub fn new(op: Op, dtype: Dtype, input: Shape) -> Self {
        LayerSpecBuilder {
            op,
            dtype,
            input,
            filter: None,
            stride: (1, 1),
            dilation: (1, 1),
            padding: Padding::Same,
            depth_multiplier: 1,
            activation: Activation::None,
            output: None,
            input2: None,
            axis: None,
            paddings: None,
        }
    }
    /// Sets the output shape (`transpose_conv` only).
    pub fn output(mut self, output: Shape) -> Self {
        self.output = Some(output);
        self
    }
    /// Sets the second input and the axis (`concatenation` only).
    pub fn concat(mut self, input2: Shape, axis: u32) -> Self {
        self.input2 = Some(input2);
        self.axis = Some(axis);
        self
    }
    /// Sets the elements added before and after each dimension (`pad` only).
    pub fn paddings(mut self, before: Shape, after: Shape) -> Self {
        self.paddings = Some(Paddings { before, after });
        self
    }
    /// Sets the filter shape.
    pub fn filter(mut self, filter: Shape) -> Self {
        self.filter = Some(filter);
        self
    }
    /// Sets the stride (height, width).
    pub fn stride(mut self, h: u32, w: u32) -> Self {
        self.stride = (h, w);
        self
    }
    /// Sets the dilation (height, width).
    pub fn dilation(mut self, h: u32, w: u32) -> Self {
        self.dilation = (h, w);
        self
    }
    /// Sets the padding scheme.
    pub fn padding(mut self, padding: Padding) -> Self {
        self.padding = padding;
        self
    }
    /// Sets the depth multiplier.
    pub fn depth_multiplier(mut self, m: u32) -> Self {
        self.depth_multiplier = m;
        self
    }
    /// Sets the fused activation.
    pub fn activation(mut self, a: Activation) -> Self {
        self.activation = a;
        self
    }
    /// Checks the configuration and derives output shape and padding.
    pub fn build(self) -> Result<LayerSpec, SpecError> {
        LayerSpec::new(self)
    }
}

/// Largest dimension, stride, dilation or depth multiplier of a spec: the
/// job mailbox holds them as int32 words.
pub const MAX_DIM: u32 = i32::MAX as u32;

/// Most elements any tensor of a spec may have.
pub const MAX_ELEMENTS: u64 = 1 << 32;

/// TFLite `ComputeOutSize` (in 64 bits: no input within [`MAX_DIM`]
/// overflows).
fn out_size(padding: Padding, input: u32, filter: u32, stride: u32, dilation: u32) -> u32 {
    let (input, stride) = (input as u64, stride as u64);
    let effective = (filter as u64 - 1) * dilation as u64 + 1;
    let out = match padding {
        Padding::Same => input.div_ceil(stride),
        Padding::Valid => (input + stride).saturating_sub(effective) / stride,
    };
    out as u32
}

/// TFLite `ComputePadding` (the before-padding; TFLM kernels ignore the offset).
fn pad_before(stride: u32, dilation: u32, input: u32, filter: u32, output: u32) -> u32 {
    let effective = (filter as i64 - 1) * dilation as i64 + 1;
    let total = (output as i64 - 1) * stride as i64 + effective - input as i64;
    (total.max(0) / 2).min(MAX_DIM as i64) as u32
}

/// Checks that a shape's dimensions and element count are in range.
fn check_size(what: &str, shape: &Shape) -> Result<(), SpecError> {
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
fn check_op_fields(b: &LayerSpecBuilder) -> Result<(), SpecError> {
    let op = b.op;
    let misplaced = |what: &str, owner: &str| {
        SpecError::new(format!("op {op} has no {what} (only {owner} has)"))
    };
    if op != Op::Concatenation && (b.input2.is_some() || b.axis.is_some()) {
        return Err(misplaced("input2 or axis", "concatenation"));
    }
    if op != Op::Pad && b.paddings.is_some() {
        return Err(misplaced("pad_before or pad_after", "pad"));
    }
    if op != Op::TransposeConv && b.output.is_some() {
        return Err(misplaced("given output shape", "transpose_conv"));
    }
    if op == Op::TransposeConv && b.dilation != (1, 1) {
        return Err(SpecError::new(
            "transpose_conv has no dilation (TFLite's TRANSPOSE_CONV has none)",
        ));
    }
    if matches!(op, Op::TransposeConv | Op::Concatenation | Op::Pad)
        && b.activation != Activation::None
    {
        return Err(SpecError::new(format!(
            "op {op} has no fused activation (its TFLM reference kernel applies none)"
        )));
    }
    Ok(())
}

/// The neutral filter of ops without one; an error if one was given.
fn no_filter(b: &LayerSpecBuilder) -> Result<Shape, SpecError> {
    match b.filter {
        Some(_) => Err(SpecError::new(format!("op {} takes no filter", b.op))),
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
        let back = out_size(b.padding, out[k], f[k], [b.stride.0, b.stride.1][k - 1], 1);
        if back != input {
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

impl LayerSpec {
    /// Validates a configuration and derives `output` and `pad`.
    pub fn new(b: LayerSpecBuilder) -> Result<LayerSpec, SpecError> {
        let op = b.op;
        if b.input.contains(&0) {
            return Err(SpecError::new(format!(
                "input shape {} has a zero dimension",
                shape_text(&b.input)
            )));
        }
        let need = |what: &str| SpecError::new(format!("op {op} needs {what}"));
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
        // Fields the op does not have must keep their neutral values: the
        // canonical text leaves them out, so they could not be read back.
        let window_fields_set =
            b.stride != (1, 1) || b.dilation != (1, 1) || b.padding != Padding::Same;
        if !op.has_window() && window_fields_set {
            return Err(SpecError::new(format!(
                "op {op} has no window: stride, dilation and padding do not apply"
            )));
        }
        if op != Op::DepthwiseConv2d && b.depth_multiplier != 1 {
            return Err(SpecError::new(format!(
                "depth_multiplier applies to depthwise_conv2d only, not to {op}"
            )));
        }
        check_op_fields(&b)?;
        check_size("input", &b.input)?;
        if let Some(f) = &b.filter {
            check_size("filter", f)?;
        }
        let [n, h, w, c] = b.input;
        let (filter, output) = match op {
            Op::Conv2d | Op::DepthwiseConv2d | Op::MaxPool | Op::AveragePool => {
                let f = b
                    .filter
                    .ok_or_else(|| need("a filter shape (filter=OxKHxKWxI)"))?;
                if f.contains(&0) {
                    return Err(SpecError::new("filter shape has a zero dimension"));
                }
                let out_c = match op {
                    Op::Conv2d => {
                        if f[3] != c {
                            return Err(SpecError::new(format!(
                                "conv2d filter depth {} does not match input depth {c}",
                                f[3]
                            )));
                        }
                        f[0]
                    }
                    Op::DepthwiseConv2d => {
                        let depth = c as u64 * b.depth_multiplier as u64;
                        if f[0] != 1 || f[3] as u64 != depth {
                            return Err(SpecError::new(format!(
                                "depthwise_conv2d filter must be 1xKHxKWx{depth} (input depth {c} × depth_multiplier {})",
                                b.depth_multiplier
                            )));
                        }
                        f[3]
                    }
                    _ => {
                        if f[0] != 1 || f[3] != 1 {
                            return Err(SpecError::new("pool filter must be 1xKHxKWx1 (or KHxKW)"));
                        }
                        c
                    }
                };
                let oh = out_size(b.padding, h, f[1], b.stride.0, b.dilation.0);
                let ow = out_size(b.padding, w, f[2], b.stride.1, b.dilation.1);
                if oh == 0 || ow == 0 {
                    return Err(SpecError::new(format!(
                        "the {}x{} window does not fit the {h}x{w} input with valid padding",
                        f[1], f[2]
                    )));
                }
                (f, [n, oh, ow, out_c])
            }
            Op::FullyConnected => {
                let f = b
                    .filter
                    .ok_or_else(|| need("a filter shape (filter=UNITSxDEPTH)"))?;
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
                (f, [1, 1, batches as u32, f[2]])
            }
            Op::Matmul => {
                let f = b
                    .filter
                    .ok_or_else(|| need("a filter shape (filter=KxN)"))?;
                if f[0] != 1 || f[1] != 1 || f[2] != c || f[3] == 0 || n != 1 || h != 1 {
                    return Err(SpecError::new(format!(
                        "matmul needs input=MxK and filter=KxN with matching K (input depth {c})"
                    )));
                }
                (f, [1, 1, w, f[3]])
            }
            Op::TransposeConv => {
                let f = b
                    .filter
                    .ok_or_else(|| need("a filter shape (filter=OCxKHxKWxIC)"))?;
                if f.contains(&0) {
                    return Err(SpecError::new("filter shape has a zero dimension"));
                }
                if f[3] != c {
                    return Err(SpecError::new(format!(
                        "transpose_conv filter depth {} does not match input depth {c}",
                        f[3]
                    )));
                }
                (f, transpose_conv_output(&b, &f)?)
            }
            Op::Concatenation => (no_filter(&b)?, concatenation_output(&b)?),
            Op::Pad => {
                let p = b
                    .paddings
                    .ok_or_else(|| need("paddings (pad_before=NxHxWxC,pad_after=NxHxWxC)"))?;
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
                (no_filter(&b)?, out)
            }
            Op::Add | Op::Relu => (no_filter(&b)?, b.input),
        };
        check_size("output", &output)?;
        let pad = match op {
            // TFLite computes a transpose conv's padding as that of the
            // forward conv from the output back to the input
            // (ComputePaddingHeightWidth with the two sizes swapped).
            Op::TransposeConv => (
                pad_before(b.stride.0, 1, output[1], filter[1], h),
                pad_before(b.stride.1, 1, output[2], filter[2], w),
            ),
            _ if op.has_window() => (
                pad_before(b.stride.0, b.dilation.0, h, filter[1], output[1]),
                pad_before(b.stride.1, b.dilation.1, w, filter[2], output[2]),
            ),
            _ => (0, 0),
        };
        Ok(LayerSpec {
            op,
            dtype: b.dtype,
            input: b.input,
            filter,
            output,
            stride: b.stride,
            dilation: b.dilation,
            padding: b.padding,
            pad,
            depth_multiplier: b.depth_multiplier,
            activation: b.activation,
            input2: b.input2,
            axis: b.axis,
            paddings: b.paddings,
        })
    }

    /// Parses `op=depthwise_conv2d,dtype=f32,input=1x112x112x96,filter=1x3x3x96,stride=2,padding=same`.
    ///
    /// Keys: `op` (required), `dtype` (default f32), `input` (required), `filter`,
    /// `stride` (`S` or `SHxSW`), `dilation`, `padding` (`same`|`valid`),
    /// `depth_multiplier`, `activation` (`none`|`relu`|`relu6`); for
    /// `concatenation` `input2` and `axis` (0–3, or −4 to −1); for `pad`
    /// `pad_before` and `pad_after` (`NxHxWxC`, missing outer dimensions 0,
    /// a missing key all 0). Pool filters may be written `KHxKW`. The derived
    /// keys `output` and `pad` are accepted and checked against the derived
    /// values, so a printed spec parses back; for `transpose_conv` `output` is
    /// a parameter (TFLite's `output_shape`), checked for consistency.
    pub fn parse(text: &str) -> Result<LayerSpec, SpecError> {
        let mut op = None;
        let mut dtype = Dtype::F32;
        let mut input = None;
        let mut filter = None;
        // Pool filters may be written KHxKW; only then is [1, 1, KH, KW]
        // re-read as [1, KH, KW, 1] (a printed 1x1xKWx1 must stay as it is).
        let mut filter_2d = false;
        let mut stride = (1, 1);
        let mut dilation = (1, 1);
        let mut padding = Padding::Same;
        let mut depth_multiplier = 1;
        let mut activation = Activation::None;
        let mut claimed_output = None;
        let mut claimed_pad = None;
        let mut explicit_multiplier = None;
        let mut input2 = None;
        let mut axis = None;
        let mut pad_before = None;
        let mut pad_after = None;
        let mut seen: Vec<&str> = Vec::new();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| SpecError::new(format!("`{item}` is not key=value")))?;
            let (key, value) = (key.trim(), value.trim());
            if seen.contains(&key) {
                return Err(SpecError::new(format!(
                    "key `{key}` is given more than once"
                )));
            }
            seen.push(key);
            match key {
                "op" => op = Some(value.parse::<Op>()?),
                "dtype" => dtype = value.parse()?,
                "input" => input = Some(parse_shape(key, value)?),
                "filter" => {
                    filter = Some(parse_shape(key, value)?);
                    filter_2d = value.split('x').count() == 2;
                }
                "output" => claimed_output = Some(parse_shape(key, value)?),
                "stride" => stride = parse_pair(key, value)?,
                "dilation" => dilation = parse_pair(key, value)?,
                "pad" => claimed_pad = Some(parse_pair(key, value)?),
                "padding" => {
                    padding = match value {
                        "same" => Padding::Same,
                        "valid" => Padding::Valid,
                        _ => {
                            return Err(SpecError::new(format!(
                                "padding must be same or valid, not `{value}`"
                            )))
                        }
                    }
                }
                "depth_multiplier" => explicit_multiplier = Some(parse_number(key, value)?),
                "input2" => input2 = Some(parse_shape(key, value)?),
                "axis" => axis = Some(parse_axis(value)?),
                "pad_before" => pad_before = Some(parse_paddings(key, value)?),
                "pad_after" => pad_after = Some(parse_paddings(key, value)?),
                "activation" => {
                    activation = match value {
                        "none" => Activation::None,
                        "relu" => Activation::Relu,
                        "relu6" => Activation::Relu6,
                        _ => {
                            return Err(SpecError::new(format!(
                                "activation must be none, relu or relu6, not `{value}`"
                            )))
                        }
                    }
                }
                _ => {
                    return Err(SpecError::new(format!(
                        "unknown key `{key}` (known: op, dtype, input, input2, axis, filter, stride, dilation, padding, depth_multiplier, activation, pad_before, pad_after, output, pad)"
                    )))
                }
            }
        }
        let op = op.ok_or_else(|| SpecError::new("missing op=..."))?;
        let input = input.ok_or_else(|| SpecError::new("missing input=NxHxWxC"))?;
        // Pools may be given as KHxKW.
        let filter = match (op, filter) {
            (Op::MaxPool | Op::AveragePool, Some([1, 1, kh, kw])) if filter_2d => {
                Some([1, kh, kw, 1])
            }
            (_, f) => f,
        };
        if let Some(m) = explicit_multiplier {
            depth_multiplier = m;
        }
        // As TFLite does, a depthwise filter's last dimension over the input
        // depth is the depth multiplier; an explicit one must agree.
        if let (Op::DepthwiseConv2d, Some(f)) = (op, filter) {
            let c = input[3];
            if c > 0 && f[3] > 0 {
                if f[3] % c != 0 {
                    return Err(SpecError::new(format!(
                        "depthwise_conv2d filter depth {} is not a multiple of the input depth {c}",
                        f[3]
                    )));
                }
                let inferred = f[3] / c;
                match explicit_multiplier {
                    Some(m) if m != inferred => {
                        return Err(SpecError::new(format!(
                            "depth_multiplier={m} disagrees with filter {} on input depth {c} (depth multiplier {inferred})",
                            shape_text(&f)
                        )))
                    }
                    _ => depth_multiplier = inferred,
                }
            }
        }
        let paddings = match (pad_before, pad_after) {
            (None, None) => None,
            (before, after) => Some(Paddings {
                before: before.unwrap_or([0; 4]),
                after: after.unwrap_or([0; 4]),
            }),
        };
        // A transpose conv's output is a parameter (TFLite's output_shape
        // input); every other op's is derived and only checked.
        let given_output = if op == Op::TransposeConv {
            claimed_output.take()
        } else {
            None
        };
        let spec = LayerSpec::new(LayerSpecBuilder {
            op,
            dtype,
            input,
            filter,
            stride,
            dilation,
            padding,
            depth_multiplier,
            activation,
            output: given_output,
            input2,
            axis,
            paddings,
        })?;
        if let Some(out) = claimed_output {
            if out != spec.output {
                return Err(SpecError::new(format!(
                    "output={} but the layer produces {}",
                    shape_text(&out),
                    shape_text(&spec.output)
                )));
            }
        }
        if let Some(pad) = claimed_pad {
            if pad != spec.pad {
                return Err(SpecError::new(format!(
                    "pad={}x{} but TFLite padding gives {}x{}",
                    pad.0, pad.1, spec.pad.0, spec.pad.1
                )));
            }
        }
        Ok(spec)
    }

    /// Bytes of the (first) input tensor.
    pub fn input_bytes(&self) -> u64 {
        elements(&self.input) * self.dtype.size()
    }
    /// Bytes of activation input `k` (0: `input`; 1: the second input of
    /// `add` and `concatenation`); `None` when the op has no such input.
    pub fn input_bytes_of(&self, k: usize) -> Option<u64> {
        match (k, self.op) {
            (0, _) => Some(self.input_bytes()),
            (1, Op::Add) => Some(self.input_bytes()),
            (1, Op::Concatenation) => self.input2.map(|s| elements(&s) * self.dtype.size()),
            _ => None,
        }
    }
    /// Bytes of the output tensor.
    pub fn output_bytes(&self) -> u64 {
        elements(&self.output) * self.dtype.size()
    }

    /// The job-mailbox words (`memtrace_job.h`).
    pub fn job_words(&self, seed: u32) -> [i32; JOB_WORDS] {
        let mut w = [0i32; JOB_WORDS];
        w[JOB_MAGIC] = MEMTRACE_JOB_MAGIC as i32;
        w[JOB_OP] = self.op.job_code();
        w[JOB_DTYPE] = self.dtype.job_code();
        for i in 0..4 {
            w[JOB_INPUT + i] = self.input[i] as i32;
            w[JOB_FILTER + i] = self.filter[i] as i32;
            w[JOB_OUTPUT + i] = self.output[i] as i32;
        }
        w[JOB_STRIDE_H] = self.stride.0 as i32;
        w[JOB_STRIDE_W] = self.stride.1 as i32;
        w[JOB_DILATION_H] = self.dilation.0 as i32;
        w[JOB_DILATION_W] = self.dilation.1 as i32;
        w[JOB_PADDING] = match self.padding {
            Padding::Same => 1,
            Padding::Valid => 2,
        };
        w[JOB_PAD_H] = self.pad.0 as i32;
        w[JOB_PAD_W] = self.pad.1 as i32;
        w[JOB_DEPTH_MULTIPLIER] = self.depth_multiplier as i32;
        w[JOB_ACTIVATION] = self.activation.job_code();
        w[JOB_SEED] = seed as i32;
        w[JOB_AXIS] = self.axis.map_or(0, |a| a as i32);
        let p = self.paddings.unwrap_or(Paddings {
            before: [0; 4],
            after: [0; 4],
        });
        for i in 0..4 {
            w[JOB_INPUT2 + i] = self.input2.map_or(0, |s| s[i] as i32);
            w[JOB_PAD_BEFORE + i] = p.before[i] as i32;
            w[JOB_PAD_AFTER + i] = p.after[i] as i32;
        }
        w
    }
}

c_constants! {
    /// The sizes and magic of `memtrace_job.h`.
    JOB_HEADER: i64 {
        MEMTRACE_JOB_MAGIC = 0x4A4F_4231,
        MEMTRACE_JOB_WORDS = 48,
    }
}

/// Number of int32 words in the job mailbox.
pub const JOB_WORDS: usize = MEMTRACE_JOB_WORDS as usize;

// The last words used (pad_after) fit the mailbox.
const _: () = assert!(JOB_PAD_AFTER + 4 <= JOB_WORDS);

c_constants! {
    /// The word indices of the job mailbox (`enum memtrace_job_word`).
    JOB_LAYOUT: usize {
        JOB_MAGIC = 0,
        JOB_OP = 1,
        JOB_DTYPE = 2,
        JOB_INPUT = 3,
        JOB_FILTER = 7,
        JOB_OUTPUT = 11,
        JOB_STRIDE_H = 15,
        JOB_STRIDE_W = 16,
        JOB_DILATION_H = 17,
        JOB_DILATION_W = 18,
        JOB_PADDING = 19,
        JOB_PAD_H = 20,
        JOB_PAD_W = 21,
        JOB_DEPTH_MULTIPLIER = 22,
        JOB_ACTIVATION = 23,
        JOB_SEED = 24,
        JOB_AXIS = 25,
        JOB_INPUT2 = 26,
        JOB_PAD_BEFORE = 30,
        JOB_PAD_AFTER = 34,
    }
}

c_constants! {
    /// Operator and element-type codes of the job (`enum memtrace_op`,
    /// `enum memtrace_dtype`).
    JOB_CODES: i32 {
        OP_CONV2D = 1,
        OP_DEPTHWISE_CONV2D = 2,
        OP_MAX_POOL = 3,
        OP_AVERAGE_POOL = 4,
        OP_FULLY_CONNECTED = 5,
        OP_ADD = 6,
        OP_RELU = 7,
        OP_MATMUL = 8,
        OP_TRANSPOSE_CONV = 9,
        OP_CONCATENATION = 10,
        OP_PAD = 11,
        DTYPE_F32 = 1,
        DTYPE_INT8 = 2,
    }
}

fn elements(shape: &Shape) -> u64 {
    shape.iter().map(|&d| d as u64).product()
}

/// `1x112x112x96`
pub fn shape_text(shape: &Shape) -> String {
    shape.map(|d| d.to_string()).join("x")
}

impl fmt::Display for LayerSpec {
    /// The canonical spec text; [`LayerSpec::parse`] reads it back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "op={},dtype={},input={}",
            self.op,
            self.dtype.name(),
            shape_text(&self.input)
        )?;
        if let (Some(in2), Some(axis)) = (self.input2, self.axis) {
            write!(f, ",input2={},axis={axis}", shape_text(&in2))?;
        }
        if !matches!(self.op, Op::Add | Op::Relu | Op::Concatenation | Op::Pad) {
            write!(f, ",filter={}", shape_text(&self.filter))?;
        }
        if let Some(p) = &self.paddings {
            write!(
                f,
                ",pad_before={},pad_after={}",
                shape_text(&p.before),
                shape_text(&p.after)
            )?;
        }
        write!(f, ",output={}", shape_text(&self.output))?;
        if self.op.has_window() {
            write!(f, ",stride={}x{}", self.stride.0, self.stride.1)?;
            if self.op != Op::TransposeConv {
                write!(f, ",dilation={}x{}", self.dilation.0, self.dilation.1)?;
            }
            write!(
                f,
                ",padding={},pad={}x{}",
                self.padding.name(),
                self.pad.0,
                self.pad.1
            )?;
        }
        if self.op == Op::DepthwiseConv2d {
            write!(f, ",depth_multiplier={}", self.depth_multiplier)?;
        }
        if self.activation != Activation::None {
            write!(f, ",activation={}", self.activation.name())?;
        }
        Ok(())
    }
}

fn parse_number(key: &str, value: &str) -> Result<u32, SpecError> {
    value.parse::<u32>().map_err(|_| {
        let reason = if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
            format!("is too large (at most {})", u32::MAX)
        } else {
            "is not a non-negative integer".to_owned()
        };
        SpecError::new(format!("{key}: `{value}` {reason}"))
    })
}

fn parse_pair(key: &str, value: &str) -> Result<(u32, u32), SpecError> {
    match value.split_once('x') {
        Some((a, b)) => Ok((parse_number(key, a)?, parse_number(key, b)?)),
        None => {
            let v = parse_number(key, value)?;
            Ok((v, v))
        }
    }
}

/// A concatenation axis: 0 to 3, or −4 to −1 counted from the end (as
/// TFLite's negative axes), normalised to 0 to 3.
fn parse_axis(value: &str) -> Result<u32, SpecError> {
    let bad = || {
        SpecError::new(format!(
            "axis: `{value}` is not an NHWC axis (0 to 3, or -4 to -1)"
        ))
    };
    let a: i64 = value.parse().map_err(|_| bad())?;
    match a {
        0..=3 => Ok(a as u32),
        -4..=-1 => Ok((a + 4) as u32),
        _ => Err(bad()),
    }
}

/// Per-dimension paddings `NxHxWxC`; fewer dimensions are the innermost
/// ones, the missing outer ones 0 (TFLite pads a lower-rank paddings tensor
/// the same way).
fn parse_paddings(key: &str, value: &str) -> Result<Shape, SpecError> {
    parse_dims(key, value, 0)
}

/// `1x112x112x96`, `112x96` (left-padded with 1s to 4-D).
fn parse_shape(key: &str, value: &str) -> Result<Shape, SpecError> {
    parse_dims(key, value, 1)
}

/// One to four `x`-separated numbers, the innermost ones of a 4-D value
/// whose missing outer dimensions are `fill`.
fn parse_dims(key: &str, value: &str, fill: u32) -> Result<Shape, SpecError> {
    let dims = value
        .split('x')
        .map(|d| parse_number(key, d))
        .collect::<Result<Vec<_>, _>>()?;
    if dims.is_empty() || dims.len() > 4 {
        return Err(SpecError::new(format!(
            "{key}: `{value}` must have 1 to 4 dimensions"
        )));
    }
    let mut shape = [fill; 4];
    shape[4 - dims.len()..].copy_from_slice(&dims);
    Ok(shape)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_one_layer_has_the_paper_output_shape() {
        let s = LayerSpec::parse(
            "op=depthwise_conv2d,dtype=f32,input=1x112x112x96,filter=1x3x3x96,stride=2,padding=same",
        )
        .unwrap();
        assert_eq!(s.output, [1, 56, 56, 96]);
        // (56-1)*2 + 3 - 112 = 1 -> before-padding 0
        assert_eq!(s.pad, (0, 0));
        assert_eq!(s.output_bytes(), 56 * 56 * 96 * 4);
    }

    #[test]
    fn canonical_text_parses_back() {
        let s = LayerSpec::parse(
            "op=conv2d,dtype=int8,input=1x9x7x3,filter=5x3x3x3,stride=2x1,padding=valid,activation=relu6",
        )
        .unwrap();
        assert_eq!(LayerSpec::parse(&s.to_string()).unwrap(), s);
        assert_eq!(s.output, [1, 4, 5, 5]);
    }

    #[test]
    fn same_padding_of_stride_one_3x3_is_one() {
        let s = LayerSpec::parse("op=max_pool,input=1x8x8x4,filter=3x3").unwrap();
        assert_eq!(s.pad, (1, 1));
        assert_eq!(s.output, [1, 8, 8, 4]);
    }

    #[test]
    fn printed_pool_filters_with_one_row_parse_back() {
        let s = LayerSpec::parse("op=max_pool,input=1x10x7x6,filter=1x3,padding=same").unwrap();
        assert_eq!(s.filter, [1, 1, 3, 1]);
        assert_eq!(s.to_string().matches("filter=1x1x3x1").count(), 1);
        assert_eq!(LayerSpec::parse(&s.to_string()).unwrap(), s);
    }

    #[test]
    fn depth_multiplier_is_inferred_from_the_depthwise_filter() {
        let s = LayerSpec::parse("op=depthwise_conv2d,input=1x5x5x2,filter=1x3x3x4").unwrap();
        assert_eq!(s.depth_multiplier, 2);
        assert_eq!(s.output, [1, 5, 5, 4]);
        // Independently: output channels = input channels × multiplier.
        assert_eq!(s.output[3], s.input[3] * s.depth_multiplier);
        for m in 1..=4 {
            let text = format!("op=depthwise_conv2d,input=1x6x6x3,filter=1x3x3x{}", 3 * m);
            let s = LayerSpec::parse(&text).unwrap();
            assert_eq!(s.depth_multiplier, m, "{text}");
            // An explicit agreeing value gives the same spec, and the
            // canonical text (which names it) parses back to it.
            let explicit = LayerSpec::parse(&format!("{text},depth_multiplier={m}")).unwrap();
            assert_eq!(explicit, s);
            assert_eq!(LayerSpec::parse(&s.to_string()).unwrap(), s);
        }
        let e = |t: &str| LayerSpec::parse(t).unwrap_err().to_string();
        let d = e("op=depthwise_conv2d,input=1x5x5x2,filter=1x3x3x4,depth_multiplier=1");
        assert!(
            d.contains("depth_multiplier=1 disagrees") && d.contains("2"),
            "{d}"
        );
        let d = e("op=depthwise_conv2d,input=1x5x5x2,filter=1x3x3x4,depth_multiplier=3");
        assert!(d.contains("disagrees"), "{d}");
        let d = e("op=depthwise_conv2d,input=1x5x5x2,filter=1x3x3x3");
        assert!(d.contains("not a multiple of the input depth 2"), "{d}");
        // Other ops are unaffected: depth_multiplier stays as given.
        let c = LayerSpec::parse("op=conv2d,input=1x5x5x2,filter=4x3x3x2").unwrap();
        assert_eq!(c.depth_multiplier, 1);
    }

    #[test]
    fn sizes_that_overflow_are_errors_not_wrapped() {
        let e = |t: &str| LayerSpec::parse(t).unwrap_err().to_string();
        let big = u32::MAX;
        assert!(e(&format!("op=relu,input=1x{big}x2x1")).contains("above"));
        assert!(e("op=relu,input=65536x65536x65536x2").contains("elements"));
        assert!(e("op=fully_connected,input=2x65536x16384x1,filter=3x1").contains("rows"));
        assert!(e(&format!(
            "op=max_pool,input=1x8x8x1,filter=2x2,stride={big}"
        ))
        .contains("at most"));
        // Depthwise depth C·M past 2^32 does not wrap to a small match.
        let m = 1u64 << 31;
        let t = format!("op=depthwise_conv2d,input=1x4x4x2,filter=1x1x1x4,depth_multiplier={m}");
        assert!(e(&t).contains("disagrees"), "{}", e(&t));
        // Large but representable windows: 64-bit arithmetic, exact results.
        let s = LayerSpec::parse(&format!(
            "op=max_pool,input=1x{0}x1x1,filter=1x1,stride={0},padding=valid",
            MAX_DIM
        ))
        .unwrap();
        assert_eq!(s.output, [1, 1, 1, 1]);
    }

    #[test]
    fn keys_the_op_does_not_have_are_errors() {
        // Found by the fuzz campaign: these parsed, but their canonical text
        // (which leaves the keys out) read back as a different spec.
        let e = |t: &str| LayerSpec::parse(t).unwrap_err().to_string();
        for text in [
            "op=add,stride= 7 ,input=1x19x19x8,output=1x19x19x8",
            "op=relu,input=1x4x4x2,padding=valid",
            "op=fully_connected,input=1x1x1x56,filter=40x56,stride=2",
            "op=matmul,input=8x4,filter=4x16,dilation=2",
        ] {
            assert!(e(text).contains("has no window"), "{text}: {}", e(text));
        }
        for text in [
            "op=conv2d,input=1x11x9x2,filter=3x2x2x2,depth_multiplier=3",
            "op=matmul,input=8x4,filter=4x16,depth_multiplier=2147483647",
            "op=max_pool,input=1x12x18x5,filter=3x3,depth_multiplier=2",
        ] {
            assert!(
                e(text).contains("depthwise_conv2d only"),
                "{text}: {}",
                e(text)
            );
        }
        // The neutral values may still be written out.
        let s = LayerSpec::parse("op=add,input=1x2x2x1,stride=1,depth_multiplier=1").unwrap();
        assert_eq!(LayerSpec::parse(&s.to_string()).unwrap(), s);
    }

    #[test]
    fn a_key_given_twice_is_an_error() {
        let e = |t: &str| LayerSpec::parse(t).unwrap_err().to_string();
        for (text, key) in [
            ("op=relu,input=1x2x2x1,stride=1,stride=2", "stride"),
            ("op=relu,input=1x2x2x1,input=1x2x2x1", "input"),
            ("op=relu,op=relu,input=4", "op"),
            ("op=max_pool,input=1x4x4x1,filter=2x2,padding=same,padding=valid", "padding"),
            (
                "op=depthwise_conv2d,input=1x5x5x2,filter=1x3x3x4,depth_multiplier=2,depth_multiplier=2",
                "depth_multiplier",
            ),
        ] {
            let m = e(text);
            assert!(m.contains(&format!("key `{key}` is given more than once")), "{text}: {m}");
        }
        // Each key once is fine, in any order.
        LayerSpec::parse("stride=2,input=1x4x4x1,op=max_pool,filter=2x2").unwrap();
    }

    #[test]
    fn the_new_ops_parse_print_and_derive_their_output() {
        let p = |t: &str| LayerSpec::parse(t).unwrap();
        // Transpose conv: TensorFlow's default output (in·s for same,
        // in·s + max(k − s, 0) for valid) and TFLite's padding from the
        // output back to the input.
        let t = p("op=transpose_conv,dtype=int8,input=1x4x5x3,filter=2x3x3x3,stride=2");
        assert_eq!(t.output, [1, 8, 10, 2]);
        assert_eq!(t.pad, (0, 0)); // ((8/2 − 1)·2 + 3 − 8) / 2 = 0
        let v = p("op=transpose_conv,input=1x4x5x3,filter=2x3x3x3,stride=2,padding=valid");
        assert_eq!(v.output, [1, 9, 11, 2]);
        let given = p(
            "op=transpose_conv,input=1x4x4x3,filter=2x4x4x3,stride=2,padding=same,output=1x7x8x2",
        );
        assert_eq!(given.output, [1, 7, 8, 2]);
        assert_eq!(given.pad, (1, 1)); // ((4 − 1)·2 + 4 − 7) / 2, ((4 − 1)·2 + 4 − 8) / 2
                                       // Concatenation: the axis extents add up; negative axes count from C.
        let c = p("op=concatenation,input=1x4x5x3,input2=1x4x5x2,axis=-1");
        assert_eq!((c.output, c.axis), ([1, 4, 5, 5], Some(3)));
        assert_eq!(c.input_bytes_of(1), Some(4 * 5 * 2 * 4));
        // Pad: missing outer dimensions are 0, a missing key all 0.
        let d = p("op=pad,dtype=int8,input=1x4x5x3,pad_before=1x2x0,pad_after=0x0x1x1");
        assert_eq!(d.paddings.unwrap().before, [0, 1, 2, 0]);
        assert_eq!(d.output, [1, 5, 8, 4]);
        assert_eq!(p("op=pad,input=1x2x2x1,pad_after=1").output, [1, 2, 2, 2]);
        for s in [t, v, given, c, d] {
            assert_eq!(LayerSpec::parse(&s.to_string()).unwrap(), s, "{s}");
        }
    }

    #[test]
    fn the_new_ops_job_words_carry_every_field() {
        let c = LayerSpec::parse("op=concatenation,input=2x4x5x3,input2=1x4x5x3,axis=0").unwrap();
        let w = c.job_words(9);
        assert_eq!(w[JOB_OP], 10);
        assert_eq!(w[JOB_AXIS], 0);
        assert_eq!(&w[JOB_INPUT2..JOB_INPUT2 + 4], &[1, 4, 5, 3]);
        assert_eq!(&w[JOB_OUTPUT..JOB_OUTPUT + 4], &[3, 4, 5, 3]);
        let p =
            LayerSpec::parse("op=pad,input=1x4x5x3,pad_before=0x1x2x0,pad_after=0x3x4x5").unwrap();
        let w = p.job_words(9);
        assert_eq!((w[JOB_OP], w[JOB_SEED]), (11, 9));
        assert_eq!(&w[JOB_PAD_BEFORE..JOB_PAD_BEFORE + 4], &[0, 1, 2, 0]);
        assert_eq!(&w[JOB_PAD_AFTER..JOB_PAD_AFTER + 4], &[0, 3, 4, 5]);
    }

    #[test]
    fn bad_new_op_specs_say_what_is_wrong() {
        let e = |t: &str| LayerSpec::parse(t).unwrap_err().to_string();
        for (text, want) in [
            (
                "op=concatenation,input=1x2x2x1,input2=1x3x2x1,axis=3",
                "does not match input 1x2x2x1 outside axis 3",
            ),
            (
                "op=concatenation,input=1x2x2x1,input2=1x2x2x1,axis=4",
                "not an NHWC axis",
            ),
            (
                "op=concatenation,input=1x2x2x1,axis=3",
                "needs input2=NxHxWxC and axis=A",
            ),
            (
                "op=concatenation,input=1x2x2x1,input2=1x2x2x0,axis=3",
                "zero dimension",
            ),
            (
                "op=concatenation,input=1x2x2x1,input2=1x2x2x1,axis=2,activation=relu",
                "no fused activation",
            ),
            (
                "op=pad,input=1x2x2x1,filter=1x1x1x1,pad_before=1",
                "takes no filter",
            ),
            ("op=pad,input=1x2x2x1", "needs paddings"),
            (
                "op=pad,input=1x2x2x1,pad_before=1x-1",
                "not a non-negative integer",
            ),
            (
                "op=pad,input=1x2x2x1,pad_before=1x1x1x1x1",
                "1 to 4 dimensions",
            ),
            (
                "op=pad,input=1x2x2x1,input2=1x2x2x1",
                "op pad has no input2 or axis",
            ),
            (
                "op=add,input=1x2x2x1,pad_after=1",
                "op add has no pad_before or pad_after",
            ),
            (
                "op=transpose_conv,input=1x4x4x2,filter=3x3x3x2,dilation=2",
                "has no dilation",
            ),
            (
                "op=transpose_conv,input=1x4x4x2,filter=3x3x3x3,stride=2",
                "does not match input depth 2",
            ),
            (
                "op=transpose_conv,input=1x4x4x2,stride=2",
                "needs a filter shape",
            ),
            (
                "op=transpose_conv,input=1x4x4x2,filter=3x3x3x2,stride=2,output=1x9x8x3",
                "maps output height 9 to 5, not to the input height 4",
            ),
            (
                "op=transpose_conv,input=1x4x4x2,filter=3x3x3x2,stride=2,output=1x8x8x4",
                "the filter's 3 output channels",
            ),
        ] {
            let m = e(text);
            assert!(m.contains(want), "{text}: {m}");
        }
        // Every op but transpose_conv derives its output: a wrong one is an
        // error, the right one is accepted.
        assert!(e("op=pad,input=1x2x2x1,pad_after=1,output=1x2x2x3")
            .contains("but the layer produces 1x2x2x2"));
        LayerSpec::parse("op=pad,input=1x2x2x1,pad_after=1,output=1x2x2x2").unwrap();
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        let e = |t: &str| LayerSpec::parse(t).unwrap_err().to_string();
        assert!(e("op=conv3d,input=1x2x2x1").contains("unknown op `conv3d`"));
        assert!(e("op=relu").contains("missing input"));
        assert!(e("op=conv2d,input=1x4x4x3,filter=8x3x3x2").contains("does not match"));
        assert!(e("op=relu,input=1x2x2x1,stride=0").contains("at least 1"));
        assert!(e("op=relu,input=1xAx2").contains("not a non-negative integer"));
        assert!(e("op=relu,input=4,colour=red").contains("unknown key"));
        assert!(e("op=conv2d,input=1x2x2x1,filter=1x5x5x1,padding=valid").contains("does not fit"));
    }
}
