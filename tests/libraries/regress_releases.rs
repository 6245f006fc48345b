//! `table` and `regress` across real CMSIS-NN releases: a kernel-library
//! maintainer's regression gate (docs/kernels.md, "Release history").
//!
//! Each test builds the releases it compares with harness-c's Makefile into
//! the same per-release build directories as `tests/libraries/cmsis_releases.rs`
//! (`$CARGO_TARGET_TMPDIR/cmsis-releases/<release>`; the builds in one test
//! binary are serialised, and test binaries run one after another), writes a
//! baseline of the older release — the built-in MobileNet layers,
//! fixtures/kernels/sweep.specs and fixtures/kernels/unaligned.specs — and
//! regresses the newer one against it.
//!
//! What the tests hold the gate to:
//! - no false change: between adjacent releases whose kernels did not change
//!   a layer's memory behaviour, `regress` passes and reports every O_s as
//!   unchanged, including layers whose CMSIS-NN kernels load unaligned words
//!   on Cortex-M4 (the fast access path saw those loads as the aligned words
//!   around them and gave false changes). The unaligned rows are checked
//!   against a second method: the same release's x86-64 trace;
//! - real changes named, with their direction and without failing: v5.0.0
//!   pads each im2col column of `arm_convolve_s8` to a multiple of 4 and
//!   stops asking scratch for the 3x3 depthwise kernel, which needs none; the
//!   declared sizes are checked against the size functions' formulas.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use common::*;
use serde_json::Value;

/// Serialises the `make` runs of this binary's tests (one build directory
/// per release, shared between tests).
static MAKE: Mutex<()> = Mutex::new(());

fn checkout(dir: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/third_party")
        .join(dir)
}

/// The suite of `release` (checkout `dir`) for `target`, built if needed.
fn suite_of(release: &str, dir: &str, target: &str) -> PathBuf {
    let build = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("cmsis-releases")
        .join(release);
    let elf = build.join(target).join("suite-cmsis.elf");
    let _guard = MAKE.lock().unwrap_or_else(|e| e.into_inner());
    make_harness(&[
        "-j2".to_owned(),
        format!("BUILD={}", build.display()),
        format!("CMSIS_NN_DIR={}", checkout(dir).display()),
        elf.display().to_string(),
    ]);
    elf
}

fn specs_file(dir: &Path, files: &[&str]) -> PathBuf {
    let text: String = files
        .iter()
        .map(|f| std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(f)).unwrap())
        .collect();
    let path = dir.join("specs");
    std::fs::write(&path, text).unwrap();
    path
}

/// `memtrace table ELF --configs-file SPECS`: the baseline written.
fn table(elf: &Path, specs: &Path, out: &Path, builtin: bool) -> Value {
    let mut args = vec![
        "table",
        path_str(elf),
        "--configs-file",
        path_str(specs),
        "--out",
        path_str(out),
    ];
    if !builtin {
        args.push("--no-builtin");
    }
    let o = memtrace(args);
    assert!(o.status.success(), "{}", stderr(&o));
    let baseline: Value = serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap();
    assert_eq!(baseline["access"], "hooks", "table traces exactly");
    baseline
}

/// `memtrace regress BASELINE ELF --format json`: exit code and report.
fn regress(baseline: &Path, elf: &Path) -> (Option<i32>, Value) {
    let o = memtrace([
        "regress",
        path_str(baseline),
        path_str(elf),
        "--format",
        "json",
    ]);
    let report = serde_json::from_str(&stdout(&o))
        .unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&o), stderr(&o)));
    (o.status.code(), report)
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// The O_s of `spec` traced by `memtrace run --job` on the fast access path.
fn fast_path_monotone(elf: &Path, spec: &str) -> u64 {
    let o = memtrace(["run", path_str(elf), "--job", spec, "--format", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    u(&json(&o)["layers"][0]["overlap"]["monotone_bytes"])
}

/// Regresses `new` against a baseline of `old` on both targets and checks
/// that nothing changed in memory behaviour.
fn adjacent_releases_change_nothing(old: (&str, &str), new: (&str, &str)) {
    let dir = tempfile::tempdir().unwrap();
    let specs = specs_file(
        dir.path(),
        &[
            "fixtures/kernels/sweep.specs",
            "fixtures/kernels/unaligned.specs",
        ],
    );
    for target in ["cortex-m4", "x86_64"] {
        let base = dir.path().join(format!("{}-{target}.json", old.0));
        let baseline = table(&suite_of(old.0, old.1, target), &specs, &base, true);
        let rows = baseline["rows"].as_array().unwrap();
        for r in rows {
            assert!(r["contract"].is_object(), "the contract is kept: {r}");
            assert!(u(&r["instructions"]) > 0, "{r}");
            assert!(r["reverse_exact_bytes"].is_u64(), "{r}");
        }
        let (code, report) = regress(&base, &suite_of(new.0, new.1, target));
        let c = &report["counts"];
        assert_eq!(code, Some(0), "{} → {} {target}: {report:#}", old.0, new.0);
        assert_eq!(u(&c["same"]), rows.len() as u64, "{report:#}");
        assert_eq!(u(&c["contract_broken"]), 0, "{report:#}");
        for row in report["rows"].as_array().unwrap() {
            assert!(
                row["changes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|ch| ch["kind"] == "instructions"),
                "{} → {} {target}: {row:#}",
                old.0,
                new.0
            );
        }
    }
}

#[test]
#[cfg_attr(
    any(no_cmsis_v6, no_cmsis_v7),
    ignore = "CMSIS-NN v6.0.0 or v7.0.0 not in ../shared/third_party"
)]
fn v7_0_0_regresses_clean_against_v6_0_0() {
    adjacent_releases_change_nothing(("v6.0.0", "cmsis-nn-v6.0.0"), ("v7.0.0", "cmsis-nn"));
}

#[test]
#[cfg_attr(
    any(no_cmsis_v5, no_cmsis_v6),
    ignore = "CMSIS-NN v5.0.0 or v6.0.0 not in ../shared/third_party"
)]
fn v6_0_0_regresses_clean_against_v5_0_0() {
    adjacent_releases_change_nothing(("v5.0.0", "cmsis-nn-v5.0.0"), ("v6.0.0", "cmsis-nn-v6.0.0"));
}

#[test]
#[cfg_attr(
    any(no_cmsis_v7, no_cmsis_head),
    ignore = "CMSIS-NN v7.0.0 or the head not in ../shared/third_party"
)]
fn the_head_regresses_clean_against_v7_0_0() {
    adjacent_releases_change_nothing(("v7.0.0", "cmsis-nn"), ("head", "cmsis-nn-main"));
}

#[test]
#[cfg_attr(
    any(no_cmsis_v4, no_cmsis_v7),
    ignore = "CMSIS-NN v4.0.0 or v7.0.0 not in ../shared/third_party"
)]
fn unaligned_loads_give_no_false_change_between_v4_0_0_and_v7_0_0() {
    let dir = tempfile::tempdir().unwrap();
    let specs = specs_file(dir.path(), &["fixtures/kernels/unaligned.specs"]);
    let v4 = |target| suite_of("v4.0.0", "cmsis-nn-v4.0.0", target);
    let base = dir.path().join("v4-m4.json");
    let baseline = table(&v4("cortex-m4"), &specs, &base, false);
    let x86 = table(
        &v4("x86_64"),
        &specs,
        &dir.path().join("v4-x86.json"),
        false,
    );
    let mut artefacts = 0;
    for (row, x86_row) in baseline["rows"]
        .as_array()
        .unwrap()
        .iter()
        .zip(x86["rows"].as_array().unwrap())
    {
        let traced = u(&row["monotone_bytes"]);
        // A second method: the same release on x86-64, whose C kernels make
        // no unaligned word loads.
        assert_eq!(traced, u(&x86_row["monotone_bytes"]), "{row}");
        // The fast path sees the unaligned loads as wider, later reads.
        let fast = fast_path_monotone(&v4("cortex-m4"), row["spec"].as_str().unwrap());
        assert!(fast <= traced, "{row}: fast {fast}");
        artefacts += usize::from(fast < traced);
    }
    assert!(
        artefacts > 0,
        "the fixture no longer shows the fast path's artefact"
    );
    let (code, report) = regress(&base, &suite_of("v7.0.0", "cmsis-nn", "cortex-m4"));
    assert_eq!(code, Some(0), "{report:#}");
    for row in report["rows"].as_array().unwrap() {
        assert_eq!(row["status"], "same", "{row:#}");
    }
}

#[test]
#[cfg_attr(
    any(no_cmsis_v4, no_cmsis_v5),
    ignore = "CMSIS-NN v4.0.0 or v5.0.0 not in ../shared/third_party"
)]
fn v5_0_0_names_its_scratch_changes_with_their_direction() {
    let dir = tempfile::tempdir().unwrap();
    let specs = specs_file(dir.path(), &["fixtures/kernels/sweep.specs"]);
    let base = dir.path().join("v4.json");
    table(
        &suite_of("v4.0.0", "cmsis-nn-v4.0.0", "cortex-m4"),
        &specs,
        &base,
        true,
    );
    let (code, report) = regress(&base, &suite_of("v5.0.0", "cmsis-nn-v5.0.0", "cortex-m4"));
    // Scratch declared larger, or no longer asked for: changes, no failure.
    assert_eq!(code, Some(0), "{report:#}");
    let change = |name: &str| -> Value {
        let row = report["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("no row {name}"));
        row["changes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["kind"] == "scratch")
            .cloned()
            .unwrap_or_else(|| panic!("{name}: no scratch change: {row:#}"))
    };
    // conv1: 3x3x3 filter, 27 int8 columns widened to int16, two columns.
    // v4.0.0 declares 2 * 27 * 2 B; v5.0.0 pads each column to 28.
    let cols: u64 = 3 * 3 * 3;
    let conv1 = change("conv1");
    assert_eq!(conv1["declared"][0], 2 * cols * 2);
    assert_eq!(conv1["declared"][1], 2 * cols.next_multiple_of(4) * 2);
    // It writes the second column after the first one's padding.
    assert_eq!(conv1["used"][1], (cols.next_multiple_of(4) + cols) * 2);
    // dw1: the 3x3 kernel runs on both, v4.0.0 declared the 5x5-style
    // buffer for it and it never wrote there; v5.0.0 asks for none.
    let dw1 = change("dw1");
    assert_eq!(dw1["used"], serde_json::json!([0, 0]));
    assert_eq!(dw1["declared"][1], 0);
    assert!(u(&dw1["declared"][0]) > 0);
}
