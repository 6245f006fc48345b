// probe_ops.cc — kernels written to test memtrace itself, linked only into
// the probe runners (tflm-runner-probe.elf, tflm-runner-cmsis-probe.elf;
// tflm.mk), never into a runner a user's model runs on.
//
// MEMTRACE_SCRATCH_PROBE, a custom operator: one int8 input of N bytes, one
// int8 output of M bytes, custom options up to four little-endian 32-bit
// words (SHORT_BY, SEED, DIFFER, READ_PAST, CLOBBER).
// - Its sizing function under-reports by SHORT_BY bytes, the bug class of a
//   kernel library's *_get_buffer_size that disagrees with its kernel:
//   Prepare asks TFLM for N - SHORT_BY bytes of scratch, Invoke copies the
//   whole input into the scratch with memcpy (N bytes: SHORT_BY past its
//   end) and writes the output from it (the scratch reversed, repeated to M
//   bytes, offset by SEED). With SHORT_BY 0 it is a correct kernel.
// - With DIFFER non-zero, its build for CMSIS-NN's kernels (-DCMSIS_NN) adds
//   1 to every output byte i with i % 4 == 1: a kernel that is not
//   bit-exact with its reference.
// - With READ_PAST non-zero, Invoke also reads READ_PAST bytes past the end
//   of its input (their sum is added to output byte 0): an over-read.
// - Every Invoke counts itself in its op data (AllocatePersistentBuffer in
//   Init): state a kernel keeps between invocations, its own memory. With
//   CLOBBER non-zero it also stores to the op data of the probe operator
//   initialised before it (the value already there, so outputs do not
//   change): a kernel writing another operator's persistent memory.
#include <string.h>

#include "tensorflow/lite/c/common.h"
#include "tensorflow/lite/micro/micro_utils.h"
#include "tensorflow/lite/micro/kernels/kernel_util.h"
#include "tflm/runner.h"

namespace mtflm {
namespace {

struct ProbeData {
    uint32_t short_by;
    uint32_t seed;
    uint32_t differ;
    uint32_t read_past;
    uint32_t clobber;
    uint32_t invocations;
    ProbeData *previous;  // the probe operator initialised before this one
    int scratch;          // TFLM's scratch buffer index
};

ProbeData *g_last_initialised;

uint32_t word(const uint8_t *p) {
    return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
           static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

void *probe_init(TfLiteContext *context, const char *buffer, size_t length) {
    auto *data = static_cast<ProbeData *>(context->AllocatePersistentBuffer(context, sizeof(ProbeData)));
    if (data == nullptr) {
        return nullptr;
    }
    const auto *b = reinterpret_cast<const uint8_t *>(buffer);
    data->short_by = length >= 4 ? word(b) : 0;
    data->seed = length >= 8 ? word(b + 4) : 0;
    data->differ = length >= 12 ? word(b + 8) : 0;
    data->read_past = length >= 16 ? word(b + 12) : 0;
    data->clobber = length >= 20 ? word(b + 16) : 0;
    data->invocations = 0;
    data->previous = g_last_initialised;
    g_last_initialised = data;
    data->scratch = -1;
    return data;
}

// The sizing function under test: what the kernel says it needs.
__attribute__((noinline)) size_t probe_scratch_bytes(size_t n, uint32_t short_by) {
    return n > short_by ? n - short_by : 1;
}

TfLiteStatus probe_prepare(TfLiteContext *context, TfLiteNode *node) {
    auto *data = static_cast<ProbeData *>(node->user_data);
    TF_LITE_ENSURE(context, data != nullptr && node->inputs->size == 1 && node->outputs->size == 1);
    const TfLiteEvalTensor *in = tflite::micro::GetEvalInput(context, node, 0);
    TF_LITE_ENSURE(context, in != nullptr && tflite::micro::GetEvalOutput(context, node, 0) != nullptr);
    const size_t n = static_cast<size_t>(tflite::ElementCount(*in->dims));
    return context->RequestScratchBufferInArena(context, probe_scratch_bytes(n, data->short_by),
                                                &data->scratch);
}

// The kernel: uses N bytes of scratch, whatever its sizing function said.
__attribute__((noinline)) TfLiteStatus probe_invoke(TfLiteContext *context, TfLiteNode *node) {
    auto *data = static_cast<ProbeData *>(node->user_data);
    ++data->invocations;
    if (data->clobber != 0 && data->previous != nullptr) {
        volatile uint32_t *theirs = &data->previous->invocations;
        *theirs = *theirs;
    }
    const TfLiteEvalTensor *in = tflite::micro::GetEvalInput(context, node, 0);
    TfLiteEvalTensor *out = tflite::micro::GetEvalOutput(context, node, 0);
    auto *scratch = static_cast<int8_t *>(context->GetScratchBuffer(context, data->scratch));
    TF_LITE_ENSURE(context, scratch != nullptr);
    const size_t n = static_cast<size_t>(tflite::ElementCount(*in->dims));
    memcpy(scratch, tflite::micro::GetTensorData<int8_t>(in), n);
    int8_t *o = tflite::micro::GetTensorData<int8_t>(out);
    const size_t m = static_cast<size_t>(tflite::ElementCount(*out->dims));
    for (size_t i = 0; i < m; ++i) {
        o[i] = static_cast<int8_t>(scratch[n - 1 - i % n] + static_cast<int8_t>(data->seed));
    }
    const volatile int8_t *past = tflite::micro::GetTensorData<int8_t>(in) + n;
    int8_t sum = 0;
    for (uint32_t k = 0; k < data->read_past; ++k) {
        sum = static_cast<int8_t>(sum + past[k]);
    }
    if (m > 0) {
        o[0] = static_cast<int8_t>(o[0] + sum);
    }
#ifdef CMSIS_NN
    for (size_t i = 1; data->differ != 0 && i < m; i += 4) {
        o[i] = static_cast<int8_t>(o[i] + 1);
    }
#endif
    return kTfLiteOk;
}

const TFLMRegistration kProbe = {probe_init, nullptr, probe_prepare, probe_invoke, nullptr, 0, nullptr};

}  // namespace

// Replaces ops.cc's weak definitions: the probe runners register these too.
int probe_ops() { return 1; }
const TFLMRegistration *probe_op(int i, const char **name) {
    if (i != 0) {
        return nullptr;
    }
    *name = "MEMTRACE_SCRATCH_PROBE";
    return &kProbe;
}

}  // namespace mtflm
