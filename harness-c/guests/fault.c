/*
 * fault.elf — opens a layer, then loads from an address no PT_LOAD segment
 * covers. The tracer must report the guest fault with PC -> function
 * (read_unmapped) -> file:line (this file), and the open layer.
 */
#include <stdint.h>

#include "memtrace.h"

#define UNMAPPED_ADDRESS 0x70000000u

static uint32_t scratch[16];

__attribute__((noinline)) uint32_t read_unmapped(uintptr_t address) {
    const volatile uint32_t *p = (const volatile uint32_t *)address;
    return *p; /* <- the faulting load */
}

int main(void) {
    memtrace_layer_begin("fault", "custom", "");
    memtrace_buffer(0, MEMTRACE_ROLE_SCRATCH, scratch, sizeof scratch, 4, "scratch");
    scratch[0] = read_unmapped(UNMAPPED_ADDRESS);
    memtrace_layer_end();
    return 0;
}
