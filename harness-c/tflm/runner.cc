// runner.cc — the TFLM runner guest: TensorFlow Lite Micro's own
// MicroInterpreter, unmodified, on a .tflite the host writes into
// memtrace_model, with one memtrace layer per operator of subgraph 0.
// include/memtrace_tflm.h is the contract with the host (mailbox words,
// regions, layers, buffers, tensor table, exit codes); docs/protocol.md,
// "The TFLM runner", explains the choices made here.
//
// The arena is laid out byte for byte as `MicroInterpreter(model, resolver,
// arena, bytes)` lays it out: main() performs the same steps as
// MicroAllocator::Create(arena, bytes) (align the arena, a
// SingleArenaBufferAllocator over it, a GreedyMemoryPlanner in the persistent
// tail, then MicroAllocator::Create(allocator, planner)), only so that it
// keeps the SingleArenaBufferAllocator to read the head and tail sizes from.
// Nothing else the runner does allocates in the arena.
#include <string.h>

#include <new>

#include "memtrace.h"
#include "memtrace_rt.h"
#include "memtrace_tflm.h"
#include "tensorflow/lite/micro/arena_allocator/single_arena_buffer_allocator.h"
#include "tensorflow/lite/micro/memory_helpers.h"
#include "tensorflow/lite/micro/memory_planner/greedy_memory_planner.h"
#include "tensorflow/lite/micro/micro_allocator.h"
#include "tensorflow/lite/micro/micro_arena_constants.h"
#include "tensorflow/lite/micro/micro_interpreter.h"
#include "tensorflow/lite/micro/micro_profiler_interface.h"
#include "tensorflow/lite/schema/schema_generated.h"
#include "tensorflow/lite/schema/schema_utils.h"
#include "tflm/runner.h"

// The mailbox: in .noinit so the start-up code leaves the host's words alone.
__attribute__((section(".noinit"), used, aligned(8)))
volatile uint32_t memtrace_tflm_job[MEMTRACE_TFLM_WORDS];

namespace mtflm {
namespace {

// Buffer ids within an operator's window (memtrace_tflm.h).
constexpr uint32_t kIdOutputs = 32;
constexpr uint32_t kIdScratch = 96;
constexpr int kMaxInputs = 32;   // ids 0..31
constexpr int kMaxOutputs = 64;  // ids 32..95
constexpr int kMaxScratchPerOp = 32;
// An operator's persistent buffers (ops.cc): ids 128..159.
constexpr uint32_t kIdPersistent = 128;
constexpr int kMaxPersistentPerOp = 32;
constexpr int kMaxDeclared = kMaxInputs + kMaxOutputs + kMaxScratchPerOp + kMaxPersistentPerOp;
// A red-zoned run's zones: buffer k of the window (in declaration order) has
// ids kIdRedZones + 2k (before it) and kIdRedZones + 2k + 1 (after it).
constexpr uint32_t kIdRedZones = 256;
constexpr int kMaxPending = 3 * kMaxDeclared;

const tflite::Model *g_model;
const tflite::SubGraph *g_subgraph0;
tflite::MicroInterpreter *g_interpreter;
uint32_t g_flags;
uint32_t g_model_bytes;
uint32_t g_arena_bytes;
uint32_t g_red_zone;  // TFLM_RED_ZONE_BYTES: 0, or a red-zoned run
uintptr_t g_head_lo;  // the arena's head (planned buffers), after AllocateTensors()
uintptr_t g_head_hi;
uint32_t g_dump_op;   // TFLM_DUMP_OP: 0, or 1 + the operator to dump
uint32_t g_dump_bytes;

// TFLM_FLAG_DIGESTS: per operator of subgraph 0, its outputs' FNV-1a and
// byte count, written after the tensor table at the end.
constexpr uint32_t kMaxDigests = 4096;
struct OpDigest {
    uint32_t fnv;
    uint32_t bytes;
};
OpDigest g_digests[kMaxDigests];

// The arena's allocator, for the op resolver's tail gauge.
tflite::SingleArenaBufferAllocator *g_memory;

// Scratch buffer addresses, by TFLM's scratch index, resolved at the first
// operator of Invoke() (GetScratchBuffer is only valid while invoking).
void *g_scratch_ptr[kMaxScratch];
bool g_scratch_resolved;

// Strings of the open window: the host reads them when the command arrives,
// but they stay valid until the next window to be safe.
char g_layer_name[MEMTRACE_MAX_STRING];
char g_layer_op[MEMTRACE_MAX_STRING];
char g_layer_params[64];
char g_buffer_names[kMaxDeclared][MEMTRACE_MAX_STRING];
char g_reason[kMaxReason];

void set_word(int w, uint32_t v) { memtrace_tflm_job[w] = v; }

[[noreturn]] void fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void fail(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    format(g_reason, sizeof(g_reason), fmt, ap);
    va_end(ap);
    memtrace_exit_reason(code, g_reason);
    __builtin_unreachable();
}

// TFLM's own failure: its last log message is the reason.
[[noreturn]] void fail_tflm(int code, const char *what) {
    const char *log = last_log();
    if (log[0] != '\0') {
        fail(code, "%s: %s", what, log);
    }
    fail(code, "%s (TFLM logged nothing)", what);
}

bool in_region(const void *p, size_t bytes, const unsigned char *base, size_t size) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    const uintptr_t b = reinterpret_cast<uintptr_t>(base);
    return a >= b && a - b <= size && bytes <= size - (a - b);
}

bool in_model(const void *p, size_t bytes) { return in_region(p, bytes, memtrace_model, g_model_bytes); }
bool in_arena(const void *p, size_t bytes) { return in_region(p, bytes, memtrace_arena, g_arena_bytes); }

// Subgraph 0's TfLiteEvalTensor `index`. MicroInterpreter::GetTensor only
// answers with preserve_all_tensors (the linear planner), so the runner asks
// the way kernels do: context->GetEvalTensor, on the context TFLM handed to
// Prepare. It reads the current subgraph's tensors, which is subgraph 0
// outside Invoke() and at every depth-1 profiler event.
const TfLiteEvalTensor *eval_tensor(int index) {
    TfLiteContext *context = prepare_context();
    if (context == nullptr || context->GetEvalTensor == nullptr || index < 0) {
        return nullptr;
    }
    return context->GetEvalTensor(context, index);
}

size_t eval_bytes(const TfLiteEvalTensor *t) {
    size_t bytes = 0;
    if (t == nullptr || tflite::TfLiteEvalTensorByteLength(t, &bytes) != kTfLiteOk) {
        return 0;
    }
    return bytes;
}

uint32_t elem_size(const TfLiteEvalTensor *t) {
    size_t size = 0;
    if (tflite::TfLiteTypeSizeOf(t->type, &size) != kTfLiteOk || size == 0) {
        return 1;
    }
    return static_cast<uint32_t>(size);
}

bool is_variable(int tensor) {
    const auto *tensors = g_subgraph0->tensors();
    return tensors != nullptr && tensor >= 0 && static_cast<uint32_t>(tensor) < tensors->size() &&
           tensors->Get(tensor)->is_variable();
}

const char *tensor_name(int tensor) {
    const auto *tensors = g_subgraph0->tensors();
    if (tensors == nullptr || tensor < 0 || static_cast<uint32_t>(tensor) >= tensors->size()) {
        return nullptr;
    }
    const auto *name = tensors->Get(tensor)->name();
    return name != nullptr && name->size() > 0 ? name->c_str() : nullptr;
}

// Copies a tensor's name (or "tensor<N>") into `out`, cut to the protocol's
// string limit.
void name_of(int tensor, char *out, size_t cap) {
    const char *name = tensor_name(tensor);
    if (name != nullptr) {
        format(out, cap, "%s", name);
    } else {
        format(out, cap, "tensor%d", tensor);
    }
}

// The buffers of the next window, collected before LAYER_BEGIN so that the
// runner itself writes nothing but the port while a window is open (the
// tracer reports any other write as a stray write, docs/protocol.md §14).
struct Pending {
    uint32_t id;
    uint32_t role;
    int tensor;  // -1 for scratch buffers
    const void *base;
    uint32_t bytes;
    uint32_t elem;
};
Pending g_pending[kMaxPending];
int g_n_pending;

// Whether one buffer of the pair is the input and the other the output: the
// one overlap the tracer accepts, which a DMO plan creates on purpose.
bool input_output_pair(uint32_t a, uint32_t b) {
    return (a == MEMTRACE_ROLE_INPUT && b == MEMTRACE_ROLE_OUTPUT) ||
           (a == MEMTRACE_ROLE_OUTPUT && b == MEMTRACE_ROLE_INPUT);
}

// "Each tensor once", and no two overlapping buffers other than an input
// and the output (the tracer rejects them; two constant tensors may share
// one model buffer).
bool overlaps_pending(int tensor, uint32_t role, const void *data, size_t bytes) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(data);
    for (int i = 0; i < g_n_pending; ++i) {
        const Pending &d = g_pending[i];
        const uintptr_t b = reinterpret_cast<uintptr_t>(d.base);
        if (tensor >= 0 && d.tensor == tensor) {
            return true;
        }
        if (a < b + d.bytes && b < a + bytes && !input_output_pair(role, d.role)) {
            return true;
        }
    }
    return false;
}

void declare(uint32_t id, uint32_t role, int tensor, const void *data, size_t bytes, uint32_t elem,
             const char *scratch_name) {
    if (data == nullptr || bytes == 0 || g_n_pending >= kMaxDeclared ||
        overlaps_pending(tensor, role, data, bytes)) {
        return;
    }
    char *name = g_buffer_names[g_n_pending];
    if (scratch_name != nullptr) {
        format(name, MEMTRACE_MAX_STRING, "%s", scratch_name);
    } else {
        name_of(tensor, name, MEMTRACE_MAX_STRING);
    }
    g_pending[g_n_pending++] = Pending{id, role, tensor, data, static_cast<uint32_t>(bytes), elem};
}

// A red-zoned run (red_zones.cc): the zones TFLM's planner left around each
// buffer of the window that it planned (in the head), declared with role
// RED_ZONE so that the tracer sees every load there; the zone after a buffer
// starts at its last byte, so it covers the alignment padding too.
void declare_red_zones() {
    const int named = g_n_pending;
    for (int i = 0; g_red_zone != 0 && i < named && g_n_pending + 2 <= kMaxPending; ++i) {
        const Pending d = g_pending[i];
        const uintptr_t base = reinterpret_cast<uintptr_t>(d.base);
        const uintptr_t padded = base + ((d.bytes + 15u) & ~uintptr_t{15});
        if (base < g_head_lo + g_red_zone || padded + g_red_zone > g_head_hi) {
            continue;  // not planned memory: a constant, state, storage
        }
        const uint32_t id = kIdRedZones + 2 * static_cast<uint32_t>(i);
        g_pending[g_n_pending++] =
            Pending{id, MEMTRACE_ROLE_RED_ZONE, -1, reinterpret_cast<const void *>(base - g_red_zone), g_red_zone, 1};
        g_pending[g_n_pending++] =
            Pending{id + 1, MEMTRACE_ROLE_RED_ZONE, -1, reinterpret_cast<const void *>(base + d.bytes),
                    static_cast<uint32_t>(padded + g_red_zone - base - d.bytes), 1};
    }
}

// LAYER_BEGIN and the collected BUFFER commands: only port writes from here.
void open_window(const char *name, const char *op, const char *params) {
    memtrace_layer_begin(name, op, params);
    for (int i = 0; i < g_n_pending; ++i) {
        const Pending &d = g_pending[i];
        const char *buffer_name = d.role == MEMTRACE_ROLE_RED_ZONE ? "red zone" : g_buffer_names[i];
        memtrace_buffer(d.id, d.role, d.base, d.bytes, d.elem, buffer_name);
    }
}

// Declares a node tensor (input k or output j) with the role the header
// gives it.
void declare_tensor(uint32_t id, bool is_input, int k, int tensor, tflite::BuiltinOperator code) {
    if (tensor < 0) {
        return;  // optional input left out
    }
    const TfLiteEvalTensor *t = eval_tensor(tensor);
    if (t == nullptr) {
        return;
    }
    const size_t bytes = eval_bytes(t);
    const void *data = t->data.data;
    uint32_t role;
    if (is_variable(tensor)) {
        role = MEMTRACE_ROLE_SCRATCH;  // state that outlives the operator
    } else if (is_input && in_model(data, bytes)) {
        if (g_flags & TFLM_FLAG_NO_WEIGHTS) {
            return;
        }
        const bool bias = (k == 2 && (code == tflite::BuiltinOperator_CONV_2D ||
                                      code == tflite::BuiltinOperator_DEPTHWISE_CONV_2D ||
                                      code == tflite::BuiltinOperator_FULLY_CONNECTED)) ||
                          (k == 3 && code == tflite::BuiltinOperator_TRANSPOSE_CONV);
        role = bias ? MEMTRACE_ROLE_BIAS : MEMTRACE_ROLE_WEIGHTS;
    } else if (is_input) {
        role = MEMTRACE_ROLE_INPUT;
    } else {
        role = k == 0 ? MEMTRACE_ROLE_OUTPUT : MEMTRACE_ROLE_SCRATCH;
    }
    declare(id, role, tensor, data, bytes, elem_size(t), nullptr);
}

void resolve_scratch() {
    int n = 0;
    const ScratchRequest *req = scratch_requests(&n);
    TfLiteContext *context = prepare_context();
    for (int j = 0; j < n; ++j) {
        g_scratch_ptr[j] = context != nullptr ? context->GetScratchBuffer(context, req[j].index) : nullptr;
    }
    g_scratch_resolved = true;
}

// A storage operator's slot in memtrace_storage, as a buffer of its window:
// the output of a SPILL, an input of a fetching operator (after its TFLite
// inputs). Named by its offset, so that a spill and its fetch declare the
// same tensor to the storage region's shadow map.
void declare_storage(const tflite::Operator *op,
                     const flatbuffers::Vector<flatbuffers::Offset<tflite::OperatorCode>> *codes,
                     int n_inputs, int n_outputs) {
    if (codes == nullptr || op->opcode_index() >= codes->size() || op->custom_options() == nullptr) {
        return;
    }
    const auto *custom = codes->Get(op->opcode_index())->custom_code();
    StorageSlot s;
    if (custom == nullptr ||
        !storage_slot(custom->c_str(), op->custom_options()->data(), op->custom_options()->size(), &s)) {
        return;
    }
    char name[32];
    format(name, sizeof(name), "storage@%u", static_cast<unsigned>(s.offset));
    if (s.written) {
        declare(kIdOutputs + static_cast<uint32_t>(n_outputs), MEMTRACE_ROLE_OUTPUT, -1, s.address, s.bytes,
                s.elem, name);
    } else if (n_inputs < kMaxInputs) {
        declare(static_cast<uint32_t>(n_inputs), MEMTRACE_ROLE_INPUT, -1, s.address, s.bytes, s.elem, name);
    }
}

// The memory operator `index` of subgraph 0 allocated for itself in the
// arena's tail (`persistent<j>`): its own, so its writes there are none of
// the tracer's stray writes, and another operator's writes there are.
void declare_persistent(uint32_t index) {
    int n = 0;
    const PersistentRegion *r = persistent_regions(&n);
    int j = 0;
    for (int i = 0; i < n && j < kMaxPersistentPerOp; ++i) {
        if (r[i].subgraph != 0 || r[i].op != static_cast<int32_t>(index)) {
            continue;
        }
        char name[16];
        format(name, sizeof(name), "persistent%d", j);
        declare(kIdPersistent + static_cast<uint32_t>(j), MEMTRACE_ROLE_PERSISTENT, -1, r[i].base, r[i].bytes, 1,
                name);
        ++j;
    }
}

// Collects operator `index`'s window: name, op, params and buffers.
void plan_operator(uint32_t index, const char *tag) {
    const auto *ops = g_subgraph0->operators();
    if (ops == nullptr || index >= ops->size()) {
        return;  // cannot happen: TFLM runs exactly these operators
    }
    const tflite::Operator *op = ops->Get(index);
    const auto *codes = g_model->operator_codes();
    const tflite::BuiltinOperator code =
        codes != nullptr && op->opcode_index() < codes->size()
            ? tflite::GetBuiltinCode(codes->Get(op->opcode_index()))
            : tflite::BuiltinOperator_CUSTOM;
    const auto *inputs = op->inputs();
    const auto *outputs = op->outputs();
    // A layer is named by its output; a SPILL, which has none (it writes
    // storage), by its input.
    const int first_output = outputs != nullptr && outputs->size() > 0 ? outputs->Get(0)
                             : inputs != nullptr && inputs->size() > 0 ? inputs->Get(0)
                                                                       : -1;
    const char *out_name = tensor_name(first_output);
    char fallback[24];
    if (out_name == nullptr) {
        if (first_output >= 0) {
            format(fallback, sizeof(fallback), "tensor%d", first_output);
            out_name = fallback;
        } else {
            out_name = "";
        }
    }
    format(g_layer_name, sizeof(g_layer_name), "%u:%s:%s", static_cast<unsigned>(index), tag, out_name);
    format(g_layer_op, sizeof(g_layer_op), "%s", tag);
    format(g_layer_params, sizeof(g_layer_params), "index=%u", static_cast<unsigned>(index));

    g_n_pending = 0;
    for (int k = 0; inputs != nullptr && k < static_cast<int>(inputs->size()) && k < kMaxInputs; ++k) {
        declare_tensor(static_cast<uint32_t>(k), true, k, inputs->Get(k), code);
    }
    for (int j = 0; outputs != nullptr && j < static_cast<int>(outputs->size()) && j < kMaxOutputs; ++j) {
        declare_tensor(kIdOutputs + static_cast<uint32_t>(j), false, j, outputs->Get(j), code);
    }
    declare_storage(op, codes, inputs != nullptr ? static_cast<int>(inputs->size()) : 0,
                    outputs != nullptr ? static_cast<int>(outputs->size()) : 0);
    int n = 0;
    const ScratchRequest *req = scratch_requests(&n);
    int j = 0;
    for (int s = 0; s < n && j < kMaxScratchPerOp; ++s) {
        if (req[s].subgraph != 0 || req[s].op != static_cast<int32_t>(index)) {
            continue;
        }
        char name[16];
        format(name, sizeof(name), "scratch%d", j);
        declare(kIdScratch + static_cast<uint32_t>(j), MEMTRACE_ROLE_SCRATCH, -1, g_scratch_ptr[s],
                req[s].bytes, 1, name);
        ++j;
    }
    declare_persistent(index);
    declare_red_zones();
}

uint32_t fnv1a(uint32_t h, const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        h = (h ^ p[i]) * 16777619u;
    }
    return h;
}

// After operator `index` of subgraph 0 has run (outside its window): the
// digest of its outputs, and their bytes at the end of memtrace_io when it
// is the operator to dump.
void digest_operator(uint32_t index) {
    const auto *ops = g_subgraph0->operators();
    if (ops == nullptr || index >= ops->size()) {
        return;
    }
    const auto *outputs = ops->Get(index)->outputs();
    const size_t io_region = static_cast<size_t>(memtrace_io_end - memtrace_io);
    const bool dump = g_dump_op == index + 1;
    uint32_t h = 2166136261u;
    size_t total = 0;
    for (uint32_t j = 0; outputs != nullptr && j < outputs->size(); ++j) {
        const TfLiteEvalTensor *t = eval_tensor(outputs->Get(j));
        const size_t bytes = eval_bytes(t);
        if (t == nullptr || t->data.data == nullptr || bytes == 0) {
            continue;
        }
        const auto *p = static_cast<const unsigned char *>(t->data.data);
        h = fnv1a(h, p, bytes);
        total += bytes;
    }
    if (index < kMaxDigests) {
        g_digests[index] = OpDigest{h, static_cast<uint32_t>(total)};
    }
    if (!dump || total > io_region / 2) {
        return;
    }
    unsigned char *at = memtrace_io + io_region - total;
    for (uint32_t j = 0; outputs != nullptr && j < outputs->size(); ++j) {
        const TfLiteEvalTensor *t = eval_tensor(outputs->Get(j));
        const size_t bytes = eval_bytes(t);
        if (t != nullptr && t->data.data != nullptr && bytes != 0) {
            memcpy(at, t->data.data, bytes);
            at += bytes;
        }
    }
    g_dump_bytes = static_cast<uint32_t>(total);
}

// TFLM's profiler hook: MicroInterpreterGraph::InvokeSubgraph opens one event
// around each operator's invoke. Events at depth 0 are subgraph 0's
// operators, in order; deeper ones (operators of subgraphs a control-flow
// operator runs, decompression) belong to the enclosing operator's window.
class LayerProfiler : public tflite::MicroProfilerInterface {
  public:
    // The profiler's own state changes before LAYER_BEGIN and after
    // LAYER_END, never inside the window.
    uint32_t BeginEvent(const char *tag) override {
        // Nested events (depth > 1) write depth_ inside the window: one word
        // of .bss, only for control-flow operators and decompression.
        const uint32_t depth = ++depth_;
        if (depth == 1) {
            if (!g_scratch_resolved) {
                resolve_scratch();
            }
            tag_ = tag != nullptr ? tag : "";
            mark_log();
            open_ = (g_flags & TFLM_FLAG_LAYERS) != 0;
            if (open_) {
                plan_operator(next_op_, tag != nullptr ? tag : "");
                open_window(g_layer_name, g_layer_op, g_layer_params);
            }
        }
        return depth;
    }
    void EndEvent(uint32_t) override {
        if (depth_ == 1) {
            if (open_) {
                memtrace_layer_end();
            }
            open_ = false;
            if ((g_flags & TFLM_FLAG_DIGESTS) != 0 || g_dump_op != 0) {
                digest_operator(next_op_);
            }
            ++next_op_;
        }
        if (depth_ > 0) {
            --depth_;
        }
    }

    // Whether an operator of subgraph 0 is being invoked, and which.
    bool in_operator() const { return depth_ > 0; }
    uint32_t op() const { return next_op_; }
    const char *tag() const { return tag_; }

    // Ends the open window, if any, where the operator will never end it
    // (TFLM aborted inside it).
    void close_window() {
        if (open_) {
            memtrace_layer_end();
            open_ = false;
        }
    }

  private:
    uint32_t depth_ = 0;
    uint32_t next_op_ = 0;
    bool open_ = false;
    const char *tag_ = "";
};

LayerProfiler g_profiler;

// Static storage for the interpreter (no heap): constructed once the job is
// known.
alignas(tflite::MicroInterpreter) unsigned char g_interpreter_storage[sizeof(tflite::MicroInterpreter)];

uint32_t align16(uint32_t v) { return (v + 15u) & ~15u; }

void put_word(uint32_t offset, uint32_t v) { memcpy(memtrace_io + offset, &v, 4); }

int run() {
    for (int w = TFLM_STAGE; w < MEMTRACE_TFLM_WORDS; ++w) {
        set_word(w, 0);
    }
    set_word(TFLM_STAGE, TFLM_STAGE_STARTED);

    // --- the job -------------------------------------------------------------
    const size_t model_region = static_cast<size_t>(memtrace_model_end - memtrace_model);
    const size_t arena_region = static_cast<size_t>(memtrace_arena_end - memtrace_arena);
    const size_t io_region = static_cast<size_t>(memtrace_io_end - memtrace_io);
    if (memtrace_tflm_job[TFLM_MAGIC] != MEMTRACE_TFLM_MAGIC) {
        fail(TFLM_EXIT_BAD_JOB, "no TFLM job: word 0 is 0x%08x, not 0x%08x",
             static_cast<unsigned>(memtrace_tflm_job[TFLM_MAGIC]), MEMTRACE_TFLM_MAGIC);
    }
    g_model_bytes = memtrace_tflm_job[TFLM_MODEL_BYTES];
    g_arena_bytes = memtrace_tflm_job[TFLM_ARENA_BYTES];
    g_flags = memtrace_tflm_job[TFLM_FLAGS];
    g_red_zone = memtrace_tflm_job[TFLM_RED_ZONE_BYTES];
    g_dump_op = memtrace_tflm_job[TFLM_DUMP_OP];
    const uint32_t input_bytes = memtrace_tflm_job[TFLM_INPUT_BYTES];
    if (g_model_bytes == 0 || g_model_bytes > model_region) {
        fail(TFLM_EXIT_BAD_JOB, "model of %u bytes: memtrace_model holds 1 to %u",
             static_cast<unsigned>(g_model_bytes), static_cast<unsigned>(model_region));
    }
    if (g_arena_bytes == 0 || g_arena_bytes > arena_region) {
        fail(TFLM_EXIT_BAD_JOB, "arena of %u bytes: memtrace_arena holds 1 to %u",
             static_cast<unsigned>(g_arena_bytes), static_cast<unsigned>(arena_region));
    }
    if (g_red_zone % 16 != 0 || g_red_zone > 4096) {
        fail(TFLM_EXIT_BAD_JOB, "red zones of %u bytes: a multiple of 16 up to 4096",
             static_cast<unsigned>(g_red_zone));
    }
    if (input_bytes > io_region) {
        fail(TFLM_EXIT_BAD_JOB, "%u input bytes: memtrace_io holds %u",
             static_cast<unsigned>(input_bytes), static_cast<unsigned>(io_region));
    }

    // --- the model -----------------------------------------------------------
    // TFLM itself trusts the flatbuffer; verifying it first turns a truncated
    // or foreign file into exit code 3 instead of a wild read.
    flatbuffers::Verifier verifier(memtrace_model, g_model_bytes);
    if (!tflite::VerifyModelBuffer(verifier)) {
        fail(TFLM_EXIT_BAD_MODEL, "not a valid .tflite flatbuffer (%u bytes)",
             static_cast<unsigned>(g_model_bytes));
    }
    g_model = tflite::GetModel(memtrace_model);
    if (g_model->version() != TFLITE_SCHEMA_VERSION) {
        fail(TFLM_EXIT_BAD_MODEL, "model schema version %u, TFLM supports version %d",
             static_cast<unsigned>(g_model->version()), TFLITE_SCHEMA_VERSION);
    }
    const auto *subgraphs = g_model->subgraphs();
    if (subgraphs == nullptr || subgraphs->size() == 0) {
        fail(TFLM_EXIT_BAD_MODEL, "the model has no subgraph");
    }
    g_subgraph0 = subgraphs->Get(0);
    set_word(TFLM_STAGE, TFLM_STAGE_MODEL);

    const char *failed = nullptr;
    const tflite::MicroOpResolver *resolver = make_resolver(&failed);
    if (resolver == nullptr) {
        fail_tflm(TFLM_EXIT_ALLOCATE, failed);
    }
    // Prepare visits every operator of every subgraph in this order.
    uint32_t ops_per_subgraph[64];
    uint32_t total_ops = 0;
    const int n_subgraphs = subgraphs->size() < 64 ? static_cast<int>(subgraphs->size()) : 64;
    for (int s = 0; s < n_subgraphs; ++s) {
        const auto *ops = subgraphs->Get(s)->operators();
        ops_per_subgraph[s] = ops != nullptr ? ops->size() : 0;
        total_ops += ops_per_subgraph[s];
    }
    if (subgraphs->size() > 64) {
        fail(TFLM_EXIT_BAD_MODEL, "%u subgraphs: the runner handles 64",
             static_cast<unsigned>(subgraphs->size()));
    }
    set_prepare_order(ops_per_subgraph, n_subgraphs);

    // --- the arena: MicroAllocator::Create(arena, bytes), step by step ------
    uint8_t *arena = memtrace_arena;
    uint8_t *aligned = tflite::AlignPointerUp(arena, tflite::MicroArenaBufferAlignment());
    const size_t aligned_bytes = static_cast<size_t>(arena + g_arena_bytes - aligned);
    // SingleArenaBufferAllocator::Create places the allocator in the tail
    // itself and does not check that it fits.
    if (aligned_bytes < sizeof(tflite::SingleArenaBufferAllocator) + alignof(tflite::SingleArenaBufferAllocator)) {
        fail(TFLM_EXIT_ALLOCATE, "arena of %u bytes is too small for TFLM's allocator",
             static_cast<unsigned>(g_arena_bytes));
    }
    tflite::SingleArenaBufferAllocator *memory =
        tflite::SingleArenaBufferAllocator::Create(aligned, aligned_bytes);
    g_memory = memory;
    set_tail_gauge([] { return g_memory->GetPersistentUsedBytes(); }, aligned + aligned_bytes);
    // A red-zoned run's planner is TFLM's own wrapped (red_zones.cc); it
    // lives in the tail too, so only a red-zoned arena differs.
    const bool zoned = g_red_zone != 0;
    uint8_t *planner_buffer = memory->AllocatePersistentBuffer(
        zoned ? red_zone_planner_bytes() : sizeof(tflite::GreedyMemoryPlanner),
        zoned ? red_zone_planner_align() : alignof(tflite::GreedyMemoryPlanner));
    if (planner_buffer == nullptr ||
        memory->GetAvailableMemory(alignof(tflite::MicroAllocator)) < sizeof(tflite::MicroAllocator)) {
        fail_tflm(TFLM_EXIT_ALLOCATE, "arena too small for TFLM's planner and allocator");
    }
    tflite::MicroMemoryPlanner *planner = zoned ? make_red_zone_planner(planner_buffer, g_red_zone)
                                                : new (planner_buffer) tflite::GreedyMemoryPlanner();
    tflite::MicroAllocator *allocator = tflite::MicroAllocator::Create(memory, planner);
    if (allocator == nullptr) {
        fail_tflm(TFLM_EXIT_ALLOCATE, "MicroAllocator::Create failed");
    }

    g_interpreter = new (g_interpreter_storage)
        tflite::MicroInterpreter(g_model, *resolver, allocator, nullptr, &g_profiler);
    if (g_interpreter->initialization_status() != kTfLiteOk) {
        fail_tflm(TFLM_EXIT_ALLOCATE, "MicroInterpreter initialisation failed");
    }
    if (g_interpreter->AllocateTensors() != kTfLiteOk) {
        fail_tflm(TFLM_EXIT_ALLOCATE, "AllocateTensors() failed");
    }
    if (prepare_calls() != total_ops) {
        fail(TFLM_EXIT_ALLOCATE, "the op resolver saw %u Prepare calls for %u operators",
             static_cast<unsigned>(prepare_calls()), static_cast<unsigned>(total_ops));
    }
    if (init_calls() != total_ops) {
        fail(TFLM_EXIT_ALLOCATE, "the op resolver saw %u Init calls for %u operators",
             static_cast<unsigned>(init_calls()), static_cast<unsigned>(total_ops));
    }
    int n_scratch = 0;
    scratch_requests(&n_scratch);
    if (scratch_overflowed()) {
        fail(TFLM_EXIT_ALLOCATE, "more than %d scratch buffers", kMaxScratch);
    }
    if (persistent_overflowed()) {
        fail(TFLM_EXIT_ALLOCATE, "more than %d persistent allocations by kernels", kMaxPersistent);
    }
    set_word(TFLM_STAGE, TFLM_STAGE_ALLOCATED);

    const uint32_t n_inputs = static_cast<uint32_t>(g_interpreter->inputs_size());
    const uint32_t n_outputs = static_cast<uint32_t>(g_interpreter->outputs_size());
    const uint32_t n_tensors = g_subgraph0->tensors() != nullptr ? g_subgraph0->tensors()->size() : 0;
    const uint32_t n_ops = ops_per_subgraph[0];
    auto write_usage = [&]() {
        set_word(TFLM_ARENA_USED, static_cast<uint32_t>(g_interpreter->arena_used_bytes()));
        set_word(TFLM_HEAD_BYTES, static_cast<uint32_t>(memory->GetNonPersistentUsedBytes()));
        set_word(TFLM_TAIL_BYTES, static_cast<uint32_t>(memory->GetPersistentUsedBytes()));
        set_word(TFLM_HEAD_OFFSET, static_cast<uint32_t>(memory->GetOverlayMemoryAddress() - arena));
    };
    write_usage();
    g_head_lo = reinterpret_cast<uintptr_t>(memory->GetOverlayMemoryAddress());
    g_head_hi = g_head_lo + memory->GetNonPersistentUsedBytes();
    set_word(TFLM_N_INPUTS, n_inputs);
    set_word(TFLM_N_OUTPUTS, n_outputs);
    set_word(TFLM_N_TENSORS, n_tensors);
    set_word(TFLM_N_SCRATCH, static_cast<uint32_t>(n_scratch));
    set_word(TFLM_N_OPS, n_ops);

    // --- inputs --------------------------------------------------------------
    uint32_t model_input_bytes = 0;
    for (uint32_t i = 0; i < n_inputs; ++i) {
        const TfLiteTensor *t = g_interpreter->input(i);
        model_input_bytes += t != nullptr ? static_cast<uint32_t>(t->bytes) : 0;
    }
    if (input_bytes != 0 && input_bytes != model_input_bytes) {
        fail(TFLM_EXIT_IO, "%u input bytes given, the model's %u inputs take %u",
             static_cast<unsigned>(input_bytes), static_cast<unsigned>(n_inputs),
             static_cast<unsigned>(model_input_bytes));
    }
    // Without input bytes the inputs are zeroed rather than left as they are:
    // after AllocateTensors() the head holds TFLM's planning data, not zeros.
    uint32_t offset = 0;
    for (uint32_t i = 0; i < n_inputs; ++i) {
        TfLiteTensor *t = g_interpreter->input(i);
        if (t == nullptr || t->data.raw == nullptr || t->bytes == 0) {
            continue;
        }
        const bool window = (g_flags & TFLM_FLAG_LAYERS) != 0;
        if (window) {
            format(g_layer_params, sizeof(g_layer_params), "input=%u", static_cast<unsigned>(i));
            const int index = g_subgraph0->inputs() != nullptr && i < g_subgraph0->inputs()->size()
                                  ? g_subgraph0->inputs()->Get(i)
                                  : -1;
            g_n_pending = 0;
            const TfLiteEvalTensor *et = index >= 0 ? eval_tensor(index) : nullptr;
            declare(kIdOutputs, MEMTRACE_ROLE_OUTPUT, index, t->data.raw, t->bytes,
                    et != nullptr ? elem_size(et) : 1, nullptr);
            open_window("load_input", "load_input", g_layer_params);
        }
        const uint32_t from = offset;
        offset += static_cast<uint32_t>(t->bytes);
        if (input_bytes != 0) {
            memcpy(t->data.raw, memtrace_io + from, t->bytes);
        } else {
            memset(t->data.raw, 0, t->bytes);
        }
        if (window) {
            memtrace_layer_end();
        }
    }

    // --- invoke --------------------------------------------------------------
    if (g_interpreter->Invoke() != kTfLiteOk) {
        fail_tflm(TFLM_EXIT_INVOKE, "Invoke() failed");
    }
    write_usage();

    // --- outputs and the tensor table ----------------------------------------
    uint32_t output_bytes = 0;
    for (uint32_t i = 0; i < n_outputs; ++i) {
        const TfLiteTensor *t = g_interpreter->output(i);
        output_bytes += t != nullptr ? static_cast<uint32_t>(t->bytes) : 0;
    }
    const uint32_t output_offset = align16(input_bytes);
    const uint32_t table_offset = align16(output_offset + output_bytes);
    const uint64_t table_end = static_cast<uint64_t>(table_offset) +
                               12ull * (static_cast<uint64_t>(n_tensors) + static_cast<uint64_t>(n_scratch));
    const bool digests = (g_flags & TFLM_FLAG_DIGESTS) != 0;
    const uint64_t digest_offset = (table_end + 15u) & ~15ull;
    const uint64_t end = digests ? digest_offset + 8ull * n_ops : table_end;
    if (digests && n_ops > kMaxDigests) {
        fail(TFLM_EXIT_IO, "%u operators: the runner keeps digests of %u",
             static_cast<unsigned>(n_ops), static_cast<unsigned>(kMaxDigests));
    }
    if (end > io_region - g_dump_bytes) {
        fail(TFLM_EXIT_IO, "outputs and tensor table need %llu bytes of memtrace_io, it holds %u",
             static_cast<unsigned long long>(end), static_cast<unsigned>(io_region));
    }
    uint32_t at = output_offset;
    for (uint32_t i = 0; i < n_outputs; ++i) {
        const TfLiteTensor *t = g_interpreter->output(i);
        if (t != nullptr && t->data.raw != nullptr) {
            memcpy(memtrace_io + at, t->data.raw, t->bytes);
            at += static_cast<uint32_t>(t->bytes);
        }
    }
    at = table_offset;
    for (uint32_t i = 0; i < n_tensors; ++i) {
        const TfLiteEvalTensor *t = eval_tensor(static_cast<int>(i));
        const void *data = t != nullptr ? t->data.data : nullptr;
        const size_t bytes = eval_bytes(t);
        uint32_t loc = TFLM_LOC_OTHER;
        uint32_t off = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(data));
        if (data == nullptr) {
            loc = TFLM_LOC_NONE;
            off = 0;
        } else if (in_arena(data, bytes)) {
            loc = TFLM_LOC_ARENA;
            off = static_cast<uint32_t>(static_cast<const unsigned char *>(data) - memtrace_arena);
        } else if (in_model(data, bytes)) {
            loc = TFLM_LOC_MODEL;
            off = static_cast<uint32_t>(static_cast<const unsigned char *>(data) - memtrace_model);
        }
        put_word(at, loc);
        put_word(at + 4, off);
        put_word(at + 8, static_cast<uint32_t>(bytes));
        at += 12;
    }
    const ScratchRequest *req = scratch_requests(&n_scratch);
    for (int j = 0; j < n_scratch; ++j) {
        // Operators of other subgraphs (run by a control-flow operator) are
        // not layers: their scratch gets operator index 0xFFFFFFFF.
        const uint32_t op = req[j].subgraph == 0 ? static_cast<uint32_t>(req[j].op) : 0xFFFFFFFFu;
        const unsigned char *p = static_cast<const unsigned char *>(g_scratch_ptr[j]);
        put_word(at, op);
        put_word(at + 4, p != nullptr ? static_cast<uint32_t>(p - memtrace_arena) : 0xFFFFFFFFu);
        put_word(at + 8, req[j].bytes);
        at += 12;
    }
    set_word(TFLM_OUTPUT_OFFSET, output_offset);
    set_word(TFLM_OUTPUT_BYTES, output_bytes);
    if (digests) {
        for (uint32_t i = 0; i < n_ops; ++i) {
            put_word(static_cast<uint32_t>(digest_offset) + 8 * i, g_digests[i].fnv);
            put_word(static_cast<uint32_t>(digest_offset) + 8 * i + 4, g_digests[i].bytes);
        }
        set_word(TFLM_DIGEST_OFFSET, static_cast<uint32_t>(digest_offset));
    }
    set_word(TFLM_DUMP_BYTES, g_dump_bytes);
    set_word(TFLM_TABLE_OFFSET, table_offset);
    set_word(TFLM_STAGE, TFLM_STAGE_INVOKED);
    return TFLM_EXIT_OK;
}

}  // namespace
}  // namespace mtflm

int main(void) { return mtflm::run(); }

// TFLM's TFLITE_ABORT (a failed TFLITE_CHECK, TF_LITE_FATAL) calls abort();
// this one replaces the run-time library's weak abort() (rt/memtrace_rt.h):
// the window of the operator it aborted in is closed first (the program
// writes nothing but the port while one is open), then the reason names the
// operator, what TFLM logged while it ran, and where abort() was called from
// (the host turns the address into a function and source line).
extern "C" void abort(void) {
    using mtflm::g_profiler;
    const void *caller = __builtin_return_address(0);
    g_profiler.close_window();
    const bool in_op = g_profiler.in_operator();
    const char *log = in_op ? mtflm::log_since_mark() : mtflm::last_log();
    if (log[0] == '\0') {
        log = "TFLM logged nothing";
    }
    if (in_op) {
        mtflm::fail(MEMTRACE_RT_EXIT_ABORT, "aborted in operator %u (%s), abort() called from %p: %s",
                    static_cast<unsigned>(g_profiler.op()), g_profiler.tag(), caller, log);
    }
    mtflm::fail(MEMTRACE_RT_EXIT_ABORT, "aborted outside any operator, abort() called from %p: %s", caller,
                log);
}
