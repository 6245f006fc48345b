// kernels_cmsis.cc — the kernel library of suite-cmsis.elf: Arm CMSIS-NN,
// called the way TensorFlow Lite Micro's CMSIS-NN kernels
// (tensorflow/lite/micro/kernels/cmsis_nn/*.cc) call it.
//
// CMSIS-NN is compiled from CMSIS_NN_DIR into a static library per target
// (see the Makefile). Which of its code paths runs is decided by the compiler
// flags: on Cortex-M4 (__ARM_FEATURE_DSP) its headers define ARM_MATH_DSP and
// the SIMD paths run; on x86-64 the pure C paths run. The plain
// *_get_buffer_size functions follow the same flags, so they size the scratch
// buffer for the code that actually runs (TFLM calls them the same way; the
// _dsp / _mve variants exist for sizing on a host for another target).
//
// int8 layers of these ops run through CMSIS-NN:
//   conv2d            arm_convolve_wrapper_s8 (picks 1x1 / 1xN / generic itself)
//   depthwise_conv2d  arm_depthwise_conv_wrapper_s8 (3x3 / opt / generic)
//   fully_connected   arm_fully_connected_s8
//   max_pool          arm_max_pool_s8
//   average_pool      arm_avgpool_s8
//   add               arm_elementwise_add_s8
//   transpose_conv    arm_transpose_conv_wrapper_s8 (two scratch buffers, as
//                     TFLM's CMSIS-NN TRANSPOSE_CONV requests them); on
//                     v5.0.0 / v6.0.0 arm_transpose_conv_s8 (its scratch and
//                     an int32 output image, as TFLM requested them then)
//   pad               arm_pad_s8 (TFLM's CMSIS-NN PAD)
//   concatenation     arm_concatenation_s8_{x,y,z,w}, once per input, as the
//                     library documents (TFLM has no CMSIS-NN CONCATENATION:
//                     a TFLM build runs the reference kernel)
// Everything else keeps the TFLM reference kernel of kernels.cc: every f32
// layer (TFLM's CMSIS-NN kernels fall back to the reference ones for float
// too), relu (TFLM has no CMSIS-NN activation kernel) and matmul (written for
// memtrace, not a TFLM op). The suite has no softmax layer.
//
// Releases: every CMSIS-NN release from v4.0.0 to the development head builds.
// The Makefile probes the headers (cmsis-nn/probe.sh) and the glue calls each
// function in the form that release declares (cmsis_nn_features.h). A layer
// whose function the release does not have runs the TFLM reference kernel, as
// a TFLM build with that release did, and the trace names that kernel
// (library `TFLM reference`) instead of a CMSIS-NN one:
//   arm_pad_s8                     not in v4.0.0, v5.0.0, v6.0.0 (pad)
//   arm_transpose_conv_s8          not in v4.0.0 (transpose_conv)
//
// Each CMSIS-NN layer has its own non-inlined function, so a traced PC in the
// call resolves to a readable name; the library's own functions (arm_*) keep
// their names and file:line from their objects' DWARF.
#include "arm_nnfunctions.h"
#include "cmsis_nn_features.h"  // generated per checkout by cmsis-nn/probe.sh
#include "../cmsis-nn/pool_batches.h"
#include "suite.h"

#define MEMTRACE_KERNEL __attribute__((noinline))

namespace memtrace {
namespace {

bool int8_library_op(const Layer &l) {
    if (l.dtype != DTYPE_INT8) {
        return false;
    }
    switch (l.op) {
        case OP_CONV2D:
        case OP_DEPTHWISE_CONV2D:
        case OP_FULLY_CONNECTED:
        case OP_MAX_POOL:
        case OP_AVERAGE_POOL:
        case OP_ADD:
            return true;
        case OP_TRANSPOSE_CONV:
            // Not in this release (v4.x): the reference kernel runs.
            return MEMTRACE_CMSIS_NN_TRANSPOSE_CONV != 0;
        case OP_PAD:
            // arm_pad_s8 is not in releases before v7.0.0.
            return MEMTRACE_CMSIS_NN_PAD != 0;
        case OP_CONCATENATION:
            // The library takes every dimension as uint16_t.
            for (int i = 0; i < 4; ++i) {
                if (l.output[i] > 0xFFFF) {
                    return false;
                }
            }
            return true;
        default:
            return false;
    }
}

cmsis_nn_dims dims(int32_t n, int32_t h, int32_t w, int32_t c) {
    cmsis_nn_dims d;
    d.n = n;
    d.h = h;
    d.w = w;
    d.c = c;
    return d;
}

cmsis_nn_dims dims4(const int32_t *s) { return dims(s[0], s[1], s[2], s[3]); }

cmsis_nn_tile tile(int32_t h, int32_t w) {
    cmsis_nn_tile t;
    t.h = h;
    t.w = w;
    return t;
}

cmsis_nn_activation activation(const Quant &q) {
    cmsis_nn_activation a;
    a.min = q.act_min;
    a.max = q.act_max;
    return a;
}

cmsis_nn_context context(const Buffers &b) {
    cmsis_nn_context ctx;
    // TFLM leaves size 0 ("unused" by the library); the real size costs
    // nothing and is right should a release start reading it.
    ctx.buf = b.scratch;
    ctx.size = static_cast<int32_t>(b.scratch_bytes);
    return ctx;
}

// ---- conv2d -------------------------------------------------------------
// TFLM: input [N, H, W, C_in], filter [C_out, KH, KW, C_in], bias [C_out],
// per-channel multipliers and shifts, PaddingValues as the padding. Quant
// may be empty (scratch sizing): the size does not depend on the offsets or
// the activation range.

cmsis_nn_conv_params conv_params(const Layer &l, const Quant &q) {
    cmsis_nn_conv_params p;
    p.input_offset = -q.input_zero_point;
    p.output_offset = q.output_zero_point;
    p.stride = tile(l.stride_h, l.stride_w);
    p.padding = tile(l.pad_h, l.pad_w);
    p.dilation = tile(l.dilation_h, l.dilation_w);
    p.activation = activation(q);
    return p;
}

int32_t conv2d_scratch(const Layer &l) {
    const Quant q = {};
    const cmsis_nn_conv_params p = conv_params(l, q);
    const cmsis_nn_dims in = dims4(l.input), f = dims4(l.filter), out = dims4(l.output);
    return arm_convolve_wrapper_s8_get_buffer_size(&p, &in, &f, &out);
}

MEMTRACE_KERNEL arm_cmsis_nn_status conv2d_int8(const Layer &l, const Buffers &b, const Quant &q) {
    const cmsis_nn_context ctx = context(b);
    const cmsis_nn_conv_params p = conv_params(l, q);
    // The struct's pointers are not const; the library only reads them.
    cmsis_nn_per_channel_quant_params quant;
    quant.multiplier = const_cast<int32_t *>(q.channel_multiplier);
    quant.shift = const_cast<int32_t *>(q.channel_shift);
    const cmsis_nn_dims in = dims4(l.input), f = dims4(l.filter), out = dims4(l.output);
    const cmsis_nn_dims bias = dims(1, 1, 1, l.output[3]);
    return arm_convolve_wrapper_s8(&ctx, &p, &quant, &in, static_cast<const int8_t *>(b.input), &f,
                                   static_cast<const int8_t *>(b.filter), &bias,
                                   static_cast<const int32_t *>(b.bias), &out,
                                   static_cast<int8_t *>(b.output));
}

// ---- depthwise_conv2d ---------------------------------------------------
// TFLM: filter dims [1, KH, KW, C_out], ch_mult = depth multiplier. (TFLM's
// Prepare fills only padding and dilation before asking for the buffer size;
// here every field is set, which gives the same size.)

cmsis_nn_dw_conv_params depthwise_params(const Layer &l, const Quant &q) {
    cmsis_nn_dw_conv_params p;
    p.input_offset = -q.input_zero_point;
    p.output_offset = q.output_zero_point;
    p.ch_mult = l.depth_multiplier;
    p.stride = tile(l.stride_h, l.stride_w);
    p.padding = tile(l.pad_h, l.pad_w);
    p.dilation = tile(l.dilation_h, l.dilation_w);
    p.activation = activation(q);
    return p;
}

int32_t depthwise_conv2d_scratch(const Layer &l) {
    const Quant q = {};
    const cmsis_nn_dw_conv_params p = depthwise_params(l, q);
    const cmsis_nn_dims in = dims4(l.input), f = dims4(l.filter), out = dims4(l.output);
    return arm_depthwise_conv_wrapper_s8_get_buffer_size(&p, &in, &f, &out);
}

MEMTRACE_KERNEL arm_cmsis_nn_status depthwise_conv2d_int8(const Layer &l, const Buffers &b,
                                                          const Quant &q) {
    const cmsis_nn_context ctx = context(b);
    const cmsis_nn_dw_conv_params p = depthwise_params(l, q);
    cmsis_nn_per_channel_quant_params quant;
    quant.multiplier = const_cast<int32_t *>(q.channel_multiplier);
    quant.shift = const_cast<int32_t *>(q.channel_shift);
    const cmsis_nn_dims in = dims4(l.input), f = dims4(l.filter), out = dims4(l.output);
    const cmsis_nn_dims bias = dims(1, 1, 1, l.output[3]);
    return arm_depthwise_conv_wrapper_s8(&ctx, &p, &quant, &in,
                                         static_cast<const int8_t *>(b.input), &f,
                                         static_cast<const int8_t *>(b.filter), &bias,
                                         static_cast<const int32_t *>(b.bias), &out,
                                         static_cast<int8_t *>(b.output));
}

// ---- fully_connected ----------------------------------------------------
// The suite's layer is TFLite's FULLY_CONNECTED with a 2-D output [batches,
// units] (the mailbox's 4-D shapes are only memtrace's padding, and
// kernels.cc gives the reference kernel 2-D shapes too). For that, TFLM calls
// arm_fully_connected_s8 (its 1x1-convolution path is only for outputs of
// more than 2 dimensions). CMSIS-NN's filter dims are [accum depth, 1, 1,
// units]. The buffer size is non-zero only on Helium (MVE) builds, where the
// library expects the filter's kernel sums in it: TFLM then computes them
// with arm_vector_sum_s8 before the call (in Prepare for constant filters,
// else in Eval; here in the call, as the suite's filter is an arena buffer).

cmsis_nn_dims fc_filter_dims(const Layer &l) { return dims(l.filter[3], 1, 1, l.filter[2]); }

int32_t fully_connected_scratch(const Layer &l) {
    const cmsis_nn_dims f = fc_filter_dims(l);
    return arm_fully_connected_s8_get_buffer_size(&f);
}

MEMTRACE_KERNEL arm_cmsis_nn_status fully_connected_int8(const Layer &l, const Buffers &b,
                                                         const Quant &q) {
    const int32_t batches = l.output[2], units = l.filter[2], depth = l.filter[3];
    const cmsis_nn_context ctx = context(b);
    cmsis_nn_fc_params p;
    p.input_offset = -q.input_zero_point;
    p.filter_offset = 0;  // symmetric int8 weights
    p.output_offset = q.output_zero_point;
    p.activation = activation(q);
    cmsis_nn_per_tensor_quant_params quant;
    quant.multiplier = q.output_multiplier;
    quant.shift = q.output_shift;
    const cmsis_nn_dims in = dims(batches, 1, 1, depth), f = fc_filter_dims(l);
    const cmsis_nn_dims bias = dims(1, 1, 1, units), out = dims(batches, 1, 1, units);
#if MEMTRACE_CMSIS_NN_VECTOR_SUM_ARGS != 0
    // (v4.x has no kernel sums: its Helium kernel takes no buffer.)
    if (b.scratch) {
        int32_t *sums = static_cast<int32_t *>(b.scratch);
        const int8_t *filter = static_cast<const int8_t *>(b.filter);
#if MEMTRACE_CMSIS_NN_VECTOR_SUM_ARGS == 7
        const arm_cmsis_nn_status s =
            arm_vector_sum_s8(sums, depth, units, filter, p.input_offset, p.filter_offset,
                              static_cast<const int32_t *>(b.bias));
#elif MEMTRACE_CMSIS_NN_VECTOR_SUM_ARGS == 6
        const arm_cmsis_nn_status s = arm_vector_sum_s8(sums, depth, units, filter, p.input_offset,
                                                        static_cast<const int32_t *>(b.bias));
#else
        const arm_cmsis_nn_status s = arm_vector_sum_s8(sums, depth, units, filter);
#endif
        if (s != ARM_CMSIS_NN_SUCCESS) {
            return s;
        }
    }
#endif
    return arm_fully_connected_s8(&ctx, &p, &quant, &in, static_cast<const int8_t *>(b.input), &f,
                                  static_cast<const int8_t *>(b.filter), &bias,
                                  static_cast<const int32_t *>(b.bias), &out,
                                  static_cast<int8_t *>(b.output));
}

// ---- pools --------------------------------------------------------------
// TFLM passes batch 1 (its pooling tensors have one batch); the library loops
// over batches, so the suite passes N and stays correct for N > 1.

cmsis_nn_pool_params pool_params(const Layer &l, const Quant &q) {
    cmsis_nn_pool_params p;
    p.stride = tile(l.stride_h, l.stride_w);
    p.padding = tile(l.pad_h, l.pad_w);
    p.activation = activation(q);
    return p;
}

int32_t average_pool_scratch(const Layer &l) {
    return arm_avgpool_s8_get_buffer_size(l.output[2], l.input[3]);
}

MEMTRACE_KERNEL arm_cmsis_nn_status max_pool_int8(const Layer &l, const Buffers &b,
                                                  const Quant &q) {
    const cmsis_nn_context ctx = context(b);
    const cmsis_nn_pool_params p = pool_params(l, q);
    const cmsis_nn_dims in = dims4(l.input), out = dims4(l.output);
    const cmsis_nn_dims f = dims(1, l.filter[1], l.filter[2], 1);
    return pool_batches(
        [&](const cmsis_nn_dims &i, const int8_t *src, const cmsis_nn_dims &o, int8_t *dst) {
            return arm_max_pool_s8(&ctx, &p, &i, src, &f, &o, dst);
        },
        in, static_cast<const int8_t *>(b.input), out, static_cast<int8_t *>(b.output));
}

MEMTRACE_KERNEL arm_cmsis_nn_status average_pool_int8(const Layer &l, const Buffers &b,
                                                      const Quant &q) {
    const cmsis_nn_context ctx = context(b);
    const cmsis_nn_pool_params p = pool_params(l, q);
    const cmsis_nn_dims in = dims4(l.input), out = dims4(l.output);
    const cmsis_nn_dims f = dims(1, l.filter[1], l.filter[2], 1);
    return pool_batches(
        [&](const cmsis_nn_dims &i, const int8_t *src, const cmsis_nn_dims &o, int8_t *dst) {
            return arm_avgpool_s8(&ctx, &p, &i, src, &f, &o, dst);
        },
        in, static_cast<const int8_t *>(b.input), out, static_cast<int8_t *>(b.output));
}

// ---- add ----------------------------------------------------------------
// TFLM: both inputs of one shape (no broadcast), left shift 20, the flat
// element count as the block size.

MEMTRACE_KERNEL arm_cmsis_nn_status add_int8(const Layer &l, const Buffers &b, const Quant &q) {
    const int32_t n = l.input[0] * l.input[1] * l.input[2] * l.input[3];
    return arm_elementwise_add_s8(
        static_cast<const int8_t *>(b.input), static_cast<const int8_t *>(b.input2),
        -q.input_zero_point, q.input1_multiplier, q.input1_shift, -q.input2_zero_point,
        q.input2_multiplier, q.input2_shift, 20, static_cast<int8_t *>(b.output),
        q.output_zero_point, q.output_multiplier, q.output_shift, q.act_min, q.act_max, n);
}

// ---- transpose_conv -----------------------------------------------------
// TFLM: filter dims [C_out, KH, KW, C_in], padding from the output back to
// the input (the suite's pad_h/pad_w), no activation (the int8 range), two
// scratch buffers. v7.0.0 on (MEMTRACE_CMSIS_NN_TRANSPOSE_CONV 2):
// arm_transpose_conv_wrapper_s8 with `ctx` (the rolling int32 accumulator
// rows, or the reverse path's convolution buffer) and the reversed filter of
// the reverse path (arm_transpose_conv_s8_get_reverse_conv_buffer_size; 0 on
// the other path). v5.0.0 / v6.0.0 (1): arm_transpose_conv_s8 with its
// column buffer (arm_transpose_conv_s8_get_buffer_size(input, filter,
// output)) and, as output_ctx, an int32 image of one output batch.

#if MEMTRACE_CMSIS_NN_TRANSPOSE_CONV != 0
cmsis_nn_transpose_conv_params transpose_conv_params(const Layer &l, const Quant &q) {
    cmsis_nn_transpose_conv_params p;
    p.input_offset = -q.input_zero_point;
    p.output_offset = q.output_zero_point;
    p.stride = tile(l.stride_h, l.stride_w);
    p.padding = tile(l.pad_h, l.pad_w);
#if MEMTRACE_CMSIS_NN_TRANSPOSE_CONV == 1
    // v5.0.0 / v6.0.0 size their column loop with it. TFLM: the padding plus
    // the odd remainder of the total padding.
    const int32_t total_h = (l.input[1] - 1) * l.stride_h + l.filter[1] - l.output[1];
    const int32_t total_w = (l.input[2] - 1) * l.stride_w + l.filter[2] - l.output[2];
    p.padding_offsets = tile(l.pad_h + (total_h > 0 ? total_h % 2 : 0),
                             l.pad_w + (total_w > 0 ? total_w % 2 : 0));
#else
    p.padding_offsets = tile(0, 0);  // unused by the library from v7.0.0 on
#endif
    p.dilation = tile(1, 1);
    p.activation = activation(q);
    return p;
}

int32_t transpose_conv_scratch(const Layer &l, int which) {
    const Quant q = {};
    const cmsis_nn_transpose_conv_params p = transpose_conv_params(l, q);
    const cmsis_nn_dims in = dims4(l.input), f = dims4(l.filter), out = dims4(l.output);
#if MEMTRACE_CMSIS_NN_TRANSPOSE_CONV == 2
    return which == 0 ? arm_transpose_conv_s8_get_buffer_size(&p, &in, &f, &out)
                      : arm_transpose_conv_s8_get_reverse_conv_buffer_size(&p, &in, &f);
#else
    (void)p;
    return which == 0 ? arm_transpose_conv_s8_get_buffer_size(&in, &f, &out)
                      : out.h * out.w * out.c * static_cast<int32_t>(sizeof(int32_t));
#endif
}

MEMTRACE_KERNEL arm_cmsis_nn_status transpose_conv_int8(const Layer &l, const Buffers &b,
                                                        const Quant &q) {
    const cmsis_nn_context ctx = context(b);
    cmsis_nn_context second_ctx;
    second_ctx.buf = b.scratch2;
    second_ctx.size = static_cast<int32_t>(b.scratch2_bytes);
    const cmsis_nn_transpose_conv_params p = transpose_conv_params(l, q);
    cmsis_nn_per_channel_quant_params quant;
    quant.multiplier = const_cast<int32_t *>(q.channel_multiplier);
    quant.shift = const_cast<int32_t *>(q.channel_shift);
    const cmsis_nn_dims in = dims4(l.input), f = dims4(l.filter), out = dims4(l.output);
    const cmsis_nn_dims bias = dims(1, 1, 1, l.output[3]);
#if MEMTRACE_CMSIS_NN_TRANSPOSE_CONV == 2
    return arm_transpose_conv_wrapper_s8(&ctx, &second_ctx, &p, &quant, &in,
                                         static_cast<const int8_t *>(b.input), &f,
                                         static_cast<const int8_t *>(b.filter), &bias,
                                         static_cast<const int32_t *>(b.bias), &out,
                                         static_cast<int8_t *>(b.output));
#else
    return arm_transpose_conv_s8(&ctx, &second_ctx, &p, &quant, &in,
                                 static_cast<const int8_t *>(b.input), &f,
                                 static_cast<const int8_t *>(b.filter), &bias,
                                 static_cast<const int32_t *>(b.bias), &out,
                                 static_cast<int8_t *>(b.output));
#endif
}
#endif  // MEMTRACE_CMSIS_NN_TRANSPOSE_CONV != 0

// ---- concatenation ------------------------------------------------------
// The library's concatenation functions copy one input into its place in the
// output and are called once per input. Their axes name the dimensions from
// the innermost: x = NHWC's C, y = W, z = H, w = N.

void concatenate_one(const Layer &l, const int8_t *input, const int32_t *shape, uint32_t offset,
                     int8_t *output) {
    const uint16_t x = static_cast<uint16_t>(shape[3]), y = static_cast<uint16_t>(shape[2]),
                   z = static_cast<uint16_t>(shape[1]), w = static_cast<uint16_t>(shape[0]);
    switch (l.axis) {
        case 3:
            arm_concatenation_s8_x(input, x, y, z, w, output, static_cast<uint16_t>(l.output[3]),
                                   offset);
            break;
        case 2:
            arm_concatenation_s8_y(input, x, y, z, w, output, static_cast<uint16_t>(l.output[2]),
                                   offset);
            break;
        case 1:
            arm_concatenation_s8_z(input, x, y, z, w, output, static_cast<uint16_t>(l.output[1]),
                                   offset);
            break;
        default: arm_concatenation_s8_w(input, x, y, z, w, output, offset); break;
    }
}

MEMTRACE_KERNEL arm_cmsis_nn_status concatenation_int8(const Layer &l, const Buffers &b,
                                                       const Quant &q) {
    (void)q;
    int8_t *out = static_cast<int8_t *>(b.output);
    concatenate_one(l, static_cast<const int8_t *>(b.input), l.input, 0, out);
    concatenate_one(l, static_cast<const int8_t *>(b.input2), l.input2,
                    static_cast<uint32_t>(l.input[l.axis]), out);
    return ARM_CMSIS_NN_SUCCESS;
}

// ---- pad ----------------------------------------------------------------
// TFLM: the output zero point as the pad value, pre/post padding per NHWC
// dimension.

#if MEMTRACE_CMSIS_NN_PAD
MEMTRACE_KERNEL arm_cmsis_nn_status pad_int8(const Layer &l, const Buffers &b, const Quant &q) {
    const cmsis_nn_dims in = dims4(l.input), pre = dims4(l.pad_before), post = dims4(l.pad_after);
    return arm_pad_s8(static_cast<const int8_t *>(b.input), static_cast<int8_t *>(b.output),
                      static_cast<int8_t>(q.output_zero_point), &in, &pre, &post);
}
#endif

}  // namespace

bool library_has_kernel(const Layer &l) { return int8_library_op(l); }

uint32_t library_scratch_bytes(const Layer &l, int which) {
    if (!int8_library_op(l)) {
        // The reference kernel runs: its own scratch needs.
        return which == 0 ? reference_scratch_bytes(l) : 0;
    }
    int32_t bytes = 0;
    switch (l.op) {
        case OP_CONV2D: bytes = which == 0 ? conv2d_scratch(l) : 0; break;
        case OP_DEPTHWISE_CONV2D: bytes = which == 0 ? depthwise_conv2d_scratch(l) : 0; break;
        case OP_FULLY_CONNECTED: bytes = which == 0 ? fully_connected_scratch(l) : 0; break;
        case OP_AVERAGE_POOL: bytes = which == 0 ? average_pool_scratch(l) : 0; break;
#if MEMTRACE_CMSIS_NN_TRANSPOSE_CONV != 0
        case OP_TRANSPOSE_CONV: bytes = transpose_conv_scratch(l, which); break;
#endif
        default: break;  // max_pool, add, pad and concatenation need none
    }
    return bytes > 0 ? static_cast<uint32_t>(bytes) : 0;
}

int run_kernel(const Layer &l, const Buffers &b, const Quant &q) {
    if (!int8_library_op(l)) {
        run_reference_kernel(l, b, q);
        return kExitOk;
    }
    arm_cmsis_nn_status s = ARM_CMSIS_NN_SUCCESS;
    switch (l.op) {
        case OP_CONV2D: s = conv2d_int8(l, b, q); break;
        case OP_DEPTHWISE_CONV2D: s = depthwise_conv2d_int8(l, b, q); break;
        case OP_FULLY_CONNECTED: s = fully_connected_int8(l, b, q); break;
        case OP_MAX_POOL: s = max_pool_int8(l, b, q); break;
        case OP_AVERAGE_POOL: s = average_pool_int8(l, b, q); break;
        case OP_ADD: s = add_int8(l, b, q); break;
#if MEMTRACE_CMSIS_NN_TRANSPOSE_CONV != 0
        case OP_TRANSPOSE_CONV: s = transpose_conv_int8(l, b, q); break;
#endif
        case OP_CONCATENATION: s = concatenation_int8(l, b, q); break;
#if MEMTRACE_CMSIS_NN_PAD
        case OP_PAD: s = pad_int8(l, b, q); break;
#endif
        default: break;
    }
    return s == ARM_CMSIS_NN_SUCCESS ? kExitOk : kExitLibraryError;
}

}  // namespace memtrace
