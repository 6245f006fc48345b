//! `memtrace verify` on the real model shipped in the `cmsis-nn-rs` 0.2.1
//! crate (`examples/mnist_forecast_model.tflite`, located in cargo's registry
//! copy through `harness-c/cmsis-nn-locator/`, never copied here).
//!
//! Its DMO plans put the RESHAPE (flatten) output exactly on its input, as
//! TFLM may: TFLM's reshape then copies nothing. The shadow map used to keep those bytes owned by the MAX_POOL_2D output and
//! reported a clobber on bit-exact outputs.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{json, memtrace, path_str, stderr, u};
use memtrace_model::{tflite, OpKind};
use serde_json::Value;

/// `examples/mnist_forecast_model.tflite` of the registry copy of
/// cmsis-nn-rs 0.2.1 (`cargo metadata` downloads it without building).
fn mnist_forecast_model() -> PathBuf {
    let manifest =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("harness-c/cmsis-nn-locator/Cargo.toml");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut found = None;
    for offline in [true, false] {
        let mut cmd = Command::new(&cargo);
        cmd.args(["metadata", "--format-version", "1", "--manifest-path"])
            .arg(&manifest);
        if offline {
            cmd.arg("--offline");
        }
        let out = cmd.output().expect("cargo metadata runs");
        if out.status.success() {
            found = Some(out.stdout);
            break;
        }
    }
    let meta: Value = serde_json::from_slice(&found.expect("cargo metadata on cmsis-nn-locator"))
        .expect("cargo metadata JSON");
    let manifest_path = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "cmsis-nn-rs" && p["version"] == "0.2.1")
        .and_then(|p| p["manifest_path"].as_str())
        .expect("cmsis-nn-rs 0.2.1 in cargo metadata")
        .to_owned();
    let model = Path::new(&manifest_path)
        .parent()
        .unwrap()
        .join("examples/mnist_forecast_model.tflite");
    assert!(model.exists(), "{}", model.display());
    model
}

/// (offset, size) where the plan of a verify report put a tensor, checked
/// to be where TFLM put it.
fn placed(report: &Value, name: &str) -> (u64, u64) {
    let t = report["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("tensor `{name}` not placed: {report}"));
    assert_eq!(t["planned_offset"], t["tflm_offset"], "{t}");
    (u(&t["planned_offset"]), u(&t["bytes"]))
}

#[test]
fn mnist_forecast_verifies_clean_and_bit_exact_under_every_planner() {
    let model_path = mnist_forecast_model();
    // The RESHAPE in question and its input, by the importer (independent of
    // verify's report).
    let model = tflite::import_file(&model_path).unwrap();
    let names = model.tensor_names();
    let reshape = model
        .ops
        .iter()
        .find(|o| o.kind == OpKind::Reshape)
        .expect("the model flattens with a RESHAPE");
    let (input, output) = (&names[reshape.inputs[0]], &names[reshape.outputs[0]]);
    assert!(output.contains("flatten"), "{output}");
    assert!(input.contains("MaxPool"), "{input}");

    let mut aliased = Vec::new();
    for planner in [
        "linear",
        "tflm-greedy",
        "dmo-heap",
        "replacement",
        "reorder",
        "exact",
    ] {
        let out = memtrace([
            "verify",
            path_str(&model_path),
            "--planner",
            planner,
            "--format",
            "json",
        ]);
        let report = json(&out);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{planner}: {}\n{}",
            stderr(&out),
            report["clobbers"]
        );
        assert_eq!(report["clobbers"], Value::Array(vec![]), "{planner}");
        assert_eq!(u(&report["reference"]["clobbers"]), 0);
        assert_eq!(report["bit_exact"], Value::Bool(true), "{planner}");
        assert_eq!(u(&report["mismatched_bytes"]), 0, "{planner}");
        assert!(u(&report["output_bytes"]) > 0);
        // Second method: where the plan put the two tensors.
        let (i0, isz) = placed(&report, input);
        let (o0, osz) = placed(&report, output);
        let overlap = (i0 + isz).min(o0 + osz).saturating_sub(i0.max(o0));
        if overlap > 0 {
            // The case that was reported as a clobber: the same bytes.
            assert_eq!((i0, isz), (o0, osz), "{planner}: partial overlap");
            aliased.push(planner);
        }
    }
    // Every DMO planner of the report aliases the reshape (so the clean
    // verdicts above are about the aliased plan, not a different one).
    assert_eq!(aliased, ["dmo-heap", "replacement", "reorder", "exact"]);
}
