/*
 * 32-bit RISC-V start-up code for memtrace guests.
 *
 * The emulator starts execution at the ELF entry (_start) with every register
 * zero. _start sets the global pointer (the linker relaxes small-data
 * accesses against it, so it must hold __global_pointer$ before any C code
 * runs), the stack pointer (16-byte aligned, as the ILP32 calling convention
 * wants), and the thread pointer (the TLS block of the C library's errno),
 * then calls the target-independent start-up code.
 */
    .section .text._start, "ax", @progbits
    .globl _start
    .type _start, @function
_start:
    .option push
    .option norelax             /* gp is not set yet: no gp-relative la */
    la gp, __global_pointer$
    .option pop
    la sp, __stack_top
    andi sp, sp, -16
    la tp, __tls_base
    li ra, 0                    /* terminates the unwinder's walk */
    call memtrace_rt_start      /* copies .data, zeroes .bss, runs main, exits */
1:  j 1b
    .size _start, . - _start
