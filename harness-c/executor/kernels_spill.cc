// kernels_spill.cc — TinySeg's storage operators, shared by every kernel
// library of the executor: SPILL (a byte range of an arena tensor to
// storage, or to a new arena tensor for the part of a split that stays),
// FETCH (storage to arena), FETCH_CONCAT (TFLM's reference concatenation of
// an arena tensor and a storage tensor) and FETCH_CONV2D (a convolution over
// the concatenation of its inputs, read where they lie).
//
// FETCH_CONV2D computes exactly what TFLM's reference CONV_2D computes on the
// materialised concatenation: the same loops in the same order, the same
// accumulation and requantisation (MultiplyByQuantizedMultiplier, output
// offset, clamp) — only each input element is read from the part of the
// concatenation it belongs to. So its outputs are bit-exact with the
// reference conv it replaces, for int8 and float32.
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

    template <typename T>
    T at(int b, int y, int x, int c) const {
        int i[4] = {b, y, x, c};
        int k = 0;
        if (two && i[axis] >= split) {
            i[axis] -= split;
            k = 1;
        }
        return static_cast<const T *>(data[k])[tflite::Offset(*shape[k], i[0], i[1], i[2], i[3])];
    }
};

// TFLM reference_integer_ops::ConvPerChannel and reference_ops::Conv
// (float), loop for loop, reading the input through `in`.
template <typename T>
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
    if (!(sizeof(T) == 4 || (mult && shift))) {
        return kUnsupported;
    }
    for (int batch = 0; batch < batches; ++batch) {
        for (int out_y = 0; out_y < output_height; ++out_y) {
            for (int out_x = 0; out_x < output_width; ++out_x) {
                for (int out_channel = 0; out_channel < output_depth; ++out_channel) {
                    const int in_x_origin = (out_x * stride_width) - pad_width;
                    const int in_y_origin = (out_y * stride_height) - pad_height;
                    if (sizeof(T) == 4) {
                        float total = 0.f;
                        for (int filter_y = 0; filter_y < filter_height; ++filter_y) {
                            for (int filter_x = 0; filter_x < filter_width; ++filter_x) {
                                for (int in_channel = 0; in_channel < input_depth; ++in_channel) {
                                    const int in_x = in_x_origin + dilation_width_factor * filter_x;
                                    const int in_y = in_y_origin + dilation_height_factor * filter_y;
                                    if ((in_x >= 0) && (in_x < input_width) && (in_y >= 0) &&
                                        (in_y < input_height)) {
                                        const float input_value = in.at<float>(batch, in_y, in_x, in_channel);
                                        const float filter_value = reinterpret_cast<const float *>(
                                            filter_data)[tflite::Offset(filter_shape, out_channel,
                                                                        filter_y, filter_x, in_channel)];
                                        total += (input_value * filter_value);
                                    }
                                }
                            }
                        }
                        float bias_value = 0.0f;
                        if (op.has_bias) {
                            bias_value = static_cast<const float *>(op.bias.data)[out_channel];
                        }
                        float fmin, fmax;
                        memcpy(&fmin, &op.w[OPW_FLOAT_MIN], 4);
                        memcpy(&fmax, &op.w[OPW_FLOAT_MAX], 4);
                        static_cast<float *>(op.out.data)[tflite::Offset(output_shape, batch, out_y,
                                                                         out_x, out_channel)] =
                            tflite::ActivationFunctionWithMinMax(total + bias_value, fmin, fmax);
                    } else {
                        const int32_t input_offset = op.w[OPW_INPUT_OFFSET];
                        int32_t acc = 0;
                        for (int filter_y = 0; filter_y < filter_height; ++filter_y) {
                            for (int filter_x = 0; filter_x < filter_width; ++filter_x) {
                                for (int in_channel = 0; in_channel < input_depth; ++in_channel) {
                                    const int in_x = in_x_origin + dilation_width_factor * filter_x;
                                    const int in_y = in_y_origin + dilation_height_factor * filter_y;
                                    const bool is_point_inside_image = (in_x >= 0) && (in_x < input_width) &&
                                                                       (in_y >= 0) && (in_y < input_height);
                                    if (is_point_inside_image) {
                                        const int32_t input_val = in.at<int8_t>(batch, in_y, in_x, in_channel);
                                        const int32_t filter_val = reinterpret_cast<const int8_t *>(
                                            filter_data)[tflite::Offset(filter_shape, out_channel,
                                                                        filter_y, filter_x, in_channel)];
                                        acc += filter_val * (input_val + input_offset);
                                    }
                                }
                            }
                        }
                        if (op.has_bias) {
                            acc += static_cast<const int32_t *>(op.bias.data)[out_channel];
                        }
                        acc = tflite::MultiplyByQuantizedMultiplier(acc, mult[out_channel], shift[out_channel]);
                        acc += op.w[OPW_OUTPUT_OFFSET];
                        acc = std::max(acc, op.w[OPW_ACT_MIN]);
                        acc = std::min(acc, op.w[OPW_ACT_MAX]);
                        static_cast<int8_t *>(op.out.data)[tflite::Offset(output_shape, batch, out_y,
                                                                          out_x, out_channel)] =
                            static_cast<int8_t>(acc);
                    }
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
        case PDT_F32: return conv_over<float>(op, in, input_shape);
        case PDT_INT8: return conv_over<int8_t>(op, in, input_shape);
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
