//! `memtrace verify` on whole models: the real binary runs the real executor
//! ELF (TFLM reference kernels) under the reference plan and a DMO plan, and
//! checks the arena byte by byte (shadow map) and the outputs bit by bit.

mod common;

use std::path::PathBuf;

use common::{guest, memtrace, stderr};
use serde_json::{json, Value};

/// A tfmicro example model's path as an argument.
fn tfmicro_model(name: &str) -> String {
    common::tfmicro_model(name).display().to_string()
}

/// `memtrace verify MODEL ARGS --format json` → (exit code, report).
fn verify(model: &str, args: &[&str]) -> (i32, Value) {
    let exe = guest("cortex-m4", "executor");
    let mut all = vec![
        "verify".to_string(),
        "--runtime".into(),
        "executor".into(),
        model.to_string(),
        "--executor".into(),
        exe.display().to_string(),
        "--format".into(),
        "json".into(),
    ];
    all.extend(args.iter().map(|s| s.to_string()));
    let out = memtrace(&all);
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("memtrace {all:?}: no JSON ({e}): {}", stderr(&out)));
    (out.status.code().unwrap_or(-1), report)
}

/// DMO plan with traced O_s: zero clobbers, bit-exact, smaller arena.
fn assert_dmo_safe(model: &str, overlap: &str) -> Value {
    let (code, r) = verify(model, &["--planner", "dmo-heap", "--overlap", overlap]);
    assert_eq!(r["target"], "cortex-m4");
    assert_eq!(r["plan"]["planner"], "dmo-heap");
    assert_eq!(r["plan"]["overlap"], overlap);
    assert_eq!(r["clobbers"], json!([]), "{model}: clobbers");
    assert_eq!(
        r["reference"]["clobbers"],
        json!([]),
        "{model}: reference clobbers"
    );
    assert_eq!(r["bit_exact"], true, "{model}: outputs differ");
    assert_eq!(code, 0);
    let (reference, plan) = (
        r["reference"]["arena_bytes"].as_u64().unwrap(),
        r["plan"]["arena_bytes"].as_u64().unwrap(),
    );
    assert!(
        plan > 0 && plan <= reference,
        "{model}: {plan} > {reference}"
    );
    // Every placed tensor lies inside its arena.
    for run in ["reference", "plan"] {
        let arena = r[run]["arena_bytes"].as_u64().unwrap();
        for t in r[run]["tensors"].as_array().unwrap() {
            let end = t["offset"].as_u64().unwrap() + t["size"].as_u64().unwrap();
            assert!(end <= arena, "{model} {run}: {t} beyond {arena}");
        }
    }
    r
}

#[test]
fn mobilenet_v1_int8_dmo_plan_is_clobber_free_and_bit_exact() {
    let r = assert_dmo_safe("zoo:mobilenet_v1_0.25_128_int8", "traced");
    // DMO overlaps were really used (the paper's Table III saving).
    assert!(!r["plan"]["overlaps_used"].as_array().unwrap().is_empty());
    assert!(
        r["plan"]["arena_bytes"].as_u64().unwrap() * 10
            < r["reference"]["arena_bytes"].as_u64().unwrap() * 7
    );
    // The traced O_s the plan used is what the reference run measured.
    for u in r["plan"]["overlaps_used"].as_array().unwrap() {
        let op = &u["op"];
        let traced = r["traced_overlaps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["op"] == *op)
            .unwrap();
        assert_eq!(u["safe_bytes"], traced["monotone_bytes"], "{op}");
        assert!(u["bytes"].as_u64() <= u["safe_bytes"].as_u64());
    }
}

#[test]
fn sakr_cifar10_dmo_plan_is_clobber_free_and_bit_exact_with_algorithmic_os() {
    assert_dmo_safe("zoo:sakr_cifar10", "algorithmic");
}

#[test]
fn tfmicro_example_models_dmo_plans_are_clobber_free_and_bit_exact() {
    for m in ["hello_world", "magic_wand", "micro_speech"] {
        assert_dmo_safe(&tfmicro_model(m), "traced");
    }
}

#[test]
fn x86_64_executor_verifies_the_example_models_too() {
    let exe = guest("x86_64", "executor");
    for m in ["hello_world", "magic_wand", "micro_speech"] {
        let out = memtrace([
            "verify",
            "--runtime",
            "executor",
            &tfmicro_model(m),
            "--target",
            "x86-64",
            "--executor",
            exe.to_str().unwrap(),
            "--format",
            "json",
        ]);
        let r: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(r["target"], "x86-64");
        assert_eq!(r["clobbers"], json!([]), "{m}");
        assert_eq!(r["bit_exact"], true, "{m}");
        assert_eq!(out.status.code(), Some(0), "{m}: {}", stderr(&out));
    }
}

#[test]
fn person_detection_dmo_plan_is_clobber_free_and_bit_exact() {
    let r = assert_dmo_safe(&tfmicro_model("person_detection_grayscale"), "traced");
    assert!(!r["plan"]["overlaps_used"].as_array().unwrap().is_empty());
}

/// One operator's input placed over its output's end by traced O_s + 16
/// bytes (both moved past the reference arena, everything else at its
/// reference offset): the shadow map must name that operator and tensor.
#[test]
fn an_overlap_beyond_the_traced_os_is_reported_as_a_clobber() {
    let model = tfmicro_model("magic_wand");
    let (code, r) = verify(&model, &["--planner", "tflm-greedy"]);
    assert_eq!(code, 0, "{r}");
    let ops = r["traced_overlaps"].as_array().unwrap();
    let victim = ops
        .iter()
        .find(|o| {
            o["monotone_bytes"]
                .as_u64()
                .is_some_and(|m| m + 16 < o["input_bytes"].as_u64().unwrap())
        })
        .expect("an operator whose O_s is below its input size");
    let (op, input, output) = (
        victim["op"].as_str().unwrap(),
        victim["input"].as_str().unwrap(),
        victim["output"].as_str().unwrap(),
    );
    let os = victim["monotone_bytes"].as_u64().unwrap();
    let ob = victim["output_bytes"].as_u64().unwrap();
    let base = r["reference"]["arena_bytes"].as_u64().unwrap().div_ceil(16) * 16;
    let plan = json!({
        "tensors": [
            {"name": output, "offset": base},
            {"name": input, "offset": base + ob - (os + 16)},
        ]
    });
    let dir = tempfile_dir();
    let path = dir.join("unsafe-plan.json");
    std::fs::write(&path, plan.to_string()).unwrap();
    let (code, r) = verify(&model, &["--plan", path.to_str().unwrap()]);
    assert_eq!(code, 1, "an unsafe plan must fail: {r}");
    let clobbers = r["clobbers"].as_array().unwrap();
    assert!(!clobbers.is_empty());
    let c = clobbers
        .iter()
        .find(|c| c["op"] == op && c["tensor"] == input)
        .unwrap_or_else(|| panic!("no clobber of {input} by {op}: {clobbers:?}"));
    assert_eq!(c["overwritten_by"]["op"], op);
    assert_eq!(c["overwritten_by"]["tensor"], output);
    // The first clobbered byte lies in the overlapped part of the input.
    assert!(c["offset"].as_u64().unwrap() < os + 16);
    // The reference run itself is clean.
    assert_eq!(r["reference"]["clobbers"], json!([]));
}

/// The reverse sweep, proved by running it: every operator of magic_wand gets
/// its input placed *below* its output, the input's end over the output's
/// start by the traced reverse O_s (clean, bit-exact), then by one float
/// element more (a clobber of that input by that operator).
#[test]
fn the_traced_reverse_os_is_exactly_the_safe_reverse_overlap() {
    let model = tfmicro_model("magic_wand");
    let (code, r) = verify(&model, &["--planner", "tflm-greedy"]);
    assert_eq!(code, 0, "{r}");
    let base = r["reference"]["arena_bytes"].as_u64().unwrap().div_ceil(16) * 16;
    let dir = tempfile_dir();
    let mut nonzero = 0;
    for v in r["traced_overlaps"].as_array().unwrap() {
        let (op, input, output) = (
            v["op"].as_str().unwrap(),
            v["input"].as_str().unwrap(),
            v["output"].as_str().unwrap(),
        );
        let ib = v["input_bytes"].as_u64().unwrap();
        let reverse = v["reverse_exact_bytes"].as_u64().unwrap();
        nonzero += usize::from(reverse > 0);
        // Output at base + IB; the input's end reaches o bytes into it.
        let run_with = |o: u64| {
            let plan = json!({
                "tensors": [
                    {"name": output, "offset": base + ib},
                    {"name": input, "offset": base + o},
                ]
            });
            let path = dir.join(format!("reverse-{}-{o}.json", v["index"]));
            std::fs::write(&path, plan.to_string()).unwrap();
            verify(&model, &["--plan", path.to_str().unwrap()])
        };
        let (code, safe) = run_with(reverse);
        assert_eq!(code, 0, "{op} at reverse O_s {reverse}: {safe}");
        assert_eq!(safe["clobbers"], json!([]));
        let (code, unsafe_) = run_with(reverse + 4);
        assert_eq!(code, 1, "{op} at reverse O_s + 4 must clobber: {unsafe_}");
        let clobbers = unsafe_["clobbers"].as_array().unwrap();
        assert!(
            clobbers
                .iter()
                .any(|c| c["op"] == op && c["tensor"] == input),
            "{op}: {clobbers:?}"
        );
    }
    // MaxPool leaves the input's last rows unread: a reverse overlap exists.
    assert!(nonzero >= 1, "{r}");
}

#[test]
fn plot_draws_both_runs_of_the_arena_trace() {
    let dir = tempfile_dir();
    let png = dir.join("micro_speech-arena.png");
    let (code, r) = verify(
        &tfmicro_model("micro_speech"),
        &["--plot", png.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{r}");
    let bytes = std::fs::read(&png).expect("the plot was written");
    assert_eq!(&bytes[1..4], b"PNG");
    assert!(bytes.len() > 10_000);
}

/// `memtrace zoo export` writes a .tflite that imports back and verifies
/// like any real model.
#[test]
fn an_exported_zoo_model_verifies_as_a_tflite_file() {
    let dir = tempfile_dir();
    let path = dir.join("sakr_cifar10.tflite");
    let out = memtrace(["zoo", "export", "sakr_cifar10", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(&bytes[4..8], b"TFL3");
    assert_dmo_safe(path.to_str().unwrap(), "traced");
    let out = memtrace(["zoo", "export", "no_such_model", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("unknown zoo model"),
        "{}",
        stderr(&out)
    );
}

fn tempfile_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("memtrace-verify-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_missing_executor_or_unknown_planner_is_a_clear_error() {
    let out = memtrace([
        "verify",
        "--runtime",
        "executor",
        "zoo:sakr_cifar10",
        "--executor",
        "/nonexistent/executor.elf",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("executor.elf"), "{}", stderr(&out));
    // An unknown planner is a usage error (exit 2) naming the planners there are.
    let out = memtrace([
        "verify",
        "--runtime",
        "executor",
        "zoo:sakr_cifar10",
        "--planner",
        "nope",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("'nope'") && err.contains("dmo-heap"), "{err}");
}
