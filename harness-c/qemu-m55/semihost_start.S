/*
 * Reset for newlib programs linked with --specs=rdimon.specs on QEMU's
 * mps3-an547 (CMSIS-NN's unit tests, qemu-m55/README.md): a vector table at
 * address 0 (QEMU's M-profile reset reads SP and PC from it), CP10/CP11
 * enabled in CPACR (QEMU faults the first FP or MVE instruction otherwise),
 * then what newlib's rdimon _start does, but for this memory map: the stack
 * at the top of the 4 MiB SRAM, .bss zeroed, semihosting file handles,
 * constructors, main, exit. (_start itself asks QEMU for the heap with
 * SYS_HEAPINFO, and QEMU 7.2 answers with the 512 KiB ITCM at address 0, far
 * from the .bss and `end` in the SRAM where newlib's sbrk starts: every
 * malloc then fails.) Every other exception exits with status 250.
 */
    .syntax unified
    .thumb
    .section .isr_vector, "a", %progbits
    .align 2
    .global semihost_vectors
semihost_vectors:
    .word __stack_top
    .word semihost_reset
    .rept 14
    .word semihost_fault
    .endr

    .text
    .align 2
    .thumb_func
    .global semihost_reset
semihost_reset:
    ldr r0, =0xE000ED88
    ldr r1, [r0]
    orr r1, r1, #(0xF << 20)
    str r1, [r0]
    dsb
    isb
    ldr r0, =__stack_top
    mov sp, r0
    ldr r0, =__bss_start__
    ldr r1, =__bss_end__
    movs r2, #0
2:  cmp r0, r1
    bhs 3f
    str r2, [r0], #4
    b 2b
3:  bl initialise_monitor_handles
    bl __libc_init_array
    movs r0, #0
    movs r1, #0
    bl main
    bl exit
4:  b 4b

    .thumb_func
semihost_fault:
    movs r0, #250
    bl exit
1:  b 1b
    .ltorg
