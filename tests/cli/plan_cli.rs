//! `memtrace plan`: Table III-style planner comparisons from the command line.

use crate::common;

use common::*;
use serde_json::Value;

fn plan_json(args: &[&str]) -> Value {
    let mut all = vec!["plan"];
    all.extend_from_slice(args);
    all.extend(["--format", "json"]);
    let out = memtrace(&all);
    assert!(out.status.success(), "memtrace {all:?}: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn peak(report: &Value, planner: &str, overlap: &str) -> u64 {
    let plan = report["plans"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["planner"] == planner && p["overlap"] == overlap)
        .unwrap_or_else(|| panic!("no {planner}/{overlap} plan"));
    u(&plan["peak_bytes"])
}

#[test]
fn mobilenet_v1_025_128_int8_goes_from_96_to_64_kib_with_dmo() {
    let r = plan_json(&["zoo:mobilenet_v1_0.25_128_int8", "--overlap", "analytic"]);
    for key in ["model", "lower_bound_bytes", "plans"] {
        assert!(!r[key].is_null(), "missing {key}");
    }
    for p in r["plans"].as_array().unwrap() {
        for key in [
            "planner",
            "overlap",
            "peak_bytes",
            "gap_bytes",
            "status",
            "tensors",
        ] {
            assert!(!p[key].is_null(), "plan lacks {key}: {p}");
        }
        let t = &p["tensors"][0];
        for key in ["name", "offset", "size", "first_op", "last_op"] {
            assert!(!t[key].is_null(), "tensor lacks {key}");
        }
    }
    // The paper's Table III: 96 KB -> 64 KB (KB = KiB).
    assert_eq!(peak(&r, "dmo-heap", "none"), 96 * 1024);
    let dmo = peak(&r, "dmo-heap", "analytic");
    assert!((64 * 1024..=65 * 1024).contains(&dmo), "{dmo}");
}

#[test]
fn traced_overlaps_plan_like_the_algorithmic_method() {
    // Two independent O_s sources: the compiled kernels in the emulator and
    // the algorithmic loop nests. They agree per layer, so the plans agree.
    let traced = plan_json(&[
        "zoo:mobilenet_v1_0.25_128_int8",
        "--planner",
        "dmo-heap",
        "--overlap",
        "traced",
    ]);
    let algorithmic = plan_json(&[
        "zoo:mobilenet_v1_0.25_128_int8",
        "--planner",
        "dmo-heap",
        "--overlap",
        "algorithmic",
    ]);
    assert_eq!(
        peak(&traced, "dmo-heap", "traced"),
        peak(&algorithmic, "dmo-heap", "algorithmic")
    );
    assert_eq!(peak(&traced, "dmo-heap", "traced"), 64 * 1024 + 16);
}

/// A model of the `tfmicro` crate's registry copy, planned on real TFLM
/// (the default runtime); that crate's person detector is a hybrid model
/// TFLM refuses, and `plan` says so in TFLM's words instead of planning a
/// model no firmware can run.
#[test]
fn a_real_model_plans_and_its_offline_plan_round_trips() {
    let hybrid = tfmicro_model("person_detection_grayscale");
    let out = memtrace(["plan", path_str(&hybrid)]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("Hybrid models are not supported on TFLite Micro"),
        "{}",
        stderr(&out)
    );
    let model = tfmicro_model("magic_wand");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("planned.tflite");
    let r = plan_json(&[
        model.to_str().unwrap(),
        "--emit-offline",
        out.to_str().unwrap(),
    ]);
    let best = r["plans"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["peak_bytes"].as_u64())
        .min()
        .unwrap();
    assert!(best < peak(&r, "tflm-greedy", "none"));
    // The emitted model is a valid .tflite that plans again.
    let again = plan_json(&[out.to_str().unwrap(), "--planner", "tflm-greedy"]);
    assert_eq!(
        peak(&again, "tflm-greedy", "none"),
        peak(&r, "tflm-greedy", "none")
    );
}

#[test]
fn bad_plan_arguments_are_explained() {
    let out = memtrace([
        "plan",
        "zoo:mobilenet_v1_0.25_128_int8",
        "--planner",
        "magic",
    ]);
    // A value outside the planners is a usage error (exit 2), and the message
    // names the value and the planners there are.
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("'magic'") && err.contains("--planner"),
        "{err}"
    );
    assert!(
        err.contains("tflm-greedy") && err.contains("dmo-heap"),
        "{err}"
    );
    let out = memtrace(["plan", "zoo:no_such_model"]);
    assert_eq!(out.status.code(), Some(1));
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.tflite");
    std::fs::write(&bad, b"TFL3 but not really a model").unwrap();
    let out = memtrace(["plan", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(!stderr(&out).contains("panicked"));
}
