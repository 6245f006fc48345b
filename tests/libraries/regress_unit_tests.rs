//! `regress --unit-tests`: CMSIS-NN's own unit tests (v7.0.0's, unmodified)
//! built against two library releases and compared under `memtrace check`
//! (docs/kernels.md, "The unit tests across releases").
//!
//! Every failure the comparison names is checked against what the program
//! itself says (Unity's verdict in its output) or against a `check` run of
//! the same program on its own.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::unit_tests::{check_json, define, defines, unit_tests};
use common::*;
use serde_json::Value;

/// v7.0.0's unit tests built against the development head
/// (`../shared/third_party/cmsis-nn-main`), once per test binary.
fn tests_on_the_development_head() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let root = Path::new(env!("CARGO_MANIFEST_DIR"));
            let head = root.join("../shared/third_party/cmsis-nn-main");
            assert!(
                head.join("Include").is_dir(),
                "{} is missing",
                head.display()
            );
            let build = Path::new(env!("CARGO_TARGET_TMPDIR")).join("unit-tests-cmsis-nn-main");
            let out = Command::new("make")
                .arg("-C")
                .arg(root.join("harness-c/unit-tests"))
                .arg("-j2")
                .arg(format!("CMSIS_NN_DIR={}", head.display()))
                .arg(format!("BUILD={}", build.display()))
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "building the unit tests against the head failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            build
        })
        .clone()
}

fn regress(old: &Path, new: &Path) -> (Value, i32) {
    let out = memtrace([
        "regress",
        "--unit-tests",
        path_str(old),
        path_str(new),
        "--format",
        "json",
    ]);
    (json(&out), out.status.code().unwrap_or(-1))
}

fn suite<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["suites"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["suite"] == name)
        .unwrap_or_else(|| panic!("no suite {name}"))
}

#[test]
fn the_same_build_on_both_sides_changes_nothing() {
    let built = unit_tests();
    let (report, status) = regress(&built, &built);
    assert_eq!(status, 0, "{report:#}");
    assert_eq!(report["passed"], true);
    let suites = report["suites"].as_array().unwrap();
    let programs = std::fs::read_dir(&built)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "elf")
        })
        .count();
    assert_eq!(suites.len(), programs);
    for s in suites {
        assert_eq!(s["changes"], serde_json::json!([]), "{}", s["suite"]);
        assert_eq!(s["calls"], serde_json::json!([]), "{}", s["suite"]);
        assert_eq!(s["old"], s["new"], "{}", s["suite"]);
        for o in s["scratch_overruns"].as_array().unwrap() {
            assert_eq!(o["old"], o["new"], "{}: {o}", s["suite"]);
        }
    }
    // A defect both sides share is reported, not a change: v7.0.0's own
    // DS-CNN test sizes its one scratch block without the average pool,
    // whose DSP kernel sums in one int32 per channel.
    let overrun = suite(&report, "test_arm_ds_cnn_l_s8")["scratch_overruns"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["function"] == "arm_avgpool_s8")
        .expect("the average pool overruns its scratch");
    let shapes = overrun["shapes"].as_str().unwrap();
    let channels: u64 = shapes
        .split(['x', ','])
        .nth(3)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("input channels in {shapes}"));
    assert_eq!(overrun["old"]["used_bytes"].as_u64(), Some(4 * channels));
    assert!(overrun["old"]["asked_bytes"].as_u64() < Some(4 * channels));
}

#[test]
fn the_development_heads_changes_are_found_by_v7_0_0s_own_tests() {
    let head = tests_on_the_development_head();
    let (report, status) = regress(&unit_tests(), &head);
    assert_eq!(status, 1, "{report:#}");
    let failing: Vec<&str> = report["suites"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["fails"] == true)
        .map(|s| s["suite"].as_str().unwrap())
        .collect();
    assert_eq!(
        failing,
        [
            "test_arm_convolve_1x1_s4_fast",
            "test_arm_convolve_1x1_s8_fast",
            "test_arm_lstm_unidirectional_s16",
            "test_arm_lstm_unidirectional_s8"
        ],
        "{report:#}"
    );

    // The 1x1 fast suites: Unity itself, in the program's own output,
    // reports the failed test (the head asks no scratch where v7.0.0's
    // tests expect some).
    for name in [
        "test_arm_convolve_1x1_s4_fast",
        "test_arm_convolve_1x1_s8_fast",
    ] {
        let s = suite(&report, name);
        assert_eq!(s["old"]["unity"][1], 0);
        assert_eq!(s["new"]["unity"][1], 1);
        let (run, _) = check_json(&head.join(format!("{name}.elf")), &["--no-calls"]);
        let stdout = run["stdout"].as_str().unwrap();
        assert!(
            stdout.contains(&format!("test_buffer_size_arm_{}:FAIL", &name[9..])),
            "{stdout}"
        );
        assert!(stdout.contains("1 Failures"), "{stdout}");
    }

    // The LSTM suite stops on the head: a `check` run of that program alone
    // ends in a read of unmapped memory inside the library's LSTM.
    let lstm = suite(&report, "test_arm_lstm_unidirectional_s8");
    assert_eq!(lstm["new"]["exit_status"], Value::Null);
    assert!(lstm["new"]["memcheck_errors"].as_u64().unwrap() >= 1);
    let (run, _) = check_json(
        &head.join("test_arm_lstm_unidirectional_s8.elf"),
        &["--no-calls"],
    );
    assert_eq!(run["end"]["kind"], "fault", "{:#}", run["end"]);
    let end = run["end"].to_string();
    assert!(
        end.contains("unmapped") && end.contains("arm_lstm_unidirectional_s8"),
        "{end}"
    );

    // The s16 LSTM runs on the head, but one of its calls may overlap its
    // output with its input by less: the head walks a batch-major
    // sequence batch by batch (all time steps of batch 0, then batch 1),
    // v7.0.0 time step by time step over all batches. On the one-time-step
    // test (3 batches of one step) v7.0.0 reads every input before it
    // writes an output (O_s = the input, 3 × 22 × 2 B); the head writes
    // batch 0's output (3 × 2 B) before it reads batch 1's input (at
    // 22 × 2 B): OB − 6 + 44 = 18 − 6 + 44 = 56 B.
    let s16 = suite(&report, "test_arm_lstm_unidirectional_s16");
    assert_eq!(s16["fails"], true, "{s16:#}");
    assert_eq!(s16["old"]["unity"], s16["new"]["unity"], "{s16:#}");
    let shrank: Vec<&Value> = s16["calls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["fails"] == true)
        .collect();
    assert_eq!(shrank.len(), 1, "{s16:#}");
    let call = shrank[0];
    assert_eq!(call["function"], "arm_lstm_unidirectional_s16");
    let data = "lstm_one_time_step_s16";
    let d = defines(data);
    let [batches, steps, input, hidden] =
        ["BATCH_SIZE", "TIME_STEPS", "INPUT_SIZE", "HIDDEN_SIZE"].map(|n| define(&d, data, n));
    let elem = 2;
    assert_eq!(
        (batches, steps),
        (3, 1),
        "the shapes the comment above reads"
    );
    let output = batches * steps * hidden * elem;
    assert_eq!(
        call["os_bytes"],
        serde_json::json!([
            batches * steps * input * elem,
            output - hidden * elem + steps * input * elem
        ]),
        "{call}"
    );
    // The call is the one-time-step test's, whose data have those shapes.
    let (run, _) = check_json(
        &unit_tests().join("test_arm_lstm_unidirectional_s16.elf"),
        &[],
    );
    let same = run["calls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["index"] == call["index"])
        .unwrap();
    assert_eq!(same["call_site"]["function"], data);
}
