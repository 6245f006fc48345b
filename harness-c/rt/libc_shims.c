/*
 * The few C library routines the guests need, written here so that no C
 * library is linked: glibc's IFUNC-resolved string routines do not work in a
 * freestanding emulator run, and one set of shims keeps both targets alike.
 *
 * GCC turns a byte-copy loop into a call to memcpy (and a fill loop into
 * memset) at -O2, also inside memcpy itself, which then calls itself until
 * the stack overflows. The pragma below keeps it from doing so whatever flags
 * this file is compiled with; the Makefile also passes
 * -fno-tree-loop-distribute-patterns, and checks the built object.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-tree-loop-distribute-patterns")
#endif

#include <stddef.h>
#include <stdint.h>

#include "memtrace_rt.h"

void *memcpy(void *restrict dst, const void *restrict src, size_t n) {
    unsigned char *d = (unsigned char *)dst;
    const unsigned char *s = (const unsigned char *)src;
    if ((((uintptr_t)d | (uintptr_t)s) & 3u) == 0) {
        for (; n >= 4; n -= 4, d += 4, s += 4) {
            *(uint32_t *)d = *(const uint32_t *)s;
        }
    }
    while (n--) {
        *d++ = *s++;
    }
    return dst;
}

void *memmove(void *dst, const void *src, size_t n) {
    unsigned char *d = (unsigned char *)dst;
    const unsigned char *s = (const unsigned char *)src;
    if (d == s || n == 0) {
        return dst;
    }
    if (d < s || d >= s + n) {
        return memcpy(dst, src, n);
    }
    while (n--) { /* overlapping, destination above source: copy backwards */
        d[n] = s[n];
    }
    return dst;
}

void *memset(void *dst, int c, size_t n) {
    unsigned char *d = (unsigned char *)dst;
    unsigned char b = (unsigned char)c;
    if (((uintptr_t)d & 3u) == 0) {
        uint32_t w = b * 0x01010101u;
        for (; n >= 4; n -= 4, d += 4) {
            *(uint32_t *)d = w;
        }
    }
    while (n--) {
        *d++ = b;
    }
    return dst;
}

int memcmp(const void *a, const void *b, size_t n) {
    const unsigned char *x = (const unsigned char *)a;
    const unsigned char *y = (const unsigned char *)b;
    for (size_t i = 0; i < n; ++i) {
        if (x[i] != y[i]) {
            return x[i] < y[i] ? -1 : 1;
        }
    }
    return 0;
}

size_t strlen(const char *s) {
    size_t n = 0;
    while (s[n]) {
        ++n;
    }
    return n;
}

/* Weak: a program that can say why it aborts (the TFLM runner) defines its
 * own abort(). Its body is the same instructions as ever, so that the kernel
 * guests' code does not move. */
__attribute__((weak)) void abort(void) { memtrace_rt_exit(MEMTRACE_RT_EXIT_ABORT); }

/* glibc's assert() */
void __assert_fail(const char *expr, const char *file, unsigned line, const char *func) {
    (void)expr, (void)file, (void)line, (void)func;
    abort();
}

/* newlib's assert() */
void __assert_func(const char *file, int line, const char *func, const char *expr) {
    (void)expr, (void)file, (void)line, (void)func;
    abort();
}

#if defined(__arm__)
/* AEABI memory helpers, in case GCC or libgcc refers to them. */
void __aeabi_memcpy(void *d, const void *s, size_t n) { memcpy(d, s, n); }
void __aeabi_memcpy4(void *d, const void *s, size_t n) { memcpy(d, s, n); }
void __aeabi_memcpy8(void *d, const void *s, size_t n) { memcpy(d, s, n); }
void __aeabi_memmove(void *d, const void *s, size_t n) { memmove(d, s, n); }
void __aeabi_memmove4(void *d, const void *s, size_t n) { memmove(d, s, n); }
void __aeabi_memmove8(void *d, const void *s, size_t n) { memmove(d, s, n); }
void __aeabi_memset(void *d, size_t n, int c) { memset(d, c, n); }
void __aeabi_memset4(void *d, size_t n, int c) { memset(d, c, n); }
void __aeabi_memset8(void *d, size_t n, int c) { memset(d, c, n); }
void __aeabi_memclr(void *d, size_t n) { memset(d, 0, n); }
void __aeabi_memclr4(void *d, size_t n) { memset(d, 0, n); }
void __aeabi_memclr8(void *d, size_t n) { memset(d, 0, n); }
#endif
