// kernels_cmsis.cc — the kernel library of executor-cmsis.elf: int8
// CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED, MAX_POOL_2D, AVERAGE_POOL_2D,
// ADD, SOFTMAX, PAD, TRANSPOSE_CONV and CONCATENATION through Arm CMSIS-NN, called
// the way TensorFlow Lite Micro's CMSIS-NN kernels
// (tensorflow/lite/micro/kernels/cmsis_nn/*.cc) call it (CONCATENATION,
// which TFLM runs with its reference kernel there, through the library's
// arm_concatenation_s8_{x,y,z,w}); every other operator and type (float,
// uint8, RELU, RESHAPE, QUANTIZE, DEQUANTIZE, an int8 ADD that would
// broadcast, a transpose conv with TinySeg's int16 accumulator) runs the
// same TFLM reference kernel as executor.elf (kernels.cc).
//
// Releases: the glue builds against every CMSIS-NN release from v4.0.0 to the
// development head, calling each function in the form the release declares
// (cmsis_nn_features.h, written by cmsis-nn/probe.sh). An operator whose
// function the release lacks runs the TFLM reference kernel, as a TFLM build
// with that release did: PAD before v7.0.0 (arm_pad_s8), TRANSPOSE_CONV on
// v4.x (arm_transpose_conv_s8). v5.0.0 / v6.0.0 run TRANSPOSE_CONV through
// arm_transpose_conv_s8 with an int32 output image as its second buffer.
//
// The scratch buffer sizes come from the library's plain *_get_buffer_size
// functions, which follow the compiler flags exactly as the kernels do
// (ARM_MATH_DSP on Cortex-M4, pure C on x86-64), as in TFLM. The walker
// (program.cc) passes the program's scratch tensor as op.scratch_buf.
#include "arm_nnfunctions.h"
#include "cmsis_nn_features.h"  // generated per checkout by cmsis-nn/probe.sh
#include "../cmsis-nn/pool_batches.h"
#include "executor.h"
#include "memtrace_program.h"

#define EXEC_KERNEL __attribute__((noinline))

namespace exec {
namespace {

// Which kernel runs an operator.
enum class Path {
    kReference,     // the TFLM reference kernel (kernels.cc)
    kConv,          // arm_convolve_wrapper_s8
    kDepthwise,     // arm_depthwise_conv_wrapper_s8
    kFcConv1x1,     // arm_convolve_1x1_s8_fast (TFLM's FULLY_CONNECTED, output rank > 2)
    kFullyConnected,  // arm_fully_connected_s8
    kMaxPool,       // arm_max_pool_s8
    kAveragePool,   // arm_avgpool_s8
    kAdd,           // arm_elementwise_add_s8
    kSoftmax,       // arm_softmax_s8
    kPad,           // arm_pad_s8
    kTransposeConv,   // arm_transpose_conv_wrapper_s8
    kConcatenation,   // arm_concatenation_s8_{x,y,z,w}
    kUnsupported,   // int8, but outside what the library kernel accepts
};

cmsis_nn_dims dims(int32_t n, int32_t h, int32_t w, int32_t c) {
    cmsis_nn_dims d;
    d.n = n;
    d.h = h;
    d.w = w;
    d.c = c;
    return d;
}

// The tensor as 4-D NHWC: the program pads dims with 1s on the right, TFLite
// shapes extend on the left.
cmsis_nn_dims nhwc(const Tensor &t) {
    int32_t d[4] = {1, 1, 1, 1};
    const int32_t n = t.ndims < 4 ? t.ndims : 4;
    for (int32_t i = 0; i < n; ++i) {
        d[4 - n + i] = t.dims[i];
    }
    return dims(d[0], d[1], d[2], d[3]);
}

cmsis_nn_tile tile(int32_t h, int32_t w) {
    cmsis_nn_tile t;
    t.h = h;
    t.w = w;
    return t;
}

cmsis_nn_activation activation(const Op &op) {
    cmsis_nn_activation a;
    a.min = op.w[OPW_ACT_MIN];
    a.max = op.w[OPW_ACT_MAX];
    return a;
}

cmsis_nn_context context(const Op &op) {
    cmsis_nn_context ctx;
    ctx.buf = op.scratch_buf;
    ctx.size = op.scratch_buf ? op.scratch_bytes : 0;
    return ctx;
}

// FULLY_CONNECTED as TFLM sees it: input flattened to [batches, depth],
// weights [units, depth].
struct FcShape {
    int32_t batches, depth, units;
};

FcShape fc_shape(const Op &op) {
    FcShape s;
    s.units = op.weights.dims[0];
    s.depth = op.weights.bytes / s.units;  // int8 weights: one byte each
    s.batches = flat(op.in) / s.depth;
    return s;
}

// Every activation input fits the uint16 extents of the concatenation
// functions and is int8.
bool concatenation_fits(const Op &op) {
    for (int32_t k = 0; k < op.n_inputs; ++k) {
        const Tensor t = input_tensor(op, k);
        if (t.dtype != PDT_INT8 || t.ndims > 4) return false;
        for (int32_t i = 0; i < t.ndims; ++i) {
            if (t.dims[i] > 0xFFFF) return false;
        }
    }
    for (int32_t i = 0; i < op.out.ndims; ++i) {
        if (op.out.dims[i] > 0xFFFF) return false;
    }
    return op.out.ndims <= 4 && op.w[OPW_AXIS] >= 0 && op.w[OPW_AXIS] < op.out.ndims;
}

bool int8_tensors(const Op &op) {
    return op.dtype == PDT_INT8 && op.in.dtype == PDT_INT8 && op.out.dtype == PDT_INT8 &&
           (!op.has_in2 || op.in2.dtype == PDT_INT8) &&
           (!op.has_weights || op.weights.dtype == PDT_INT8) &&
           (!op.has_bias || op.bias.dtype == PDT_INT32);
}

Path path(const Op &op) {
    // PAD's weights are its int32 paddings; the data is int8 as elsewhere.
    if (op.kind == PK_PAD) {
        if (!MEMTRACE_CMSIS_NN_PAD) return Path::kReference;  // not in this release
        const bool int8 = op.dtype == PDT_INT8 && op.in.dtype == PDT_INT8 &&
                          op.out.dtype == PDT_INT8 && op.has_weights &&
                          op.weights.dtype == PDT_INT32 && flat(op.weights) == 8;
        return int8 ? Path::kPad : Path::kReference;
    }
    if (!int8_tensors(op)) {
        return Path::kReference;
    }
    const bool per_channel = op.w[OPW_CHANNEL_MULTIPLIERS] >= 0 && op.w[OPW_CHANNEL_SHIFTS] >= 0;
    switch (op.kind) {
        case PK_CONV2D:
        case PK_DEPTHWISE_CONV2D:
            // CMSIS-NN's convolutions take per-channel quantisation and no
            // filter zero point (TFLite's int8 weights are symmetric).
            if (!op.has_weights || !per_channel || op.w[OPW_WEIGHTS_OFFSET] != 0) {
                return Path::kUnsupported;
            }
            return op.kind == PK_CONV2D ? Path::kConv : Path::kDepthwise;
        case PK_FULLY_CONNECTED: {
            if (!op.has_weights || op.weights.dims[0] <= 0 || fc_shape(op).depth <= 0) {
                return Path::kUnsupported;
            }
            // Per-unit weight scales: the reference kernel's per-channel
            // path (arm_fully_connected_s8 takes one multiplier).
            if (per_channel) {
                return Path::kReference;
            }
            // TFLM runs an output of rank > 2 with a depth divisible by 4 as
            // a 1x1 convolution, which has no filter zero point.
            if (op.out.ndims > 2 && fc_shape(op).depth % 4 == 0) {
                return op.w[OPW_WEIGHTS_OFFSET] == 0 ? Path::kFcConv1x1 : Path::kUnsupported;
            }
            return Path::kFullyConnected;
        }
        case PK_MAX_POOL: return Path::kMaxPool;
        case PK_AVERAGE_POOL: return Path::kAveragePool;
        case PK_ADD:
            // TFLM broadcasts with the reference kernel; the library adds
            // two vectors of one length.
            if (!op.has_in2 || flat(op.in) != flat(op.out) || flat(op.in2) != flat(op.out)) {
                return Path::kReference;
            }
            return Path::kAdd;
        case PK_SOFTMAX: return Path::kSoftmax;
        case PK_TRANSPOSE_CONV:
            // Not in this release (v4.x); the library has no int16-accumulator
            // variant (TinySeg's).
            if (!MEMTRACE_CMSIS_NN_TRANSPOSE_CONV) return Path::kReference;
            if (op.w[OPW_ACCUMULATOR_BYTES] == 2) return Path::kReference;
            if (!op.has_weights || !per_channel || op.w[OPW_WEIGHTS_OFFSET] != 0) {
                return Path::kUnsupported;
            }
            return Path::kTransposeConv;
        case PK_CONCATENATION:
            return concatenation_fits(op) ? Path::kConcatenation : Path::kReference;
        default: return Path::kReference;
    }
}

// ---- conv2d -------------------------------------------------------------

cmsis_nn_conv_params conv_params(const Op &op) {
    cmsis_nn_conv_params p;
    p.input_offset = op.w[OPW_INPUT_OFFSET];
    p.output_offset = op.w[OPW_OUTPUT_OFFSET];
    p.stride = tile(op.w[OPW_STRIDE_H], op.w[OPW_STRIDE_W]);
    p.padding = tile(op.w[OPW_PAD_H], op.w[OPW_PAD_W]);
    p.dilation = tile(op.w[OPW_DILATION_H], op.w[OPW_DILATION_W]);
    p.activation = activation(op);
    return p;
}

// Filter [C_out, KH, KW, C_in].
cmsis_nn_dims conv_filter(const Op &op) {
    const cmsis_nn_dims f = nhwc(op.weights);
    return dims(nhwc(op.out).c, f.h, f.w, nhwc(op.in).c);
}

cmsis_nn_per_channel_quant_params per_channel(const Op &op) {
    // The struct's pointers are not const; the library only reads them.
    cmsis_nn_per_channel_quant_params q;
    q.multiplier = const_cast<int32_t *>(channel_array(op, OPW_CHANNEL_MULTIPLIERS));
    q.shift = const_cast<int32_t *>(channel_array(op, OPW_CHANNEL_SHIFTS));
    return q;
}

const int32_t *bias_of(const Op &op) {
    return op.has_bias ? static_cast<const int32_t *>(op.bias.data) : nullptr;
}

EXEC_KERNEL arm_cmsis_nn_status conv2d_int8(const Op &op) {
    const cmsis_nn_context ctx = context(op);
    const cmsis_nn_conv_params p = conv_params(op);
    const cmsis_nn_per_channel_quant_params q = per_channel(op);
    const cmsis_nn_dims in = nhwc(op.in), f = conv_filter(op), out = nhwc(op.out);
    const cmsis_nn_dims bias = dims(1, 1, 1, out.c);
    return arm_convolve_wrapper_s8(&ctx, &p, &q, &in, static_cast<const int8_t *>(op.in.data), &f,
                                   static_cast<const int8_t *>(op.weights.data), &bias,
                                   bias_of(op), &out, static_cast<int8_t *>(op.out.data));
}

// ---- depthwise_conv2d ---------------------------------------------------

cmsis_nn_dw_conv_params depthwise_params(const Op &op) {
    cmsis_nn_dw_conv_params p;
    p.input_offset = op.w[OPW_INPUT_OFFSET];
    p.output_offset = op.w[OPW_OUTPUT_OFFSET];
    p.ch_mult = op.w[OPW_DEPTH_MULTIPLIER];
    p.stride = tile(op.w[OPW_STRIDE_H], op.w[OPW_STRIDE_W]);
    p.padding = tile(op.w[OPW_PAD_H], op.w[OPW_PAD_W]);
    p.dilation = tile(op.w[OPW_DILATION_H], op.w[OPW_DILATION_W]);
    p.activation = activation(op);
    return p;
}

// Filter [1, KH, KW, C_out].
cmsis_nn_dims depthwise_filter(const Op &op) {
    const cmsis_nn_dims f = nhwc(op.weights);
    return dims(f.n, f.h, f.w, nhwc(op.out).c);
}

EXEC_KERNEL arm_cmsis_nn_status depthwise_conv2d_int8(const Op &op) {
    const cmsis_nn_context ctx = context(op);
    const cmsis_nn_dw_conv_params p = depthwise_params(op);
    const cmsis_nn_per_channel_quant_params q = per_channel(op);
    const cmsis_nn_dims in = nhwc(op.in), f = depthwise_filter(op), out = nhwc(op.out);
    const cmsis_nn_dims bias = dims(1, 1, 1, out.c);
    return arm_depthwise_conv_wrapper_s8(&ctx, &p, &q, &in, static_cast<const int8_t *>(op.in.data),
                                         &f, static_cast<const int8_t *>(op.weights.data), &bias,
                                         bias_of(op), &out, static_cast<int8_t *>(op.out.data));
}

// ---- fully_connected ----------------------------------------------------
// CMSIS-NN's dims: input [batches, 1, 1, depth], filter [depth, 1, 1, units],
// output [batches, 1, 1, units].

EXEC_KERNEL arm_cmsis_nn_status fully_connected_int8(const Op &op) {
    const FcShape s = fc_shape(op);
    const cmsis_nn_context ctx = context(op);
    cmsis_nn_fc_params p;
    p.input_offset = op.w[OPW_INPUT_OFFSET];
    p.filter_offset = op.w[OPW_WEIGHTS_OFFSET];
    p.output_offset = op.w[OPW_OUTPUT_OFFSET];
    p.activation = activation(op);
    cmsis_nn_per_tensor_quant_params q;
    q.multiplier = op.w[OPW_OUTPUT_MULTIPLIER];
    q.shift = op.w[OPW_OUTPUT_SHIFT];
    const cmsis_nn_dims in = dims(s.batches, 1, 1, s.depth), f = dims(s.depth, 1, 1, s.units);
    const cmsis_nn_dims bias = dims(1, 1, 1, s.units), out = dims(s.batches, 1, 1, s.units);
    // Non-zero scratch only on Helium (MVE) builds: the library wants the
    // filter's kernel sums there, which TFLM computes with arm_vector_sum_s8
    // (in Prepare for a constant filter, else in Eval; here, in the call).
#if MEMTRACE_CMSIS_NN_VECTOR_SUM_ARGS != 0
    // (v4.x has no kernel sums: its Helium kernel takes no buffer.)
    if (ctx.buf) {
        int32_t *sums = static_cast<int32_t *>(ctx.buf);
        const int8_t *weights = static_cast<const int8_t *>(op.weights.data);
#if MEMTRACE_CMSIS_NN_VECTOR_SUM_ARGS == 7
        const arm_cmsis_nn_status st = arm_vector_sum_s8(sums, s.depth, s.units, weights,
                                                         p.input_offset, p.filter_offset, bias_of(op));
#elif MEMTRACE_CMSIS_NN_VECTOR_SUM_ARGS == 6
        const arm_cmsis_nn_status st =
            arm_vector_sum_s8(sums, s.depth, s.units, weights, p.input_offset, bias_of(op));
#else
        const arm_cmsis_nn_status st = arm_vector_sum_s8(sums, s.depth, s.units, weights);
#endif
        if (st != ARM_CMSIS_NN_SUCCESS) {
            return st;
        }
    }
#endif
    return arm_fully_connected_s8(&ctx, &p, &q, &in, static_cast<const int8_t *>(op.in.data), &f,
                                  static_cast<const int8_t *>(op.weights.data), &bias, bias_of(op),
                                  &out, static_cast<int8_t *>(op.out.data));
}

// TFLM's FULLY_CONNECTED with an output of rank > 2 and a depth divisible
// by 4: a 1x1 convolution over [batches, 1, 1, depth] with the per-tensor
// multiplier and shift repeated per output channel (library_prepare).
EXEC_KERNEL arm_cmsis_nn_status fully_connected_conv1x1_int8(const Op &op) {
    const FcShape s = fc_shape(op);
    const cmsis_nn_context ctx = context(op);
    cmsis_nn_conv_params p;
    p.input_offset = op.w[OPW_INPUT_OFFSET];
    p.output_offset = op.w[OPW_OUTPUT_OFFSET];
    p.stride = tile(1, 1);
    p.padding = tile(0, 0);
    p.dilation = tile(1, 1);
    p.activation = activation(op);
    cmsis_nn_per_channel_quant_params q;
    q.multiplier = op.prepared_multiplier;
    q.shift = op.prepared_shift;
    const cmsis_nn_dims in = dims(s.batches, 1, 1, s.depth), f = dims(s.depth, 1, 1, s.units);
    const cmsis_nn_dims bias = dims(1, 1, 1, s.units), out = dims(s.batches, 1, 1, s.units);
    return arm_convolve_1x1_s8_fast(&ctx, &p, &q, &in, static_cast<const int8_t *>(op.in.data), &f,
                                    static_cast<const int8_t *>(op.weights.data), &bias,
                                    bias_of(op), &out, static_cast<int8_t *>(op.out.data));
}

// ---- pools --------------------------------------------------------------
// TFLM passes batch 1 (its pooling tensors have one batch); the library loops
// over batches, so the executor passes N and stays correct for N > 1.

cmsis_nn_pool_params pool_params(const Op &op) {
    cmsis_nn_pool_params p;
    p.stride = tile(op.w[OPW_STRIDE_H], op.w[OPW_STRIDE_W]);
    p.padding = tile(op.w[OPW_PAD_H], op.w[OPW_PAD_W]);
    p.activation = activation(op);
    return p;
}

EXEC_KERNEL arm_cmsis_nn_status max_pool_int8(const Op &op) {
    const cmsis_nn_context ctx = context(op);
    const cmsis_nn_pool_params p = pool_params(op);
    const cmsis_nn_dims in = nhwc(op.in), out = nhwc(op.out);
    const cmsis_nn_dims f = dims(1, op.w[OPW_FILTER_H], op.w[OPW_FILTER_W], 1);
    return pool_batches(
        [&](const cmsis_nn_dims &i, const int8_t *src, const cmsis_nn_dims &o, int8_t *dst) {
            return arm_max_pool_s8(&ctx, &p, &i, src, &f, &o, dst);
        },
        in, static_cast<const int8_t *>(op.in.data), out, static_cast<int8_t *>(op.out.data));
}

EXEC_KERNEL arm_cmsis_nn_status average_pool_int8(const Op &op) {
    const cmsis_nn_context ctx = context(op);
    const cmsis_nn_pool_params p = pool_params(op);
    const cmsis_nn_dims in = nhwc(op.in), out = nhwc(op.out);
    const cmsis_nn_dims f = dims(1, op.w[OPW_FILTER_H], op.w[OPW_FILTER_W], 1);
    return pool_batches(
        [&](const cmsis_nn_dims &i, const int8_t *src, const cmsis_nn_dims &o, int8_t *dst) {
            return arm_avgpool_s8(&ctx, &p, &i, src, &f, &o, dst);
        },
        in, static_cast<const int8_t *>(op.in.data), out, static_cast<int8_t *>(op.out.data));
}

// ---- add ----------------------------------------------------------------

EXEC_KERNEL arm_cmsis_nn_status add_int8(const Op &op) {
    return arm_elementwise_add_s8(
        static_cast<const int8_t *>(op.in.data), static_cast<const int8_t *>(op.in2.data),
        op.w[OPW_INPUT_OFFSET], op.w[OPW_INPUT1_MULTIPLIER], op.w[OPW_INPUT1_SHIFT],
        op.w[OPW_INPUT2_OFFSET], op.w[OPW_INPUT2_MULTIPLIER], op.w[OPW_INPUT2_SHIFT],
        op.w[OPW_LEFT_SHIFT], static_cast<int8_t *>(op.out.data), op.w[OPW_OUTPUT_OFFSET],
        op.w[OPW_OUTPUT_MULTIPLIER], op.w[OPW_OUTPUT_SHIFT], op.w[OPW_ACT_MIN], op.w[OPW_ACT_MAX],
        flat(op.out));
}

// ---- transpose_conv -----------------------------------------------------
// TFLM requests two scratch buffers (v7.0.0 on: the accumulator rows, and
// the reversed filter when the wrapper turns the operator into a
// convolution; v5.0.0 / v6.0.0: arm_transpose_conv_s8's column buffer and an
// int32 image of one output batch); the program has one scratch tensor per
// operator, so both live in it, the second at the first's size rounded up to
// 16 bytes.

#if MEMTRACE_CMSIS_NN_TRANSPOSE_CONV != 0

cmsis_nn_transpose_conv_params transpose_conv_params(const Op &op) {
    cmsis_nn_transpose_conv_params p;
    p.input_offset = op.w[OPW_INPUT_OFFSET];
    p.output_offset = op.w[OPW_OUTPUT_OFFSET];
    p.stride = tile(op.w[OPW_STRIDE_H], op.w[OPW_STRIDE_W]);
    p.padding = tile(op.w[OPW_PAD_H], op.w[OPW_PAD_W]);
    // TFLM: padding + (total padding % 2), from the same window arithmetic.
    const cmsis_nn_dims in = nhwc(op.in), f = nhwc(op.weights), out = nhwc(op.out);
    const int32_t total_h = (in.h - 1) * p.stride.h + f.h - out.h;
    const int32_t total_w = (in.w - 1) * p.stride.w + f.w - out.w;
    p.padding_offsets = tile(p.padding.h + (total_h > 0 ? total_h % 2 : 0),
                             p.padding.w + (total_w > 0 ? total_w % 2 : 0));
    p.dilation = tile(1, 1);
    p.activation = activation(op);
    return p;
}

// Filter [C_out, KH, KW, C_in].
cmsis_nn_dims transpose_conv_filter(const Op &op) {
    const cmsis_nn_dims f = nhwc(op.weights);
    return dims(nhwc(op.out).c, f.h, f.w, nhwc(op.in).c);
}

// (accumulator buffer bytes, reversed-filter buffer bytes) the library asks for.
void transpose_conv_buffers(const Op &op, int32_t *acc, int32_t *reversed) {
    const cmsis_nn_transpose_conv_params p = transpose_conv_params(op);
    const cmsis_nn_dims in = nhwc(op.in), f = transpose_conv_filter(op), out = nhwc(op.out);
#if MEMTRACE_CMSIS_NN_TRANSPOSE_CONV == 2
    *acc = arm_transpose_conv_s8_get_buffer_size(&p, &in, &f, &out);
    *reversed = arm_transpose_conv_s8_get_reverse_conv_buffer_size(&p, &in, &f);
#else
    (void)p;
    *acc = arm_transpose_conv_s8_get_buffer_size(&in, &f, &out);
    *reversed = out.h * out.w * out.c * static_cast<int32_t>(sizeof(int32_t));
#endif
}

int32_t align16(int32_t v) { return (v + 15) & ~15; }

EXEC_KERNEL arm_cmsis_nn_status transpose_conv_int8(const Op &op) {
    int32_t acc = 0, reversed = 0;
    transpose_conv_buffers(op, &acc, &reversed);
    int8_t *scratch = static_cast<int8_t *>(op.scratch_buf);
    cmsis_nn_context ctx;
    ctx.buf = scratch;
    ctx.size = acc;
    cmsis_nn_context reversed_ctx;
    reversed_ctx.buf = reversed > 0 && scratch ? scratch + align16(acc) : nullptr;
    reversed_ctx.size = reversed;
    const cmsis_nn_transpose_conv_params p = transpose_conv_params(op);
    const cmsis_nn_per_channel_quant_params q = per_channel(op);
    const cmsis_nn_dims in = nhwc(op.in), f = transpose_conv_filter(op), out = nhwc(op.out);
    const cmsis_nn_dims bias = dims(1, 1, 1, out.c);
#if MEMTRACE_CMSIS_NN_TRANSPOSE_CONV == 2
    return arm_transpose_conv_wrapper_s8(&ctx, &reversed_ctx, &p, &q, &in,
                                         static_cast<const int8_t *>(op.in.data), &f,
                                         static_cast<const int8_t *>(op.weights.data), &bias,
                                         bias_of(op), &out, static_cast<int8_t *>(op.out.data));
#else
    return arm_transpose_conv_s8(&ctx, &reversed_ctx, &p, &q, &in,
                                 static_cast<const int8_t *>(op.in.data), &f,
                                 static_cast<const int8_t *>(op.weights.data), &bias, bias_of(op),
                                 &out, static_cast<int8_t *>(op.out.data));
#endif
}
#endif  // MEMTRACE_CMSIS_NN_TRANSPOSE_CONV != 0

// ---- concatenation ------------------------------------------------------
// The library counts extents from the innermost dimension: x, y, z, w are
// NHWC's C, W, H, N (a lower rank is extended on the left), and the function
// of the concatenation axis copies each input to its offset along it.

EXEC_KERNEL arm_cmsis_nn_status concatenation_int8(const Op &op) {
    const int32_t lead = 4 - op.out.ndims;  // dimensions added on the left
    const int32_t axis = op.w[OPW_AXIS] + lead;
    const cmsis_nn_dims out = nhwc(op.out);
    int8_t *output = static_cast<int8_t *>(op.out.data);
    uint32_t offset = 0;
    for (int32_t k = 0; k < op.n_inputs; ++k) {
        const Tensor t = input_tensor(op, k);
        const cmsis_nn_dims d = nhwc(t);
        const int8_t *input = static_cast<const int8_t *>(t.data);
        const uint16_t x = static_cast<uint16_t>(d.c), y = static_cast<uint16_t>(d.w);
        const uint16_t z = static_cast<uint16_t>(d.h), w = static_cast<uint16_t>(d.n);
        switch (axis) {
            case 3:
                arm_concatenation_s8_x(input, x, y, z, w, output, static_cast<uint16_t>(out.c), offset);
                offset += x;
                break;
            case 2:
                arm_concatenation_s8_y(input, x, y, z, w, output, static_cast<uint16_t>(out.w), offset);
                offset += y;
                break;
            case 1:
                arm_concatenation_s8_z(input, x, y, z, w, output, static_cast<uint16_t>(out.h), offset);
                offset += z;
                break;
            default:
                arm_concatenation_s8_w(input, x, y, z, w, output, offset);
                offset += w;
                break;
        }
    }
    return ARM_CMSIS_NN_SUCCESS;
}

// ---- softmax ------------------------------------------------------------
// TFLM: rows = all but the last dimension, row size = the last dimension.

EXEC_KERNEL arm_cmsis_nn_status softmax_int8(const Op &op) {
    const int32_t depth = op.in.ndims > 0 ? op.in.dims[op.in.ndims - 1] : 1;
    const int32_t rows = depth > 0 ? flat(op.in) / depth : 0;
    arm_softmax_s8(static_cast<const int8_t *>(op.in.data), rows, depth,
                   op.w[OPW_SOFTMAX_MULTIPLIER], op.w[OPW_SOFTMAX_LEFT_SHIFT], op.w[OPW_DIFF_MIN],
                   static_cast<int8_t *>(op.out.data));
    return ARM_CMSIS_NN_SUCCESS;
}

// ---- pad ----------------------------------------------------------------
// TFLM (cmsis_nn/pad.cc): the output zero point as the value, the paddings
// of the NHWC dimensions as pre/post pads.

#if MEMTRACE_CMSIS_NN_PAD
EXEC_KERNEL arm_cmsis_nn_status pad_int8(const Op &op) {
    const int32_t *a = static_cast<const int32_t *>(op.weights.data);
    const cmsis_nn_dims in = nhwc(op.in);
    const cmsis_nn_dims pre = dims(a[0], a[2], a[4], a[6]), post = dims(a[1], a[3], a[5], a[7]);
    return arm_pad_s8(static_cast<const int8_t *>(op.in.data), static_cast<int8_t *>(op.out.data),
                      static_cast<int8_t>(op.out.zero_point), &in, &pre, &post);
}
#endif

}  // namespace

int32_t library_scratch_bytes(const Op &op) {
    int32_t bytes = 0;
    switch (path(op)) {
        case Path::kConv: {
            const cmsis_nn_conv_params p = conv_params(op);
            const cmsis_nn_dims in = nhwc(op.in), f = conv_filter(op), out = nhwc(op.out);
            bytes = arm_convolve_wrapper_s8_get_buffer_size(&p, &in, &f, &out);
            break;
        }
        case Path::kDepthwise: {
            const cmsis_nn_dw_conv_params p = depthwise_params(op);
            const cmsis_nn_dims in = nhwc(op.in), f = depthwise_filter(op), out = nhwc(op.out);
            bytes = arm_depthwise_conv_wrapper_s8_get_buffer_size(&p, &in, &f, &out);
            break;
        }
        case Path::kFcConv1x1: {
            const FcShape s = fc_shape(op);
            const cmsis_nn_dims in = dims(s.batches, 1, 1, s.depth);
            bytes = arm_convolve_1x1_s8_fast_get_buffer_size(&in);
            break;
        }
        case Path::kFullyConnected: {
            const FcShape s = fc_shape(op);
            const cmsis_nn_dims f = dims(s.depth, 1, 1, s.units);
            bytes = arm_fully_connected_s8_get_buffer_size(&f);
            break;
        }
        case Path::kAveragePool: {
            const cmsis_nn_dims in = nhwc(op.in), out = nhwc(op.out);
            bytes = arm_avgpool_s8_get_buffer_size(out.w, in.c);
            break;
        }
#if MEMTRACE_CMSIS_NN_TRANSPOSE_CONV != 0
        case Path::kTransposeConv: {
            int32_t acc = 0, reversed = 0;
            transpose_conv_buffers(op, &acc, &reversed);
            bytes = reversed > 0 ? align16(acc) + reversed : acc;
            break;
        }
#endif
        case Path::kReference: bytes = reference_scratch_bytes(op); break;
        default: break;  // max_pool, add, softmax, concatenation need none
    }
    return bytes > 0 ? bytes : 0;
}

int library_prepare(Op &op) {
    if (path(op) != Path::kFcConv1x1) {
        return kOk;
    }
    // TFLM allocates these in Prepare (persistent) and fills them in Eval;
    // here both happen before the window, so the window holds only the
    // kernel's own accesses.
    const uint32_t units = static_cast<uint32_t>(fc_shape(op).units);
    op.prepared_multiplier = static_cast<int32_t *>(persistent_alloc(units * 4));
    op.prepared_shift = static_cast<int32_t *>(persistent_alloc(units * 4));
    if (!op.prepared_multiplier || !op.prepared_shift) {
        return kNoProgram;  // the program leaves no room after the activation arena
    }
    for (uint32_t i = 0; i < units; ++i) {
        op.prepared_multiplier[i] = op.w[OPW_OUTPUT_MULTIPLIER];
        op.prepared_shift[i] = op.w[OPW_OUTPUT_SHIFT];
    }
    return kOk;
}

int library_run(const Op &op) {
    arm_cmsis_nn_status s = ARM_CMSIS_NN_SUCCESS;
    switch (path(op)) {
        case Path::kReference: return reference_run(op);
        case Path::kUnsupported: return kUnsupported;
        case Path::kConv: s = conv2d_int8(op); break;
        case Path::kDepthwise: s = depthwise_conv2d_int8(op); break;
        case Path::kFcConv1x1: s = fully_connected_conv1x1_int8(op); break;
        case Path::kFullyConnected: s = fully_connected_int8(op); break;
        case Path::kMaxPool: s = max_pool_int8(op); break;
        case Path::kAveragePool: s = average_pool_int8(op); break;
        case Path::kAdd: s = add_int8(op); break;
        case Path::kSoftmax: s = softmax_int8(op); break;
#if MEMTRACE_CMSIS_NN_PAD
        case Path::kPad: s = pad_int8(op); break;
#endif
#if MEMTRACE_CMSIS_NN_TRANSPOSE_CONV != 0
        case Path::kTransposeConv: s = transpose_conv_int8(op); break;
#endif
        case Path::kConcatenation: s = concatenation_int8(op); break;
        default: return reference_run(op);  // path() never picks a function the release lacks
    }
    return s == ARM_CMSIS_NN_SUCCESS ? kOk : kLibraryError;
}

}  // namespace exec
