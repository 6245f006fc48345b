//! `memtrace run` on real TFLM reference kernels: buffers, access counts and
//! O_s, each checked against a number derived independently here.

use crate::common;

use common::*;

const TARGETS: [&str; 2] = ["cortex-m4", "x86_64"];

#[test]
fn relu_overlap_is_the_whole_output() {
    // Element-wise: input element i is read just before output element i is
    // written, so the output may sit fully on the input (in place).
    for target in TARGETS {
        for dtype in ["f32", "int8"] {
            let layer = job_layer(target, &format!("op=relu,dtype={dtype},input=1x7x9x5"));
            let out_bytes = 7 * 9 * 5 * if dtype == "f32" { 4 } else { 1 };
            assert_eq!(u(&buffer(&layer, "output")["size"]), out_bytes);
            assert_eq!(
                u(&layer["overlap"]["monotone_bytes"]),
                out_bytes,
                "{target} {dtype}"
            );
            assert_eq!(
                u(&layer["overlap"]["exact_bytes"]),
                out_bytes,
                "{target} {dtype}"
            );
        }
    }
}

#[test]
fn accumulating_matmul_updates_its_output_and_cannot_overlap() {
    // C (MxN) is zeroed, then for k: for m: for n: C[m][n] += A[m][k]*B[k][n].
    // Hand derivation: the zeroing pass writes every output byte (M = OB)
    // before A[0][0] (offset 0) is read, so O_s = OB - OB + 0 = 0; exact is 0
    // too because that read of input byte 0 comes after the write of the last
    // output byte. Every k-slice rewrites all M*N elements: K*M*N updates.
    let (m, k, n) = (6u64, 5u64, 7u64);
    let layer = job_layer(
        "cortex-m4",
        &format!("op=matmul,dtype=f32,input={m}x{k},filter={k}x{n}"),
    );
    let out = buffer(&layer, "output");
    assert_eq!(u(&out["size"]), m * n * 4);
    assert_eq!(u(&out["stores"]), m * n, "one first write per f32 element");
    assert_eq!(u(&out["updates"]), k * m * n);
    assert_eq!(u(&layer["overlap"]["monotone_bytes"]), 0);
    assert_eq!(u(&layer["overlap"]["exact_bytes"]), 0);
}

/// Loads of input and filter by TFLM's reference Conv: for every output pixel
/// and output channel, every filter tap that lands inside the image reads all
/// input channels once.
fn conv_loads(
    input: [u64; 3],
    filter: [u64; 3],
    out_c: u64,
    stride: u64,
    pad: u64,
    out: [u64; 2],
) -> u64 {
    let [ih, iw, ic] = input;
    let [kh, kw, _] = filter;
    let mut taps = 0;
    for oy in 0..out[0] {
        for ox in 0..out[1] {
            for fy in 0..kh {
                for fx in 0..kw {
                    let y = (oy * stride + fy) as i64 - pad as i64;
                    let x = (ox * stride + fx) as i64 - pad as i64;
                    if (0..ih as i64).contains(&y) && (0..iw as i64).contains(&x) {
                        taps += 1;
                    }
                }
            }
        }
    }
    taps * ic * out_c
}

#[test]
fn conv_load_count_is_valid_taps_times_channels() {
    // 9x7 input, 3x3 filter, stride 2, SAME: output 5x4; TFLite pads
    // ((5-1)*2+3-9)/2 = 1 row and ((4-1)*2+3-7)/2 = 1 column before.
    let layer = job_layer(
        "cortex-m4",
        "op=conv2d,dtype=f32,input=1x9x7x3,filter=4x3x3x3,stride=2,padding=same",
    );
    let expected = conv_loads([9, 7, 3], [3, 3, 3], 4, 2, 1, [5, 4]);
    assert_eq!(u(&buffer(&layer, "input")["loads"]), expected);
    assert_eq!(u(&buffer(&layer, "filter")["loads"]), expected);
    assert_eq!(u(&buffer(&layer, "output")["stores"]), 5 * 4 * 4);
    assert_eq!(u(&buffer(&layer, "output")["updates"]), 0);
}

#[test]
fn same_reference_layers_give_the_same_overlap_on_both_targets() {
    // The built-in MobileNet layers compiled for Thumb-2 and for x86-64: the
    // loop order is TFLM's in both, so O_s must agree to the byte.
    let m4 = run_json(&guest("cortex-m4", "suite"), &[]);
    let x86 = run_json(&guest("x86_64", "suite"), &[]);
    let layers = |r: &serde_json::Value| r["layers"].as_array().unwrap().clone();
    let (a, b) = (layers(&m4), layers(&x86));
    assert_eq!(a.len(), 5);
    assert_eq!(a.len(), b.len());
    for (l4, l8) in a.iter().zip(&b) {
        assert_eq!(l4["name"], l8["name"]);
        assert_eq!(l4["overlap"], l8["overlap"], "layer {}", l4["name"]);
        // Same kernels, same data-independent access pattern: same counts.
        for name in ["input", "filter", "output"] {
            assert_eq!(buffer(l4, name)["loads"], buffer(l8, name)["loads"]);
        }
    }
}

#[test]
fn table_one_layer_has_the_papers_exact_overlap() {
    // DMO paper Table I: float32 depthwise 3x3, 112x112x96 -> 56x56x96,
    // stride 2; exact O_s 1 204 224 B (= the whole 56*56*96*4 output).
    let layer = job_layer(
        "cortex-m4",
        "op=depthwise_conv2d,dtype=f32,input=1x112x112x96,filter=1x3x3x96,stride=2,padding=same",
    );
    assert_eq!(u(&buffer(&layer, "output")["size"]), 56 * 56 * 96 * 4);
    assert_eq!(u(&layer["overlap"]["exact_bytes"]), 1_204_224);
    // The input is four times the output, so an O_s of the whole output
    // saves a fifth of the pair: a share of the memory, never over 100.
    let saving = layer["overlap"]["exact_saving_percent"].as_f64().unwrap();
    assert!((saving - 20.0).abs() < 1e-9, "{saving}");
}
