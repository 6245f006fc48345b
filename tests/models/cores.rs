//! Every Cortex-M core a model ships to: the guests of `make -C harness-c
//! cores-tested` run as their own core, real TFLM on each verifies
//! bit-exact with the host oracle, CMSIS-NN's pure-C code (Cortex-M0) and
//! its DSP code (Cortex-M4) give a layer different O_s — seen both in the
//! model on real TFLM and in the kernel suite —, one plan holds on three
//! cores, and a binary is refused on a core that lacks what it was built
//! for.
//!
//! The cores beyond the Cortex-M4 run one model here (MLPerf Tiny KWS, whose
//! average pool and last fully connected layer differ between CMSIS-NN's
//! two code paths); the MLPerf Tiny set and person_detect on every core
//! and both kernel builds are `scripts/cores-table.py`'s (docs/kernels.md,
//! "Per-core numbers").

use crate::common;

use std::collections::HashMap;
use std::sync::Mutex;

use common::{guest, json, json_ok, memtrace, path_str, shared_model, stderr, u};
use serde_json::Value;

/// The Arm cores, smallest first.
const ARM_CORES: [&str; 5] = [
    "cortex-m0",
    "cortex-m3",
    "cortex-m4",
    "cortex-m7",
    "cortex-m33",
];

fn kws() -> String {
    shared_model("mlperf_tiny_kws_ds_cnn_int8.tflite")
}

/// The model traced on real TFLM's CMSIS-NN kernels of `core`, once per
/// test binary (two tests read the same runs).
fn model_run(core: &str) -> Value {
    static RUNS: Mutex<Option<HashMap<String, Value>>> = Mutex::new(None);
    let mut runs = RUNS.lock().unwrap_or_else(|e| e.into_inner());
    runs.get_or_insert_with(HashMap::new)
        .entry(core.to_owned())
        .or_insert_with(|| json_ok(&["run", &kws(), "--kernels", "cmsis-nn", "--target", core]))
        .clone()
}

/// The ELF's Tag_CPU_arch, read by binutils (independently of memtrace).
fn readelf_cpu_arch(elf: &std::path::Path) -> String {
    let out = std::process::Command::new("arm-none-eabi-readelf")
        .args(["-A", path_str(elf)])
        .output()
        .expect("arm-none-eabi-readelf runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find_map(|l| l.trim().strip_prefix("Tag_CPU_arch: "))
        .unwrap_or_else(|| panic!("no Tag_CPU_arch in {}:\n{text}", elf.display()))
        .to_owned()
}

#[test]
#[cfg_attr(no_cores, ignore = "core guests not built: make -C harness-c cores")]
fn each_core_guest_is_built_for_its_core_and_runs_as_it() {
    let expected = [
        ("cortex-m0", "v6S-M"),
        ("cortex-m3", "v7"),
        ("cortex-m4", "v7E-M"),
        ("cortex-m7", "v7E-M"),
        ("cortex-m33", "v8-M.mainline"),
    ];
    for (core, arch) in expected {
        for elf in ["suite", "suite-cmsis", "tflm-runner-cmsis"] {
            let path = guest(core, elf);
            assert_eq!(readelf_cpu_arch(&path), arch, "{}", path.display());
        }
        // The report names the core the ELF's attributes name.
        let r = json_ok(&[
            "run",
            path_str(&guest(core, "suite-cmsis")),
            "--job",
            "op=relu,dtype=int8,input=1x3x5x7",
        ]);
        assert_eq!(r["arch"], core); // The reference kernels' built-in layers on this core: the trace's
                                     // O_s equal the loop-nest algorithm's, a second method that knows
                                     // nothing of the core.
        let reference = json_ok(&["run", path_str(&guest(core, "suite"))]);
        for l in layers(&reference) {
            let o = &l["overlap"];
            assert_eq!(
                o["monotone_bytes"], o["algorithmic_bytes"],
                "{core} {}",
                l["name"]
            );
        }
    }
}

#[test]
#[cfg_attr(no_cores, ignore = "core guests not built: make -C harness-c cores")]
fn a_binary_runs_only_on_cores_that_implement_its_build_attributes() {
    let m4 = guest("cortex-m4", "suite-cmsis");
    for (core, isa) in [("cortex-m0", "ARMv6-M"), ("cortex-m3", "ARMv7-M")] {
        let out = memtrace(["run", path_str(&m4), "--target", core]);
        assert_eq!(out.status.code(), Some(1), "{core}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains(&format!("cannot run on the {core} target"))
                && err.contains("ARMv7E-M")
                && err.contains(isa),
            "{core}: {err}"
        );
    }
    // Another instruction set altogether.
    let out = memtrace(["run", path_str(&m4), "--target", "x86-64"]);
    assert!(
        stderr(&out).contains("cannot run on the x86-64 target"),
        "{}",
        stderr(&out)
    );
    // Double precision: the M7's suite (float kernels, FPv5-D16) on the M4
    // (single precision) or the M33 is refused; M0 code runs on every core.
    let m7 = guest("cortex-m7", "suite");
    for core in ["cortex-m4", "cortex-m33"] {
        let out = memtrace(["run", path_str(&m7), "--target", core]);
        assert!(
            stderr(&out).contains("FPv5-D16"),
            "{core}: {}",
            stderr(&out)
        );
    }
    let job = "op=relu,dtype=int8,input=1x3x5x7";
    let m0 = guest("cortex-m0", "suite");
    let own = json_ok(&["run", path_str(&m0), "--job", job]);
    for core in ["cortex-m4", "cortex-m33"] {
        let r = json_ok(&["run", path_str(&m0), "--job", job, "--target", core]);
        assert_eq!(r["arch"], core);
        // The same code on another core: the same instructions and accesses.
        assert_eq!(r["instructions"], own["instructions"], "{core}");
        assert_eq!(r["layers"][0]["overlap"], own["layers"][0]["overlap"]);
    }
    // A model run takes the runner of the core asked; a runner of another
    // core is refused.
    let out = memtrace([
        "run",
        &kws(),
        "--target",
        "cortex-m0",
        "--runner",
        path_str(&guest("cortex-m4", "tflm-runner")),
    ]);
    assert!(
        stderr(&out).contains("is a cortex-m4 runner but --target is cortex-m0"),
        "{}",
        stderr(&out)
    );
}

#[test]
#[cfg_attr(no_cores, ignore = "core guests not built: make -C harness-c cores")]
fn every_arm_core_verifies_kws_on_cmsis_nn_bit_exact_with_the_oracle() {
    let mut instructions = Vec::new();
    for core in ARM_CORES {
        let r = json_ok(&["verify", &kws(), "--kernels", "cmsis-nn", "--target", core]);
        assert_eq!(r["target"], core);
        assert!(
            r["runner"].as_str().unwrap().contains(&format!("/{core}/")),
            "{core}: {}",
            r["runner"]
        );
        assert_eq!(r["ok"], true, "{core}: {}", r["clobbers"]);
        assert_eq!(r["clobbers"], serde_json::json!([]), "{core}");
        assert_eq!(r["bit_exact"], true, "{core}");
        if cfg!(not(no_oracle)) {
            let o = &r["oracle"];
            assert_eq!(o["error"], Value::Null, "{core}: {o}");
            assert_eq!(o["bit_exact"], true, "{core} vs PyPI tflite-micro: {o}");
        }
        instructions.push(u(&r["reference"]["instructions"]));
    }
    // Each core ran its own build: the M0's Thumb-1, pure-C CMSIS-NN takes
    // more instructions than the M3's Thumb-2, which takes more than the
    // M4's DSP code.
    assert!(
        instructions[0] > instructions[1] && instructions[1] > instructions[2],
        "instructions per core (M0, M3, M4, M7, M33): {instructions:?}"
    );
}

/// A layer spec of `run`'s JSON as a `--job` text: `key=value` items,
/// shapes and pairs written `AxB`.
fn job_text(spec: &Value) -> String {
    let items: Vec<String> = spec
        .as_object()
        .expect("a spec object")
        .iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| {
            let value = match v {
                Value::Array(parts) => parts
                    .iter()
                    .map(|p| p.to_string())
                    .collect::<Vec<_>>()
                    .join("x"),
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            format!("{k}={value}")
        })
        .collect();
    items.join(",")
}

/// `plan MODEL(KWS) --kernels KERNELS --target A,B,...` as JSON, also
/// written to `file` for `verify --plan`; its provenance names every core.
pub(crate) fn plan_for_cores(kernels: &str, cores: &[&str], file: &std::path::Path) -> Value {
    let targets = cores.join(",");
    let out = memtrace([
        "plan",
        &kws(),
        "--kernels",
        kernels,
        "--target",
        &targets,
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    std::fs::write(file, &out.stdout).unwrap();
    let plan = json(&out);
    assert_eq!(plan["provenance"]["target"], targets);
    plan
}

/// `verify MODEL(KWS) --plan FILE` on each of `cores`: clean and bit-exact
/// with TFLM's own plan on every one.
pub(crate) fn verify_plan_on_each(kernels: &str, cores: &[&str], plan_file: &std::path::Path) {
    for core in cores {
        let r = json_ok(&[
            "verify",
            &kws(),
            "--kernels",
            kernels,
            "--target",
            core,
            "--plan",
            path_str(plan_file),
        ]);
        assert_eq!(r["ok"], true, "{core}: {}", r["clobbers"]);
        assert_eq!(r["bit_exact"], true, "{core}");
    }
}

/// Operator `op`'s traced monotone O_s in each of `runs` (`run MODEL`'s
/// per-layer reports), in order.
pub(crate) fn traced_overlaps(runs: &[Value], op: usize) -> Vec<u64> {
    runs.iter()
        .map(|r| {
            let layer = layers(r)
                .iter()
                .find(|l| l["name"].as_str().unwrap().starts_with(&format!("{op}:")))
                .unwrap_or_else(|| panic!("operator {op} was not traced"));
            u(&layer["overlap"]["monotone_bytes"])
        })
        .collect()
}

/// The traced layers of a model run with their spec, O_s and scratch.
fn layers(run: &Value) -> &Vec<Value> {
    run["layers"].as_array().expect("layers")
}

#[test]
#[cfg_attr(no_cores, ignore = "core guests not built: make -C harness-c cores")]
fn cmsis_nn_pure_c_and_dsp_paths_give_a_layer_other_overlap_in_the_model_and_the_suite() {
    let m0 = model_run("cortex-m0");
    let m4 = model_run("cortex-m4");
    assert_eq!(layers(&m0).len(), layers(&m4).len());
    let mut differing = 0;
    for (a, b) in layers(&m0).iter().zip(layers(&m4)) {
        assert_eq!(a["name"], b["name"]);
        let (o0, o4) = (
            &a["overlap"]["monotone_bytes"],
            &b["overlap"]["monotone_bytes"],
        );
        if o0 == o4 {
            continue;
        }
        if a["spec"].is_null() {
            continue;
        }
        let spec = &job_text(&a["spec"]);
        // The same layer through the kernel suite built with CMSIS-NN for
        // each core: the difference is the library's code path, not TFLM's.
        let suite = |core: &str| {
            let r = json_ok(&["run", path_str(&guest(core, "suite-cmsis")), "--job", spec]);
            let layer = r["layers"][0].clone();
            assert_eq!(layer["library"], "CMSIS-NN", "{core} {spec}");
            layer["overlap"]["monotone_bytes"].clone()
        };
        let (s0, s4) = (suite("cortex-m0"), suite("cortex-m4"));
        assert_ne!(s0, s4, "{spec}: the suite gives both cores one O_s");
        assert_eq!(&s0, o0, "{spec} on cortex-m0: suite vs model");
        assert_eq!(&s4, o4, "{spec} on cortex-m4: suite vs model");
        differing += 1;
    }
    assert!(
        differing > 0,
        "no KWS layer's O_s differs between the M0 and the M4"
    );
}

#[test]
#[cfg_attr(no_cores, ignore = "core guests not built: make -C harness-c cores")]
fn one_plan_for_three_cores_takes_the_smallest_overlap_and_verifies_on_each() {
    let cores = ["cortex-m0", "cortex-m4", "cortex-m33"];
    let dir = tempfile::tempdir().unwrap();
    let plan_file = dir.path().join("plan.json");
    let plan = plan_for_cores("cmsis-nn", &cores, &plan_file);
    // Each operator's O_s is the smallest the model's own traced runs on
    // the three cores give it (`run`, the per-layer report).
    let runs: Vec<Value> = cores.iter().map(|c| model_run(c)).collect();
    let planned = plan["op_overlap_bytes"].as_array().unwrap();
    let mut below_m4 = 0;
    for (op, bytes) in planned.iter().enumerate() {
        let traced = traced_overlaps(&runs, op);
        let smallest = *traced.iter().min().unwrap();
        assert_eq!(u(bytes), smallest, "operator {op}: {traced:?}");
        below_m4 += usize::from(smallest < traced[1]);
    }
    assert!(below_m4 > 0, "no operator has less O_s on another core");
    // verify --plan proves the one plan on each core, and refuses it on a
    // core it was not made for.
    verify_plan_on_each("cmsis-nn", &cores, &plan_file);
    let out = memtrace([
        "verify",
        &kws(),
        "--kernels",
        "cmsis-nn",
        "--target",
        "cortex-m7",
        "--plan",
        path_str(&plan_file),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("made for target cortex-m0,cortex-m4,cortex-m33, not cortex-m7"),
        "{}",
        stderr(&out)
    );
}

/// The functions an ELF defines, read by binutils (independently of
/// memtrace).
fn defined_functions(elf: &std::path::Path) -> String {
    let out = std::process::Command::new("arm-none-eabi-nm")
        .args(["--defined-only", path_str(elf)])
        .output()
        .expect("arm-none-eabi-nm runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The operators a runner's `.ops` file lists (harness-c writes it beside
/// the runner): `None` for every operator.
fn listed_ops(runner: &std::path::Path) -> Option<Vec<String>> {
    let file = runner.with_extension("ops");
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    (text.trim() != "all").then(|| text.split_whitespace().map(str::to_owned).collect())
}

#[test]
#[cfg_attr(no_cores, ignore = "core guests not built: make -C harness-c cores")]
fn a_per_core_runner_is_widened_for_a_model_with_another_operator_and_an_explicit_one_says_what_it_lacks(
) {
    // `cores-tested` builds the per-core runners with the operators of the
    // model the tests run (harness-c's TFLM_TEST_OPS), unless a runner of
    // every operator was built before. A model with another operator widens
    // the source tree's runner on first use; it never loses one.
    let add_model = shared_model("tflm_simple_add_model.tflite");
    let lstm_model = shared_model("tflm_trained_lstm_int8.tflite");
    for core in ["cortex-m0", "cortex-m33"] {
        let runner = guest(core, "tflm-runner-cmsis");
        let before = listed_ops(&runner);
        let out = memtrace(["run", &add_model, "--kernels", "cmsis-nn", "--target", core]);
        assert!(out.status.success(), "{core}: {}", stderr(&out));
        let after = listed_ops(&runner);
        // Read by binutils, not by memtrace: the kernel is in the ELF.
        assert!(
            defined_functions(&runner).contains("_ZN6tflite12Register_ADDEv"),
            "{core}: the runner that ran ADD has its kernel"
        );
        let Some(after) = after else {
            assert_eq!(before, None, "{core}: only a runner of all lists all");
            continue;
        };
        assert!(after.iter().any(|o| o == "Add"), "{core}: {after:?}");
        for op in before.iter().flatten() {
            assert!(after.contains(op), "{core}: {op} was lost: {after:?}");
        }
        // A runner named with --runner is never rebuilt: TFLM's error, and
        // what the runner has.
        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join("narrow.elf");
        std::fs::copy(&runner, &copy).unwrap();
        let out = memtrace([
            "run",
            &lstm_model,
            "--kernels",
            "cmsis-nn",
            "--target",
            core,
            "--runner",
            path_str(&copy),
        ]);
        assert_eq!(out.status.code(), Some(1), "{core}: {}", stderr(&out));
        let err = stderr(&out);
        for part in [
            "Didn't find op for builtin opcode 'UNIDIRECTIONAL_SEQUENCE_LSTM'".to_owned(),
            format!("registers only {}", after.join(", ")),
            format!("make -C harness-c {core}"),
        ] {
            assert!(err.contains(&part), "{core}: {part:?} missing from: {err}");
        }
    }
}
