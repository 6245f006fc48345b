/*
 * contract.elf — one layer per kernel memory-contract rule, each broken on
 * purpose at one marked statement ("CONTRACT:"), plus one clean layer, for
 * the tracer's contract checker. One ELF, layers in this order (op `custom`,
 * empty params; the README lists buffer, offset, size and source line):
 *
 *   clean              keeps every rule
 *   global-write       (a) stores to `contract_stray`, a global that is none
 *                          of the declared buffers (and not the stack)
 *   output-read-first  (b) loads output byte 8 before the layer wrote it
 *   input-write        (c) stores to input byte 4
 *   weights-write      (d) stores to weights byte 2
 *   scratch-unused     (e) declares 256 scratch bytes, touches only the
 *                          first 64 (high-water mark 64 < 256)
 *
 * Every layer declares the same buffers, each 16-byte aligned (int8, element
 * size 1): id 0 `input` (64 B), 1 `weights` (16 B), 2 `output` (64 B), and
 * 3 `scratch` (64 B, or 256 B in scratch-unused). Apart from its one broken
 * rule, each kernel does what `clean` does: it fills the scratch buffer from
 * input and weights, then writes every output byte once from input, weights
 * and scratch. Each kernel is a non-inlined function of its own, and the
 * offending access is a volatile access, so it is exactly one load or store
 * at the marked line. Exit code 0.
 */
#include <stdint.h>

#include "memtrace.h"

#define IN_BYTES 64
#define W_BYTES 16
#define OUT_BYTES 64
#define SCRATCH_USED 64
#define SCRATCH_DECLARED_BIG 256

static int8_t input[IN_BYTES] __attribute__((aligned(16)));
static int8_t weights[W_BYTES] __attribute__((aligned(16)));
static int8_t output[OUT_BYTES] __attribute__((aligned(16)));
static int8_t scratch[SCRATCH_DECLARED_BIG] __attribute__((aligned(16)));

/* Rule (a): a global that no layer declares. */
volatile uint32_t contract_stray;

#define KERNEL __attribute__((noinline))

/* The clean computation: scratch[0..SCRATCH_USED) from input and weights,
 * then every output byte once. Inlined into each kernel. */
static inline void compute(void) {
    for (int i = 0; i < SCRATCH_USED; ++i) {
        scratch[i] = (int8_t)(input[i % IN_BYTES] * weights[i % W_BYTES]);
    }
    for (int i = 0; i < OUT_BYTES; ++i) {
        output[i] = (int8_t)(input[i] + weights[i % W_BYTES] + scratch[i % SCRATCH_USED]);
    }
}

KERNEL void kernel_clean(void) { compute(); }

KERNEL void kernel_global_write(void) {
    compute();
    contract_stray = 0x5354u; /* CONTRACT: (a) 4-byte store to an undeclared global */
}

KERNEL void kernel_output_read_first(void) {
    const int8_t early = ((volatile int8_t *)output)[8]; /* CONTRACT: (b) output byte 8 read before written */
    compute();
    output[8] = (int8_t)(output[8] + early);
}

KERNEL void kernel_input_write(void) {
    compute();
    ((volatile int8_t *)input)[4] = 0x11; /* CONTRACT: (c) 1-byte store to input byte 4 */
}

KERNEL void kernel_weights_write(void) {
    compute();
    ((volatile int8_t *)weights)[2] = 0x22; /* CONTRACT: (d) 1-byte store to weights byte 2 */
}

/* CONTRACT: (e) the same computation, but the layer declares
 * SCRATCH_DECLARED_BIG scratch bytes; bytes 64..255 are never touched. */
KERNEL void kernel_scratch_unused(void) { compute(); }

static void layer(const char *name, uint32_t scratch_bytes, void (*kernel)(void)) {
    memtrace_layer_begin(name, "custom", "");
    memtrace_buffer(0, MEMTRACE_ROLE_INPUT, input, sizeof input, 1, "input");
    memtrace_buffer(1, MEMTRACE_ROLE_WEIGHTS, weights, sizeof weights, 1, "weights");
    memtrace_buffer(2, MEMTRACE_ROLE_OUTPUT, output, sizeof output, 1, "output");
    memtrace_buffer(3, MEMTRACE_ROLE_SCRATCH, scratch, scratch_bytes, 1, "scratch");
    kernel();
    memtrace_layer_end();
}

int main(void) {
    for (int i = 0; i < IN_BYTES; ++i) {
        input[i] = (int8_t)(i * 7 - 100);
    }
    for (int i = 0; i < W_BYTES; ++i) {
        weights[i] = (int8_t)(3 - i);
    }
    layer("clean", SCRATCH_USED, kernel_clean);
    layer("global-write", SCRATCH_USED, kernel_global_write);
    layer("output-read-first", SCRATCH_USED, kernel_output_read_first);
    layer("input-write", SCRATCH_USED, kernel_input_write);
    layer("weights-write", SCRATCH_USED, kernel_weights_write);
    layer("scratch-unused", SCRATCH_DECLARED_BIG, kernel_scratch_unused);
    return 0;
}
