// kernels_spill.cc — TinySeg's storage operators, shared by every kernel
// library of the executor: SPILL (a byte range of an arena tensor to
// storage, or to a new arena tensor for the part of a split that stays),
// FETCH (storage to arena), FETCH_CONCAT (TFLM's reference concatenation of
// an arena tensor and a storage tensor) and FETCH_CONV2D (a convolution over
// the concatenation of its inputs, read where they lie).
//
// FETCH_CONV2D computes exactly what TFLM's reference CONV_2D computes on the
// materialised concatenation: the same loops in the same order (output
// position, output channel, filter row, filter column, input channel), the
// same accumulation and requantisation (MultiplyByQuantizedMultiplier,
// output offset, clamp) — only each tap's input channels are read from the
// part of the concatenation that holds them. So its outputs are bit-exact
// with the reference conv it replaces, for int8 and float32.
#include <string.h>

#include <algorithm>

#include "executor.h"
#include "memtrace_program.h"
#include "tensorflow/lite/kernels/internal/common.h"
#include "tensorflow/lite/kernels/internal/reference/concatenation.h"
#include "tensorflow/lite/kernels/internal/types.h"

#define EXEC_KERNEL __attribute__((noinline))

namespace exec {
namespace {

using tflite::RuntimeShape;

RuntimeShape shape4(const Tensor &t) {
    return RuntimeShape::ExtendedShape(4, RuntimeShape(t.ndims, t.dims));
}

EXEC_KERNEL int spill(const Op &op) {
    const int32_t from = op.w[OPW_COPY_FROM];
    if (from < 0 || from + op.out.bytes > op.in.bytes) {
        return kUnsupported;
    }
    memcpy(op.out.data, static_cast<const unsigned char *>(op.in.data) + from,
           static_cast<size_t>(op.out.bytes));
    return kOk;
}

EXEC_KERNEL int fetch(const Op &op) {
    if (op.out.bytes > op.in.bytes) {
        return kUnsupported;
    }
    memcpy(op.out.data, op.in.data, static_cast<size_t>(op.out.bytes));
    return kOk;
}

// OPW_AXIS counts in the tensor's own rank; the kernels see 4-D shapes.
int axis4(const Op &op, const Tensor &t) { return op.w[OPW_AXIS] + 4 - t.ndims; }

template <typename T>
void concat_two(const Op &op) {
    tflite::ConcatenationParams p = {};
    p.axis = static_cast<int8_t>(axis4(op, op.out));
    p.inputs_count = 2;
    const RuntimeShape a = shape4(op.in), b = shape4(op.in2);
    const RuntimeShape *shapes[2] = {&a, &b};
    const T *data[2] = {static_cast<const T *>(op.in.data), static_cast<const T *>(op.in2.data)};
    tflite::reference_ops::Concatenation(p, shapes, data, shape4(op.out),
                                         static_cast<T *>(op.out.data));
}

EXEC_KERNEL int fetch_concat(const Op &op) {
    if (!op.has_in2 || axis4(op, op.out) < 0 || axis4(op, op.out) > 3) {
        return kUnsupported;
    }
    switch (op.dtype) {
        case PDT_F32: concat_two<float>(op); return kOk;
        case PDT_INT8:
        case PDT_UINT8: concat_two<int8_t>(op); return kOk;
        default: return kUnsupported;
    }
}

// The concatenation of one or two tensors along `axis`, read in place.
struct Concatenated {
    const void *data[2];
    const RuntimeShape *shape[2];
    int axis;
    int split;  // extent of the first part along `axis`
    bool two;

    // The input channels at (b, y, x) as up to two runs: `count[0]` elements
    // at `run[0]`, then `count[1]` at `run[1]` (a channel concatenation
    // splits every position's channels between the parts; a row or column
    // concatenation puts each position in one part).
    template <typename T>
    void channels(int b, int y, int x, const T *run[2], int count[2]) const {
        int i[4] = {b, y, x, 0};
        count[1] = 0;
        run[1] = nullptr;
        if (two && axis == 3) {
            run[0] = static_cast<const T *>(data[0]) + tflite::Offset(*shape[0], b, y, x, 0);
            run[1] = static_cast<const T *>(data[1]) + tflite::Offset(*shape[1], b, y, x, 0);
            count[0] = shape[0]->Dims(3);
            count[1] = shape[1]->Dims(3);
            return;
        }
        int k = 0;
        if (two && i[axis] >= split) {
            i[axis] -= split;
            k = 1;
        }
        run[0] = static_cast<const T *>(data[k]) + tflite::Offset(*shape[k], i[0], i[1], i[2], 0);
        count[0] = shape[k]->Dims(3);
    }
};

// Accumulates one kernel tap over the input channels in order, as TFLM's
// reference loops do: int8 `acc += filter * (input + input_offset)`, float
// `total += input * filter`.
inline void tap(int32_t &acc, const int8_t *const run[2], const int count[2], const int8_t *filter,
                int32_t input_offset) {
    int c = 0;
    for (int r = 0; r < 2; ++r) {
        for (int j = 0; j < count[r]; ++j, ++c) {
            acc += static_cast<int32_t>(filter[c]) * (static_cast<int32_t>(run[r][j]) + input_offset);
        }
    }
}

inline void tap(float &total, const float *const run[2], const int count[2], const float *filter,
                int32_t) {
    int c = 0;
    for (int r = 0; r < 2; ++r) {
        for (int j = 0; j < count[r]; ++j, ++c) {
            total += (run[r][j] * filter[c]);
        }
    }
}

// Requantises or clamps one accumulated output as TFLM's reference kernels do.
inline int8_t finish(const Op &op, int32_t acc, int out_channel, const int32_t *mult,
                     const int32_t *shift) {
    if (op.has_bias) {
        acc += static_cast<const int32_t *>(op.bias.data)[out_channel];
    }
    acc = tflite::MultiplyByQuantizedMultiplier(acc, mult[out_channel], shift[out_channel]);
    acc += op.w[OPW_OUTPUT_OFFSET];
    acc = std::max(acc, op.w[OPW_ACT_MIN]);
    acc = std::min(acc, op.w[OPW_ACT_MAX]);
    return static_cast<int8_t>(acc);
}

inline float finish(const Op &op, float total, int out_channel, const int32_t *, const int32_t *) {
    float bias_value = 0.0f;
    if (op.has_bias) {
        bias_value = static_cast<const float *>(op.bias.data)[out_channel];
    }
    float fmin, fmax;
    memcpy(&fmin, &op.w[OPW_FLOAT_MIN], 4);
    memcpy(&fmax, &op.w[OPW_FLOAT_MAX], 4);
    return tflite::ActivationFunctionWithMinMax(total + bias_value, fmin, fmax);
}

// TFLM reference_integer_ops::ConvPerChannel (T = int8_t, Acc = int32_t) and
// reference_ops::Conv (float): the same loops in the same order, the input
// read through `in`.
template <typename T, typename Acc>
int conv_over(const Op &op, const Concatenated &in, const RuntimeShape &input_shape) {
    const RuntimeShape filter_shape = shape4(op.weights);
    const RuntimeShape output_shape = shape4(op.out);
    const int stride_width = op.w[OPW_STRIDE_W];
    const int stride_height = op.w[OPW_STRIDE_H];
    const int dilation_width_factor = op.w[OPW_DILATION_W];
    const int dilation_height_factor = op.w[OPW_DILATION_H];
    const int pad_width = op.w[OPW_PAD_W];
    const int pad_height = op.w[OPW_PAD_H];
    const int batches = input_shape.Dims(0);
    const int input_depth = input_shape.Dims(3);
    const int output_depth = filter_shape.Dims(0);
    if (filter_shape.Dims(3) != input_depth || output_shape.Dims(3) != output_depth) {
        return kUnsupported;
    }
    const int input_height = input_shape.Dims(1);
    const int input_width = input_shape.Dims(2);
    const int filter_height = filter_shape.Dims(1);
    const int filter_width = filter_shape.Dims(2);
    const int output_height = output_shape.Dims(1);
    const int output_width = output_shape.Dims(2);
    const T *filter_data = static_cast<const T *>(op.weights.data);
    const int32_t *mult = channel_array(op, OPW_CHANNEL_MULTIPLIERS);
    const int32_t *shift = channel_array(op, OPW_CHANNEL_SHIFTS);
    if (sizeof(T) == 1 && !(mult && shift)) {
        return kUnsupported;
    }
    const int32_t input_offset = op.w[OPW_INPUT_OFFSET];
    T *output_data = static_cast<T *>(op.out.data);
    for (int batch = 0; batch < batches; ++batch) {
        for (int out_y = 0; out_y < output_height; ++out_y) {
            for (int out_x = 0; out_x < output_width; ++out_x) {
                for (int out_channel = 0; out_channel < output_depth; ++out_channel) {
                    const int in_x_origin = (out_x * stride_width) - pad_width;
                    const int in_y_origin = (out_y * stride_height) - pad_height;
                    Acc acc = 0;
                    for (int filter_y = 0; filter_y < filter_height; ++filter_y) {
                        for (int filter_x = 0; filter_x < filter_width; ++filter_x) {
                            const int in_x = in_x_origin + dilation_width_factor * filter_x;
                            const int in_y = in_y_origin + dilation_height_factor * filter_y;
                            // Zero padding by omitting the areas outside the image.
                            if ((in_x >= 0) && (in_x < input_width) && (in_y >= 0) &&
                                (in_y < input_height)) {
                                const T *run[2];
                                int count[2];
                                in.channels<T>(batch, in_y, in_x, run, count);
                                tap(acc, run, count,
                                    filter_data + tflite::Offset(filter_shape, out_channel, filter_y,
                                                                 filter_x, 0),
                                    input_offset);
                            }
                        }
                    }
                    output_data[tflite::Offset(output_shape, batch, out_y, out_x, out_channel)] =
                        finish(op, acc, out_channel, mult, shift);
                }
            }
        }
    }
    return kOk;
}

EXEC_KERNEL int fetch_conv2d(const Op &op) {
    const int axis = axis4(op, op.in);
    if (axis < 0 || axis > 3 || !op.has_weights) {
        return kUnsupported;
    }
    const RuntimeShape first = shape4(op.in);
    const RuntimeShape second = op.has_in2 ? shape4(op.in2) : shape4(op.in);
    Concatenated in;
    in.data[0] = op.in.data;
    in.data[1] = op.has_in2 ? op.in2.data : op.in.data;
    in.shape[0] = &first;
    in.shape[1] = &second;
    in.two = op.has_in2;
    in.axis = axis;
    in.split = first.Dims(axis);
    RuntimeShape input_shape(4, first.DimsData());
    if (in.two) {
        input_shape.SetDim(axis, in.split + second.Dims(axis));
    }
    switch (op.dtype) {
        case PDT_F32: return conv_over<float, float>(op, in, input_shape);
        case PDT_INT8: return conv_over<int8_t, int32_t>(op, in, input_shape);
        default: return kUnsupported;
    }
}

}  // namespace

bool is_storage_op(int32_t kind) {
    return kind == PK_SPILL || kind == PK_FETCH || kind == PK_FETCH_CONCAT || kind == PK_FETCH_CONV2D;
}

int storage_run(const Op &op) {
    switch (op.kind) {
        case PK_SPILL: return spill(op);
        case PK_FETCH: return fetch(op);
        case PK_FETCH_CONCAT: return fetch_concat(op);
        case PK_FETCH_CONV2D: return fetch_conv2d(op);
        default: return kUnsupported;
    }
}

}  // namespace exec
