/* cmsis-nn/host_compat.h — written for memtrace; forced into every x86-64
 * compile of a CMSIS-NN release whose arm_nn_math_types.h includes CMSIS-Core
 * (v4.x).
 *
 * Those releases build on a host through their own switch __GNUC_PYTHON__
 * (which the Makefile defines): it skips cmsis_compiler.h and arm_acle.h and
 * defines __STATIC_FORCEINLINE / __STATIC_INLINE / __ALIGNED itself. Two
 * CMSIS-Core names it does not define are still used on the pure C paths:
 * __RESTRICT (declarations in arm_nnsupportfunctions.h) and __CLZ (softmax).
 * They are given here with CMSIS-Core's meaning. <stdint.h> comes first, as
 * some v4.x headers use uint8_t before including it. */
#ifndef MEMTRACE_CMSIS_NN_HOST_COMPAT_H
#define MEMTRACE_CMSIS_NN_HOST_COMPAT_H
#include <stdint.h>

#ifndef __RESTRICT
#define __RESTRICT __restrict
#endif

#ifndef __CLZ
/* Count leading zeros; 32 for 0, as CMSIS-Core's __CLZ. */
static inline uint8_t memtrace_cmsis_clz(uint32_t value) {
    return value == 0u ? 32u : (uint8_t)__builtin_clz(value);
}
#define __CLZ memtrace_cmsis_clz
#endif
#endif
