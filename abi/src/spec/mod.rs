//! Layer specifications: what one kernel invocation computes, independent of
//! where its buffers live.
//!
//! The same `key=value,...` text is used by `memtrace run --job SPEC`, by the
//! guest's layer-begin `params` string, and by `memtrace validate` configs, so a
//! traced layer can always be re-described to the algorithmic and analytic O_s
//! methods. Output shape and padding follow TFLite's rules
//! ([`crate::geometry`]).
//!
//! * this module: [`LayerSpec`], its builder and the checks every op shares;
//! * `rules`: each op's own fields, filter and output shape;
//! * `text`: the canonical text, parsed and printed;
//! * `job`: the job mailbox words of `memtrace_job.h`.

mod job;
mod rules;
mod text;

use serde::{Deserialize, Serialize};

pub use crate::activation::Activation;
pub use crate::dtype::{Dtype, JOB_DTYPE_CODES};
pub use crate::geometry::{shape_text, Padding, Shape};
pub use crate::op::{OpKind, JOB_OP_CODES};
pub use job::*;

use crate::geometry::{elements, pad_before};
use crate::UnknownName;

/// One layer configuration. Construct it with [`LayerSpec::parse`] or
/// [`LayerSpec::new`]; both compute `output` and `pad` and check consistency.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LayerSpec {
    /// Operator of the layer.
    pub op: OpKind,
    /// Element type of all tensors of the layer (written by its spec name,
    /// `f32` or `int8`).
    #[serde(with = "crate::dtype::spec_serde")]
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
    pub(crate) fn new(message: impl Into<String>) -> Self {
        SpecError {
            message: message.into(),
        }
    }
}

/// Fields of a spec before derived values are computed.
#[derive(Clone, Debug)]
pub struct LayerSpecBuilder {
    /// Operator of the layer.
    pub op: OpKind,
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
    pub fn new(op: OpKind, dtype: Dtype, input: Shape) -> Self {
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

impl From<UnknownName> for SpecError {
    fn from(e: UnknownName) -> Self {
        SpecError::new(e.to_string())
    }
}

/// Largest dimension, stride, dilation or depth multiplier of a spec: the
/// job mailbox holds them as int32 words.
pub const MAX_DIM: u32 = i32::MAX as u32;

/// Most elements any tensor of a spec may have.
pub const MAX_ELEMENTS: u64 = 1 << 32;

impl LayerSpec {
    /// Validates a configuration and derives `output` and `pad`.
    pub fn new(b: LayerSpecBuilder) -> Result<LayerSpec, SpecError> {
        rules::check_common_fields(&b)?;
        rules::check_op_fields(&b)?;
        rules::check_size("input", &b.input)?;
        if let Some(f) = &b.filter {
            rules::check_size("filter", f)?;
        }
        let (filter, output) = rules::filter_and_output(&b)?;
        rules::check_size("output", &output)?;
        let pad = window_padding(&b, &filter, &output);
        Ok(LayerSpec {
            op: b.op,
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

    /// Bytes of the (first) input tensor.
    pub fn input_bytes(&self) -> u64 {
        elements(&self.input) * self.dtype.size()
    }
    /// Bytes of activation input `k` (0: `input`; 1: the second input of
    /// `add` and `concatenation`); `None` when the op has no such input.
    pub fn input_bytes_of(&self, k: usize) -> Option<u64> {
        match (k, self.op) {
            (0, _) => Some(self.input_bytes()),
            (1, OpKind::Add) => Some(self.input_bytes()),
            (1, OpKind::Concatenation) => self.input2.map(|s| elements(&s) * self.dtype.size()),
            _ => None,
        }
    }
    /// Bytes of the output tensor.
    pub fn output_bytes(&self) -> u64 {
        elements(&self.output) * self.dtype.size()
    }
}

/// The before-padding (height, width) of a windowed op; (0, 0) for the rest.
fn window_padding(b: &LayerSpecBuilder, filter: &Shape, output: &Shape) -> (u32, u32) {
    let (input, (sh, sw), (dh, dw)) = (&b.input, b.stride, b.dilation);
    match b.op {
        // TFLite computes a transpose conv's padding as that of the
        // forward conv from the output back to the input
        // (ComputePaddingHeightWidth with the two sizes swapped).
        OpKind::TransposeConv => (
            pad_before(sh, 1, output[1], filter[1], input[1]),
            pad_before(sw, 1, output[2], filter[2], input[2]),
        ),
        op if op.has_window() => (
            pad_before(sh, dh, input[1], filter[1], output[1]),
            pad_before(sw, dw, input[2], filter[2], output[2]),
        ),
        _ => (0, 0),
    }
}

#[cfg(test)]
mod tests;
