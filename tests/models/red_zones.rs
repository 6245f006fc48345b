//! Red-zoned runs: a kernel whose sizing function under-reports its scratch
//! is caught on the model path, named by operator, buffer, kernel, byte
//! count and line, whatever buffer TFLM's own layout puts after the scratch.
//!
//! The kernel is memtrace's own probe (`harness-c/tflm/probe_ops.cc`,
//! registered only in the probe runners): `MEMTRACE_SCRATCH_PROBE` asks for
//! N − SHORT_BY bytes of scratch and copies all N input bytes into it with
//! `memcpy`. The one-operator models are written here with TFLite's schema.

use crate::common;

use common::{guest, json, memtrace, path_str, stderr, stdout};
use memtrace_model::schema::tflite as fb;
use serde_json::Value;

/// A one-operator model: `MEMTRACE_SCRATCH_PROBE` from an int8 input of
/// `input` bytes to an int8 output of `output` bytes, its sizing function
/// `short_by` bytes short.
fn probe_model(input: usize, output: usize, short_by: u32) -> Vec<u8> {
    probe_chain(&[input, output], &[[short_by, 3, 0, 0, 0]])
}

/// A chain of probes: operator k from tensor k (`sizes[k]` int8 bytes) to
/// tensor k + 1, with custom options `options[k]` (SHORT_BY, SEED, DIFFER,
/// READ_PAST, CLOBBER).
fn probe_chain(sizes: &[usize], options: &[[u32; 5]]) -> Vec<u8> {
    assert_eq!(sizes.len(), options.len() + 1);
    let tensors = sizes
        .iter()
        .enumerate()
        .map(|(k, &n)| fb::Tensor {
            shape: Some(vec![1, n as i32]),
            type_: fb::TensorType::Int8,
            buffer: 0,
            name: Some(format!("probe_t{k}")),
            ..Default::default()
        })
        .collect();
    let operators = options
        .iter()
        .enumerate()
        .map(|(k, words)| fb::Operator {
            opcode_index: 0,
            inputs: Some(vec![k as i32]),
            outputs: Some(vec![k as i32 + 1]),
            custom_options: Some(words.iter().flat_map(|w| w.to_le_bytes()).collect()),
            ..Default::default()
        })
        .collect();
    let m = fb::Model {
        version: 3,
        operator_codes: Some(vec![fb::OperatorCode {
            deprecated_builtin_code: fb::BuiltinOperator::Custom as i8,
            custom_code: Some("MEMTRACE_SCRATCH_PROBE".into()),
            version: 1,
            builtin_code: fb::BuiltinOperator::Custom,
        }]),
        subgraphs: Some(vec![fb::SubGraph {
            tensors: Some(tensors),
            inputs: Some(vec![0]),
            outputs: Some(vec![options.len() as i32]),
            operators: Some(operators),
            name: Some("main".into()),
        }]),
        description: Some("memtrace scratch probe".into()),
        buffers: Some(vec![fb::Buffer { data: None }]),
        ..Default::default()
    };
    memtrace_model::export::flatbuffer(&m)
}

/// The probe model written to a file of its own.
fn probe_file(dir: &tempfile::TempDir, input: usize, output: usize, short_by: u32) -> String {
    let path = dir
        .path()
        .join(format!("probe-{input}-{output}-{short_by}.tflite"));
    std::fs::write(&path, probe_model(input, output, short_by)).unwrap();
    path.display().to_string()
}

/// The probe runner of a kernel build.
fn probe_runner(kernels: &str) -> String {
    let name = match kernels {
        "cmsis-nn" => "tflm-runner-cmsis-probe",
        _ => "tflm-runner-probe",
    };
    path_str(&guest("cortex-m4", name)).to_owned()
}

/// `memtrace run MODEL --runner PROBE ARGS --format json` → (exit, report).
fn run_probe(model: &str, kernels: &str, extra: &[&str]) -> (i32, Value, String) {
    let runner = probe_runner(kernels);
    let mut args = vec![
        "run",
        model,
        "--kernels",
        kernels,
        "--runner",
        &runner,
        "--format",
        "json",
    ];
    args.extend(extra);
    let out = memtrace(&args);
    (out.status.code().unwrap_or(-1), json(&out), stderr(&out))
}

/// `memtrace verify MODEL --kernels KERNELS --runner PROBE ARGS`.
fn verify_probe(model: &str, kernels: &str, extra: &[&str]) -> std::process::Output {
    let runner = probe_runner(kernels);
    let mut args = vec!["verify", model, "--kernels", kernels, "--runner", &runner];
    args.extend(extra);
    memtrace(&args)
}

/// The contract of the probe's layer (`0:MEMTRACE_SCRATCH_PROBE:…`).
fn probe_contract(report: &Value) -> &Value {
    let layers = report["layers"].as_array().expect("layers");
    let layer = layers
        .iter()
        .find(|l| l["op"] == "MEMTRACE_SCRATCH_PROBE")
        .unwrap_or_else(|| panic!("no probe layer in {report}"));
    &layer["contract"]
}

/// A 256 B input, a 16 B output: TFLM's greedy planner puts the input
/// first, the scratch after it and the output right after the scratch, so
/// a scratch 16 B short is overrun into the output, which the kernel then
/// overwrites: TFLM's own layout hides the bug.
#[test]
fn a_scratch_overrun_hidden_in_the_output_by_tflms_layout_is_caught_by_the_red_zoned_run() {
    let dir = tempfile::tempdir().unwrap();
    let model = probe_file(&dir, 256, 16, 16);
    for kernels in ["tflm", "cmsis-nn"] {
        let (code, plain, err) = run_probe(&model, kernels, &[]);
        assert_eq!(code, 0, "{kernels}: {err}");
        let hidden = probe_contract(&plain);
        assert_eq!(
            hidden["ok"], true,
            "{kernels}: in TFLM's layout the overrun lands in the output (premise): {hidden}"
        );

        let (code, zoned, err) = run_probe(&model, kernels, &["--strict"]);
        assert_eq!(code, 1, "{kernels}: --strict fails: {err}");
        assert_eq!(zoned["tflm"]["red_zone_bytes"], 64, "{kernels}");
        let c = probe_contract(&zoned);
        assert_eq!(c["ok"], false, "{kernels}: {c}");
        let reach = c["stray_reach"].as_array().unwrap();
        assert!(
            reach
                .iter()
                .any(|r| r["buffer"] == "scratch0" && r["side"] == "after_end" && r["bytes"] == 16),
            "{kernels}: 16 B past the end of scratch0: {c}"
        );
        let first = &c["stray_write"]["first"];
        let chain: Vec<String> = std::iter::once(first["function"].clone())
            .chain(
                first["callers"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|s| s["function"].clone()),
            )
            .map(|f| f.as_str().unwrap_or("").to_owned())
            .collect();
        assert!(
            chain.iter().any(|f| f.contains("probe_invoke")),
            "{kernels}: the kernel is named in the chain {chain:?}: {first}"
        );
    }
}

/// The same overrun by 4, 16 and 32 bytes on the other layout (a large
/// output placed first, the scratch last), and the text a user reads.
#[test]
fn every_short_sizing_is_caught_with_its_byte_count_and_a_correct_one_passes_clean() {
    let dir = tempfile::tempdir().unwrap();
    for short_by in [4u32, 16, 32] {
        let model = probe_file(&dir, 64, 256, short_by);
        let (code, zoned, err) = run_probe(&model, "tflm", &["--strict"]);
        assert_eq!(code, 1, "short by {short_by}: {err}");
        // The warning a user reads: operator, buffer, bytes, kernel, line.
        let warning = err
            .lines()
            .find(|l| l.contains("memory contract: stray_write"))
            .unwrap_or_else(|| panic!("short by {short_by}: no warning in {err}"));
        for part in [
            "layer `0:MEMTRACE_SCRATCH_PROBE:probe_t1`".to_owned(),
            format!("{short_by} B past the end of `scratch0`"),
            "`probe_invoke` (tflm/probe_ops.cc:".to_owned(),
        ] {
            assert!(
                warning.contains(&part),
                "short by {short_by}: `{part}` in {warning}"
            );
        }
        let c = probe_contract(&zoned);
        let reach = c["stray_reach"].as_array().unwrap();
        assert!(
            reach
                .iter()
                .any(|r| r["buffer"] == "scratch0" && r["bytes"] == short_by),
            "short by {short_by}: {c}"
        );
    }
    let clean = probe_file(&dir, 64, 256, 0);
    let runner = probe_runner("tflm");
    let out = memtrace([
        "run",
        &clean,
        "--kernels",
        "tflm",
        "--runner",
        &runner,
        "--strict",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("memory contract (checked in a red-zoned run: 64 B free before and after"),
        "{text}"
    );
}

/// `verify` checks the kernels in a red-zoned run of the model: an overrun
/// fails the verify, with or without the host oracle (which cannot run
/// memtrace's probe kernel and says so), naming operator, buffer, byte
/// count, kernel and line; the correct kernel verifies clean.
#[test]
fn verify_fails_on_a_short_scratch_with_or_without_the_oracle_and_passes_a_correct_one() {
    let dir = tempfile::tempdir().unwrap();
    let short = probe_file(&dir, 256, 16, 16);
    for oracle in [None, Some("--no-oracle")] {
        let out = verify_probe(&short, "cmsis-nn", oracle.as_slice());
        assert_eq!(out.status.code(), Some(1), "{oracle:?}: {}", stderr(&out));
        let text = stdout(&out);
        let finding = text
            .lines()
            .find(|l| l.contains("operator `0:MEMTRACE_SCRATCH_PROBE:probe_t1`: stray_write"))
            .unwrap_or_else(|| panic!("{oracle:?}: no kernel finding in\n{text}"));
        for part in [
            "past the end of `scratch0`",
            "16 B past the end of `scratch0`",
            "`probe_invoke` (tflm/probe_ops.cc:",
        ] {
            assert!(finding.contains(part), "{oracle:?}: `{part}` in {finding}");
        }
        assert!(text.contains("result: FAILED"), "{text}");
    }
    let clean = probe_file(&dir, 256, 16, 0);
    let out = verify_probe(&clean, "cmsis-nn", &["--format", "json"]);
    let report = json(&out);
    assert_eq!(report["kernel_check"]["findings"], serde_json::json!([]));
    assert_eq!(report["kernel_check"]["red_zone_bytes"], 64);
    assert!(
        report["kernel_check"]["instructions"].as_u64().unwrap() > 0,
        "{report}"
    );
}

/// `verify --kernels cmsis-nn` runs every operator on the reference kernels
/// too: a kernel whose CMSIS-NN build is not bit-exact is named, with the
/// bytes that differ, although the graph's final outputs and the host
/// oracle say nothing (here the oracle cannot run the probe at all).
#[test]
fn verify_names_the_first_operator_whose_cmsis_nn_outputs_differ_from_the_reference_kernels() {
    let dir = tempfile::tempdir().unwrap();
    // Operator 1 differs on CMSIS-NN; operator 2 reads its output.
    let model = dir.path().join("differs.tflite");
    std::fs::write(
        &model,
        probe_chain(
            &[32, 48, 40, 24],
            &[[0, 3, 0, 0, 0], [0, 5, 1, 0, 0], [0, 7, 0, 0, 0]],
        ),
    )
    .unwrap();
    let out = verify_probe(path_str(&model), "cmsis-nn", &["--format", "json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report = json(&out);
    let d = &report["reference_kernels"]["first_difference"];
    assert_eq!(d["index"], 1, "{report}");
    assert_eq!(d["op"], "MEMTRACE_SCRATCH_PROBE");
    assert_eq!(d["output"], "probe_t2");
    // Every byte i of its 40-byte output with i % 4 == 1 was perturbed.
    let perturbed = (0..40).filter(|i| i % 4 == 1).count() as u64;
    assert_eq!(d["output_bytes"], 40);
    assert_eq!(d["differing_bytes"], perturbed);
    assert_eq!(d["first_differing_byte"], 1);
    assert_eq!(d["later_operators_differing"], 1);
}

/// A load past the end of a tensor is seen in the red zone after it: an
/// `out_of_bounds_read` naming the tensor and how far past its end the load
/// reached, in `run --strict` and `verify`.
#[test]
fn a_kernel_reading_past_its_input_is_an_out_of_bounds_read_of_that_input() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("over-read.tflite");
    // 40 input bytes: the read of 8 more reaches 8 B past the end (the 8
    // bytes of alignment padding to 48 are the zone's too).
    std::fs::write(&model, probe_chain(&[40, 16], &[[0, 3, 0, 8, 0]])).unwrap();
    let (code, report, err) = run_probe(path_str(&model), "tflm", &["--strict"]);
    assert_eq!(code, 1, "{err}");
    let c = probe_contract(&report);
    let r = &c["out_of_bounds_read"];
    assert_eq!(r["ok"], false, "{c}");
    assert_eq!(
        r["violations"], 8,
        "one 1-byte load per byte read past: {c}"
    );
    let first = &r["first"];
    assert_eq!(first["nearest"]["buffer"], "probe_t0", "{first}");
    assert_eq!(first["nearest"]["side"], "after_end");
    assert_eq!(
        first["nearest"]["bytes"], 1,
        "the first load is the byte just past: {first}"
    );
    assert!(
        first["function"]
            .as_str()
            .unwrap_or("")
            .contains("probe_invoke"),
        "{first}"
    );
    let out = verify_probe(path_str(&model), "tflm", &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("out_of_bounds_read: 1 B load from")
            && text.contains("past the end of `probe_t0`"),
        "{text}"
    );
}

/// The probe counts its invocations in its op data, memory it allocated for
/// itself in Init: the runner declares it as the operator's own
/// (`persistent0`), so those writes are no stray writes. A probe that also
/// stores to the op data of the probe before it writes another operator's
/// persistent memory: a stray write of its layer, in its kernel.
#[test]
fn state_in_an_operators_own_persistent_memory_is_its_own_and_another_operators_is_stray() {
    let dir = tempfile::tempdir().unwrap();
    let chain = |clobber: u32| {
        let path = dir.path().join(format!("state-{clobber}.tflite"));
        let options = [[0, 3, 0, 0, 0], [0, 5, 0, 0, clobber]];
        std::fs::write(&path, probe_chain(&[32, 32, 32], &options)).unwrap();
        path.display().to_string()
    };
    let layer_contract = |report: &Value, k: usize| -> Value {
        let layers = report["layers"].as_array().expect("layers");
        let prefix = format!("{k}:MEMTRACE_SCRATCH_PROBE:");
        let layer = layers
            .iter()
            .find(|l| l["name"].as_str().is_some_and(|n| n.starts_with(&prefix)))
            .unwrap_or_else(|| panic!("no layer {prefix} in {report}"));
        layer["contract"].clone()
    };
    for kernels in ["tflm", "cmsis-nn"] {
        let (code, report, err) = run_probe(&chain(0), kernels, &["--strict"]);
        assert_eq!(code, 0, "{kernels}: {err}");
        for k in 0..2 {
            let c = layer_contract(&report, k);
            assert_eq!(c["stray_write"]["violations"], 0, "{kernels} {k}: {c}");
        }
        let (code, report, err) = run_probe(&chain(1), kernels, &["--strict"]);
        assert_eq!(code, 1, "{kernels}: {err}");
        assert_eq!(
            layer_contract(&report, 0)["stray_write"]["violations"],
            0,
            "{kernels}: the first probe writes only its own state"
        );
        let c = layer_contract(&report, 1);
        let stray = &c["stray_write"];
        assert_eq!(stray["violations"], 1, "{kernels}: one word stored: {c}");
        assert_eq!(stray["first"]["size"], 4, "{kernels}: {c}");
        assert!(
            stray["first"]["function"]
                .as_str()
                .unwrap_or("")
                .contains("probe_invoke"),
            "{kernels}: {c}"
        );
    }
}
