/*
 * Exit path for programs that do not use the memtrace protocol (no
 * memtrace_port symbol at all): stop the CPU. On Cortex-M, BKPT reaches
 * Unicorn as interrupt 7 with the PC still on the instruction; on RISC-V,
 * EBREAK is trap cause 3; on x86-64, HLT ends emu_start. Each is followed by
 * an endless loop in case the emulator resumes.
 */
#include "memtrace_rt.h"

void memtrace_rt_exit(int32_t code) {
    register int32_t r = code; /* left in a register for a debugger */
    for (;;) {
#if defined(__arm__)
        __asm__ volatile("bkpt #0" : : "r"(r));
#elif defined(__x86_64__)
        __asm__ volatile("hlt" : : "D"(r));
#elif defined(__riscv)
        __asm__ volatile("ebreak" : : "r"(r));
#else
#error "unsupported target"
#endif
    }
}
