/*
 * pool_batches.h — a CMSIS-NN pool over every image of a batch, in the form
 * the release has (MEMTRACE_CMSIS_NN_POOL_BATCHES, cmsis-nn/probe.sh).
 *
 * From v6.0.0 on, arm_max_pool_s8 and arm_avgpool_s8 loop over the batch
 * themselves. v4.x and v5.0.0 pool one image per call with the same
 * signature, and their callers looped; so does this, one image at a time,
 * with the same scratch buffer for each.
 */
#ifndef MEMTRACE_POOL_BATCHES_H
#define MEMTRACE_POOL_BATCHES_H

#include "arm_nnfunctions.h"
#include "cmsis_nn_features.h"

/* `pool(in, src, out, dst)` calls the library's pool for one call's dims. */
template <typename Pool>
arm_cmsis_nn_status pool_batches(Pool pool, const cmsis_nn_dims &in, const int8_t *src,
                                 const cmsis_nn_dims &out, int8_t *dst) {
#if MEMTRACE_CMSIS_NN_POOL_BATCHES
    return pool(in, src, out, dst);
#else
    cmsis_nn_dims in1 = in, out1 = out;
    in1.n = 1;
    out1.n = 1;
    const int32_t in_image = in.h * in.w * in.c, out_image = out.h * out.w * out.c;
    for (int32_t b = 0; b < in.n; ++b) {
        const arm_cmsis_nn_status s = pool(in1, src + b * in_image, out1, dst + b * out_image);
        if (s != ARM_CMSIS_NN_SUCCESS) {
            return s;
        }
    }
    return ARM_CMSIS_NN_SUCCESS;
#endif
}

#endif /* MEMTRACE_POOL_BATCHES_H */
