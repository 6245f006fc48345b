//! memtrace's emulated outputs against the real, current TensorFlow Lite
//! Micro (PyPI `tflite-micro`), through `scripts/tflm_oracle.py`.
//!
//! Needs a Python with `tflite-micro` installed: set `MEMTRACE_TFLM_PYTHON`
//! to it (e.g. a venv's `bin/python`). Without it the test says so and
//! passes, so `cargo test` works on machines without the package.

mod common;

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn python() -> Option<PathBuf> {
    std::env::var_os("MEMTRACE_TFLM_PYTHON").map(PathBuf::from)
}

fn oracle(py: &PathBuf, model: &str) -> (i32, Value) {
    let out = Command::new(py)
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/tflm_oracle.py"))
        .arg(env!("CARGO_BIN_EXE_memtrace"))
        .arg(model)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("the oracle runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!(
            "{model}: oracle output {text:?} ({e}); stderr {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), v)
}

#[test]
fn emulated_outputs_are_bit_exact_with_current_tflm() {
    let Some(py) = python() else {
        eprintln!("MEMTRACE_TFLM_PYTHON is not set: skipping the tflite-micro oracle");
        return;
    };
    let tmp = std::env::temp_dir().join(format!("memtrace-oracle-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let sakr = tmp.join("sakr_cifar10_int8.tflite");
    let out = common::memtrace(["zoo", "export", "sakr_cifar10", sakr.to_str().unwrap()]);
    assert!(out.status.success());
    let mut models: Vec<String> = ["hello_world", "magic_wand"]
        .iter()
        .map(|m| common::tfmicro_model(m).display().to_string())
        .collect();
    models.push(sakr.display().to_string());
    for m in &models {
        let (code, v) = oracle(&py, m);
        assert_eq!(v["equal"], true, "{m}: {v}");
        assert_eq!(code, 0, "{m}: {v}");
    }
}
