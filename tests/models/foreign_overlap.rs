//! A plan memtrace prints for a kernel library is safe on that library, or
//! says loudly that it is not. The analytic and
//! algorithmic O_s model the TFLM reference kernels' loop nests; CMSIS-NN
//! walks memory differently, so with `--kernels cmsis-nn` the default O_s
//! comes from CMSIS-NN's own traces, a reference-model O_s is refused for
//! `--emit-offline` unless `--allow-foreign-overlap`, every report that uses
//! one warns on stderr and in its JSON, and `verify` refuses a plan file made
//! for another library.

use crate::common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

/// A scratch directory removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("memtrace-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `zoo export NAME` into `dir`.
fn exported(dir: &TempDir, name: &str) -> PathBuf {
    let path = dir.join(&format!("{name}.tflite"));
    let out = memtrace(["zoo", "export", name, path_str(&path)]);
    assert!(out.status.success(), "{}", stderr(&out));
    path
}

fn plan(args: &[&str]) -> std::process::Output {
    let mut all = vec!["plan"];
    all.extend_from_slice(args);
    memtrace(&all)
}

fn plan_json(args: &[&str]) -> (Value, String) {
    let mut all = args.to_vec();
    all.extend(["--format", "json"]);
    let out = plan(&all);
    assert!(out.status.success(), "plan {all:?}: {}", stderr(&out));
    (json(&out), stderr(&out))
}

#[test]
#[cfg_attr(no_cmsis, ignore = "CMSIS-NN guests not built: set CMSIS_NN_DIR")]
fn plans_for_cmsis_nn_take_their_overlaps_from_cmsis_nn_traces_by_default() {
    let (r, err) = plan_json(&[
        "zoo:mobilenet_v1_0.25_128_int8",
        "--kernels",
        "cmsis-nn",
        "--planner",
        "dmo-heap",
    ]);
    assert_eq!(r["kernels"], "cmsis-nn");
    assert_eq!(r["overlap_source"], "traced");
    assert_eq!(r["overlap_kernels"], "cmsis-nn");
    assert_eq!(r["foreign_overlap"], false);
    assert_eq!(r["warnings"], serde_json::json!([]));
    assert_eq!(r["plans"][0]["overlap"], "traced", "{r}");
    assert!(!err.contains("WARNING"), "{err}");
    // The reference library too: the model's own run on TFLM is traced.
    let (t, err) = plan_json(&["zoo:mobilenet_v1_0.25_128_int8", "--planner", "dmo-heap"]);
    assert_eq!(t["kernels"], "tflm");
    assert_eq!(t["overlap_source"], "traced");
    assert_eq!(t["overlap_kernels"], "tflm");
    assert_eq!(t["foreign_overlap"], false);
    assert!(!err.contains("WARNING"), "{err}");
}

#[test]
#[cfg_attr(no_cmsis, ignore = "CMSIS-NN guests not built: set CMSIS_NN_DIR")]
fn a_reference_model_overlap_for_cmsis_nn_warns_on_stderr_and_in_the_json() {
    for source in ["analytic", "algorithmic"] {
        let (r, err) = plan_json(&[
            "zoo:tiny_unet_80x120_int8",
            "--kernels",
            "cmsis-nn",
            "--overlap",
            source,
            "--planner",
            "dmo-heap",
        ]);
        assert_eq!(r["overlap_source"], source);
        assert_eq!(r["overlap_kernels"], "tflm");
        assert_eq!(r["foreign_overlap"], true);
        let warnings = r["warnings"].as_array().unwrap();
        assert_eq!(warnings.len(), 1, "{r}");
        let w = warnings[0].as_str().unwrap();
        assert!(w.contains(source) && w.contains("cmsis-nn"), "{w}");
        assert!(err.contains(&format!("WARNING: {w}")), "{err}");
    }
    // No overlap is safe on every library: no warning.
    let (r, err) = plan_json(&[
        "zoo:tiny_unet_80x120_int8",
        "--kernels",
        "cmsis-nn",
        "--overlap",
        "none",
        "--planner",
        "dmo-heap",
    ]);
    assert_eq!(r["foreign_overlap"], false);
    assert!(r["overlap_kernels"].is_null(), "{r}");
    assert!(!err.contains("WARNING"), "{err}");
}

#[test]
#[cfg_attr(no_cmsis, ignore = "CMSIS-NN guests not built: set CMSIS_NN_DIR")]
fn emit_offline_refuses_a_reference_model_overlap_for_cmsis_nn_unless_allowed() {
    let dir = TempDir::new("foreign-emit");
    let model = exported(&dir, "tiny_unet_80x120_int8");
    let out_path = dir.join("o.tflite");
    let out = plan(&[
        path_str(&model),
        "--kernels",
        "cmsis-nn",
        "--overlap",
        "analytic",
        "--emit-offline",
        path_str(&out_path),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.starts_with("error: refusing to --emit-offline"),
        "{err}"
    );
    assert!(err.contains("--allow-foreign-overlap"), "{err}");
    assert!(
        !out_path.exists(),
        "a refused plan left {}",
        out_path.display()
    );

    let out = plan(&[
        path_str(&model),
        "--kernels",
        "cmsis-nn",
        "--overlap",
        "analytic",
        "--emit-offline",
        path_str(&out_path),
        "--allow-foreign-overlap",
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("WARNING: O_s source `analytic`"));
    assert_eq!(json(&out)["foreign_overlap"], true);
    assert!(out_path.exists());
}

/// `verify MODEL --plan PLAN ARGS --format json` → (exit code, stdout, stderr).
fn verify_plan(model: &Path, plan: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let dir = TempDir::new("foreign-plan");
    let path = dir.join("plan.json");
    std::fs::write(&path, plan).unwrap();
    let mut all = vec![
        "verify",
        path_str(model),
        "--plan",
        path_str(&path),
        "--format",
        "json",
    ];
    all.extend_from_slice(args);
    let out = memtrace(&all);
    (out.status.code(), stdout(&out), stderr(&out))
}

#[test]
#[cfg_attr(no_cmsis, ignore = "CMSIS-NN guests not built: set CMSIS_NN_DIR")]
fn verify_refuses_a_plan_made_for_another_library_unless_allowed() {
    let model = tfmicro_model("hello_world");
    // An empty placement keeps the reference offsets: safe everywhere, so
    // only its provenance can make verify refuse it.
    let made_for_tflm = r#"{"tensors": [], "kernels": "tflm"}"#;
    let (code, _, err) = verify_plan(&model, made_for_tflm, &["--kernels", "cmsis-nn"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.starts_with("error: "), "{err}");
    assert!(
        err.contains("made for the tflm kernels, not cmsis-nn"),
        "{err}"
    );
    assert!(err.contains("--allow-foreign-plan"), "{err}");

    let (code, out, err) = verify_plan(
        &model,
        made_for_tflm,
        &["--kernels", "cmsis-nn", "--allow-foreign-plan"],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("WARNING: "), "{err}");
    let r: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["warnings"].as_array().map(Vec::len), Some(1), "{r}");

    // Made for the library under test: no warning.
    let (code, out, err) = verify_plan(
        &model,
        r#"{"tensors": [], "kernels": "cmsis-nn"}"#,
        &["--kernels", "cmsis-nn"],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("WARNING"), "{err}");
    let r: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["warnings"], serde_json::json!([]), "{r}");
}

#[test]
fn verify_rejects_an_unknown_kernel_library_in_a_plan_file() {
    let model = tfmicro_model("hello_world");
    let (code, _, err) = verify_plan(&model, r#"{"tensors": [], "kernels": "cmsis"}"#, &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains(r#"unknown "kernels": "cmsis""#), "{err}");
}

#[test]
#[cfg_attr(no_cmsis, ignore = "CMSIS-NN guests not built: set CMSIS_NN_DIR")]
fn a_runner_of_another_library_than_kernels_is_an_error() {
    // The report must never say cmsis-nn when no
    // CMSIS-NN code ran, nor tflm when CMSIS-NN did.
    let model = tfmicro_model("hello_world");
    let reference = guest("cortex-m4", "tflm-runner");
    let cmsis = guest("cortex-m4", "tflm-runner-cmsis");
    for cmd in ["verify", "cold"] {
        for (kernels, runner, built_with) in [
            ("cmsis-nn", &reference, "tflm"),
            ("tflm", &cmsis, "cmsis-nn"),
        ] {
            let out = memtrace([
                cmd,
                path_str(&model),
                "--kernels",
                kernels,
                "--runner",
                path_str(runner),
            ]);
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(1), "{cmd} {kernels}: {err}");
            assert!(out.stdout.is_empty());
            assert!(
                err.starts_with("error: ")
                    && err.contains(&format!("is a {built_with} runner"))
                    && err.contains(&format!("--kernels {built_with}")),
                "{err}"
            );
        }
    }
    // Matching pairs run.
    for (kernels, runner) in [("tflm", &reference), ("cmsis-nn", &cmsis)] {
        let out = memtrace([
            "verify",
            path_str(&model),
            "--kernels",
            kernels,
            "--runner",
            path_str(runner),
        ]);
        assert_eq!(out.status.code(), Some(0), "{kernels}: {}", stderr(&out));
    }
}

/// The dmo-heap plan `plan --kernels KERNELS ARGS` prints for MobileNet v1
/// 0.25/128 int8, as a `verify --plan` file that says what it was made for.
fn plan_file(dir: &TempDir, kernels: &str, args: &[&str]) -> (PathBuf, u64) {
    let mut all = vec![
        "zoo:mobilenet_v1_0.25_128_int8",
        "--kernels",
        kernels,
        "--planner",
        "dmo-heap",
    ];
    all.extend_from_slice(args);
    let (r, _) = plan_json(&all);
    let p = &r["plans"][0];
    assert_eq!(p["order_name"], "model", "TFLM runs the model's order");
    let file = serde_json::json!({
        "tensors": p["tensors"].as_array().unwrap().iter().map(|t| serde_json::json!({
            "name": t["name"], "offset": t["offset"]})).collect::<Vec<_>>(),
        "arena_bytes": p["peak_bytes"],
        "kernels": r["kernels"],
        "overlap": r["overlap_source"],
    });
    let path = dir.join(&format!("{kernels}-{}.json", args.join("")));
    std::fs::write(&path, file.to_string()).unwrap();
    (path, u(&p["peak_bytes"]))
}

#[test]
#[cfg_attr(no_cmsis, ignore = "CMSIS-NN guests not built: set CMSIS_NN_DIR")]
fn the_plan_printed_for_cmsis_nn_verifies_clean_on_cmsis_nn_and_the_foreign_one_does_not() {
    let dir = TempDir::new("cmsis-plans");
    let verify = |path: &Path, extra: &[&str]| -> (Option<i32>, Value) {
        let mut all = vec![
            "verify",
            "zoo:mobilenet_v1_0.25_128_int8",
            "--kernels",
            "cmsis-nn",
            "--plan",
            path_str(path),
            "--format",
            "json",
        ];
        all.extend_from_slice(extra);
        let out = memtrace(&all);
        (out.status.code(), json(&out))
    };
    // The default: O_s traced from CMSIS-NN's own kernels.
    let (own, own_bytes) = plan_file(&dir, "cmsis-nn", &[]);
    let (code, r) = verify(&own, &[]);
    assert_eq!(r["clobbers"], serde_json::json!([]), "{r}");
    assert_eq!(r["bit_exact"], true);
    assert_eq!(code, Some(0));
    // The reference kernels' closed forms, which --emit-offline refuses for
    // cmsis-nn: smaller, and refuted by running it.
    let (foreign, foreign_bytes) = plan_file(&dir, "cmsis-nn", &["--overlap", "analytic"]);
    assert!(foreign_bytes < own_bytes, "{foreign_bytes} vs {own_bytes}");
    let (code, r) = verify(&foreign, &[]);
    assert_eq!(code, Some(1), "{r}");
    assert!(!r["clobbers"].as_array().unwrap().is_empty(), "{r}");
}
