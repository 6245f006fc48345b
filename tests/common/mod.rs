//! Helpers shared by the integration tests: run the real `memtrace` binary on
//! the real guest ELFs built by `make -C harness-c`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

pub mod unit_tests;

/// A public model of `../shared/models/` (never copied into the repository).
pub fn shared_model(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/models")
        .join(name);
    assert!(p.exists(), "{} is missing", p.display());
    p.display().to_string()
}

/// `memtrace ARGS --format json`, which must succeed: its report.
pub fn json_ok(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["--format", "json"]);
    let out = memtrace(&all);
    assert!(
        out.status.success(),
        "memtrace {}: {}",
        all.join(" "),
        stderr(&out)
    );
    json(&out)
}

/// Path of a guest built by the harness, e.g. `guest("cortex-m4", "suite")`.
pub fn guest(target: &str, name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("harness-c/build")
        .join(target)
        .join(format!("{name}.elf"));
    assert!(
        path.exists(),
        "{} is missing: build the guests first (`make -C harness-c`, or `make test`)",
        path.display()
    );
    path
}

/// The DMO paper's Table I layer as a `--job` spec.
pub const TABLE_ONE: &str =
    "op=depthwise_conv2d,dtype=f32,input=1x112x112x96,filter=1x3x3x96,stride=2,padding=same";

/// The kernel suite of a target.
pub fn suite(target: &str) -> PathBuf {
    guest(target, "suite")
}

/// The kernel suite built with CMSIS-NN. Tests that use it carry
/// `#[cfg_attr(no_cmsis, ignore = "CMSIS-NN guests not built: set CMSIS_NN_DIR")]`
/// (see `build.rs`), so without CMSIS-NN they are reported as ignored.
pub fn suite_cmsis(target: &str) -> PathBuf {
    guest(target, "suite-cmsis")
}

/// The suite with the channel-outer depthwise loop (for `regress`).
pub fn modified(target: &str) -> PathBuf {
    guest(target, "suite-modified")
}

pub fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Runs `memtrace ARGS`.
pub fn memtrace<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    Command::new(env!("CARGO_BIN_EXE_memtrace"))
        .args(args)
        .env("CI", "1")
        .output()
        .expect("memtrace runs")
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The JSON a command printed, or a panic that shows what it printed.
pub fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "memtrace did not print JSON ({e}); status {:?}\nstdout:\n{}\nstderr:\n{}",
            out.status,
            stdout(out),
            stderr(out)
        )
    })
}

/// `memtrace ARGS --format json` → (exit code, report), whatever the exit.
pub fn json_run(args: &[&str]) -> (i32, Value) {
    let mut all = args.to_vec();
    all.extend(["--format", "json"]);
    let out = memtrace(&all);
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("memtrace {all:?}: no JSON ({e}): {}", stderr(&out)));
    (out.status.code().unwrap_or(-1), report)
}

/// Runs `memtrace run ELF ARGS --format json`, asserting success.
pub fn run_json(elf: &Path, args: &[&str]) -> Value {
    let mut all = vec!["run".to_owned(), elf.display().to_string()];
    all.extend(args.iter().map(|s| s.to_string()));
    all.extend(["--format".into(), "json".into()]);
    let out = memtrace(&all);
    assert!(
        out.status.success(),
        "memtrace {all:?} failed: {}",
        stderr(&out)
    );
    json(&out)
}

/// The report of the single layer `memtrace run ELF --job SPEC` traces.
pub fn run_job(elf: &Path, spec: &str) -> Value {
    let report = run_json(elf, &["--job", spec]);
    let layers = report["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 1, "a job runs one layer");
    layers[0].clone()
}

/// [`run_job`] on a target's kernel suite.
pub fn job_layer(target: &str, spec: &str) -> Value {
    run_job(&suite(target), spec)
}

/// A buffer of a layer report by name.
pub fn buffer<'a>(layer: &'a Value, name: &str) -> &'a Value {
    layer["buffers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == name)
        .unwrap_or_else(|| panic!("layer has no buffer `{name}`: {layer}"))
}

pub fn u(v: &Value) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("not an unsigned integer: {v}"))
}

/// `examples/models/` of the `tfmicro` crate's registry copy, located with
/// `cargo metadata` (never copied into this repository).
pub fn tfmicro_model(name: &str) -> PathBuf {
    let manifest =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("harness-c/tfmicro-locator/Cargo.toml");
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["metadata", "--format-version", "1", "--manifest-path"])
        .arg(&manifest)
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        stderr(&out)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).unwrap();
    let tfmicro = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "tfmicro")
        .expect("tfmicro in cargo metadata");
    Path::new(tfmicro["manifest_path"].as_str().unwrap())
        .parent()
        .unwrap()
        .join("examples/models")
        .join(format!("{name}.tflite"))
}

/// `make -C harness-c ARGS`, which must succeed; its stdout and stderr.
pub fn make_harness<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> String {
    let out = Command::new("make")
        .arg("-C")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("harness-c"))
        .args(args)
        .output()
        .expect("make runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let args: Vec<_> = args.iter().map(|a| a.as_ref().to_string_lossy()).collect();
    assert!(out.status.success(), "make {args:?} failed:\n{text}");
    text
}

/// A layer of a `run` report by name.
pub fn layer<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == name)
        .unwrap_or_else(|| panic!("no layer `{name}`: {report}"))
}

/// `word` with an include folder of the CMSIS-NN checkout `cmsis`
/// (canonical) written `-I$CMSIS_NN_DIR/Include`, as the doc writes it. Both
/// sides are compared canonical: make names the checkout by a path that may
/// reach it through a symbolic link (`../shared` a link), the test by its
/// real path.
pub fn cmsis_written_as_the_doc(word: &str, cmsis: &Path) -> String {
    let include = word
        .strip_prefix("-I")
        .and_then(|w| w.strip_suffix("/Include"))
        .and_then(|dir| Path::new(dir).canonicalize().ok());
    if include.as_deref() == Some(cmsis) {
        "-I$CMSIS_NN_DIR/Include".to_owned()
    } else {
        word.to_owned()
    }
}
