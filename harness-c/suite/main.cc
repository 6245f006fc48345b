// main.cc — entry of the memtrace kernel suite.
//
// With a job in the mailbox (`memtrace run suite.elf --job SPEC`), run exactly
// that layer, named "job". Without one, run the built-in layers: the first five
// layers of MobileNet v1 0.25 (128x128 input, int8, SAME padding, ReLU6).
#include "memtrace.h"
#include "memtrace_job.h"
#include "suite.h"

// Written by the host after loading and before the first instruction. It lives
// in .noinit (NOLOAD), which the start-up code neither copies nor zeroes;
// memory the host did not write reads as zero, i.e. "no job".
// The native x86-64 build (suite-native.elf) puts it in .data instead, so a
// job can be patched into the file before running it under Valgrind.
#ifndef MEMTRACE_JOB_SECTION
#define MEMTRACE_JOB_SECTION ".noinit"
#endif
extern "C" {
__attribute__((section(MEMTRACE_JOB_SECTION), used, aligned(8)))
volatile int32_t memtrace_job[MEMTRACE_JOB_WORDS];
}

namespace memtrace {
namespace {

Layer layer_from_job() {
    Layer l = {};
    l.op = memtrace_job[JOB_OP];
    l.dtype = memtrace_job[JOB_DTYPE];
    for (int i = 0; i < 4; ++i) {
        l.input[i] = memtrace_job[JOB_INPUT + i];
        l.filter[i] = memtrace_job[JOB_FILTER + i];
        l.output[i] = memtrace_job[JOB_OUTPUT + i];
    }
    l.stride_h = memtrace_job[JOB_STRIDE_H];
    l.stride_w = memtrace_job[JOB_STRIDE_W];
    l.dilation_h = memtrace_job[JOB_DILATION_H];
    l.dilation_w = memtrace_job[JOB_DILATION_W];
    l.padding = memtrace_job[JOB_PADDING];
    l.pad_h = memtrace_job[JOB_PAD_H];
    l.pad_w = memtrace_job[JOB_PAD_W];
    l.depth_multiplier = memtrace_job[JOB_DEPTH_MULTIPLIER];
    l.activation = memtrace_job[JOB_ACTIVATION];
    l.seed = static_cast<uint32_t>(memtrace_job[JOB_SEED]);
    l.axis = memtrace_job[JOB_AXIS];
    for (int i = 0; i < 4; ++i) {
        l.input2[i] = memtrace_job[JOB_INPUT2 + i];
        l.pad_before[i] = memtrace_job[JOB_PAD_BEFORE + i];
        l.pad_after[i] = memtrace_job[JOB_PAD_AFTER + i];
    }
    return l;
}

// TFLite's output size and before-padding for SAME padding (ComputeOutSize,
// ComputePaddingHeightWidth), used only to describe the built-in layers.
int32_t same_out(int32_t in, int32_t stride) { return (in + stride - 1) / stride; }

int32_t same_pad(int32_t in, int32_t k, int32_t stride, int32_t out) {
    const int32_t total = (out - 1) * stride + k - in;
    return total > 0 ? total / 2 : 0;
}

// conv2d (dw = false) or depthwise_conv2d (dw = true), int8, SAME, ReLU6.
Layer mobilenet_layer(bool dw, int32_t hw, int32_t in_c, int32_t out_c, int32_t k,
                      int32_t stride, uint32_t seed) {
    Layer l = {};
    l.op = dw ? OP_DEPTHWISE_CONV2D : OP_CONV2D;
    l.dtype = DTYPE_INT8;
    const int32_t out_hw = same_out(hw, stride);
    const int32_t input[4] = {1, hw, hw, in_c};
    const int32_t filter[4] = {dw ? 1 : out_c, k, k, dw ? out_c : in_c};
    const int32_t output[4] = {1, out_hw, out_hw, out_c};
    for (int i = 0; i < 4; ++i) {
        l.input[i] = input[i];
        l.filter[i] = filter[i];
        l.output[i] = output[i];
    }
    l.stride_h = l.stride_w = stride;
    l.dilation_h = l.dilation_w = 1;
    l.padding = 1;
    l.pad_h = l.pad_w = same_pad(hw, k, stride, out_hw);
    l.depth_multiplier = dw ? out_c / in_c : 1;
    l.activation = 2;
    l.seed = seed;
    return l;
}

int run_builtin_layers() {
    struct Builtin {
        const char *name;
        bool dw;
        int32_t hw, in_c, out_c, k, stride;
    };
    // MobileNet v1, width multiplier 0.25, 128x128 input.
    static const Builtin kLayers[] = {
        {"conv1", false, 128, 3, 8, 3, 2},   // 1x128x128x3 -> 1x64x64x8
        {"dw1", true, 64, 8, 8, 3, 1},       // 1x64x64x8   -> 1x64x64x8
        {"conv2", false, 64, 8, 16, 1, 1},   // 1x64x64x8   -> 1x64x64x16
        {"dw2", true, 64, 16, 16, 3, 2},     // 1x64x64x16  -> 1x32x32x16
        {"conv3", false, 32, 16, 32, 1, 1},  // 1x32x32x16  -> 1x32x32x32
    };
    uint32_t seed = 1;
    for (const Builtin &b : kLayers) {
        const int rc =
            run_layer(b.name, mobilenet_layer(b.dw, b.hw, b.in_c, b.out_c, b.k, b.stride, seed++));
        if (rc != kExitOk) {
            return rc;
        }
    }
    return kExitOk;
}

}  // namespace
}  // namespace memtrace

int main() {
    const int rc = memtrace_job[JOB_MAGIC] == MEMTRACE_JOB_MAGIC
                       ? memtrace::run_layer("job", memtrace::layer_from_job())
                       : memtrace::run_builtin_layers();
    if (rc != memtrace::kExitOk && memtrace::exit_reason()) {
        memtrace_exit_reason(rc, memtrace::exit_reason());
    }
    return rc;
}
