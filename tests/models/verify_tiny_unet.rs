//! TinySeg's Tiny U-Net (`zoo:tiny_unet_80x120_int8`) on real TFLM:
//! TRANSPOSE_CONV with its int32 accumulator scratch in the arena and
//! CONCATENATION, on the TFLM reference kernels and on CMSIS-NN, under
//! TFLM's own plan and a DMO plan.

use crate::common;

use common::{json_run, u};
use memtrace_model::export::{materialize, to_tflite};
use memtrace_model::zoo::GraphBuilder;
use memtrace_model::Dtype;
use serde_json::{json, Value};

const TINY_UNET: &str = "zoo:tiny_unet_80x120_int8";

/// `memtrace verify MODEL ARGS --format json` → (exit code, report).
fn verify(model: &str, args: &[&str]) -> (i32, Value) {
    json_run(&[&["verify", model, "--no-oracle"], args].concat())
}

/// Both runs clean and the plan's outputs equal TFLM's own plan's.
fn assert_clean(model: &str, r: &Value, code: i32) {
    assert_eq!(r["clobbers"], json!([]), "{model}: clobbers");
    assert_eq!(u(&r["reference"]["clobbers"]), 0, "{model}");
    assert_eq!(r["bit_exact"], true, "{model}: outputs differ");
    assert_eq!(code, 0, "{model}");
}

/// The sizes of the scratch tensors `memtrace plan MODEL ARGS` places (TFLM's
/// scratch requests, one per operator that asks), in operator order, and
/// its `tflm-greedy` peak.
fn planned_scratch(model: &str, args: &[&str]) -> (Vec<u64>, u64) {
    let (code, r) = json_run(&[&["plan", model, "--planner", "tflm-greedy"], args].concat());
    assert_eq!(code, 0, "{r}");
    let plan = &r["plans"][0];
    let scratch = plan["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["name"].as_str().unwrap().ends_with("/scratch"))
        .map(|t| u(&t["size"]))
        .collect();
    (scratch, u(&plan["peak_bytes"]))
}

/// Distinct byte values of a report's outputs.
fn distinct_output_bytes(r: &Value) -> usize {
    let hex = r["output_hex"].as_str().unwrap().as_bytes();
    let mut seen = std::collections::BTreeSet::new();
    seen.extend(hex.chunks(2));
    seen.len()
}

#[test]
fn tiny_unet_runs_clean_under_a_dmo_plan_with_tflm_s_scratch_in_the_arena() {
    let (code, r) = verify(TINY_UNET, &["--planner", "dmo-heap"]);
    assert_clean(TINY_UNET, &r, code);
    let (reference, plan) = (
        u(&r["reference"]["head_bytes"]),
        u(&r["plan"]["planned_bytes"]),
    );
    // TFLM's own head, memtrace's tflm-greedy model of it, and the sum by
    // hand: x1, the up3 input, its output and its 80x120x4 int32
    // accumulator at the last transpose convolution.
    let (scratch, greedy) = planned_scratch(TINY_UNET, &[]);
    assert_eq!(reference, greedy);
    assert_eq!(reference, 76_800 + 38_400 + 38_400 + 153_600);
    assert!(plan < reference, "DMO {plan} B is not below {reference} B");
    // Three scratch tensors (one per transpose convolution), each an int32
    // accumulator of its output.
    assert_eq!(scratch, [38_400, 76_800, 153_600]);
    // The traced O_s of a transpose convolution is its activation input's,
    // not the output-shape operand's.
    let up3 = r["traced_overlaps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["output"] == "up3/up")
        .unwrap();
    assert_eq!(up3["op"], "TRANSPOSE_CONV");
    assert_eq!(up3["input"], "up2/conv2");
    // A real segmentation map, not a constant.
    let distinct = distinct_output_bytes(&r);
    assert!(distinct > 50, "{distinct}");
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

/// TFLM's TRANSPOSE_CONV asks for one int32 accumulator per output element
/// (16x16x4 of 4 bytes), whatever the input channels.
#[test]
fn a_transpose_convolution_s_scratch_is_its_int32_accumulator() {
    let dir = tempfile::tempdir().unwrap();
    for channels in [1, 64] {
        let model = transpose_conv_model(dir.path(), channels);
        let (code, r) = verify(&model, &[]);
        assert_clean(&model, &r, code);
        let (scratch, _) = planned_scratch(&model, &[]);
        assert_eq!(scratch, [16 * 16 * 4 * 4], "{channels} input channels");
    }
}

/// CMSIS-NN's arm_transpose_conv_wrapper_s8 (the reversed-filter convolution
/// for more than 16 input channels, the row accumulator otherwise) and
/// arm_concatenation_s8_x give TFLM's reference results bit for bit.
#[test]
#[cfg_attr(no_cmsis, ignore = "CMSIS-NN guests not built: set CMSIS_NN_DIR")]
fn tiny_unet_on_cmsis_nn_is_bit_exact_with_the_reference_kernels() {
    let (code, r) = verify(
        TINY_UNET,
        &["--kernels", "cmsis-nn", "--planner", "dmo-heap"],
    );
    assert_clean(TINY_UNET, &r, code);
    let (_, reference_kernels) = verify(TINY_UNET, &["--planner", "dmo-heap"]);
    assert_eq!(r["output_digest"], reference_kernels["output_digest"]);
    assert!(u(&r["plan"]["planned_bytes"]) < u(&r["reference"]["head_bytes"]));
}
