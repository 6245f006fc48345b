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
//! Sizes come from the fields the kernels themselves read, never from ones
//! a caller may leave unset: CMSIS-NN's own unit tests set neither
//! `filter_dims.n` nor `output_dims.n` of a convolution, and pass a scratch
//! buffer with `ctx.size = 0` (its size is then the heap block it lies in).

use memtrace_abi::Role;

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
];

const FC: Family = Family::FullyConnected { per_channel: false };
const AVG: Family = Family::Pool { average: true };
const MAX: Family = Family::Pool { average: false };
const SOFTMAX: Family = Family::Softmax { lut: false };

/// Entries of `exp_lut` and `one_by_one_lut` of `arm_softmax_s16`
/// (arm_nnfunctions.h: 512 for the 9-bit index and one to interpolate).
const SOFTMAX_LUT_ENTRIES: u64 = 513;

/// A structure argument: where it is and how many bytes it has.
const DIMS_BYTES: u64 = 16;
const CONTEXT_BYTES: u64 = 8;
const CONV_PARAMS_BYTES: u64 = 40;
const DW_CONV_PARAMS_BYTES: u64 = 44;
const FC_PARAMS_BYTES: u64 = 20;
const POOL_PARAMS_BYTES: u64 = 24;
const QUANT_BYTES: u64 = 12;

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

/// `cmsis_nn_dims` as NHWC.
#[derive(Clone, Copy, Debug, Default)]
struct Dims {
    n: u64,
    h: u64,
    w: u64,
    c: u64,
}

impl Dims {
    fn volume(&self) -> u64 {
        self.n * self.h * self.w * self.c
    }
    fn text(&self) -> String {
        format!("{}x{}x{}x{}", self.n, self.h, self.w, self.c)
    }
}

/// A `(h, w)` pair of `cmsis_nn_tile`s.
type Tile = (u64, u64);

struct Reader<'a> {
    site: &'a dyn CallSite,
    layer: CallLayer,
}

/// Dimensions past this are taken as garbage (an unset field), not a shape.
const MAX_DIM: u32 = 1 << 16;

impl Reader<'_> {
    fn arg(&self, i: usize) -> u64 {
        self.site.arg(i) as u64
    }
    fn word(&self, at: u64, index: u64) -> Result<u32, String> {
        self.site
            .word(at + 4 * index)
            .ok_or_else(|| format!("argument structure at {at:#x} is not in guest memory"))
    }
    fn structure(&mut self, arg: usize, bytes: u64) -> Result<u64, String> {
        let at = self.arg(arg);
        if at == 0 {
            return Err(format!("argument {arg} is NULL"));
        }
        self.layer.structs.push((at, bytes));
        Ok(at)
    }
    /// The `cmsis_nn_dims` at argument `arg`, the fields named in `used`
    /// (of `nhwc`) read and checked, the others 1: callers leave the fields
    /// a kernel does not read unset (a convolution's filter and output `n`,
    /// a depthwise filter's `c`).
    fn dims(&mut self, arg: usize, used: &str) -> Result<Dims, String> {
        let at = self.structure(arg, DIMS_BYTES)?;
        let field = |i: u64| -> Result<u64, String> {
            if !used.contains(["n", "h", "w", "c"][i as usize]) {
                return Ok(1);
            }
            let v = self.word(at, i)?;
            if v == 0 || v > MAX_DIM {
                return Err(format!(
                    "argument {arg}: dimension {} is {} (not a shape)",
                    ["n", "h", "w", "c"][i as usize],
                    v as i32
                ));
            }
            Ok(v as u64)
        };
        Ok(Dims {
            n: field(0)?,
            h: field(1)?,
            w: field(2)?,
            c: field(3)?,
        })
    }
    /// `(h, w)` of the tile at word `index` (`cmsis_nn_tile` is `w, h`).
    fn tile(&self, at: u64, index: u64) -> Result<Tile, String> {
        Ok((
            self.word(at, index + 1)? as u64,
            self.word(at, index)? as u64,
        ))
    }
    fn buffer(&mut self, role: Role, name: &'static str, base: u64, size: u64, elem: u32) {
        if base != 0 && size > 0 {
            self.layer.buffers.push(CallBuffer {
                role,
                name,
                base,
                size,
                elem_size: elem,
            });
        }
    }
    /// The scratch buffer of the context at argument `arg`.
    fn context(&mut self, arg: usize) -> Result<(), String> {
        let at = self.arg(arg);
        if at == 0 {
            return Ok(());
        }
        self.layer.structs.push((at, CONTEXT_BYTES));
        let buf = self.word(at, 0)? as u64;
        // The heap block first: callers leave `ctx.size` unset (CMSIS-NN's
        // own tests do) since no kernel reads it.
        let size = match self.site.heap_block_rest(buf) {
            Some(rest) => rest,
            None => (self.word(at, 1)? as i32).max(0) as u64,
        };
        self.buffer(Role::Scratch, "scratch", buf, size, 1);
        Ok(())
    }
    /// Per-channel multipliers and shifts of `channels` output channels.
    fn per_channel(&mut self, arg: usize, channels: u64) -> Result<(), String> {
        let at = self.structure(arg, 8)?;
        let (mult, shift) = (self.word(at, 0)? as u64, self.word(at, 1)? as u64);
        self.buffer(Role::Weights, "multiplier", mult, 4 * channels, 4);
        self.buffer(Role::Weights, "shift", shift, 4 * channels, 4);
        Ok(())
    }
    /// The bias of `channels` outputs at argument `arg`.
    fn bias(&mut self, arg: usize, elem: u32, channels: u64) -> Result<(), String> {
        let at = self.arg(arg);
        if elem > 0 {
            self.buffer(Role::Bias, "bias", at, elem as u64 * channels, elem);
            return Ok(());
        }
        // `cmsis_nn_bias_data`: the data and whether it is int32 (else int64).
        if at == 0 {
            return Ok(());
        }
        self.layer.structs.push((at, 8));
        let data = self.word(at, 0)? as u64;
        let int32 = self.word(at, 1)? & 0xFF != 0;
        let elem = if int32 { 4 } else { 8 };
        self.buffer(Role::Bias, "bias", data, elem as u64 * channels, elem);
        Ok(())
    }
}

fn filter_bytes(api: &ApiFunction, weights: u64) -> u64 {
    if api.packed {
        weights.div_ceil(2)
    } else {
        weights
    }
}

/// The spec's dtype, when the suite has one for this function.
fn spec_dtype(api: &ApiFunction) -> Option<&'static str> {
    (api.input_elem == 1 && api.output_elem == 1 && !api.packed && !api.name.ends_with("u8"))
        .then_some("int8")
}

/// `same` when the explicit padding is not zero, else `valid`; the spec's
/// own rules check that the output shape agrees.
fn padding_word(pad: Tile) -> &'static str {
    if pad == (0, 0) {
        "valid"
    } else {
        "same"
    }
}

/// Reads the call of `api` at `site`: its layer, or why it cannot be one
/// (a NULL structure, a dimension that is no shape).
pub(crate) fn read_call(api: &ApiFunction, site: &dyn CallSite) -> Result<CallLayer, String> {
    let mut r = Reader {
        site,
        layer: CallLayer::default(),
    };
    match api.family {
        Family::Conv { upscale } => conv(&mut r, api, upscale)?,
        Family::Depthwise => depthwise(&mut r, api)?,
        Family::FullyConnected { per_channel } => fully_connected(&mut r, api, per_channel)?,
        Family::Pool { average } => pool(&mut r, api, average)?,
        Family::Softmax { lut } => softmax(&mut r, api, lut)?,
        Family::Add | Family::Mul => elementwise(&mut r, api)?,
        Family::MinMax => min_max(&mut r, api)?,
        Family::Pad => pad(&mut r, api)?,
        Family::VectorSum { bias_arg } => vector_sum(&mut r, api, bias_arg)?,
        Family::Activation => activation(&mut r, api),
    }
    Ok(r.layer)
}

fn conv(r: &mut Reader<'_>, api: &ApiFunction, upscale: bool) -> Result<(), String> {
    r.layer.op = "conv2d";
    r.context(0)?;
    let params = r.structure(1, CONV_PARAMS_BYTES)?;
    let stride = r.tile(params, 2)?;
    let pad = r.tile(params, 4)?;
    let dilation = r.tile(params, 6)?;
    let input = r.dims(3, "nhwc")?;
    // Only the grouped kernels read the filter's channels; the others
    // take the input's.
    let grouped = matches!(api.name, "arm_convolve_s8" | "arm_convolve_wrapper_s8");
    let filter = r.dims(5, if grouped { "hwc" } else { "hw" })?;
    let out_at = if upscale { 10 } else { 9 };
    if upscale && r.arg(9) != 0 {
        r.structure(9, DIMS_BYTES)?;
    }
    let output = r.dims(out_at, "hwc")?;
    r.per_channel(2, output.c)?;
    let filter = Dims {
        n: output.c,
        c: if grouped { filter.c } else { input.c },
        ..filter
    };
    let output = Dims {
        n: input.n,
        ..output
    };
    r.buffer(
        Role::Input,
        "input",
        r.arg(4),
        input.volume() * api.input_elem as u64,
        api.input_elem,
    );
    r.buffer(
        Role::Weights,
        "filter",
        r.arg(6),
        filter_bytes(api, filter.volume()),
        1,
    );
    r.bias(8, api.bias_elem, output.c)?;
    r.buffer(
        Role::Output,
        "output",
        r.arg(out_at + 1),
        output.volume() * api.output_elem as u64,
        api.output_elem,
    );
    r.layer.shapes = format!(
        "input={},filter={},output={},stride={}x{},dilation={}x{},pad={}x{}",
        input.text(),
        filter.text(),
        output.text(),
        stride.0,
        stride.1,
        dilation.0,
        dilation.1,
        pad.0,
        pad.1
    );
    if let Some(dtype) = spec_dtype(api) {
        r.layer.spec = format!(
            "op=conv2d,dtype={dtype},{},padding={}",
            r.layer.shapes,
            padding_word(pad)
        );
    }
    Ok(())
}

fn depthwise(r: &mut Reader<'_>, api: &ApiFunction) -> Result<(), String> {
    r.layer.op = "depthwise_conv2d";
    r.context(0)?;
    let params = r.structure(1, DW_CONV_PARAMS_BYTES)?;
    let multiplier = r.word(params, 2)? as u64;
    let stride = r.tile(params, 3)?;
    let pad = r.tile(params, 5)?;
    let dilation = r.tile(params, 7)?;
    let input = r.dims(3, "nhwc")?;
    let filter = r.dims(5, "hw")?;
    let output = r.dims(9, "hwc")?;
    r.per_channel(2, output.c)?;
    let filter = Dims {
        n: 1,
        c: output.c,
        ..filter
    };
    let output = Dims {
        n: input.n,
        ..output
    };
    r.buffer(
        Role::Input,
        "input",
        r.arg(4),
        input.volume() * api.input_elem as u64,
        api.input_elem,
    );
    r.buffer(
        Role::Weights,
        "filter",
        r.arg(6),
        filter_bytes(api, filter.volume()),
        1,
    );
    r.bias(8, api.bias_elem, output.c)?;
    r.buffer(
        Role::Output,
        "output",
        r.arg(10),
        output.volume() * api.output_elem as u64,
        api.output_elem,
    );
    r.layer.shapes = format!(
        "input={},filter={},output={},stride={}x{},dilation={}x{},pad={}x{},depth_multiplier={multiplier}",
        input.text(),
        filter.text(),
        output.text(),
        stride.0,
        stride.1,
        dilation.0,
        dilation.1,
        pad.0,
        pad.1
    );
    if let Some(dtype) = spec_dtype(api) {
        r.layer.spec = format!(
            "op=depthwise_conv2d,dtype={dtype},{},padding={}",
            r.layer.shapes,
            padding_word(pad)
        );
    }
    Ok(())
}

fn fully_connected(r: &mut Reader<'_>, api: &ApiFunction, per_channel: bool) -> Result<(), String> {
    r.layer.op = "fully_connected";
    r.context(0)?;
    r.structure(1, FC_PARAMS_BYTES)?;
    let input = r.dims(3, "nhwc")?;
    let batches = input.n;
    let (filter_at, output_at) = (r.structure(5, DIMS_BYTES)?, r.structure(9, DIMS_BYTES)?);
    let depth = r.word(filter_at, 0)? as u64;
    let units = r.word(output_at, 3)? as u64;
    if depth == 0 || units == 0 || depth > MAX_DIM as u64 || units > MAX_DIM as u64 {
        return Err(format!(
            "filter_dims.n {depth} or output_dims.c {units} is not a shape"
        ));
    }
    if per_channel {
        r.per_channel(2, units)?;
    } else if api.name.contains("wrapper") {
        // `cmsis_nn_quant_params`: pointers, per channel or to one value.
        let at = r.structure(2, QUANT_BYTES)?;
        let channels = if r.word(at, 2)? != 0 { units } else { 1 };
        r.per_channel(2, channels)?;
    } else {
        r.structure(2, 8)?;
    }
    r.buffer(
        Role::Input,
        "input",
        r.arg(4),
        batches * depth * api.input_elem as u64,
        api.input_elem,
    );
    r.buffer(
        Role::Weights,
        "filter",
        r.arg(6),
        filter_bytes(api, depth * units),
        1,
    );
    r.bias(8, api.bias_elem, units)?;
    r.buffer(
        Role::Output,
        "output",
        r.arg(10),
        batches * units * api.output_elem as u64,
        api.output_elem,
    );
    r.layer.shapes = format!(
        "input=1x1x{batches}x{depth},filter=1x1x{units}x{depth},output=1x1x{batches}x{units}"
    );
    if let Some(dtype) = spec_dtype(api) {
        r.layer.spec = format!("op=fully_connected,dtype={dtype},{}", r.layer.shapes);
    }
    Ok(())
}

fn pool(r: &mut Reader<'_>, api: &ApiFunction, average: bool) -> Result<(), String> {
    r.layer.op = if average { "average_pool" } else { "max_pool" };
    r.context(0)?;
    let params = r.structure(1, POOL_PARAMS_BYTES)?;
    let stride = r.tile(params, 0)?;
    let pad = r.tile(params, 2)?;
    let input = r.dims(2, "nhwc")?;
    let at = r.structure(4, DIMS_BYTES)?;
    let (kh, kw) = (r.word(at, 1)? as u64, r.word(at, 2)? as u64);
    let output = r.dims(5, "hw")?;
    let output = Dims {
        n: input.n,
        c: input.c,
        ..output
    };
    r.buffer(
        Role::Input,
        "input",
        r.arg(3),
        input.volume() * api.input_elem as u64,
        api.input_elem,
    );
    r.buffer(
        Role::Output,
        "output",
        r.arg(6),
        output.volume() * api.output_elem as u64,
        api.output_elem,
    );
    r.layer.shapes = format!(
        "input={},filter=1x{kh}x{kw}x1,output={},stride={}x{},dilation=1x1,pad={}x{}",
        input.text(),
        output.text(),
        stride.0,
        stride.1,
        pad.0,
        pad.1
    );
    if let Some(dtype) = spec_dtype(api) {
        r.layer.spec = format!(
            "op={},dtype={dtype},{},padding={}",
            r.layer.op,
            r.layer.shapes,
            padding_word(pad)
        );
    }
    Ok(())
}

fn softmax(r: &mut Reader<'_>, api: &ApiFunction, lut: bool) -> Result<(), String> {
    r.layer.op = "softmax";
    let (rows, row) = (r.arg(1), r.arg(2));
    let elements = rows * row;
    r.buffer(
        Role::Input,
        "input",
        r.arg(0),
        elements * api.input_elem as u64,
        api.input_elem,
    );
    r.buffer(
        Role::Output,
        "output",
        r.arg(6),
        elements * api.output_elem as u64,
        api.output_elem,
    );
    if lut {
        let at = r.structure(5, 8)?;
        let (exp, one) = (r.word(at, 0)? as u64, r.word(at, 1)? as u64);
        r.buffer(Role::Weights, "exp_lut", exp, 2 * SOFTMAX_LUT_ENTRIES, 2);
        r.buffer(
            Role::Weights,
            "one_by_one_lut",
            one,
            2 * SOFTMAX_LUT_ENTRIES,
            2,
        );
    }
    r.layer.shapes = format!("input=1x1x{rows}x{row},output=1x1x{rows}x{row}");
    Ok(())
}

fn elementwise(r: &mut Reader<'_>, api: &ApiFunction) -> Result<(), String> {
    let (output, size) = match api.family {
        Family::Add => (9, 15),
        _ => (4, 10),
    };
    r.layer.op = if api.family == Family::Add {
        "add"
    } else {
        "mul"
    };
    let n = r.arg(size);
    let bytes = n * api.input_elem as u64;
    r.buffer(Role::Input, "input1", r.arg(0), bytes, api.input_elem);
    r.buffer(Role::Input, "input2", r.arg(1), bytes, api.input_elem);
    r.buffer(
        Role::Output,
        "output",
        r.arg(output),
        n * api.output_elem as u64,
        api.output_elem,
    );
    r.layer.shapes = format!("input=1x1x1x{n},output=1x1x1x{n}");
    if api.family == Family::Add {
        if let Some(dtype) = spec_dtype(api) {
            r.layer.spec = format!("op=add,dtype={dtype},{}", r.layer.shapes);
        }
    }
    Ok(())
}

fn min_max(r: &mut Reader<'_>, api: &ApiFunction) -> Result<(), String> {
    r.layer.op = if api.name.contains("max") {
        "maximum"
    } else {
        "minimum"
    };
    r.context(0)?;
    let (a, b, o) = (r.dims(2, "nhwc")?, r.dims(4, "nhwc")?, r.dims(6, "nhwc")?);
    r.buffer(Role::Input, "input1", r.arg(1), a.volume(), 1);
    r.buffer(Role::Input, "input2", r.arg(3), b.volume(), 1);
    r.buffer(Role::Output, "output", r.arg(5), o.volume(), 1);
    r.layer.shapes = format!("input={},input2={},output={}", a.text(), b.text(), o.text());
    Ok(())
}

fn pad(r: &mut Reader<'_>, _api: &ApiFunction) -> Result<(), String> {
    r.layer.op = "pad";
    let input = r.dims(3, "nhwc")?;
    let word = |r: &mut Reader<'_>, arg: usize| -> Result<[u64; 4], String> {
        let at = r.structure(arg, DIMS_BYTES)?;
        let mut out = [0; 4];
        for (i, v) in out.iter_mut().enumerate() {
            *v = r.word(at, i as u64)? as u64;
        }
        Ok(out)
    };
    let (before, after) = (word(r, 4)?, word(r, 5)?);
    let dims = [input.n, input.h, input.w, input.c];
    let out: Vec<u64> = (0..4).map(|i| dims[i] + before[i] + after[i]).collect();
    r.buffer(Role::Input, "input", r.arg(0), input.volume(), 1);
    r.buffer(Role::Output, "output", r.arg(1), out.iter().product(), 1);
    r.layer.shapes = format!(
        "input={},output={}x{}x{}x{}",
        input.text(),
        out[0],
        out[1],
        out[2],
        out[3]
    );
    Ok(())
}

fn vector_sum(r: &mut Reader<'_>, api: &ApiFunction, bias_arg: usize) -> Result<(), String> {
    r.layer.op = "vector_sum";
    let (cols, rows) = (r.arg(1), r.arg(2));
    r.buffer(Role::Weights, "weights", r.arg(3), cols * rows, 1);
    r.bias(bias_arg, api.bias_elem, rows)?;
    r.buffer(
        Role::Output,
        "sums",
        r.arg(0),
        rows * api.output_elem as u64,
        api.output_elem,
    );
    r.layer.shapes = format!("weights=1x1x{rows}x{cols},output=1x1x1x{rows}");
    Ok(())
}

fn activation(r: &mut Reader<'_>, api: &ApiFunction) {
    r.layer.op = "activation";
    let n = r.arg(2);
    r.buffer(
        Role::Input,
        "input",
        r.arg(0),
        n * api.input_elem as u64,
        api.input_elem,
    );
    r.buffer(
        Role::Output,
        "output",
        r.arg(1),
        n * api.output_elem as u64,
        api.output_elem,
    );
    r.layer.shapes = format!("input=1x1x1x{n},output=1x1x1x{n}");
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
        let layer = read_call(api, &site).unwrap();
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

    #[test]
    fn a_dimension_that_is_no_shape_is_refused() {
        let mut m = HashMap::new();
        put(&mut m, 0x400, &[0, 8, 8, 3]);
        let site = Fake {
            args: vec![0, 0, 0x400, 0x1000],
            memory: m,
        };
        let api = API.iter().find(|a| a.name == "arm_max_pool_s8").unwrap();
        assert!(read_call(api, &site).is_err());
    }
}
