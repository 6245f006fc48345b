// kernels.cc — the TensorFlow Lite Micro reference kernels of the suite,
// compiled from the tfmicro crate's registry copy (see Makefile), plus the few
// ops that have no usable reference header in that version. They are the
// kernel library of suite.elf (library_reference.cc), and the fallback and
// bit-exactness reference of suite-cmsis.elf (kernels_cmsis.cc).
//
// Each op/dtype pair has its own non-inlined function so a traced PC resolves
// to a readable name; the TFLM code inlined into it keeps its own file:line in
// the DWARF line table.
#include <limits>

#include "suite.h"
#include "tensorflow/lite/kernels/internal/common.h"
#include "tensorflow/lite/kernels/internal/reference/add.h"
#include "tensorflow/lite/kernels/internal/reference/concatenation.h"
#include "tensorflow/lite/kernels/internal/reference/conv.h"
#include "tensorflow/lite/kernels/internal/reference/depthwiseconv_float.h"
#include "tensorflow/lite/kernels/internal/reference/fully_connected.h"
#include "tensorflow/lite/kernels/internal/reference/integer_ops/add.h"
#include "tensorflow/lite/kernels/internal/reference/integer_ops/conv.h"
#include "tensorflow/lite/kernels/internal/reference/integer_ops/depthwise_conv.h"
#include "tensorflow/lite/kernels/internal/reference/integer_ops/fully_connected.h"
#include "tensorflow/lite/kernels/internal/reference/integer_ops/pooling.h"
#include "tensorflow/lite/kernels/internal/reference/integer_ops/transpose_conv.h"
#include "tensorflow/lite/kernels/internal/reference/pad.h"
#include "tensorflow/lite/kernels/internal/reference/pooling.h"
#include "tensorflow/lite/kernels/internal/types.h"

#if MEMTRACE_DW_CHANNEL_OUTER
#include "dw_channel_outer.h"
#endif

#define MEMTRACE_KERNEL __attribute__((noinline))

namespace memtrace {
namespace {

using tflite::RuntimeShape;

RuntimeShape shape4(const int32_t *d) { return RuntimeShape(4, d); }

RuntimeShape shape1(int32_t n) { return RuntimeShape(1, &n); }

RuntimeShape shape2(int32_t a, int32_t b) {
    const int32_t d[2] = {a, b};
    return RuntimeShape(2, d);
}

void float_activation(int32_t act, float *lo, float *hi) {
    *lo = act >= 1 ? 0.0f : std::numeric_limits<float>::lowest();
    *hi = act == 2 ? 6.0f : std::numeric_limits<float>::max();
}

tflite::PaddingValues padding_values(const Layer &l) {
    tflite::PaddingValues p = {};
    p.height = static_cast<int16_t>(l.pad_h);
    p.width = static_cast<int16_t>(l.pad_w);
    return p;
}

tflite::PaddingType padding_type(const Layer &l) {
    return l.padding == 2 ? tflite::PaddingType::kValid : tflite::PaddingType::kSame;
}

// tflite::ConvParams and tflite::DepthwiseParams share these fields.
template <typename Params>
Params window_params(const Layer &l, const Quant &q) {
    Params p = {};
    p.padding_type = padding_type(l);
    p.padding_values = padding_values(l);
    p.stride_height = static_cast<int16_t>(l.stride_h);
    p.stride_width = static_cast<int16_t>(l.stride_w);
    p.dilation_height_factor = static_cast<int16_t>(l.dilation_h);
    p.dilation_width_factor = static_cast<int16_t>(l.dilation_w);
    p.input_offset = -q.input_zero_point;
    p.weights_offset = 0;
    p.output_offset = q.output_zero_point;
    p.quantized_activation_min = q.act_min;
    p.quantized_activation_max = q.act_max;
    float_activation(l.activation, &p.float_activation_min, &p.float_activation_max);
    return p;
}

tflite::ConvParams conv_params(const Layer &l, const Quant &q) {
    return window_params<tflite::ConvParams>(l, q);
}

tflite::DepthwiseParams depthwise_params(const Layer &l, const Quant &q) {
    tflite::DepthwiseParams p = window_params<tflite::DepthwiseParams>(l, q);
    p.depth_multiplier = static_cast<int16_t>(l.depth_multiplier);
    return p;
}

tflite::PoolParams pool_params(const Layer &l, const Quant &q) {
    tflite::PoolParams p = {};
    p.padding_type = padding_type(l);
    p.padding_values = padding_values(l);
    p.stride_height = l.stride_h;
    p.stride_width = l.stride_w;
    p.filter_height = l.filter[1];
    p.filter_width = l.filter[2];
    p.quantized_activation_min = q.act_min;
    p.quantized_activation_max = q.act_max;
    float_activation(l.activation, &p.float_activation_min, &p.float_activation_max);
    return p;
}

// ---- conv2d -------------------------------------------------------------

MEMTRACE_KERNEL void conv2d_f32(const Layer &l, const Buffers &b, const Quant &q) {
    tflite::reference_ops::Conv(conv_params(l, q), shape4(l.input),
                                static_cast<const float *>(b.input), shape4(l.filter),
                                static_cast<const float *>(b.filter), shape1(l.output[3]),
                                static_cast<const float *>(b.bias), shape4(l.output),
                                static_cast<float *>(b.output), RuntimeShape(), nullptr);
}

MEMTRACE_KERNEL void conv2d_int8(const Layer &l, const Buffers &b, const Quant &q) {
    tflite::reference_integer_ops::ConvPerChannel(
        conv_params(l, q), q.channel_multiplier, q.channel_shift, shape4(l.input),
        static_cast<const int8_t *>(b.input), shape4(l.filter),
        static_cast<const int8_t *>(b.filter), shape1(l.output[3]),
        static_cast<const int32_t *>(b.bias), shape4(l.output), static_cast<int8_t *>(b.output));
}

// ---- depthwise_conv2d ---------------------------------------------------

MEMTRACE_KERNEL void depthwise_conv2d_f32(const Layer &l, const Buffers &b, const Quant &q) {
#if MEMTRACE_DW_CHANNEL_OUTER
    channel_outer::DepthwiseConv(
#else
    tflite::reference_ops::DepthwiseConv(
#endif
        depthwise_params(l, q), shape4(l.input), static_cast<const float *>(b.input),
        shape4(l.filter), static_cast<const float *>(b.filter), shape1(l.output[3]),
        static_cast<const float *>(b.bias), shape4(l.output), static_cast<float *>(b.output));
}

MEMTRACE_KERNEL void depthwise_conv2d_int8(const Layer &l, const Buffers &b, const Quant &q) {
#if MEMTRACE_DW_CHANNEL_OUTER
    channel_outer::DepthwiseConvPerChannel(
#else
    tflite::reference_integer_ops::DepthwiseConvPerChannel(
#endif
        depthwise_params(l, q), q.channel_multiplier, q.channel_shift, shape4(l.input),
        static_cast<const int8_t *>(b.input), shape4(l.filter),
        static_cast<const int8_t *>(b.filter), shape1(l.output[3]),
        static_cast<const int32_t *>(b.bias), shape4(l.output), static_cast<int8_t *>(b.output));
}

// ---- pools --------------------------------------------------------------

MEMTRACE_KERNEL void max_pool_f32(const Layer &l, const Buffers &b, const Quant &q) {
    tflite::reference_ops::MaxPool(pool_params(l, q), shape4(l.input),
                                   static_cast<const float *>(b.input), shape4(l.output),
                                   static_cast<float *>(b.output));
}

MEMTRACE_KERNEL void max_pool_int8(const Layer &l, const Buffers &b, const Quant &q) {
    tflite::reference_integer_ops::MaxPool(pool_params(l, q), shape4(l.input),
                                           static_cast<const int8_t *>(b.input), shape4(l.output),
                                           static_cast<int8_t *>(b.output));
}

MEMTRACE_KERNEL void average_pool_f32(const Layer &l, const Buffers &b, const Quant &q) {
    tflite::reference_ops::AveragePool(pool_params(l, q), shape4(l.input),
                                       static_cast<const float *>(b.input), shape4(l.output),
                                       static_cast<float *>(b.output));
}

MEMTRACE_KERNEL void average_pool_int8(const Layer &l, const Buffers &b, const Quant &q) {
    tflite::reference_integer_ops::AveragePool(pool_params(l, q), shape4(l.input),
                                               static_cast<const int8_t *>(b.input),
                                               shape4(l.output), static_cast<int8_t *>(b.output));
}

// ---- fully_connected ----------------------------------------------------
// TFLM passes 2-D shapes: input [batches, depth], weights [units, depth],
// output [batches, units]. int8 is per-tensor quantised in this version.

MEMTRACE_KERNEL void fully_connected_f32(const Layer &l, const Buffers &b, const Quant &q) {
    (void)q;
    tflite::FullyConnectedParams p = {};
    float_activation(l.activation, &p.float_activation_min, &p.float_activation_max);
    const int32_t batches = l.output[2], units = l.filter[2], depth = l.filter[3];
    tflite::reference_ops::FullyConnected(
        p, shape2(batches, depth), static_cast<const float *>(b.input), shape2(units, depth),
        static_cast<const float *>(b.filter), shape1(units), static_cast<const float *>(b.bias),
        shape2(batches, units), static_cast<float *>(b.output));
}

MEMTRACE_KERNEL void fully_connected_int8(const Layer &l, const Buffers &b, const Quant &q) {
    tflite::FullyConnectedParams p = {};
    p.input_offset = -q.input_zero_point;
    p.weights_offset = 0;
    p.output_offset = q.output_zero_point;
    p.output_multiplier = q.output_multiplier;
    p.output_shift = q.output_shift;
    p.quantized_activation_min = q.act_min;
    p.quantized_activation_max = q.act_max;
    const int32_t batches = l.output[2], units = l.filter[2], depth = l.filter[3];
    tflite::reference_integer_ops::FullyConnected(
        p, shape2(batches, depth), static_cast<const int8_t *>(b.input), shape2(units, depth),
        static_cast<const int8_t *>(b.filter), shape1(units), static_cast<const int32_t *>(b.bias),
        shape2(batches, units), static_cast<int8_t *>(b.output));
}

// ---- add ----------------------------------------------------------------

MEMTRACE_KERNEL void add_f32(const Layer &l, const Buffers &b, const Quant &q) {
    (void)q;
    tflite::ArithmeticParams p = {};
    float_activation(l.activation, &p.float_activation_min, &p.float_activation_max);
    const RuntimeShape s = shape4(l.input);
    tflite::reference_ops::Add(p, s, static_cast<const float *>(b.input), s,
                               static_cast<const float *>(b.input2), s,
                               static_cast<float *>(b.output));
}

MEMTRACE_KERNEL void add_int8(const Layer &l, const Buffers &b, const Quant &q) {
    tflite::ArithmeticParams p = {};
    p.left_shift = 20;
    p.input1_offset = -q.input_zero_point;
    p.input2_offset = -q.input2_zero_point;
    p.output_offset = q.output_zero_point;
    p.input1_multiplier = q.input1_multiplier;
    p.input1_shift = q.input1_shift;
    p.input2_multiplier = q.input2_multiplier;
    p.input2_shift = q.input2_shift;
    p.output_multiplier = q.output_multiplier;
    p.output_shift = q.output_shift;
    p.quantized_activation_min = q.act_min;
    p.quantized_activation_max = q.act_max;
    const RuntimeShape s = shape4(l.input);
    tflite::reference_integer_ops::Add(p, s, static_cast<const int8_t *>(b.input), s,
                                       static_cast<const int8_t *>(b.input2), s,
                                       static_cast<int8_t *>(b.output));
}

// ---- relu ---------------------------------------------------------------
// This TFLM version has no reference header for RELU that the suite can use
// (reference_ops.h needs Eigen, and the micro kernel's helpers are private to
// micro/kernels/activations.cc). These follow what that micro kernel does: one
// pass over the flat tensor, clamping each element — below at 0.0 (float) or
// at the input zero point (int8), and above at 6.0 or its quantised value for
// RELU6 (selected here by activation=relu6).

MEMTRACE_KERNEL void relu_f32(const Layer &l, const Buffers &b, const Quant &q) {
    (void)q;
    const int flat = tflite::MatchingFlatSize(shape4(l.input), shape4(l.output));
    const float *in = static_cast<const float *>(b.input);
    float *out = static_cast<float *>(b.output);
    const float lower = 0.0f;
    if (l.activation == 2) {
        const float upper = 6.0f;
        for (int i = 0; i < flat; ++i) {
            const float v = in[i];
            out[i] = v > upper ? upper : v < lower ? lower : v;
        }
    } else {
        for (int i = 0; i < flat; ++i) {
            const float v = in[i];
            out[i] = v < lower ? lower : v;
        }
    }
}

MEMTRACE_KERNEL void relu_int8(const Layer &l, const Buffers &b, const Quant &q) {
    const int flat = tflite::MatchingFlatSize(shape4(l.input), shape4(l.output));
    const int8_t *in = static_cast<const int8_t *>(b.input);
    int8_t *out = static_cast<int8_t *>(b.output);
    const int8_t lower = static_cast<int8_t>(q.act_min);  // the zero point
    const int8_t upper = static_cast<int8_t>(q.act_max);  // 127, or 6.0 quantised
    if (l.activation == 2) {
        for (int i = 0; i < flat; ++i) {
            const int8_t v = in[i];
            out[i] = v > upper ? upper : v < lower ? lower : v;
        }
    } else {
        for (int i = 0; i < flat; ++i) {
            const int8_t v = in[i];
            out[i] = v < lower ? lower : v;
        }
    }
}

// ---- matmul -------------------------------------------------------------
// Written for memtrace (not TFLM): C = A x B with A [M, K], B [K, N],
// C [M, N], all row-major. The output is zeroed first and then accumulated
// in place one k-slice at a time, so every output byte is written once
// (store) and then rewritten K times (update) — the DMO paper's Fig. 3b.
// The int8 variant accumulates in int8 with wrap-around (two's complement):
// its values are meaningless as numbers, its access pattern is the point.

MEMTRACE_KERNEL void matmul_f32(const Layer &l, const Buffers &b, const Quant &q) {
    (void)q;
    const int M = l.input[2], K = l.input[3], N = l.filter[3];
    const float *A = static_cast<const float *>(b.input);
    const float *B = static_cast<const float *>(b.filter);
    float *C = static_cast<float *>(b.output);
    for (int i = 0; i < M * N; ++i) {
        C[i] = 0.0f;
    }
    for (int k = 0; k < K; ++k) {
        for (int m = 0; m < M; ++m) {
            for (int n = 0; n < N; ++n) {
                C[m * N + n] += A[m * K + k] * B[k * N + n];
            }
        }
    }
}

MEMTRACE_KERNEL void matmul_int8(const Layer &l, const Buffers &b, const Quant &q) {
    (void)q;
    const int M = l.input[2], K = l.input[3], N = l.filter[3];
    const int8_t *A = static_cast<const int8_t *>(b.input);
    const int8_t *B = static_cast<const int8_t *>(b.filter);
    int8_t *C = static_cast<int8_t *>(b.output);
    for (int i = 0; i < M * N; ++i) {
        C[i] = 0;
    }
    for (int k = 0; k < K; ++k) {
        for (int m = 0; m < M; ++m) {
            for (int n = 0; n < N; ++n) {
                const uint32_t sum = static_cast<uint32_t>(C[m * N + n]) +
                                     static_cast<uint32_t>(A[m * K + k] * B[k * N + n]);
                C[m * N + n] = static_cast<int8_t>(sum & 0xFFu);
            }
        }
    }
}

// ---- transpose_conv -----------------------------------------------------
// TFLite's TRANSPOSE_CONV: filter [C_out, KH, KW, C_in], the output shape
// given, PaddingValues from the output back to the input (computed by the
// host). int8 is TFLM's reference_integer_ops::TransposeConv with its int32
// accumulator in the scratch buffer (TFLM requests it from the arena).
//
// The float reference kernel of this TFLM version lives only in
// reference_ops.h, which needs Eigen (not part of the tfmicro crate), so
// transpose_conv_f32 below follows reference_ops::TransposeConv loop for loop:
// zero the output, scatter every input element into the outputs it
// influences (batch, in_y, in_x, in_c, filter_y, filter_x, out_c), then add
// the bias in a second pass over the output.

MEMTRACE_KERNEL void transpose_conv_f32(const Layer &l, const Buffers &b, const Quant &q) {
    (void)q;
    const int batches = l.input[0], in_h = l.input[1], in_w = l.input[2], in_c = l.input[3];
    const int out_h = l.output[1], out_w = l.output[2], out_c = l.output[3];
    const int k_h = l.filter[1], k_w = l.filter[2];
    const float *in = static_cast<const float *>(b.input);
    const float *filter = static_cast<const float *>(b.filter);
    const float *bias = static_cast<const float *>(b.bias);
    float *out = static_cast<float *>(b.output);
    const int n = batches * out_h * out_w * out_c;
    for (int i = 0; i < n; ++i) {
        out[i] = 0.0f;
    }
    for (int batch = 0; batch < batches; ++batch) {
        for (int in_y = 0; in_y < in_h; ++in_y) {
            for (int in_x = 0; in_x < in_w; ++in_x) {
                for (int ic = 0; ic < in_c; ++ic) {
                    const int out_x_origin = in_x * l.stride_w - l.pad_w;
                    const int out_y_origin = in_y * l.stride_h - l.pad_h;
                    for (int fy = 0; fy < k_h; ++fy) {
                        for (int fx = 0; fx < k_w; ++fx) {
                            for (int oc = 0; oc < out_c; ++oc) {
                                const int out_x = out_x_origin + fx;
                                const int out_y = out_y_origin + fy;
                                if (out_x >= 0 && out_x < out_w && out_y >= 0 && out_y < out_h) {
                                    const float v = in[((batch * in_h + in_y) * in_w + in_x) * in_c + ic];
                                    const float w = filter[((oc * k_h + fy) * k_w + fx) * in_c + ic];
                                    out[((batch * out_h + out_y) * out_w + out_x) * out_c + oc] += v * w;
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    if (bias) {
        for (int batch = 0; batch < batches; ++batch) {
            for (int y = 0; y < out_h; ++y) {
                for (int x = 0; x < out_w; ++x) {
                    for (int oc = 0; oc < out_c; ++oc) {
                        out[((batch * out_h + y) * out_w + x) * out_c + oc] += bias[oc];
                    }
                }
            }
        }
    }
}

MEMTRACE_KERNEL void transpose_conv_int8(const Layer &l, const Buffers &b, const Quant &q) {
    tflite::ConvParams p = conv_params(l, q);
    tflite::reference_integer_ops::TransposeConv(
        p, q.channel_multiplier, q.channel_shift, shape4(l.input),
        static_cast<const int8_t *>(b.input), shape4(l.filter),
        static_cast<const int8_t *>(b.filter), shape1(l.output[3]),
        static_cast<const int32_t *>(b.bias), shape4(l.output), static_cast<int8_t *>(b.output),
        RuntimeShape(), nullptr, static_cast<int32_t *>(b.scratch));
}

// ---- concatenation ------------------------------------------------------
// TFLM's CONCATENATION of two inputs (float and int8 alike, one memcpy per
// outer index and input).

template <typename T>
void concatenation(const Layer &l, const Buffers &b) {
    tflite::ConcatenationParams p = {};
    p.axis = static_cast<int8_t>(l.axis);
    p.inputs_count = 2;
    const RuntimeShape s1 = shape4(l.input), s2 = shape4(l.input2);
    const RuntimeShape *shapes[2] = {&s1, &s2};
    const T *data[2] = {static_cast<const T *>(b.input), static_cast<const T *>(b.input2)};
    tflite::reference_ops::Concatenation(p, shapes, data, shape4(l.output),
                                         static_cast<T *>(b.output));
}

MEMTRACE_KERNEL void concatenation_f32(const Layer &l, const Buffers &b, const Quant &q) {
    (void)q;
    concatenation<float>(l, b);
}

MEMTRACE_KERNEL void concatenation_int8(const Layer &l, const Buffers &b, const Quant &q) {
    (void)q;
    concatenation<int8_t>(l, b);
}

// ---- pad ----------------------------------------------------------------
// TFLM's PAD: four left and right paddings; the value is 0.0 (float) or the
// output zero point (int8).

tflite::PadParams pad_params(const Layer &l) {
    tflite::PadParams p = {};
    p.left_padding_count = 4;
    p.right_padding_count = 4;
    for (int i = 0; i < 4; ++i) {
        p.left_padding[i] = l.pad_before[i];
        p.right_padding[i] = l.pad_after[i];
    }
    return p;
}

MEMTRACE_KERNEL void pad_f32(const Layer &l, const Buffers &b, const Quant &q) {
    (void)q;
    const float value = 0.0f;
    tflite::reference_ops::Pad(pad_params(l), shape4(l.input), static_cast<const float *>(b.input),
                               &value, shape4(l.output), static_cast<float *>(b.output));
}

MEMTRACE_KERNEL void pad_int8(const Layer &l, const Buffers &b, const Quant &q) {
    const int8_t value = static_cast<int8_t>(q.output_zero_point);
    tflite::reference_ops::Pad(pad_params(l), shape4(l.input), static_cast<const int8_t *>(b.input),
                               &value, shape4(l.output), static_cast<int8_t *>(b.output));
}

}  // namespace

uint32_t reference_scratch_bytes(const Layer &l) {
    if (l.op != OP_TRANSPOSE_CONV || l.dtype != DTYPE_INT8) {
        return 0;
    }
    uint64_t n = 4;
    for (int i = 0; i < 4; ++i) {
        n *= static_cast<uint64_t>(l.output[i]);
        if (n > 0xFFFFFFFFu) {
            return 0xFFFFFFFFu;  // more than the arena: the allocation fails
        }
    }
    return static_cast<uint32_t>(n);
}

void run_reference_kernel(const Layer &l, const Buffers &b, const Quant &q) {
    const bool i8 = l.dtype == DTYPE_INT8;
    switch (l.op) {
        case OP_CONV2D: return i8 ? conv2d_int8(l, b, q) : conv2d_f32(l, b, q);
        case OP_DEPTHWISE_CONV2D:
            return i8 ? depthwise_conv2d_int8(l, b, q) : depthwise_conv2d_f32(l, b, q);
        case OP_MAX_POOL: return i8 ? max_pool_int8(l, b, q) : max_pool_f32(l, b, q);
        case OP_AVERAGE_POOL: return i8 ? average_pool_int8(l, b, q) : average_pool_f32(l, b, q);
        case OP_FULLY_CONNECTED:
            return i8 ? fully_connected_int8(l, b, q) : fully_connected_f32(l, b, q);
        case OP_ADD: return i8 ? add_int8(l, b, q) : add_f32(l, b, q);
        case OP_RELU: return i8 ? relu_int8(l, b, q) : relu_f32(l, b, q);
        case OP_MATMUL: return i8 ? matmul_int8(l, b, q) : matmul_f32(l, b, q);
        case OP_TRANSPOSE_CONV:
            return i8 ? transpose_conv_int8(l, b, q) : transpose_conv_f32(l, b, q);
        case OP_CONCATENATION:
            return i8 ? concatenation_int8(l, b, q) : concatenation_f32(l, b, q);
        case OP_PAD: return i8 ? pad_int8(l, b, q) : pad_f32(l, b, q);
        default: return;
    }
}

}  // namespace memtrace
