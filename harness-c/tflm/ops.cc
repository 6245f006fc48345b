// ops.cc — the op resolver of the TFLM runner: every operator TFLM's
// MicroMutableOpResolver can register (the Add* list of
// micro_mutable_op_resolver.h, signal-library ops included), so that any
// model TFLM supports runs without a rebuild, and TinySeg's storage
// operators (storage_ops.cc) as custom operators.
//
// Scratch ownership. TFLM keeps no public record of which operator asked for
// which scratch buffer (the requests live in MicroAllocator's private head
// area). The resolver therefore hands MicroInterpreter a copy of each
// registration whose `prepare` is a small wrapper: it notes which operator is
// being prepared (MicroInterpreterGraph::PrepareSubgraphs calls prepare once
// per operator, subgraph by subgraph, operator by operator), points the
// context's RequestScratchBufferInArena at a recorder for the duration of the
// kernel's own prepare, and restores it. The recorder calls TFLM's function
// and notes (operator, bytes, TFLM's buffer index). Every kernel asks for
// scratch through context->RequestScratchBufferInArena, so nothing is missed;
// TFLM's own code, the arena and the plan are exactly what the unwrapped
// registration gives (the wrapper allocates nothing in the arena).
//
// Persistent buffers. `init` is wrapped the same way (InitSubgraphs visits
// the operators in Prepare's order), and both wrappers read the arena
// tail's size before and after the kernel's own function: what it grew by
// is the operator's (kernels reach the allocator through the context's
// function pointer or through MicroContext directly; the tail sees both).
#include <string.h>

#include <utility>

#include "tensorflow/lite/micro/micro_mutable_op_resolver.h"
#include "tflm/runner.h"

namespace mtflm {
namespace {

// Every Add* method of MicroMutableOpResolver, with its default registration.
// AddEthosU registers nothing unless TFLM is built for an Ethos-U (its
// Register_ETHOSU() is nullptr otherwise); it is called all the same.
#define MTFLM_ALL_OPS(X) \
    X(AddAbs) \
    X(AddAdd) \
    X(AddAddN) \
    X(AddArgMax) \
    X(AddArgMin) \
    X(AddAssignVariable) \
    X(AddAveragePool2D) \
    X(AddBatchMatMul) \
    X(AddBatchToSpaceNd) \
    X(AddBroadcastArgs) \
    X(AddBroadcastTo) \
    X(AddCallOnce) \
    X(AddCast) \
    X(AddCeil) \
    X(AddCircularBuffer) \
    X(AddConcatenation) \
    X(AddConv2D) \
    X(AddCos) \
    X(AddCumSum) \
    X(AddDecode) \
    X(AddDelay) \
    X(AddDepthToSpace) \
    X(AddDepthwiseConv2D) \
    X(AddDequantize) \
    X(AddDetectionPostprocess) \
    X(AddDiv) \
    X(AddDynamicUpdateSlice) \
    X(AddEmbeddingLookup) \
    X(AddEnergy) \
    X(AddElu) \
    X(AddEqual) \
    X(AddEthosU) \
    X(AddExp) \
    X(AddExpandDims) \
    X(AddFftAutoScale) \
    X(AddFill) \
    X(AddFilterBank) \
    X(AddFilterBankLog) \
    X(AddFilterBankSquareRoot) \
    X(AddFilterBankSpectralSubtraction) \
    X(AddFloor) \
    X(AddFloorDiv) \
    X(AddFloorMod) \
    X(AddFramer) \
    X(AddFullyConnected) \
    X(AddGather) \
    X(AddGatherNd) \
    X(AddGreater) \
    X(AddGreaterEqual) \
    X(AddHardSwish) \
    X(AddIf) \
    X(AddIrfft) \
    X(AddL2Normalization) \
    X(AddL2Pool2D) \
    X(AddLeakyRelu) \
    X(AddLess) \
    X(AddLessEqual) \
    X(AddLog) \
    X(AddLogicalAnd) \
    X(AddLogicalNot) \
    X(AddLogicalOr) \
    X(AddLogistic) \
    X(AddLogSoftmax) \
    X(AddMaximum) \
    X(AddMaxPool2D) \
    X(AddMirrorPad) \
    X(AddMean) \
    X(AddMinimum) \
    X(AddMul) \
    X(AddNeg) \
    X(AddNotEqual) \
    X(AddOverlapAdd) \
    X(AddPack) \
    X(AddPad) \
    X(AddPadV2) \
    X(AddPCAN) \
    X(AddPrelu) \
    X(AddQuantize) \
    X(AddReadVariable) \
    X(AddReduceAll) \
    X(AddReduceMax) \
    X(AddReduceMin) \
    X(AddRelu) \
    X(AddRelu6) \
    X(AddReshape) \
    X(AddResizeBilinear) \
    X(AddResizeNearestNeighbor) \
    X(AddReverseV2) \
    X(AddRfft) \
    X(AddRound) \
    X(AddRsqrt) \
    X(AddSelectV2) \
    X(AddShape) \
    X(AddSin) \
    X(AddSlice) \
    X(AddSoftmax) \
    X(AddSpaceToBatchNd) \
    X(AddSpaceToDepth) \
    X(AddSplit) \
    X(AddSplitV) \
    X(AddSqueeze) \
    X(AddSqrt) \
    X(AddSquare) \
    X(AddSquaredDifference) \
    X(AddStridedSlice) \
    X(AddStacker) \
    X(AddSub) \
    X(AddSum) \
    X(AddSvdf) \
    X(AddTanh) \
    X(AddTransposeConv) \
    X(AddTranspose) \
    X(AddUnpack) \
    X(AddUnidirectionalSequenceLSTM) \
    X(AddVarHandle) \
    X(AddWhile) \
    X(AddWindow) \
    X(AddZerosLike) \

// A runner built for some operators only (tflm.mk's TFLM_OPS, e.g. the
// per-core runners of `make test`) registers just those: -DMTFLM_OPS_SUBSET
// gives the X-list, and the TFLM library then holds only their kernels.
#ifdef MTFLM_OPS_SUBSET
#define MTFLM_OPS(X) MTFLM_OPS_SUBSET(X)
#define MTFLM_STRINGIFY(x) #x
#define MTFLM_OP_NAME(name) MTFLM_STRINGIFY(name) " "
#else
#define MTFLM_OPS(X) MTFLM_ALL_OPS(X)
#endif

#define MTFLM_COUNT(name) +1
constexpr unsigned kOpCount = 0 MTFLM_OPS(MTFLM_COUNT);
#undef MTFLM_COUNT

// TinySeg's storage operators are the custom operators added to the list,
// and in the probe runners memtrace's own test kernels (probe_ops.cc).
tflite::MicroMutableOpResolver<kOpCount + kStorageOps + kMaxProbeOps> g_inner;

using PrepareFn = TfLiteStatus (*)(TfLiteContext *, TfLiteNode *);
using RequestFn = TfLiteStatus (*)(TfLiteContext *, size_t, int *);
using InitFn = void *(*)(TfLiteContext *, const char *, size_t);

// Distinct registrations handed out (one per operator kind the model uses).
constexpr unsigned kMaxWrapped = kOpCount + kStorageOps + kMaxProbeOps;
struct Wrapped {
    const TFLMRegistration *original;
    TFLMRegistration copy;
};
Wrapped g_wrapped[kMaxWrapped];
unsigned g_n_wrapped;

// Prepare's visiting order: operators per subgraph.
constexpr int kMaxSubgraphs = 64;
uint32_t g_ops_per_subgraph[kMaxSubgraphs];
int g_n_subgraphs;

uint32_t g_prepare_calls;
uint32_t g_init_calls;
size_t (*g_tail_used)();
const uint8_t *g_tail_end;
PersistentRegion g_regions[kMaxPersistent];
int g_n_regions;
bool g_regions_overflow;
int32_t g_cur_subgraph = -1;
int32_t g_cur_op = -1;
TfLiteContext *g_context;
RequestFn g_tflm_request;

ScratchRequest g_requests[kMaxScratch];
int g_n_requests;
bool g_overflow;

TfLiteStatus record_request(TfLiteContext *context, size_t bytes, int *buffer_idx) {
    const TfLiteStatus status = g_tflm_request(context, bytes, buffer_idx);
    if (status == kTfLiteOk) {
        if (g_n_requests < kMaxScratch) {
            g_requests[g_n_requests++] = ScratchRequest{g_cur_subgraph, g_cur_op,
                                                        static_cast<uint32_t>(bytes), *buffer_idx};
        } else {
            g_overflow = true;
        }
    }
    return status;
}

// Position `call` in the graph's loop over all operators -> (subgraph,
// operator).
void locate(uint32_t call, int32_t *subgraph, int32_t *op) {
    int32_t sg = 0;
    while (sg < g_n_subgraphs && call >= g_ops_per_subgraph[sg]) {
        call -= g_ops_per_subgraph[sg];
        ++sg;
    }
    *subgraph = sg;
    *op = static_cast<int32_t>(call);
}

size_t tail_used() { return g_tail_used != nullptr ? g_tail_used() : 0; }

// The tail grew from `before` to `after` bytes while (sg, op) ran.
void note_growth(int32_t sg, int32_t op, size_t before, size_t after) {
    if (after <= before || g_tail_end == nullptr) {
        return;
    }
    if (g_n_regions == kMaxPersistent) {
        g_regions_overflow = true;
        return;
    }
    g_regions[g_n_regions++] =
        PersistentRegion{sg, op, g_tail_end - after, static_cast<uint32_t>(after - before)};
}

void *run_init(unsigned slot, TfLiteContext *context, const char *buffer, size_t length) {
    int32_t sg = 0;
    int32_t op = 0;
    locate(g_init_calls++, &sg, &op);
    const InitFn init = g_wrapped[slot].original->init;
    const size_t before = tail_used();
    void *data = init != nullptr ? init(context, buffer, length) : nullptr;
    note_growth(sg, op, before, tail_used());
    return data;
}

TfLiteStatus run_prepare(unsigned slot, TfLiteContext *context, TfLiteNode *node) {
    int32_t sg = 0;
    int32_t op = 0;
    locate(g_prepare_calls++, &sg, &op);
    const int32_t saved_sg = g_cur_subgraph;
    const int32_t saved_op = g_cur_op;
    g_cur_subgraph = sg;
    g_cur_op = op;
    g_context = context;
    const RequestFn tflm = context->RequestScratchBufferInArena;
    if (tflm != record_request) {
        g_tflm_request = tflm;
        context->RequestScratchBufferInArena = record_request;
    }
    const PrepareFn prepare = g_wrapped[slot].original->prepare;
    const size_t before = tail_used();
    const TfLiteStatus status = prepare != nullptr ? prepare(context, node) : kTfLiteOk;
    note_growth(sg, op, before, tail_used());
    if (tflm != record_request) {
        context->RequestScratchBufferInArena = tflm;
    }
    g_cur_subgraph = saved_sg;
    g_cur_op = saved_op;
    return status;
}

// One distinct function per slot: TFLM's prepare signature carries no
// pointer back to the registration.
template <size_t K>
TfLiteStatus prepare_thunk(TfLiteContext *context, TfLiteNode *node) {
    return run_prepare(K, context, node);
}

template <size_t K>
void *init_thunk(TfLiteContext *context, const char *buffer, size_t length) {
    return run_init(K, context, buffer, length);
}

template <size_t... K>
struct Thunks {
    static constexpr PrepareFn prepare[sizeof...(K)] = {&prepare_thunk<K>...};
    static constexpr InitFn init[sizeof...(K)] = {&init_thunk<K>...};
};
template <size_t... K>
constexpr PrepareFn Thunks<K...>::prepare[sizeof...(K)];
template <size_t... K>
constexpr InitFn Thunks<K...>::init[sizeof...(K)];

template <size_t... K>
constexpr const PrepareFn *prepare_table(std::index_sequence<K...>) {
    return Thunks<K...>::prepare;
}
template <size_t... K>
constexpr const InitFn *init_table(std::index_sequence<K...>) {
    return Thunks<K...>::init;
}

const PrepareFn *const kThunks = prepare_table(std::make_index_sequence<kMaxWrapped>());
const InitFn *const kInitThunks = init_table(std::make_index_sequence<kMaxWrapped>());

const TFLMRegistration *wrap(const TFLMRegistration *original) {
    if (original == nullptr) {
        return nullptr;
    }
    for (unsigned i = 0; i < g_n_wrapped; ++i) {
        if (g_wrapped[i].original == original) {
            return &g_wrapped[i].copy;
        }
    }
    if (g_n_wrapped == kMaxWrapped) {  // cannot happen: one per registered op
        return original;
    }
    Wrapped &w = g_wrapped[g_n_wrapped];
    w.original = original;
    w.copy = *original;
    w.copy.prepare = kThunks[g_n_wrapped];
    // Always set: InitSubgraphs skips a null init, and the count must see
    // every operator (a null user_data is what a skipped init leaves).
    w.copy.init = kInitThunks[g_n_wrapped];
    ++g_n_wrapped;
    return &w.copy;
}

class WrappingResolver : public tflite::MicroOpResolver {
  public:
    const TFLMRegistration *FindOp(tflite::BuiltinOperator op) const override {
        return wrap(g_inner.FindOp(op));
    }
    const TFLMRegistration *FindOp(const char *op) const override {
        return wrap(g_inner.FindOp(op));
    }
    tflite::TfLiteBridgeBuiltinParseFunction GetOpDataParser(
        tflite::BuiltinOperator op) const override {
        return g_inner.GetOpDataParser(op);
    }
};

WrappingResolver g_resolver;

}  // namespace

}  // namespace mtflm

#ifdef MTFLM_OPS_SUBSET
// The Add* methods this runner's resolver calls (a link root, tflm.mk):
// memtrace reads it to say why a model's operator is missing. A runner
// without it registers every operator.
extern "C" const char memtrace_runner_ops[] __attribute__((used)) =
    MTFLM_OPS_SUBSET(MTFLM_OP_NAME);
#endif

namespace mtflm {

const tflite::MicroOpResolver *make_resolver(const char **failed) {
#define MTFLM_ADD(name)                    \
    if (g_inner.name() != kTfLiteOk) {     \
        *failed = #name;                   \
        return nullptr;                    \
    }
    MTFLM_OPS(MTFLM_ADD)
#undef MTFLM_ADD
    for (int i = 0; i < kStorageOps; ++i) {
        const char *name = nullptr;
        const TFLMRegistration *r = storage_op(i, &name);
        if (r == nullptr || g_inner.AddCustom(name, r) != kTfLiteOk) {
            *failed = "AddCustom (TinySeg's storage operators)";
            return nullptr;
        }
    }
    for (int i = 0; i < probe_ops() && i < kMaxProbeOps; ++i) {
        const char *name = nullptr;
        const TFLMRegistration *r = probe_op(i, &name);
        if (r == nullptr || g_inner.AddCustom(name, r) != kTfLiteOk) {
            *failed = "AddCustom (memtrace's probe kernels)";
            return nullptr;
        }
    }
    return &g_resolver;
}

// A runner without probe_ops.cc registers no probe kernel.
__attribute__((weak)) int probe_ops() { return 0; }
__attribute__((weak)) const TFLMRegistration *probe_op(int, const char **) { return nullptr; }

void set_prepare_order(const uint32_t *ops_per_subgraph, int n_subgraphs) {
    g_n_subgraphs = n_subgraphs < kMaxSubgraphs ? n_subgraphs : kMaxSubgraphs;
    for (int i = 0; i < g_n_subgraphs; ++i) {
        g_ops_per_subgraph[i] = ops_per_subgraph[i];
    }
}

const ScratchRequest *scratch_requests(int *count) {
    *count = g_n_requests;
    return g_requests;
}

bool scratch_overflowed() { return g_overflow; }
uint32_t prepare_calls() { return g_prepare_calls; }
uint32_t init_calls() { return g_init_calls; }

void set_tail_gauge(size_t (*used)(), const uint8_t *tail_end) {
    g_tail_used = used;
    g_tail_end = tail_end;
}

const PersistentRegion *persistent_regions(int *count) {
    *count = g_n_regions;
    return g_regions;
}

bool persistent_overflowed() { return g_regions_overflow; }
TfLiteContext *prepare_context() { return g_context; }

}  // namespace mtflm
