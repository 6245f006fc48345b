/*
 * hostile_calls.c: one CMSIS-NN API call that memtrace check recognises,
 * made with the arguments given on the command line, so that a campaign
 * (tests/hostile/check_calls.rs) can hand the library hostile dimensions,
 * lengths and pointers:
 *
 *   hostile_calls FUNCTION A B V0 V1 ... V7
 *
 * A and B are the call's two data pointers, each one of ram (a global
 * array), heap (a small block), null, code (main's own bytes), unmapped,
 * past (just past the array) or wrap (16 bytes below 2^32). V0..V7 are
 * the dimensions and lengths (strtoul, base 0, so -1 and 0xffffffff
 * alike), missing ones 1. Prints "hostile_calls: done" and exits 0 when
 * the call returned.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arm_nnfunctions.h"

int8_t ram[4096];
int32_t multipliers[64];
int32_t shifts[64];

int main(int argc, char **argv);

static int8_t *pointer(const char *kind)
{
    if (!strcmp(kind, "ram"))
        return ram;
    if (!strcmp(kind, "heap"))
        return malloc(64);
    if (!strcmp(kind, "null"))
        return NULL;
    if (!strcmp(kind, "code"))
        return (int8_t *)((uintptr_t)&main & ~(uintptr_t)1);
    if (!strcmp(kind, "unmapped"))
        return (int8_t *)(uintptr_t)0x30000000u;
    if (!strcmp(kind, "past"))
        return ram + sizeof ram;
    return (int8_t *)(uintptr_t)0xFFFFFFF0u; /* wrap */
}

static cmsis_nn_dims dims(int32_t n, int32_t h, int32_t w, int32_t c)
{
    cmsis_nn_dims d = {n, h, w, c};
    return d;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        printf("usage: hostile_calls FUNCTION A B V0..V7\n");
        return 2;
    }
    const char *f = argv[1];
    int8_t *a = pointer(argv[2]);
    int8_t *b = pointer(argv[3]);
    uint32_t v[8];
    for (int i = 0; i < 8; ++i)
        v[i] = 4 + i < argc ? (uint32_t)strtoul(argv[4 + i], NULL, 0) : 1;
    int32_t s[8];
    memcpy(s, v, sizeof s);
    cmsis_nn_context ctx = {NULL, 0};
    cmsis_nn_per_channel_quant_params quant = {multipliers, shifts};
    cmsis_nn_per_tensor_quant_params tensor_quant = {1 << 30, 0};
    cmsis_nn_activation act = {-128, 127};

    if (!strcmp(f, "reshape")) {
        arm_reshape_s8(a, b, v[0]);
    } else if (!strcmp(f, "add")) {
        arm_elementwise_add_s8(a, a, 0, 1 << 30, 0, 0, 1 << 30, 0, 0, b, 0, 1 << 30, 0, -128, 127, s[0]);
    } else if (!strcmp(f, "mul")) {
        arm_elementwise_mul_s8(a, a, 0, 0, b, 0, 1 << 30, 0, -128, 127, s[0]);
    } else if (!strcmp(f, "relu")) {
        arm_relu_q7(a, (uint16_t)v[0]);
    } else if (!strcmp(f, "softmax")) {
        arm_softmax_s8(a, s[0], s[1], 1 << 30, 0, -128, b);
    } else if (!strcmp(f, "concat")) {
        arm_concatenation_s8_x(a, v[0], v[1], v[2], v[3], b, v[4], v[5]);
    } else if (!strcmp(f, "maxpool")) {
        cmsis_nn_pool_params pool = {{1, 1}, {0, 0}, act};
        cmsis_nn_dims in = dims(s[0], s[1], s[2], s[3]);
        cmsis_nn_dims filter = dims(1, 2, 2, 1);
        cmsis_nn_dims out = dims(s[0], s[4], s[5], s[3]);
        arm_max_pool_s8(&ctx, &pool, &in, a, &filter, &out, b);
    } else if (!strcmp(f, "pad")) {
        cmsis_nn_dims in = dims(s[0], s[1], s[2], s[3]);
        cmsis_nn_dims pre = dims(s[4], s[5], s[6], s[7]);
        arm_pad_s8(a, b, 0, &in, &pre, &pre);
    } else if (!strcmp(f, "vecsum")) {
        arm_vector_sum_s8((int32_t *)b, s[0], s[1], a, 0, 0, NULL);
    } else if (!strcmp(f, "fc")) {
        cmsis_nn_fc_params fc = {0, 0, 0, act};
        cmsis_nn_dims in = dims(s[0], 1, 1, s[1]);
        cmsis_nn_dims filter = dims(s[1], 1, 1, s[2]);
        cmsis_nn_dims bias = dims(1, 1, 1, s[2]);
        cmsis_nn_dims out = dims(s[0], 1, 1, s[2]);
        arm_fully_connected_s8(&ctx, &fc, &tensor_quant, &in, a, &filter, a, &bias, NULL, &out, b);
    } else if (!strcmp(f, "transpose")) {
        cmsis_nn_dims in = dims(s[0], s[1], s[2], s[3]);
        cmsis_nn_dims out = dims(s[3], s[2], s[1], s[0]);
        uint32_t perm[4] = {3, 2, 1, 0};
        cmsis_nn_transpose_params params = {s[4], perm};
        arm_transpose_s8(a, b, &in, &out, &params);
    } else if (!strcmp(f, "conv")) {
        cmsis_nn_conv_params conv = {0, 0, {1, 1}, {0, 0}, {1, 1}, act};
        cmsis_nn_dims in = dims(s[0], s[1], s[2], s[3]);
        cmsis_nn_dims filter = dims(s[4], s[5], s[6], s[3]);
        cmsis_nn_dims bias = dims(1, 1, 1, s[4]);
        cmsis_nn_dims out = dims(s[0], s[7], s[7], s[4]);
        arm_convolve_s8(&ctx, &conv, &quant, &in, a, &filter, a, &bias, NULL, NULL, &out, b);
    } else {
        printf("hostile_calls: unknown function %s\n", f);
        return 2;
    }
    printf("hostile_calls: done\n");
    return 0;
}
