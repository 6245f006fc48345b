// runner.h — shared between the pieces of the TFLM runner guests
// (runner.cc: main and the layers; ops.cc: the op resolver; platform.cc:
// TFLM's platform hooks). include/memtrace_tflm.h is the contract with the
// host; this header is internal.
#ifndef MEMTRACE_TFLM_RUNNER_H
#define MEMTRACE_TFLM_RUNNER_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "tensorflow/lite/c/common.h"
#include "tensorflow/lite/micro/memory_planner/micro_memory_planner.h"
#include "tensorflow/lite/micro/micro_op_resolver.h"

namespace mtflm {

// Longest exit reason / log message kept (the protocol's string limit).
constexpr size_t kMaxReason = 256;

// snprintf-like formatting without a C library (platform.cc).
int format(char *buf, size_t cap, const char *fmt, va_list ap);
int format(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

// The last complete message TFLM logged through MicroPrintf, or "".
const char *last_log();

// Starts a new span of TFLM's log (at each operator): log_since_mark()
// gives its first and last complete messages ("first; last"), or "".
void mark_log();
const char *log_since_mark();

// One scratch buffer a kernel asked for (context->RequestScratchBufferInArena
// during Prepare), in the order TFLM numbers them (its buffer index).
struct ScratchRequest {
    int32_t subgraph;  // subgraph of the requesting operator
    int32_t op;        // operator index within that subgraph
    uint32_t bytes;    // bytes requested (TFLM reserves them rounded up to 16)
    int32_t index;     // TFLM's scratch buffer index (GetScratchBuffer argument)
};

constexpr int kMaxScratch = 512;

// Memory a kernel allocated for itself in the arena's tail while it was
// initialised or prepared (context->AllocatePersistentBuffer, or the
// MicroContext method some kernels call directly): its op data and the
// state it keeps between invocations. One region per Init or Prepare call
// that allocated, found from the tail's growth around the call.
struct PersistentRegion {
    int32_t subgraph;
    int32_t op;
    const void *base;
    uint32_t bytes;
};

constexpr int kMaxPersistent = 1024;

// The op resolver the runner hands to MicroInterpreter: every builtin and
// custom operator TFLM's MicroMutableOpResolver can register, each wrapped so
// that the scratch buffers requested during Prepare are attributed to their
// operator (ops.cc). `ops_per_subgraph` gives Prepare's visiting order.
// Returns nullptr, with `failed` naming the Add* call, if registration fails.
const tflite::MicroOpResolver *make_resolver(const char **failed);
void set_prepare_order(const uint32_t *ops_per_subgraph, int n_subgraphs);

// How the wrappers measure the tail: `used` answers the tail's bytes in
// use, which end at `tail_end` (SingleArenaBufferAllocator grows its tail
// downwards from there).
void set_tail_gauge(size_t (*used)(), const uint8_t *tail_end);

// TinySeg's storage operators (storage_ops.cc): kStorageOps custom
// operators, registration `i` under the name it sets in `name`.
constexpr int kStorageOps = 5;
const TFLMRegistration *storage_op(int i, const char **name);

// memtrace's own test kernels (probe_ops.cc, linked only into the probe
// runners): probe_ops() of them, registration `i` under the name it sets.
// A runner without them has weak definitions answering 0 and nullptr.
constexpr int kMaxProbeOps = 2;
int probe_ops();
const TFLMRegistration *probe_op(int i, const char **name);

// The storage slot a storage operator reads or writes, from its custom code
// and custom options: false for any other operator (and for SPILL_KEEP,
// which has none).
struct StorageSlot {
    const void *address;
    uint32_t offset;   // from memtrace_storage
    uint32_t bytes;
    uint32_t elem;     // element size of the stored tensor
    bool written;      // SPILL writes the slot; the fetching operators read it
};
bool storage_slot(const char *custom_code, const void *options, size_t len, StorageSlot *s);

// Requests recorded so far, and the number of times the resolver's Prepare
// wrapper ran (must equal the number of operators of all subgraphs).
const ScratchRequest *scratch_requests(int *count);
bool scratch_overflowed();
uint32_t prepare_calls();
uint32_t init_calls();

// The regions the kernels allocated, in allocation order.
const PersistentRegion *persistent_regions(int *count);
bool persistent_overflowed();

// The context TFLM passed to Prepare (GetScratchBuffer is called through it
// during Invoke).
::TfLiteContext *prepare_context();

// The planner of a red-zoned run (red_zones.cc): TFLM's greedy planner with
// `zone` bytes before and after every planned buffer, constructed at `at`
// (red_zone_planner_bytes() bytes aligned to red_zone_planner_align()).
size_t red_zone_planner_bytes();
size_t red_zone_planner_align();
tflite::MicroMemoryPlanner *make_red_zone_planner(void *at, uint32_t zone);

}  // namespace mtflm

#endif  // MEMTRACE_TFLM_RUNNER_H
