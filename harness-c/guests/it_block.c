/*
 * it-block.elf (Cortex-M4 only) — loads and stores to declared buffers inside
 * Thumb-2 IT blocks, followed by code whose meaning depends on the IT state
 * being clean again. The program checks its own results: exit code 0 means
 * the emulator executed it correctly, 1 or a fault means it did not.
 *
 * Why: in Unicorn 2.1.x a UC_HOOK_MEM_READ/WRITE callback on an access inside
 * an IT block restores the CPU state of that instruction (cpu_restore_state)
 * and then resumes the translation block, leaving stale IT bits in XPSR; the
 * next translation block is then decoded as if it were inside the IT block
 * (unicorn-engine/unicorn#2309). Buffers traced through mmio_map are not
 * affected. A tracer test runs this guest with its buffers traced and expects
 * exit code 0.
 *
 * `it_across_pages` is the same hazard at a code-page boundary: an IT block
 * whose first conditional instruction ends one 4 KiB page and whose other two
 * begin the next, a page nothing has run from before. The translation block
 * ends at the page boundary inside the IT block and stores its IT state; the
 * TLB fill of the next page (a fetch, for which Unicorn restores nothing) must
 * leave that state alone, or the two instructions after the boundary run
 * unconditionally.
 */
#include <stdint.h>

#include "memtrace.h"
#include "memtrace_rt.h"

#define N 48u

static const char kText[N] = "conditional stores inside IT blocks, traced.";

/* Copies the NUL-terminated string at `src` into `dst` (at most cap - 1
 * characters, then a NUL), using a conditional store in an IT block, an
 * unconditional load between two IT blocks, and a conditional branch that
 * closes the loop; returns the number of characters plus one. Then a
 * conditional load inside an IT block. The instruction after each loop is
 * unconditional and must always execute. */
__attribute__((noinline)) uint32_t it_copy(uint8_t *dst, const uint8_t *src, uint32_t cap,
                                          uint32_t *probe) {
    uint32_t len, ok = 0, tmp, ch, idx;
    __asm__ volatile(
        "    movs   %[len], #1\n"
        "    movs   %[idx], #0\n"
        "    ldrb   %[ch], [%[src]]\n"
        "1:  cmp    %[cap], %[len]\n"
        "    it     hi\n"
        "    strbhi.w %[ch], [%[dst], %[idx]]\n"
        "    ldrb.w %[ch], [%[src], #1]!\n"
        "    itet   hi\n"
        "    movhi  %[idx], %[len]\n"
        "    movls  %[ok], #0\n"
        "    addhi  %[len], #1\n"
        "    cmp    %[ch], #0\n"
        "    bne    1b\n"
        "    adds   %[ok], %[ok], #1\n"      /* must run: ok = 1 */
        "    movs   %[tmp], #0\n"
        "    strb   %[tmp], [%[dst], %[idx]]\n"
        "    cmp    %[len], #0\n"
        "    itt    ne\n"
        "    ldrne  %[tmp], [%[probe]]\n"  /* conditional load of a traced word */
        "    addne  %[ok], %[ok], %[tmp]\n"
        "    cmp    %[ok], #0\n"
        "    beq    2f\n"
        "    adds   %[ok], %[ok], #1\n"      /* must run: ok = 2 + *probe */
        "2:\n"
        : [len] "=&l"(len), [idx] "=&r"(idx), [ch] "=&l"(ch), [tmp] "=&l"(tmp), [ok] "+&l"(ok),
          [src] "+&r"(src)
        : [dst] "r"(dst), [cap] "r"(cap), [probe] "r"(probe)
        : "cc", "memory");
    return ok == 2u + *probe ? len : 0u;
}

/* r0 = 1: the three conditional instructions are skipped, r0 = 7.
 * r0 = 0: they run, r0 = 0 + 100 + 20 = 120. Eight bytes before the page
 * boundary (movs, cmp, ittt, movne), the rest after it; the section is padded
 * to whole pages so that no other code shares the second page. */
uint32_t it_across_pages(uint32_t skip);
__asm__(
    "    .section .text.it_across_pages,\"ax\",%progbits\n"
    "    .balign 4096\n"
    "    .space  4096 - 8\n"
    "    .global it_across_pages\n"
    "    .thumb_func\n"
    "    .type   it_across_pages, %function\n"
    "it_across_pages:\n"
    "    movs    r1, #7\n"
    "    cmp     r0, #1\n"
    "    ittt    ne\n"
    "    movne   r1, #0\n"
    "    addne   r1, r1, #100\n" /* first instruction of the next page */
    "    addne   r1, r1, #20\n"
    "    mov     r0, r1\n"
    "    bx      lr\n"
    "    .size   it_across_pages, . - it_across_pages\n"
    "    .balign 4096\n"
    "    .text\n");

int main(void) {
    /* First, while the second page has never been fetched. */
    if (it_across_pages(1) != 7u || it_across_pages(0) != 120u) {
        return 2;
    }

    uint8_t *in = memtrace_arena;
    uint8_t *out = memtrace_arena + 64;
    uint32_t *probe = (uint32_t *)(memtrace_arena + 128);
    for (uint32_t i = 0; i < N; ++i) {
        in[i] = (uint8_t)kText[i];
    }
    *probe = 40;

    memtrace_layer_begin("it_block", "custom", "");
    memtrace_buffer(0, MEMTRACE_ROLE_INPUT, in, N, 1, "input");
    memtrace_buffer(1, MEMTRACE_ROLE_OUTPUT, out, N, 1, "output");
    memtrace_buffer(2, MEMTRACE_ROLE_SCRATCH, probe, 4, 4, "probe");
    const uint32_t len = it_copy(out, in, N, probe);
    memtrace_layer_end();

    uint32_t expect = 0;
    while (kText[expect]) {
        ++expect;
    }
    if (len != expect + 1u) {
        return 1;
    }
    for (uint32_t i = 0; i <= expect; ++i) {
        if (out[i] != (uint8_t)kText[i]) {
            return 1;
        }
    }
    return 0;
}
