/*
 * no-protocol.elf — an ordinary program that does not include memtrace.h: it
 * has no `memtrace_port` symbol, so the tracer must refuse it with a clear
 * message. It is linked with rt/exit_halt.c and stops with BKPT (Cortex-M) or
 * HLT (x86-64) when main returns.
 */
#include <stdint.h>

static uint32_t table[64];

int main(void) {
    uint32_t sum = 0;
    for (uint32_t i = 0; i < 64; ++i) {
        table[i] = i * i;
    }
    for (uint32_t i = 0; i < 64; ++i) {
        sum += table[i];
    }
    return sum == 85344u ? 0 : 1;
}
