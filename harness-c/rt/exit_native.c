/*
 * Exit path of the x86-64 build that runs natively under Linux (for the
 * Valgrind comparison in `memtrace bench`). It still defines `memtrace_port`
 * so protocol writes land in ordinary memory, then leaves with exit_group(2)
 * instead of waiting for a tracer.
 */
#define MEMTRACE_IMPLEMENTATION
#include "memtrace.h"

#include "memtrace_rt.h"

void memtrace_rt_exit(int32_t code) {
    memtrace_push((uint32_t)code);
    memtrace_command(MEMTRACE_CMD_EXIT);
    for (;;) {
        __asm__ volatile("syscall" : : "a"(231), "D"((long)code) : "rcx", "r11", "memory");
    }
}
