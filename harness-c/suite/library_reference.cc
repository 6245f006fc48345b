// library_reference.cc — the kernel library of suite.elf and suite-modified.elf:
// the TFLM reference kernels of kernels.cc themselves. Their only scratch
// memory is int8 transpose_conv's int32 accumulator, and there is nothing to
// check them against.
#include "suite.h"

namespace memtrace {

bool library_has_kernel(const Layer &layer) {
    (void)layer;
    return false;
}

uint32_t library_scratch_bytes(const Layer &layer, int which) {
    return which == 0 ? reference_scratch_bytes(layer) : 0;
}

int run_kernel(const Layer &layer, const Buffers &b, const Quant &q) {
    run_reference_kernel(layer, b, q);
    return kExitOk;
}

}  // namespace memtrace
