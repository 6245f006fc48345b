// dw_channel_outer.h — a locally written depthwise convolution whose loop
// nest differs from TFLM's reference kernel: the channel loops are outermost
// (channel, multiplier, row, column) instead of innermost. Each output value
// is computed with the same operations in the same order (filter rows, then
// filter columns, then bias, requantisation and clamp), so the results are
// bit-identical to the reference kernel; only the order in which output
// elements are produced changes.
//
// Used by suite-modified.elf to show that `memtrace regress` notices when a
// kernel library change shrinks a layer's safe overlap O_s: writing channel 0
// of every pixel first pushes the highest written output byte near the end of
// the buffer while the other channels of the first input rows are still
// unread.
#ifndef MEMTRACE_DW_CHANNEL_OUTER_H
#define MEMTRACE_DW_CHANNEL_OUTER_H

#include "tensorflow/lite/kernels/internal/common.h"
#include "tensorflow/lite/kernels/internal/types.h"

namespace memtrace {
namespace channel_outer {

struct DwGeometry {
    int batches, in_h, in_w, in_c, out_h, out_w, out_c, k_h, k_w;
    int stride_h, stride_w, dil_h, dil_w, pad_h, pad_w, mult;
};

inline DwGeometry geometry(const tflite::DepthwiseParams &p, const tflite::RuntimeShape &in,
                           const tflite::RuntimeShape &filter, const tflite::RuntimeShape &out) {
    DwGeometry g;
    g.batches = in.Dims(0);
    g.in_h = in.Dims(1);
    g.in_w = in.Dims(2);
    g.in_c = in.Dims(3);
    g.k_h = filter.Dims(1);
    g.k_w = filter.Dims(2);
    g.out_h = out.Dims(1);
    g.out_w = out.Dims(2);
    g.out_c = out.Dims(3);
    g.stride_h = p.stride_height;
    g.stride_w = p.stride_width;
    g.dil_h = p.dilation_height_factor;
    g.dil_w = p.dilation_width_factor;
    g.pad_h = p.padding_values.height;
    g.pad_w = p.padding_values.width;
    g.mult = p.depth_multiplier;
    return g;
}

// Visits every output element in channel-outer order and hands the
// computation of each to `fn(batch, in_channel, out_channel, out_y, out_x)`.
template <typename Fn>
inline void for_each_output_channel_outer(const DwGeometry &g, Fn fn) {
    for (int ic = 0; ic < g.in_c; ++ic) {
        for (int m = 0; m < g.mult; ++m) {
            const int oc = ic * g.mult + m;
            for (int b = 0; b < g.batches; ++b) {
                for (int oy = 0; oy < g.out_h; ++oy) {
                    for (int ox = 0; ox < g.out_w; ++ox) {
                        fn(b, ic, oc, oy, ox);
                    }
                }
            }
        }
    }
}

inline void DepthwiseConv(const tflite::DepthwiseParams &p, const tflite::RuntimeShape &in_shape,
                          const float *in, const tflite::RuntimeShape &filter_shape,
                          const float *filter, const tflite::RuntimeShape &bias_shape,
                          const float *bias, const tflite::RuntimeShape &out_shape, float *out) {
    (void)bias_shape;
    const DwGeometry g = geometry(p, in_shape, filter_shape, out_shape);
    for_each_output_channel_outer(g, [&](int b, int ic, int oc, int oy, int ox) {
        const int y0 = oy * g.stride_h - g.pad_h;
        const int x0 = ox * g.stride_w - g.pad_w;
        float sum = 0.0f;
        for (int ky = 0; ky < g.k_h; ++ky) {
            const int y = y0 + ky * g.dil_h;
            for (int kx = 0; kx < g.k_w; ++kx) {
                const int x = x0 + kx * g.dil_w;
                if (y >= 0 && y < g.in_h && x >= 0 && x < g.in_w) {
                    sum += in[((b * g.in_h + y) * g.in_w + x) * g.in_c + ic] *
                           filter[(ky * g.k_w + kx) * g.out_c + oc];
                }
            }
        }
        const float bias_value = bias ? bias[oc] : 0.0f;
        out[((b * g.out_h + oy) * g.out_w + ox) * g.out_c + oc] =
            tflite::ActivationFunctionWithMinMax(sum + bias_value, p.float_activation_min,
                                                 p.float_activation_max);
    });
}

inline void DepthwiseConvPerChannel(const tflite::DepthwiseParams &p, const int32_t *multiplier,
                                    const int32_t *shift, const tflite::RuntimeShape &in_shape,
                                    const int8_t *in, const tflite::RuntimeShape &filter_shape,
                                    const int8_t *filter, const tflite::RuntimeShape &bias_shape,
                                    const int32_t *bias, const tflite::RuntimeShape &out_shape,
                                    int8_t *out) {
    (void)bias_shape;
    const DwGeometry g = geometry(p, in_shape, filter_shape, out_shape);
    for_each_output_channel_outer(g, [&](int b, int ic, int oc, int oy, int ox) {
        const int y0 = oy * g.stride_h - g.pad_h;
        const int x0 = ox * g.stride_w - g.pad_w;
        int32_t acc = 0;
        for (int ky = 0; ky < g.k_h; ++ky) {
            const int y = y0 + ky * g.dil_h;
            for (int kx = 0; kx < g.k_w; ++kx) {
                const int x = x0 + kx * g.dil_w;
                if (y >= 0 && y < g.in_h && x >= 0 && x < g.in_w) {
                    const int32_t iv = in[((b * g.in_h + y) * g.in_w + x) * g.in_c + ic];
                    const int32_t fv = filter[(ky * g.k_w + kx) * g.out_c + oc];
                    acc += fv * (iv + p.input_offset);
                }
            }
        }
        if (bias) {
            acc += bias[oc];
        }
        acc = tflite::MultiplyByQuantizedMultiplier(acc, multiplier[oc], shift[oc]);
        acc += p.output_offset;
        acc = acc < p.quantized_activation_min ? p.quantized_activation_min : acc;
        acc = acc > p.quantized_activation_max ? p.quantized_activation_max : acc;
        out[((b * g.out_h + oy) * g.out_w + ox) * g.out_c + oc] = static_cast<int8_t>(acc);
    });
}

}  // namespace channel_outer
}  // namespace memtrace

#endif  // MEMTRACE_DW_CHANNEL_OUTER_H
