/*
 * memtrace_rt.h — the small run-time shared by every memtrace guest
 * (start-up code, exit path, arena bounds).  Not part of the tracer ABI; a
 * binary instrumented by hand only needs include/memtrace.h.
 */
#ifndef MEMTRACE_RT_H
#define MEMTRACE_RT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Called by Reset_Handler / _start once the stack pointer is set. */
void memtrace_rt_start(void) __attribute__((noreturn));

/* Ends the program. rt/exit_port.c reports `code` to the tracer with
 * MEMTRACE_CMD_EXIT; rt/exit_halt.c (programs without the protocol) stops the
 * CPU with BKPT / HLT instead. */
void memtrace_rt_exit(int32_t code) __attribute__((noreturn));

/* A program that can say why it aborts defines this: abort() calls it first,
 * with the address abort() was called from, and it ends the program with a
 * reason (the TFLM runner: the operator, what TFLM logged). Weak: without it
 * abort() exits with MEMTRACE_RT_EXIT_ABORT and no reason. */
void memtrace_rt_abort_hook(const void *caller) __attribute__((weak, noreturn));

/* Exit codes used by the run-time itself. */
#define MEMTRACE_RT_EXIT_ABORT 134     /* abort(), failed assert, operator new */
#define MEMTRACE_RT_EXIT_EXCEPTION 250 /* a CPU exception reached a vector */

/* Tensor arena: a NOLOAD region inside a PT_LOAD segment (see the linker
 * scripts). It is not zeroed by the start-up code; memory the host never wrote
 * reads as zero in the emulator. */
extern unsigned char memtrace_arena[];
extern unsigned char memtrace_arena_end[];

/* Storage region (TinySeg's spilled tensors): a NOLOAD segment of its own,
 * away from the arena, standing for the flash or remote storage a spill goes
 * to. */
extern unsigned char memtrace_storage[];
extern unsigned char memtrace_storage_end[];

#ifdef __cplusplus
}
#endif

#endif /* MEMTRACE_RT_H */
