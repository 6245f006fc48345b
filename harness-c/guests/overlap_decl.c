/*
 * overlap-decl.elf — declares two buffers of one layer whose byte ranges
 * overlap: the tracer must reject the second declaration. (An input may
 * overlap the layer's output — DMO does exactly that — so the second buffer
 * here is a scratch buffer.)
 */
#include <stdint.h>

#include "memtrace.h"

static uint8_t storage[256] __attribute__((aligned(16)));

int main(void) {
    memtrace_layer_begin("overlap", "custom", "");
    memtrace_buffer(0, MEMTRACE_ROLE_INPUT, storage, 128, 1, "input");
    memtrace_buffer(1, MEMTRACE_ROLE_SCRATCH, storage + 64, 128, 1, "scratch"); /* 64..191 */
    for (int i = 0; i < 128; ++i) {
        storage[64 + i] = (uint8_t)(storage[i] + 1);
    }
    memtrace_layer_end();
    return 0;
}
