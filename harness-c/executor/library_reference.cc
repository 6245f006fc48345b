// library_reference.cc — the kernel library of executor.elf: the TFLM
// reference kernels of kernels.cc themselves. Only the int8 TRANSPOSE_CONV
// needs scratch memory (its accumulator, sized as TFLM's Prepare requests
// it; query mode writes 0 for every other operator), and nothing is derived
// before the window.
#include "executor.h"

namespace exec {

int32_t library_scratch_bytes(const Op &op) { return reference_scratch_bytes(op); }

int library_prepare(Op &op) {
    (void)op;
    return kOk;
}

int library_run(const Op &op) { return reference_run(op); }

}  // namespace exec
