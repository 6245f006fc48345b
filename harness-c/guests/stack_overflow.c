/*
 * stack-overflow.elf — a recursion without end inside a layer window. Every
 * level keeps a 32-byte frame of its own and calls itself again before it
 * returns (no tail call), so the stack grows until it passes
 * __stack_bottom. The tracer must stop it as a stack overflow: how far below
 * the bottom, how large the stack is, `descend` and its callers (`descend`
 * many times, then `main`), the open layer; never as a write to an unmapped
 * address after the stack ran through .bss.
 */
#include <stdint.h>

#include "memtrace.h"

static uint8_t out[64] __attribute__((aligned(16)));

__attribute__((noinline)) uint32_t descend(uint32_t depth, volatile uint8_t *sink) {
    volatile uint8_t frame[32];
    frame[depth % 32] = (uint8_t)depth;
    sink[depth % 64] = frame[(depth + 1) % 32];
    if (depth == 0xFFFFFFFFu) { /* never: the stack ends long before */
        return 0;
    }
    return descend(depth + 1, sink) + frame[0]; /* <- the recursive call */
}

int main(void) {
    memtrace_layer_begin("deep", "custom", "");
    memtrace_buffer(0, MEMTRACE_ROLE_OUTPUT, out, sizeof out, 1, "out");
    const uint32_t r = descend(0, out);
    memtrace_layer_end();
    return (int)r;
}
