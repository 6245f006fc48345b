// layer.cc — one layer window of the kernel suite: validate the layer, carve
// its buffers out of the arena, fill them with deterministic data, then open
// the window, declare the buffers, run the kernel and close the window.
#include <string.h>

#include "memtrace.h"
#include "memtrace_rt.h"
#include "prng.h"
#include "suite.h"

namespace memtrace {
namespace {

// Largest value the TFLM parameter structs can hold for strides, dilations,
// padding and depth multipliers (they are int16 there).
constexpr int32_t kMaxInt16 = 32767;

bool in_range(int32_t v, int32_t lo, int32_t hi) { return v >= lo && v <= hi; }

bool same_shape(const int32_t *a, const int32_t *b) {
    return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3];
}

bool positive_shape(const int32_t *s) { return s[0] >= 1 && s[1] >= 1 && s[2] >= 1 && s[3] >= 1; }

// Element count of a shape, saturated at `limit + 1` so it never overflows.
uint64_t elements(const int32_t *s, uint64_t limit) {
    uint64_t n = 1;
    for (int i = 0; i < 4; ++i) {
        n *= static_cast<uint64_t>(s[i]);
        if (n > limit) {
            return limit + 1;
        }
    }
    return n;
}

// TFLite's ComputeOutSize: whether a conv2d window of `k` with stride `s`
// (no dilation) and `padding` maps `out` back to `in` — the relation between
// a transpose conv's output and input (LayerSpec::new). Unsigned 32-bit
// arithmetic cannot overflow here (out < 2^31, k and s <= 2^15) and needs no
// 64-bit division helper from libgcc (whose unwind tables would add an
// EXIDX segment to the suite).
bool maps_back(int32_t padding, int32_t out, int32_t k, int32_t s, int32_t in) {
    const uint32_t o = static_cast<uint32_t>(out), kk = static_cast<uint32_t>(k),
                   ss = static_cast<uint32_t>(s);
    const uint32_t back = padding == 1 ? (o + ss - 1) / ss : (o + ss > kk ? (o + ss - kk) / ss : 0);
    return back == static_cast<uint32_t>(in);
}

bool transpose_conv_consistent(const Layer &l) {
    const int32_t *in = l.input, *f = l.filter, *out = l.output;
    if (!positive_shape(f) || f[1] > kMaxInt16 || f[2] > kMaxInt16) {
        return false;
    }
    if (!in_range(l.stride_h, 1, kMaxInt16) || !in_range(l.stride_w, 1, kMaxInt16) ||
        l.dilation_h != 1 || l.dilation_w != 1 || !in_range(l.pad_h, 0, kMaxInt16) ||
        !in_range(l.pad_w, 0, kMaxInt16) || (l.padding != 1 && l.padding != 2) ||
        l.activation != 0) {
        return false;
    }
    return out[0] == in[0] && f[3] == in[3] && out[3] == f[0] &&
           maps_back(l.padding, out[1], f[1], l.stride_h, in[1]) &&
           maps_back(l.padding, out[2], f[2], l.stride_w, in[2]);
}

bool concatenation_consistent(const Layer &l) {
    if (!positive_shape(l.input2) || !in_range(l.axis, 0, 3) || l.activation != 0) {
        return false;
    }
    for (int k = 0; k < 4; ++k) {
        if (k == l.axis) {
            if (static_cast<int64_t>(l.output[k]) !=
                static_cast<int64_t>(l.input[k]) + l.input2[k]) {
                return false;
            }
        } else if (l.input2[k] != l.input[k] || l.output[k] != l.input[k]) {
            return false;
        }
    }
    return true;
}

bool pad_consistent(const Layer &l) {
    if (l.activation != 0) {
        return false;
    }
    for (int k = 0; k < 4; ++k) {
        if (l.pad_before[k] < 0 || l.pad_after[k] < 0 ||
            static_cast<int64_t>(l.output[k]) !=
                static_cast<int64_t>(l.input[k]) + l.pad_before[k] + l.pad_after[k]) {
            return false;
        }
    }
    return true;
}

// Checks op, dtype and shape consistency (the same rules as LayerSpec::new).
// Output shape and padding values are the host's; they are used as given.
bool consistent(const Layer &l) {
    if (l.dtype != DTYPE_F32 && l.dtype != DTYPE_INT8) {
        return false;
    }
    if (!op_name(l.op) || !in_range(l.activation, 0, 2)) {
        return false;
    }
    if (!positive_shape(l.input) || !positive_shape(l.output)) {
        return false;
    }
    const int32_t *in = l.input, *f = l.filter, *out = l.output;
    switch (l.op) {
        case OP_CONV2D:
        case OP_DEPTHWISE_CONV2D:
        case OP_MAX_POOL:
        case OP_AVERAGE_POOL: {
            if (!positive_shape(f) || f[1] > kMaxInt16 || f[2] > kMaxInt16) {
                return false;
            }
            if (!in_range(l.stride_h, 1, kMaxInt16) || !in_range(l.stride_w, 1, kMaxInt16) ||
                !in_range(l.dilation_h, 1, kMaxInt16) || !in_range(l.dilation_w, 1, kMaxInt16) ||
                !in_range(l.pad_h, 0, kMaxInt16) || !in_range(l.pad_w, 0, kMaxInt16) ||
                (l.padding != 1 && l.padding != 2)) {
                return false;
            }
            if (out[0] != in[0]) {
                return false;
            }
            if (l.op == OP_CONV2D) {
                return f[3] == in[3] && out[3] == f[0];
            }
            if (l.op == OP_DEPTHWISE_CONV2D) {
                return in_range(l.depth_multiplier, 1, kMaxInt16) && f[0] == 1 &&
                       static_cast<int64_t>(f[3]) ==
                           static_cast<int64_t>(in[3]) * l.depth_multiplier &&
                       out[3] == f[3];
            }
            // Pools: filter 1xKHxKWx1; TFLite pools do not support dilation.
            return f[0] == 1 && f[3] == 1 && out[3] == in[3] && l.dilation_h == 1 &&
                   l.dilation_w == 1;
        }
        case OP_FULLY_CONNECTED: {
            const uint64_t batches = static_cast<uint64_t>(in[0]) * in[1] * in[2];
            return positive_shape(f) && f[0] == 1 && f[1] == 1 && f[3] == in[3] && out[0] == 1 &&
                   out[1] == 1 && static_cast<uint64_t>(out[2]) == batches && out[3] == f[2];
        }
        case OP_MATMUL:
            return positive_shape(f) && in[0] == 1 && in[1] == 1 && f[0] == 1 && f[1] == 1 &&
                   f[2] == in[3] && out[0] == 1 && out[1] == 1 && out[2] == in[2] &&
                   out[3] == f[3];
        case OP_ADD:
        case OP_RELU:
            return same_shape(in, out);
        case OP_TRANSPOSE_CONV:
            return transpose_conv_consistent(l);
        case OP_CONCATENATION:
            return concatenation_consistent(l);
        case OP_PAD:
            return pad_consistent(l);
        default:
            return false;
    }
}

// Bump allocator over the arena; every buffer 16-byte aligned.
class Arena {
  public:
    Arena()
        : base_(reinterpret_cast<uintptr_t>(memtrace_arena)),
          size_(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(memtrace_arena_end) -
                                      reinterpret_cast<uintptr_t>(memtrace_arena))),
          used_(0),
          ok_(true) {}

    uint64_t size() const { return size_; }

    // `count` is already saturated by elements(); the product stays < 2^40.
    void *take(uint64_t count, uint64_t elem_size) {
        used_ = (used_ + 15u) & ~static_cast<uint64_t>(15u);
        const uint64_t bytes = count * elem_size;
        if (!ok_ || bytes > size_ || used_ > size_ - bytes) {
            ok_ = false;
            return nullptr;
        }
        void *p = reinterpret_cast<void *>(base_ + static_cast<uintptr_t>(used_));
        used_ += bytes;
        return p;
    }

    bool ok() const { return ok_; }

  private:
    uintptr_t base_;
    uint64_t size_;
    uint64_t used_;
    bool ok_;
};

void fill_f32(void *p, uint64_t n, Prng &rng, float scale) {
    float *d = static_cast<float *>(p);
    for (uint64_t i = 0; i < n; ++i) {
        d[i] = rng.uniform(scale);
    }
}

void fill_int8(void *p, uint64_t n, Prng &rng, bool symmetric) {
    int8_t *d = static_cast<int8_t *>(p);
    for (uint64_t i = 0; i < n; ++i) {
        d[i] = symmetric ? rng.int8_symmetric() : rng.int8();
    }
}

void fill_bias_int32(void *p, uint64_t n, Prng &rng) {
    int32_t *d = static_cast<int32_t *>(p);
    for (uint64_t i = 0; i < n; ++i) {
        d[i] = rng.range(-1024, 1024);
    }
}

int32_t multiplier(Prng &rng) { return static_cast<int32_t>(0x40000000u | (rng.next() & 0x3FFFFFFFu)); }

// Activation clamp of an int8 tensor with the given zero point; `six` is the
// quantised value of 6.0.
void int8_activation(int32_t act, int32_t zero_point, int32_t six, Quant &q) {
    q.act_min = -128;
    q.act_max = 127;
    if (act >= 1 && zero_point > q.act_min) {
        q.act_min = zero_point;
    }
    if (act == 2 && six < q.act_max) {
        q.act_max = six;
    }
}

// The params string must outlive the window only until LAYER_BEGIN is
// consumed, but static storage keeps it simple and inside .bss.
char g_params[MEMTRACE_MAX_STRING];

const char *g_reason = nullptr;

// Returns `code` and remembers why.
int fail(int code, const char *reason) {
    g_reason = reason;
    return code;
}

// Appends the decimal digits of `v` at `at` (inside `end`); returns the end.
char *append_decimal(char *at, const char *end, uint32_t v) {
    char digits[10];
    int n = 0;
    do {
        digits[n++] = static_cast<char>('0' + v % 10);
        v /= 10;
    } while (v != 0);
    while (n > 0 && at < end) {
        *at++ = digits[--n];
    }
    return at;
}

char *append_text(char *at, const char *end, const char *text) {
    while (*text != '\0' && at < end) {
        *at++ = *text++;
    }
    return at;
}

// Why a library kernel's output is not the reference kernel's, with the
// bytes that differ: "... : D of N bytes differ, the first at byte F".
char g_mismatch[160];

int fail_mismatch(const uint8_t *ours, const uint8_t *reference, uint32_t bytes) {
    uint32_t differ = 0;
    uint32_t first = 0;
    for (uint32_t i = 0; i < bytes; i++) {
        if (ours[i] != reference[i]) {
            if (differ == 0) {
                first = i;
            }
            differ++;
        }
    }
    const char *end = g_mismatch + sizeof g_mismatch - 1;
    char *at = append_text(g_mismatch, end,
                           "the library kernel's output differs from the TFLM reference "
                           "kernel's on the same inputs: ");
    at = append_decimal(at, end, differ);
    at = append_text(at, end, " of ");
    at = append_decimal(at, end, bytes);
    at = append_text(at, end, " bytes differ, the first at byte ");
    at = append_decimal(at, end, first);
    *at = '\0';
    return fail(kExitMismatch, g_mismatch);
}

}  // namespace

const char *exit_reason() { return g_reason; }

int run_layer(const char *name, const Layer &l) {
    if (!consistent(l)) {
        return fail(kExitInvalidJob,
                    "the suite rejected the job: its op, dtype, shapes and parameters are not "
                    "consistent (the rules of docs/user-guide.md, \"Job keys\")");
    }
    if (!format_params(l, g_params, sizeof g_params)) {
        return fail(kExitInvalidJob, "the suite rejected the job: its parameter text is longer "
                                     "than MEMTRACE_MAX_STRING (256 bytes)");
    }

    Arena arena;
    const uint64_t limit = arena.size();
    const uint64_t ts = l.dtype == DTYPE_INT8 ? 1 : 4;
    const uint64_t in_n = elements(l.input, limit);
    const uint64_t out_n = elements(l.output, limit);
    // The second input: add's has the input's shape, concatenation's its own.
    const uint64_t in2_n = l.op == OP_ADD           ? in_n
                           : l.op == OP_CONCATENATION ? elements(l.input2, limit)
                                                      : 0;
    uint64_t filter_n = 0, bias_n = 0;
    switch (l.op) {
        case OP_CONV2D:
        case OP_DEPTHWISE_CONV2D:
        case OP_TRANSPOSE_CONV:
            filter_n = elements(l.filter, limit);
            bias_n = static_cast<uint64_t>(l.output[3]);
            break;
        case OP_FULLY_CONNECTED:
            filter_n = elements(l.filter, limit);
            bias_n = static_cast<uint64_t>(l.filter[2]);
            break;
        case OP_MATMUL:
            filter_n = elements(l.filter, limit);
            break;
        default:
            break;
    }
    const bool per_channel = l.dtype == DTYPE_INT8 && (l.op == OP_CONV2D ||
                                                       l.op == OP_DEPTHWISE_CONV2D ||
                                                       l.op == OP_TRANSPOSE_CONV);

    // Order: input, (input2), filter, bias, output; then the undeclared
    // per-channel quantisation arrays.
    Buffers b = {};
    b.input = arena.take(in_n, ts);
    if (in2_n) {
        b.input2 = arena.take(in2_n, ts);
    }
    if (filter_n) {
        b.filter = arena.take(filter_n, ts);
    }
    if (bias_n) {
        b.bias = arena.take(bias_n, 4);
    }
    b.output = arena.take(out_n, ts);
    int32_t *mult = nullptr, *shift = nullptr;
    if (per_channel) {
        mult = static_cast<int32_t *>(arena.take(static_cast<uint64_t>(l.output[3]), 4));
        shift = static_cast<int32_t *>(arena.take(static_cast<uint64_t>(l.output[3]), 4));
    }
    if (!arena.ok()) {
        return fail(kExitInvalidJob, "the suite rejected the job: its input, weights and output "
                                     "do not fit the suite's arena (memtrace_arena)");
    }

    // Only in library builds other than the reference (suite-cmsis.elf): the
    // library's scratch buffer, and a second output for the reference
    // kernel's result when the library runs its own kernel. They come after
    // everything above, so the declared buffers have the same addresses in
    // every suite binary. The scratch size is asked for only now that the
    // filter has fitted the arena, which bounds the library's arithmetic.
    b.scratch_bytes = library_scratch_bytes(l, 0);
    if (b.scratch_bytes) {
        b.scratch = arena.take(b.scratch_bytes, 1);
    }
    b.scratch2_bytes = library_scratch_bytes(l, 1);
    if (b.scratch2_bytes) {
        b.scratch2 = arena.take(b.scratch2_bytes, 1);
    }
    // The reference kernel that checks the library's runs outside the window
    // with its own output and, if it needs one, its own scratch buffer.
    const bool check = library_has_kernel(l);
    void *reference_output = check ? arena.take(out_n, ts) : nullptr;
    const uint32_t reference_scratch = check ? reference_scratch_bytes(l) : 0;
    void *reference_scratch_buf = reference_scratch ? arena.take(reference_scratch, 1) : nullptr;
    if (!arena.ok()) {
        return fail(kExitInvalidJob, "the suite rejected the job: the library's scratch buffer "
                                     "and the reference output do not fit the suite's arena");
    }

    // Data, before the window opens.
    Prng rng(l.seed);
    Quant q = {};
    if (l.dtype == DTYPE_F32) {
        fill_f32(b.input, in_n, rng, 1.0f);
        if (b.input2) {
            fill_f32(b.input2, in2_n, rng, 1.0f);
        }
        if (b.filter) {
            fill_f32(b.filter, filter_n, rng, 0.5f);
        }
        if (b.bias) {
            fill_f32(b.bias, bias_n, rng, 0.125f);
        }
    } else {
        fill_int8(b.input, in_n, rng, false);
        if (b.input2) {
            fill_int8(b.input2, in2_n, rng, false);
        }
        if (b.filter) {
            fill_int8(b.filter, filter_n, rng, true);
        }
        if (b.bias) {
            fill_bias_int32(b.bias, bias_n, rng);
        }
        switch (l.op) {
            case OP_CONV2D:
            case OP_DEPTHWISE_CONV2D:
                // MobileNet-like: int8 image/activations with zero point -128,
                // output scale 6/255 (so 6.0 quantises to zero_point + 255).
                q.input_zero_point = -128;
                q.output_zero_point = -128;
                for (int32_t c = 0; c < l.output[3]; ++c) {
                    mult[c] = multiplier(rng);
                    shift[c] = -rng.range(6, 9);
                }
                q.channel_multiplier = mult;
                q.channel_shift = shift;
                int8_activation(l.activation, q.output_zero_point, q.output_zero_point + 255, q);
                break;
            case OP_FULLY_CONNECTED:
                q.input_zero_point = -128;
                q.output_zero_point = 5;
                q.output_multiplier = multiplier(rng);
                q.output_shift = -8;
                int8_activation(l.activation, q.output_zero_point, q.output_zero_point + 100, q);
                break;
            case OP_ADD:
                // TFLM's int8 add requires |offset| <= 127 and left_shift 20.
                q.input_zero_point = -5;
                q.input2_zero_point = 3;
                q.output_zero_point = -2;
                q.input1_multiplier = multiplier(rng);
                q.input1_shift = 0;
                q.input2_multiplier = multiplier(rng);
                q.input2_shift = -1;
                q.output_multiplier = multiplier(rng);
                q.output_shift = -19;
                int8_activation(l.activation, q.output_zero_point, q.output_zero_point + 120, q);
                break;
            case OP_RELU:
                // Input and output share scale and zero point (scale 0.05).
                q.input_zero_point = -3;
                q.output_zero_point = -3;
                int8_activation(l.activation == 2 ? 2 : 1, q.output_zero_point,
                                q.output_zero_point + 120, q);
                break;
            case OP_MAX_POOL:
            case OP_AVERAGE_POOL:
                q.input_zero_point = -128;
                q.output_zero_point = -128;
                int8_activation(l.activation, q.output_zero_point, q.output_zero_point + 255, q);
                break;
            case OP_TRANSPOSE_CONV:
                // As conv2d; TFLM's TRANSPOSE_CONV has no fused activation, so
                // the clamp is the int8 range (what the reference kernel uses).
                q.input_zero_point = -128;
                q.output_zero_point = -128;
                for (int32_t c = 0; c < l.output[3]; ++c) {
                    mult[c] = multiplier(rng);
                    shift[c] = -rng.range(6, 9);
                }
                q.channel_multiplier = mult;
                q.channel_shift = shift;
                int8_activation(0, q.output_zero_point, q.output_zero_point + 255, q);
                break;
            case OP_PAD:
                // Input and output share scale and zero point; TFLM's PAD pads
                // with the output zero point (non-zero here, so a padded
                // element is told from a zero one).
                q.input_zero_point = 7;
                q.output_zero_point = 7;
                break;
            default:  // matmul, concatenation: no arithmetic on quantised values
                break;
        }
    }

    const uint32_t es = static_cast<uint32_t>(ts);
    uint32_t id = 0;
    memtrace_layer_begin(name, op_name(l.op), g_params);
    memtrace_buffer(id++, MEMTRACE_ROLE_INPUT, b.input, static_cast<uint32_t>(in_n * ts), es,
                    "input");
    if (b.input2) {
        memtrace_buffer(id++, MEMTRACE_ROLE_INPUT, b.input2, static_cast<uint32_t>(in2_n * ts), es,
                        "input2");
    }
    if (b.filter) {
        memtrace_buffer(id++, MEMTRACE_ROLE_WEIGHTS, b.filter,
                        static_cast<uint32_t>(filter_n * ts), es, "filter");
    }
    if (b.bias) {
        memtrace_buffer(id++, MEMTRACE_ROLE_BIAS, b.bias, static_cast<uint32_t>(bias_n * 4), 4,
                        "bias");
    }
    memtrace_buffer(id++, MEMTRACE_ROLE_OUTPUT, b.output, static_cast<uint32_t>(out_n * ts), es,
                    "output");
    if (b.scratch) {
        memtrace_buffer(id++, MEMTRACE_ROLE_SCRATCH, b.scratch, b.scratch_bytes, 1, "scratch");
    }
    if (b.scratch2) {
        memtrace_buffer(id++, MEMTRACE_ROLE_SCRATCH, b.scratch2, b.scratch2_bytes, 1, "scratch2");
    }
    const int rc = run_kernel(l, b, q);
    memtrace_layer_end();
    if (rc != kExitOk) {
        return fail(rc, "the kernel library returned an error status for this layer");
    }

    // Bit-exactness: the library's int8 kernels are meant to match TFLM's
    // reference kernels bit for bit. The reference kernel runs on the same
    // inputs outside any window (so it adds nothing to the trace) and writes
    // its own output buffer.
    if (reference_output) {
        Buffers ref = b;
        ref.output = reference_output;
        ref.scratch = reference_scratch_buf;
        ref.scratch_bytes = reference_scratch;
        ref.scratch2 = nullptr;
        ref.scratch2_bytes = 0;
        run_reference_kernel(l, ref, q);
        const size_t bytes = static_cast<size_t>(out_n * ts);
        if (memcmp(reference_output, b.output, bytes) != 0) {
            return fail_mismatch(static_cast<const uint8_t *>(b.output),
                                 static_cast<const uint8_t *>(reference_output),
                                 static_cast<uint32_t>(bytes));
        }
    }
    return kExitOk;
}

}  // namespace memtrace
