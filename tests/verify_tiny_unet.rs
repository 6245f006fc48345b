//! TinySeg's Tiny U-Net (`zoo:tiny_unet_80x120_int8`) in the executor:
//! TRANSPOSE_CONV with its accumulator scratch in the arena and
//! CONCATENATION, on the TFLM reference kernels and on CMSIS-NN, under the
//! reference plan and a DMO plan; and TinySeg's int16 accumulator, which
//! halves the scratch and is exact only where every sum fits int16.

mod common;

use common::{memtrace, stderr, u};
use memtrace_model::export::{materialize, to_tflite};
use memtrace_model::zoo::GraphBuilder;
use memtrace_model::Dtype;
use serde_json::{json, Value};

const TINY_UNET: &str = "zoo:tiny_unet_80x120_int8";

/// `memtrace verify MODEL ARGS --format json` → (exit code, report).
fn verify(model: &str, args: &[&str]) -> (i32, Value) {
    let mut all = vec!["verify", "--runtime", "executor", model, "--format", "json"];
    all.extend_from_slice(args);
    let out = memtrace(&all);
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("memtrace {all:?}: no JSON ({e}): {}", stderr(&out)));
    (out.status.code().unwrap_or(-1), report)
}

/// Both runs clean and the plan's outputs equal the reference run's.
fn assert_clean(model: &str, r: &Value, code: i32) {
    assert_eq!(r["clobbers"], json!([]), "{model}: clobbers");
    assert_eq!(r["reference"]["clobbers"], json!([]), "{model}");
    assert_eq!(r["bit_exact"], true, "{model}: outputs differ");
    assert_eq!(code, 0, "{model}");
}

/// `memtrace plan MODEL --planner tflm-greedy ARGS`'s peak: the scratch as
/// the host computes TFLM's Prepare, without asking any executor.
fn planned_greedy_peak(model: &str, args: &[&str]) -> u64 {
    let mut all = vec![
        "plan",
        model,
        "--planner",
        "tflm-greedy",
        "--format",
        "json",
    ];
    all.extend_from_slice(args);
    let out = memtrace(&all);
    assert!(out.status.success(), "{}", stderr(&out));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    u(&r["plans"][0]["peak_bytes"])
}

/// Output bytes in which two reports' reference runs differ.
fn differing_bytes(a: &Value, b: &Value) -> usize {
    let (a, b) = (
        a["output_hex"].as_str().unwrap().as_bytes(),
        b["output_hex"].as_str().unwrap().as_bytes(),
    );
    assert_eq!(a.len(), b.len());
    a.chunks(2).zip(b.chunks(2)).filter(|(x, y)| x != y).count()
}

#[test]
fn tiny_unet_runs_clean_under_a_dmo_plan_with_tflm_s_scratch_in_the_arena() {
    let (code, r) = verify(TINY_UNET, &[]);
    assert_clean(TINY_UNET, &r, code);
    let (reference, plan) = (
        u(&r["reference"]["arena_bytes"]),
        u(&r["plan"]["arena_bytes"]),
    );
    // The executor's query (the reference kernels' scratch) and the host's
    // TFLM formula give the same greedy arena: x1, the up3 input, its output
    // and its 80x120x4 int32 accumulator at the last transpose convolution.
    assert_eq!(reference, planned_greedy_peak(TINY_UNET, &[]));
    assert_eq!(reference, 76_800 + 38_400 + 38_400 + 153_600);
    assert!(plan < reference, "DMO {plan} B is not below {reference} B");
    // Three scratch tensors (one per transpose convolution) are placed.
    let scratch = r["reference"]["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["name"].as_str().unwrap().ends_with("/scratch"))
        .map(|t| u(&t["size"]))
        .collect::<Vec<_>>();
    assert_eq!(scratch, [38_400, 76_800, 153_600]);
    // The traced O_s of a transpose convolution is its activation input's
    // (the executor's buffer 0), not the output-shape operand's.
    let up3 = r["traced_overlaps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["op"] == "up3/up")
        .unwrap();
    assert_eq!(
        (up3["input"].as_str(), u(&up3["input_bytes"])),
        (Some("up2/conv2"), 38_400)
    );
    // A real segmentation map, not a constant.
    assert!(
        r["output_distinct_bytes"].as_u64().unwrap() > 50,
        "{}",
        r["output_distinct_bytes"]
    );
}

/// TinySeg's temporary tensor quantisation on Tiny U-Net: the arena shrinks
/// by half the last accumulator, but with the seeded weights the int16
/// partial sums do not fit, and the segmentation map changes.
#[test]
fn tiny_unet_s_int16_accumulator_halves_the_scratch_but_is_not_exact() {
    let args = ["--planner", "tflm-greedy", "--overlap", "none"];
    let (code32, wide) = verify(TINY_UNET, &args);
    assert_clean(TINY_UNET, &wide, code32);
    let narrow_args = [&args[..], &["--accumulator", "int16"]].concat();
    let (code16, narrow) = verify(TINY_UNET, &narrow_args);
    assert_clean(TINY_UNET, &narrow, code16);
    let arena = u(&narrow["reference"]["arena_bytes"]);
    assert_eq!(
        arena,
        planned_greedy_peak(TINY_UNET, &["--accumulator", "int16"])
    );
    assert_eq!(arena, 76_800 + 38_400 + 38_400 + 153_600 / 2);
    let differ = differing_bytes(&wide, &narrow);
    eprintln!("int16 accumulator: {differ} of 9600 output bytes differ");
    assert!(differ > 0, "the int16 accumulator was exact on Tiny U-Net");
}

/// A one-operator model: a 2x2 stride-2 transpose convolution of an
/// 8x8xC int8 input to 4 channels, exported with seeded weights.
fn transpose_conv_model(dir: &std::path::Path, channels: u32) -> String {
    let mut g = GraphBuilder::new(format!("tconv{channels}"), Dtype::Int8);
    let x = g.input("input", &[1, 8, 8, channels]);
    let y = g.transpose_conv("up", x, 4, 2, 2);
    let model = materialize(&g.finish(&[y]), 1);
    let path = dir.join(format!("tconv{channels}.tflite"));
    std::fs::write(&path, to_tflite(&model).unwrap()).unwrap();
    path.display().to_string()
}

/// With one input channel a 2x2 stride-2 window puts exactly one product
/// (|x·w| ≤ 128·127 < 2^15) into each sum, so int16 is exact; with 64
/// full-range channels the sums overflow int16.
#[test]
fn the_int16_accumulator_is_exact_exactly_when_the_sums_fit() {
    let dir = std::env::temp_dir().join(format!("memtrace-tconv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (channels, exact) in [(1, true), (64, false)] {
        let model = transpose_conv_model(&dir, channels);
        let (c32, wide) = verify(&model, &[]);
        assert_clean(&model, &wide, c32);
        let (c16, narrow) = verify(&model, &["--accumulator", "int16"]);
        assert_clean(&model, &narrow, c16);
        assert_eq!(
            differing_bytes(&wide, &narrow) == 0,
            exact,
            "{channels} input channels"
        );
        // The scratch is 16x16x4 accumulators of 4, then 2 bytes.
        let scratch = |r: &Value| {
            r["reference"]["tensors"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["name"].as_str().unwrap().ends_with("/scratch"))
                .map(|t| u(&t["size"]))
        };
        assert_eq!(scratch(&wide), Some(16 * 16 * 4 * 4));
        assert_eq!(scratch(&narrow), Some(16 * 16 * 4 * 2));
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// CMSIS-NN's arm_transpose_conv_wrapper_s8 (the reversed-filter convolution
/// for more than 16 input channels, the row accumulator otherwise) and
/// arm_concatenation_s8_x give TFLM's reference results bit for bit.
#[test]
#[cfg_attr(no_cmsis, ignore = "CMSIS-NN guests not built: set CMSIS_NN_DIR")]
fn tiny_unet_on_cmsis_nn_is_bit_exact_with_the_reference_kernels() {
    let (code, r) = verify(TINY_UNET, &["--kernels", "cmsis-nn"]);
    assert_clean(TINY_UNET, &r, code);
    assert_eq!(r["reference_kernels"]["against"], "tflm");
    assert_eq!(
        r["reference_kernels"]["bit_exact"], true,
        "{}",
        r["reference_kernels"]
    );
    assert!(u(&r["plan"]["arena_bytes"]) < u(&r["reference"]["arena_bytes"]));
}
