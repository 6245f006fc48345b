/*
 * grouped_1x1_conv.c: a grouped 1x1 convolution through CMSIS-NN's
 * `arm_convolve_wrapper_s8`, its scratch sized by the library's own
 * `arm_convolve_wrapper_s8_get_buffer_size`, written as CMSIS-NN's unit
 * tests are (the scratch a heap block of the size the size function
 * returns) and ending with Unity's summary, so `memtrace regress
 * --unit-tests` compares it between two library builds.
 *
 * Shapes: input 1x4x4x4, filter 2x1x1x2 (two groups of two channels),
 * output 1x2x2x2, stride 2x2, no padding. CMSIS-NN v6.0.0 and v7.0.0 size
 * it as the 1x1 path (0 B on a core with the DSP extension), while the
 * wrapper, seeing input_dims->c != filter_dims->c, runs arm_convolve_s8,
 * whose im2col buffer holds 2 columns of 1x1x2 int16 values (8 B). The
 * development head sizes it as the wrapper chooses.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "arm_nnfunctions.h"

static int8_t input[1 * 4 * 4 * 4];
static int8_t filter[2 * 1 * 1 * 2];
static int32_t bias[2];
static int8_t output[1 * 2 * 2 * 2];
static int32_t multiplier[2] = {1073741824, 1073741824};
static int32_t shift[2] = {0, 0};

int main(void)
{
    for (unsigned i = 0; i < sizeof input; i++)
        input[i] = (int8_t)(i * 7 - 50);
    for (unsigned i = 0; i < sizeof filter; i++)
        filter[i] = (int8_t)(i + 1);
    cmsis_nn_dims input_dims = {1, 4, 4, 4};
    cmsis_nn_dims filter_dims = {2, 1, 1, 2};
    cmsis_nn_dims bias_dims = {1, 1, 1, 2};
    cmsis_nn_dims output_dims = {1, 2, 2, 2};
    cmsis_nn_conv_params conv_params = {0};
    conv_params.stride.w = 2;
    conv_params.stride.h = 2;
    conv_params.dilation.w = 1;
    conv_params.dilation.h = 1;
    conv_params.activation.min = -128;
    conv_params.activation.max = 127;
    cmsis_nn_per_channel_quant_params quant = {multiplier, shift};
    cmsis_nn_context ctx;
    int32_t buf_size =
        arm_convolve_wrapper_s8_get_buffer_size(&conv_params, &input_dims, &filter_dims, &output_dims);
    ctx.buf = malloc(buf_size);
    ctx.size = 0;
    arm_cmsis_nn_status status = arm_convolve_wrapper_s8(&ctx, &conv_params, &quant, &input_dims,
                                                         input, &filter_dims, filter, &bias_dims,
                                                         bias, &output_dims, output);
    free(ctx.buf);
    int failed = status != ARM_CMSIS_NN_SUCCESS;
    printf("scratch %ld B\n", (long)buf_size);
    printf("\n-----------------------\n1 Tests %d Failures 0 Ignored \n%s\n", failed,
           failed ? "FAIL" : "OK");
    return failed;
}
