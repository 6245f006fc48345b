//! `memtrace verify` on whole models: real TFLM (reference kernels) runs
//! TFLM's own plan and a DMO plan in the emulator; the arena is checked byte
//! by byte (shadow map) and the outputs bit by bit, against each other and
//! against PyPI `tflite-micro`. Plans placed past the O_s that `memtrace
//! run` traced must be caught, and plans placed exactly at it must pass.

use crate::common;

use std::path::PathBuf;

use common::{memtrace, stderr, u};
use serde_json::{json, Value};

/// A tfmicro example model's path as an argument.
fn tfmicro_model(name: &str) -> String {
    common::tfmicro_model(name).display().to_string()
}

/// `memtrace verify MODEL ARGS --format json` → (exit code, report).
fn verify(model: &str, args: &[&str]) -> (i32, Value) {
    let mut all = vec!["verify", model, "--format", "json"];
    all.extend_from_slice(args);
    let out = memtrace(&all);
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("memtrace {all:?}: no JSON ({e}): {}", stderr(&out)));
    (out.status.code().unwrap_or(-1), report)
}

/// DMO plan with `overlap` O_s: zero clobbers, bit-exact with TFLM's own
/// plan, a head no larger than TFLM's own, every tensor inside it.
fn assert_dmo_safe(model: &str, overlap: &str) -> Value {
    let (code, r) = verify(model, &["--planner", "dmo-heap", "--overlap", overlap]);
    assert_eq!(r["target"], "cortex-m4");
    assert_eq!(r["plan"]["planner"], "dmo-heap");
    assert_eq!(r["plan"]["overlap"], overlap);
    assert_eq!(r["clobbers"], json!([]), "{model}: clobbers");
    assert_eq!(r["reference"]["clobbers"], json!(0), "{model}");
    assert_eq!(r["bit_exact"], true, "{model}: outputs differ");
    assert_eq!(code, 0, "{model}: {r}");
    let (reference, planned) = (
        u(&r["reference"]["head_bytes"]),
        u(&r["plan"]["planned_bytes"]),
    );
    assert!(
        planned > 0 && planned <= reference,
        "{model}: {planned} > {reference}"
    );
    // TFLM honoured the plan: its head is the plan's arena, and every
    // tensor lies where the plan put it, inside it.
    assert_eq!(u(&r["plan"]["head_bytes"]), planned, "{model}");
    for t in r["tensors"].as_array().unwrap() {
        let (Some(at), Some(tflm)) = (t["planned_offset"].as_u64(), t["tflm_offset"].as_u64())
        else {
            continue;
        };
        assert_eq!(at, tflm, "{model}: {t}");
        assert!(
            at + u(&t["bytes"]) <= planned,
            "{model}: {t} beyond {planned}"
        );
    }
    r
}

#[test]
fn mobilenet_v1_int8_dmo_plan_is_clobber_free_and_bit_exact() {
    let r = assert_dmo_safe("zoo:mobilenet_v1_0.25_128_int8", "traced");
    // The paper's Table III saving: at least 30 % of TFLM's own head.
    assert!(u(&r["plan"]["planned_bytes"]) * 10 < u(&r["reference"]["head_bytes"]) * 7);
}

#[test]
fn sakr_cifar10_dmo_plan_is_clobber_free_and_bit_exact_with_algorithmic_os() {
    assert_dmo_safe("zoo:sakr_cifar10", "algorithmic");
}

/// Models of another package's registry copy (the `tfmicro` crate): the two
/// TFLM runs verify; the one TFLM refuses is refused in TFLM's own words,
/// not verified against a model of TFLM.
#[test]
fn tfmicro_example_models_verify_or_are_refused_as_tflm_refuses_them() {
    for m in ["hello_world", "magic_wand"] {
        assert_dmo_safe(&tfmicro_model(m), "traced");
    }
    let out = memtrace(["verify", &tfmicro_model("micro_speech")]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("fully_connected"),
        "TFLM's failing check is named: {}",
        stderr(&out)
    );
}

#[test]
fn x86_64_runner_verifies_the_example_models_too() {
    for m in ["hello_world", "magic_wand"] {
        let (code, r) = verify(&tfmicro_model(m), &["--target", "x86-64"]);
        assert_eq!(r["target"], "x86-64");
        assert_eq!(r["clobbers"], json!([]), "{m}");
        assert_eq!(r["bit_exact"], true, "{m}");
        assert_eq!(code, 0, "{m}: {r}");
    }
}

/// Every operator's overlap as `memtrace run` traces it on TFLM (an
/// independent run): the layers in operator order.
fn traced_overlaps(model: &str) -> Vec<Value> {
    let out = memtrace(["run", model, "--format", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    r["layers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| !l["overlap"].is_null())
        .map(|l| {
            let mut o = l["overlap"].clone();
            o["layer"] = l["name"].clone();
            o
        })
        .collect()
}

/// A plan file with two tensors at the given offsets (every other tensor
/// keeps TFLM's own offset).
fn two_tensor_plan(dir: &std::path::Path, tag: &str, placed: [(&str, u64); 2]) -> PathBuf {
    let plan = json!({
        "tensors": placed.iter().map(|(name, offset)| json!({"name": name, "offset": offset}))
            .collect::<Vec<_>>()
    });
    let path = dir.join(format!("{tag}.json"));
    std::fs::write(&path, plan.to_string()).unwrap();
    path
}

/// One operator's input placed over its output's end by the traced O_s +
/// 16 bytes (both moved past TFLM's own head): the shadow map must name
/// that operator and tensor.
#[test]
fn an_overlap_beyond_the_traced_os_is_reported_as_a_clobber() {
    let model = tfmicro_model("magic_wand");
    let (code, r) = verify(&model, &["--planner", "tflm-greedy"]);
    assert_eq!(code, 0, "{r}");
    let victim = traced_overlaps(&model)
        .into_iter()
        .find(|o| u(&o["monotone_bytes"]) + 16 < u(&o["input_bytes"]))
        .expect("an operator whose O_s is below its input size");
    let (layer, input, output) = (
        victim["layer"].as_str().unwrap(),
        victim["input"].as_str().unwrap(),
        victim["output"].as_str().unwrap(),
    );
    let os = u(&victim["monotone_bytes"]);
    let ob = u(&victim["output_bytes"]);
    let base = u(&r["reference"]["head_bytes"]).div_ceil(16) * 16;
    let dir = tempfile::tempdir().unwrap();
    let plan = two_tensor_plan(
        dir.path(),
        "unsafe",
        [(output, base), (input, base + ob - (os + 16))],
    );
    let (code, r) = verify(&model, &["--plan", plan.to_str().unwrap()]);
    assert_eq!(code, 1, "an unsafe plan must fail: {r}");
    let clobbers = r["clobbers"].as_array().unwrap();
    let c = clobbers
        .iter()
        .find(|c| c["op"] == layer && c["tensor"] == input)
        .unwrap_or_else(|| panic!("no clobber of {input} by {layer}: {clobbers:?}"));
    assert_eq!(c["overwritten_by"]["tensor"], output);
    // The first clobbered byte lies in the overlapped part of the input.
    assert!(u(&c["offset"]) < os + 16);
    assert_eq!(r["reference"]["clobbers"], json!(0));
}

/// The reverse sweep, proved by running it: every operator of magic_wand
/// gets its input placed *below* its output, the input's end over the
/// output's start by the reverse O_s `run` traced (clean, bit-exact), then
/// by one float element more (a clobber of that input by that operator).
#[test]
fn the_traced_reverse_os_is_exactly_the_safe_reverse_overlap() {
    let model = tfmicro_model("magic_wand");
    let (code, r) = verify(&model, &["--planner", "tflm-greedy"]);
    assert_eq!(code, 0, "{r}");
    let base = u(&r["reference"]["head_bytes"]).div_ceil(16) * 16;
    let dir = tempfile::tempdir().unwrap();
    let mut nonzero = 0;
    for (i, v) in traced_overlaps(&model).iter().enumerate() {
        let (layer, input, output) = (
            v["layer"].as_str().unwrap(),
            v["input"].as_str().unwrap(),
            v["output"].as_str().unwrap(),
        );
        let ib = u(&v["input_bytes"]);
        let reverse = u(&v["reverse_exact_bytes"]);
        nonzero += usize::from(reverse > 0);
        // Output at base + IB; the input's end reaches o bytes into it.
        let run_with = |o: u64| {
            let plan = two_tensor_plan(
                dir.path(),
                &format!("reverse-{i}-{o}"),
                [(output, base + ib), (input, base + o)],
            );
            verify(&model, &["--plan", plan.to_str().unwrap()])
        };
        let (code, safe) = run_with(reverse);
        assert_eq!(code, 0, "{layer} at reverse O_s {reverse}: {safe}");
        assert_eq!(safe["clobbers"], json!([]));
        let (code, unsafe_) = run_with(reverse + 4);
        assert_eq!(
            code, 1,
            "{layer} at reverse O_s + 4 must clobber: {unsafe_}"
        );
        // A byte both tensors share is read either as the input (a
        // clobber) or as the output the kernel wrote: TFLM's SOFTMAX reads
        // its output back to normalise it, so there the shadow map cannot
        // tell the two reads apart and the wrong outputs show the clobber.
        let clobbers = unsafe_["clobbers"].as_array().unwrap();
        let named = clobbers
            .iter()
            .any(|c| c["op"] == layer && c["tensor"] == input);
        let reads_its_output = layer.contains(":SOFTMAX:");
        assert!(
            named || (reads_its_output && unsafe_["bit_exact"] == false),
            "{layer}: {unsafe_}"
        );
    }
    // MaxPool leaves the input's last rows unread: a reverse overlap exists.
    assert!(nonzero >= 1);
}

#[test]
fn plot_draws_both_runs_of_the_arena_trace() {
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("magic_wand-arena.png");
    let (code, r) = verify(
        &tfmicro_model("magic_wand"),
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
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sakr_cifar10.tflite");
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

#[test]
fn a_missing_runner_or_unknown_planner_is_a_clear_error() {
    for flag in ["--runner", "--executor"] {
        let out = memtrace([
            "verify",
            "zoo:sakr_cifar10",
            flag,
            "/nonexistent/runner.elf",
        ]);
        assert_eq!(out.status.code(), Some(1), "{flag}");
        assert!(stderr(&out).contains("runner.elf"), "{}", stderr(&out));
    }
    // An unknown planner is a usage error (exit 2) naming the planners there are.
    let out = memtrace(["verify", "zoo:sakr_cifar10", "--planner", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("'nope'") && err.contains("dmo-heap"), "{err}");
}
