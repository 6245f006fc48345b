/*
 * memtrace_job.h — the job mailbox of the memtrace kernel suite.
 *
 * `memtrace run SUITE.elf --job SPEC` parses SPEC on the host, computes output
 * shape and padding with TFLite's rules, and writes MEMTRACE_JOB_WORDS int32
 * words into the guest symbol `memtrace_job` before the guest starts. A guest
 * that finds MEMTRACE_JOB_MAGIC in word 0 runs that one layer; otherwise it runs
 * its built-in layers. Word indices are fixed; docs/protocol.md documents them.
 *
 * Shapes are 4-D, NHWC, left-padded with 1s:
 *   conv2d            filter = [out_c, kh, kw, in_c]
 *   depthwise_conv2d  filter = [1, kh, kw, in_c * depth_multiplier]
 *   max/average_pool  filter = [1, kh, kw, 1]
 *   fully_connected   input = [.., .., batches, depth], filter = [1, 1, units, depth]
 *   add               second input has the input's shape
 *   relu              no filter
 *   matmul            input = [1, 1, M, K], filter = [1, 1, K, N], output [1, 1, M, N]
 *   transpose_conv    filter = [out_c, kh, kw, in_c]; output given by the host
 *                     (TFLite's output_shape input); pad from the output back
 *                     to the input; no dilation
 *   concatenation     second input in JOB_INPUT2, axis (0..3 of NHWC) in
 *                     JOB_AXIS; no filter
 *   pad               elements before/after each dimension in JOB_PAD_BEFORE
 *                     and JOB_PAD_AFTER; output = input + before + after; no
 *                     filter; the pad value is the output zero point (int8)
 *                     or 0.0 (f32), as TFLM's PAD
 */
#ifndef MEMTRACE_JOB_H
#define MEMTRACE_JOB_H

#include <stdint.h>

#define MEMTRACE_JOB_MAGIC 0x4A4F4231 /* "JOB1" */
#define MEMTRACE_JOB_WORDS 48

enum memtrace_job_word {
    JOB_MAGIC = 0,
    JOB_OP = 1,           /* enum memtrace_op */
    JOB_DTYPE = 2,        /* enum memtrace_dtype */
    JOB_INPUT = 3,        /* 4 words: N H W C */
    JOB_FILTER = 7,       /* 4 words, see above */
    JOB_OUTPUT = 11,      /* 4 words: N H W C, computed by the host */
    JOB_STRIDE_H = 15,
    JOB_STRIDE_W = 16,
    JOB_DILATION_H = 17,
    JOB_DILATION_W = 18,
    JOB_PADDING = 19,     /* 1 = same, 2 = valid (TFLite Padding) */
    JOB_PAD_H = 20,       /* PaddingValues.height, computed by the host */
    JOB_PAD_W = 21,       /* PaddingValues.width, computed by the host */
    JOB_DEPTH_MULTIPLIER = 22,
    JOB_ACTIVATION = 23,  /* 0 none, 1 relu, 2 relu6 */
    JOB_SEED = 24,        /* seed of the guest's data generator */
    JOB_AXIS = 25,        /* concatenation axis, 0..3 (N, H, W, C) */
    JOB_INPUT2 = 26,      /* 4 words: N H W C of the second input (concatenation) */
    JOB_PAD_BEFORE = 30,  /* 4 words: pad elements before N, H, W, C (pad) */
    JOB_PAD_AFTER = 34,   /* 4 words: pad elements after N, H, W, C (pad) */
};

enum memtrace_op {
    OP_CONV2D = 1,
    OP_DEPTHWISE_CONV2D = 2,
    OP_MAX_POOL = 3,
    OP_AVERAGE_POOL = 4,
    OP_FULLY_CONNECTED = 5,
    OP_ADD = 6,
    OP_RELU = 7,
    OP_MATMUL = 8,
    OP_TRANSPOSE_CONV = 9,
    OP_CONCATENATION = 10,
    OP_PAD = 11,
};

enum memtrace_dtype {
    DTYPE_F32 = 1,
    DTYPE_INT8 = 2,
};

#ifdef __cplusplus
extern "C" {
#endif
/* Written by the host before the first instruction runs. */
extern volatile int32_t memtrace_job[MEMTRACE_JOB_WORDS];
#ifdef __cplusplus
}
#endif

#endif /* MEMTRACE_JOB_H */
