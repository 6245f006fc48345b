//! From a `.tflite` to firmware, as docs/deploy.md walks it, on real TFLM:
//! `plan --emit-offline` writes the model with its plan and the header;
//! `verify` proves the emitted model; the guide's `main`
//! (harness-c/examples/deploy_main.cc), built from the header against TFLM
//! of `../shared/third_party/tflm`, runs in the emulator with exactly
//! `kTensorArenaSize` and gives PyPI `tflite-micro`'s outputs byte for byte,
//! and with 16 B less fails with TFLM's own message. The arena size is
//! cross-checked by a program memtrace did not measure it with.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{json, memtrace, path_str, stderr, stdout};
use serde_json::Value;

/// A public model of `../shared/models/` (never copied into the repository).
fn shared_model(name: &str) -> PathBuf {
    PathBuf::from(common::shared_model(name))
}

/// The oracle's Python (PyPI `tflite-micro`).
fn python() -> PathBuf {
    std::env::var_os("MEMTRACE_TFLM_PYTHON")
        .map(PathBuf::from)
        .expect("MEMTRACE_TFLM_PYTHON")
}

/// Runs the model in PyPI `tflite-micro` on a seeded input and writes the
/// header the guide's `main` compares with: `kInput`, `kExpectedOutput`.
const EXPECTED: &str = r#"
import sys
import numpy as np
from tflite_micro.python.tflite_micro import runtime
model, out, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
interp = runtime.Interpreter.from_file(model, arena_size=64 << 20)
rng = np.random.RandomState(seed)
inputs = b""
i = 0
while True:
    try:
        d = interp.get_input_details(i)
    except Exception:
        break
    dt = np.dtype(d["dtype"])
    if dt.kind == "f":
        x = rng.uniform(-1.0, 1.0, size=d["shape"]).astype(dt)
    else:
        info = np.iinfo(dt)
        x = rng.randint(info.min, info.max + 1, size=d["shape"]).astype(dt)
    interp.set_input(x, i)
    inputs += x.tobytes()
    i += 1
interp.invoke()
outputs = b""
j = 0
while True:
    try:
        outputs += np.ascontiguousarray(interp.get_output(j)).tobytes()
    except Exception:
        break
    j += 1
def array(name, data):
    body = ",".join(str(b) for b in data)
    return "static const unsigned char %s[] = {%s};\nenum { %sSize = %d };\n" % (name, body, name, len(data))
with open(out, "w") as f:
    f.write("/* PyPI tflite-micro's outputs for a seeded input. */\n")
    f.write(array("kInput", inputs))
    f.write(array("kExpectedOutput", outputs))
"#;

fn write_expected(model: &Path, out: &Path) {
    let run = Command::new(python())
        .arg("-I")
        .arg("-c")
        .arg(EXPECTED)
        .arg(model)
        .arg(out)
        .arg("7")
        .output()
        .expect("python runs");
    assert!(
        run.status.success(),
        "PyPI tflite-micro on {}: {}",
        model.display(),
        String::from_utf8_lossy(&run.stderr)
    );
}

/// Builds the guide's `main` from `header` (the harness's make target) with
/// `kTensorArenaSize` and with `arena` bytes, the two at once.
fn build_firmware(
    header: &Path,
    expected: &Path,
    kernels: &str,
    fits: &Path,
    short: &Path,
    arena: u64,
) {
    let builds = [(fits, None), (short, Some(arena))].map(|(elf, arena)| {
        let mut make = make_firmware(header, expected, kernels, elf, arena);
        make.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        make.spawn().expect("make runs")
    });
    for child in builds {
        let out = child.wait_with_output().expect("make runs");
        assert!(
            out.status.success(),
            "make deploy-example: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The make command that builds the guide's `main`.
fn make_firmware(
    header: &Path,
    expected: &Path,
    kernels: &str,
    elf: &Path,
    arena: Option<u64>,
) -> Command {
    let harness = Path::new(env!("CARGO_MANIFEST_DIR")).join("harness-c");
    let mut make = Command::new("make");
    make.arg("-C")
        .arg(&harness)
        .arg("--no-print-directory")
        .arg("deploy-example")
        .arg(format!("HEADER={}", header.display()))
        .arg(format!("EXPECTED={}", expected.display()))
        .arg(format!("DEPLOY_KERNELS={kernels}"))
        .arg(format!("DEPLOY_ELF={}", elf.display()));
    if let Some(bytes) = arena {
        make.arg(format!("DEPLOY_DEFS=-DDEPLOY_ARENA_BYTES={bytes}"));
    }
    make
}

/// The header's `kTensorArenaSize`.
fn arena_in_header(text: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix("constexpr size_t kTensorArenaSize = "))
        .and_then(|v| v.trim_end_matches(';').parse().ok())
        .unwrap_or_else(|| panic!("no kTensorArenaSize in the header:\n{}", &text[..2000]))
}

/// One model on one kernel build, from `plan --emit-offline` to the
/// firmware; returns (arena to allocate, TFLM's head + tail).
fn journey(model: &str, kernels: &str, make_kernels: &str) -> (u64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let source = shared_model(model);
    let emitted = dir.path().join("model.tflite");

    // plan --emit-offline: the model with its plan, and its header.
    let out = memtrace([
        "plan",
        path_str(&source),
        "--runtime",
        "tflm",
        "--kernels",
        kernels,
        "--emit-offline",
        path_str(&emitted),
        "--fits",
        "1M",
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "plan {model}: {}", stderr(&out));
    let plan = json(&out);
    let deploy = &plan["arena_to_allocate"];
    let arena = deploy["arena"]["bytes"]
        .as_u64()
        .unwrap_or_else(|| panic!("{deploy}"));
    let used = deploy["arena"]["arena_used_bytes"].as_u64().unwrap();
    assert_eq!(deploy["arena"]["kernels"], kernels, "{deploy}");
    assert!(
        stderr(&out).contains("fits: the arena to allocate"),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains(&format!("arena to allocate {arena} B")));
    let header = dir.path().join("model.h");
    let text = std::fs::read_to_string(&header).unwrap();
    assert_eq!(arena_in_header(&text), arena);
    assert!(text.contains("MEMTRACE_ALIGN16 static const unsigned char kModel[]"));
    assert!(
        text.contains(&format!("{kernels} kernels, cortex-m4")),
        "{}",
        &text[..1500]
    );

    // verify proves the emitted model (its plan runs as TFLM's own).
    let out = memtrace([
        "verify",
        path_str(&emitted),
        "--runtime",
        "tflm",
        "--kernels",
        kernels,
        "--format",
        "json",
    ]);
    let v = json(&out);
    assert!(out.status.success(), "verify {model} ({kernels}): {v}");
    assert_eq!(v["oracle"]["bit_exact"], true, "{}", v["oracle"]);

    // The guide's main, with exactly kTensorArenaSize and with 16 B less.
    let expected = dir.path().join("expected.h");
    write_expected(&emitted, &expected);
    let fits = dir.path().join("fits.elf");
    let short = dir.path().join("short.elf");
    build_firmware(&header, &expected, make_kernels, &fits, &short, arena - 16);

    let out = memtrace(["run", path_str(&fits)]);
    assert!(
        out.status.success(),
        "{model} ({kernels}) with kTensorArenaSize = {arena} B: {}{}",
        stdout(&out),
        stderr(&out)
    );
    // The firmware says how it ended, in the arena memtrace printed (its
    // own sizeof), and its outputs are the expected ones.
    let said = stdout(&out);
    for part in [
        "exited 0".to_owned(),
        format!("AllocateTensors() and Invoke() OK in a {arena} B arena"),
        "outputs equal the expected outputs".to_owned(),
        "no layer traced".to_owned(),
    ] {
        assert!(
            said.contains(&part),
            "{model} ({kernels}): {part:?} missing from: {said}"
        );
    }
    let out = memtrace(["run", path_str(&short)]);
    let said = stderr(&out);
    assert!(!out.status.success(), "{model} ran with {} B", arena - 16);
    assert!(
        said.contains("exited with code 2") && said.contains("AllocateTensors() failed: "),
        "{model} ({kernels}) with {} B: {said}",
        arena - 16
    );
    // TFLM's own words, not the example's: the message is one of TFLM's
    // format strings.
    let message = said
        .split("AllocateTensors() failed: ")
        .nth(1)
        .unwrap_or_default();
    assert!(
        tflm_says(message),
        "{model} ({kernels}): `{message}` is no message of TFLM's sources"
    );
    (arena, used)
}

/// Whether the start of `message` (up to its first number) is the text of a
/// format string in TFLM's sources (`../shared/third_party/tflm`).
fn tflm_says(message: &str) -> bool {
    let fixed: String = message
        .chars()
        .take_while(|c| !c.is_ascii_digit())
        .collect();
    let fixed = fixed.trim();
    if fixed.len() < 8 {
        return false;
    }
    let tree = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/third_party/tflm/tensorflow");
    let mut dirs = vec![tree];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = entry.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "cc")
                && std::fs::read_to_string(&p).is_ok_and(|t| t.contains(fixed))
            {
                return true;
            }
        }
    }
    false
}

/// Both kernel builds of one model.
fn both_builds(model: &str) {
    for (kernels, make_kernels) in [("tflm", "tflm"), ("cmsis-nn", "cmsis-nn")] {
        let (arena, used) = journey(model, kernels, make_kernels);
        eprintln!("{model} {kernels}: arena to allocate {arena} B, TFLM head + tail {used} B");
        assert!(arena >= used, "{model} ({kernels}): {arena} < {used}");
    }
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
#[cfg_attr(
    all(no_oracle, not(no_tflm)),
    ignore = "MEMTRACE_TFLM_PYTHON not set: no tflite-micro oracle"
)]
fn hello_world_deploys_bit_exact_with_exactly_its_arena() {
    both_builds("tflm_hello_world_int8.tflite");
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
#[cfg_attr(
    all(no_oracle, not(no_tflm)),
    ignore = "MEMTRACE_TFLM_PYTHON not set: no tflite-micro oracle"
)]
fn person_detect_deploys_bit_exact_with_exactly_its_arena() {
    both_builds("tflm_person_detect.tflite");
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
#[cfg_attr(
    all(no_oracle, not(no_tflm)),
    ignore = "MEMTRACE_TFLM_PYTHON not set: no tflite-micro oracle"
)]
fn mlperf_kws_deploys_bit_exact_with_exactly_its_arena() {
    both_builds("mlperf_tiny_kws_ds_cnn_int8.tflite");
}

/// TFLM's greedy planner faults (writes through a pointer it never got)
/// when this model's arena is too small on CMSIS-NN: the measurement takes
/// that as too small, and the arena it prints runs the firmware.
#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
#[cfg_attr(
    all(no_oracle, not(no_tflm)),
    ignore = "MEMTRACE_TFLM_PYTHON not set: no tflite-micro oracle"
)]
fn keyword_scrambled_deploys_though_tflm_faults_on_too_small_an_arena() {
    let (arena, used) = journey("tflm_keyword_scrambled_8bit.tflite", "cmsis-nn", "cmsis_nn");
    assert!(arena >= used, "{arena} < {used}");
}

#[test]
fn a_budget_must_be_a_size() {
    let out = memtrace(["plan", "zoo:mobilenet_v1_0.25_128_int8", "--fits", "12G"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("the unit must be K or M"),
        "{}",
        stderr(&out)
    );
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn a_plan_that_misses_its_budget_exits_1_with_the_shortfall_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let emitted = dir.path().join("small.tflite");
    let source = shared_model("tflm_hello_world_int8.tflite");
    let out = memtrace([
        "plan",
        path_str(&source),
        "--runtime",
        "tflm",
        "--emit-offline",
        path_str(&emitted),
        "--fits",
        "100",
        "--format",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report: Value = json(&out);
    let arena = report["arena_to_allocate"]["arena"]["bytes"]
        .as_u64()
        .unwrap();
    assert_eq!(report["budget"]["budget_bytes"], 100);
    assert!(
        stderr(&out).contains(&format!("exceeds the 100 B budget by {} B", arena - 100)),
        "{}",
        stderr(&out)
    );
    assert!(!emitted.exists() && !dir.path().join("small.h").exists());
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn verify_writes_the_proven_plan_and_its_header() {
    let dir = tempfile::tempdir().unwrap();
    let emitted = dir.path().join("proven.tflite");
    let source = shared_model("tflm_hello_world_int8.tflite");
    let out = memtrace([
        "verify",
        path_str(&source),
        "--runtime",
        "tflm",
        "--emit-offline",
        path_str(&emitted),
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v = json(&out);
    let arena = v["arena_to_allocate"]["arena"]["bytes"].as_u64().unwrap();
    let text = std::fs::read_to_string(dir.path().join("proven.h")).unwrap();
    assert_eq!(arena_in_header(&text), arena);
    assert!(text.contains("proven by memtrace verify on real TFLM"));
    assert!(text.contains(&format!(
        "{} planner",
        v["plan"]["planner"].as_str().unwrap()
    )));
    assert!(std::fs::metadata(&emitted).unwrap().len() > 0);
}

/// The arena to allocate is measured on the inputs the verified run used:
/// the zoo's MobileNet v1 aborts in its SOFTMAX on all-zero inputs (real
/// TFLM does; the first run below shows it), so a measurement on zeros
/// gives no number, while the seeded run's measurement holds TFLM's head
/// and tail.
#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn the_arena_to_allocate_is_measured_on_the_verified_runs_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let zeros = dir.path().join("zeros.bin");
    std::fs::write(&zeros, vec![0u8; 128 * 128 * 3]).unwrap();
    let model = "zoo:mobilenet_v1_0.25_128_int8";
    let on_zeros = memtrace(["verify", model, "--input", path_str(&zeros), "--no-oracle"]);
    assert_eq!(on_zeros.status.code(), Some(1), "{}", stdout(&on_zeros));
    assert!(
        stderr(&on_zeros).contains("(SOFTMAX)"),
        "{}",
        stderr(&on_zeros)
    );
    let out = memtrace([
        "verify",
        model,
        "--planner",
        "dmo-heap",
        "--no-oracle",
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v = json(&out);
    let measured = &v["arena_to_allocate"];
    assert!(measured["not_measured"].is_null(), "{measured}");
    let arena = &measured["arena"];
    let head = arena["head_bytes"].as_u64().unwrap();
    assert_eq!(head, v["plan"]["head_bytes"].as_u64().unwrap());
    assert!(arena["bytes"].as_u64().unwrap() >= head + arena["tail_bytes"].as_u64().unwrap());
}

/// `plan` and `verify` choose the same plan when no planner is named: the
/// smallest of `plan`'s table (found here from its JSON, not from memtrace's
/// choice), on real TFLM with traced O_s; `plan --emit-offline` and
/// `verify --emit-offline` write the same model and the same arena.
#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn plan_and_verify_write_and_prove_the_same_plan_by_default() {
    let dir = tempfile::tempdir().unwrap();
    for (model, kernels) in [
        ("mlperf_tiny_ic_resnet8_int8.tflite", "tflm"),
        ("mlperf_tiny_kws_ds_cnn_int8.tflite", "cmsis-nn"),
    ] {
        let source = shared_model(model);
        let planned = dir.path().join(format!("{kernels}-planned.tflite"));
        let proven = dir.path().join(format!("{kernels}-proven.tflite"));
        let out = memtrace([
            "plan",
            path_str(&source),
            "--kernels",
            kernels,
            "--emit-offline",
            path_str(&planned),
            "--format",
            "json",
        ]);
        assert!(out.status.success(), "plan {model}: {}", stderr(&out));
        let p = json(&out);
        let plans = p["plans"].as_array().unwrap();
        let smallest = plans
            .iter()
            .filter_map(|x| x["peak_bytes"].as_u64())
            .min()
            .unwrap();
        let best = plans
            .iter()
            .find(|x| x["peak_bytes"].as_u64() == Some(smallest))
            .unwrap();
        assert_eq!(p["overlap_source"], "traced", "{model}");
        assert_eq!(
            p["arena_to_allocate"]["planner"], best["planner"],
            "{model}"
        );

        let out = memtrace([
            "verify",
            path_str(&source),
            "--kernels",
            kernels,
            "--emit-offline",
            path_str(&proven),
            "--format",
            "json",
        ]);
        let v = json(&out);
        assert!(out.status.success(), "verify {model}: {v}");
        assert_eq!(v["runtime"], "tflm", "{model}");
        assert_eq!(v["plan"]["planner"], best["planner"], "{model}");
        assert_eq!(v["plan"]["overlap"], best["overlap"], "{model}");
        assert_eq!(
            v["plan"]["planned_bytes"].as_u64(),
            Some(smallest),
            "{model}"
        );
        assert_eq!(
            v["arena_to_allocate"]["arena"]["bytes"], p["arena_to_allocate"]["arena"]["bytes"],
            "{model}"
        );
        let header =
            |m: &Path| arena_in_header(&std::fs::read_to_string(m.with_extension("h")).unwrap());
        assert_eq!(header(&planned), header(&proven), "{model}");
        // Both written models carry the same plan and say it is memtrace's.
        for written in [&planned, &proven] {
            let out = memtrace([
                "verify",
                path_str(written),
                "--kernels",
                kernels,
                "--format",
                "json",
            ]);
            let w = json(&out);
            assert!(out.status.success(), "verify {}: {w}", written.display());
            assert_eq!(
                w["plan"]["planned_bytes"].as_u64(),
                Some(smallest),
                "{model}"
            );
            assert_eq!(
                w["embedded_plan_origin"]["origin"],
                "memtrace",
                "{}: {w}",
                written.display()
            );
        }
    }
}
