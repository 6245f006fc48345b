// red_zones.cc — the memory planner of a red-zoned run (TFLM_RED_ZONE_BYTES
// set by the host): TFLM's own GreedyMemoryPlanner, asked for every buffer
// (tensor or scratch) `2 * zone` bytes larger than TFLM asks, and each
// buffer placed `zone` bytes into what it was given. Every planned buffer
// then sits between two zones that no other buffer alive at the same time
// can occupy, so a kernel that writes past the end of its scratch (or before
// the start of a tensor) writes into a zone, not into its neighbour: the
// tracer sees a stray write next to the buffer it overran, where TFLM's own
// layout would have hidden it in the output tensor.
//
// An offline plan (OfflineMemoryAllocation metadata) is not followed: its
// offsets leave no room for zones. The run checks the kernels, not the plan.
#include <new>

#include "tensorflow/lite/micro/memory_planner/greedy_memory_planner.h"
#include "tflm/runner.h"

namespace mtflm {
namespace {

class RedZonePlanner : public tflite::MicroMemoryPlanner {
  public:
    explicit RedZonePlanner(int zone) : zone_(zone) {}

    TfLiteStatus AddBuffer(int size, int first_time_used, int last_time_used) override {
        return inner_.AddBuffer(size + 2 * zone_, first_time_used, last_time_used);
    }
    TfLiteStatus AddBuffer(int size, int first_time_used, int last_time_used, int) override {
        return AddBuffer(size, first_time_used, last_time_used);
    }
    size_t GetMaximumMemorySize() override { return inner_.GetMaximumMemorySize(); }
    int GetBufferCount() override { return inner_.GetBufferCount(); }
    TfLiteStatus GetOffsetForBuffer(int buffer_index, int *offset) override {
        const TfLiteStatus status = inner_.GetOffsetForBuffer(buffer_index, offset);
        if (status == kTfLiteOk) {
            *offset += zone_;
        }
        return status;
    }
    TfLiteStatus Init(unsigned char *scratch_buffer, int scratch_buffer_size) override {
        return inner_.Init(scratch_buffer, scratch_buffer_size);
    }
    bool preserves_all_tensors() const override { return false; }

  private:
    tflite::GreedyMemoryPlanner inner_;
    int zone_;
};

}  // namespace

size_t red_zone_planner_bytes() { return sizeof(RedZonePlanner); }
size_t red_zone_planner_align() { return alignof(RedZonePlanner); }

tflite::MicroMemoryPlanner *make_red_zone_planner(void *at, uint32_t zone) {
    return new (at) RedZonePlanner(static_cast<int>(zone));
}

}  // namespace mtflm
