/*
 * memtrace_tflm.h — the mailbox of the TFLM runner guests (tflm-runner*.elf).
 *
 * The runner is TensorFlow Lite Micro's own MicroInterpreter, built unmodified
 * from a TFLM tree, with every builtin operator registered. The model is data:
 * before the guest starts, the host writes
 *
 *   memtrace_model   the .tflite bytes (TFLM_MODEL_BYTES of them)
 *   memtrace_io      the input tensors' bytes, concatenated in the model's
 *                    input order, each exactly TFLM's input(i)->bytes long
 *                    (TFLM_INPUT_BYTES in all; 0 leaves the inputs as the
 *                    arena holds them, all zero)
 *   memtrace_tflm_job  the words below marked "host"
 *
 * The runner hands TFLM an arena of TFLM_ARENA_BYTES at memtrace_arena, lays
 * it out exactly as `MicroInterpreter(model, resolver, arena, bytes)` does
 * (TFLM's greedy planner, or the model's OfflineMemoryAllocation metadata),
 * runs AllocateTensors() and Invoke(), and fills the words marked "runner".
 *
 * With TFLM_FLAG_LAYERS, every operator of subgraph 0 is one memtrace layer
 * (memtrace.h), opened and closed by TFLM's own MicroProfilerInterface:
 *   name    "<index>:<OP>:<first output tensor name>" (at most 255 bytes)
 *   op      TFLM's operator name, e.g. "CONV_2D" (custom ops: their name)
 *   params  "index=<index>"
 * Buffers, each tensor once (a tensor used twice is declared at its first
 * place), tensors without data or bytes left out:
 *   id k          node input k   role INPUT (arena), WEIGHTS (constant),
 *                                BIAS (constant bias input of CONV_2D,
 *                                DEPTHWISE_CONV_2D, FULLY_CONNECTED (k = 2)
 *                                and TRANSPOSE_CONV (k = 3)),
 *                                SCRATCH for variable tensors (state)
 *   id 32 + j     node output j  role OUTPUT for j = 0, SCRATCH for j > 0
 *                                and for variable tensors
 *   id 96 + j     scratch buffer j that TFLM gave this operator
 *                                (RequestScratchBufferInArena), role SCRATCH,
 *                                named "scratch<j>"
 * Buffer names are the tensors' names in the model (or "tensor<N>").
 * Before the first operator, one window per model input, named
 * "load_input" (op "load_input", params "input=<i>"), declares that input
 * tensor as its OUTPUT (id 32) and copies its bytes from memtrace_io into the
 * arena (zeros when TFLM_INPUT_BYTES is 0).
 *
 * After Invoke(), the runner writes into memtrace_io (offsets from its start):
 *   at TFLM_OUTPUT_OFFSET  the output tensors' bytes, concatenated in order
 *                          (TFLM_INPUT_BYTES rounded up to 16)
 *   at TFLM_TABLE_OFFSET   TFLM_N_TENSORS records of 3 words for the tensors
 *                          of subgraph 0: location (TFLM_LOC_*), offset (from
 *                          memtrace_arena for TFLM_LOC_ARENA, from
 *                          memtrace_model for TFLM_LOC_MODEL), bytes;
 *                          then TFLM_N_SCRATCH records of 3 words: operator
 *                          index (0xFFFFFFFF: an operator of another
 *                          subgraph), offset from memtrace_arena, bytes
 *                          requested, in TFLM's scratch-index order
 *
 * The exit code says how far the runner got (TFLM_EXIT_*); every non-zero
 * exit carries a reason (MEMTRACE_CMD_REASON), for TFLM's own failures the
 * last message TFLM logged (e.g. "Didn't find op for builtin opcode ...").
 * docs/protocol.md documents all of it.
 */
#ifndef MEMTRACE_TFLM_H
#define MEMTRACE_TFLM_H

#include <stdint.h>

#define MEMTRACE_TFLM_MAGIC 0x54464C31 /* "TFL1" */
#define MEMTRACE_TFLM_WORDS 32

enum memtrace_tflm_word {
    /* host */
    TFLM_MAGIC = 0,
    TFLM_MODEL_BYTES = 1,   /* bytes of the .tflite at memtrace_model */
    TFLM_ARENA_BYTES = 2,   /* the tensor arena TFLM gets, from memtrace_arena */
    TFLM_FLAGS = 3,         /* TFLM_FLAG_* */
    TFLM_INPUT_BYTES = 4,   /* input bytes at the start of memtrace_io */
    TFLM_RED_ZONE_BYTES = 5, /* 0, or a red-zoned run: this many bytes before
                                and after every planned buffer (a multiple
                                of 16), the model's offline plan ignored */
    TFLM_DUMP_OP = 6,       /* 0, or 1 + the index of the operator whose
                               outputs the runner copies to the end of
                               memtrace_io once it has run */
    /* runner */
    TFLM_STAGE = 8,         /* the last stage reached (TFLM_STAGE_*) */
    TFLM_ARENA_USED = 9,    /* MicroInterpreter::arena_used_bytes() */
    TFLM_HEAD_BYTES = 10,   /* the arena's head: planned tensors and scratch */
    TFLM_TAIL_BYTES = 11,   /* the arena's tail: persistent buffers */
    TFLM_HEAD_OFFSET = 12,  /* where the head starts, from memtrace_arena */
    TFLM_N_INPUTS = 13,
    TFLM_N_OUTPUTS = 14,
    TFLM_N_TENSORS = 15,    /* tensors of subgraph 0 */
    TFLM_N_SCRATCH = 16,    /* scratch buffers of all operators */
    TFLM_N_OPS = 17,        /* operators of subgraph 0 */
    TFLM_OUTPUT_OFFSET = 18,
    TFLM_OUTPUT_BYTES = 19,
    TFLM_TABLE_OFFSET = 20,
    TFLM_DIGEST_OFFSET = 21, /* with TFLM_FLAG_DIGESTS: TFLM_N_OPS records
                                of 2 words in memtrace_io, per operator of
                                subgraph 0 the FNV-1a (32-bit) of its
                                outputs' bytes, concatenated, and their count */
    TFLM_DUMP_BYTES = 22,   /* with TFLM_DUMP_OP: the operator's output bytes,
                               the last this many bytes of memtrace_io */
};

/* TFLM_FLAGS */
#define TFLM_FLAG_LAYERS 1u      /* one memtrace layer per operator */
#define TFLM_FLAG_NO_WEIGHTS 2u  /* leave constant tensors undeclared */
#define TFLM_FLAG_DIGESTS 4u     /* a digest of every operator's outputs */

/* TFLM_STAGE */
#define TFLM_STAGE_STARTED 1
#define TFLM_STAGE_MODEL 2       /* the model parsed and its version accepted */
#define TFLM_STAGE_ALLOCATED 3   /* AllocateTensors() succeeded */
#define TFLM_STAGE_INVOKED 4     /* Invoke() succeeded, outputs written */

/* Tensor table locations */
#define TFLM_LOC_NONE 0          /* no data (optional input, unallocated) */
#define TFLM_LOC_ARENA 1
#define TFLM_LOC_MODEL 2         /* a constant, in the .tflite's buffers */
#define TFLM_LOC_OTHER 3

/* Exit codes */
#define TFLM_EXIT_OK 0
#define TFLM_EXIT_BAD_JOB 2      /* no magic, or a size that does not fit its region */
#define TFLM_EXIT_BAD_MODEL 3    /* not a model TFLM accepts (schema version) */
#define TFLM_EXIT_ALLOCATE 4     /* AllocateTensors() failed: unsupported op, arena too small, ... */
#define TFLM_EXIT_INVOKE 5       /* Invoke() failed */
#define TFLM_EXIT_IO 6           /* input bytes differ from the model's, or memtrace_io too small */

/* TinySeg's storage operators (tflm/storage_ops.cc), TFLM custom operators
 * whose custom_options are TFLM_STORAGE_WORDS little-endian 32-bit words.
 * The stored tensor is no TFLite tensor: it lives in a slot of
 * memtrace_storage (OFFSET, BYTES), and the words describe it (TYPE is the
 * schema's TensorType, SCALE the bits of a float). MEMTRACE_SPILL copies
 * BYTES bytes of its input from byte FROM into the slot; MEMTRACE_FETCH the
 * slot into its output; MEMTRACE_FETCH_CONCAT concatenates its input and the
 * slot along AXIS, the slot being part POSITION of PARTS (TFLM's reference
 * CONCATENATION); MEMTRACE_FETCH_CONV_2D is TFLM's reference CONV_2D over
 * that concatenation, never materialised, with PADDING (the schema's
 * Padding), strides, dilations and ACTIVATION (the schema's
 * ActivationFunctionType). MEMTRACE_SPILL_KEEP has no options: it copies
 * the first bytes of its input into its (smaller) output. */
#define TFLM_STORAGE_VERSION 1
enum memtrace_tflm_storage_word {
    TFLM_STORAGE_WORD_VERSION = 0,
    TFLM_STORAGE_WORD_OFFSET = 1,
    TFLM_STORAGE_WORD_BYTES = 2,
    TFLM_STORAGE_WORD_TYPE = 3,
    TFLM_STORAGE_WORD_RANK = 4,
    TFLM_STORAGE_WORD_DIMS = 5,       /* 4 words; the first RANK are used */
    TFLM_STORAGE_WORD_SCALE = 9,
    TFLM_STORAGE_WORD_ZERO_POINT = 10,
    TFLM_STORAGE_WORD_FROM = 11,
    TFLM_STORAGE_WORD_AXIS = 12,
    TFLM_STORAGE_WORD_PARTS = 13,
    TFLM_STORAGE_WORD_POSITION = 14,
    TFLM_STORAGE_WORD_PADDING = 15,
    TFLM_STORAGE_WORD_STRIDE_W = 16,
    TFLM_STORAGE_WORD_STRIDE_H = 17,
    TFLM_STORAGE_WORD_DILATION_W = 18,
    TFLM_STORAGE_WORD_DILATION_H = 19,
    TFLM_STORAGE_WORD_ACTIVATION = 20,
    TFLM_STORAGE_WORDS = 21,
};

#ifdef __cplusplus
extern "C" {
#endif

extern volatile uint32_t memtrace_tflm_job[MEMTRACE_TFLM_WORDS];
extern unsigned char memtrace_model[];
extern unsigned char memtrace_model_end[];
extern unsigned char memtrace_io[];
extern unsigned char memtrace_io_end[];

#ifdef __cplusplus
}
#endif

#endif /* MEMTRACE_TFLM_H */
