/*
 * proto-<case>.elf — one protocol violation each, for the tracer's error
 * paths. Built once per case with -DMEMTRACE_CASE=<n> (see the Makefile):
 *
 *   1 nested-begin   LAYER_BEGIN while a layer is open
 *   2 bad-role       BUFFER with role 9 (no such role)
 *   3 long-name      layer name without a NUL within MEMTRACE_MAX_STRING bytes
 *   4 fifo-leftover  LAYER_END with two words still in the FIFO
 *   5 fifo-missing   BUFFER after only 5 of its 8 FIFO words
 *   6 duplicate-id   two buffers of one layer with the same id
 */
#include <stdint.h>

#include "memtrace.h"

#ifndef MEMTRACE_CASE
#error "build with -DMEMTRACE_CASE=<n>"
#endif

static uint32_t a[16], b[16];
static char long_name[MEMTRACE_MAX_STRING + 16];

int main(void) {
#if MEMTRACE_CASE == 3
    for (unsigned i = 0; i < sizeof long_name; ++i) {
        long_name[i] = 'x'; /* no NUL anywhere in the first 256 bytes */
    }
    memtrace_layer_begin(long_name, "custom", "");
#else
    (void)long_name;
    memtrace_layer_begin("proto", "custom", "");
#endif
#if MEMTRACE_CASE == 1
    memtrace_layer_begin("again", "custom", "");
#elif MEMTRACE_CASE == 2
    memtrace_buffer(0, 9u, a, sizeof a, 4, "a");
#elif MEMTRACE_CASE == 4
    memtrace_buffer(0, MEMTRACE_ROLE_INPUT, a, sizeof a, 4, "a");
    memtrace_push(0x11111111u);
    memtrace_push(0x22222222u);
#elif MEMTRACE_CASE == 5
    memtrace_push(0);                   /* id */
    memtrace_push(MEMTRACE_ROLE_INPUT); /* role */
    memtrace_push_ptr(a);               /* base (2 words) */
    memtrace_push(sizeof a);            /* size; elem_size and name missing */
    memtrace_command(MEMTRACE_CMD_BUFFER);
#elif MEMTRACE_CASE == 6
    memtrace_buffer(0, MEMTRACE_ROLE_INPUT, a, sizeof a, 4, "a");
    memtrace_buffer(0, MEMTRACE_ROLE_OUTPUT, b, sizeof b, 4, "b");
#endif
    for (int i = 0; i < 16; ++i) {
        b[i] = a[i] + 1u;
    }
    memtrace_layer_end();
    return 0;
}
