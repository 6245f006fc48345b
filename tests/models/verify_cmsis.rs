//! `memtrace verify --kernels cmsis-nn`: whole models on TFLM built with
//! CMSIS-NN (`tflm-runner-cmsis.elf`). Its scratch buffers, asked of the
//! library in `Prepare`, are planned in the arena; its outputs equal the
//! reference kernels'; and a plan certified on one library's traces is run
//! on the other's.

use crate::common;

use common::json_run;
use serde_json::{json, Value};

/// `memtrace verify MODEL ARGS --format json` → (exit code, report).
fn verify(model: &str, args: &[&str]) -> (i32, Value) {
    json_run(&[&["verify", model], args].concat())
}

fn planned(r: &Value) -> u64 {
    r["plan"]["planned_bytes"].as_u64().unwrap()
}

/// The tensor called `name` in a `plan` row: (offset, size).
fn placed(plan: &Value, name: &str) -> Option<(u64, u64)> {
    plan["tensors"].as_array().unwrap().iter().find_map(|t| {
        (t["name"] == name).then(|| (t["offset"].as_u64().unwrap(), t["size"].as_u64().unwrap()))
    })
}

/// The O_s a report traced for operator `op`.
fn traced_os(r: &Value, op: &str) -> u64 {
    r["traced_overlaps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| op.starts_with(&format!("{}:{}:", t["index"], t["op"].as_str().unwrap())))
        .and_then(|t| t["monotone_bytes"].as_u64())
        .unwrap_or_else(|| panic!("no traced O_s of {op} in {r}"))
}

#[test]
#[cfg_attr(no_cmsis, ignore = "CMSIS-NN guests not built: set CMSIS_NN_DIR")]
fn cmsis_nn_runs_int8_models_bit_exact_with_the_reference_kernels() {
    for model in ["zoo:sakr_cifar10", "zoo:mobilenet_v2_0.35_96_int8"] {
        let (code, c) = verify(model, &["--kernels", "cmsis-nn"]);
        assert_eq!(c["kernels"], "cmsis-nn");
        assert_eq!(c["clobbers"], json!([]), "{model}");
        assert_eq!(c["bit_exact"], true, "{model}");
        assert_eq!(code, 0, "{model}");
        // Second method: a separate verify on the reference kernels.
        let (_, t) = verify(model, &[]);
        assert_eq!(t["kernels"], "tflm");
        assert_eq!(c["output_digest"], t["output_digest"], "{model}");
    }
}

#[test]
#[cfg_attr(no_cmsis, ignore = "CMSIS-NN guests not built: set CMSIS_NN_DIR")]
fn the_librarys_scratch_buffer_is_a_planned_arena_tensor() {
    let model = "zoo:mobilenet_v1_0.25_128_int8";
    let (code, doc) = json_run(&["plan", model, "--kernels", "cmsis-nn"]);
    assert_eq!(code, 0, "{doc}");
    // conv1 is a 3x3 conv over 3 channels. CMSIS-NN's DSP build of
    // arm_convolve_s8_get_buffer_size needs two int16 im2col columns of
    // 3*3*3 values rounded up to a multiple of 4 (Source/ConvolutionFunctions
    // /arm_convolve_get_buffer_sizes_s8.c), computed here from that rule.
    let cols = 3 * 3 * 3_u64;
    let expected = 2 * cols.div_ceil(4) * 4 * 2;
    for plan in doc["plans"].as_array().unwrap() {
        if plan["peak_bytes"].is_null() {
            continue;
        }
        let what = format!("{} ({})", plan["planner"], plan["overlap"]);
        let (at, size) = placed(plan, "conv1/scratch").expect("conv1/scratch is placed");
        assert_eq!(size, expected, "{what}");
        // It shares no byte with conv1's input or output, which are live
        // during the same operator.
        for other in ["input", "conv1"] {
            let (o, s) = placed(plan, other).unwrap();
            assert!(
                at + size <= o || o + s <= at,
                "{what}: scratch overlaps {other}"
            );
        }
        assert!(at + size <= plan["peak_bytes"].as_u64().unwrap(), "{what}");
    }
    // The reference kernels ask for none.
    let (_, t) = json_run(&["plan", model]);
    for plan in t["plans"].as_array().unwrap() {
        assert!(placed(plan, "conv1/scratch").is_none());
    }
}

/// The headline: the DMO plan memtrace certifies for the reference kernels
/// of MobileNet v1 0.25, run on CMSIS-NN, and the plan built from the
/// CMSIS-NN traces.
#[test]
#[cfg_attr(no_cmsis, ignore = "CMSIS-NN guests not built: set CMSIS_NN_DIR")]
fn a_plan_certified_on_the_reference_kernels_is_proven_or_refuted_on_cmsis_nn() {
    let model = "zoo:mobilenet_v1_0.25_128_int8";
    let dmo = ["--planner", "dmo-heap", "--no-oracle"];
    let (code, tflm) = verify(model, &dmo);
    assert_eq!(code, 0, "the reference-kernel plan is certified there");
    let cross_args = [
        &dmo[..],
        &["--kernels", "cmsis-nn", "--overlap-from", "tflm"],
    ]
    .concat();
    let (cross_code, cross) = verify(model, &cross_args);
    let (own_code, own) = verify(model, &[&dmo[..], &["--kernels", "cmsis-nn"]].concat());
    assert_eq!(cross["overlap_kernels"], "tflm");
    assert_eq!(own["overlap_kernels"], "cmsis-nn");
    let clobbers = cross["clobbers"].as_array().unwrap();
    if clobbers.is_empty() {
        assert_eq!(cross["bit_exact"], true);
        assert_eq!(cross_code, 0);
    } else {
        assert_eq!(cross_code, 1);
        // Second method: every clobbering operator is one whose O_s on the
        // reference kernels exceeds the O_s CMSIS-NN's own trace allows.
        for c in clobbers {
            let op = c["op"].as_str().unwrap();
            assert!(c["offset"].is_u64() && c["tensor"].is_string());
            let (reference, library) = (traced_os(&tflm, op), traced_os(&own, op));
            assert!(
                reference > library,
                "{op}: the reference kernels' O_s {reference} is within CMSIS-NN's {library}"
            );
        }
    }
    // The plan from CMSIS-NN's own traces runs clean and bit-exact, and
    // still saves memory over TFLM's own plan.
    assert_eq!(own["clobbers"], json!([]));
    assert_eq!(own["bit_exact"], true);
    assert_eq!(own_code, 0);
    assert!(planned(&own) < own["reference"]["head_bytes"].as_u64().unwrap());
}
