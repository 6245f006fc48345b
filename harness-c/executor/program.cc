// program.cc — the program walker of the memtrace executor, shared by
// executor.elf and executor-cmsis.elf: it reads the model program the host
// writes at `memtrace_arena` (include/memtrace_program.h, docs/protocol.md
// section 13) and runs every operator with the kernel library linked into the
// binary (executor.h).
//
// Every operator is one layer window named after the model's operator, with
// its activation input(s), output, weights, bias and (when the program gives
// one) scratch buffer declared; the activations live in one arena at the
// offsets of a memtrace plan. Before the operators, a window `load_input`
// copies each graph input from the program into the arena (declaring the
// tensor as that window's output), so a shadow map of the arena sees every
// activation byte being written.
//
// TinySeg's operators (PK_SPILL .. PK_FETCH_CONV2D) move tensors between
// the arena and the storage region `memtrace_storage`; they run the same in
// every kernel library (kernels_spill.cc), and their windows declare the
// storage tensor like any other buffer.
//
// With PRG_FLAG_QUERY_SCRATCH set in the header, nothing runs: the walker
// writes the scratch bytes the library needs for each operator into that
// operator's OPW_SCRATCH_BYTES word and exits 0.
//
// Exit codes (executor.h): 0 ok, 3 no/invalid program, 4 unsupported
// operator or type, 6 missing or too small scratch tensor, 7 library error.
#include <string.h>

#include "executor.h"
#include "memtrace.h"
#include "memtrace_program.h"
#include "memtrace_rt.h"

namespace exec {
namespace {

// Buffer ids of an operator's window.
enum : uint32_t {
    kIdInput = 0,
    kIdInput2 = 1,
    kIdOutput = 2,
    kIdWeights = 3,
    kIdBias = 4,
    kIdScratch = 5,
    kIdInput3 = 6,  // inputs 3.. of a concatenation: 6, 7, ...
};

// The program is written by the host; query mode writes into it.
unsigned char *g_prog;
unsigned char *g_arena;
unsigned char *g_storage;
int32_t g_n_tensors;
// Persistent memory: [g_persistent_base, memtrace_arena_end), bump-allocated
// from g_persistent_used, reset for every operator.
uintptr_t g_persistent_base;
uintptr_t g_persistent_used;

int32_t word(uint32_t byte_offset) {
    int32_t v;
    memcpy(&v, g_prog + byte_offset, 4);
    return v;
}

Tensor tensor(int32_t index) {
    const uint32_t base = static_cast<uint32_t>(word(PRG_TENSORS * 4)) +
                          static_cast<uint32_t>(index) * TEN_WORDS * 4;
    Tensor t;
    const int32_t *w = reinterpret_cast<const int32_t *>(g_prog + base);
    t.dtype = w[TEN_DTYPE];
    t.bytes = w[TEN_BYTES];
    t.ndims = w[TEN_NDIMS];
    for (int i = 0; i < 4; ++i) {
        t.dims[i] = w[TEN_DIMS + i];
    }
    t.zero_point = w[TEN_ZERO_POINT];
    t.location = w[TEN_LOCATION];
    const int32_t off = w[TEN_OFFSET];
    switch (t.location) {
        case TEN_LOC_ARENA: t.data = g_arena + off; break;
        case TEN_LOC_STORAGE: t.data = g_storage + off; break;
        default: t.data = g_prog + off; break;
    }
    t.name = reinterpret_cast<const char *>(g_prog + w[TEN_NAME]);
    return t;
}

int32_t *op_words(uint32_t index) {
    return reinterpret_cast<int32_t *>(g_prog + word(PRG_OPS * 4) + index * OPW_WORDS * 4);
}

// The op text of the window; null for a kind the executor does not know.
const char *kind_name(int32_t kind) {
    switch (kind) {
        case PK_CONV2D: return "conv2d";
        case PK_DEPTHWISE_CONV2D: return "depthwise_conv2d";
        case PK_MAX_POOL: return "max_pool";
        case PK_AVERAGE_POOL: return "average_pool";
        case PK_FULLY_CONNECTED: return "fully_connected";
        case PK_ADD: return "add";
        case PK_RELU: return "relu";
        case PK_SOFTMAX: return "softmax";
        case PK_RESHAPE: return "reshape";
        case PK_QUANTIZE: return "quantize";
        case PK_DEQUANTIZE: return "dequantize";
        case PK_TRANSPOSE_CONV: return "transpose_conv";
        case PK_CONCATENATION: return "concatenation";
        case PK_PAD: return "pad";
        case PK_SPILL: return "spill";
        case PK_FETCH: return "fetch";
        case PK_FETCH_CONCAT: return "fetch_concat";
        case PK_FETCH_CONV2D: return "fetch_conv2d";
        default: return nullptr;
    }
}

// The OPW_INPUTS list ([count, index...]) of an operator, or null. Offset 0
// (the header) is never a list: programs from before the word have 0 there.
const int32_t *input_list(const Op &op) {
    const int32_t off = op.w[OPW_INPUTS];
    return off <= 0 ? nullptr : reinterpret_cast<const int32_t *>(g_prog + off);
}

Op decode(const int32_t *w) {
    Op op = {};
    op.w = w;
    op.kind = w[OPW_KIND];
    op.dtype = w[OPW_DTYPE];
    op.in = tensor(w[OPW_INPUT]);
    op.out = tensor(w[OPW_OUTPUT]);
    op.has_in2 = w[OPW_INPUT2] >= 0;
    op.has_weights = w[OPW_WEIGHTS] >= 0;
    op.has_bias = w[OPW_BIAS] >= 0;
    if (op.has_in2) op.in2 = tensor(w[OPW_INPUT2]);
    if (op.has_weights) op.weights = tensor(w[OPW_WEIGHTS]);
    if (op.has_bias) op.bias = tensor(w[OPW_BIAS]);
    const int32_t *list = input_list(op);
    op.n_inputs = list ? list[0] : (op.has_in2 ? 2 : 1);
    return op;
}

// Whether the input list of an operator names only existing tensors and no
// more than the format allows.
bool inputs_valid(const Op &op) {
    const int32_t *list = input_list(op);
    if (!list) return true;
    if (list[0] < 3 || list[0] > static_cast<int32_t>(MEMTRACE_PROGRAM_MAX_INPUTS)) return false;
    for (int32_t k = 1; k <= list[0]; ++k) {
        if (list[k] < 0 || list[k] >= g_n_tensors) return false;
    }
    return true;
}

void declare(uint32_t id, uint32_t role, const Tensor &t) {
    memtrace_buffer(id, role, t.data, static_cast<uint32_t>(t.bytes), elem_size(t.dtype), t.name);
}

// Query mode: the scratch bytes of every operator into its OPW_SCRATCH_BYTES
// word. No window is opened and no kernel runs.
int query_scratch() {
    const uint32_t n_ops = static_cast<uint32_t>(word(PRG_N_OPS * 4));
    for (uint32_t i = 0; i < n_ops; ++i) {
        int32_t *w = op_words(i);
        const Op op = decode(w);
        w[OPW_SCRATCH_BYTES] =
            kind_name(op.kind) && !is_storage_op(op.kind) ? library_scratch_bytes(op) : 0;
    }
    return kOk;
}

int run_op(uint32_t index, bool scratch_words) {
    Op op = decode(op_words(index));
    const char *kind = kind_name(op.kind);
    if (!kind) {
        return kUnsupported;
    }
    if (!inputs_valid(op)) {
        return kNoProgram;
    }
    // The scratch tensor: only when the host says it filled the scratch words
    // (older programs have 0 there, which would name tensor 0). It must be an
    // arena tensor at least as large as the library needs; an operator that
    // needs scratch memory and has none stops the program before its window.
    const bool storage_op = is_storage_op(op.kind);
    op.scratch_bytes = storage_op ? 0 : library_scratch_bytes(op);
    const int32_t scratch_index = scratch_words ? op.w[OPW_SCRATCH] : -1;
    if (scratch_index >= g_n_tensors) {
        return kNoProgram;
    }
    op.has_scratch = scratch_index >= 0;
    if (op.has_scratch) {
        op.scratch = tensor(scratch_index);
        if (op.scratch.location != TEN_LOC_ARENA || op.scratch.bytes < op.scratch_bytes) {
            return kNoScratch;
        }
    } else if (op.scratch_bytes > 0) {
        return kNoScratch;
    }
    op.scratch_buf = op.scratch_bytes > 0 ? op.scratch.data : nullptr;

    g_persistent_used = g_persistent_base;
    const int prepared = storage_op ? kOk : library_prepare(op);
    if (prepared != kOk) {
        return prepared;
    }

    const char *name = reinterpret_cast<const char *>(g_prog + op.w[OPW_NAME]);
    const char *params = reinterpret_cast<const char *>(g_prog + op.w[OPW_PARAMS]);
    memtrace_layer_begin(name, kind, params);
    declare(kIdInput, MEMTRACE_ROLE_INPUT, op.in);
    // An add of a tensor with itself reads one buffer.
    if (op.has_in2 && op.in2.data != op.in.data) declare(kIdInput2, MEMTRACE_ROLE_INPUT, op.in2);
    for (int32_t k = 2; k < op.n_inputs; ++k) {
        const Tensor t = input_tensor(op, k);
        bool seen = false;  // a tensor concatenated twice is one buffer
        for (int32_t j = 0; j < k; ++j) seen = seen || input_tensor(op, j).data == t.data;
        if (!seen) declare(kIdInput3 + static_cast<uint32_t>(k - 2), MEMTRACE_ROLE_INPUT, t);
    }
    declare(kIdOutput, MEMTRACE_ROLE_OUTPUT, op.out);
    if (op.has_weights) declare(kIdWeights, MEMTRACE_ROLE_WEIGHTS, op.weights);
    if (op.has_bias) declare(kIdBias, MEMTRACE_ROLE_BIAS, op.bias);
    if (op.has_scratch) declare(kIdScratch, MEMTRACE_ROLE_SCRATCH, op.scratch);
    const int rc = storage_op ? storage_run(op) : library_run(op);
    memtrace_layer_end();
    return rc;
}

__attribute__((noinline)) void copy_input(void *dst, const void *src, int32_t bytes) {
    memcpy(dst, src, static_cast<size_t>(bytes));
}

}  // namespace

uint32_t elem_size(int32_t dtype) { return dtype == PDT_F32 || dtype == PDT_INT32 ? 4 : 1; }

int32_t flat(const Tensor &t) {
    int32_t n = 1;
    for (int i = 0; i < t.ndims; ++i) {
        n *= t.dims[i];
    }
    return n;
}

Tensor input_tensor(const Op &op, int32_t k) {
    if (k == 0) return op.in;
    if (k == 1 && !input_list(op)) return op.in2;
    return tensor(input_list(op)[1 + k]);
}

const int32_t *channel_array(const Op &op, int which) {
    const int32_t off = op.w[which];
    return off < 0 ? nullptr : reinterpret_cast<const int32_t *>(g_prog + off);
}

void *persistent_alloc(uint32_t bytes) {
    const uintptr_t start = (g_persistent_used + 15u) & ~static_cast<uintptr_t>(15u);
    const uintptr_t end = reinterpret_cast<uintptr_t>(memtrace_arena_end);
    if (start > end || bytes > end - start) {
        return nullptr;
    }
    g_persistent_used = start + bytes;
    return reinterpret_cast<void *>(start);
}

}  // namespace exec

int main() {
    using namespace exec;
    g_prog = memtrace_arena;
    if (static_cast<uint32_t>(word(PRG_MAGIC * 4)) != MEMTRACE_PROGRAM_MAGIC) {
        return kNoProgram;
    }
    const int32_t arena_offset = word(PRG_ARENA_OFFSET * 4);
    const int32_t arena_bytes = word(PRG_ARENA_BYTES * 4);
    if (arena_offset < 0 || arena_bytes < 0 ||
        memtrace_arena + arena_offset + arena_bytes > memtrace_arena_end) {
        return kNoProgram;
    }
    g_arena = memtrace_arena + arena_offset;
    const int32_t storage_bytes = word(PRG_STORAGE_BYTES * 4);
    if (storage_bytes < 0 || memtrace_storage + storage_bytes > memtrace_storage_end) {
        return kNoProgram;
    }
    g_storage = memtrace_storage;
    g_n_tensors = word(PRG_N_TENSORS * 4);
    g_persistent_base = reinterpret_cast<uintptr_t>(g_arena + arena_bytes);
    const uint32_t flags = static_cast<uint32_t>(word(PRG_FLAGS * 4));
    if (flags & PRG_FLAG_QUERY_SCRATCH) {
        return query_scratch();
    }
    const int32_t n_inputs = word(PRG_N_INPUTS * 4);
    const uint32_t inputs = static_cast<uint32_t>(word(PRG_INPUTS * 4));
    for (int32_t i = 0; i < n_inputs; ++i) {
        const uint32_t rec = inputs + static_cast<uint32_t>(i) * 12;
        const Tensor t = tensor(word(rec));
        memtrace_layer_begin("load_input", "load_input", "");
        declare(kIdOutput, MEMTRACE_ROLE_OUTPUT, t);
        copy_input(t.data, g_prog + word(rec + 4), word(rec + 8));
        memtrace_layer_end();
    }
    const bool scratch_words = (flags & PRG_FLAG_SCRATCH_WORDS) != 0;
    const uint32_t n_ops = static_cast<uint32_t>(word(PRG_N_OPS * 4));
    for (uint32_t i = 0; i < n_ops; ++i) {
        const int rc = run_op(i, scratch_words);
        if (rc != kOk) {
            return rc;
        }
    }
    return kOk;
}
