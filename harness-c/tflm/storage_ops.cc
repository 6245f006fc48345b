// storage_ops.cc — TinySeg's storage operators as TFLM custom operators,
// written against TFLM's kernel API (init / prepare / invoke,
// TfLiteEvalTensor, tflite::micro::GetTensorData), registered by ops.cc with
// MicroMutableOpResolver::AddCustom:
//
//   MEMTRACE_SPILL          a byte range of its input into a storage slot
//   MEMTRACE_SPILL_KEEP     the head of its input into a smaller arena tensor
//   MEMTRACE_FETCH          a storage slot into its output
//   MEMTRACE_FETCH_CONCAT   TFLM's reference CONCATENATION of its input and a slot
//   MEMTRACE_FETCH_CONV_2D  TFLM's reference CONV_2D over such a concatenation
//
// A stored tensor is not a TFLite tensor: TFLM would plan it in the arena,
// which is exactly what spilling avoids. It lives in a slot of the runner's
// memtrace_storage region (the flash or remote storage of the paper), named
// by the operator's custom options (memtrace_tflm.h, TFLM_STORAGE_WORD_*),
// which also describe its type, shape and quantisation. A SPILL and the
// FETCH that reads it back name the same slot.
//
// FETCH_CONV_2D computes exactly what TFLM's reference CONV_2D computes on
// the materialised concatenation: the conversion parameters as TFLM's
// Prepare derives them (per-channel QuantizeMultiplier of input scale ×
// filter scale / output scale in double, CalculateActivationRangeQuantized,
// ComputePaddingHeightWidth), the same loops in the same order (output
// position, output channel, filter row, filter column, input channel) and
// the same accumulation and requantisation; only each tap's input channels
// are read from the part of the concatenation that holds them. So its
// outputs are bit-exact with the CONV_2D it replaces, int8 and float32.
#include <string.h>

#include <algorithm>

#include "memtrace_rt.h"
#include "memtrace_tflm.h"
#include "tensorflow/lite/c/common.h"
#include "tensorflow/lite/kernels/internal/common.h"
#include "tensorflow/lite/kernels/internal/quantization_util.h"
#include "tensorflow/lite/kernels/internal/reference/concatenation.h"
#include "tensorflow/lite/kernels/internal/types.h"
#include "tensorflow/lite/kernels/kernel_util.h"
#include "tensorflow/lite/kernels/padding.h"
#include "tensorflow/lite/micro/kernels/kernel_util.h"
#include "tensorflow/lite/micro/memory_helpers.h"
#include "tensorflow/lite/micro/micro_context.h"
#include "tensorflow/lite/micro/micro_log.h"
#include "tensorflow/lite/schema/schema_generated.h"
#include "tflm/runner.h"

namespace mtflm {
namespace {

using tflite::RuntimeShape;

// The decoded custom options of a storage operator.
struct Options {
    int32_t w[TFLM_STORAGE_WORDS];
};

// Reads `len` bytes of custom options; false unless they are the current
// layout's words.
bool decode(const void *data, size_t len, Options *o) {
    if (data == nullptr || len != sizeof(o->w)) {
        return false;
    }
    memcpy(o->w, data, sizeof(o->w));
    return o->w[TFLM_STORAGE_WORD_VERSION] == TFLM_STORAGE_VERSION;
}

size_t storage_size() { return static_cast<size_t>(memtrace_storage_end - memtrace_storage); }

bool slot_fits(const Options &o) {
    const int32_t at = o.w[TFLM_STORAGE_WORD_OFFSET];
    const int32_t bytes = o.w[TFLM_STORAGE_WORD_BYTES];
    return at >= 0 && bytes > 0 && static_cast<size_t>(at) <= storage_size() &&
           static_cast<size_t>(bytes) <= storage_size() - static_cast<size_t>(at);
}

uint8_t *slot(const Options &o) { return memtrace_storage + o.w[TFLM_STORAGE_WORD_OFFSET]; }

// The stored tensor's shape and TfLiteType.
RuntimeShape stored_shape(const Options &o) {
    const int rank = std::min(std::max(static_cast<int>(o.w[TFLM_STORAGE_WORD_RANK]), 0), 4);
    return RuntimeShape(rank, &o.w[TFLM_STORAGE_WORD_DIMS]);
}

TfLiteType stored_type(const Options &o) {
    switch (static_cast<tflite::TensorType>(o.w[TFLM_STORAGE_WORD_TYPE])) {
        case tflite::TensorType_FLOAT32: return kTfLiteFloat32;
        case tflite::TensorType_INT8: return kTfLiteInt8;
        case tflite::TensorType_UINT8: return kTfLiteUInt8;
        case tflite::TensorType_INT16: return kTfLiteInt16;
        case tflite::TensorType_INT32: return kTfLiteInt32;
        default: return kTfLiteNoType;
    }
}

// The options of `node`, checked: the layout, and a slot inside the
// storage region that holds the stored tensor's bytes.
TfLiteStatus node_options(TfLiteContext *context, TfLiteNode *node, Options *o) {
    if (!decode(node->custom_initial_data, node->custom_initial_data_size, o)) {
        MicroPrintf("storage operator: custom options are not %d words of layout version %d",
                    TFLM_STORAGE_WORDS, TFLM_STORAGE_VERSION);
        return kTfLiteError;
    }
    if (!slot_fits(*o)) {
        MicroPrintf("storage slot of %d bytes at %d does not fit memtrace_storage (%u bytes)",
                    static_cast<int>(o->w[TFLM_STORAGE_WORD_BYTES]),
                    static_cast<int>(o->w[TFLM_STORAGE_WORD_OFFSET]),
                    static_cast<unsigned>(storage_size()));
        return kTfLiteError;
    }
    size_t elem = 0;
    TF_LITE_ENSURE_OK(context, tflite::TfLiteTypeSizeOf(stored_type(*o), &elem));
    const int64_t bytes = static_cast<int64_t>(stored_shape(*o).FlatSize()) * static_cast<int64_t>(elem);
    if (bytes != o->w[TFLM_STORAGE_WORD_BYTES]) {
        MicroPrintf("storage slot of %d bytes holds a stored tensor of %d bytes",
                    static_cast<int>(o->w[TFLM_STORAGE_WORD_BYTES]), static_cast<int>(bytes));
        return kTfLiteError;
    }
    return kTfLiteOk;
}

size_t eval_bytes(const TfLiteEvalTensor *t) {
    size_t bytes = 0;
    return tflite::TfLiteEvalTensorByteLength(t, &bytes) == kTfLiteOk ? bytes : 0;
}

// --- SPILL, SPILL_KEEP, FETCH: copies -----------------------------------------

TfLiteStatus spill_prepare(TfLiteContext *context, TfLiteNode *node) {
    Options o;
    TF_LITE_ENSURE_OK(context, node_options(context, node, &o));
    TF_LITE_ENSURE_EQ(context, node->inputs->size, 1);
    TF_LITE_ENSURE_EQ(context, node->outputs->size, 0);
    const TfLiteEvalTensor *in = tflite::micro::GetEvalInput(context, node, 0);
    TF_LITE_ENSURE(context, in != nullptr);
    TF_LITE_ENSURE_TYPES_EQ(context, in->type, stored_type(o));
    const int32_t from = o.w[TFLM_STORAGE_WORD_FROM];
    TF_LITE_ENSURE(context, from >= 0 && static_cast<size_t>(from) +
                                             static_cast<size_t>(o.w[TFLM_STORAGE_WORD_BYTES]) <=
                                             eval_bytes(in));
    return kTfLiteOk;
}

TfLiteStatus spill_invoke(TfLiteContext *context, TfLiteNode *node) {
    Options o;
    TF_LITE_ENSURE_OK(context, node_options(context, node, &o));
    const TfLiteEvalTensor *in = tflite::micro::GetEvalInput(context, node, 0);
    memcpy(slot(o), tflite::micro::GetTensorData<uint8_t>(in) + o.w[TFLM_STORAGE_WORD_FROM],
           static_cast<size_t>(o.w[TFLM_STORAGE_WORD_BYTES]));
    return kTfLiteOk;
}

TfLiteStatus keep_prepare(TfLiteContext *context, TfLiteNode *node) {
    TF_LITE_ENSURE_EQ(context, node->inputs->size, 1);
    TF_LITE_ENSURE_EQ(context, node->outputs->size, 1);
    const TfLiteEvalTensor *in = tflite::micro::GetEvalInput(context, node, 0);
    const TfLiteEvalTensor *out = tflite::micro::GetEvalOutput(context, node, 0);
    TF_LITE_ENSURE(context, in != nullptr && out != nullptr);
    TF_LITE_ENSURE_TYPES_EQ(context, in->type, out->type);
    TF_LITE_ENSURE(context, eval_bytes(out) <= eval_bytes(in));
    return kTfLiteOk;
}

TfLiteStatus keep_invoke(TfLiteContext *context, TfLiteNode *node) {
    const TfLiteEvalTensor *in = tflite::micro::GetEvalInput(context, node, 0);
    TfLiteEvalTensor *out = tflite::micro::GetEvalOutput(context, node, 0);
    memcpy(tflite::micro::GetTensorData<uint8_t>(out), tflite::micro::GetTensorData<uint8_t>(in),
           eval_bytes(out));
    return kTfLiteOk;
}

TfLiteStatus fetch_prepare(TfLiteContext *context, TfLiteNode *node) {
    Options o;
    TF_LITE_ENSURE_OK(context, node_options(context, node, &o));
    TF_LITE_ENSURE_EQ(context, node->inputs->size, 0);
    TF_LITE_ENSURE_EQ(context, node->outputs->size, 1);
    const TfLiteEvalTensor *out = tflite::micro::GetEvalOutput(context, node, 0);
    TF_LITE_ENSURE(context, out != nullptr);
    TF_LITE_ENSURE_TYPES_EQ(context, out->type, stored_type(o));
    TF_LITE_ENSURE_EQ(context, eval_bytes(out), static_cast<size_t>(o.w[TFLM_STORAGE_WORD_BYTES]));
    return kTfLiteOk;
}

TfLiteStatus fetch_invoke(TfLiteContext *context, TfLiteNode *node) {
    Options o;
    TF_LITE_ENSURE_OK(context, node_options(context, node, &o));
    TfLiteEvalTensor *out = tflite::micro::GetEvalOutput(context, node, 0);
    memcpy(tflite::micro::GetTensorData<uint8_t>(out), slot(o),
           static_cast<size_t>(o.w[TFLM_STORAGE_WORD_BYTES]));
    return kTfLiteOk;
}

// --- the concatenation of an arena tensor and a slot ---------------------------

// The parts a fetching operator concatenates: its first `arena` inputs and
// the slot, in concatenation order, with their shapes.
struct Parts {
    int count;
    const void *data[2];
    RuntimeShape shape[2];
    int axis;
};

// The parts of `node` (its leading `parts - 1` inputs are the arena parts);
// checks their types and that they agree outside the axis.
TfLiteStatus parts_of(TfLiteContext *context, TfLiteNode *node, const Options &o, Parts *p) {
    p->count = o.w[TFLM_STORAGE_WORD_PARTS];
    const int position = o.w[TFLM_STORAGE_WORD_POSITION];
    TF_LITE_ENSURE(context, p->count == 1 || p->count == 2);
    TF_LITE_ENSURE(context, position >= 0 && position < p->count);
    TF_LITE_ENSURE(context, node->inputs->size >= p->count - 1);
    int next_input = 0;
    for (int k = 0; k < p->count; ++k) {
        if (k == position) {
            p->data[k] = slot(o);
            p->shape[k].ReplaceWith(stored_shape(o).DimensionsCount(), stored_shape(o).DimsData());
            continue;
        }
        const TfLiteEvalTensor *t = tflite::micro::GetEvalInput(context, node, next_input++);
        TF_LITE_ENSURE(context, t != nullptr);
        TF_LITE_ENSURE_TYPES_EQ(context, t->type, stored_type(o));
        p->data[k] = t->data.data;
        const RuntimeShape s = tflite::micro::GetTensorShape(t);
        p->shape[k].ReplaceWith(s.DimensionsCount(), s.DimsData());
    }
    const int rank = p->shape[0].DimensionsCount();
    p->axis = o.w[TFLM_STORAGE_WORD_AXIS];
    TF_LITE_ENSURE(context, p->axis >= 0 && p->axis < rank);
    if (p->count == 2) {
        TF_LITE_ENSURE_EQ(context, p->shape[1].DimensionsCount(), rank);
        for (int d = 0; d < rank; ++d) {
            TF_LITE_ENSURE(context, d == p->axis || p->shape[0].Dims(d) == p->shape[1].Dims(d));
        }
    }
    return kTfLiteOk;
}

// The shape of the concatenation.
RuntimeShape joined(const Parts &p) {
    RuntimeShape s(p.shape[0].DimensionsCount(), p.shape[0].DimsData());
    if (p.count == 2) {
        s.SetDim(p.axis, p.shape[0].Dims(p.axis) + p.shape[1].Dims(p.axis));
    }
    return s;
}

template <typename T>
void concat(const Parts &p, const RuntimeShape &out_shape, T *out) {
    tflite::ConcatenationParams params = {};
    params.axis = static_cast<int8_t>(p.axis);
    params.inputs_count = p.count;
    const RuntimeShape *shapes[2] = {&p.shape[0], &p.shape[1]};
    const T *data[2] = {static_cast<const T *>(p.data[0]), static_cast<const T *>(p.data[1])};
    tflite::reference_ops::Concatenation(params, shapes, data, out_shape, out);
}

TfLiteStatus fetch_concat_prepare(TfLiteContext *context, TfLiteNode *node) {
    Options o;
    TF_LITE_ENSURE_OK(context, node_options(context, node, &o));
    Parts p;
    TF_LITE_ENSURE_OK(context, parts_of(context, node, o, &p));
    TF_LITE_ENSURE_EQ(context, node->inputs->size, p.count - 1);
    TF_LITE_ENSURE_EQ(context, node->outputs->size, 1);
    const TfLiteEvalTensor *out = tflite::micro::GetEvalOutput(context, node, 0);
    TF_LITE_ENSURE(context, out != nullptr);
    TF_LITE_ENSURE_TYPES_EQ(context, out->type, stored_type(o));
    TF_LITE_ENSURE(context, joined(p) == tflite::micro::GetTensorShape(out));
    return kTfLiteOk;
}

TfLiteStatus fetch_concat_invoke(TfLiteContext *context, TfLiteNode *node) {
    Options o;
    TF_LITE_ENSURE_OK(context, node_options(context, node, &o));
    Parts p;
    TF_LITE_ENSURE_OK(context, parts_of(context, node, o, &p));
    TfLiteEvalTensor *out = tflite::micro::GetEvalOutput(context, node, 0);
    const RuntimeShape shape = tflite::micro::GetTensorShape(out);
    switch (out->type) {
        case kTfLiteFloat32: concat(p, shape, tflite::micro::GetTensorData<float>(out)); break;
        case kTfLiteInt8: concat(p, shape, tflite::micro::GetTensorData<int8_t>(out)); break;
        case kTfLiteUInt8: concat(p, shape, tflite::micro::GetTensorData<uint8_t>(out)); break;
        case kTfLiteInt16: concat(p, shape, tflite::micro::GetTensorData<int16_t>(out)); break;
        case kTfLiteInt32: concat(p, shape, tflite::micro::GetTensorData<int32_t>(out)); break;
        default:
            MicroPrintf("MEMTRACE_FETCH_CONCAT: type %s is not supported", TfLiteTypeGetName(out->type));
            return kTfLiteError;
    }
    return kTfLiteOk;
}

// --- FETCH_CONV_2D -------------------------------------------------------------

// What Prepare computes once, as TFLM's conv keeps it in its OpDataConv
// (in the arena's persistent tail, like TFLM's).
struct ConvData {
    tflite::ConvParams params;
    int32_t *multiplier;  // per output channel (int8)
    int32_t *shift;
};

void *conv_init(TfLiteContext *context, const char *, size_t) {
    return context->AllocatePersistentBuffer(context, sizeof(ConvData));
}

// The node's filter and bias input indices: after the arena parts.
int filter_input(const Options &o) { return o.w[TFLM_STORAGE_WORD_PARTS] - 1; }

TfLitePadding padding_of(const Options &o) {
    return o.w[TFLM_STORAGE_WORD_PADDING] == tflite::Padding_VALID ? kTfLitePaddingValid
                                                                    : kTfLitePaddingSame;
}

TfLiteFusedActivation activation_of(const Options &o) {
    // The schema's ActivationFunctionType and TfLiteFusedActivation agree
    // up to SIGN_BIT.
    const int32_t a = o.w[TFLM_STORAGE_WORD_ACTIVATION];
    return a >= 0 && a <= tflite::ActivationFunctionType_SIGN_BIT ? static_cast<TfLiteFusedActivation>(a)
                                                                   : kTfLiteActNone;
}

// Per-channel multipliers as tflite::PopulateConvolutionQuantizationParams
// computes them, with the stored tensor's scale as the input's (the parts
// of a concatenation share their quantisation).
TfLiteStatus conv_quantization(TfLiteContext *context, const Options &o, const TfLiteTensor *filter,
                               TfLiteTensor *output, int channels, ConvData *d) {
    const auto *q = static_cast<const TfLiteAffineQuantization *>(filter->quantization.params);
    TF_LITE_ENSURE(context, filter->quantization.type == kTfLiteAffineQuantization && q != nullptr &&
                                q->scale != nullptr);
    const bool per_channel = q->scale->size > 1;
    TF_LITE_ENSURE(context, !per_channel || q->scale->size == channels);
    float input_scale;
    memcpy(&input_scale, &o.w[TFLM_STORAGE_WORD_SCALE], sizeof(input_scale));
    d->multiplier = static_cast<int32_t *>(
        context->AllocatePersistentBuffer(context, channels * sizeof(int32_t)));
    d->shift = static_cast<int32_t *>(context->AllocatePersistentBuffer(context, channels * sizeof(int32_t)));
    TF_LITE_ENSURE(context, d->multiplier != nullptr && d->shift != nullptr);
    for (int c = 0; c < channels; ++c) {
        const double filter_scale = static_cast<double>(per_channel ? q->scale->data[c] : q->scale->data[0]);
        const double effective = static_cast<double>(input_scale) * filter_scale /
                                 static_cast<double>(output->params.scale);
        int32_t significand;
        int channel_shift;
        tflite::QuantizeMultiplier(effective, &significand, &channel_shift);
        d->multiplier[c] = significand;
        d->shift[c] = channel_shift;
    }
    int32_t lo, hi;
    TF_LITE_ENSURE_OK(context, tflite::CalculateActivationRangeQuantized(context, activation_of(o), output, &lo, &hi));
    d->params.quantized_activation_min = lo;
    d->params.quantized_activation_max = hi;
    d->params.input_offset = -o.w[TFLM_STORAGE_WORD_ZERO_POINT];
    d->params.output_offset = output->params.zero_point;
    return kTfLiteOk;
}

TfLiteStatus conv_prepare(TfLiteContext *context, TfLiteNode *node) {
    Options o;
    TF_LITE_ENSURE_OK(context, node_options(context, node, &o));
    Parts p;
    TF_LITE_ENSURE_OK(context, parts_of(context, node, o, &p));
    const int f = filter_input(o);
    TF_LITE_ENSURE(context, node->inputs->size == f + 1 || node->inputs->size == f + 2);
    TF_LITE_ENSURE_EQ(context, node->outputs->size, 1);
    const RuntimeShape in_shape = joined(p);
    TF_LITE_ENSURE_EQ(context, in_shape.DimensionsCount(), 4);
    auto *d = static_cast<ConvData *>(node->user_data);
    TF_LITE_ENSURE(context, d != nullptr);
    tflite::MicroContext *micro = tflite::GetMicroContext(context);
    TfLiteTensor *filter = micro->AllocateTempInputTensor(node, f);
    TfLiteTensor *output = micro->AllocateTempOutputTensor(node, 0);
    TF_LITE_ENSURE(context, filter != nullptr && output != nullptr);
    TF_LITE_ENSURE_EQ(context, filter->dims->size, 4);
    TF_LITE_ENSURE_EQ(context, filter->dims->data[3], in_shape.Dims(3));  // no groups
    TF_LITE_ENSURE_TYPES_EQ(context, output->type, stored_type(o));
    d->params = {};
    d->params.stride_width = static_cast<int16_t>(o.w[TFLM_STORAGE_WORD_STRIDE_W]);
    d->params.stride_height = static_cast<int16_t>(o.w[TFLM_STORAGE_WORD_STRIDE_H]);
    d->params.dilation_width_factor = static_cast<int16_t>(o.w[TFLM_STORAGE_WORD_DILATION_W]);
    d->params.dilation_height_factor = static_cast<int16_t>(o.w[TFLM_STORAGE_WORD_DILATION_H]);
    int out_h = 0, out_w = 0;
    const TfLitePaddingValues pad = tflite::ComputePaddingHeightWidth(
        d->params.stride_height, d->params.stride_width, d->params.dilation_height_factor,
        d->params.dilation_width_factor, in_shape.Dims(1), in_shape.Dims(2), filter->dims->data[1],
        filter->dims->data[2], padding_of(o), &out_h, &out_w);
    d->params.padding_values.width = pad.width;
    d->params.padding_values.height = pad.height;
    TF_LITE_ENSURE(context, output->dims->size == 4 && output->dims->data[1] == out_h &&
                                output->dims->data[2] == out_w &&
                                output->dims->data[3] == filter->dims->data[0]);
    TfLiteStatus status = kTfLiteOk;
    if (output->type == kTfLiteInt8) {
        status = conv_quantization(context, o, filter, output, filter->dims->data[0], d);
    } else if (output->type == kTfLiteFloat32) {
        tflite::CalculateActivationRange(activation_of(o), &d->params.float_activation_min,
                                         &d->params.float_activation_max);
    } else {
        MicroPrintf("MEMTRACE_FETCH_CONV_2D: type %s is not supported", TfLiteTypeGetName(output->type));
        status = kTfLiteError;
    }
    micro->DeallocateTempTfLiteTensor(filter);
    micro->DeallocateTempTfLiteTensor(output);
    return status;
}

// The input channels at (b, y, x) of the concatenation as up to two runs:
// `count[0]` elements at `run[0]`, then `count[1]` at `run[1]` (a channel
// concatenation splits every position between the parts; any other puts
// each position in one part).
template <typename T>
void channels_at(const Parts &p, int b, int y, int x, const T *run[2], int count[2]) {
    count[1] = 0;
    run[1] = nullptr;
    if (p.count == 2 && p.axis == 3) {
        for (int k = 0; k < 2; ++k) {
            run[k] = static_cast<const T *>(p.data[k]) + tflite::Offset(p.shape[k], b, y, x, 0);
            count[k] = p.shape[k].Dims(3);
        }
        return;
    }
    int i[4] = {b, y, x, 0};
    int k = 0;
    if (p.count == 2 && i[p.axis] >= p.shape[0].Dims(p.axis)) {
        i[p.axis] -= p.shape[0].Dims(p.axis);
        k = 1;
    }
    run[0] = static_cast<const T *>(p.data[k]) + tflite::Offset(p.shape[k], i[0], i[1], i[2], 0);
    count[0] = p.shape[k].Dims(3);
}

// One kernel tap over the input channels in order: int8 as
// reference_integer_ops::ConvPerChannel, float as reference_ops::Conv.
inline void tap(int32_t &acc, const int8_t *const run[2], const int count[2], const int8_t *filter,
                int32_t input_offset) {
    int c = 0;
    for (int r = 0; r < 2; ++r) {
        for (int j = 0; j < count[r]; ++j, ++c) {
            acc += static_cast<int32_t>(filter[c]) * (static_cast<int32_t>(run[r][j]) + input_offset);
        }
    }
}

inline void tap(float &total, const float *const run[2], const int count[2], const float *filter, int32_t) {
    int c = 0;
    for (int r = 0; r < 2; ++r) {
        for (int j = 0; j < count[r]; ++j, ++c) {
            total += (run[r][j] * filter[c]);
        }
    }
}

inline int8_t finish(const ConvData &d, int32_t acc, int oc, const int32_t *bias) {
    if (bias != nullptr) {
        acc += bias[oc];
    }
    acc = tflite::MultiplyByQuantizedMultiplier(acc, d.multiplier[oc], d.shift[oc]);
    acc += d.params.output_offset;
    acc = std::max(acc, d.params.quantized_activation_min);
    acc = std::min(acc, d.params.quantized_activation_max);
    return static_cast<int8_t>(acc);
}

inline float finish(const ConvData &d, float total, int oc, const float *bias) {
    const float bias_value = bias != nullptr ? bias[oc] : 0.0f;
    return tflite::ActivationFunctionWithMinMax(total + bias_value, d.params.float_activation_min,
                                                d.params.float_activation_max);
}

template <typename T, typename Acc, typename Bias>
void conv_over(const ConvData &d, const Parts &p, const TfLiteEvalTensor *filter_t,
               const TfLiteEvalTensor *bias_t, TfLiteEvalTensor *out_t) {
    const RuntimeShape input_shape = joined(p);
    const RuntimeShape filter_shape = tflite::micro::GetTensorShape(filter_t);
    const RuntimeShape output_shape = tflite::micro::GetTensorShape(out_t);
    const T *filter = tflite::micro::GetTensorData<T>(filter_t);
    const Bias *bias = bias_t != nullptr ? tflite::micro::GetTensorData<Bias>(bias_t) : nullptr;
    T *output = tflite::micro::GetTensorData<T>(out_t);
    const tflite::ConvParams &cp = d.params;
    const int batches = input_shape.Dims(0);
    const int input_height = input_shape.Dims(1);
    const int input_width = input_shape.Dims(2);
    const int filter_height = filter_shape.Dims(1);
    const int filter_width = filter_shape.Dims(2);
    const int output_depth = output_shape.Dims(3);
    for (int batch = 0; batch < batches; ++batch) {
        for (int out_y = 0; out_y < output_shape.Dims(1); ++out_y) {
            const int in_y_origin = (out_y * cp.stride_height) - cp.padding_values.height;
            for (int out_x = 0; out_x < output_shape.Dims(2); ++out_x) {
                const int in_x_origin = (out_x * cp.stride_width) - cp.padding_values.width;
                for (int oc = 0; oc < output_depth; ++oc) {
                    Acc acc = 0;
                    for (int fy = 0; fy < filter_height; ++fy) {
                        const int in_y = in_y_origin + cp.dilation_height_factor * fy;
                        for (int fx = 0; fx < filter_width; ++fx) {
                            const int in_x = in_x_origin + cp.dilation_width_factor * fx;
                            // Zero padding by omitting the areas outside the image.
                            if (in_x < 0 || in_x >= input_width || in_y < 0 || in_y >= input_height) {
                                continue;
                            }
                            const T *run[2];
                            int count[2];
                            channels_at<T>(p, batch, in_y, in_x, run, count);
                            tap(acc, run, count, filter + tflite::Offset(filter_shape, oc, fy, fx, 0),
                                cp.input_offset);
                        }
                    }
                    output[tflite::Offset(output_shape, batch, out_y, out_x, oc)] = finish(d, acc, oc, bias);
                }
            }
        }
    }
}

TfLiteStatus conv_invoke(TfLiteContext *context, TfLiteNode *node) {
    Options o;
    TF_LITE_ENSURE_OK(context, node_options(context, node, &o));
    Parts p;
    TF_LITE_ENSURE_OK(context, parts_of(context, node, o, &p));
    const auto &d = *static_cast<const ConvData *>(node->user_data);
    const int f = filter_input(o);
    const TfLiteEvalTensor *filter = tflite::micro::GetEvalInput(context, node, f);
    const TfLiteEvalTensor *bias =
        node->inputs->size > f + 1 ? tflite::micro::GetEvalInput(context, node, f + 1) : nullptr;
    TfLiteEvalTensor *out = tflite::micro::GetEvalOutput(context, node, 0);
    switch (out->type) {
        case kTfLiteInt8: conv_over<int8_t, int32_t, int32_t>(d, p, filter, bias, out); return kTfLiteOk;
        case kTfLiteFloat32: conv_over<float, float, float>(d, p, filter, bias, out); return kTfLiteOk;
        default: return kTfLiteError;
    }
}

struct Named {
    const char *name;
    TFLMRegistration registration;
};

Named g_ops[kStorageOps];
bool g_made;

void make_registrations() {
    if (g_made) {
        return;
    }
    g_ops[0] = {"MEMTRACE_SPILL", tflite::micro::RegisterOp(nullptr, spill_prepare, spill_invoke)};
    g_ops[1] = {"MEMTRACE_SPILL_KEEP", tflite::micro::RegisterOp(nullptr, keep_prepare, keep_invoke)};
    g_ops[2] = {"MEMTRACE_FETCH", tflite::micro::RegisterOp(nullptr, fetch_prepare, fetch_invoke)};
    g_ops[3] = {"MEMTRACE_FETCH_CONCAT",
                tflite::micro::RegisterOp(nullptr, fetch_concat_prepare, fetch_concat_invoke)};
    g_ops[4] = {"MEMTRACE_FETCH_CONV_2D", tflite::micro::RegisterOp(conv_init, conv_prepare, conv_invoke)};
    g_made = true;
}

}  // namespace

const TFLMRegistration *storage_op(int i, const char **name) {
    make_registrations();
    if (i < 0 || i >= kStorageOps) {
        return nullptr;
    }
    *name = g_ops[i].name;
    return &g_ops[i].registration;
}

bool storage_slot(const char *custom_code, const void *options, size_t len, StorageSlot *s) {
    Options o;
    if (custom_code == nullptr || strncmp(custom_code, "MEMTRACE_", 9) != 0 ||
        strcmp(custom_code, "MEMTRACE_SPILL_KEEP") == 0 || !decode(options, len, &o) || !slot_fits(o)) {
        return false;
    }
    s->address = slot(o);
    s->bytes = static_cast<uint32_t>(o.w[TFLM_STORAGE_WORD_BYTES]);
    s->offset = static_cast<uint32_t>(o.w[TFLM_STORAGE_WORD_OFFSET]);
    s->written = strcmp(custom_code, "MEMTRACE_SPILL") == 0;
    size_t elem = 1;
    if (tflite::TfLiteTypeSizeOf(stored_type(o), &elem) != kTfLiteOk || elem == 0) {
        elem = 1;
    }
    s->elem = static_cast<uint32_t>(elem);
    return true;
}

}  // namespace mtflm
