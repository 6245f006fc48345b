// kernels.cc — the TFLM reference kernels of the executor (from the tfmicro
// crate's registry copy, see the Makefile), one non-inlined function per
// operator so a traced PC resolves to a readable name. They are the kernel
// library of executor.elf (library_reference.cc), and the kernels of
// executor-cmsis.elf for every operator it does not run through CMSIS-NN.
// The program walker that calls them is program.cc.
#include <limits>
#include <string.h>

#include "executor.h"
#include "memtrace_program.h"
#include "tensorflow/lite/kernels/internal/common.h"
#include "tensorflow/lite/kernels/internal/reference/add.h"
#include "tensorflow/lite/kernels/internal/reference/concatenation.h"
#include "tensorflow/lite/kernels/internal/reference/conv.h"
#include "tensorflow/lite/kernels/internal/reference/depthwiseconv_float.h"
#include "tensorflow/lite/kernels/internal/reference/depthwiseconv_uint8.h"
#include "tensorflow/lite/kernels/internal/reference/dequantize.h"
#include "tensorflow/lite/kernels/internal/reference/fully_connected.h"
#include "tensorflow/lite/kernels/internal/reference/integer_ops/add.h"
#include "tensorflow/lite/kernels/internal/reference/integer_ops/conv.h"
#include "tensorflow/lite/kernels/internal/reference/integer_ops/depthwise_conv.h"
#include "tensorflow/lite/kernels/internal/reference/integer_ops/fully_connected.h"
#include "tensorflow/lite/kernels/internal/reference/integer_ops/pooling.h"
#include "tensorflow/lite/kernels/internal/reference/integer_ops/transpose_conv.h"
#include "tensorflow/lite/kernels/internal/reference/pad.h"
#include "tensorflow/lite/kernels/internal/reference/pooling.h"
#include "tensorflow/lite/kernels/internal/reference/quantize.h"
#include "tensorflow/lite/kernels/internal/reference/softmax.h"
#include "tensorflow/lite/kernels/internal/types.h"

#define EXEC_KERNEL __attribute__((noinline))

namespace exec {
namespace {

using tflite::RuntimeShape;

RuntimeShape shape(const Tensor &t) { return RuntimeShape(t.ndims, t.dims); }

// The tensor viewed as 4-D NHWC (left-padded with 1s).
RuntimeShape shape4(const Tensor &t) { return RuntimeShape::ExtendedShape(4, shape(t)); }

RuntimeShape shape1(int32_t n) { return RuntimeShape(1, &n); }

RuntimeShape shape2(int32_t a, int32_t b) {
    const int32_t d[2] = {a, b};
    return RuntimeShape(2, d);
}

tflite::PaddingValues padding(const Op &op) {
    tflite::PaddingValues p = {};
    p.height = static_cast<int16_t>(op.w[OPW_PAD_H]);
    p.width = static_cast<int16_t>(op.w[OPW_PAD_W]);
    return p;
}

float fmin_of(const Op &op) {
    float v;
    memcpy(&v, &op.w[OPW_FLOAT_MIN], 4);
    return v;
}

float fmax_of(const Op &op) {
    float v;
    memcpy(&v, &op.w[OPW_FLOAT_MAX], 4);
    return v;
}

// tflite::ConvParams and tflite::DepthwiseParams share these fields.
template <typename Params>
Params window_params(const Op &op) {
    Params p = {};
    p.padding_type = tflite::PaddingType::kSame;
    p.padding_values = padding(op);
    p.stride_height = static_cast<int16_t>(op.w[OPW_STRIDE_H]);
    p.stride_width = static_cast<int16_t>(op.w[OPW_STRIDE_W]);
    p.dilation_height_factor = static_cast<int16_t>(op.w[OPW_DILATION_H]);
    p.dilation_width_factor = static_cast<int16_t>(op.w[OPW_DILATION_W]);
    p.input_offset = op.w[OPW_INPUT_OFFSET];
    p.weights_offset = op.w[OPW_WEIGHTS_OFFSET];
    p.output_offset = op.w[OPW_OUTPUT_OFFSET];
    p.output_multiplier = op.w[OPW_OUTPUT_MULTIPLIER];
    p.output_shift = op.w[OPW_OUTPUT_SHIFT];
    p.quantized_activation_min = op.w[OPW_ACT_MIN];
    p.quantized_activation_max = op.w[OPW_ACT_MAX];
    p.float_activation_min = fmin_of(op);
    p.float_activation_max = fmax_of(op);
    return p;
}

// ---- kernels (one non-inlined function each: readable trace PCs) ----------

EXEC_KERNEL int conv2d(const Op &op) {
    const tflite::ConvParams p = window_params<tflite::ConvParams>(op);
    const RuntimeShape bias = shape1(op.out.dims[3]);
    switch (op.dtype) {
        case PDT_F32:
            tflite::reference_ops::Conv(p, shape4(op.in), static_cast<const float *>(op.in.data),
                                        shape4(op.weights),
                                        static_cast<const float *>(op.weights.data), bias,
                                        op.has_bias ? static_cast<const float *>(op.bias.data) : nullptr,
                                        shape4(op.out), static_cast<float *>(op.out.data),
                                        RuntimeShape(), nullptr);
            return kOk;
        case PDT_INT8:
            tflite::reference_integer_ops::ConvPerChannel(
                p, channel_array(op, OPW_CHANNEL_MULTIPLIERS), channel_array(op, OPW_CHANNEL_SHIFTS),
                shape4(op.in), static_cast<const int8_t *>(op.in.data), shape4(op.weights),
                static_cast<const int8_t *>(op.weights.data), bias,
                op.has_bias ? static_cast<const int32_t *>(op.bias.data) : nullptr, shape4(op.out),
                static_cast<int8_t *>(op.out.data));
            return kOk;
        case PDT_UINT8:
            tflite::reference_ops::Conv(
                p, shape4(op.in), static_cast<const uint8_t *>(op.in.data), shape4(op.weights),
                static_cast<const uint8_t *>(op.weights.data), bias,
                op.has_bias ? static_cast<const int32_t *>(op.bias.data) : nullptr, shape4(op.out),
                static_cast<uint8_t *>(op.out.data), RuntimeShape(), nullptr, nullptr);
            return kOk;
        default: return kUnsupported;
    }
}

EXEC_KERNEL int depthwise_conv2d(const Op &op) {
    tflite::DepthwiseParams p = window_params<tflite::DepthwiseParams>(op);
    p.depth_multiplier = static_cast<int16_t>(op.w[OPW_DEPTH_MULTIPLIER]);
    const RuntimeShape bias = shape1(op.out.dims[3]);
    switch (op.dtype) {
        case PDT_F32:
            tflite::reference_ops::DepthwiseConv(
                p, shape4(op.in), static_cast<const float *>(op.in.data), shape4(op.weights),
                static_cast<const float *>(op.weights.data), bias,
                op.has_bias ? static_cast<const float *>(op.bias.data) : nullptr, shape4(op.out),
                static_cast<float *>(op.out.data));
            return kOk;
        case PDT_INT8:
            tflite::reference_integer_ops::DepthwiseConvPerChannel(
                p, channel_array(op, OPW_CHANNEL_MULTIPLIERS), channel_array(op, OPW_CHANNEL_SHIFTS),
                shape4(op.in), static_cast<const int8_t *>(op.in.data), shape4(op.weights),
                static_cast<const int8_t *>(op.weights.data), bias,
                op.has_bias ? static_cast<const int32_t *>(op.bias.data) : nullptr, shape4(op.out),
                static_cast<int8_t *>(op.out.data));
            return kOk;
        case PDT_UINT8:
            tflite::reference_ops::DepthwiseConv(
                p, shape4(op.in), static_cast<const uint8_t *>(op.in.data), shape4(op.weights),
                static_cast<const uint8_t *>(op.weights.data), bias,
                op.has_bias ? static_cast<const int32_t *>(op.bias.data) : nullptr, shape4(op.out),
                static_cast<uint8_t *>(op.out.data));
            return kOk;
        default: return kUnsupported;
    }
}

tflite::PoolParams pool_params(const Op &op) {
    tflite::PoolParams p = {};
    p.padding_type = tflite::PaddingType::kSame;
    p.padding_values = padding(op);
    p.stride_height = op.w[OPW_STRIDE_H];
    p.stride_width = op.w[OPW_STRIDE_W];
    p.filter_height = op.w[OPW_FILTER_H];
    p.filter_width = op.w[OPW_FILTER_W];
    p.quantized_activation_min = op.w[OPW_ACT_MIN];
    p.quantized_activation_max = op.w[OPW_ACT_MAX];
    p.float_activation_min = fmin_of(op);
    p.float_activation_max = fmax_of(op);
    return p;
}

EXEC_KERNEL int average_pool(const Op &op) {
    const tflite::PoolParams p = pool_params(op);
    switch (op.dtype) {
        case PDT_F32:
            tflite::reference_ops::AveragePool(p, shape4(op.in), static_cast<const float *>(op.in.data),
                                               shape4(op.out), static_cast<float *>(op.out.data));
            return kOk;
        case PDT_INT8:
            tflite::reference_integer_ops::AveragePool(
                p, shape4(op.in), static_cast<const int8_t *>(op.in.data), shape4(op.out),
                static_cast<int8_t *>(op.out.data));
            return kOk;
        case PDT_UINT8:
            tflite::reference_ops::AveragePool(p, shape4(op.in),
                                               static_cast<const uint8_t *>(op.in.data),
                                               shape4(op.out), static_cast<uint8_t *>(op.out.data));
            return kOk;
        default: return kUnsupported;
    }
}

EXEC_KERNEL int max_pool(const Op &op) {
    const tflite::PoolParams p = pool_params(op);
    switch (op.dtype) {
        case PDT_F32:
            tflite::reference_ops::MaxPool(p, shape4(op.in), static_cast<const float *>(op.in.data),
                                           shape4(op.out), static_cast<float *>(op.out.data));
            return kOk;
        case PDT_INT8:
            tflite::reference_integer_ops::MaxPool(p, shape4(op.in),
                                                   static_cast<const int8_t *>(op.in.data),
                                                   shape4(op.out), static_cast<int8_t *>(op.out.data));
            return kOk;
        case PDT_UINT8:
            tflite::reference_ops::MaxPool(p, shape4(op.in), static_cast<const uint8_t *>(op.in.data),
                                           shape4(op.out), static_cast<uint8_t *>(op.out.data));
            return kOk;
        default: return kUnsupported;
    }
}

// TFLM's FULLY_CONNECTED: input flattened to [batches, depth], weights
// [units, depth], output [batches, units].
EXEC_KERNEL int fully_connected(const Op &op) {
    tflite::FullyConnectedParams p = {};
    p.input_offset = op.w[OPW_INPUT_OFFSET];
    p.weights_offset = op.w[OPW_WEIGHTS_OFFSET];
    p.output_offset = op.w[OPW_OUTPUT_OFFSET];
    p.output_multiplier = op.w[OPW_OUTPUT_MULTIPLIER];
    p.output_shift = op.w[OPW_OUTPUT_SHIFT];
    p.quantized_activation_min = op.w[OPW_ACT_MIN];
    p.quantized_activation_max = op.w[OPW_ACT_MAX];
    p.float_activation_min = fmin_of(op);
    p.float_activation_max = fmax_of(op);
    const int32_t units = op.weights.dims[0];
    const int32_t depth = op.weights.bytes / static_cast<int32_t>(elem_size(op.weights.dtype)) / units;
    const int32_t batches = flat(op.in) / depth;
    const RuntimeShape in_s = shape2(batches, depth), w_s = shape2(units, depth),
                       b_s = shape1(units), out_s = shape2(batches, units);
    switch (op.dtype) {
        case PDT_F32:
            tflite::reference_ops::FullyConnected(
                p, in_s, static_cast<const float *>(op.in.data), w_s,
                static_cast<const float *>(op.weights.data), b_s,
                op.has_bias ? static_cast<const float *>(op.bias.data) : nullptr, out_s,
                static_cast<float *>(op.out.data));
            return kOk;
        case PDT_INT8: {
            // Weights quantised per output unit: TFLM's
            // reference_integer_ops::FullyConnectedPerChannel (same loop nest
            // as the per-tensor kernel, one multiplier and shift per unit).
            const int32_t *mult = channel_array(op, OPW_CHANNEL_MULTIPLIERS);
            const int32_t *shift = channel_array(op, OPW_CHANNEL_SHIFTS);
            if (mult && shift) {
                const int8_t *in = static_cast<const int8_t *>(op.in.data);
                const int8_t *w = static_cast<const int8_t *>(op.weights.data);
                const int32_t *bias = op.has_bias ? static_cast<const int32_t *>(op.bias.data) : nullptr;
                int8_t *out = static_cast<int8_t *>(op.out.data);
                for (int32_t b = 0; b < batches; ++b) {
                    for (int32_t u = 0; u < units; ++u) {
                        int32_t acc = 0;
                        for (int32_t d = 0; d < depth; ++d) {
                            acc += (in[b * depth + d] + p.input_offset) *
                                   (w[u * depth + d] + p.weights_offset);
                        }
                        if (bias) acc += bias[u];
                        acc = tflite::MultiplyByQuantizedMultiplier(acc, mult[u], shift[u]);
                        acc += p.output_offset;
                        if (acc < p.quantized_activation_min) acc = p.quantized_activation_min;
                        if (acc > p.quantized_activation_max) acc = p.quantized_activation_max;
                        out[b * units + u] = static_cast<int8_t>(acc);
                    }
                }
                return kOk;
            }
            tflite::reference_integer_ops::FullyConnected(
                p, in_s, static_cast<const int8_t *>(op.in.data), w_s,
                static_cast<const int8_t *>(op.weights.data), b_s,
                op.has_bias ? static_cast<const int32_t *>(op.bias.data) : nullptr, out_s,
                static_cast<int8_t *>(op.out.data));
            return kOk;
        }
        case PDT_UINT8:
            tflite::reference_ops::FullyConnected(
                p, in_s, static_cast<const uint8_t *>(op.in.data), w_s,
                static_cast<const uint8_t *>(op.weights.data), b_s,
                op.has_bias ? static_cast<const int32_t *>(op.bias.data) : nullptr, out_s,
                static_cast<uint8_t *>(op.out.data));
            return kOk;
        default: return kUnsupported;
    }
}

EXEC_KERNEL int add(const Op &op) {
    tflite::ArithmeticParams p = {};
    p.left_shift = op.w[OPW_LEFT_SHIFT];
    p.input1_offset = op.w[OPW_INPUT_OFFSET];
    p.input2_offset = op.w[OPW_INPUT2_OFFSET];
    p.output_offset = op.w[OPW_OUTPUT_OFFSET];
    p.input1_multiplier = op.w[OPW_INPUT1_MULTIPLIER];
    p.input1_shift = op.w[OPW_INPUT1_SHIFT];
    p.input2_multiplier = op.w[OPW_INPUT2_MULTIPLIER];
    p.input2_shift = op.w[OPW_INPUT2_SHIFT];
    p.output_multiplier = op.w[OPW_OUTPUT_MULTIPLIER];
    p.output_shift = op.w[OPW_OUTPUT_SHIFT];
    p.quantized_activation_min = op.w[OPW_ACT_MIN];
    p.quantized_activation_max = op.w[OPW_ACT_MAX];
    p.float_activation_min = fmin_of(op);
    p.float_activation_max = fmax_of(op);
    const RuntimeShape s = shape4(op.out);
    switch (op.dtype) {
        case PDT_F32:
            tflite::reference_ops::Add(p, s, static_cast<const float *>(op.in.data), s,
                                       static_cast<const float *>(op.in2.data), s,
                                       static_cast<float *>(op.out.data));
            return kOk;
        case PDT_INT8:
            tflite::reference_integer_ops::Add(p, s, static_cast<const int8_t *>(op.in.data), s,
                                               static_cast<const int8_t *>(op.in2.data), s,
                                               static_cast<int8_t *>(op.out.data));
            return kOk;
        case PDT_UINT8:
            tflite::reference_ops::Add(p, s, static_cast<const uint8_t *>(op.in.data), s,
                                       static_cast<const uint8_t *>(op.in2.data), s,
                                       static_cast<uint8_t *>(op.out.data));
            return kOk;
        default: return kUnsupported;
    }
}

EXEC_KERNEL int softmax(const Op &op) {
    tflite::SoftmaxParams p = {};
    float beta;
    memcpy(&beta, &op.w[OPW_BETA], 4);
    p.beta = beta;
    p.input_multiplier = op.w[OPW_SOFTMAX_MULTIPLIER];
    p.input_left_shift = op.w[OPW_SOFTMAX_LEFT_SHIFT];
    p.diff_min = op.w[OPW_DIFF_MIN];
    const RuntimeShape in_s = shape(op.in), out_s = shape(op.out);
    switch (op.dtype) {
        case PDT_F32:
            tflite::reference_ops::Softmax(p, in_s, static_cast<const float *>(op.in.data), out_s,
                                           static_cast<float *>(op.out.data));
            return kOk;
        case PDT_INT8:
            tflite::reference_ops::Softmax(p, in_s, static_cast<const int8_t *>(op.in.data), out_s,
                                           static_cast<int8_t *>(op.out.data));
            return kOk;
        case PDT_UINT8:
            tflite::reference_ops::Softmax(p, in_s, static_cast<const uint8_t *>(op.in.data), out_s,
                                           static_cast<uint8_t *>(op.out.data));
            return kOk;
        default: return kUnsupported;
    }
}

// TFLM's RESHAPE copies the bytes when input and output are not the same
// memory.
EXEC_KERNEL int reshape(const Op &op) {
    if (op.in.data != op.out.data) {
        memcpy(op.out.data, op.in.data, static_cast<size_t>(op.out.bytes));
    }
    return kOk;
}

float quant_scale(const Op &op) {
    float v;
    memcpy(&v, &op.w[OPW_QUANT_SCALE], 4);
    return v;
}

// QUANTIZE float -> int8/uint8 (scale and zero point of the output).
EXEC_KERNEL int quantize(const Op &op) {
    if (op.dtype != PDT_F32) return kUnsupported;
    tflite::QuantizationParams p;
    p.zero_point = op.w[OPW_QUANT_ZERO_POINT];
    p.scale = quant_scale(op);
    const RuntimeShape in_s = shape(op.in), out_s = shape(op.out);
    const float *in = static_cast<const float *>(op.in.data);
    switch (op.out.dtype) {
        case PDT_INT8:
            tflite::reference_ops::AffineQuantize(p, in_s, in, out_s, static_cast<int8_t *>(op.out.data));
            return kOk;
        case PDT_UINT8:
            tflite::reference_ops::AffineQuantize(p, in_s, in, out_s, static_cast<uint8_t *>(op.out.data));
            return kOk;
        default: return kUnsupported;
    }
}

// DEQUANTIZE int8/uint8 -> float (scale and zero point of the input).
EXEC_KERNEL int dequantize(const Op &op) {
    if (op.out.dtype != PDT_F32) return kUnsupported;
    tflite::DequantizationParams p;
    p.zero_point = op.w[OPW_QUANT_ZERO_POINT];
    p.scale = quant_scale(op);
    const RuntimeShape in_s = shape(op.in), out_s = shape(op.out);
    float *out = static_cast<float *>(op.out.data);
    switch (op.dtype) {
        case PDT_INT8:
            tflite::reference_ops::Dequantize(p, in_s, static_cast<const int8_t *>(op.in.data), out_s, out);
            return kOk;
        case PDT_UINT8:
            tflite::reference_ops::Dequantize(p, in_s, static_cast<const uint8_t *>(op.in.data), out_s, out);
            return kOk;
        default: return kUnsupported;
    }
}

EXEC_KERNEL int relu(const Op &op) {
    const int32_t n = flat(op.out);
    if (op.dtype == PDT_F32) {
        const float *in = static_cast<const float *>(op.in.data);
        float *out = static_cast<float *>(op.out.data);
        const float lo = fmin_of(op), hi = fmax_of(op);
        for (int32_t i = 0; i < n; ++i) {
            const float v = in[i];
            out[i] = v > hi ? hi : v < lo ? lo : v;
        }
        return kOk;
    }
    if (op.dtype == PDT_INT8) {
        const int8_t *in = static_cast<const int8_t *>(op.in.data);
        int8_t *out = static_cast<int8_t *>(op.out.data);
        const int32_t lo = op.w[OPW_ACT_MIN], hi = op.w[OPW_ACT_MAX];
        for (int32_t i = 0; i < n; ++i) {
            const int32_t v = in[i];
            out[i] = static_cast<int8_t>(v > hi ? hi : v < lo ? lo : v);
        }
        return kOk;
    }
    return kUnsupported;
}

// PAD: the weights tensor holds the host's [4, 2] int32 paddings (before,
// after per NHWC dimension, a lower-rank model's padded with zeros as TFLM
// pads them); TFLM pads floats with 0 and int8/uint8 with the output zero
// point.
EXEC_KERNEL int pad(const Op &op) {
    if (!op.has_weights || op.weights.dtype != PDT_INT32 || flat(op.weights) != 8) {
        return kUnsupported;
    }
    const int32_t *amounts = static_cast<const int32_t *>(op.weights.data);
    tflite::PadParams p = {};
    p.left_padding_count = 4;
    p.right_padding_count = 4;
    for (int i = 0; i < 4; ++i) {
        p.left_padding[i] = amounts[2 * i];
        p.right_padding[i] = amounts[2 * i + 1];
    }
    switch (op.dtype) {
        case PDT_F32: {
            const float value = 0.0f;
            tflite::reference_ops::Pad(p, shape4(op.in), static_cast<const float *>(op.in.data),
                                       &value, shape4(op.out), static_cast<float *>(op.out.data));
            return kOk;
        }
        case PDT_INT8: {
            const int8_t value = static_cast<int8_t>(op.out.zero_point);
            tflite::reference_ops::Pad(p, shape4(op.in), static_cast<const int8_t *>(op.in.data),
                                       &value, shape4(op.out), static_cast<int8_t *>(op.out.data));
            return kOk;
        }
        case PDT_UINT8: {
            const uint8_t value = static_cast<uint8_t>(op.out.zero_point);
            tflite::reference_ops::Pad(p, shape4(op.in), static_cast<const uint8_t *>(op.in.data),
                                       &value, shape4(op.out), static_cast<uint8_t *>(op.out.data));
            return kOk;
        }
        default: return kUnsupported;
    }
}

// TRANSPOSE_CONV, int8 per-channel: TFLM's reference kernel with its int32
// accumulator in the arena scratch tensor. tfmicro 0.1.0 has the float
// kernel only in reference_ops.h, which needs Eigen and does not build
// freestanding, so float transpose convolutions are not run (the host says
// so before it builds a program). The int8 kernel clamps to the int8 range
// only, as current TFLM's Prepare does (it computes the range for
// kTfLiteActNone).
EXEC_KERNEL int transpose_conv(const Op &op) {
    if (op.dtype != PDT_INT8 || !op.scratch_buf) return kUnsupported;
    const tflite::ConvParams p = window_params<tflite::ConvParams>(op);
    tflite::reference_integer_ops::TransposeConv(
        p, channel_array(op, OPW_CHANNEL_MULTIPLIERS), channel_array(op, OPW_CHANNEL_SHIFTS),
        shape4(op.in), static_cast<const int8_t *>(op.in.data), shape4(op.weights),
        static_cast<const int8_t *>(op.weights.data), shape1(op.out.dims[3]),
        op.has_bias ? static_cast<const int32_t *>(op.bias.data) : nullptr, shape4(op.out),
        static_cast<int8_t *>(op.out.data), RuntimeShape(), nullptr,
        static_cast<int32_t *>(op.scratch_buf));
    return kOk;
}

// TinySeg's "temporary tensor quantisation": the same scatter loop nest as
// TFLM's int8 reference kernel (so its trace is comparable), with the
// accumulator scratch narrowed to int16. Partial sums wrap modulo 2^16
// (two's complement), so an output equals the int32 kernel's exactly when its
// final sum (before the bias) fits in int16; otherwise it is wrong.
EXEC_KERNEL int transpose_conv_int16_acc(const Op &op) {
    if (op.dtype != PDT_INT8 || !op.scratch_buf) return kUnsupported;
    const RuntimeShape in_s = shape4(op.in), f_s = shape4(op.weights), out_s = shape4(op.out);
    const int8_t *in = static_cast<const int8_t *>(op.in.data);
    const int8_t *filter = static_cast<const int8_t *>(op.weights.data);
    const int32_t *bias = op.has_bias ? static_cast<const int32_t *>(op.bias.data) : nullptr;
    const int32_t *mult = channel_array(op, OPW_CHANNEL_MULTIPLIERS);
    const int32_t *shift = channel_array(op, OPW_CHANNEL_SHIFTS);
    int16_t *acc = static_cast<int16_t *>(op.scratch_buf);
    int8_t *out = static_cast<int8_t *>(op.out.data);
    const int32_t batches = in_s.Dims(0), in_h = in_s.Dims(1), in_w = in_s.Dims(2);
    const int32_t in_c = in_s.Dims(3), f_h = f_s.Dims(1), f_w = f_s.Dims(2);
    const int32_t out_h = out_s.Dims(1), out_w = out_s.Dims(2), out_c = out_s.Dims(3);
    const int32_t stride_h = op.w[OPW_STRIDE_H], stride_w = op.w[OPW_STRIDE_W];
    const int32_t input_offset = op.w[OPW_INPUT_OFFSET];
    memset(acc, 0, static_cast<size_t>(out_s.FlatSize()) * sizeof(int16_t));
    for (int32_t b = 0; b < batches; ++b) {
        for (int32_t iy = 0; iy < in_h; ++iy) {
            for (int32_t ix = 0; ix < in_w; ++ix) {
                for (int32_t ic = 0; ic < in_c; ++ic) {
                    const int32_t oy0 = iy * stride_h - op.w[OPW_PAD_H];
                    const int32_t ox0 = ix * stride_w - op.w[OPW_PAD_W];
                    for (int32_t fy = 0; fy < f_h; ++fy) {
                        for (int32_t fx = 0; fx < f_w; ++fx) {
                            for (int32_t oc = 0; oc < out_c; ++oc) {
                                const int32_t oy = oy0 + fy, ox = ox0 + fx;
                                if (oy < 0 || oy >= out_h || ox < 0 || ox >= out_w) continue;
                                const int32_t x = in[tflite::Offset(in_s, b, iy, ix, ic)] + input_offset;
                                const int32_t w = filter[tflite::Offset(f_s, oc, fy, fx, ic)];
                                int16_t &a = acc[tflite::Offset(out_s, b, oy, ox, oc)];
                                // Unsigned arithmetic: the defined wrap-around.
                                a = static_cast<int16_t>(static_cast<uint16_t>(a) +
                                                         static_cast<uint16_t>(x * w));
                            }
                        }
                    }
                }
            }
        }
    }
    const int32_t n = out_s.FlatSize();
    for (int32_t i = 0; i < n; ++i) {
        const int32_t oc = i % out_c;
        int32_t v = acc[i] + (bias ? bias[oc] : 0);
        v = tflite::MultiplyByQuantizedMultiplier(v, mult[oc], shift[oc]) + op.w[OPW_OUTPUT_OFFSET];
        v = v < -128 ? -128 : v > 127 ? 127 : v;
        out[i] = static_cast<int8_t>(v);
    }
    return kOk;
}

// CONCATENATION: TFLM's reference kernel (a copy per input and outer index;
// int8 ignores the tensors' scales as TFLM does, so the host only builds it
// when they agree).
template <typename T>
int concatenate(const Op &op) {
    RuntimeShape shapes[MEMTRACE_PROGRAM_MAX_INPUTS];
    const RuntimeShape *shape_ptrs[MEMTRACE_PROGRAM_MAX_INPUTS];
    const T *data[MEMTRACE_PROGRAM_MAX_INPUTS];
    for (int32_t k = 0; k < op.n_inputs; ++k) {
        const Tensor t = input_tensor(op, k);
        shapes[k].ReplaceWith(t.ndims, t.dims);
        shape_ptrs[k] = &shapes[k];
        data[k] = static_cast<const T *>(t.data);
    }
    tflite::ConcatenationParams p = {};
    p.axis = op.w[OPW_AXIS];
    p.inputs_count = op.n_inputs;
    tflite::reference_ops::Concatenation(p, shape_ptrs, data, shape(op.out),
                                         static_cast<T *>(op.out.data));
    return kOk;
}

EXEC_KERNEL int concatenation(const Op &op) {
    if (op.n_inputs < 1 || op.n_inputs > static_cast<int32_t>(MEMTRACE_PROGRAM_MAX_INPUTS) ||
        op.w[OPW_AXIS] < 0 || op.w[OPW_AXIS] >= op.out.ndims) {
        return kUnsupported;
    }
    switch (op.dtype) {
        case PDT_F32: return concatenate<float>(op);
        case PDT_INT8: return concatenate<int8_t>(op);
        case PDT_UINT8: return concatenate<uint8_t>(op);
        default: return kUnsupported;
    }
}

}  // namespace

int32_t reference_scratch_bytes(const Op &op) {
    if (op.kind != PK_TRANSPOSE_CONV || op.dtype != PDT_INT8) return 0;
    const int32_t acc = op.w[OPW_ACCUMULATOR_BYTES] == 2 ? 2 : 4;
    return flat(op.out) * acc;
}

int reference_run(const Op &op) {
    switch (op.kind) {
        case PK_CONV2D: return conv2d(op);
        case PK_DEPTHWISE_CONV2D: return depthwise_conv2d(op);
        case PK_MAX_POOL: return max_pool(op);
        case PK_AVERAGE_POOL: return average_pool(op);
        case PK_FULLY_CONNECTED: return fully_connected(op);
        case PK_ADD: return add(op);
        case PK_RELU: return relu(op);
        case PK_SOFTMAX: return softmax(op);
        case PK_RESHAPE: return reshape(op);
        case PK_QUANTIZE: return quantize(op);
        case PK_DEQUANTIZE: return dequantize(op);
        case PK_TRANSPOSE_CONV:
            return op.w[OPW_ACCUMULATOR_BYTES] == 2 ? transpose_conv_int16_acc(op) : transpose_conv(op);
        case PK_CONCATENATION: return concatenation(op);
        case PK_PAD: return pad(op);
        default: return kUnsupported;
    }
}

}  // namespace exec

// newlib's expf reports range errors through errno; no C library is linked,
// so the executor provides the errno location itself.
extern "C" {
static int g_errno;
int *__errno(void) { return &g_errno; }
int *__errno_location(void) { return &g_errno; }
}

#if defined(__x86_64__)
// x86-64 only: glibc's expf cannot be linked freestanding (IFUNC), so this
// is the executor's expf: e^x = 2^k * e^r with r = x - k*ln2, |r| <= ln2/2,
// e^r by its Taylor series in double (error far below one float ulp), then
// rounded to float. Float results may differ from newlib's in the last ulp;
// verification compares runs on the same target only.
extern "C" float expf(float xf) {
    const double x = xf;
    if (x != x) return xf;
    if (x > 88.8) return __builtin_inff();
    if (x < -104.0) return 0.0f;
    const double ln2 = 0.6931471805599453094;
    const double kd = __builtin_floor(x / ln2 + 0.5);
    const double r = x - kd * ln2;
    double term = 1.0, sum = 1.0;
    for (int i = 1; i < 16; ++i) {
        term *= r / i;
        sum += term;
    }
    int k = static_cast<int>(kd);
    while (k > 0) { sum *= 2.0; --k; }
    while (k < 0) { sum *= 0.5; ++k; }
    return static_cast<float>(sum);
}

// roundf (QUANTIZE's TfLiteRound): half away from zero. x - trunc(x) is
// exact in float, so the comparison with 0.5 is too.
extern "C" float roundf(float x) {
    if (!(x == x) || __builtin_fabsf(x) >= 8388608.0f) return x;
    const float t = static_cast<float>(static_cast<long long>(x));
    const float frac = x - t;
    if (frac >= 0.5f) return t + 1.0f;
    if (frac <= -0.5f) return t - 1.0f;
    return t;
}
#endif
