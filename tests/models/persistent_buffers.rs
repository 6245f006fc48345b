//! An operator's persistent buffers on the model path: TFLM's own
//! micro_speech audio preprocessor (its signal-library kernels keep FFT
//! work areas, filter-bank accumulators and noise estimates in memory they
//! allocate for themselves) runs with every state write its operator's own,
//! and verifies bit-exact with PyPI `tflite-micro`, on both kernel builds.

use crate::common;

use std::path::Path;

use super::verify_tflm_oracle::{oracle_with, python};
use common::{json, memtrace, stderr};
use serde_json::Value;

/// TFLM's audio preprocessor of the micro_speech example.
fn preprocessor() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/third_party/tflm-tests/tensorflow/lite/micro/examples/micro_speech/models/audio_preprocessor_int8.tflite")
        .display()
        .to_string()
}

const KERNELS: [&str; 2] = ["tflm", "cmsis-nn"];

#[test]
#[cfg_attr(no_tflm, ignore = "needs the TFLM runners (make -C harness-c)")]
fn the_audio_preprocessors_state_writes_are_its_operators_own() {
    let model = preprocessor();
    for kernels in KERNELS {
        let out = memtrace(["run", &model, "--kernels", kernels, "--format", "json"]);
        assert_eq!(out.status.code(), Some(0), "{kernels}: {}", stderr(&out));
        let report = json(&out);
        let layers = report["layers"].as_array().expect("layers");
        assert!(!layers.is_empty());
        let signal: Vec<&Value> = layers
            .iter()
            .filter(|l| l["op"].as_str().is_some_and(|o| o.starts_with("Signal")))
            .collect();
        assert!(
            signal.len() >= 3,
            "{kernels}: the signal operators are layers: {report}"
        );
        for l in layers {
            assert_eq!(
                l["contract"]["stray_write"]["violations"], 0,
                "{kernels}: {}: {}",
                l["name"], l["contract"]
            );
        }
    }
}

#[test]
#[cfg_attr(
    any(no_tflm, no_oracle),
    ignore = "needs the TFLM runners and MEMTRACE_TFLM_PYTHON (the tflite-micro oracle)"
)]
fn the_audio_preprocessor_verifies_bit_exact_with_tflite_micro_on_both_kernel_builds() {
    let model = preprocessor();
    for kernels in KERNELS {
        let (code, v) = oracle_with(&python(), &model, &["--kernels", kernels]);
        assert_eq!(v["equal"], true, "{kernels}: outputs differ: {v}");
        assert_eq!(v["memtrace_ok"], true, "{kernels}: verify failed: {v}");
        assert_eq!(code, 0, "{kernels}: {v}");
    }
}

/// `SignalEnergy` writes only its bins' range of its output and `CAST`
/// reads all of it: verify says so (a note, not a clobber: no plan
/// destroyed those bytes), and every such read is of a tensor an energy
/// operator produces, as `memtrace run`'s own layers name it.
#[test]
#[cfg_attr(no_tflm, ignore = "needs the TFLM runners (make -C harness-c)")]
fn verify_notes_the_bytes_a_partial_producer_leaves_unwritten() {
    let model = preprocessor();
    let out = memtrace(["run", &model, "--format", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let run = json(&out);
    let energy_outputs: Vec<&str> = run["layers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["op"] == "SignalEnergy")
        .flat_map(|l| l["buffers"].as_array().unwrap())
        .filter(|b| b["role"] == "output")
        .filter_map(|b| b["name"].as_str())
        .collect();
    assert!(!energy_outputs.is_empty(), "{}", run["layers"]);

    let out = memtrace(["verify", &model, "--no-oracle", "--format", "json"]);
    let v = json(&out);
    assert!(out.status.success(), "{v}");
    assert_eq!(v["clobbers"].as_array().map(Vec::len), Some(0), "{v}");
    let unwritten = v["unwritten_reads"].as_array().unwrap();
    assert!(!unwritten.is_empty(), "{v}");
    for r in unwritten {
        assert!(
            energy_outputs.contains(&r["tensor"].as_str().unwrap()),
            "{r} is no energy output ({energy_outputs:?})"
        );
    }
    let text = common::stdout(&memtrace(["verify", &model, "--no-oracle"]));
    assert!(
        text.contains(&format!(
            "note: {} read(s) of input bytes their producer never wrote",
            unwritten.len()
        )),
        "{text}"
    );
}
