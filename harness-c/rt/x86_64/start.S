/*
 * x86-64 start-up code for memtrace guests (freestanding, static, non-PIE).
 *
 * The emulator starts at the ELF entry `_start` in 64-bit mode at CPL 0 with
 * RSP = 0.  Unicorn 2.1 already sets CR4.OSFXSR and clears CR0.EM, so SSE/SSE2
 * instructions execute without any set-up here.
 */
    .section .text._start, "ax", @progbits
    .globl _start
    .type _start, @function
_start:
    movabs $__stack_top, %rsp
    andq $-16, %rsp             /* SysV: RSP is 16-byte aligned before a call */
    xorl %ebp, %ebp             /* terminate frame-pointer chains */
    call memtrace_rt_start      /* copies .data, zeroes .bss, runs main, exits */
1:  hlt
    jmp 1b
    .size _start, . - _start

    .section .note.GNU-stack, "", @progbits
