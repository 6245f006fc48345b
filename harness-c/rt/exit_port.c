/*
 * Exit path for programs that speak the memtrace protocol. This is also the
 * one translation unit that defines `memtrace_port` (in section .memtrace,
 * which the linker scripts put alone on its own 4 KiB page).
 */
#define MEMTRACE_IMPLEMENTATION
#include "memtrace.h"

#include "memtrace_rt.h"

void memtrace_rt_exit(int32_t code) {
    memtrace_exit(code); /* never returns: the tracer stops at the EXIT command */
    __builtin_unreachable();
}
