/*
 * user-bugs.elf — a user's own CMSIS-NN layers with two memory bugs, built
 * like examples/user_network.c (one link line with libmemtrace_rt.a), but
 * following the older instructions: it defines MEMTRACE_IMPLEMENTATION,
 * which the library must tolerate (its port member then stays out).
 *
 *   conv  the im2col scratch array is 16 B smaller than
 *         arm_convolve_wrapper_s8_get_buffer_size asks for (128 B of 144),
 *         and is declared with the size it has: the kernel writes 16 B past
 *         the end of the declared `scratch`, into `work.after`.
 *   fc    after arm_fully_connected_s8, the user's clamp_outputs() loops
 *         one element too far (`<=`) and stores 1 B past the end of
 *         `fc_out`, into padding that belongs to no symbol of its own.
 *
 * The tracer must name the declared buffer and the distance ("16 B past the
 * end of `scratch`", "1 B past the end of `fc_out`") and the calls that led
 * to the store up to the user's own function (run_conv, run_fc). Exit 0.
 */
#define MEMTRACE_IMPLEMENTATION
#include <stdint.h>

#include "arm_nnfunctions.h"
#include "memtrace.h"

#define SCRATCH_BYTES 128 /* the kernel needs 144: 16 B short */

static int8_t input[16 * 16 * 4] __attribute__((aligned(16)));
static int8_t conv_w[8 * 3 * 3 * 4] __attribute__((aligned(16)));
static int32_t conv_b[8] __attribute__((aligned(16)));
static int8_t conv_out[16 * 16 * 8] __attribute__((aligned(16)));
static int8_t fc_w[10 * 64] __attribute__((aligned(16)));
static int32_t fc_b[10] __attribute__((aligned(16)));
static int32_t mult[8] = {1 << 30, 1 << 30, 1 << 30, 1 << 30, 1 << 30, 1 << 30, 1 << 30, 1 << 30};
static int32_t shift[8] = {-8, -8, -8, -8, -8, -8, -8, -8};

/* What follows each buffer is fixed: the scratch array, then 32 bytes no
 * layer declares; the output, then padding up to the next 16 bytes. */
static struct {
    int8_t scratch[SCRATCH_BYTES];
    int8_t after[32];
} work __attribute__((aligned(16)));
static struct {
    int8_t fc_out[10];
    int8_t pad[6];
} outputs __attribute__((aligned(16)));

static const cmsis_nn_activation full = {-128, 127};

__attribute__((noinline)) static void run_conv(void) {
    cmsis_nn_conv_params conv = {128, -128, {1, 1}, {1, 1}, {1, 1}, full};
    cmsis_nn_per_channel_quant_params quant = {mult, shift};
    cmsis_nn_dims in_d = {1, 16, 16, 4}, w_d = {8, 3, 3, 4}, b_d = {1, 1, 1, 8};
    cmsis_nn_dims out_d = {1, 16, 16, 8};
    cmsis_nn_context ctx = {work.scratch, SCRATCH_BYTES}; /* BUG: 16 B short */
    memtrace_layer_begin("conv", "conv2d", "");
    memtrace_buffer(0, MEMTRACE_ROLE_INPUT, input, sizeof input, 1, "input");
    memtrace_buffer(1, MEMTRACE_ROLE_WEIGHTS, conv_w, sizeof conv_w, 1, "conv_w");
    memtrace_buffer(2, MEMTRACE_ROLE_BIAS, conv_b, sizeof conv_b, 4, "conv_b");
    memtrace_buffer(3, MEMTRACE_ROLE_OUTPUT, conv_out, sizeof conv_out, 1, "conv_out");
    memtrace_buffer(4, MEMTRACE_ROLE_SCRATCH, work.scratch, SCRATCH_BYTES, 1, "scratch");
    arm_convolve_wrapper_s8(&ctx, &conv, &quant, &in_d, input, &w_d, conv_w, &b_d, conv_b, &out_d,
                            conv_out);
    memtrace_layer_end();
}

/* Clamps the outputs to [lo, 127]: BUG, `<=` stores one element too many. */
__attribute__((noinline)) static void clamp_outputs(volatile int8_t *out, int n, int8_t lo) {
    for (int i = 0; i <= n; ++i) {
        out[i] = out[i] < lo ? lo : out[i];
    }
}

__attribute__((noinline)) static void run_fc(void) {
    cmsis_nn_fc_params fc = {128, 0, 0, full};
    cmsis_nn_per_tensor_quant_params quant = {1 << 30, -8};
    cmsis_nn_dims in_d = {1, 1, 1, 64}, w_d = {64, 1, 1, 10}, b_d = {1, 1, 1, 10};
    cmsis_nn_dims out_d = {1, 1, 1, 10};
    cmsis_nn_context ctx = {0, 0};
    memtrace_layer_begin("fc", "fully_connected", "");
    memtrace_buffer(0, MEMTRACE_ROLE_INPUT, conv_out, 64, 1, "conv_out");
    memtrace_buffer(1, MEMTRACE_ROLE_WEIGHTS, fc_w, sizeof fc_w, 1, "fc_w");
    memtrace_buffer(2, MEMTRACE_ROLE_BIAS, fc_b, sizeof fc_b, 4, "fc_b");
    memtrace_buffer(3, MEMTRACE_ROLE_OUTPUT, outputs.fc_out, sizeof outputs.fc_out, 1, "fc_out");
    arm_fully_connected_s8(&ctx, &fc, &quant, &in_d, conv_out, &w_d, fc_w, &b_d, fc_b, &out_d,
                           outputs.fc_out);
    clamp_outputs(outputs.fc_out, (int)sizeof outputs.fc_out, -100);
    memtrace_layer_end();
}

int main(void) {
    uint32_t seed = 1;
    for (unsigned i = 0; i < sizeof input; ++i) {
        seed = seed * 1664525u + 1013904223u;
        input[i] = (int8_t)(seed >> 24);
    }
    for (unsigned i = 0; i < sizeof conv_w; ++i) {
        conv_w[i] = (int8_t)(i * 7 - 50);
    }
    for (unsigned i = 0; i < sizeof fc_w; ++i) {
        fc_w[i] = (int8_t)(i * 5 - 60);
    }
    run_conv();
    run_fc();
    return 0;
}
