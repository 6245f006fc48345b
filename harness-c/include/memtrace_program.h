/*
 * memtrace_program.h — the model program of the memtrace executor.
 *
 * `memtrace verify` encodes a whole model (abi/src/program.rs) and writes
 * it at `memtrace_arena` before the first instruction. All fields are 32-bit
 * little-endian words; "offsets" are byte offsets from the program start,
 * except a tensor's arena offset, which is relative to the activation arena
 * (program start + PRG_ARENA_OFFSET). docs/protocol.md section 13 is the spec.
 *
 * Scratch memory: kernels such as CMSIS-NN's need a scratch buffer, which
 * TFLM places in the arena, so the planner must plan it. The host first runs
 * the executor with PRG_FLAG_QUERY_SCRATCH and reads back OPW_SCRATCH_BYTES
 * of every operator, plans a scratch tensor for each operator that needs one,
 * and runs the program with PRG_FLAG_SCRATCH_WORDS and OPW_SCRATCH set.
 */
#ifndef MEMTRACE_PROGRAM_H
#define MEMTRACE_PROGRAM_H

#include <stdint.h>

#define MEMTRACE_PROGRAM_MAGIC 0x31475250u /* "PRG1" */
/* Most activation inputs of one operator (TFLM's concatenation: kMaxInputNum). */
#define MEMTRACE_PROGRAM_MAX_INPUTS 10u

enum prg_header {
    PRG_MAGIC = 0,
    PRG_SIZE = 1,
    PRG_N_TENSORS = 2,
    PRG_TENSORS = 3,
    PRG_N_OPS = 4,
    PRG_OPS = 5,
    PRG_N_INPUTS = 6,
    PRG_INPUTS = 7, /* records of 3 words: tensor, data offset, bytes */
    PRG_N_OUTPUTS = 8,
    PRG_OUTPUTS = 9,
    PRG_ARENA_OFFSET = 10,
    PRG_ARENA_BYTES = 11,
    PRG_FLAGS = 12, /* enum prg_flag bits; 0 in programs from before the flags */
    PRG_STORAGE_BYTES = 13, /* bytes of the storage region the program uses */
    PRG_HEADER_WORDS = 16,
};

enum prg_flag {
    /* Query mode: run nothing; write each operator's scratch bytes (what the
     * kernel library's *_get_buffer_size functions return, 0 if none) into
     * its OPW_SCRATCH_BYTES word, then exit 0. */
    PRG_FLAG_QUERY_SCRATCH = 1u,
    /* The host filled OPW_SCRATCH in every operator record (-1 for none).
     * Without this bit the executor reads OPW_SCRATCH as -1: programs from
     * before the scratch words have 0 there, which would name tensor 0. */
    PRG_FLAG_SCRATCH_WORDS = 2u,
};

enum prg_tensor {
    TEN_DTYPE = 0,
    TEN_BYTES = 1,
    TEN_NDIMS = 2,
    TEN_DIMS = 3, /* 4 words, outermost first, padded with 1s */
    TEN_ZERO_POINT = 7,
    TEN_LOCATION = 8, /* enum prg_location */
    TEN_OFFSET = 9,
    TEN_NAME = 10,
    TEN_WORDS = 12,
};

enum prg_location { TEN_LOC_ARENA = 0, TEN_LOC_CONSTANT = 1, TEN_LOC_STORAGE = 2 };

enum prg_op {
    OPW_KIND = 0,
    OPW_DTYPE = 1,
    OPW_NAME = 2,
    OPW_PARAMS = 3,
    OPW_INPUT = 4,
    OPW_INPUT2 = 5,
    OPW_WEIGHTS = 6,
    OPW_BIAS = 7,
    OPW_OUTPUT = 8,
    OPW_STRIDE_H = 9,
    OPW_STRIDE_W = 10,
    OPW_DILATION_H = 11,
    OPW_DILATION_W = 12,
    OPW_PAD_H = 13,
    OPW_PAD_W = 14,
    OPW_DEPTH_MULTIPLIER = 15,
    OPW_FILTER_H = 16,
    OPW_FILTER_W = 17,
    OPW_ACT_MIN = 18,
    OPW_ACT_MAX = 19,
    OPW_FLOAT_MIN = 20, /* float bits */
    OPW_FLOAT_MAX = 21,
    OPW_INPUT_OFFSET = 22,
    OPW_WEIGHTS_OFFSET = 23,
    OPW_OUTPUT_OFFSET = 24,
    OPW_OUTPUT_MULTIPLIER = 25,
    OPW_OUTPUT_SHIFT = 26,
    OPW_CHANNEL_MULTIPLIERS = 27, /* offset of int32[channels], or -1 */
    OPW_CHANNEL_SHIFTS = 28,
    OPW_SOFTMAX_MULTIPLIER = 29,
    OPW_SOFTMAX_LEFT_SHIFT = 30,
    OPW_DIFF_MIN = 31,
    OPW_BETA = 32, /* float bits */
    OPW_INPUT2_OFFSET = 33,
    OPW_INPUT1_MULTIPLIER = 34,
    OPW_INPUT1_SHIFT = 35,
    OPW_INPUT2_MULTIPLIER = 36,
    OPW_INPUT2_SHIFT = 37,
    OPW_LEFT_SHIFT = 38,
    OPW_CHANNELS = 39,
    OPW_QUANT_SCALE = 40, /* float bits: QUANTIZE output / DEQUANTIZE input scale */
    OPW_QUANT_ZERO_POINT = 41,
    OPW_SCRATCH = 42,       /* tensor index of the scratch buffer (arena), or -1 */
    OPW_SCRATCH_BYTES = 43, /* written by the executor in query mode */
    OPW_AXIS = 44,          /* concatenation axis, >= 0 in the tensors' own rank */
    OPW_INPUTS = 45,        /* more than 2 inputs: offset of int32 [count, index...], else -1 */
    OPW_ACCUMULATOR_BYTES = 46, /* accumulator scratch element: 0 kernel's own (int32), 2 int16 */
    OPW_COPY_FROM = 47,     /* PK_SPILL: byte offset in the input where the copy starts */
    OPW_WORDS = 48,
};

enum prg_dtype { PDT_F32 = 1, PDT_INT8 = 2, PDT_UINT8 = 3, PDT_INT32 = 4 };

enum prg_kind {
    PK_CONV2D = 1,
    PK_DEPTHWISE_CONV2D = 2,
    PK_MAX_POOL = 3,
    PK_AVERAGE_POOL = 4,
    PK_FULLY_CONNECTED = 5,
    PK_ADD = 6,
    PK_RELU = 7,
    PK_SOFTMAX = 9,
    PK_RESHAPE = 10,
    PK_QUANTIZE = 11,
    PK_DEQUANTIZE = 12,
    PK_TRANSPOSE_CONV = 13,
    PK_CONCATENATION = 14,
    PK_PAD = 15, /* weights: int32 [4, 2] before/after per NHWC dimension */
    /* TinySeg: copy bytes [OPW_COPY_FROM, +output bytes) of the input to the
     * output (storage: a spill; arena: the part of a split that stays). */
    PK_SPILL = 20,
    /* TinySeg: copy a storage tensor into the arena. */
    PK_FETCH = 21,
    /* TinySeg: concatenate the two inputs along OPW_AXIS (one in storage). */
    PK_FETCH_CONCAT = 22,
    /* TinySeg: CONV_2D over the concatenation of the inputs along OPW_AXIS,
     * read where they lie (one in storage); OPW_INPUT2 -1 for one input. */
    PK_FETCH_CONV2D = 23,
};

#endif /* MEMTRACE_PROGRAM_H */
