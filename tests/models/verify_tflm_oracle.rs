//! memtrace's emulated outputs against the real, current TensorFlow Lite
//! Micro (PyPI `tflite-micro`), through `scripts/tflm_oracle.py`.
//!
//! Needs a Python with `tflite-micro` installed: set `MEMTRACE_TFLM_PYTHON`
//! to it (e.g. a venv's `bin/python`; `make test` does). Without it these
//! tests are reported as ignored, by name, with the reason (build.rs).

use crate::common;

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

/// The oracle's Python (the tests are ignored without one).
pub(crate) fn python() -> PathBuf {
    std::env::var_os("MEMTRACE_TFLM_PYTHON")
        .map(PathBuf::from)
        .expect("MEMTRACE_TFLM_PYTHON (build.rs ignores these tests without it)")
}

fn oracle(py: &PathBuf, model: &str) -> (i32, Value) {
    oracle_with(py, model, &[])
}

/// The oracle with `verify_args` passed on to `memtrace verify` (TFLM in
/// the emulator, held here to PyPI's TFLM on the host by the script).
pub(crate) fn oracle_with(py: &PathBuf, model: &str, verify_args: &[&str]) -> (i32, Value) {
    let out = Command::new(py)
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/tflm_oracle.py"))
        .arg(env!("CARGO_BIN_EXE_memtrace"))
        .arg(model)
        .arg("--")
        .args(verify_args)
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

/// Exports a zoo model to `dir` and returns its path.
fn export(dir: &std::path::Path, name: &str) -> String {
    let path = dir.join(format!("{name}.tflite"));
    let out = common::memtrace(["zoo", "export", name, path.to_str().unwrap()]);
    assert!(out.status.success(), "zoo export {name}");
    path.display().to_string()
}

/// Runs the oracle on `model` and checks what the issue asks of it:
/// bit-exact outputs, a clean `memtrace verify`, and memtrace's tflm-greedy
/// arena equal to the "Arena allocation head" TFLM prints for itself.
fn agrees_with_tflm(py: &PathBuf, model: &str) -> Value {
    let (code, v) = oracle(py, model);
    assert_eq!(v["equal"], true, "{model}: outputs differ: {v}");
    assert_eq!(v["memtrace_ok"], true, "{model}: verify failed: {v}");
    assert_eq!(code, 0, "{model}: {v}");
    assert!(v["tflm_arena_head_bytes"].is_u64(), "{model}: no head: {v}");
    assert_eq!(
        v["memtrace_greedy_bytes"], v["tflm_arena_head_bytes"],
        "{model}: tflm-greedy arena differs from TFLM's recorded head"
    );
    v
}

#[test]
#[cfg_attr(
    no_oracle,
    ignore = "MEMTRACE_TFLM_PYTHON not set: no tflite-micro oracle"
)]
fn float_example_models_are_bit_exact_with_current_tflm() {
    let py = python();
    for name in ["hello_world", "magic_wand"] {
        let v = agrees_with_tflm(&py, &common::tfmicro_model(name).display().to_string());
        // Bit-exact floats: not even one ulp apart (newlib's expf in the
        // emulated softmax gives the same bits as glibc's here).
        if let Some(ulp) = v.get("max_ulp") {
            assert_eq!(ulp, 0, "{name}: {v}");
        }
    }
}

#[test]
#[cfg_attr(
    no_oracle,
    ignore = "MEMTRACE_TFLM_PYTHON not set: no tflite-micro oracle"
)]
fn exported_int8_zoo_models_are_bit_exact_and_dmo_beats_tflm_s_arena() {
    let py = python();
    let tmp = std::env::temp_dir().join(format!("memtrace-oracle-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    // MobileNet v1 0.25/128 int8 is Table III's 96 KB -> 64 KB row; TFLM's
    // greedy needs 128 KiB for it (see docs/verify.md on tie order).
    for name in [
        "sakr_cifar10",
        "mobilenet_v1_0.25_128_int8",
        "mobilenet_v2_0.35_96_int8",
    ] {
        let v = agrees_with_tflm(&py, &export(&tmp, name));
        let head = v["tflm_arena_head_bytes"].as_u64().unwrap();
        let dmo = v["memtrace_plan_bytes"].as_u64().unwrap();
        assert!(
            dmo < head,
            "{name}: DMO {dmo} B is not below TFLM's {head} B"
        );
    }
    std::fs::remove_dir_all(&tmp).ok();
}

/// PAD in the emulated runner is PyPI TFLM's PAD: the Keras-style MobileNet v1 with an
/// explicit PAD before each stride-2 layer, exported and run by current
/// TFLM, gives memtrace's outputs bit for bit, TFLM's own arena head equals
/// memtrace's tflm-greedy (the PAD outputs make it 133 136 B instead of the
/// SAME-padded model's 131 072 B), and the DMO plan that overlaps the PAD
/// outputs with their inputs verifies clean — with the reference kernels
/// and with CMSIS-NN's arm_pad_s8.
#[test]
#[cfg_attr(
    no_oracle,
    ignore = "MEMTRACE_TFLM_PYTHON not set: no tflite-micro oracle"
)]
fn a_model_with_pad_is_bit_exact_with_current_tflm() {
    let py = python();
    let tmp = std::env::temp_dir().join(format!("memtrace-oracle-pad-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let model = export(&tmp, "mobilenet_v1_0.25_128_int8_zeropad");
    let v = agrees_with_tflm(&py, &model);
    assert_eq!(v["tflm_arena_head_bytes"], 133_136, "{v}");
    assert!(v["memtrace_plan_bytes"].as_u64().unwrap() < 133_136, "{v}");
    if !cfg!(no_cmsis) {
        let (code, v) = oracle_with(&py, &model, &["--kernels", "cmsis-nn"]);
        assert_eq!((v["equal"].clone(), code), (Value::Bool(true), 0), "{v}");
    }
    std::fs::remove_dir_all(&tmp).ok();
}

/// TinySeg's Tiny U-Net: TRANSPOSE_CONV and CONCATENATION bit-exact with
/// current TFLM, and TFLM's own arena head is memtrace's tflm-greedy arena,
/// the int32 accumulator of the last transpose convolution included
/// (80x120x8 + 40x60x16 + 80x120x4 + 80x120x4·4 bytes live there).
#[test]
#[cfg_attr(
    no_oracle,
    ignore = "MEMTRACE_TFLM_PYTHON not set: no tflite-micro oracle"
)]
fn tiny_unet_is_bit_exact_with_current_tflm_and_its_arena_head_is_tflm_greedy() {
    let py = python();
    let tmp = std::env::temp_dir().join(format!("memtrace-oracle-unet-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let v = agrees_with_tflm(&py, &export(&tmp, "tiny_unet_80x120_int8"));
    assert_eq!(
        v["tflm_arena_head_bytes"],
        76_800 + 38_400 + 38_400 + 153_600
    );
    let dmo = v["memtrace_plan_bytes"].as_u64().unwrap();
    assert!(dmo < 307_200, "DMO {dmo} B");
    std::fs::remove_dir_all(&tmp).ok();
}

/// CMSIS-NN's int8 kernels are designed to match TFLM's reference kernels
/// bit for bit: TFLM built with CMSIS-NN in the emulator gives PyPI TFLM's
/// outputs (its reference kernels), and the plan from CMSIS-NN's own traces
/// verifies clean on it.
#[test]
#[cfg_attr(
    no_oracle,
    ignore = "MEMTRACE_TFLM_PYTHON not set: no tflite-micro oracle"
)]
#[cfg_attr(
    all(no_cmsis, not(no_oracle)),
    ignore = "CMSIS-NN guests not built: set CMSIS_NN_DIR"
)]
fn the_cmsis_nn_build_is_bit_exact_with_current_tflm() {
    let py = python();
    let tmp = std::env::temp_dir().join(format!("memtrace-oracle-cmsis-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    for name in ["sakr_cifar10", "mobilenet_v2_0.35_96_int8"] {
        let model = export(&tmp, name);
        let (code, v) = oracle_with(&py, &model, &["--kernels", "cmsis-nn"]);
        assert_eq!(v["equal"], true, "{name}: outputs differ: {v}");
        assert_eq!(v["memtrace_ok"], true, "{name}: verify failed: {v}");
        assert_eq!(code, 0, "{name}: {v}");
    }
    std::fs::remove_dir_all(&tmp).ok();
}

/// MLPerf Tiny AD, the shortest model to verify.
fn ad_model() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/models/mlperf_tiny_ad_fc_autoencoder_int8.tflite")
}

/// The report of `memtrace verify MODEL ARGS` with the oracle's Python
/// installed, which must succeed.
fn verify_with_python(model: &std::path::Path, args: &[&str]) -> Vec<u8> {
    let out = Command::new(env!("CARGO_BIN_EXE_memtrace"))
        .arg("verify")
        .arg(model)
        .args(args)
        .env("MEMTRACE_TFLM_PYTHON", python())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("memtrace verify runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The host oracle takes a core while the plan under test runs. A short
/// plan run is then one timed run (a split trace's second run would compete
/// with the oracle's Python instead of using a free core). With
/// `--no-oracle` no Python runs, though one is installed, and the plan run
/// is a split trace; either way the report is the same, and the oracle
/// agrees.
#[test]
#[cfg_attr(
    no_oracle,
    ignore = "MEMTRACE_TFLM_PYTHON not set: no tflite-micro oracle"
)]
fn a_short_plan_run_beside_the_oracle_is_one_timed_run_with_the_same_report() {
    let model = ad_model();
    let verify = |extra: &[&str]| -> (Value, String) {
        let run = |format: &str| {
            let args = [&["--no-cache", "--format", format], extra].concat();
            verify_with_python(&model, &args)
        };
        let json = serde_json::from_slice(&run("json")).expect("a JSON report");
        (json, String::from_utf8(run("table")).unwrap())
    };
    let (mut beside, beside_text) = verify(&[]);
    let (mut alone, alone_text) = verify(&["--no-oracle"]);
    assert_eq!(beside["oracle"]["bit_exact"], true, "{}", beside["oracle"]);
    assert!(beside.get("oracle_off").is_none(), "{beside}");
    assert!(alone["oracle"].is_null());
    assert_eq!(alone["oracle_off"], true);
    assert!(
        beside_text.contains("host oracle (PyPI tflite-micro"),
        "{beside_text}"
    );
    assert!(
        alone_text.contains("host oracle: not run (--no-oracle)"),
        "{alone_text}"
    );
    // The rule is for a model whose reference run traced in under 0.2 s,
    // as AD's does on an idle machine (about 0.03 s); a machine busy with
    // other work may take longer, and then the plan run stays split.
    let short = beside["reference"]["seconds"].as_f64().unwrap() < 0.2;
    assert_eq!(
        beside["plan"]["runs"],
        if short { 1 } else { 2 },
        "one timed run beside the oracle after a reference run of {} s",
        beside["reference"]["seconds"]
    );
    assert_eq!(alone["plan"]["runs"], 2, "a split trace without it");
    assert_eq!(beside["reference"]["runs"], 2);
    for report in [&mut beside, &mut alone] {
        let r = report.as_object_mut().unwrap();
        r.remove("oracle");
        r.remove("oracle_off");
        r.remove("seconds");
        for run in ["reference", "plan"] {
            let run = r[run].as_object_mut().unwrap();
            run.remove("seconds");
            run.remove("runs");
        }
    }
    assert_eq!(beside, alone, "the same clobbers, placements and outputs");
}
