/*
 * Exit path for programs that speak the memtrace protocol: main's return
 * value (and abort()'s 134) goes to the tracer as MEMTRACE_CMD_EXIT. The
 * port itself is defined in rt/port.c (or by the program, when it defines
 * MEMTRACE_IMPLEMENTATION), so linking this never defines it twice.
 */
#include "memtrace.h"

#include "memtrace_rt.h"

void memtrace_rt_exit(int32_t code) {
    memtrace_exit(code); /* never returns: the tracer stops at the EXIT command */
    __builtin_unreachable();
}
