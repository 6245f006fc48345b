// suite.h — internal interface of the memtrace kernel suite.
#ifndef MEMTRACE_SUITE_H
#define MEMTRACE_SUITE_H

#include <stddef.h>
#include <stdint.h>

#include "memtrace_job.h"

namespace memtrace {

// Exit codes of the suite (docs/protocol.md section 9).
enum : int {
    kExitOk = 0,
    kExitInvalidJob = 2,    // unknown op/dtype, inconsistent shapes, arena too small
    kExitMismatch = 5,      // a library kernel's output differs from the TFLM reference's
    kExitLibraryError = 7,  // the kernel library returned an error status
};

// One layer configuration, decoded from the job mailbox (same fields and
// meaning as the words in memtrace_job.h).
struct Layer {
    int32_t op;     // enum memtrace_op
    int32_t dtype;  // enum memtrace_dtype
    int32_t input[4];
    int32_t filter[4];
    int32_t output[4];
    int32_t stride_h, stride_w;
    int32_t dilation_h, dilation_w;
    int32_t padding;  // 1 same, 2 valid
    int32_t pad_h, pad_w;
    int32_t depth_multiplier;
    int32_t activation;  // 0 none, 1 relu, 2 relu6
    uint32_t seed;
    int32_t axis;           // concatenation: 0..3 (N, H, W, C)
    int32_t input2[4];      // concatenation: the second input's shape
    int32_t pad_before[4];  // pad: elements before each dimension
    int32_t pad_after[4];   // pad: elements after each dimension
};

// Quantisation constants of an int8 layer. They are fixed, plausible values
// (multipliers in [2^30, 2^31), negative shifts); the access pattern of the
// kernels does not depend on them.
struct Quant {
    int32_t input_zero_point;
    int32_t input2_zero_point;  // add
    int32_t output_zero_point;
    int32_t output_multiplier;  // per-tensor (fully_connected, add)
    int32_t output_shift;
    int32_t input1_multiplier, input1_shift;  // add
    int32_t input2_multiplier, input2_shift;  // add
    int32_t act_min, act_max;                 // int8 activation clamp
    const int32_t *channel_multiplier;  // per output channel (conv2d, depthwise)
    const int32_t *channel_shift;
};

// Buffers of one layer (null when the op has no such buffer).
struct Buffers {
    void *input;
    void *input2;
    void *filter;
    void *bias;
    void *output;
    void *scratch;  // the library's scratch buffer (declared role `scratch`)
    uint32_t scratch_bytes;
    void *scratch2;  // a second one (CMSIS-NN transpose_conv's reversed filter)
    uint32_t scratch2_bytes;
};

// Runs one layer window: validates, allocates from the arena, fills the data,
// then LAYER_BEGIN, BUFFER..., the kernel, LAYER_END. Returns kExitOk, or
// kExitInvalidJob without opening a window. A non-zero result leaves its
// reason in exit_reason().
int run_layer(const char *name, const Layer &layer);

// Why the last run_layer failed (static text), or nullptr; main passes it to
// memtrace_exit_reason so the host can say more than the exit code.
const char *exit_reason();

// ---- The kernel library of this binary ---------------------------------
// suite.elf and suite-modified.elf link library_reference.cc (the TFLM
// reference kernels of kernels.cc are the library); suite-cmsis.elf links
// kernels_cmsis.cc instead. layer.cc calls only these three functions.

// True when the library runs this layer with its own kernel rather than the
// TFLM reference one; run_layer then checks the output against the reference
// kernel's, bit for bit, after the window has closed.
bool library_has_kernel(const Layer &layer);

// Bytes of scratch memory the library's kernel needs for this layer (0: none),
// as the library's own *_get_buffer_size functions compute them: buffer
// `which` = 0 (`scratch`) or 1 (`scratch2`).
uint32_t library_scratch_bytes(const Layer &layer, int which);

// The kernel call itself: only this runs inside the window. Returns kExitOk,
// or kExitLibraryError when the library reports an error.
int run_kernel(const Layer &layer, const Buffers &b, const Quant &q);

// The TFLM reference kernel of the layer (kernels.cc); every binary links it.
// It takes its scratch memory, if it needs any, from b.scratch.
void run_reference_kernel(const Layer &layer, const Buffers &b, const Quant &q);

// Bytes of scratch memory the TFLM reference kernel takes from the arena
// (kernels.cc): int8 transpose_conv's int32 accumulator, one per output
// element, as TFLM's TRANSPOSE_CONV requests it; 0 for every other layer.
uint32_t reference_scratch_bytes(const Layer &layer);

// Canonical layer text, exactly as abi/src/spec/text.rs `Display for LayerSpec`
// prints it. Returns false if it would not fit in `cap` bytes (NUL included).
bool format_params(const Layer &layer, char *out, size_t cap);

const char *op_name(int32_t op);

}  // namespace memtrace

#endif  // MEMTRACE_SUITE_H
