/* CMSIS-NN's int8 max pool made wrong on purpose, for memtrace's own tests:
 * linked into suite-cmsis-skewed.elf with -Wl,--wrap=arm_max_pool_s8, every
 * call runs the real kernel, then flips the lowest bit of the first
 * SKEWED_BYTES output bytes. `memtrace regress` must name each int8 max
 * pool layer of that build against TFLM's reference kernels, with exactly
 * those bytes. */
#include <stdint.h>

#include "arm_nnfunctions.h"

#define SKEWED_BYTES 3

arm_cmsis_nn_status __real_arm_max_pool_s8(const cmsis_nn_context *ctx,
                                           const cmsis_nn_pool_params *pool_params,
                                           const cmsis_nn_dims *input_dims,
                                           const int8_t *input_data,
                                           const cmsis_nn_dims *filter_dims,
                                           const cmsis_nn_dims *output_dims,
                                           int8_t *output_data);

arm_cmsis_nn_status __wrap_arm_max_pool_s8(const cmsis_nn_context *ctx,
                                           const cmsis_nn_pool_params *pool_params,
                                           const cmsis_nn_dims *input_dims,
                                           const int8_t *input_data,
                                           const cmsis_nn_dims *filter_dims,
                                           const cmsis_nn_dims *output_dims,
                                           int8_t *output_data)
{
    arm_cmsis_nn_status status = __real_arm_max_pool_s8(
        ctx, pool_params, input_dims, input_data, filter_dims, output_dims, output_data);
    int32_t bytes = output_dims->n * output_dims->h * output_dims->w * output_dims->c;
    for (int32_t i = 0; i < bytes && i < SKEWED_BYTES; i++) {
        output_data[i] ^= 1;
    }
    return status;
}
