//! `memtrace verify --kernels cmsis-nn`: whole models on the CMSIS-NN
//! executor (`executor-cmsis.elf`). Its scratch buffers are asked of the
//! library and planned in the arena; its outputs are compared with TFLM's
//! reference kernels; and a plan certified on one library's traces is run on
//! the other's.

mod common;

use common::{memtrace, stderr};
use serde_json::{json, Value};

/// `memtrace verify MODEL ARGS --format json` → (exit code, report).
fn verify(model: &str, args: &[&str]) -> (i32, Value) {
    let mut all = vec!["verify", "--runtime", "executor", model, "--format", "json"];
    all.extend(args);
    let out = memtrace(&all);
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("memtrace {all:?}: no JSON ({e}): {}", stderr(&out)));
    (out.status.code().unwrap_or(-1), report)
}

fn arena(r: &Value, run: &str) -> u64 {
    r[run]["arena_bytes"].as_u64().unwrap()
}

/// The placed tensor called `name` in `run`: (offset, size).
fn placed(r: &Value, run: &str, name: &str) -> Option<(u64, u64)> {
    r[run]["tensors"].as_array().unwrap().iter().find_map(|t| {
        (t["name"] == name).then(|| (t["offset"].as_u64().unwrap(), t["size"].as_u64().unwrap()))
    })
}

#[test]
#[cfg_attr(no_cmsis, ignore = "CMSIS-NN guests not built: set CMSIS_NN_DIR")]
fn cmsis_nn_runs_int8_models_bit_exact_with_the_reference_kernels() {
    for model in ["zoo:sakr_cifar10", "zoo:mobilenet_v2_0.35_96_int8"] {
        let (code, c) = verify(model, &["--kernels", "cmsis-nn"]);
        assert_eq!(c["kernels"], "cmsis-nn");
        assert_eq!(c["clobbers"], json!([]), "{model}");
        assert_eq!(c["bit_exact"], true, "{model}");
        assert_eq!(c["reference_kernels"]["bit_exact"], true, "{model}");
        assert_eq!(code, 0, "{model}");
        // Second method: a separate verify on the reference executor.
        let (_, t) = verify(model, &[]);
        assert_eq!(t["kernels"], "tflm");
        assert!(t["reference_kernels"].is_null());
        assert_eq!(c["output_digest"], t["output_digest"], "{model}");
        assert_eq!(c["reference_kernels"]["output_digest"], t["output_digest"]);
    }
}

#[test]
#[cfg_attr(no_cmsis, ignore = "CMSIS-NN guests not built: set CMSIS_NN_DIR")]
fn the_librarys_scratch_buffer_is_a_planned_arena_tensor() {
    let (code, r) = verify("zoo:mobilenet_v1_0.25_128_int8", &["--kernels", "cmsis-nn"]);
    assert_eq!(code, 0, "{r}");
    // conv1 is a 3x3 conv over 3 channels. CMSIS-NN's DSP build of
    // arm_convolve_s8_get_buffer_size needs two int16 im2col columns of
    // 3*3*3 values rounded up to a multiple of 4 (Source/ConvolutionFunctions
    // /arm_convolve_get_buffer_sizes_s8.c), computed here from that rule.
    let cols = 3 * 3 * 3_u64;
    let expected = 2 * cols.div_ceil(4) * 4 * 2;
    for run in ["reference", "plan"] {
        let (at, size) = placed(&r, run, "conv1/scratch").expect("conv1/scratch is placed");
        assert_eq!(size, expected, "{run}");
        // It shares no byte with conv1's input or output, which are live
        // during the same operator.
        for other in ["input", "conv1"] {
            let (o, s) = placed(&r, run, other).unwrap();
            assert!(
                at + size <= o || o + s <= at,
                "{run}: scratch overlaps {other}"
            );
        }
        assert!(at + size <= arena(&r, run));
    }
    // The reference executor needs none.
    let (_, t) = verify("zoo:mobilenet_v1_0.25_128_int8", &[]);
    assert!(placed(&t, "plan", "conv1/scratch").is_none());
}

/// The headline: the DMO plan memtrace certifies for the reference kernels
/// of MobileNet v1 0.25, run on CMSIS-NN, and the plan built from the
/// CMSIS-NN traces.
#[test]
#[cfg_attr(no_cmsis, ignore = "CMSIS-NN guests not built: set CMSIS_NN_DIR")]
fn a_plan_certified_on_the_reference_kernels_is_proven_or_refuted_on_cmsis_nn() {
    let model = "zoo:mobilenet_v1_0.25_128_int8";
    let (code, tflm) = verify(model, &[]);
    assert_eq!(code, 0, "the reference-kernel plan is certified there");
    let (cross_code, cross) = verify(model, &["--kernels", "cmsis-nn", "--overlap-from", "tflm"]);
    let (own_code, own) = verify(model, &["--kernels", "cmsis-nn"]);
    assert_eq!(cross["overlap_kernels"], "tflm");
    assert_eq!(own["overlap_kernels"], "cmsis-nn");
    // The same DMO overlaps as the certified plan: same arena.
    assert_eq!(arena(&cross, "plan"), arena(&tflm, "plan"));
    let clobbers = cross["clobbers"].as_array().unwrap();
    if clobbers.is_empty() {
        assert_eq!(cross["bit_exact"], true);
        assert_eq!(cross_code, 0);
    } else {
        assert_eq!(cross_code, 1);
        // Second method: every clobbering operator is one whose overlap in
        // the plan exceeds the O_s CMSIS-NN's own trace allows.
        let traced: Vec<&Value> = own["traced_overlaps"].as_array().unwrap().iter().collect();
        for c in clobbers {
            let op = c["op"].as_str().unwrap();
            assert!(c["offset"].is_u64() && c["tensor"].is_string());
            let used = cross["plan"]["overlaps_used"]
                .as_array()
                .unwrap()
                .iter()
                .find(|u| u["op"] == op)
                .unwrap_or_else(|| panic!("{op} clobbers without a DMO overlap"));
            let safe = traced
                .iter()
                .find(|t| t["op"] == op)
                .and_then(|t| t["monotone_bytes"].as_u64())
                .unwrap();
            assert!(
                used["bytes"].as_u64().unwrap() > safe,
                "{op}: used {} within CMSIS-NN's O_s {safe}",
                used["bytes"]
            );
        }
    }
    // The plan from CMSIS-NN's own traces runs clean and bit-exact, and
    // still saves memory over TFLM's greedy plan.
    assert_eq!(own["clobbers"], json!([]));
    assert_eq!(own["bit_exact"], true);
    assert_eq!(own_code, 0);
    assert!(arena(&own, "plan") < arena(&own, "reference"));
}
