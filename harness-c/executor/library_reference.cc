// library_reference.cc — the kernel library of executor.elf: the TFLM
// reference kernels of kernels.cc themselves. They need no scratch memory
// (so query mode writes 0 for every operator) and nothing derived before the
// window.
#include "executor.h"

namespace exec {

int32_t library_scratch_bytes(const Op &op) {
    (void)op;
    return 0;
}

int library_prepare(Op &op) {
    (void)op;
    return kOk;
}

int library_run(const Op &op) { return reference_run(op); }

}  // namespace exec
