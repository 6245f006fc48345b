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

use common::unit_tests::{check_json, unit_tests};
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
    }
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

    // The s16 LSTM makes more calls on the head, and none of its paired
    // calls changes for the worse: reported, not failed.
    let s16 = suite(&report, "test_arm_lstm_unidirectional_s16");
    assert_eq!(s16["fails"], false);
    let (old_calls, new_calls) = (
        s16["old"]["calls"].as_u64().unwrap(),
        s16["new"]["calls"].as_u64().unwrap(),
    );
    assert!(new_calls > old_calls, "{s16:#}");
    let said = s16["changes"][0].as_str().unwrap();
    assert!(
        said.starts_with(&format!("API calls {old_calls} → {new_calls}: ")),
        "{said}"
    );
    // Calls no longer made and new ones account for the difference.
    let count = |what: &str| -> u64 {
        let before = said.split(what).next().unwrap();
        before.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert_eq!(
        count(" new") - count(" not made"),
        new_calls - old_calls,
        "{said}"
    );
}
