/* cmsis-nn/core-fill/m-profile/cmsis_gcc_m.h — written for memtrace; not part
 * of CMSIS-Core.
 *
 * CMSIS-Core 6's cmsis_gcc.h ends by including the Cortex-M part of the GCC
 * intrinsics, m-profile/cmsis_gcc_m.h: core-register access (__get_CONTROL,
 * __enable_irq, ...), none of which CMSIS-NN calls. TFLM's trimmed tree
 * (third_party/cmsis/CMSIS/Core/Include) leaves that file out, so CMSIS-NN
 * releases that include cmsis_compiler.h (v4.x) could not compile against it.
 * The Makefile puts this directory after CMSIS_CORE_DIR with -idirafter: a
 * complete CMSIS-Core finds its own file first and this one is never read.
 * The SIMD intrinsics CMSIS-NN does use (__SMLAD, __SXTB16, __SSAT, ...) are
 * in cmsis_gcc.h itself. */
#ifndef MEMTRACE_CMSIS_GCC_M_FILL_H
#define MEMTRACE_CMSIS_GCC_M_FILL_H
#endif
