//! Each operator's shape rule, as TFLite states it: the output shape an
//! operator's inputs and options imply, checked against the one the model
//! gives. One function per kind of operator; TinySeg's operators follow
//! `spill_ops`'s rules.

use memtrace_abi::out_size;

use crate::{concat_dims, Dtype, Model, ModelError, Op, OpKind, Tensor};

impl Model {
    /// Checks that every operator's tensor shapes agree with each other and
    /// with its options, by TFLite's shape rules: CONV_2D and
    /// DEPTHWISE_CONV_2D output N×H×W×C from input, filter, stride, dilation
    /// and padding (and the bias length); pools likewise from the window;
    /// FULLY_CONNECTED rows and units; ADD/SUB/MUL NumPy broadcasting;
    /// element-wise ops, SOFTMAX, QUANTIZE/DEQUANTIZE same shape; RESHAPE and
    /// SQUEEZE the same element count; CONCATENATION along its axis; PAD no
    /// smaller than its input; TRANSPOSE_CONV as `check_transpose_conv` says.
    /// The error names the operator index, its TFLite name and the offending
    /// tensor.
    pub fn check_shapes(&self) -> Result<(), ModelError> {
        for (i, op) in self.ops.iter().enumerate() {
            check_op_shapes(self, op).map_err(|reason| {
                ModelError::Invalid(format!(
                    "operator {i} ({}): {reason}",
                    op.kind.tflite_name()
                ))
            })?;
        }
        Ok(())
    }
}

/// The shape rule of `op`'s kind.
pub(crate) fn check_op_shapes(model: &Model, op: &Op) -> Result<(), String> {
    let o = Operands::of(model, op)?;
    match op.kind {
        OpKind::Conv2d | OpKind::DepthwiseConv2d => check_conv(&o),
        OpKind::MaxPool | OpKind::AveragePool => check_pool(&o),
        OpKind::FullyConnected => check_fully_connected(&o),
        OpKind::Add | OpKind::Sub | OpKind::Mul => check_broadcast(&o),
        OpKind::Relu
        | OpKind::Relu6
        | OpKind::ReluN1To1
        | OpKind::Logistic
        | OpKind::Tanh
        | OpKind::Softmax
        | OpKind::Quantize
        | OpKind::Dequantize => o.expect(&dims(o.y), &dims(o.x), format!("input {}", show(o.x))),
        OpKind::Reshape | OpKind::Squeeze => check_same_elements(&o),
        OpKind::Spill
        | OpKind::SpillKeep
        | OpKind::Fetch
        | OpKind::FetchConcat
        | OpKind::FetchConv2d => model.check_tinyseg_op(op),
        // TFLM prepares it and says what it rejects.
        OpKind::Other => Ok(()),
        OpKind::Matmul => Err("is a kernel-suite layer, not a model operator".into()),
        OpKind::Concatenation => check_concatenation(&o),
        OpKind::Pad => check_pad(&o),
        OpKind::TransposeConv => check_transpose_conv(&o),
        OpKind::Mean => check_mean(&o),
    }
}

/// `` `name` [dims] `` of a tensor, as shape errors show it.
fn show(t: &Tensor) -> String {
    format!("`{}` {:?}", t.name, t.shape)
}

/// A tensor's dimensions, widened.
fn dims(t: &Tensor) -> Vec<u64> {
    t.shape.iter().map(|&d| d as u64).collect()
}

/// The four dimensions of a 4-D tensor.
fn rank4(t: &Tensor, what: &str) -> Result<[u64; 4], String> {
    match t.shape[..] {
        [a, b, c, d] => Ok([a as u64, b as u64, c as u64, d as u64]),
        _ => Err(format!("{what} {} is not 4-D", show(t))),
    }
}

/// NumPy broadcasting of two shapes (aligned at the last dimension).
pub(crate) fn broadcast(a: &[u64], b: &[u64]) -> Option<Vec<u64>> {
    let rank = a.len().max(b.len());
    let dim = |s: &[u64], k: usize| (k + s.len()).checked_sub(rank).map_or(1, |j| s[j]);
    (0..rank)
        .map(|k| match (dim(a, k), dim(b, k)) {
            (x, y) if x == y => Some(x),
            (1, y) => Some(y),
            (x, 1) => Some(x),
            _ => None,
        })
        .collect()
}

/// An operator's data input and output, and its other operands on demand.
struct Operands<'m> {
    model: &'m Model,
    op: &'m Op,
    /// The data input ([`Op::data_input`]).
    x: &'m Tensor,
    /// The (first) output.
    y: &'m Tensor,
}

impl<'m> Operands<'m> {
    /// The data input and output of `op`, or what is missing.
    fn of(model: &'m Model, op: &'m Op) -> Result<Self, String> {
        let x = tensor(model, &op.inputs, op.data_position(), "input")?;
        let y = tensor(model, &op.outputs, 0, "output")?;
        Ok(Operands { model, op, x, y })
    }

    /// Input operand `k`, called `what` in errors.
    fn input(&self, k: usize, what: &str) -> Result<&'m Tensor, String> {
        tensor(self.model, &self.op.inputs, k, what)
    }

    /// Input operand `k`, or "has no `what`" whether it is absent or names
    /// no tensor (TRANSPOSE_CONV's operands).
    fn operand(&self, k: usize, what: &str) -> Result<&'m Tensor, String> {
        self.op
            .inputs
            .get(k)
            .and_then(|&t| self.model.tensors.get(t))
            .ok_or_else(|| format!("has no {what} (operand {k})"))
    }

    /// The output has dimensions `want`, or an error saying why it should.
    fn expect(&self, got: &[u64], want: &[u64], why: String) -> Result<(), String> {
        if got == want {
            Ok(())
        } else {
            Err(format!(
                "output {} should be {want:?} ({why})",
                show(self.y)
            ))
        }
    }

    /// The output extent of the operator's window over `size`.
    fn window(&self, size: u64, filter: u64, stride: u64, dilation: u64) -> Result<u64, String> {
        let padding = self.op.options.padding;
        out_size(padding, size, filter, stride, dilation).ok_or_else(|| {
            format!(
                "a window of {filter} (dilation {dilation}) does not fit an input extent of {size} with {padding:?} padding"
            )
        })
    }

    /// The stride (height, width), widened.
    fn stride(&self) -> (u64, u64) {
        let (h, w) = self.op.options.stride;
        (h as u64, w as u64)
    }
}

/// Operand `k` of `list` (an operator's inputs or outputs).
fn tensor<'m>(
    model: &'m Model,
    list: &[usize],
    k: usize,
    what: &str,
) -> Result<&'m Tensor, String> {
    let n = model.tensors.len();
    let &t = list
        .get(k)
        .ok_or_else(|| format!("has no {what} (operand {k})"))?;
    model
        .tensors
        .get(t)
        .ok_or_else(|| format!("{what} is tensor {t}, but there are {n} tensors"))
}

/// CONV_2D and DEPTHWISE_CONV_2D.
fn check_conv(o: &Operands<'_>) -> Result<(), String> {
    let (x, op) = (o.x, o.op);
    let [nb, h, wd, c] = rank4(x, "input")?;
    let w = o.input(1, "filter")?;
    let f4 = rank4(w, "filter")?;
    let (sh, sw) = o.stride();
    let (dh, dw) = (op.options.dilation.0 as u64, op.options.dilation.1 as u64);
    let oh = o.window(h, f4[1], sh, dh)?;
    let ow = o.window(wd, f4[2], sw, dw)?;
    let oc = conv_output_channels(o, w, f4, c)?;
    check_bias(o, 2, oc)?;
    let padding = op.options.padding;
    o.expect(
        &dims(o.y),
        &[nb, oh, ow, oc],
        format!(
            "input {}, filter {}, stride {sh}x{sw}, dilation {dh}x{dw}, {padding:?} padding",
            show(x),
            show(w)
        ),
    )
}

/// Output channels of a convolution, after checking its filter's depth
/// against the input's.
fn conv_output_channels(o: &Operands<'_>, w: &Tensor, f4: [u64; 4], c: u64) -> Result<u64, String> {
    if o.op.kind == OpKind::Conv2d {
        if f4[3] == 0 || !c.is_multiple_of(f4[3]) {
            return Err(format!(
                "filter {} depth {} does not divide input {} depth {c}",
                show(w),
                f4[3],
                show(o.x)
            ));
        }
        return Ok(f4[0]);
    }
    // TFLM's kernels compute C·M output channels from the multiplier, and
    // none of them checks it against the filter: a mismatch reads past
    // the filter or leaves channels unwritten.
    let m = o.op.options.depth_multiplier as u64;
    if f4[0] != 1 || c == 0 || f4[3] != c * m {
        return Err(format!(
            "depthwise filter {} must be 1xKHxKWx(C·M) for input {} and depth_multiplier {m}",
            show(w),
            show(o.x)
        ));
    }
    Ok(f4[3])
}

/// A bias (input `k`, if present) has one element per output channel.
fn check_bias(o: &Operands<'_>, k: usize, channels: u64) -> Result<(), String> {
    if let Some(b) = o.op.inputs.get(k).and_then(|&t| o.model.tensors.get(t)) {
        if b.elements() != channels {
            return Err(format!(
                "bias {} has {} elements, the operator has {channels} output channels",
                show(b),
                b.elements()
            ));
        }
    }
    Ok(())
}

/// MAX_POOL_2D and AVERAGE_POOL_2D.
fn check_pool(o: &Operands<'_>) -> Result<(), String> {
    let [nb, h, wd, c] = rank4(o.x, "input")?;
    let (fh, fw) = (o.op.options.filter.0 as u64, o.op.options.filter.1 as u64);
    let (sh, sw) = o.stride();
    let oh = o.window(h, fh, sh, 1)?;
    let ow = o.window(wd, fw, sw, 1)?;
    let padding = o.op.options.padding;
    o.expect(
        &dims(o.y),
        &[nb, oh, ow, c],
        format!(
            "input {}, window {fh}x{fw}, stride {sh}x{sw}, {padding:?} padding",
            show(o.x)
        ),
    )
}

/// FULLY_CONNECTED: the input read as rows of the weights' depth, one
/// output row of units each.
fn check_fully_connected(o: &Operands<'_>) -> Result<(), String> {
    let (x, y) = (o.x, o.y);
    let w = o.input(1, "weights")?;
    let [units, depth] = w.shape[..] else {
        return Err(format!("weights {} are not 2-D", show(w)));
    };
    let (units, depth) = (units as u64, depth as u64);
    if depth == 0 || x.elements() % depth != 0 {
        return Err(format!(
            "input {} has {} elements, not a multiple of the weights' depth {depth} ({})",
            show(x),
            x.elements(),
            show(w)
        ));
    }
    if let Ok(b) = o.input(2, "bias") {
        if b.elements() != units {
            return Err(format!(
                "bias {} has {} elements, the weights {} have {units} units",
                show(b),
                b.elements(),
                show(w)
            ));
        }
    }
    let rows = x.elements() / depth;
    if y.shape.last().map(|&d| d as u64) != Some(units) || y.elements() != rows * units {
        return Err(format!(
            "output {} should hold {rows} rows of {units} units (input {}, weights {})",
            show(y),
            show(x),
            show(w)
        ));
    }
    Ok(())
}

/// ADD, SUB and MUL: NumPy broadcasting of the two inputs.
fn check_broadcast(o: &Operands<'_>) -> Result<(), String> {
    let x2 = o.input(1, "second input")?;
    let want = broadcast(&dims(o.x), &dims(x2))
        .ok_or_else(|| format!("inputs {} and {} do not broadcast", show(o.x), show(x2)))?;
    o.expect(
        &dims(o.y),
        &want,
        format!("inputs {} and {} broadcast", show(o.x), show(x2)),
    )
}

/// RESHAPE and SQUEEZE: the same elements.
fn check_same_elements(o: &Operands<'_>) -> Result<(), String> {
    let (x, y) = (o.x, o.y);
    if x.elements() != y.elements() {
        return Err(format!(
            "output {} has {} elements, input {} has {}",
            show(y),
            y.elements(),
            show(x),
            x.elements()
        ));
    }
    Ok(())
}

/// CONCATENATION: the inputs agree outside the axis, whose extents add up.
fn check_concatenation(o: &Operands<'_>) -> Result<(), String> {
    let inputs = (0..o.op.inputs.len())
        .map(|k| o.input(k, "input"))
        .collect::<Result<Vec<_>, _>>()?;
    let (axis, want) = concat_dims(&inputs, o.op.options.axis)?;
    o.expect(
        &dims(o.y),
        &want,
        format!("concatenation along axis {axis}"),
    )
}

/// PAD: the output is no smaller than the input in any dimension.
fn check_pad(o: &Operands<'_>) -> Result<(), String> {
    let (dx, dy) = (dims(o.x), dims(o.y));
    if dx.len() != dy.len() || dx.iter().zip(&dy).any(|(a, b)| b < a) {
        return Err(format!(
            "output {} is smaller than input {}",
            show(o.y),
            show(o.x)
        ));
    }
    Ok(())
}

/// MEAN: no more output elements than input elements.
fn check_mean(o: &Operands<'_>) -> Result<(), String> {
    if o.y.elements() > o.x.elements() {
        return Err(format!(
            "output {} has more elements than input {}",
            show(o.y),
            show(o.x)
        ));
    }
    Ok(())
}

/// TRANSPOSE_CONV: the output shape operand is a 4-element int32 vector
/// (equal to the output's dimensions when it holds data), the weights
/// are `[O, KH, KW, I]` for an input `[N, H, W, I]` and an output
/// `[N, OH, OW, O]`, the bias (if any) has O elements, and the input is
/// what a convolution with the same window, stride and padding makes of
/// the output (TensorFlow's `conv2d_transpose` shape rule, which TFLM's
/// `ComputePaddingHeightWidth` call relies on).
fn check_transpose_conv(o: &Operands<'_>) -> Result<(), String> {
    let (x, y) = (o.x, o.y);
    let shape_t = o.operand(0, "output shape")?;
    if shape_t.dtype != Dtype::Int32 || shape_t.elements() != 4 {
        return Err(format!(
            "output shape operand {} must be 4 int32 values",
            show(shape_t)
        ));
    }
    let w = o.operand(1, "weights")?;
    let [oc, kh, kw, wi] = rank4(w, "weights")?;
    let [n, h, wd, c] = rank4(x, "input")?;
    let [yn, oh, ow, yc] = rank4(y, "output")?;
    check_declared_output(shape_t, y, [yn, oh, ow, yc])?;
    if wi != c || oc != yc || n != yn {
        return Err(format!(
            "weights {} must be [output channels, KH, KW, input channels] for input {} and output {}",
            show(w),
            show(x),
            show(y)
        ));
    }
    check_bias(o, 3, oc)?;
    let (sh, sw) = o.stride();
    let padding = o.op.options.padding;
    let fits =
        out_size(padding, oh, kh, sh, 1) == Some(h) && out_size(padding, ow, kw, sw, 1) == Some(wd);
    if !fits {
        return Err(format!(
            "input {} is not what a {kh}x{kw} window with stride {sh}x{sw} and {padding:?} padding makes of output {}",
            show(x),
            show(y)
        ));
    }
    Ok(())
}

/// A transpose conv's output shape operand, when it holds data, says the
/// output's dimensions.
fn check_declared_output(shape_t: &Tensor, y: &Tensor, out: [u64; 4]) -> Result<(), String> {
    if let Some(data) = &shape_t.data {
        let declared: Vec<u64> = data
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u64)
            .collect();
        if declared != out {
            return Err(format!(
                "output {} differs from the output shape operand {declared:?}",
                show(y)
            ));
        }
    }
    Ok(())
}
