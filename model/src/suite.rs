//! The kernel-suite layer of a model operator: the [`LayerSpec`] that
//! describes it to the O_s methods, one builder per kind of operator the
//! suite runs.

use memtrace_abi::spec::{LayerSpec, LayerSpecBuilder};

use crate::{shape4, Activation, Dtype, Model, Op, OpKind, Tensor};

impl Model {
    /// The layer specification of operator `op` for the O_s methods, if the
    /// kernel suite runs this kind of operator in this configuration.
    pub fn layer_spec(&self, op: usize) -> Option<LayerSpec> {
        let layer = Layer::of(self, op)?;
        let builder = match layer.op.kind {
            OpKind::Conv2d | OpKind::DepthwiseConv2d => layer.conv()?,
            OpKind::MaxPool | OpKind::AveragePool => layer.pool()?,
            OpKind::FullyConnected => layer.fully_connected()?,
            OpKind::Add => layer.add()?,
            OpKind::Relu => layer.relu()?,
            OpKind::Concatenation => layer.concatenation()?,
            OpKind::Pad => layer.pad()?,
            OpKind::TransposeConv => layer.transpose_conv()?,
            _ => return None,
        };
        let built = builder.build().ok()?;
        // The spec must describe this operator's real output.
        if built.output_bytes() != layer.output.bytes || built.input_bytes() != layer.input.bytes {
            return None;
        }
        Some(built)
    }
}

/// An operator the suite may run: its data input and output of one suite
/// element type, and a fused activation the suite has.
struct Layer<'m> {
    model: &'m Model,
    op: &'m Op,
    input: &'m Tensor,
    output: &'m Tensor,
    dtype: Dtype,
}

impl<'m> Layer<'m> {
    fn of(model: &'m Model, op: usize) -> Option<Self> {
        let o = model.ops.get(op)?;
        let input = model.tensors.get(o.data_input()?)?;
        let output = model.tensors.get(*o.outputs.first()?)?;
        let dtype = input.dtype.suite_equivalent()?;
        if output.dtype.suite_equivalent()? != dtype || input.dtype.size() != output.dtype.size() {
            return None;
        }
        // The suite fuses none, relu and relu6 only.
        o.options.activation.job_code()?;
        Some(Layer {
            model,
            op: o,
            input,
            output,
            dtype,
        })
    }

    /// Input operand `k` of the operator.
    fn operand(&self, k: usize) -> Option<&'m Tensor> {
        self.model.tensors.get(*self.op.inputs.get(k)?)
    }

    /// A builder of the operator's kind on the 4-D input.
    fn builder(&self) -> Option<LayerSpecBuilder> {
        Some(LayerSpecBuilder::new(
            self.op.kind,
            self.dtype,
            shape4(&self.input.shape)?,
        ))
    }

    /// CONV_2D and DEPTHWISE_CONV_2D (the depth multiplier from the filter).
    fn conv(&self) -> Option<LayerSpecBuilder> {
        let o = &self.op.options;
        let f = shape4(&self.operand(1)?.shape)?;
        let in4 = shape4(&self.input.shape)?;
        let b = self
            .builder()?
            .filter(f)
            .stride(o.stride.0, o.stride.1)
            .dilation(o.dilation.0, o.dilation.1)
            .padding(o.padding)
            .activation(o.activation);
        if self.op.kind != OpKind::DepthwiseConv2d {
            return Some(b);
        }
        if in4[3] == 0 || f[3] % in4[3] != 0 {
            return None;
        }
        Some(b.depth_multiplier(f[3] / in4[3]))
    }

    /// MAX_POOL_2D and AVERAGE_POOL_2D.
    fn pool(&self) -> Option<LayerSpecBuilder> {
        let o = &self.op.options;
        let (fh, fw) = o.filter;
        Some(
            self.builder()?
                .filter([1, fh, fw, 1])
                .stride(o.stride.0, o.stride.1)
                .padding(o.padding)
                .activation(o.activation),
        )
    }

    /// FULLY_CONNECTED: the input as rows of the weights' depth.
    fn fully_connected(&self) -> Option<LayerSpecBuilder> {
        let weights = self.operand(1)?;
        let [units, depth] = weights.shape[..] else {
            return None;
        };
        if depth == 0 || !self.input.elements().is_multiple_of(depth as u64) {
            return None;
        }
        let rows = u32::try_from(self.input.elements() / depth as u64).ok()?;
        Some(
            LayerSpecBuilder::new(OpKind::FullyConnected, self.dtype, [1, 1, rows, depth])
                .filter([1, 1, units, depth])
                .activation(self.op.options.activation),
        )
    }

    /// ADD of two inputs of one shape and type (no broadcasting).
    fn add(&self) -> Option<LayerSpecBuilder> {
        let other = self.operand(1)?;
        let (input, output) = (self.input, self.output);
        if self.op.inputs.len() != 2
            || other.shape != input.shape
            || output.shape != input.shape
            || other.dtype != input.dtype
        {
            return None;
        }
        Some(self.builder()?.activation(self.op.options.activation))
    }

    /// RELU.
    fn relu(&self) -> Option<LayerSpecBuilder> {
        if self.output.shape != self.input.shape {
            return None;
        }
        self.builder()
    }

    /// TRANSPOSE_CONV. Operands: output shape, weights `[OC, KH, KW, IC]`,
    /// input, optional bias; the output is given, as TFLite gives it.
    fn transpose_conv(&self) -> Option<LayerSpecBuilder> {
        let o = &self.op.options;
        let weights = self.operand(1)?;
        Some(
            self.builder()?
                .filter(shape4(&weights.shape)?)
                .output(shape4(&self.output.shape)?)
                .stride(o.stride.0, o.stride.1)
                .padding(o.padding)
                .activation(o.activation),
        )
    }

    /// A two-input CONCATENATION: both inputs of the output's type, rank at
    /// most 4, the axis (negative counts from the end) moved to NHWC by the
    /// left-padding to 4-D. Inputs of other counts have no suite layer.
    fn concatenation(&self) -> Option<LayerSpecBuilder> {
        let o = self.op;
        let [a, b] = o.inputs[..] else {
            return None;
        };
        // TFLM's reference CONCATENATION applies no fused activation.
        if o.options.activation != Activation::None {
            return None;
        }
        let (x, y) = (self.model.tensors.get(a)?, self.model.tensors.get(b)?);
        if x.dtype != y.dtype || x.shape.len() != y.shape.len() {
            return None;
        }
        let rank = x.shape.len() as i32;
        let axis = o.options.axis.unwrap_or(0);
        let axis = if axis < 0 { axis + rank } else { axis };
        if !(0..rank).contains(&axis) {
            return None;
        }
        let axis4 = (axis + 4 - rank) as u32;
        Some(
            LayerSpecBuilder::new(OpKind::Concatenation, self.dtype, shape4(&x.shape)?)
                .concat(shape4(&y.shape)?, axis4),
        )
    }

    /// A PAD: the constant `[rank, 2]` int32 paddings tensor read as
    /// before/after amounts, left-padded with zeros to NHWC as TFLM does. A
    /// PAD whose paddings are not constant (or are negative) has no suite
    /// layer.
    fn pad(&self) -> Option<LayerSpecBuilder> {
        let input = self.operand(0)?;
        let paddings = self.operand(1)?;
        let rank = input.shape.len();
        let data = paddings.data.as_ref()?;
        if paddings.dtype != Dtype::Int32 || rank > 4 || data.len() != rank * 2 * 4 {
            return None;
        }
        let word = |i: usize| {
            let v = i32::from_le_bytes(data[i * 4..i * 4 + 4].try_into().ok()?);
            u32::try_from(v).ok()
        };
        let (mut before, mut after) = ([0u32; 4], [0u32; 4]);
        for d in 0..rank {
            before[4 - rank + d] = word(2 * d)?;
            after[4 - rank + d] = word(2 * d + 1)?;
        }
        Some(
            LayerSpecBuilder::new(OpKind::Pad, self.dtype, shape4(&input.shape)?)
                .paddings(before, after),
        )
    }
}
