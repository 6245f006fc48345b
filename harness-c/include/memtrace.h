/*
 * memtrace.h — the guest side of the memtrace protocol (freestanding C/C++).
 *
 * A binary under test includes this header and talks to the tracer through one
 * 8-byte object, `memtrace_port`, which the tracer finds by symbol name:
 *
 *   word 0: FIFO    every 32-bit write appends one word to the host-side FIFO
 *   word 1: MARKER  every 32-bit write is a command that consumes FIFO words
 *
 * Commands and the FIFO words each consumes (pointers and addresses are pushed
 * as two words, low half first, so 32- and 64-bit guests share one format):
 *
 *   MEMTRACE_CMD_LAYER_BEGIN  name_ptr(2) op_ptr(2) params_ptr(2)      6 words
 *   MEMTRACE_CMD_BUFFER       id role base(2) size elem_size name_ptr(2) 8 words
 *   MEMTRACE_CMD_LAYER_END    (none)                                   0 words
 *   MEMTRACE_CMD_EXIT         exit_code                                1 word
 *   MEMTRACE_CMD_REASON       text_ptr(2)                              2 words
 *
 * Strings are NUL-terminated and at most MEMTRACE_MAX_STRING bytes long.
 * Buffers are declared after LAYER_BEGIN and live until LAYER_END.
 * The full specification is docs/protocol.md.
 */
#ifndef MEMTRACE_H
#define MEMTRACE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MEMTRACE_CMD_LAYER_BEGIN 1u
#define MEMTRACE_CMD_BUFFER      2u
#define MEMTRACE_CMD_LAYER_END   3u
#define MEMTRACE_CMD_EXIT        4u
#define MEMTRACE_CMD_REASON      5u

#define MEMTRACE_ROLE_INPUT   0u
#define MEMTRACE_ROLE_OUTPUT  1u
#define MEMTRACE_ROLE_WEIGHTS 2u
#define MEMTRACE_ROLE_BIAS    3u
#define MEMTRACE_ROLE_SCRATCH 4u
#define MEMTRACE_ROLE_RED_ZONE 5u /* bytes next to a buffer no access may touch */
#define MEMTRACE_ROLE_PERSISTENT 6u /* memory the kernel allocated for itself: op data, state */

#define MEMTRACE_MAX_STRING 256u

/* Defined exactly once: by libmemtrace_rt.a (harness-c/rt/port.c, docs/protocol.md
 * section 11), or, in a program linked without it, by the translation unit that
 * defines MEMTRACE_IMPLEMENTATION before including this header. It lives in its
 * own section so a linker script can give it a page of its own. */
extern volatile uint32_t memtrace_port[2];

#ifdef MEMTRACE_IMPLEMENTATION
__attribute__((section(".memtrace"), used, aligned(8)))
volatile uint32_t memtrace_port[2];
#endif

static inline void memtrace_push(uint32_t word) { memtrace_port[0] = word; }

static inline void memtrace_push_ptr(const volatile void *p) {
    uint64_t v = (uint64_t)(uintptr_t)p;
    memtrace_push((uint32_t)v);
    memtrace_push((uint32_t)(v >> 32));
}

/* A command is also a compiler memory barrier: without it, GCC may move
 * ordinary (non-volatile) loads and stores of tensor data across the volatile
 * port write, e.g. sink the last input-initialising stores past LAYER_BEGIN or
 * hoist kernel loads above it. This changes no word of the protocol. */
#if defined(__GNUC__)
#define MEMTRACE_BARRIER() __asm__ volatile("" ::: "memory")
#else
#define MEMTRACE_BARRIER() ((void)0)
#endif

/* Every command is one store to MARKER made by this one out-of-line function
 * (defined with memtrace_port). A tracer that serves the port page without
 * memory hooks learns the exact instruction of that store from a code hook on
 * this function alone, which costs nothing anywhere else (docs/protocol.md,
 * "Fast path"). */
void memtrace_signal(uint32_t cmd);

#ifdef MEMTRACE_IMPLEMENTATION
__attribute__((noinline, used)) void memtrace_signal(uint32_t cmd) { memtrace_port[1] = cmd; }
#endif

static inline void memtrace_command(uint32_t cmd) {
    MEMTRACE_BARRIER();
    memtrace_signal(cmd);
    MEMTRACE_BARRIER();
}

/* Opens a layer window. `params` is "key=value,key=value" (may be ""). */
static inline void memtrace_layer_begin(const char *name, const char *op, const char *params) {
    memtrace_push_ptr(name);
    memtrace_push_ptr(op);
    memtrace_push_ptr(params);
    memtrace_command(MEMTRACE_CMD_LAYER_BEGIN);
}

/* Declares a buffer of the current layer; `id` is unique within the layer. */
static inline void memtrace_buffer(uint32_t id, uint32_t role, const volatile void *base,
                                   uint32_t size, uint32_t elem_size, const char *name) {
    memtrace_push(id);
    memtrace_push(role);
    memtrace_push_ptr(base);
    memtrace_push(size);
    memtrace_push(elem_size);
    memtrace_push_ptr(name);
    memtrace_command(MEMTRACE_CMD_BUFFER);
}

static inline void memtrace_layer_end(void) { memtrace_command(MEMTRACE_CMD_LAYER_END); }

/* Ends the traced program; the tracer stops the emulator on this write. */
static inline void memtrace_exit(int32_t code) {
    memtrace_push((uint32_t)code);
    memtrace_command(MEMTRACE_CMD_EXIT);
    for (;;) {
    }
}

/* Ends the traced program and says why: the tracer reports `reason` with a
 * non-zero `code` (e.g. why a job was rejected). */
static inline void memtrace_exit_reason(int32_t code, const char *reason) {
    memtrace_push_ptr(reason);
    memtrace_command(MEMTRACE_CMD_REASON);
    memtrace_exit(code);
}

#ifdef __cplusplus
}
#endif

#endif /* MEMTRACE_H */
