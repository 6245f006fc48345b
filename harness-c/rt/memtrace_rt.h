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

/* abort() is weak: a program that can say why it aborts (the TFLM runner:
 * the operator, what TFLM logged) defines its own, which ends the program
 * with a reason and MEMTRACE_RT_EXIT_ABORT. */

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
