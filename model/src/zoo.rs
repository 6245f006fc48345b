//! Built-in models (`zoo:NAME`): the DMO paper's Table III MobileNets with the
//! layer shapes the Keras application definitions produce, plus small graphs
//! from the neighbouring papers.
//!
//! Names:
//! * `mobilenet_v1_{ALPHA}_{RES}[_int8|_float32]`, ALPHA ∈ {1.0, 0.75, 0.5,
//!   0.25}, RES ∈ {224, 192, 160, 128} (Keras `MobileNet`);
//! * `mobilenet_v2_{ALPHA}_{RES}[_int8|_float32]`, ALPHA ∈ {0.35, 0.5, 0.75,
//!   1.0, 1.3, 1.4}, RES ∈ {96, 128, 160, 192, 224} (Keras `MobileNetV2`);
//! * `liberis_fig1`: the branching graph of Liberis & Lane's Figure 1, with the
//!   tensor sizes their appendix tables imply (default order peaks at 5216 B,
//!   the best order at 4960 B);
//! * `sakr_cifar10`: the CIFAR-10 CNN of Sakr et al. (Table II), int8;
//! * `mobilenet_v1_{ALPHA}_{RES}[_int8|_float32]_zeropad`: the same MobileNet
//!   v1 as older Keras releases export it, every stride-2 layer an explicit
//!   `ZeroPadding2D(((0, 1), (0, 1)))` (a TFLite PAD) followed by a `valid`
//!   convolution — a model with PAD operators.
//! * `tiny_unet_80x120[_int8|_float32]`: TinySeg's Tiny U-Net (its Table 2:
//!   80×120×3 in, 80×120×1 out, 109 725 parameters), see `tiny_unet`.
//!
//! Keras pads the stride-2 convolutions explicitly
//! (`ZeroPadding2D(((0, 1), (0, 1)))` then `padding='valid'`, or `'same'` in
//! newer releases). For even input sizes that is exactly TFLite's SAME padding
//! (0 rows/cols before, 1 after), so these models use SAME and carry no PAD
//! tensors — as the paper's own figures must have: MobileNet v1 0.25 128's
//! 96 KB "original" peak would be 130 KB with a 65×65×16 PAD output.
//! Float32 is the default; `_int8` makes every activation and weight int8
//! (biases int32), as a fully integer-quantised TFLite export does.

use super::{Activation, Dtype, Model, ModelError, Op, OpKind, OpOptions, Padding, Tensor};

/// Builds operator graphs tensor by tensor.
pub struct GraphBuilder {
    model: Model,
    dtype: Dtype,
}

impl GraphBuilder {
    /// `dtype` is the activation/weight type of the layer helpers.
    pub fn new(name: impl Into<String>, dtype: Dtype) -> Self {
        GraphBuilder {
            model: Model {
                name: name.into(),
                tensors: Vec::new(),
                ops: Vec::new(),
                inputs: Vec::new(),
                outputs: Vec::new(),
            },
            dtype,
        }
    }

    /// Adds a tensor and returns its index; `constant` tensors are never placed in the arena.
    pub(crate) fn tensor(
        &mut self,
        name: impl Into<String>,
        shape: &[u32],
        dtype: Dtype,
        constant: bool,
    ) -> usize {
        let elements: u64 = shape.iter().map(|&d| d as u64).product();
        self.model.tensors.push(Tensor {
            name: name.into(),
            shape: shape.to_vec(),
            dtype,
            bytes: elements * dtype.size(),
            is_constant: constant,
            is_variable: false,
            quantization: None,
            data: None,
            in_storage: false,
        });
        self.model.tensors.len() - 1
    }

    /// A graph input of the builder's dtype.
    pub fn input(&mut self, name: &str, shape: &[u32]) -> usize {
        let t = self.tensor(name, shape, self.dtype, false);
        self.model.inputs.push(t);
        t
    }

    /// Shape of tensor `t`.
    pub(crate) fn shape(&self, t: usize) -> &[u32] {
        &self.model.tensors[t].shape
    }

    /// Adds an operator writing a new activation tensor `out` of `shape`.
    pub(crate) fn op(
        &mut self,
        kind: OpKind,
        inputs: Vec<usize>,
        out: &str,
        shape: &[u32],
        options: OpOptions,
    ) -> usize {
        let o = self.tensor(out, shape, self.dtype, false);
        self.model.ops.push(Op {
            kind,
            inputs,
            outputs: vec![o],
            options,
            scratch: None,
        });
        o
    }

    fn bias_type(&self) -> Dtype {
        match self.dtype {
            Dtype::Int8 | Dtype::Uint8 => Dtype::Int32,
            d => d,
        }
    }

    /// `Conv2D` with a `k×k` kernel, bias and fused activation.
    pub fn conv2d(
        &mut self,
        name: &str,
        x: usize,
        filters: u32,
        k: u32,
        stride: u32,
        act: Activation,
    ) -> usize {
        let [n, h, w, c] = four(self.shape(x));
        let dt = self.dtype;
        let bt = self.bias_type();
        let f = self.tensor(format!("{name}/weights"), &[filters, k, k, c], dt, true);
        let b = self.tensor(format!("{name}/bias"), &[filters], bt, true);
        let (oh, ow) = (h.div_ceil(stride), w.div_ceil(stride));
        self.op(
            OpKind::Conv2d,
            vec![x, f, b],
            name,
            &[n, oh, ow, filters],
            OpOptions {
                stride: (stride, stride),
                activation: act,
                ..OpOptions::default()
            },
        )
    }

    /// `DepthwiseConv2D` 3×3 (SAME), depth multiplier 1.
    pub(crate) fn depthwise(
        &mut self,
        name: &str,
        x: usize,
        stride: u32,
        act: Activation,
    ) -> usize {
        let [n, h, w, c] = four(self.shape(x));
        let dt = self.dtype;
        let bt = self.bias_type();
        let f = self.tensor(format!("{name}/weights"), &[1, 3, 3, c], dt, true);
        let b = self.tensor(format!("{name}/bias"), &[c], bt, true);
        let (oh, ow) = (h.div_ceil(stride), w.div_ceil(stride));
        self.op(
            OpKind::DepthwiseConv2d,
            vec![x, f, b],
            name,
            &[n, oh, ow, c],
            OpOptions {
                stride: (stride, stride),
                activation: act,
                depth_multiplier: 1,
                ..OpOptions::default()
            },
        )
    }

    /// A `k×k` pool with VALID padding.
    pub fn pool(&mut self, kind: OpKind, name: &str, x: usize, k: u32, stride: u32) -> usize {
        let [n, h, w, c] = four(self.shape(x));
        let (oh, ow) = ((h - k) / stride + 1, (w - k) / stride + 1);
        self.op(
            kind,
            vec![x],
            name,
            &[n, oh, ow, c],
            OpOptions {
                stride: (stride, stride),
                filter: (k, k),
                padding: Padding::Valid,
                ..OpOptions::default()
            },
        )
    }

    /// `Dense` on the flattened input.
    pub fn fully_connected(&mut self, name: &str, x: usize, units: u32, act: Activation) -> usize {
        let depth = *self.shape(x).last().unwrap_or(&1);
        let rows = (self.model.tensors[x].elements() / depth.max(1) as u64) as u32;
        let dt = self.dtype;
        let bt = self.bias_type();
        let f = self.tensor(format!("{name}/weights"), &[units, depth], dt, true);
        let b = self.tensor(format!("{name}/bias"), &[units], bt, true);
        self.op(
            OpKind::FullyConnected,
            vec![x, f, b],
            name,
            &[rows, units],
            OpOptions {
                activation: act,
                ..OpOptions::default()
            },
        )
    }

    /// Keras `Conv2DTranspose(filters, k, strides=stride)` (VALID padding,
    /// bias, no activation) as TFLite's `TRANSPOSE_CONV`: operands output
    /// shape (constant int32), weights `[filters, k, k, C]`, input, bias.
    pub fn transpose_conv(
        &mut self,
        name: &str,
        x: usize,
        filters: u32,
        k: u32,
        stride: u32,
    ) -> usize {
        let [n, h, w, c] = four(self.shape(x));
        let dt = self.dtype;
        let bt = self.bias_type();
        // VALID: out = (in - 1) * stride + k.
        let out = [n, (h - 1) * stride + k, (w - 1) * stride + k, filters];
        let s = self.tensor(format!("{name}/output_shape"), &[4], Dtype::Int32, true);
        let f = self.tensor(format!("{name}/weights"), &[filters, k, k, c], dt, true);
        let b = self.tensor(format!("{name}/bias"), &[filters], bt, true);
        self.op(
            OpKind::TransposeConv,
            vec![s, f, x, b],
            name,
            &out,
            OpOptions {
                stride: (stride, stride),
                padding: Padding::Valid,
                ..OpOptions::default()
            },
        )
    }

    /// `Concatenate(axis=-1)` of 4-D tensors along their channels, in the
    /// order given; returns the output tensor.
    pub fn concat_channels(&mut self, name: &str, inputs: &[usize]) -> usize {
        let mut shape = four(self.shape(inputs[0]));
        shape[3] = inputs.iter().map(|&t| four(self.shape(t))[3]).sum();
        self.op(
            OpKind::Concatenation,
            inputs.to_vec(),
            name,
            &shape,
            OpOptions {
                axis: Some(3),
                ..OpOptions::default()
            },
        )
    }

    /// `Add` of `a` and `b`, with `a`'s shape; returns the output tensor.
    pub fn add(&mut self, name: &str, a: usize, b: usize) -> usize {
        let shape = self.shape(a).to_vec();
        self.op(OpKind::Add, vec![a, b], name, &shape, OpOptions::default())
    }

    /// `Softmax` of `x`; returns the output tensor.
    pub(crate) fn softmax(&mut self, name: &str, x: usize) -> usize {
        let shape = self.shape(x).to_vec();
        self.op(OpKind::Softmax, vec![x], name, &shape, OpOptions::default())
    }

    /// `Reshape` of `x` to `shape`, with a constant int32 shape operand; returns
    /// the output tensor.
    pub(crate) fn reshape(&mut self, name: &str, x: usize, shape: &[u32]) -> usize {
        let s = self.tensor(
            format!("{name}/shape"),
            &[shape.len() as u32],
            Dtype::Int32,
            true,
        );
        self.op(
            OpKind::Reshape,
            vec![x, s],
            name,
            shape,
            OpOptions::default(),
        )
    }

    /// `ZeroPadding2D`: a PAD of `x` by `before` / `after` rows and columns,
    /// with its constant `[4, 2]` int32 paddings; returns the output tensor.
    pub(crate) fn zero_pad(
        &mut self,
        name: &str,
        x: usize,
        before: (u32, u32),
        after: (u32, u32),
    ) -> usize {
        let [n, h, w, c] = four(self.shape(x));
        let p = self.tensor(format!("{name}/paddings"), &[4, 2], Dtype::Int32, true);
        let amounts = [0, 0, before.0, after.0, before.1, after.1, 0, 0];
        self.model.tensors[p].data = Some(amounts.iter().flat_map(|v| v.to_le_bytes()).collect());
        let shape = [n, h + before.0 + after.0, w + before.1 + after.1, c];
        self.op(OpKind::Pad, vec![x, p], name, &shape, OpOptions::default())
    }

    /// Marks `outputs` as the graph outputs and returns the model.
    pub fn finish(mut self, outputs: &[usize]) -> Model {
        self.model.outputs = outputs.to_vec();
        self.model
    }
}

fn four(shape: &[u32]) -> [u32; 4] {
    super::shape4(shape).unwrap_or([1, 1, 1, 1])
}

/// Names `zoo:NAME` accepts (the Table III rows first).
pub fn names() -> Vec<&'static str> {
    vec![
        "mobilenet_v1_1.0_224",
        "mobilenet_v1_1.0_224_int8",
        "mobilenet_v1_0.25_224",
        "mobilenet_v1_0.25_128_int8",
        "mobilenet_v2_0.35_224",
        "mobilenet_v2_1.0_224",
        "liberis_fig1",
        "sakr_cifar10",
        "mobilenet_v1_0.25_128_int8_zeropad",
        "tiny_unet_80x120_int8",
        "hourglass_64x64_int8",
    ]
}

/// Builds the zoo model `name` (the `NAME` of `zoo:NAME`).
pub fn build(name: &str) -> Result<Model, ModelError> {
    build_named(name).map_err(ModelError::Invalid)
}

fn build_named(bare: &str) -> Result<Model, String> {
    let unknown = || {
        format!(
            "unknown zoo model `{bare}` (known: {}; any Keras alpha/resolution of \
             mobilenet_v1_ALPHA_RES / mobilenet_v2_ALPHA_RES, with _int8 or _float32; \
             tiny_unet_80x120 is also float32)",
            names().join(", ")
        )
    };
    match bare {
        "liberis_fig1" => return Ok(liberis_fig1()),
        "sakr_cifar10" => return Ok(sakr_cifar10()),
        "tiny_unet_80x120_int8" => return Ok(tiny_unet(bare, Dtype::Int8)),
        "hourglass_64x64_int8" => return Ok(hourglass(bare, 64, &[16, 32, 64])),
        "tiny_unet_80x120" | "tiny_unet_80x120_float32" => {
            return Ok(tiny_unet(bare, Dtype::Float32))
        }
        _ => {}
    }
    let (bare_model, zeropad) = match bare.strip_suffix("_zeropad") {
        Some(b) => (b, true),
        None => (bare, false),
    };
    let (rest, dtype) = if let Some(r) = bare_model.strip_suffix("_int8") {
        (r, Dtype::Int8)
    } else if let Some(r) = bare.strip_suffix("_float32") {
        (r, Dtype::Float32)
    } else {
        (bare, Dtype::Float32)
    };
    let (version, params) = if let Some(p) = rest.strip_prefix("mobilenet_v1_") {
        (1, p)
    } else if let Some(p) = rest.strip_prefix("mobilenet_v2_") {
        (2, p)
    } else {
        return Err(unknown());
    };
    let (alpha, res) = params.split_once('_').ok_or_else(unknown)?;
    let res: u32 = res.parse().map_err(|_| unknown())?;
    let alpha_ok = match version {
        1 => ["1.0", "0.75", "0.5", "0.25"].contains(&alpha),
        _ => ["0.35", "0.5", "0.75", "1.0", "1.3", "1.4"].contains(&alpha),
    };
    let res_ok = match version {
        1 => [224, 192, 160, 128].contains(&res),
        _ => [224, 192, 160, 128, 96].contains(&res),
    };
    if !alpha_ok || !res_ok {
        return Err(unknown());
    }
    let alpha: f64 = alpha.parse().map_err(|_| unknown())?;
    Ok(match (version, zeropad) {
        (1, false) => mobilenet_v1(bare, alpha, res, dtype),
        (1, true) => mobilenet_v1_zeropad(bare, alpha, res, dtype),
        (_, false) => mobilenet_v2(bare, alpha, res, dtype),
        (_, true) => return Err(unknown()),
    })
}

/// Keras `MobileNet(alpha, depth_multiplier=1, include_top=True)`: channel
/// counts `int(filters · alpha)`; every conv/depthwise fuses BN and ReLU6;
/// the top is global average pooling, a 1×1 conv to 1000 classes, reshape
/// and softmax.
pub(crate) fn mobilenet_v1(name: &str, alpha: f64, res: u32, dtype: Dtype) -> Model {
    mobilenet_v1_with(name, alpha, res, dtype, false)
}

/// [`mobilenet_v1`] as older Keras releases export it: each stride-2
/// convolution is `ZeroPadding2D(((0, 1), (0, 1)))` (a PAD) and a `valid`
/// convolution, which for even sizes computes exactly what SAME does.
pub(crate) fn mobilenet_v1_zeropad(name: &str, alpha: f64, res: u32, dtype: Dtype) -> Model {
    mobilenet_v1_with(name, alpha, res, dtype, true)
}

/// Pads `x` by one row and column after (Keras' `correct_pad` for even
/// sizes) before a stride-2 layer when `zeropad`; the layer is then `valid`.
fn stride_two_input(g: &mut GraphBuilder, name: &str, x: usize, zeropad: bool) -> usize {
    if zeropad {
        g.zero_pad(&format!("{name}_pad"), x, (0, 0), (1, 1))
    } else {
        x
    }
}

/// Turns the 3×3 stride-2 layer that wrote `t` from a padded input into a
/// VALID one: its output is `(padded − 3) / 2 + 1`, which for an even size
/// padded by one is the SAME output of the unpadded input.
fn make_valid(g: &mut GraphBuilder, t: usize) {
    let Some(op) = g
        .model
        .ops
        .iter_mut()
        .rev()
        .find(|o| o.outputs.contains(&t))
    else {
        return;
    };
    op.options.padding = Padding::Valid;
    let [n, h, w, _] = four(&g.model.tensors[op.inputs[0]].shape);
    let out = &mut g.model.tensors[t];
    let c = *out.shape.last().unwrap_or(&1);
    out.shape = vec![n, (h - 3) / 2 + 1, (w - 3) / 2 + 1, c];
    out.bytes = out.shape.iter().map(|&d| d as u64).product::<u64>() * out.dtype.size();
}

fn mobilenet_v1_with(name: &str, alpha: f64, res: u32, dtype: Dtype, zeropad: bool) -> Model {
    let mut g = GraphBuilder::new(name, dtype);
    let ch = |f: u32| (f as f64 * alpha) as u32;
    let mut x = g.input("input", &[1, res, res, 3]);
    x = stride_two_input(&mut g, "conv1", x, zeropad);
    x = g.conv2d("conv1", x, ch(32), 3, 2, Activation::Relu6);
    if zeropad {
        make_valid(&mut g, x);
    }
    let blocks: [(u32, u32); 13] = [
        (64, 1),
        (128, 2),
        (128, 1),
        (256, 2),
        (256, 1),
        (512, 2),
        (512, 1),
        (512, 1),
        (512, 1),
        (512, 1),
        (512, 1),
        (1024, 2),
        (1024, 1),
    ];
    for (i, (filters, stride)) in blocks.into_iter().enumerate() {
        let id = i + 1;
        let pad = zeropad && stride == 2;
        x = stride_two_input(&mut g, &format!("conv_dw_{id}"), x, pad);
        x = g.depthwise(&format!("conv_dw_{id}"), x, stride, Activation::Relu6);
        if pad {
            make_valid(&mut g, x);
        }
        x = g.conv2d(
            &format!("conv_pw_{id}"),
            x,
            ch(filters),
            1,
            1,
            Activation::Relu6,
        );
    }
    let spatial = g.shape(x)[1];
    x = g.pool(
        OpKind::AveragePool,
        "global_average_pooling2d",
        x,
        spatial,
        1,
    );
    x = g.conv2d("conv_preds", x, 1000, 1, 1, Activation::None);
    x = g.reshape("reshape_2", x, &[1, 1000]);
    x = g.softmax("act_softmax", x);
    g.finish(&[x])
}

/// Keras `_make_divisible`.
fn make_divisible(v: f64, divisor: u32) -> u32 {
    let d = divisor as f64;
    let mut new_v = ((v + d / 2.0) as u32 / divisor * divisor).max(divisor);
    if (new_v as f64) < 0.9 * v {
        new_v += divisor;
    }
    new_v
}

/// Keras `MobileNetV2(alpha, include_top=True)`: inverted residual blocks
/// (1×1 expand + ReLU6 unless block 0, 3×3 depthwise + ReLU6, linear 1×1
/// project, residual ADD when the block keeps stride 1 and its channel count),
/// a last 1×1 conv to 1280 (more for alpha > 1), global average pooling, dense
/// and softmax.
pub(crate) fn mobilenet_v2(name: &str, alpha: f64, res: u32, dtype: Dtype) -> Model {
    let mut g = GraphBuilder::new(name, dtype);
    let mut x = g.input("input", &[1, res, res, 3]);
    x = g.conv2d(
        "Conv1",
        x,
        make_divisible(32.0 * alpha, 8),
        3,
        2,
        Activation::Relu6,
    );
    let blocks: [(u32, u32, u32); 17] = [
        (16, 1, 1),
        (24, 2, 6),
        (24, 1, 6),
        (32, 2, 6),
        (32, 1, 6),
        (32, 1, 6),
        (64, 2, 6),
        (64, 1, 6),
        (64, 1, 6),
        (64, 1, 6),
        (96, 1, 6),
        (96, 1, 6),
        (96, 1, 6),
        (160, 2, 6),
        (160, 1, 6),
        (160, 1, 6),
        (320, 1, 6),
    ];
    for (id, (filters, stride, expansion)) in blocks.into_iter().enumerate() {
        let block_in = x;
        let in_ch = g.shape(x)[3];
        let out_ch = make_divisible((filters as f64 * alpha) as u32 as f64, 8);
        let prefix = if id == 0 {
            "expanded_conv".to_string()
        } else {
            format!("block_{id}")
        };
        if id != 0 {
            x = g.conv2d(
                &format!("{prefix}_expand"),
                x,
                expansion * in_ch,
                1,
                1,
                Activation::Relu6,
            );
        }
        x = g.depthwise(&format!("{prefix}_depthwise"), x, stride, Activation::Relu6);
        x = g.conv2d(
            &format!("{prefix}_project"),
            x,
            out_ch,
            1,
            1,
            Activation::None,
        );
        if in_ch == out_ch && stride == 1 {
            x = g.add(&format!("{prefix}_add"), block_in, x);
        }
    }
    let last = if alpha > 1.0 {
        make_divisible(1280.0 * alpha, 8)
    } else {
        1280
    };
    x = g.conv2d("Conv_1", x, last, 1, 1, Activation::Relu6);
    let spatial = g.shape(x)[1];
    x = g.pool(
        OpKind::AveragePool,
        "global_average_pooling2d",
        x,
        spatial,
        1,
    );
    x = g.fully_connected("predictions", x, 1000, Activation::None);
    x = g.softmax("predictions_softmax", x);
    g.finish(&[x])
}

/// Liberis & Lane, Figure 1: op 1 feeds two branches (ops 2→3→5 and 4→6)
/// that a concatenation (op 7) joins. Their appendix tables fix the tensor
/// sizes (int8 bytes): input 1568, t1 3136, t2 1568, t3 512, t4 512, t5 256,
/// t6 256, concat 512. Default order peak 5216 B (at op 3), best order
/// 1, 4, 6, 2, 3, 5, 7 peak 4960 B (at op 2).
pub(crate) fn liberis_fig1() -> Model {
    let mut g = GraphBuilder::new("liberis_fig1", Dtype::Int8);
    let opts = OpOptions::default;
    let x = g.input("input", &[1, 14, 14, 8]);
    let t1 = g.op(OpKind::Conv2d, vec![x], "op1", &[1, 14, 14, 16], opts());
    let t2 = g.op(OpKind::Conv2d, vec![t1], "op2", &[1, 14, 14, 8], opts());
    let t3 = g.op(OpKind::Conv2d, vec![t2], "op3", &[1, 8, 8, 8], opts());
    let t4 = g.op(OpKind::Conv2d, vec![t1], "op4", &[1, 8, 8, 8], opts());
    let t5 = g.op(OpKind::Conv2d, vec![t3], "op5", &[1, 4, 4, 16], opts());
    let t6 = g.op(OpKind::Conv2d, vec![t4], "op6", &[1, 4, 4, 16], opts());
    let t7 = g.op(
        OpKind::Concatenation,
        vec![t5, t6],
        "op7",
        &[1, 4, 4, 32],
        OpOptions {
            axis: Some(3),
            ..OpOptions::default()
        },
    );
    g.finish(&[t7])
}

/// Sakr et al.'s CIFAR-10 CNN (their Table II), int8: three 5×5 SAME convs
/// (32, 32, 64 filters) each followed by a 2×2 stride-2 max pool, then a dense
/// layer to 10 classes.
pub(crate) fn sakr_cifar10() -> Model {
    let mut g = GraphBuilder::new("sakr_cifar10", Dtype::Int8);
    let mut x = g.input("input", &[1, 32, 32, 3]);
    for (i, filters) in [32u32, 32, 64].into_iter().enumerate() {
        x = g.conv2d(
            &format!("conv{}", i + 1),
            x,
            filters,
            5,
            1,
            Activation::Relu,
        );
        x = g.pool(OpKind::MaxPool, &format!("pool{}", i + 1), x, 2, 2);
    }
    x = g.fully_connected("fc", x, 10, Activation::None);
    g.finish(&[x])
}

/// TinySeg's Tiny U-Net (`TinyUNet(classes=1)` in coslab-kr/tinyseg
/// `model/models/unet.py`) on an 80×120×3 input, as TFLite's converter
/// lays it out: every `DoubleConv(C)` is two 3×3 SAME convolutions to C
/// channels with the batch norm folded into a bias and ReLU fused; each
/// `Down(C)` a 2×2 stride-2 max pool then `DoubleConv(C)`; each `Up(C)` a
/// 2×2 stride-2 transpose convolution to C/2 channels (with bias), the
/// concatenation `[skip, upsampled]` along the channels (unet.py's
/// `concat([x2, x1])`; the spatial sizes already match, so its zero `pad`
/// is a no-op and no PAD operator remains) and `DoubleConv(C)`; then a 1×1
/// convolution with bias to one channel, no activation.
pub(crate) fn tiny_unet(name: &str, dtype: Dtype) -> Model {
    let mut g = GraphBuilder::new(name, dtype);
    let x = g.input("input", &[1, 80, 120, 3]);
    let double_conv = |g: &mut GraphBuilder, name: &str, x: usize, c: u32| {
        let y = g.conv2d(&format!("{name}/conv1"), x, c, 3, 1, Activation::Relu);
        g.conv2d(&format!("{name}/conv2"), y, c, 3, 1, Activation::Relu)
    };
    let x1 = double_conv(&mut g, "inc", x, 8);
    let mut skips = vec![x1];
    let mut h = x1;
    for (i, c) in [16u32, 32, 64].into_iter().enumerate() {
        let name = format!("down{}", i + 1);
        let p = g.pool(OpKind::MaxPool, &format!("{name}/pool"), h, 2, 2);
        h = double_conv(&mut g, &name, p, c);
        skips.push(h);
    }
    skips.pop(); // the deepest block feeds the first Up directly
    for (i, c) in [32u32, 16, 8].into_iter().enumerate() {
        let name = format!("up{}", i + 1);
        let up = g.transpose_conv(&format!("{name}/up"), h, c / 2, 2, 2);
        let skip = skips.pop().unwrap_or(up);
        let cat = g.concat_channels(&format!("{name}/concat"), &[skip, up]);
        h = double_conv(&mut g, &name, cat, c);
    }
    let logits = g.conv2d("outc", h, 1, 1, 1, Activation::None);
    g.finish(&[logits])
}

/// An hourglass with residual skip connections, as in Newell et al.'s
/// stacked hourglass networks (the second TinySeg hourglass of
/// docs/tinyseg.md): a 3×3 stem to `widths[0]` channels on a `res`×`res`×3
/// int8 input, then per level a 2×2 stride-2 max pool and a 3×3 conv to the
/// next width; on the way up a 2×2 stride-2 transpose convolution back to the
/// skip's width, an ADD with the skip (instead of U-Net's concatenation) and
/// a 3×3 conv; a 1×1 conv to one channel. Every conv fuses ReLU except the
/// last.
pub(crate) fn hourglass(name: &str, res: u32, widths: &[u32]) -> Model {
    let mut g = GraphBuilder::new(name, Dtype::Int8);
    let x = g.input("input", &[1, res, res, 3]);
    let mut h = g.conv2d("stem", x, widths[0], 3, 1, Activation::Relu);
    let mut skips = Vec::new();
    for (i, &c) in widths.iter().enumerate().skip(1) {
        skips.push(h);
        let p = g.pool(OpKind::MaxPool, &format!("down{i}/pool"), h, 2, 2);
        h = g.conv2d(&format!("down{i}/conv"), p, c, 3, 1, Activation::Relu);
    }
    for i in (1..widths.len()).rev() {
        let skip = skips.pop().unwrap_or(h);
        let c = widths[i - 1];
        let up = g.transpose_conv(&format!("up{i}/up"), h, c, 2, 2);
        let sum = g.add(&format!("up{i}/add"), skip, up);
        h = g.conv2d(&format!("up{i}/conv"), sum, c, 3, 1, Activation::Relu);
    }
    let out = g.conv2d("head", h, 1, 1, 1, Activation::None);
    g.finish(&[out])
}

/// A deterministic synthetic int8 network of about `ops` operators on
/// 16×16×16 activations: alternating residual blocks (1×1 conv, 3×3
/// depthwise, 1×1 conv, ADD with the block input) and two-branch blocks
/// (two conv/depthwise/conv branches joined by a CONCATENATION and a 1×1 conv
/// back to 16 channels), so the graph branches like Inception/ResNet cells.
/// Not a `zoo:NAME`: the large graph of the planners' tests and of the
/// `planning_times` example.
pub fn synthetic_graph(ops: usize) -> Model {
    let mut g = GraphBuilder::new(format!("synthetic_{ops}"), Dtype::Int8);
    let mut x = g.input("input", &[1, 16, 16, 16]);
    let mut count = 0usize;
    let mut block = 0usize;
    while count + 4 <= ops {
        if block.is_multiple_of(2) {
            let a = g.conv2d(&format!("b{block}_expand"), x, 16, 1, 1, Activation::Relu6);
            let b = g.depthwise(&format!("b{block}_dw"), a, 1, Activation::Relu6);
            let c = g.conv2d(&format!("b{block}_project"), b, 16, 1, 1, Activation::None);
            x = g.add(&format!("b{block}_add"), x, c);
            count += 4;
        } else if count + 8 <= ops {
            let mut branches = Vec::new();
            for br in 0..2 {
                let a = g.conv2d(&format!("b{block}_{br}_a"), x, 8, 1, 1, Activation::Relu6);
                let b = g.depthwise(&format!("b{block}_{br}_dw"), a, 1, Activation::Relu6);
                branches.push(b);
            }
            let cat = g.op(
                OpKind::Concatenation,
                branches,
                &format!("b{block}_concat"),
                &[1, 16, 16, 16],
                OpOptions {
                    axis: Some(3),
                    ..OpOptions::default()
                },
            );
            x = g.conv2d(&format!("b{block}_mix"), cat, 16, 1, 1, Activation::Relu6);
            count += 6;
        } else {
            x = g.conv2d(&format!("b{block}_tail"), x, 16, 1, 1, Activation::Relu6);
            count += 1;
        }
        block += 1;
    }
    while count < ops {
        x = g.conv2d(&format!("tail{count}"), x, 16, 1, 1, Activation::Relu6);
        count += 1;
    }
    g.finish(&[x])
}
