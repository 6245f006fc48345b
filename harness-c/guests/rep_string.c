/*
 * rep-string.elf (x86-64 only) — repeated string instructions (rep movsb,
 * rep stosd, repne scasb, repe cmpsb, and a rep movsb with RCX = 0) on
 * declared buffers. The program checks its own results: exit code 0 means the
 * emulator executed it correctly.
 *
 * Why: Unicorn (QEMU) runs one iteration of a `rep` instruction per pass and
 * jumps back to the instruction itself, so its per-instruction hook fires once
 * per pass, while memtrace's block clock counts the whole repetition as one
 * instruction (tracer/src/clock.rs). tracer/tests/clock.rs checks the exact
 * difference between the two clocks on this guest; keep the counts below in
 * step with that test.
 */
#include <stdint.h>

#include "memtrace.h"
#include "memtrace_rt.h"

#define N 40u      /* bytes copied and compared */
#define WORDS 6u   /* dwords stored */
#define FOUND 10u  /* index of the byte repne scasb stops at */

int main(void) {
    uint8_t *src = memtrace_arena;
    uint8_t *dst = memtrace_arena + 64;
    uint32_t *fill = (uint32_t *)(memtrace_arena + 128);
    for (uint32_t i = 0; i < N; ++i) {
        ((volatile uint8_t *)src)[i] = (uint8_t)(i + 1u);
    }

    memtrace_layer_begin("rep_string", "custom", "");
    memtrace_buffer(0, MEMTRACE_ROLE_INPUT, src, N, 1, "src");
    memtrace_buffer(1, MEMTRACE_ROLE_OUTPUT, dst, N, 1, "dst");
    memtrace_buffer(2, MEMTRACE_ROLE_SCRATCH, fill, WORDS * 4u, 4, "fill");
    uint8_t *d = dst;
    const uint8_t *s = src;
    uint64_t n = N;
    __asm__ volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
    uint32_t *f = fill;
    uint64_t words = WORDS;
    __asm__ volatile("rep stosl" : "+D"(f), "+c"(words) : "a"(0x5a5a5a5au) : "memory");
    const uint8_t *p = dst;
    uint64_t left = N;
    __asm__ volatile("repne scasb" : "+D"(p), "+c"(left) : "a"(FOUND + 1u) : "memory", "cc");
    const uint8_t *a = src, *b = dst;
    uint64_t unequal = N;
    __asm__ volatile("repe cmpsb" : "+S"(a), "+D"(b), "+c"(unequal) : : "memory", "cc");
    uint8_t *none = dst;
    uint64_t zero = 0;
    __asm__ volatile("rep movsb" : "+D"(none), "+S"(s), "+c"(zero) : : "memory");
    memtrace_layer_end();

    if (n != 0 || d != dst + N || words != 0 || unequal != 0 || none != dst) {
        return 1;
    }
    if (left != N - FOUND - 1u || p != dst + FOUND + 1u) {
        return 1;
    }
    for (uint32_t i = 0; i < N; ++i) {
        if (dst[i] != (uint8_t)(i + 1u)) {
            return 1;
        }
    }
    for (uint32_t i = 0; i < WORDS; ++i) {
        if (fill[i] != 0x5a5a5a5au) {
            return 1;
        }
    }
    return 0;
}
