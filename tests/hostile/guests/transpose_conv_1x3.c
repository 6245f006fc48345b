/*
 * transpose_conv_1x3.c: a transpose convolution through CMSIS-NN's
 * `arm_transpose_conv_wrapper_s8`, its scratch sized by the library's own
 * `arm_transpose_conv_s8_get_buffer_size`, written as CMSIS-NN's unit
 * tests are (the scratch a heap block of the size the size function
 * returns) and ending with Unity's summary, so `memtrace regress
 * --unit-tests` compares it between two library builds.
 *
 * Shapes: input 1x3x3x2, filter 2x2x1x2, output 1x4x7x2, stride 3 across
 * and 1 down, no padding. The size function's rolling buffer is
 * MAX(filter_w, stride_h) columns wide past the input's reach, the
 * kernel's MAX(filter_w, stride_w): two rows of (2*3 + 1)*2 int32 asked
 * for (112 B), two rows of (2*3 + 3)*2 used (144 B), in v7.0.0 and the
 * development head alike.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "arm_nnfunctions.h"

static int8_t input[1 * 3 * 3 * 2];
static int8_t filter[2 * 2 * 1 * 2];
static int32_t bias[2];
static int8_t output[1 * 4 * 7 * 2];
static int32_t multiplier[2] = {1073741824, 1073741824};
static int32_t shift[2] = {0, 0};

int main(void)
{
    for (unsigned i = 0; i < sizeof input; i++)
        input[i] = (int8_t)(i * 7 - 50);
    for (unsigned i = 0; i < sizeof filter; i++)
        filter[i] = (int8_t)(i + 1);
    cmsis_nn_dims input_dims = {1, 3, 3, 2};
    cmsis_nn_dims filter_dims = {2, 2, 1, 2};
    cmsis_nn_dims bias_dims = {1, 1, 1, 2};
    cmsis_nn_dims output_dims = {1, 4, 7, 2};
    cmsis_nn_transpose_conv_params params = {0};
    params.stride.w = 3;
    params.stride.h = 1;
    params.dilation.w = 1;
    params.dilation.h = 1;
    params.activation.min = -128;
    params.activation.max = 127;
    cmsis_nn_per_channel_quant_params quant = {multiplier, shift};
    cmsis_nn_context ctx;
    cmsis_nn_context reverse_ctx = {NULL, 0};
    int32_t buf_size =
        arm_transpose_conv_s8_get_buffer_size(&params, &input_dims, &filter_dims, &output_dims);
    ctx.buf = malloc(buf_size);
    ctx.size = buf_size;
    arm_cmsis_nn_status status = arm_transpose_conv_wrapper_s8(
        &ctx, &reverse_ctx, &params, &quant, &input_dims, input, &filter_dims, filter, &bias_dims,
        bias, &output_dims, output);
    free(ctx.buf);
    int failed = status != ARM_CMSIS_NN_SUCCESS;
    printf("scratch %ld B\n", (long)buf_size);
    printf("\n-----------------------\n1 Tests %d Failures 0 Ignored \n%s\n", failed,
           failed ? "FAIL" : "OK");
    return failed;
}
