// executor.h — internal interface of the memtrace executor: the shared
// program walker (program.cc) and the kernel library it runs each operator
// with. executor.elf links the TFLM reference kernels (kernels.cc) through
// library_reference.cc; executor-cmsis.elf links kernels_cmsis.cc instead,
// which runs the int8 operators through CMSIS-NN and the rest through
// kernels.cc.
#ifndef MEMTRACE_EXECUTOR_H
#define MEMTRACE_EXECUTOR_H

#include <stdint.h>

namespace exec {

// Exit codes of the executor (docs/protocol.md section 9).
enum : int {
    kOk = 0,
    kNoProgram = 3,     // no or invalid program at memtrace_arena
    kUnsupported = 4,   // an operator or element type the executor has no kernel for
    kNoScratch = 6,     // an operator needs scratch memory the program does not give it
    kLibraryError = 7,  // the kernel library returned an error status
};

// One tensor record of the program, decoded.
struct Tensor {
    int32_t dtype, bytes, ndims;
    int32_t dims[4];
    int32_t zero_point;
    int32_t location;  // enum prg_location: arena, constant in the program, storage
    void *data;
    const char *name;
};

// One operator record, decoded. `w` points at the record's words in the
// program.
struct Op {
    const int32_t *w;
    int32_t kind, dtype;
    Tensor in, in2, out, weights, bias, scratch;
    bool has_in2, has_weights, has_bias, has_scratch;
    // All activation inputs (in, in2, then the rest of OPW_INPUTS's list).
    int32_t n_inputs;
    // Passed to the kernel as its scratch buffer: the scratch tensor's data
    // when the library needs scratch memory for this operator, else null (as
    // TFLM passes null when the buffer size is 0).
    void *scratch_buf;
    int32_t scratch_bytes;  // what the library asked for (0: none)
    // Per-channel quantisation arrays that the library itself derives before
    // the window (library_prepare), for operators whose program record has
    // none; null otherwise.
    int32_t *prepared_multiplier;
    int32_t *prepared_shift;
};

uint32_t elem_size(int32_t dtype);

// Activation input `k` (0 <= k < op.n_inputs) of the operator.
Tensor input_tensor(const Op &op, int32_t k);

int32_t flat(const Tensor &t);

// The offset `which` (OPW_CHANNEL_MULTIPLIERS or OPW_CHANNEL_SHIFTS) resolved
// in the program, or null when the record has no such array.
const int32_t *channel_array(const Op &op, int which);

// Memory for data the library derives once per operator, outside the layer
// window (TFLM's persistent buffers): it comes from the room between the end
// of the activation arena and memtrace_arena_end, is 16-byte aligned, and is
// reused by the next operator. Null when it does not fit.
void *persistent_alloc(uint32_t bytes);

// ---- kernels.cc: the TFLM reference kernels --------------------------------
// Runs the operator's TFLM reference kernel; kOk or kUnsupported.
int reference_run(const Op &op);

// Bytes of arena scratch the TFLM reference kernel requests for the operator
// in its Prepare (RequestScratchBufferInArena): the int8 TRANSPOSE_CONV's
// accumulator, one element per output element; 0 for every other operator.
int32_t reference_scratch_bytes(const Op &op);
// ---- kernels_spill.cc: TinySeg's storage operators ------------------------
// Whether `kind` is one of PK_SPILL, PK_FETCH, PK_FETCH_CONCAT, PK_FETCH_CONV2D.
bool is_storage_op(int32_t kind);

// Runs a storage operator (the same in every library); kOk or kUnsupported.
int storage_run(const Op &op);

// ---- the kernel library of this binary --------------------------------------
// Bytes of scratch memory the library needs for the operator (0: none), from
// the library's own *_get_buffer_size functions.
int32_t library_scratch_bytes(const Op &op);

// Called before the operator's window opens, so nothing it writes is traced;
// kOk, or an exit code.
int library_prepare(Op &op);

// The kernel call: the only code that runs inside the operator's window.
int library_run(const Op &op);

}  // namespace exec

#endif  // MEMTRACE_EXECUTOR_H
