/*
 * memcpy-recursion.elf — a program with its own memcpy, compiled the way a
 * user's C library shim is compiled when -fno-tree-loop-distribute-patterns
 * is missing (the Makefile passes -ftree-loop-distribute-patterns and, on
 * x86-64, -fhosted for this file): GCC recognises the byte-copy loop as a
 * copy and replaces it by a call to memcpy — to this very function, which
 * calls itself until the stack overflows. libmemtrace_rt.a's shims cannot do
 * this (rt/libc_shims.c); the tracer must report it as a stack overflow in
 * `memcpy` called from `memcpy` many times, from `main`.
 */
#include <stddef.h>
#include <stdint.h>

#include "memtrace.h"

void *memcpy(void *restrict dst, const void *restrict src, size_t n) {
    unsigned char *d = (unsigned char *)dst;
    const unsigned char *s = (const unsigned char *)src;
    while (n--) {
        *d++ = *s++;
    }
    return dst;
}

static uint8_t src[64] __attribute__((aligned(16)));
static uint8_t dst[64] __attribute__((aligned(16)));

int main(void) {
    /* A size the compiler cannot see, so that the copy is a call. */
    volatile size_t n = sizeof dst;
    for (size_t i = 0; i < sizeof src; ++i) {
        ((volatile uint8_t *)src)[i] = (uint8_t)i;
    }
    memtrace_layer_begin("copy", "custom", "");
    memtrace_buffer(0, MEMTRACE_ROLE_INPUT, src, sizeof src, 1, "src");
    memtrace_buffer(1, MEMTRACE_ROLE_OUTPUT, dst, sizeof dst, 1, "dst");
    memcpy(dst, src, n);
    memtrace_layer_end();
    return dst[1] == 1 ? 0 : 1;
}
