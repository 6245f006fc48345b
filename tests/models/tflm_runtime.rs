//! Real TensorFlow Lite Micro in the emulator (the TFLM runner guests):
//! `memtrace run MODEL.tflite` traces every operator of TFLM's own
//! interpreter, and `verify` proves a plan by giving it to TFLM as
//! `OfflineMemoryAllocation`. Every figure is checked against a second
//! method: memtrace's Algorithm 2, memtrace's kernel suite, memtrace's
//! greedy planner against TFLM's, and PyPI `tflite-micro` on the host.

use crate::common;
use common::shared_model;

use std::path::PathBuf;

use common::{json, memtrace, stderr, u};
use serde_json::Value;

/// Every model of `../shared/models/`.
fn shared_models() -> Vec<String> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/models");
    let mut models: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "tflite"))
        .map(|p| p.display().to_string())
        .collect();
    models.sort();
    models
}

fn run_model(model: &str, args: &[&str]) -> Value {
    let mut all = vec!["run", model, "--format", "json"];
    all.extend_from_slice(args);
    let out = memtrace(&all);
    assert!(
        out.status.success(),
        "run {model} {args:?}: {}",
        stderr(&out)
    );
    json(&out)
}

fn verify(model: &str, args: &[&str]) -> (bool, Value) {
    let mut all = vec!["verify", model, "--format", "json"];
    all.extend_from_slice(args);
    let out = memtrace(&all);
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "verify {model} {args:?}: {}",
        stderr(&out)
    );
    (out.status.success(), json(&out))
}

/// The operator layers of a run (without the `load_input` windows).
fn op_layers(report: &Value) -> Vec<&Value> {
    report["layers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["name"] != "load_input")
        .collect()
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn run_traces_every_operator_of_tflms_own_interpreter() {
    let model = shared_model("tflm_person_detect.tflite");
    let r = run_model(&model, &[]);
    let tflm = &r["tflm"];
    let ops = op_layers(&r);
    assert_eq!(ops.len() as u64, u(&tflm["operators"]));
    for (i, l) in ops.iter().enumerate() {
        let name = l["name"].as_str().unwrap();
        assert!(
            name.starts_with(&format!("{i}:{}:", l["op"].as_str().unwrap())),
            "{name}"
        );
        assert_eq!(l["params"], format!("index={i}"));
        // The interpreter's bookkeeping between operators is TFLM's, not
        // the kernel's: set apart, and the kernels keep the contract.
        assert_eq!(l["contract"]["ok"], true, "{name}: {}", l["contract"]);
        assert!(u(&l["contract"]["runtime_writes"]) > 0, "{name}");
    }
    let inputs = r["layers"].as_array().unwrap().len() - ops.len();
    assert_eq!(inputs, 1, "one load_input window per graph input");
    assert!(u(&tflm["head_bytes"]) + u(&tflm["tail_bytes"]) <= u(&tflm["arena_used_bytes"]));

    // memtrace's reimplementation of TFLM's greedy planner predicts the head
    // TFLM laid out (no operator of this model asks for scratch).
    let out = memtrace([
        "plan",
        &model,
        "--planner",
        "tflm-greedy",
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let plan = json(&out);
    let greedy = plan["plans"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["planner"] == "tflm-greedy")
        .unwrap();
    assert_eq!(greedy["peak_bytes"], tflm["head_bytes"]);
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn tflms_reference_kernels_walk_memory_as_algorithm_2_predicts() {
    for model in [
        shared_model("tflm_person_detect.tflite"),
        shared_model("mlperf_tiny_kws_ds_cnn_int8.tflite"),
    ] {
        let r = run_model(&model, &[]);
        let mut checked = 0;
        for l in op_layers(&r) {
            let o = &l["overlap"];
            if o["algorithmic_bytes"].is_u64() {
                assert_eq!(o["monotone_bytes"], o["algorithmic_bytes"], "{}", l["name"]);
                assert_eq!(o["flags"], serde_json::json!([]), "{}", l["name"]);
                checked += 1;
            }
        }
        assert!(
            checked >= 10,
            "{model}: only {checked} operators with an algorithmic value"
        );
    }
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn real_tflm_and_the_kernel_suite_trace_the_same_overlaps_on_both_libraries() {
    // Two programs, two sets of glue code (memtrace's kernel suite, one
    // layer per job, and TFLM's own kernels/ and kernels/cmsis_nn/ running
    // the whole model), one model: every operator's O_s and the planned
    // arena must agree, and TFLM's own head must be memtrace's tflm-greedy.
    let model = "zoo:mobilenet_v1_0.25_128_int8";
    for (kernels, suite) in [("tflm", "suite"), ("cmsis-nn", "suite-cmsis")] {
        let suite = common::guest("cortex-m4", suite);
        let out = memtrace([
            "plan",
            model,
            "--kernels",
            kernels,
            "--overlap",
            "traced",
            "--suite",
            suite.to_str().unwrap(),
            "--format",
            "json",
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        let planned = json(&out);
        let (ok, tflm) = verify(model, &["--kernels", kernels, "--planner", "dmo-heap"]);
        assert!(ok, "{kernels}: {}", tflm["clobbers"]);
        let suite_os = planned["op_overlap_bytes"].as_array().unwrap();
        let theirs = tflm["traced_overlaps"].as_array().unwrap();
        assert_eq!(suite_os.len(), theirs.len(), "{kernels}");
        for t in theirs {
            let op = u(&t["index"]) as usize;
            assert_eq!(
                suite_os[op].as_u64(),
                Some(t["monotone_bytes"].as_u64().unwrap_or(0)),
                "{kernels}: operator {op} ({})",
                t["op"]
            );
        }
        let peak = |planner: &str, overlap: &str| {
            planned["plans"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["planner"] == planner && p["overlap"] == overlap)
                .map(|p| u(&p["peak_bytes"]))
                .unwrap_or_else(|| panic!("no {planner}/{overlap} plan"))
        };
        assert_eq!(
            u(&tflm["plan"]["planned_bytes"]),
            peak("dmo-heap", "traced"),
            "{kernels}"
        );
        assert_eq!(
            u(&tflm["reference"]["head_bytes"]),
            peak("tflm-greedy", "none"),
            "{kernels}: TFLM's own head vs memtrace's tflm-greedy"
        );
    }
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn every_shared_model_verifies_clean_and_bit_exact_on_real_tflm() {
    for model in shared_models() {
        for kernels in ["tflm", "cmsis-nn"] {
            let (ok, r) = verify(&model, &["--kernels", kernels]);
            assert!(ok, "{model} on {kernels}: {r}");
            assert_eq!(r["clobbers"], serde_json::json!([]));
            assert_eq!(r["bit_exact"], true);
            // The plan TFLM ran is never larger than TFLM's own plan.
            assert!(
                u(&r["plan"]["head_bytes"]) <= u(&r["reference"]["head_bytes"]),
                "{model} on {kernels}"
            );
            if cfg!(not(no_oracle)) {
                let o = &r["oracle"];
                assert_eq!(o["error"], Value::Null, "{model}: {o}");
                assert_eq!(
                    o["bit_exact"], true,
                    "{model} on {kernels} vs PyPI tflite-micro: {o}"
                );
            }
        }
    }
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn a_plan_certified_on_reference_kernels_clobbers_on_tflms_cmsis_nn_kernels() {
    let model = "zoo:mobilenet_v1_0.25_128_int8";
    let (ok, foreign) = verify(model, &["--kernels", "cmsis-nn", "--overlap-from", "tflm"]);
    assert!(!ok);
    let c = &foreign["clobbers"][0];
    assert_eq!(c["op"], "2:CONV_2D:conv_pw_1");
    assert_eq!(c["tensor"], "conv_dw_1");
    assert_eq!(c["overwritten_by"]["tensor"], "conv_pw_1");
    assert!(u(&foreign["mismatched_bytes"]) > 0);
    let (ok, own) = verify(model, &["--kernels", "cmsis-nn"]);
    assert!(ok, "{}", own["clobbers"]);
    assert!(
        u(&own["plan"]["planned_bytes"]) > u(&foreign["plan"]["planned_bytes"]),
        "CMSIS-NN's pointwise kernels allow less overlap"
    );
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn one_byte_past_the_traced_overlap_clobbers_on_real_tflm() {
    let model = shared_model("tflm_person_detect.tflite");
    let r = run_model(
        &model,
        &[
            "--layer",
            "0:DEPTHWISE_CONV_2D:MobilenetV1/MobilenetV1/Conv2d_0/Relu6",
        ],
    );
    let o = &op_layers(&r)[0]["overlap"];
    let (input, output) = (o["input"].as_str().unwrap(), o["output"].as_str().unwrap());
    let (os, ob) = (u(&o["monotone_bytes"]), u(&o["output_bytes"]));
    let dir = tempfile::tempdir().unwrap();
    // The output far above TFLM's own tensors, the input overlapping its end.
    let plan = |overlap: u64| {
        let at = 1 << 20;
        let path = dir.path().join(format!("plan{overlap}.json"));
        let text = serde_json::json!({
            "tensors": [
                {"name": output, "offset": at},
                {"name": input, "offset": at + ob - overlap},
            ],
            "arena_bytes": (at + ob).max(at + ob - overlap + u(&o["input_bytes"])),
        });
        std::fs::write(&path, text.to_string()).unwrap();
        path.display().to_string()
    };
    let (ok, at_os) = verify(&model, &["--plan", &plan(os)]);
    assert!(ok, "at the traced O_s: {}", at_os["clobbers"]);
    let (ok, past) = verify(&model, &["--plan", &plan(os + 1)]);
    assert!(!ok);
    let c = &past["clobbers"][0];
    assert_eq!(c["op"], op_layers(&r)[0]["name"]);
    assert_eq!(c["tensor"], input);
    assert_eq!(c["overwritten_by"]["tensor"], output);
    assert_eq!(u(&c["offset"]), os - 1, "the one byte the plan gave away");
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn tflms_own_failures_are_clear_errors() {
    let model = shared_model("tflm_person_detect.tflite");
    let out = memtrace(["run", &model, "--arena-bytes", "4096"]);
    assert_eq!(out.status.code(), Some(1));
    let e = stderr(&out);
    assert!(e.contains("TFLM exited with code 4"), "{e}");
    // TFLM's own words for an arena too small for its persistent tail.
    assert!(e.contains("Failed to allocate tail memory"), "{e}");

    let suite = common::suite("cortex-m4");
    let out = memtrace(["run", &model, "--runner", common::path_str(&suite)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("is no TFLM runner"),
        "{}",
        stderr(&out)
    );

    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(&model).unwrap();
    let cut = dir.path().join("cut.tflite");
    std::fs::write(&cut, &bytes[..bytes.len() / 3]).unwrap();
    let out = memtrace(["run", common::path_str(&cut)]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).starts_with("error:"), "{}", stderr(&out));
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn every_shared_model_runs_operator_by_operator_on_both_kernel_builds() {
    for model in shared_models() {
        runs_operator_by_operator(&model, &[]);
    }
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn the_int8_zoo_runs_operator_by_operator_on_both_kernel_builds() {
    for name in [
        "mobilenet_v1_0.25_128_int8",
        "mobilenet_v1_0.25_128_int8_zeropad",
        "sakr_cifar10",
        "tiny_unet_80x120_int8",
        "hourglass_64x64_int8",
    ] {
        runs_operator_by_operator(&format!("zoo:{name}"), &[]);
    }
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn mobilenet_v1_1_0_224_runs_operator_by_operator_on_both_kernel_builds() {
    // 14 G instructions on the reference kernels: past run's default budget.
    runs_operator_by_operator(
        "zoo:mobilenet_v1_1.0_224_int8",
        &["--max-instructions", "60000000000"],
    );
}

/// `run MODEL` on both kernel builds: one layer per operator TFLM ran, and
/// each kernel keeps the memory contract (CMSIS-NN all but its known
/// scratch finding).
fn runs_operator_by_operator(model: &str, args: &[&str]) {
    for kernels in ["tflm", "cmsis-nn"] {
        let r = run_model(model, &[&["--kernels", kernels], args].concat());
        let ops = op_layers(&r);
        assert_eq!(
            ops.len() as u64,
            u(&r["tflm"]["operators"]),
            "{model} {kernels}"
        );
        for l in &ops {
            let c = &l["contract"];
            if kernels == "tflm" {
                // TFLM's reference kernels are what the host methods
                // model, and they keep the contract.
                assert_eq!(c["ok"], true, "{model} {}: {c}", l["name"]);
                assert_eq!(l["overlap"]["flags"].as_array().map_or(0, |f| f.len()), 0);
            } else {
                // CMSIS-NN's known finding: im2col scratch rounded up
                // and never written to its end (docs/kernels.md).
                for rule in [
                    "stray_write",
                    "output_read_before_write",
                    "input_write",
                    "weights_write",
                ] {
                    assert_eq!(c[rule]["ok"], true, "{model} {} {rule}: {c}", l["name"]);
                }
            }
        }
    }
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn the_int8_zoo_verifies_clean_and_bit_exact_on_real_tflm() {
    // MobileNet v1 1.0 224 on the reference kernels (14 G instructions) has
    // a test of its own, so that it runs beside the others.
    let cases = [
        ("mobilenet_v1_0.25_128_int8", &["tflm", "cmsis-nn"][..]),
        (
            "mobilenet_v1_0.25_128_int8_zeropad",
            &["tflm", "cmsis-nn"][..],
        ),
        ("sakr_cifar10", &["tflm", "cmsis-nn"]),
        ("tiny_unet_80x120_int8", &["tflm", "cmsis-nn"]),
        ("hourglass_64x64_int8", &["tflm", "cmsis-nn"]),
        ("mobilenet_v1_1.0_224_int8", &["cmsis-nn"]),
    ];
    for (name, builds) in cases {
        zoo_model_verifies_on_real_tflm(name, builds, &[]);
    }
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn mobilenet_v1_1_0_224_verifies_on_tflms_reference_kernels() {
    // Past the default budget, which verify shares with run.
    zoo_model_verifies_on_real_tflm(
        "mobilenet_v1_1.0_224_int8",
        &["tflm"],
        &["--max-instructions", "60000000000"],
    );
}

/// `verify zoo:NAME` on each kernel build: clean, bit-exact with TFLM's own
/// plan and PyPI `tflite-micro`, and TFLM's arena exactly as memtrace
/// planned it.
fn zoo_model_verifies_on_real_tflm(name: &str, builds: &[&str], args: &[&str]) {
    let model = format!("zoo:{name}");
    for kernels in builds {
        let (ok, r) = verify(&model, &[&["--kernels", kernels], args].concat());
        assert!(ok, "{model} on {kernels}: {}", r["clobbers"]);
        assert_eq!(r["bit_exact"], true);
        // memtrace's tflm-greedy predicts TFLM's own head.
        assert_eq!(
            r["reference"]["planned_bytes"], r["reference"]["head_bytes"],
            "{model} {kernels}"
        );
        // TFLM honours memtrace's plan to the byte.
        assert_eq!(
            r["plan"]["planned_bytes"], r["plan"]["head_bytes"],
            "{model} {kernels}"
        );
        for t in r["tensors"].as_array().unwrap() {
            if t["planned_offset"].is_u64() {
                assert_eq!(t["planned_offset"], t["tflm_offset"], "{model}: {t}");
            }
        }
        if cfg!(not(no_oracle)) {
            assert_eq!(
                r["oracle"]["bit_exact"], true,
                "{model} {kernels}: {}",
                r["oracle"]
            );
        }
    }
}

#[test]
#[cfg_attr(
    no_tflm_x86,
    ignore = "x86-64 TFLM runners not built: install musl-dev"
)]
fn the_x86_64_runners_give_the_cortex_m4_outputs_and_plans() {
    // int8 arithmetic is target-independent: the same outputs and TFLM's
    // same head on another instruction set; the reference kernels (one C++
    // loop nest) also walk memory the same way. CMSIS-NN does not: its
    // Cortex-M4 DSP paths and pure-C x86-64 paths are different kernels.
    let model = shared_model("mlperf_tiny_kws_ds_cnn_int8.tflite");
    for kernels in ["tflm", "cmsis-nn"] {
        let (ok, m4) = verify(&model, &["--kernels", kernels]);
        assert!(ok);
        let (ok, x86) = verify(&model, &["--kernels", kernels, "--target", "x86-64"]);
        assert!(ok, "x86-64 {kernels}: {}", x86["clobbers"]);
        assert_eq!(x86["target"], "x86-64");
        assert_eq!(x86["output_digest"], m4["output_digest"], "{kernels}");
        assert_eq!(
            x86["reference"]["head_bytes"], m4["reference"]["head_bytes"],
            "{kernels}"
        );
        if kernels == "cmsis-nn" {
            continue;
        }
        let o = |r: &Value| -> Vec<Value> {
            r["traced_overlaps"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["monotone_bytes"].clone())
                .collect()
        };
        assert_eq!(o(&x86), o(&m4));
        assert_eq!(x86["plan"]["planned_bytes"], m4["plan"]["planned_bytes"]);
    }
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn verify_proves_every_plan_on_real_tflm() {
    let model = shared_model("tflm_hello_world_int8.tflite");
    let dir = std::env::temp_dir().join(format!("memtrace-default-runtime-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let png = dir.join("arena.png");
    // No --runtime: real TFLM runs the plan, drawn and timed as on the
    // (TFLM timed without hooks).
    let out = memtrace([
        "verify",
        &model,
        "--plot",
        png.to_str().unwrap(),
        "--baseline",
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let r = json(&out);
    assert_eq!(r["runtime"], "tflm");
    assert_eq!(r["bit_exact"], true);
    assert!(u(&r["plan"]["head_bytes"]) > 0);
    let untraced = r["plan"]["untraced_seconds"].as_f64().unwrap();
    assert!(untraced > 0.0, "{}", r["plan"]);
    let picture = std::fs::read(&png).unwrap();
    assert_eq!(&picture[1..4], b"PNG");
    // TinySeg runs on TFLM too (its storage operators are the runner's
    // custom operators).
    let tinyseg = ["verify", &model, "--planner", "tinyseg", "--format", "json"];
    let out = memtrace(tinyseg);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(json(&out)["runtime"], "tflm");
    // The retired executor and the dropped int16 accumulator are usage
    // errors that say so.
    for (flag, value, says) in [
        ("--runtime", "executor", "executor was retired"),
        (
            "--accumulator",
            "int16",
            "int16 TRANSPOSE_CONV accumulator was dropped",
        ),
    ] {
        for command in ["verify", "plan"] {
            let out = memtrace([command, &model, flag, value]);
            assert_eq!(out.status.code(), Some(2), "{command} {flag} {value}");
            assert!(stderr(&out).contains(says), "{}", stderr(&out));
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn a_model_layer_is_named_by_its_short_id_and_tables_do_not_wrap_tensor_names() {
    let model = shared_model("tflm_person_detect.tflite");
    let all = run_model(&model, &[]);
    // The first operator whose tensor name is too long for a table cell.
    let long = op_layers(&all)
        .into_iter()
        .find(|l| l["name"].as_str().unwrap().len() > 32)
        .expect("person_detect names its layers after long TF tensor names");
    let (index, op) = (u(&long["index"]), long["op"].as_str().unwrap());
    let id = format!("{index}:{op}");
    // By index, by index and operator (any case), and by full name: the
    // same one layer as in the full run.
    for sel in [index.to_string(), id.clone(), id.to_lowercase()] {
        let one = run_model(&model, &["--layer", &sel]);
        let layers = one["layers"].as_array().unwrap();
        assert_eq!(layers.len(), 1, "--layer {sel}");
        assert_eq!(layers[0]["name"], long["name"], "--layer {sel}");
        assert_eq!(layers[0]["overlap"], long["overlap"], "--layer {sel}");
    }
    // A wrong operator is an unknown layer, and the error says the forms.
    let out = memtrace(["run", &model, "--layer", &format!("{index}:SOFTMAX_X")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("`3:CONV_2D`"), "{}", stderr(&out));
    // The table shows the short id instead of wrapping the tensor name.
    let out = memtrace(["run", &model, "--layer", &id]);
    let table = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(table.contains(&format!("| {id} …")), "{table}");
    let name = long["name"].as_str().unwrap();
    assert!(!table.contains(name), "{table}");
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn a_model_layer_s_plot_draws_the_traced_fronts_and_o_s_under_a_title_that_fits() {
    let model = shared_model("tflm_person_detect.tflite");
    let all = run_model(&model, &[]);
    let layer = op_layers(&all)
        .into_iter()
        .find(|l| l["op"] == "DEPTHWISE_CONV_2D" && l["name"].as_str().unwrap().len() > 32)
        .expect("person_detect has depthwise layers named after long tensor names");
    let id = format!("{}:{}", u(&layer["index"]), layer["op"].as_str().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("layer.svg");
    let out = memtrace([
        "run",
        &model,
        "--layer",
        &id,
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(&svg).unwrap();
    let os = u(&layer["overlap"]["monotone_bytes"]);
    for label in [
        "minR (traced)".to_owned(),
        "maxW (traced)".to_owned(),
        format!("traced O_s = {os} B"),
        format!("{id} …"),
    ] {
        assert!(text.contains(&label), "{label} not drawn");
    }
    // No modelled curve without a kernel-suite spec, and no full tensor name
    // (which overprinted the next panel's title).
    assert!(!text.contains("modelled"));
    assert!(!text.contains(layer["name"].as_str().unwrap()));
}
