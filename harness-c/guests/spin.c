/*
 * spin.elf — opens a layer and never leaves it: the tracer's instruction
 * budget must stop it and report the open layer. The loop touches no declared
 * buffer, so it produces no events.
 */
#include "memtrace.h"

__attribute__((noinline)) void spin_forever(void) {
    volatile uint32_t counter = 0;
    for (;;) {
        counter = counter + 1;
    }
}

int main(void) {
    memtrace_layer_begin("spin", "custom", "");
    spin_forever();
    return 0;
}
