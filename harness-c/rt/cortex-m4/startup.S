/*
 * Cortex-M start-up code for memtrace guests (every Cortex-M core: nothing
 * here goes beyond ARMv6-M, and the core and FPU are the compiler's -mcpu /
 * -mfpu, so that the object's build attributes are those of the core built
 * for).
 *
 * The emulator starts execution at the ELF entry (Reset_Handler | 1) with every
 * register zero, so Reset_Handler must set SP itself before anything touches
 * the stack.  The vector table is present so the same image also makes sense
 * to tools that expect one, but the tracer does not use it.
 *
 * FPU: on silicon, CP10/CP11 must be enabled in CPACR (0xE000ED88) before the
 * first VFP instruction.  Unicorn 2.1 (CPU model Cortex-M4, Mode::THUMB)
 * executes VFP instructions without that, and it does not map the System
 * Control Space, so a write to CPACR faults there.  The enable sequence is
 * therefore only assembled with -DMEMTRACE_ENABLE_CPACR (for real hardware or
 * an emulator that models the SCS).
 */
    .syntax unified
    .thumb

    .section .isr_vector, "a", %progbits
    .align 2
    .global memtrace_vectors
    .type memtrace_vectors, %object
memtrace_vectors:
    .word __stack_top           /* initial MSP */
    .word Reset_Handler
    .word memtrace_default_handler  /* NMI */
    .word memtrace_default_handler  /* HardFault */
    .word memtrace_default_handler  /* MemManage */
    .word memtrace_default_handler  /* BusFault */
    .word memtrace_default_handler  /* UsageFault */
    .word 0, 0, 0, 0
    .word memtrace_default_handler  /* SVCall */
    .word memtrace_default_handler  /* DebugMonitor */
    .word 0
    .word memtrace_default_handler  /* PendSV */
    .word memtrace_default_handler  /* SysTick */
    .size memtrace_vectors, . - memtrace_vectors

    .section .text.Reset_Handler, "ax", %progbits
    .align 2
    .global Reset_Handler
    .thumb_func
    .type Reset_Handler, %function
Reset_Handler:
    ldr r0, =__stack_top
    mov sp, r0
#ifdef MEMTRACE_ENABLE_CPACR
    ldr r0, =0xE000ED88
    ldr r1, [r0]
    orr r1, r1, #(0xF << 20)    /* CP10, CP11: full access */
    str r1, [r0]
    dsb
    isb
#endif
    bl memtrace_rt_start        /* copies .data, zeroes .bss, runs main, exits */
1:  b 1b
    .size Reset_Handler, . - Reset_Handler
    .ltorg

    .section .text.memtrace_default_handler, "ax", %progbits
    .align 2
    .weak memtrace_default_handler
    .thumb_func
    .type memtrace_default_handler, %function
memtrace_default_handler:
    movs r0, #0xFA              /* exit code 250: unexpected exception */
    bl memtrace_rt_exit
2:  b 2b
    .size memtrace_default_handler, . - memtrace_default_handler
