/*
 * user_network.c: your own CMSIS-NN network under memtrace (docs/protocol.md,
 * section 11). An int8 network of four layers, conv -> depthwise -> fully
 * connected -> softmax, each call wrapped in a layer window that declares
 * the tensors it reads and writes. Link it with libmemtrace_rt.a (no
 * MEMTRACE_IMPLEMENTATION, no start-up code of your own) and run
 * `memtrace run user-network.elf --strict`.
 */
#include <stdint.h>

#include "arm_nnfunctions.h"
#include "memtrace.h"

#define A16 __attribute__((aligned(16)))

/* Tensors (NHWC): 16x16x4 -> conv 3x3, 8 filters -> 16x16x8 -> depthwise 3x3,
 * stride 2 -> 8x8x8 -> fully connected, 10 units -> softmax. */
static int8_t input[16 * 16 * 4] A16, conv_w[8 * 3 * 3 * 4] A16, conv_out[16 * 16 * 8] A16;
static int8_t dw_w[3 * 3 * 8] A16, dw_out[8 * 8 * 8] A16;
static int8_t fc_w[10 * 512] A16, fc_out[10] A16, probs[10] A16;
static int32_t conv_b[8] A16, dw_b[8] A16, fc_b[10] A16;
static int32_t mult[8] = {1 << 30, 1 << 30, 1 << 30, 1 << 30, 1 << 30, 1 << 30, 1 << 30, 1 << 30};
static int32_t shift[8] = {-8, -8, -8, -8, -8, -8, -8, -8};
static int8_t scratch[256] A16; /* im2col of the convolution: it asks for 144 B */

static void fill(int8_t *p, int n, uint32_t seed) {
    for (int i = 0; i < n; ++i) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (int8_t)(seed >> 24);
    }
}

static void check(arm_cmsis_nn_status status, const char *what) {
    if (status != ARM_CMSIS_NN_SUCCESS) {
        memtrace_exit_reason(7, what);
    }
}

int main(void) {
    fill(input, sizeof input, 1);
    fill(conv_w, sizeof conv_w, 2);
    fill(dw_w, sizeof dw_w, 3);
    fill(fc_w, sizeof fc_w, 4);
    cmsis_nn_per_channel_quant_params per_channel = {mult, shift};
    const cmsis_nn_activation full = {-128, 127};

    /* conv: the params text (section 6) lets memtrace cross-check the O_s. */
    cmsis_nn_conv_params conv = {128, -128, {1, 1}, {1, 1}, {1, 1}, full};
    cmsis_nn_dims in_d = {1, 16, 16, 4}, conv_wd = {8, 3, 3, 4}, conv_od = {1, 16, 16, 8};
    cmsis_nn_dims conv_bd = {1, 1, 1, 8};
    int32_t need = arm_convolve_wrapper_s8_get_buffer_size(&conv, &in_d, &conv_wd, &conv_od);
    if (need > (int32_t)sizeof scratch) {
        memtrace_exit_reason(2, "the convolution needs more scratch than `scratch` has");
    }
    cmsis_nn_context ctx = {need > 0 ? scratch : 0, need};
    memtrace_layer_begin("conv", "conv2d",
                         "op=conv2d,dtype=int8,input=1x16x16x4,filter=8x3x3x4,output=1x16x16x8,"
                         "stride=1x1,dilation=1x1,padding=same,pad=1x1");
    memtrace_buffer(0, MEMTRACE_ROLE_INPUT, input, sizeof input, 1, "input");
    memtrace_buffer(1, MEMTRACE_ROLE_WEIGHTS, conv_w, sizeof conv_w, 1, "conv_w");
    memtrace_buffer(2, MEMTRACE_ROLE_BIAS, conv_b, sizeof conv_b, 4, "conv_b");
    memtrace_buffer(3, MEMTRACE_ROLE_OUTPUT, conv_out, sizeof conv_out, 1, "conv_out");
    if (need > 0) { /* the size the library asked for, not the array's */
        memtrace_buffer(4, MEMTRACE_ROLE_SCRATCH, scratch, (uint32_t)need, 1, "scratch");
    }
    check(arm_convolve_wrapper_s8(&ctx, &conv, &per_channel, &in_d, input, &conv_wd, conv_w,
                                  &conv_bd, conv_b, &conv_od, conv_out),
          "arm_convolve_wrapper_s8 failed");
    memtrace_layer_end();

    /* depthwise 3x3, stride 2: CMSIS-NN's 3x3 kernel, which needs no scratch. */
    cmsis_nn_dw_conv_params dw = {128, -128, 1, {2, 2}, {0, 0}, {1, 1}, full};
    cmsis_nn_dims dw_wd = {1, 3, 3, 8}, dw_od = {1, 8, 8, 8};
    need = arm_depthwise_conv_wrapper_s8_get_buffer_size(&dw, &conv_od, &dw_wd, &dw_od);
    if (need > (int32_t)sizeof scratch) {
        memtrace_exit_reason(2, "the depthwise convolution needs more scratch than `scratch` has");
    }
    ctx = (cmsis_nn_context){need > 0 ? scratch : 0, need};
    memtrace_layer_begin("dw", "depthwise_conv2d",
                         "op=depthwise_conv2d,dtype=int8,input=1x16x16x8,filter=1x3x3x8,"
                         "output=1x8x8x8,stride=2x2,dilation=1x1,padding=same,pad=0x0,"
                         "depth_multiplier=1");
    memtrace_buffer(0, MEMTRACE_ROLE_INPUT, conv_out, sizeof conv_out, 1, "conv_out");
    memtrace_buffer(1, MEMTRACE_ROLE_WEIGHTS, dw_w, sizeof dw_w, 1, "dw_w");
    memtrace_buffer(2, MEMTRACE_ROLE_BIAS, dw_b, sizeof dw_b, 4, "dw_b");
    memtrace_buffer(3, MEMTRACE_ROLE_OUTPUT, dw_out, sizeof dw_out, 1, "dw_out");
    if (need > 0) {
        memtrace_buffer(4, MEMTRACE_ROLE_SCRATCH, scratch, (uint32_t)need, 1, "scratch");
    }
    check(arm_depthwise_conv_wrapper_s8(&ctx, &dw, &per_channel, &conv_od, conv_out, &dw_wd, dw_w,
                                        &conv_bd, dw_b, &dw_od, dw_out),
          "arm_depthwise_conv_wrapper_s8 failed");
    memtrace_layer_end();

    /* fully connected: 512 inputs, 10 units. */
    cmsis_nn_fc_params fc = {128, 0, 0, full};
    cmsis_nn_per_tensor_quant_params per_tensor = {1 << 30, -11};
    cmsis_nn_dims fc_id = {1, 1, 1, 512}, fc_wd = {512, 1, 1, 10}, fc_bd = {1, 1, 1, 10};
    cmsis_nn_dims fc_od = {1, 1, 1, 10};
    ctx = (cmsis_nn_context){0, 0}; /* it needs a buffer on Helium only */
    memtrace_layer_begin("fc", "fully_connected",
                         "op=fully_connected,dtype=int8,input=1x1x1x512,filter=1x1x10x512,"
                         "output=1x1x1x10");
    memtrace_buffer(0, MEMTRACE_ROLE_INPUT, dw_out, sizeof dw_out, 1, "dw_out");
    memtrace_buffer(1, MEMTRACE_ROLE_WEIGHTS, fc_w, sizeof fc_w, 1, "fc_w");
    memtrace_buffer(2, MEMTRACE_ROLE_BIAS, fc_b, sizeof fc_b, 4, "fc_b");
    memtrace_buffer(3, MEMTRACE_ROLE_OUTPUT, fc_out, sizeof fc_out, 1, "fc_out");
    check(arm_fully_connected_s8(&ctx, &fc, &per_tensor, &fc_id, dw_out, &fc_wd, fc_w, &fc_bd, fc_b,
                                 &fc_od, fc_out),
          "arm_fully_connected_s8 failed");
    memtrace_layer_end();

    /* softmax: input scale 1/16, beta 1 (multiplier, shift and diff_min as
     * TFLM computes them); output scale 1/256, zero point -128. memtrace
     * has no O_s model of softmax: its params text stays empty. */
    memtrace_layer_begin("softmax", "softmax", "");
    memtrace_buffer(0, MEMTRACE_ROLE_INPUT, fc_out, sizeof fc_out, 1, "fc_out");
    memtrace_buffer(1, MEMTRACE_ROLE_OUTPUT, probs, sizeof probs, 1, "probs");
    arm_softmax_s8(fc_out, 1, 10, 1 << 30, 23, -248, probs);
    memtrace_layer_end();

    /* The probabilities sum to 1: 256 steps of 1/256, give or take rounding. */
    int32_t sum = 0;
    for (int i = 0; i < 10; ++i) {
        sum += probs[i] + 128;
    }
    if (sum < 246 || sum > 266) {
        memtrace_exit_reason(3, "the softmax output does not sum to 1");
    }
    return 0;
}
