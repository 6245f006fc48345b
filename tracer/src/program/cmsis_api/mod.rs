//! The CMSIS-NN API functions `memtrace check` turns into layers, one entry
//! per function, grouped in families that share an argument layout: which
//! argument is the context, which the dimensions and data of the input,
//! filter, bias and output, and how many bytes each buffer holds.
//!
//! The argument structures are read with the layouts of CMSIS-NN v7.0.0's
//! `Include/arm_nn_types.h`, written here as constants: every field of
//! `cmsis_nn_context`, `cmsis_nn_dims`, `cmsis_nn_conv_params`,
//! `cmsis_nn_dw_conv_params`, `cmsis_nn_pool_params`,
//! `cmsis_nn_per_channel_quant_params`, `cmsis_nn_bias_data` and
//! `cmsis_nn_softmax_lut_s16` is a 32-bit word (pointers included, on the
//! Cortex-M), so their offsets are the word index times 4. The same layouts
//! hold in v4.0.0 to v7.0.0 for the structures read here.
//!
//! The recurrent families (`recurrent.rs`) read nested structures that
//! change between releases (`cmsis_nn_lstm_params` and its gates,
//! `cmsis_nn_lstm_context`, `cmsis_nn_svdf_params`): those are read with
//! the program's own DWARF layouts when it has them, v7.0.0's otherwise
//! (`layouts.rs`). Their signatures are v7.0.0's: `arm_svdf_s8` takes a
//! `ctx` first since v5.0.0, and the LSTM entry points are v6.0.0's.
//!
//! The transpose-convolution, batch matmul and transpose families
//! (`transform.rs`) read `cmsis_nn_transpose_conv_params` (12 words),
//! `cmsis_nn_bmm_params` (two `bool`s padded to a word, then
//! `cmsis_nn_fc_params`) and `cmsis_nn_transpose_params` (`num_dims` and
//! the permutation's pointer), v7.0.0's.
//!
//! The copying families (`copies.rs`) take plain scalars: concatenation
//! along one axis, reshape, and the ReLUs that clamp one buffer in place.
//!
//! Sizes come from the fields the kernels themselves read, never from ones
//! a caller may leave unset: CMSIS-NN's own unit tests set neither
//! `filter_dims.n` nor `output_dims.n` of a convolution, and pass a scratch
//! buffer with `ctx.size = 0` (its size is then the heap block it lies in).

mod copies;
mod families;
pub(crate) mod layouts;
mod reader;
mod recurrent;
mod transform;

use memtrace_abi::Role;

use layouts::ApiLayouts;

/// What a family of functions computes and how its arguments are laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Family {
    /// `(ctx, conv_params, quant, input_dims, input, filter_dims, filter,
    /// bias_dims, bias, [upscale_dims,] output_dims, output)`.
    Conv {
        /// `arm_convolve_s8` has an `upscale_dims` before `output_dims`.
        upscale: bool,
    },
    /// Depthwise convolutions: the convolution's layout with
    /// `cmsis_nn_dw_conv_params`; the filter is `1 × KH × KW × out_c`.
    Depthwise,
    /// `(ctx, fc_params, quant, input_dims, input, filter_dims, filter,
    /// bias_dims, bias, output_dims, output)`: `filter_dims.n` is the
    /// accumulation depth, `output_dims.c` the units.
    FullyConnected {
        /// Per-channel multipliers and shifts (`cmsis_nn_per_channel_quant_params`).
        per_channel: bool,
    },
    /// `(ctx, pool_params, input_dims, input, filter_dims, output_dims, output)`.
    Pool {
        /// Average (else max) pooling.
        average: bool,
    },
    /// `(input, num_rows, row_size, mult, shift, diff_min | lut, output)`.
    Softmax {
        /// `arm_softmax_s16`: argument 5 is a `cmsis_nn_softmax_lut_s16`.
        lut: bool,
    },
    /// `(in1, in2, 7 scalars, output, 5 scalars, block_size)`.
    Add,
    /// `(in1, in2, 2 scalars, output, 5 scalars, block_size)`.
    Mul,
    /// `(ctx, in1, in1_dims, in2, in2_dims, output, output_dims)`, with
    /// broadcasting.
    MinMax,
    /// `(input, output, pad_value, input_size, pre_pad, post_pad)`.
    Pad,
    /// `(sum_buf, cols, rows, data, …, bias)`: the kernel sums of a fully
    /// connected layer's weights, argument 6 (`_s8`) or 5 (`_s8_s64`) the bias.
    VectorSum {
        /// Bias argument index.
        bias_arg: usize,
    },
    /// `(input, output, size, left_shift, type)`.
    Activation,
    /// `([ctx,] input_ctx, output_ctx, svdf_params, input_quant,
    /// output_quant, input_dims, input, state_dims, state,
    /// weights_feature_dims, weights_feature, weights_time_dims,
    /// weights_time, bias_dims, bias, output_dims, output)`.
    Svdf {
        /// `arm_svdf_s8` has a `ctx` first; `arm_svdf_state_s16_s8` not.
        context: bool,
        /// Bytes of a state and time-weight element (1, or 2 for
        /// `arm_svdf_state_s16_s8`).
        state_elem: u32,
    },
    /// `(input, output, cmsis_nn_lstm_params *, cmsis_nn_lstm_context *)`.
    Lstm,
    /// `(ctx, output_ctx, transpose_conv_params, quant, input_dims, input,
    /// filter_dims, filter, bias_dims, bias, output_dims, output)`.
    TransposeConv {
        /// `arm_transpose_conv_wrapper_s8`: may take the reverse-convolution
        /// path (`arm_convolve_s8` on the upscaled input).
        wrapper: bool,
    },
    /// `(ctx, bmm_params, quant, lhs_dims, lhs, rhs_dims, rhs,
    /// output_dims, output)`, with batch broadcasting.
    BatchMatmul,
    /// `(input, output, input_dims, output_dims, transpose_params)`.
    Transpose,
    /// `(input, input_x, input_y, input_z, input_w, output, [output_<axis>,]
    /// offset_<axis>)`: the input copied into the output at an offset
    /// along `axis` (no `output_w` along W).
    Concatenation {
        /// The axis concatenated along.
        axis: Axis,
    },
    /// `(input, output, total_size)`: a copy.
    Reshape,
    /// `(data, size)`: `size` elements clamped in place.
    Relu,
}

/// A concatenation's axis, as CMSIS-NN names them: X the width, Y the
/// height, Z the channels, W the batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Axis {
    /// The width (`input_x`): rows copied `output_x` apart.
    X,
    /// The height (`input_y`): tiles of `x · input_y`.
    Y,
    /// The channels (`input_z`): blocks of `x · y · input_z`.
    Z,
    /// The batches (`input_w`): one block.
    W,
}

/// One API function.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ApiFunction {
    /// Its symbol.
    pub name: &'static str,
    /// Its argument layout.
    pub family: Family,
    /// Bytes of an input element (1 for int8 and packed int4, 2 for int16).
    pub input_elem: u32,
    /// Bytes of an output element.
    pub output_elem: u32,
    /// Bytes of a bias element (0: `cmsis_nn_bias_data`, int32 or int64 by
    /// its flag).
    pub bias_elem: u32,
    /// The filter is packed int4 (two weights a byte).
    pub packed: bool,
}

impl ApiFunction {
    /// Arguments passed on the stack (AAPCS: all after the fourth word).
    pub fn stack_arguments(&self) -> u64 {
        let arguments = match self.family {
            Family::Conv { upscale } => 11 + upscale as u64,
            Family::Depthwise | Family::FullyConnected { .. } | Family::Mul => 11,
            Family::Pool { .. } | Family::Softmax { .. } | Family::MinMax => 7,
            Family::Add => 16,
            Family::Pad => 6,
            Family::VectorSum { bias_arg } => bias_arg as u64 + 1,
            Family::Activation => 5,
            Family::Svdf { context, .. } => 17 + context as u64,
            Family::Lstm => 4,
            Family::TransposeConv { .. } => 12,
            Family::BatchMatmul => 9,
            Family::Transpose => 5,
            Family::Concatenation { axis } => 8 - (axis == Axis::W) as u64,
            Family::Reshape => 3,
            Family::Relu => 2,
        };
        arguments.saturating_sub(4)
    }
}

const fn f(name: &'static str, family: Family, io: (u32, u32), bias_elem: u32) -> ApiFunction {
    ApiFunction {
        name,
        family,
        input_elem: io.0,
        output_elem: io.1,
        bias_elem,
        packed: false,
    }
}

const fn s4(name: &'static str, family: Family) -> ApiFunction {
    ApiFunction {
        packed: true,
        ..f(name, family, (1, 1), 4)
    }
}

const CONV: Family = Family::Conv { upscale: false };

/// Every API function traced as a layer. Wrappers come with the kernels
/// they dispatch to: a call made while another is open belongs to it.
pub(crate) const API: &[ApiFunction] = &[
    f("arm_convolve_wrapper_s8", CONV, (1, 1), 4),
    f("arm_convolve_s8", Family::Conv { upscale: true }, (1, 1), 4),
    f("arm_convolve_1x1_s8_fast", CONV, (1, 1), 4),
    f("arm_convolve_1x1_s8", CONV, (1, 1), 4),
    f("arm_convolve_1_x_n_s8", CONV, (1, 1), 4),
    f("arm_convolve_wrapper_s16", CONV, (2, 2), 0),
    f("arm_convolve_s16", CONV, (2, 2), 0),
    s4("arm_convolve_wrapper_s4", CONV),
    s4("arm_convolve_s4", CONV),
    s4("arm_convolve_even_s4", CONV),
    s4("arm_convolve_1x1_s4_fast", CONV),
    s4("arm_convolve_1x1_s4", CONV),
    s4("arm_convolve_1_x_n_s4", CONV),
    f(
        "arm_depthwise_conv_wrapper_s8",
        Family::Depthwise,
        (1, 1),
        4,
    ),
    f("arm_depthwise_conv_s8", Family::Depthwise, (1, 1), 4),
    f("arm_depthwise_conv_s8_opt", Family::Depthwise, (1, 1), 4),
    f("arm_depthwise_conv_3x3_s8", Family::Depthwise, (1, 1), 4),
    f(
        "arm_depthwise_conv_wrapper_s16",
        Family::Depthwise,
        (2, 2),
        8,
    ),
    f("arm_depthwise_conv_s16", Family::Depthwise, (2, 2), 8),
    f("arm_depthwise_conv_fast_s16", Family::Depthwise, (2, 2), 8),
    s4("arm_depthwise_conv_wrapper_s4", Family::Depthwise),
    s4("arm_depthwise_conv_s4", Family::Depthwise),
    s4("arm_depthwise_conv_s4_opt", Family::Depthwise),
    f("arm_fully_connected_wrapper_s8", FC, (1, 1), 4),
    f("arm_fully_connected_s8", FC, (1, 1), 4),
    f(
        "arm_fully_connected_per_channel_s8",
        Family::FullyConnected { per_channel: true },
        (1, 1),
        4,
    ),
    f("arm_fully_connected_s16", FC, (2, 2), 8),
    s4("arm_fully_connected_s4", FC),
    f("arm_avgpool_s8", AVG, (1, 1), 0),
    f("arm_avgpool_s16", AVG, (2, 2), 0),
    f("arm_max_pool_s8", MAX, (1, 1), 0),
    f("arm_max_pool_s16", MAX, (2, 2), 0),
    f("arm_softmax_s8", SOFTMAX, (1, 1), 0),
    f("arm_softmax_s8_s16", SOFTMAX, (1, 2), 0),
    f("arm_softmax_u8", SOFTMAX, (1, 1), 0),
    f("arm_softmax_s16", Family::Softmax { lut: true }, (2, 2), 0),
    f("arm_elementwise_add_s8", Family::Add, (1, 1), 0),
    f("arm_elementwise_add_s16", Family::Add, (2, 2), 0),
    f("arm_elementwise_mul_s8", Family::Mul, (1, 1), 0),
    f("arm_elementwise_mul_s16", Family::Mul, (2, 2), 0),
    f("arm_maximum_s8", Family::MinMax, (1, 1), 0),
    f("arm_minimum_s8", Family::MinMax, (1, 1), 0),
    f("arm_pad_s8", Family::Pad, (1, 1), 0),
    f(
        "arm_vector_sum_s8",
        Family::VectorSum { bias_arg: 6 },
        (1, 4),
        4,
    ),
    f(
        "arm_vector_sum_s8_s64",
        Family::VectorSum { bias_arg: 5 },
        (1, 8),
        8,
    ),
    f("arm_nn_activation_s16", Family::Activation, (2, 2), 0),
    f(
        "arm_svdf_s8",
        Family::Svdf {
            context: true,
            state_elem: 1,
        },
        (1, 1),
        4,
    ),
    f(
        "arm_svdf_state_s16_s8",
        Family::Svdf {
            context: false,
            state_elem: 2,
        },
        (1, 1),
        4,
    ),
    f("arm_lstm_unidirectional_s8", Family::Lstm, (1, 1), 4),
    f("arm_lstm_unidirectional_s16", Family::Lstm, (2, 2), 8),
    f(
        "arm_transpose_conv_wrapper_s8",
        Family::TransposeConv { wrapper: true },
        (1, 1),
        4,
    ),
    f(
        "arm_transpose_conv_s8",
        Family::TransposeConv { wrapper: false },
        (1, 1),
        4,
    ),
    f("arm_batch_matmul_s8", Family::BatchMatmul, (1, 1), 0),
    f("arm_batch_matmul_s16", Family::BatchMatmul, (2, 2), 0),
    f("arm_transpose_s8", Family::Transpose, (1, 1), 0),
    f("arm_concatenation_s8_x", concat(Axis::X), (1, 1), 0),
    f("arm_concatenation_s8_y", concat(Axis::Y), (1, 1), 0),
    f("arm_concatenation_s8_z", concat(Axis::Z), (1, 1), 0),
    f("arm_concatenation_s8_w", concat(Axis::W), (1, 1), 0),
    f("arm_reshape_s8", Family::Reshape, (1, 1), 0),
    f("arm_relu_q7", Family::Relu, (1, 1), 0),
    f("arm_relu6_s8", Family::Relu, (1, 1), 0),
    f("arm_relu_q15", Family::Relu, (2, 2), 0),
];

/// The concatenation family along `axis`.
const fn concat(axis: Axis) -> Family {
    Family::Concatenation { axis }
}

const FC: Family = Family::FullyConnected { per_channel: false };
const AVG: Family = Family::Pool { average: true };
const MAX: Family = Family::Pool { average: false };
const SOFTMAX: Family = Family::Softmax { lut: false };

/// One buffer of a call, as a `memtrace.h` layer would declare it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CallBuffer {
    pub role: Role,
    pub name: &'static str,
    pub base: u64,
    pub size: u64,
    pub elem_size: u32,
}

/// What a call is: its buffers, the argument structures it may read, its
/// shapes in words and, when it is one, its kernel-suite layer text.
#[derive(Clone, Debug, Default)]
pub(crate) struct CallLayer {
    pub op: &'static str,
    pub buffers: Vec<CallBuffer>,
    /// `(address, bytes)` of the argument structures (read, never buffers).
    pub structs: Vec<(u64, u64)>,
    /// `input=1x8x8x3,filter=…`: the shapes as the arguments give them.
    pub shapes: String,
    /// `ctx->buf` of each context argument (not NULL), declared as a
    /// buffer or not (a size function's 0 B leaves none to declare).
    pub scratch: Vec<u64>,
    /// The canonical layer text (docs/protocol.md section 6) for the
    /// configurations the kernel suite knows (int8 conv2d, depthwise,
    /// pools, fully connected, add); empty otherwise.
    pub spec: String,
}

/// The guest at a call's entry: its arguments and memory.
pub(crate) trait CallSite {
    /// Argument `i` (AAPCS: r0–r3, then the stack at entry).
    fn arg(&self, i: usize) -> u32;
    /// A word of guest memory.
    fn word(&self, address: u64) -> Option<u32>;
    /// Bytes from `address` to the end of the heap block holding it (a
    /// scratch buffer declared with `ctx.size = 0`).
    fn heap_block_rest(&self, address: u64) -> Option<u64>;
}

/// Reads the call of `api` at `site`, the structures of `layouts`: its
/// layer, or why it cannot be one (a NULL structure, a dimension that is
/// no shape).
pub(crate) fn read_call(
    api: &ApiFunction,
    site: &dyn CallSite,
    layouts: &ApiLayouts,
) -> Result<CallLayer, String> {
    let mut r = reader::Reader {
        site,
        layouts,
        layer: CallLayer::default(),
    };
    match api.family {
        Family::Conv { upscale } => families::conv(&mut r, api, upscale)?,
        Family::Depthwise => families::depthwise(&mut r, api)?,
        Family::FullyConnected { per_channel } => {
            families::fully_connected(&mut r, api, per_channel)?
        }
        Family::Pool { average } => families::pool(&mut r, api, average)?,
        Family::Softmax { lut } => families::softmax(&mut r, api, lut)?,
        Family::Add | Family::Mul => families::elementwise(&mut r, api)?,
        Family::MinMax => families::min_max(&mut r, api)?,
        Family::Pad => families::pad(&mut r, api)?,
        Family::VectorSum { bias_arg } => families::vector_sum(&mut r, api, bias_arg)?,
        Family::Activation => families::activation(&mut r, api),
        Family::Svdf {
            context,
            state_elem,
        } => recurrent::svdf(&mut r, api, context, state_elem)?,
        Family::Lstm => recurrent::lstm(&mut r, api)?,
        Family::TransposeConv { wrapper } => transform::transpose_conv(&mut r, api, wrapper)?,
        Family::BatchMatmul => transform::batch_matmul(&mut r, api)?,
        Family::Transpose => transform::transpose(&mut r, api)?,
        Family::Concatenation { axis } => copies::concatenation(&mut r, axis),
        Family::Reshape => copies::reshape(&mut r),
        Family::Relu => copies::relu(&mut r, api),
    }
    Ok(r.layer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    struct Fake {
        args: Vec<u32>,
        memory: HashMap<u64, u32>,
    }

    impl CallSite for Fake {
        fn arg(&self, i: usize) -> u32 {
            self.args.get(i).copied().unwrap_or(0)
        }
        fn word(&self, address: u64) -> Option<u32> {
            self.memory.get(&address).copied()
        }
        fn heap_block_rest(&self, _address: u64) -> Option<u64> {
            Some(100)
        }
    }

    fn put(memory: &mut HashMap<u64, u32>, at: u64, words: &[u32]) {
        for (i, w) in words.iter().enumerate() {
            memory.insert(at + 4 * i as u64, *w);
        }
    }

    #[test]
    fn a_convolution_declares_its_buffers_from_the_fields_the_kernel_reads() {
        let mut m = HashMap::new();
        put(&mut m, 0x100, &[0x9000, 0]); // ctx: buf, size 0 (the heap block)
                                          // Offsets, stride 1x1, padding 0x0, dilation 1x1, activation.
        put(
            &mut m,
            0x200,
            &[0, 0, 1, 1, 0, 0, 1, 1, -128i32 as u32, 127],
        );
        put(&mut m, 0x300, &[0xA000, 0xA100]); // quant
        put(&mut m, 0x400, &[1, 8, 8, 3]); // input n h w c
        put(&mut m, 0x500, &[0xDEAD_BEEF, 3, 3, 3]); // filter: n unset
        put(&mut m, 0x600, &[0xDEAD_BEEF, 6, 6, 4]); // output: n unset
        let site = Fake {
            args: vec![
                0x100, 0x200, 0x300, 0x400, 0x1000, 0x500, 0x2000, 0x700, 0x3000, 0x600, 0x4000,
            ],
            memory: m,
        };
        let api = API
            .iter()
            .find(|a| a.name == "arm_convolve_wrapper_s8")
            .unwrap();
        let layer = read_call(api, &site, &ApiLayouts::V7_0_0).unwrap();
        let sizes: Vec<(&str, u64, u64)> = layer
            .buffers
            .iter()
            .map(|b| (b.name, b.base, b.size))
            .collect();
        assert_eq!(
            sizes,
            vec![
                ("scratch", 0x9000, 100),
                ("multiplier", 0xA000, 16),
                ("shift", 0xA100, 16),
                ("input", 0x1000, 192),
                ("filter", 0x2000, 4 * 27),
                ("bias", 0x3000, 16),
                ("output", 0x4000, 144),
            ]
        );
        assert_eq!(
            layer.spec,
            "op=conv2d,dtype=int8,input=1x8x8x3,filter=4x3x3x3,output=1x6x6x4,stride=1x1,dilation=1x1,pad=0x0,padding=valid"
        );
    }

    fn api(name: &str) -> &'static ApiFunction {
        API.iter().find(|a| a.name == name).unwrap()
    }

    fn sizes(layer: &CallLayer) -> Vec<(&str, u64, u64)> {
        layer
            .buffers
            .iter()
            .map(|b| (b.name, b.base, b.size))
            .collect()
    }

    #[test]
    fn an_svdf_call_declares_state_weights_and_scratch_from_the_dims_it_reads() {
        let mut m = HashMap::new();
        put(&mut m, 0x100, &[0x9000, 0]); // ctx: the kernel sums, MVE only
        put(&mut m, 0x110, &[0x9100, 0]); // input_ctx
        put(&mut m, 0x120, &[0x9200, 0]); // output_ctx
        put(&mut m, 0x200, &[2, 0, 0, 0, 0, 0, 0]); // params: rank 2
        put(&mut m, 0x300, &[1, 2]); // input quant
        put(&mut m, 0x308, &[1, 2]); // output quant
        put(&mut m, 0x400, &[3, 7, 0xDEAD, 0xDEAD]); // input: n = 3, h = 7
        put(&mut m, 0x410, &[10, 0xDEAD, 0xDEAD, 0xDEAD]); // feature: n = 10
        put(&mut m, 0x420, &[0xDEAD, 4, 0xDEAD, 0xDEAD]); // time: h = 4
        let mut args = vec![0x100, 0x110, 0x120, 0x200, 0x300, 0x308, 0x400, 0x1000];
        // state_dims (unset), state, feature dims, feature weights, time
        // dims, time weights, bias dims (unset), bias, output dims, output.
        args.extend([
            0, 0x2000, 0x410, 0x3000, 0x420, 0x4000, 0, 0x5000, 0, 0x6000,
        ]);
        let site = Fake { args, memory: m };
        let layer = read_call(api("arm_svdf_s8"), &site, &ApiLayouts::V7_0_0).unwrap();
        // 3 batches, 7 inputs, 10 features, 4 time steps, 5 units.
        assert_eq!(
            sizes(&layer),
            vec![
                ("input", 0x1000, 21),
                ("state", 0x2000, 3 * 10 * 4),
                ("weights_feature", 0x3000, 70),
                ("weights_time", 0x4000, 40),
                ("bias", 0x5000, 5 * 4),
                ("output", 0x6000, 15),
                ("input_ctx", 0x9100, 3 * 10 * 4),
                ("output_ctx", 0x9200, 3 * 5 * 4),
            ]
        );
        assert!(layer.structs.contains(&(0x100, 8)), "ctx is read");
        // A rank the kernel would divide by is refused.
        let mut zero = site;
        zero.memory.insert(0x200, 0);
        assert!(read_call(api("arm_svdf_s8"), &zero, &ApiLayouts::V7_0_0).is_err());
    }

    #[test]
    fn an_lstm_call_declares_every_gate_and_its_context_from_its_parameters() {
        let mut m = HashMap::new();
        // time_major 0, batches 2, time steps 3, input 5, hidden 4, then
        // the other ten words of the header.
        let mut params = vec![0, 2, 3, 5, 4];
        params.extend([0; 10]);
        for gate in 0..4u32 {
            let a = 0x1000 * (gate + 1);
            params.extend([0, 0, a, a + 0x100, 0, 0, a + 0x200, a + 0x300, 0xBAD, 0]);
        }
        put(&mut m, 0x200, &params);
        put(&mut m, 0x400, &[0x8000, 0x8100, 0x8200]);
        let site = Fake {
            args: vec![0x500, 0x600, 0x200, 0x400],
            memory: m,
        };
        let layer = read_call(
            api("arm_lstm_unidirectional_s16"),
            &site,
            &ApiLayouts::V7_0_0,
        )
        .unwrap();
        let got = sizes(&layer);
        assert_eq!(got.len(), 2 + 16 + 3);
        assert_eq!(got[0], ("input", 0x500, 2 * 3 * 5 * 2));
        assert_eq!(got[1], ("output", 0x600, 2 * 3 * 4 * 2));
        // The output gate's arrays: int8 weights, int64 effective biases.
        assert_eq!(
            &got[14..18],
            &[
                ("output_gate.input_weights", 0x4000, 4 * 5),
                ("output_gate.input_effective_bias", 0x4100, 4 * 8),
                ("output_gate.hidden_weights", 0x4200, 4 * 4),
                ("output_gate.hidden_effective_bias", 0x4300, 4 * 8),
            ]
        );
        assert_eq!(got[20], ("cell_state", 0x8200, 2 * 4 * 2));
        assert!(
            got.iter().all(|b| b.1 != 0xBAD),
            "the gate's bias is never read"
        );
        assert_eq!(layer.shapes, "input=2x3x5,output=2x3x4,time_major=0");
        assert_eq!(layer.structs, vec![(0x200, 220), (0x400, 12)]);
    }

    #[test]
    fn a_transpose_conv_wrapper_declares_the_scratch_of_the_path_it_takes() {
        let mut m = HashMap::new();
        put(&mut m, 0x100, &[0x9000, 0]); // ctx
        put(&mut m, 0x110, &[0x9800, 0]); // reverse_conv_ctx
                                          // Offsets, stride (w, h) 2x2, padding 0x0, offsets, dilation, act.
        put(&mut m, 0x200, &[0, 0, 2, 2, 0, 0, 0, 0, 1, 1, 0, 0]);
        put(&mut m, 0x300, &[0xA000, 0xA100]);
        put(&mut m, 0x400, &[1, 3, 3, 17]); // input: 17 channels
        put(&mut m, 0x500, &[0xDEAD, 2, 2, 0xDEAD]); // filter: h, w only
        put(&mut m, 0x600, &[0xDEAD, 6, 6, 5]); // output
        let mut args = vec![0x100, 0x110, 0x200, 0x300, 0x400, 0x1000, 0x500];
        args.extend([0x2000, 0, 0x3000, 0x600, 0x4000]);
        let site = Fake { args, memory: m };
        let layer = read_call(
            api("arm_transpose_conv_wrapper_s8"),
            &site,
            &ApiLayouts::V7_0_0,
        )
        .unwrap();
        // Reverse path: im2col of 2·2·17 = 68 columns, two int16 copies.
        assert_eq!(
            sizes(&layer),
            vec![
                ("scratch", 0x9000, 2 * 68 * 2),
                ("reversed_filter", 0x9800, 5 * 2 * 2 * 17),
                ("multiplier", 0xA000, 20),
                ("shift", 0xA100, 20),
                ("input", 0x1000, 153),
                ("filter", 0x2000, 340),
                ("bias", 0x3000, 20),
                ("output", 0x4000, 180),
            ]
        );
        // The kernel itself: the rolling buffer, max(2, 2) rows of
        // ((3 − 1)·2 + 2)·5 words; output_ctx unread.
        let layer = read_call(api("arm_transpose_conv_s8"), &site, &ApiLayouts::V7_0_0).unwrap();
        assert_eq!(sizes(&layer)[0], ("scratch", 0x9000, 2 * 6 * 5 * 4));
        assert!(sizes(&layer).iter().all(|b| b.0 != "reversed_filter"));
    }

    #[test]
    fn a_batch_matmul_broadcasts_an_input_of_one_and_refuses_other_extents() {
        let mut m = HashMap::new();
        put(&mut m, 0x400, &[1, 3, 4, 0xDEAD]); // lhs: c unread
        put(&mut m, 0x410, &[2, 3, 5, 6]); // rhs
        put(&mut m, 0x420, &[2, 3, 0xDEAD, 0xDEAD]); // output
        let site = Fake {
            args: vec![0, 0x200, 0x300, 0x400, 0x1000, 0x410, 0x2000, 0x420, 0x3000],
            memory: m,
        };
        let layer = read_call(api("arm_batch_matmul_s16"), &site, &ApiLayouts::V7_0_0).unwrap();
        assert_eq!(
            sizes(&layer),
            vec![
                ("lhs", 0x1000, 3 * 4 * 6 * 2),
                ("rhs", 0x2000, 2 * 3 * 5 * 6 * 2),
                ("output", 0x3000, 2 * 3 * 4 * 5 * 2),
            ]
        );
        let mut bad = site;
        bad.memory.insert(0x400, 3); // lhs n 3 against rhs n 2
        assert!(read_call(api("arm_batch_matmul_s16"), &bad, &ApiLayouts::V7_0_0).is_err());
    }

    #[test]
    fn a_transpose_declares_the_output_its_permutation_reaches() {
        let mut m = HashMap::new();
        put(&mut m, 0x400, &[2, 3, 4, 5]);
        put(&mut m, 0x410, &[5, 4, 3, 2]); // NHWC reversed
        put(&mut m, 0x500, &[4, 0x600]);
        put(&mut m, 0x600, &[3, 2, 1, 0]);
        let site = Fake {
            args: vec![0x1000, 0x2000, 0x400, 0x410, 0x500],
            memory: m,
        };
        let layer = read_call(api("arm_transpose_s8"), &site, &ApiLayouts::V7_0_0).unwrap();
        assert_eq!(
            sizes(&layer),
            vec![("input", 0x1000, 120), ("output", 0x2000, 120)]
        );
        assert!(
            layer.structs.contains(&(0x600, 16)),
            "the permutation is read"
        );
        // An axis past the dimensions: the kernel returns an error.
        let mut bad = site;
        bad.memory.insert(0x600, 4);
        assert!(read_call(api("arm_transpose_s8"), &bad, &ApiLayouts::V7_0_0).is_err());
    }

    /// A call of `name` with arguments `args` and no memory.
    fn plain_call(name: &str, args: Vec<u32>) -> CallLayer {
        let site = Fake {
            args,
            memory: HashMap::new(),
        };
        read_call(api(name), &site, &ApiLayouts::V7_0_0).unwrap()
    }

    #[test]
    fn a_concatenation_declares_the_whole_output_tensor_along_its_axis() {
        // Input x 3, y 2, z 4, w 5; output extent 7 along the axis, offset 2.
        let io = |axis_extent| vec![0x1000, 3, 2, 4, 5, 0x2000, axis_extent, 2];
        for (name, output) in [
            ("arm_concatenation_s8_x", 7 * 2 * 4 * 5),
            ("arm_concatenation_s8_y", 3 * 7 * 4 * 5),
            ("arm_concatenation_s8_z", 3 * 2 * 7 * 5),
        ] {
            let layer = plain_call(name, io(7));
            assert_eq!(
                sizes(&layer),
                vec![("input", 0x1000, 120), ("output", 0x2000, output)],
                "{name}"
            );
            assert_eq!(api(name).stack_arguments(), 4);
        }
        // Only the half-word of a `uint16_t` counts.
        let high = plain_call("arm_concatenation_s8_x", io(0xABCD_0007));
        assert_eq!(sizes(&high)[1].2, 7 * 2 * 4 * 5);
        // W has no output extent: the tensor up to the block's end.
        let w = plain_call(
            "arm_concatenation_s8_w",
            vec![0x1000, 3, 2, 4, 5, 0x2000, 6],
        );
        assert_eq!(sizes(&w)[1], ("output", 0x2000, (6 + 5) * 24));
        assert_eq!(api("arm_concatenation_s8_w").stack_arguments(), 3);
        assert_eq!(w.shapes, "input=5x2x3x4,output=11x2x3x4,axis=w,offset=6");
    }

    #[test]
    fn a_relu_declares_its_one_buffer_as_input_and_output_in_place() {
        let layer = plain_call("arm_relu_q15", vec![0x3000, 0x1_0009]);
        assert_eq!(
            sizes(&layer),
            vec![("input", 0x3000, 18), ("output", 0x3000, 18)]
        );
        assert_eq!(layer.op, "relu");
        assert_eq!(plain_call("arm_relu6_s8", vec![0x3000, 9]).op, "relu6");
        // Reshape: `total_size` bytes each way.
        let copy = plain_call("arm_reshape_s8", vec![0x1000, 0x2000, 77]);
        assert_eq!(
            sizes(&copy),
            vec![("input", 0x1000, 77), ("output", 0x2000, 77)]
        );
        // A NULL buffer or an empty one is not declared.
        assert!(plain_call("arm_relu_q7", vec![0, 9]).buffers.is_empty());
        assert!(plain_call("arm_relu_q7", vec![0x3000, 0])
            .buffers
            .is_empty());
    }

    #[test]
    fn a_dimension_that_is_no_shape_is_refused() {
        let mut m = HashMap::new();
        put(&mut m, 0x400, &[0, 8, 8, 3]);
        let site = Fake {
            args: vec![0, 0, 0x400, 0x1000],
            memory: m,
        };
        let api = API.iter().find(|a| a.name == "arm_max_pool_s8").unwrap();
        assert!(read_call(api, &site, &ApiLayouts::V7_0_0).is_err());
    }
}
