//! 32-bit RISC-V (`--target riscv32`): the guests of `make -C harness-c
//! cores-tested` are RV32 code that runs as it, real TFLM with its
//! reference kernels verifies a model bit-exact with the host oracle, the
//! kernel suite's O_s agree with the loop-nest algorithm and with the
//! Cortex-M4's trace of the same kernels, a plan for Cortex-M and RISC-V
//! cores holds on each, and what cannot run there (CMSIS-NN, another
//! instruction set, RV64) is refused with the reason.
//!
//! MLPerf Tiny KWS runs here; the MLPerf Tiny set and person_detect on
//! RISC-V are `scripts/cores-table.py`'s (docs/kernels.md, "Per-core
//! numbers").

use crate::common;

use std::path::Path;
use std::process::Command;

use common::{guest, json, json_ok, memtrace, path_str, shared_model, stderr, u};
use serde_json::Value;

use super::cores::{plan_for_cores, traced_overlaps, verify_plan_on_each};

fn kws() -> String {
    shared_model("mlperf_tiny_kws_ds_cnn_int8.tflite")
}

/// The ELF header as binutils reads it (independently of memtrace).
fn readelf_header(elf: &Path) -> String {
    let out = Command::new("riscv64-unknown-elf-readelf")
        .args(["-h", path_str(elf)])
        .output()
        .expect("riscv64-unknown-elf-readelf runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Each layer's name and exact O_s of the first input.
fn exact_overlaps(run: &Value) -> Vec<(String, u64)> {
    run["layers"]
        .as_array()
        .expect("layers")
        .iter()
        .map(|l| {
            (
                l["name"].as_str().unwrap().to_owned(),
                u(&l["overlap"]["exact_bytes"]),
            )
        })
        .collect()
}

#[test]
#[cfg_attr(
    no_riscv,
    ignore = "RISC-V guests not built: make -C harness-c cores-tested"
)]
fn the_riscv_suite_is_rv32_code_whose_overlaps_match_the_algorithm_and_the_cortex_m4() {
    let suite = guest("riscv32", "suite");
    let header = readelf_header(&suite);
    assert!(
        header.contains("ELF32") && header.contains("RISC-V"),
        "{header}"
    );
    let rv = json_ok(&["run", path_str(&suite)]);
    assert_eq!(rv["arch"], "riscv32");
    let layers = rv["layers"].as_array().unwrap();
    assert!(layers.len() >= 5, "{} layers", layers.len());
    for l in layers {
        let o = &l["overlap"];
        // Second method: the loop-nest algorithm over the reference
        // kernel's iteration order, which knows nothing of the ISA.
        assert_eq!(o["monotone_bytes"], o["algorithmic_bytes"], "{}", l["name"]);
        assert!(
            u(&o["analytic_bytes"]) <= u(&o["exact_bytes"]),
            "{}",
            l["name"]
        );
        assert_eq!(
            l["contract"]["ok"], true,
            "{}: {}",
            l["name"], l["contract"]
        );
    }
    // Third: the same reference kernels compiled for the Cortex-M4 walk
    // memory in the same order, so each layer keeps its O_s, while the
    // instruction counts show two different programs ran.
    let m4 = json_ok(&["run", path_str(&guest("cortex-m4", "suite"))]);
    assert_eq!(exact_overlaps(&rv), exact_overlaps(&m4));
    assert_ne!(rv["instructions"], m4["instructions"]);
}

#[test]
#[cfg_attr(
    no_riscv,
    ignore = "RISC-V guests not built: make -C harness-c cores-tested"
)]
fn a_binary_runs_only_on_the_instruction_set_it_was_built_for() {
    let rv = guest("riscv32", "suite");
    let m4 = guest("cortex-m4", "suite");
    let out = memtrace(["run", path_str(&m4), "--target", "riscv32"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cannot run on the riscv32 target"),
        "{}",
        stderr(&out)
    );
    let out = memtrace(["run", path_str(&rv), "--target", "cortex-m4"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("it is an riscv32 executable"),
        "{}",
        stderr(&out)
    );
    // RV64 code is another architecture: refused before anything runs.
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("main.c");
    let elf = dir.path().join("rv64.elf");
    std::fs::write(&src, "void _start(void) { for (;;) {} }\n").unwrap();
    let cc = Command::new("riscv64-unknown-elf-gcc")
        .args([
            "-march=rv64imac",
            "-mabi=lp64",
            "-nostdlib",
            "-static",
            "-O2",
        ])
        .arg(&src)
        .arg("-o")
        .arg(&elf)
        .output()
        .expect("riscv64-unknown-elf-gcc runs");
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let out = memtrace(["run", path_str(&elf)]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("RV64") && stderr(&out).contains("-march=rv32imac"),
        "{}",
        stderr(&out)
    );
}

#[test]
#[cfg_attr(
    no_riscv,
    ignore = "RISC-V guests not built: make -C harness-c cores-tested"
)]
fn a_riscv_guest_fault_and_stack_overflow_name_the_line_and_the_caller() {
    // The call chain comes from unwinding RV32 frames with the ELF's DWARF
    // call-frame information; the lines are the guests' own.
    let out = memtrace(["run", path_str(&guest("riscv32", "fault"))]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("guest fault in layer `fault`")
            && err.contains("`read_unmapped` (guests/fault.c:")
            && err.contains("called from `main` (guests/fault.c:")
            && err.contains("read of unmapped address 0x70000000"),
        "{err}"
    );
    let out = memtrace(["run", path_str(&guest("riscv32", "stack-overflow"))]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("stack overflow") && err.contains("`descend` (guests/stack_overflow.c:"),
        "{err}"
    );
}

#[test]
#[cfg_attr(
    no_riscv,
    ignore = "RISC-V guests not built: make -C harness-c cores-tested"
)]
fn cmsis_nn_is_refused_on_riscv32_with_the_reason() {
    let out = memtrace([
        "run",
        &kws(),
        "--target",
        "riscv32",
        "--kernels",
        "cmsis-nn",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("CMSIS-NN is Arm's kernel library") && err.contains("--kernels tflm"),
        "{err}"
    );
}

#[test]
#[cfg_attr(
    no_riscv,
    ignore = "RISC-V guests not built: make -C harness-c cores-tested"
)]
fn kws_verifies_on_riscv32_bit_exact_with_the_oracle() {
    let r = json_ok(&["verify", &kws(), "--target", "riscv32"]);
    assert_eq!(r["target"], "riscv32");
    assert!(
        r["runner"].as_str().unwrap().contains("/riscv32/"),
        "{}",
        r["runner"]
    );
    assert_eq!(r["ok"], true, "{}", r["clobbers"]);
    assert_eq!(r["clobbers"], serde_json::json!([]));
    assert_eq!(r["bit_exact"], true);
    if cfg!(not(no_oracle)) {
        let o = &r["oracle"];
        assert_eq!(o["error"], Value::Null, "{o}");
        assert_eq!(o["bit_exact"], true, "riscv32 vs PyPI tflite-micro: {o}");
    }
}

#[test]
#[cfg_attr(
    no_riscv,
    ignore = "RISC-V guests not built: make -C harness-c cores-tested"
)]
fn one_plan_for_a_cortex_m_and_a_riscv_core_verifies_on_each() {
    let cores = ["cortex-m4", "riscv32"];
    let dir = tempfile::tempdir().unwrap();
    let plan_file = dir.path().join("plan.json");
    let plan = plan_for_cores("tflm", &cores, &plan_file);
    // Each operator's planned O_s is the smallest of the model's own traced
    // runs on the two cores (`run`'s per-layer report).
    let runs: Vec<Value> = cores
        .iter()
        .map(|c| json_ok(&["run", &kws(), "--target", c]))
        .collect();
    let planned = plan["op_overlap_bytes"].as_array().unwrap();
    for (op, bytes) in planned.iter().enumerate() {
        let traced = traced_overlaps(&runs, op);
        assert_eq!(
            u(bytes),
            *traced.iter().min().unwrap(),
            "operator {op}: {traced:?}"
        );
    }
    verify_plan_on_each("tflm", &cores, &plan_file);
}

#[test]
#[cfg_attr(
    no_riscv,
    ignore = "RISC-V guests not built: make -C harness-c cores-tested"
)]
fn regress_compares_a_cortex_m4_baseline_with_riscv32_only_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let baseline = dir.path().join("m4.json");
    let m4 = guest("cortex-m4", "suite");
    let rv = guest("riscv32", "suite");
    let out = memtrace([
        "table",
        path_str(&m4),
        "--target",
        "cortex-m4",
        "--out",
        path_str(&baseline),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Without --target a baseline of another core is refused, with the way
    // to ask for the comparison.
    let out = memtrace(["regress", path_str(&baseline), path_str(&rv)]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--target riscv32"),
        "{}",
        stderr(&out)
    );
    let out = memtrace([
        "regress",
        path_str(&baseline),
        path_str(&rv),
        "--target",
        "riscv32",
        "--format",
        "json",
    ]);
    assert!(
        stderr(&out).contains("compared across cores"),
        "{}",
        stderr(&out)
    );
    let r = json(&out);
    assert_eq!(r["arch"], "riscv32");
    assert_eq!(r["baseline_arch"], "cortex-m4");
    // The reference kernels keep every O_s across the two instruction sets
    // (the run test above compares the same layers' JSON directly).
    let rows = r["rows"].as_array().unwrap();
    assert!(!rows.is_empty());
    for row in rows {
        assert_eq!(row["status"], "same", "{row}");
    }
    assert_eq!(r["passed"], true);
}
