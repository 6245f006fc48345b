/*
 * Target-independent part of the start-up code: runs on the final stack,
 * prepares .data/.bss, runs constructors, calls main() and exits with its
 * return value.
 */
#include <stdint.h>

#include "memtrace_rt.h"

/* Linker-script symbols (see rt/<target>/memtrace.ld). */
extern uint32_t __data_load[], __data_start[], __data_end[];
extern uint32_t __bss_start[], __bss_end[];
typedef void (*memtrace_ctor)(void);
extern memtrace_ctor __init_array_start[], __init_array_end[];

int main(void);

void memtrace_rt_start(void) {
    /* .data: the emulator loads segments at their run (virtual) addresses, so
     * the linker scripts give .data LMA == VMA and this copy is skipped. A
     * build for real flash would set a different LMA and the loop would run. */
    if ((uintptr_t)__data_load != (uintptr_t)__data_start) {
        const volatile uint32_t *src = __data_load;
        for (volatile uint32_t *dst = __data_start; dst < __data_end;) {
            *dst++ = *src++;
        }
    }
    for (volatile uint32_t *p = __bss_start; p < __bss_end;) {
        *p++ = 0;
    }
    for (memtrace_ctor *c = __init_array_start; c < __init_array_end; ++c) {
        (*c)();
    }
    memtrace_rt_exit(main());
}
