//! The output oracle and the guest TFLM's own messages.
//!
//! * Float outputs are compared with PyPI `tflite-micro` within a stated
//!   tolerance in ULPs, and a difference beyond it fails `verify` (exit 1,
//!   `result: FAILED`, `"ok": false`) whatever the outputs' type.
//! * The oracle's Python imports nothing from the directory `verify` runs
//!   in, nor from `PYTHONPATH`.
//! * SIGINT or SIGTERM while the oracle runs leaves no file and no Python
//!   behind.
//! * A guest TFLM that aborts inside an operator is reported with TFLM's
//!   own words and the operator, not as a protocol violation.
//!
//! Tests that run the oracle need `MEMTRACE_TFLM_PYTHON` (as
//! `tests/models/verify_tflm_oracle.rs`; `make test` sets it) and are reported as
//! ignored without it; tests on real TFLM need the runner guests.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use memtrace_model::export::to_tflite;
use memtrace_model::{tflite, Dtype, Model, Op, OpKind, OpOptions, Tensor};
use memtrace_overlap::rng::Rng;
use serde_json::Value;

use crate::common;

/// A `verify` of these small models that takes longer is a hang.
const VERIFY_LIMIT: Duration = Duration::from_secs(120);

/// The shared models (read-only).
fn shared_model(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/models")
        .join(name)
}

/// The oracle's Python (the tests that need it are ignored without one).
fn python() -> PathBuf {
    std::env::var_os("MEMTRACE_TFLM_PYTHON")
        .map(PathBuf::from)
        .expect("MEMTRACE_TFLM_PYTHON (build.rs ignores these tests without it)")
}

/// A fresh, empty directory of this test's own.
fn fresh_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "memtrace-hostile-oracle-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Entries of a directory, by name.
fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|r| {
            r.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// `memtrace ARGS` in `cwd` with `TMPDIR=tmp` (and `env`), killed after
/// [`VERIFY_LIMIT`]: its output, or `None` when it hung.
fn memtrace_in(
    cwd: &Path,
    tmp: &Path,
    env: &[(&str, &std::ffi::OsStr)],
    args: &[&str],
) -> Option<Output> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_memtrace"));
    cmd.args(args)
        .current_dir(cwd)
        .env("CI", "1")
        .env("TMPDIR", tmp)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd.spawn().expect("memtrace starts");
    let pid = child.id();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done_tx.send(child.wait_with_output());
    });
    match done_rx.recv_timeout(VERIFY_LIMIT) {
        Ok(out) => Some(out.expect("memtrace ran")),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            None
        }
    }
}

/// hello_world (int8) from the shared models as memtrace's model.
fn hello_world() -> Model {
    let path = shared_model("tflm_hello_world_int8.tflite");
    let bytes = std::fs::read(&path).unwrap();
    tflite::import_bytes("tflm_hello_world_int8", &bytes).unwrap()
}

/// `model` with a DEQUANTIZE after its (int8) output, which becomes the
/// graph's float output.
fn with_dequantize(mut model: Model) -> Model {
    let q = model.outputs[0];
    let t = &model.tensors[q];
    let f = Tensor {
        name: format!("{}_dequantized", t.name),
        shape: t.shape.clone(),
        dtype: Dtype::Float32,
        bytes: t.bytes * 4,
        is_constant: false,
        is_variable: false,
        quantization: None,
        data: None,
        in_storage: false,
    };
    model.tensors.push(f);
    let out = model.tensors.len() - 1;
    model.ops.push(Op {
        kind: OpKind::Dequantize,
        inputs: vec![q],
        outputs: vec![out],
        options: OpOptions::default(),
        scratch: None,
    });
    model.outputs = vec![out];
    model
}

/// Sets the quantisation of `model`'s (int8) graph output to `scale` and
/// `zero_point`. The operator computing it gets weights with a power-of-two
/// scale and a bias scale of exactly input scale × weight scale, so that
/// TFLM's check of the bias scale against the output scale (which any
/// rounding difference divided by a tiny output scale would fail) passes
/// whatever `scale` is, and TFLM prepares the model.
fn requantize(model: &mut Model, scale: f32, zero_point: i64) {
    let out = model.outputs[0];
    let op = model
        .ops
        .iter()
        .find(|o| o.outputs.contains(&out))
        .expect("an operator computes the output")
        .clone();
    let input_scale = model.tensors[op.inputs[0]]
        .quantization
        .as_ref()
        .unwrap()
        .scale[0];
    let weight_scale = 1.0 / 128.0;
    for (k, s) in [(1, weight_scale), (2, input_scale * weight_scale)] {
        let t = &mut model.tensors[op.inputs[k]];
        let q = t.quantization.as_mut().expect("quantised weights and bias");
        q.scale.iter_mut().for_each(|v| *v = s);
    }
    let q = model.tensors[out]
        .quantization
        .as_mut()
        .expect("int8 output");
    q.scale = vec![scale];
    q.zero_point = vec![zero_point];
}

/// Float32 outputs of `model` in PyPI `tflite-micro`, run here (isolated,
/// in `dir`) on `input`: what the test holds memtrace's outputs against,
/// computed without memtrace.
fn host_outputs(dir: &Path, model: &Path, input: &[u8]) -> Result<Vec<u8>, String> {
    const RUN: &str = r#"
import sys
import numpy as np
from tflite_micro.python.tflite_micro import runtime
interp = runtime.Interpreter.from_file(sys.argv[1], arena_size=16 << 20)
d = interp.get_input_details(0)
data = open(sys.argv[2], "rb").read()
interp.set_input(np.frombuffer(data, dtype=d["dtype"]).reshape(d["shape"]), 0)
interp.invoke()
sys.stdout.buffer.write(np.ascontiguousarray(interp.get_output(0)).tobytes())
"#;
    let input_path = dir.join("host-input.bin");
    std::fs::write(&input_path, input).unwrap();
    let out = Command::new(python())
        .arg("-I")
        .arg("-c")
        .arg(RUN)
        .arg(model)
        .arg(&input_path)
        .current_dir(dir)
        .output()
        .expect("the test's python runs");
    std::fs::remove_file(&input_path).unwrap();
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(common::stderr(&out))
    }
}

/// The largest distance in ULPs between two float32 images (NaN or a
/// different length: `u64::MAX`), computed here independently of memtrace.
fn max_ulps(a: &[u8], b: &[u8]) -> u64 {
    if a.len() != b.len() {
        return u64::MAX;
    }
    a.chunks(4)
        .zip(b.chunks(4))
        .map(|(x, y)| {
            let (x, y) = (
                f32::from_le_bytes(x.try_into().unwrap()),
                f32::from_le_bytes(y.try_into().unwrap()),
            );
            if x.is_nan() || y.is_nan() {
                return if x.is_nan() && y.is_nan() {
                    0
                } else {
                    u64::MAX
                };
            }
            // Each float's rank among all floats, +0 and -0 alike.
            let rank = |v: f32| -> i64 {
                let bits = v.to_bits() as i64;
                if v.is_sign_negative() {
                    -(bits & 0x7fff_ffff)
                } else {
                    bits
                }
            };
            (rank(x) - rank(y)).unsigned_abs()
        })
        .max()
        .unwrap_or(0)
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// The tolerance memtrace states, in ULPs (docs/verify.md).
const STATED_ULPS: u64 = 4;

/// What one `verify` of a model with a float output found, judged against
/// the host outputs computed here.
#[derive(Debug)]
struct FloatVerdict {
    exit: Option<i32>,
    ok: Option<bool>,
    /// The text's `result:` line, if it printed one.
    result_line: Option<String>,
    /// Distance between memtrace's outputs and the host's (None: the host
    /// could not run it, or memtrace printed no outputs).
    ulps: Option<u64>,
    stderr: String,
}

/// `memtrace verify MODEL --input INPUT` on real TFLM with the oracle, once
/// as JSON and once as text, in `dir`.
fn verify_float_model(dir: &Path, model: &Path, input: &[u8]) -> Option<FloatVerdict> {
    let input_path = dir.join("input.bin");
    std::fs::write(&input_path, input).unwrap();
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let m = common::path_str(model);
    let i = common::path_str(&input_path);
    let base = ["verify", m, "--input", i, "--no-cache"];
    let json = memtrace_in(dir, &tmp, &[], &[&base[..], &["--format", "json"]].concat())?;
    let text = memtrace_in(dir, &tmp, &[], &base)?;
    assert_eq!(
        json.status.code(),
        text.status.code(),
        "JSON and text verdicts differ: {}",
        common::stderr(&text)
    );
    let report: Option<Value> = serde_json::from_slice(&json.stdout).ok();
    let host = host_outputs(dir, model, input).ok();
    let ulps = match (&report, &host) {
        (Some(r), Some(h)) => Some(max_ulps(&unhex(r["output_hex"].as_str().unwrap()), h)),
        _ => None,
    };
    std::fs::remove_file(&input_path).unwrap();
    Some(FloatVerdict {
        exit: json.status.code(),
        ok: report.as_ref().and_then(|r| r["ok"].as_bool()),
        result_line: common::stdout(&text)
            .lines()
            .find(|l| l.starts_with("result:"))
            .map(str::to_string),
        ulps,
        stderr: common::stderr(&json),
    })
}

/// hello_world's one input: x = 1.0 quantised with its input parameters.
fn hello_input(model: &Model) -> Vec<u8> {
    let q = model.tensors[model.inputs[0]]
        .quantization
        .as_ref()
        .unwrap();
    let x = (1.0 / q.scale[0]).round() as i64 + q.zero_point[0];
    vec![x.clamp(-128, 127) as i8 as u8]
}

#[test]
#[cfg_attr(
    any(no_oracle, no_tflm),
    ignore = "needs the tflite-micro oracle (MEMTRACE_TFLM_PYTHON) and the TFLM runner guests (TFLM_TREE)"
)]
fn float_outputs_that_differ_from_the_host_oracle_fail_verify() {
    let dir = fresh_dir("float");
    let base = hello_world();
    let input = hello_input(&base);

    // As shipped, with a DEQUANTIZE: memtrace and PyPI agree, verify passes.
    let plain = dir.join("plain.tflite");
    std::fs::write(&plain, to_tflite(&with_dequantize(base.clone())).unwrap()).unwrap();
    let v = verify_float_model(&dir, &plain, &input).expect("no hang");
    assert_eq!(v.ulps, Some(0), "{v:?}");
    assert_eq!((v.exit, v.ok), (Some(0), Some(true)), "{v:?}");
    assert_eq!(v.result_line.as_deref(), Some("result: OK"));

    // An absurd output scale: the int8 arithmetic of TFLM's requantisation
    // shifts by more than 31 bits, which the Cortex-M4 and x86-64 (PyPI)
    // evaluate differently; the DEQUANTIZE makes the difference a float one.
    let mut absurd = base.clone();
    requantize(&mut absurd, 1e-30, 0);
    let path = dir.join("absurd.tflite");
    std::fs::write(&path, to_tflite(&with_dequantize(absurd)).unwrap()).unwrap();
    let v = verify_float_model(&dir, &path, &input).expect("no hang");
    let ulps = v
        .ulps
        .unwrap_or_else(|| panic!("both ran: {v:?}\n{}", v.stderr));
    assert!(ulps > STATED_ULPS, "the mutant does not diverge: {v:?}");
    assert_eq!((v.exit, v.ok), (Some(1), Some(false)), "{v:?}");
    assert_eq!(v.result_line.as_deref(), Some("result: FAILED"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Modules planted where a Python started carelessly would find them: each
/// writes `marker` when imported, and stops the import.
fn plant_modules(dir: &Path, marker: &Path) {
    let body = format!(
        "open({:?}, 'a').write(__name__ + '\\n')\nraise SystemExit('planted module imported')\n",
        marker.display().to_string()
    );
    for name in ["numpy.py", "tflite_micro.py", "importlib.py"] {
        std::fs::write(dir.join(name), &body).unwrap();
    }
    std::fs::write(dir.join("sitecustomize.py"), &body).unwrap();
    std::fs::write(dir.join("usercustomize.py"), &body).unwrap();
}

#[test]
#[cfg_attr(
    any(no_oracle, no_tflm),
    ignore = "needs the tflite-micro oracle (MEMTRACE_TFLM_PYTHON) and the TFLM runner guests (TFLM_TREE)"
)]
fn the_oracle_imports_nothing_from_the_working_directory_or_pythonpath() {
    let dir = fresh_dir("planted");
    let cwd = dir.join("cwd");
    let elsewhere = dir.join("pythonpath");
    let tmp = dir.join("tmp");
    for d in [&cwd, &elsewhere, &tmp] {
        std::fs::create_dir_all(d).unwrap();
    }
    let marker = dir.join("imported");
    plant_modules(&cwd, &marker);
    plant_modules(&elsewhere, &marker);
    let model = shared_model("tflm_hello_world_int8.tflite");
    let startup = elsewhere.join("numpy.py");
    let env: [(&str, &std::ffi::OsStr); 2] = [
        ("PYTHONPATH", elsewhere.as_os_str()),
        ("PYTHONSTARTUP", startup.as_os_str()),
    ];
    let args = [
        "verify",
        common::path_str(&model),
        "--no-cache",
        "--format",
        "json",
    ];
    let out = memtrace_in(&cwd, &tmp, &env, &args).expect("no hang");
    assert!(
        !marker.exists(),
        "a planted module ran: {}",
        std::fs::read_to_string(&marker).unwrap_or_default()
    );
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    let report = common::json(&out);
    assert_eq!(
        report["oracle"]["error"],
        Value::Null,
        "{}",
        report["oracle"]
    );
    assert_eq!(report["oracle"]["bit_exact"], true, "{}", report["oracle"]);
    assert_eq!(report["ok"], true);
    assert_eq!(entries(&tmp), Vec::<String>::new(), "left in TMPDIR");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A stand-in for the oracle's Python: the real one (by the `#!` line) runs
/// this script, which writes its process id into `ready` in its working
/// directory (the oracle's private directory) and then waits, as a slow
/// model would.
fn slow_python(dir: &Path) -> PathBuf {
    let path = dir.join("slow-python");
    std::fs::write(
        &path,
        format!(
            "#!{}\nimport os, time\nopen('ready.tmp', 'w').write(str(os.getpid()))\n\
             os.rename('ready.tmp', 'ready')\ntime.sleep(600)\n",
            python().display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Whether process `pid` still runs (a zombie has ended).
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which is in parentheses.
        Ok(stat) => !matches!(
            stat.rsplit(')')
                .next()
                .and_then(|s| s.trim().chars().next()),
            Some('Z' | 'X')
        ),
        Err(_) => false,
    }
}

/// The process id the stand-in Python wrote, once it runs: the oracle's
/// private directory under `tmp` holds `ready`.
fn wait_for_oracle(tmp: &Path, limit: Duration) -> Option<u32> {
    let started = Instant::now();
    while started.elapsed() < limit {
        for e in entries(tmp) {
            if let Ok(pid) = std::fs::read_to_string(tmp.join(&e).join("ready")) {
                return pid.trim().parse().ok();
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

#[test]
#[cfg_attr(
    any(no_oracle, no_tflm),
    ignore = "needs the tflite-micro oracle (MEMTRACE_TFLM_PYTHON) and the TFLM runner guests (TFLM_TREE)"
)]
fn a_signal_while_the_oracle_runs_leaves_no_file_and_no_python() {
    let dir = fresh_dir("signals");
    let py = slow_python(&dir);
    let model = shared_model("tflm_hello_world_int8.tflite");
    for (signal, number) in [("INT", 2), ("TERM", 15), ("HUP", 1)] {
        let tmp = dir.join(format!("tmp-{signal}"));
        std::fs::create_dir_all(&tmp).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_memtrace"))
            .args(["verify", common::path_str(&model), "--no-cache"])
            .current_dir(&dir)
            .env("CI", "1")
            .env("TMPDIR", &tmp)
            .env("MEMTRACE_TFLM_PYTHON", &py)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let Some(python_pid) = wait_for_oracle(&tmp, VERIFY_LIMIT) else {
            let _ = child.kill();
            panic!("SIG{signal}: the oracle never started");
        };
        assert!(running(python_pid));
        let sent = Command::new("kill")
            .args([format!("-{signal}"), child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        let started = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if started.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                panic!("SIG{signal}: memtrace did not end");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(
            status.signal() == Some(number) || status.code() == Some(128 + number),
            "SIG{signal}: {status:?}"
        );
        assert_eq!(
            entries(&tmp),
            Vec::<String>::new(),
            "SIG{signal}: left in TMPDIR"
        );
        assert!(
            !running(python_pid),
            "SIG{signal}: the oracle's Python still runs"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Whether float32 images `emulated` and `host` agree by the rule
/// docs/verify.md states, judged here on its own: every element within
/// [`STATED_ULPS`] ULPs, or within that many ULPs of the largest magnitude
/// of the host's output.
fn agree_as_stated(emulated: &[u8], host: &[u8]) -> bool {
    if emulated.len() != host.len() {
        return false;
    }
    let floats = |b: &[u8]| -> Vec<f32> {
        b.chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    };
    let (e, h) = (floats(emulated), floats(host));
    let largest = h
        .iter()
        .filter(|v| v.is_finite())
        .fold(0f32, |m, v| m.max(v.abs()));
    // The gap to the next float above the largest magnitude.
    let ulp = f32::from_bits(largest.to_bits() + 1) - largest;
    e.iter().zip(&h).all(|(a, b)| {
        a.to_bits() == b.to_bits()
            || (a.is_nan() && b.is_nan())
            || max_ulps(&a.to_le_bytes(), &b.to_le_bytes()) <= STATED_ULPS
            || (a.is_finite() && b.is_finite() && (a - b).abs() <= STATED_ULPS as f32 * ulp)
    })
}

/// Outcome counts of the float-output campaign.
#[derive(Debug, Default)]
struct Tally {
    mutants: usize,
    accepted: usize,
    refused: usize,
    /// The host disagrees beyond the stated tolerance, yet verify said OK.
    wrong_but_accepted: usize,
    /// Killed by a signal, or an exit status other than 0, 1 and 2.
    aborts: usize,
    hangs: usize,
    /// Files left in the run's TMPDIR or working directory.
    leftovers: usize,
    failures: Vec<String>,
}

#[test]
#[cfg_attr(
    any(no_oracle, no_tflm),
    ignore = "needs the tflite-micro oracle (MEMTRACE_TFLM_PYTHON) and the TFLM runner guests (TFLM_TREE)"
)]
fn campaign_float_output_mutants_against_the_oracle() {
    let dir = fresh_dir("campaign");
    let base = hello_world();
    let q = base.outputs[0];
    let scale = base.tensors[q].quantization.as_ref().unwrap().scale[0];
    let mut rng = Rng::new(0x6f72_6163_6c65);
    let mut tally = Tally::default();
    // Output scales from sane to absurd (the requantisation's shift goes
    // past 31 bits below about 1e-10 of the original).
    let factors = [1.0f32, 0.5, 4.0, 1e-6, 1e-12, 1e-20, 1e-30, 1e6];
    for (n, factor) in factors.iter().enumerate() {
        let mut m = base.clone();
        requantize(&mut m, scale * factor, rng.int(-128, 127));
        let model = dir.join(format!("mutant-{n}.tflite"));
        std::fs::write(&model, to_tflite(&with_dequantize(m)).unwrap()).unwrap();
        let input = vec![rng.int(-128, 127) as i8 as u8];
        let input_path = dir.join("input.bin");
        std::fs::write(&input_path, &input).unwrap();
        let tmp = dir.join("tmp");
        std::fs::create_dir_all(&tmp).unwrap();
        let what = format!("mutant {n} (output scale x{factor:e})");
        tally.mutants += 1;
        let args = [
            "verify",
            common::path_str(&model),
            "--input",
            common::path_str(&input_path),
            "--no-cache",
            "--format",
            "json",
        ];
        let Some(out) = memtrace_in(&dir, &tmp, &[], &args) else {
            tally.hangs += 1;
            tally.failures.push(format!("{what}: hang"));
            continue;
        };
        let left = entries(&tmp);
        if !left.is_empty() {
            tally.leftovers += 1;
            tally.failures.push(format!("{what}: left {left:?}"));
        }
        match out.status.code() {
            Some(0) => {
                tally.accepted += 1;
                let report = common::json(&out);
                let emulated = unhex(report["output_hex"].as_str().unwrap());
                match host_outputs(&dir, &model, &input) {
                    Ok(host) if !agree_as_stated(&emulated, &host) => {
                        tally.wrong_but_accepted += 1;
                        tally.failures.push(format!(
                            "{what}: accepted, {} ULPs from the host",
                            max_ulps(&emulated, &host)
                        ));
                    }
                    // The host refuses the model: nothing to hold it to.
                    _ => {}
                }
            }
            Some(1 | 2) => tally.refused += 1,
            other => {
                tally.aborts += 1;
                tally.failures.push(format!(
                    "{what}: status {other:?} (signal {:?}): {}",
                    out.status.signal(),
                    common::stderr(&out)
                ));
            }
        }
        std::fs::remove_file(&model).unwrap();
        std::fs::remove_file(&input_path).unwrap();
    }
    let mut left = entries(&dir);
    left.retain(|e| e != "tmp");
    println!("float-output campaign: {tally:?}");
    assert_eq!(left, Vec::<String>::new(), "left in the working directory");
    assert_eq!(
        (
            tally.wrong_but_accepted,
            tally.aborts,
            tally.hangs,
            tally.leftovers
        ),
        (0, 0, 0, 0),
        "{:#?}",
        tally.failures
    );
    assert!(tally.accepted > 0 && tally.refused > 0, "{tally:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runner guests not built: set TFLM_TREE")]
fn a_tflm_abort_inside_an_operator_is_reported_with_the_operator_and_the_check() {
    let dir = fresh_dir("abort");
    // The first FULLY_CONNECTED's (RELU) output with a zero point outside
    // int8: the runner's TFLM (debug checks on) aborts in that operator;
    // PyPI's runs it.
    let mut model = hello_world();
    let out = model.ops[0].outputs[0];
    model.tensors[out].quantization.as_mut().unwrap().zero_point = vec![200];
    let path = dir.join("zero-point.tflite");
    std::fs::write(&path, to_tflite(&model).unwrap()).unwrap();
    if cfg!(not(no_oracle)) {
        let input = hello_input(&model);
        assert!(
            host_outputs(&dir, &path, &input).is_ok(),
            "PyPI tflite-micro runs the model"
        );
    }
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    for args in [
        &["run", common::path_str(&path)][..],
        &[
            "verify",
            common::path_str(&path),
            "--no-cache",
            "--no-oracle",
        ],
    ] {
        let out = memtrace_in(&dir, &tmp, &[], args).expect("no hang");
        let err = common::stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(!err.contains("protocol violation"), "{args:?}: {err}");
        assert!(
            err.contains("aborted in operator 0 (FULLY_CONNECTED)"),
            "{args:?}: {err}"
        );
        // Where TFLM's check is: a function and a source line.
        let site = err
            .split("abort() called from `")
            .nth(1)
            .unwrap_or_else(|| panic!("{args:?}: no call site: {err}"));
        assert!(
            site.contains(".h:") || site.contains(".cc:"),
            "{args:?}: {err}"
        );
    }
    assert_eq!(entries(&tmp), Vec::<String>::new());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runner guests not built: set TFLM_TREE")]
fn campaign_zero_point_mutants_end_with_tflms_reason() {
    let dir = fresh_dir("zero-points");
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let base = hello_world();
    let activations: Vec<usize> = (0..base.tensors.len())
        .filter(|&t| !base.tensors[t].is_constant && base.tensors[t].quantization.is_some())
        .collect();
    let mut rng = Rng::new(0x7a65_726f);
    let mut tally = Tally::default();
    for n in 0..8 {
        let mut m = base.clone();
        let t = activations[rng.range(0, activations.len() as u32 - 1) as usize];
        let zero_point = *[-129i64, 128, 200, -1000, 1 << 20, i32::MIN as i64]
            .get(rng.range(0, 5) as usize)
            .unwrap();
        m.tensors[t].quantization.as_mut().unwrap().zero_point = vec![zero_point];
        let path = dir.join(format!("mutant-{n}.tflite"));
        std::fs::write(&path, to_tflite(&m).unwrap()).unwrap();
        let what = format!("tensor {t} zero point {zero_point}");
        tally.mutants += 1;
        let Some(out) = memtrace_in(&dir, &tmp, &[], &["run", common::path_str(&path)]) else {
            tally.hangs += 1;
            tally.failures.push(format!("{what}: hang"));
            continue;
        };
        let err = common::stderr(&out);
        match out.status.code() {
            Some(0) => tally.accepted += 1,
            Some(1) if !err.contains("protocol violation") => tally.refused += 1,
            other => {
                tally.aborts += 1;
                tally
                    .failures
                    .push(format!("{what}: status {other:?}: {err}"));
            }
        }
        if !entries(&tmp).is_empty() {
            tally.leftovers += 1;
        }
        std::fs::remove_file(&path).unwrap();
    }
    println!("zero-point campaign: {tally:?}");
    assert_eq!(
        (tally.aborts, tally.hangs, tally.leftovers),
        (0, 0, 0),
        "{:#?}",
        tally.failures
    );
    assert!(tally.refused > 0, "{tally:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_half_made_default_oracle_venv_is_not_run_and_says_why() {
    // `make oracle` stopped before numpy: the default venv exists but
    // cannot run the oracle. The user never named a Python, so verify runs
    // without the oracle and says why, instead of failing.
    let dir = fresh_dir("half-made-venv");
    let venv = dir.join("home/.cache/memtrace-venv");
    let made = Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .status()
        .expect("python3 runs");
    assert!(made.success(), "python3 -m venv");
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let model = common::shared_model("tflm_hello_world_int8.tflite");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_memtrace"));
    cmd.args(["verify", &model, "--no-cache", "--format", "json"])
        .env_remove("MEMTRACE_TFLM_PYTHON")
        .env("HOME", dir.join("home"))
        .env("TMPDIR", &tmp);
    let out = cmd.output().expect("memtrace runs");
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let oracle = &report["oracle"];
    let reason = oracle["error"].as_str().unwrap_or_default();
    assert!(
        reason.contains("No module named") && reason.contains("make oracle"),
        "{oracle}"
    );
    assert!(
        oracle["python"]
            .as_str()
            .unwrap_or_default()
            .contains("memtrace-venv"),
        "{oracle}"
    );
    // A Python the user names is theirs: the same venv through
    // MEMTRACE_TFLM_PYTHON is an error naming the variable.
    let named = Command::new(env!("CARGO_BIN_EXE_memtrace"))
        .args(["verify", &model, "--no-cache"])
        .env("MEMTRACE_TFLM_PYTHON", venv.join("bin/python"))
        .env("HOME", dir.join("home"))
        .env("TMPDIR", &tmp)
        .output()
        .unwrap();
    assert_eq!(named.status.code(), Some(1));
    assert!(common::stderr(&named).contains("MEMTRACE_TFLM_PYTHON"));
    let _ = std::fs::remove_dir_all(&dir);
}
