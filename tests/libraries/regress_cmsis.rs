//! Library regression: an O_s baseline of `suite.elf` (TFLM reference
//! kernels), re-traced with `suite-cmsis.elf` (CMSIS-NN), must fail and name
//! every layer whose safe overlap shrank between the two libraries — and only
//! those. The expected set is computed independently, from the per-layer O_s
//! that `memtrace run --format json` reports on both ELFs.

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;

use common::*;
use serde_json::Value;

const SWEEP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/kernels/sweep.specs");

/// The specs of the sweep, in file order (= `config 1`, `config 2`, ...).
fn sweep_specs() -> Vec<String> {
    std::fs::read_to_string(SWEEP)
        .unwrap()
        .lines()
        .map(|l| l.split('#').next().unwrap().trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect()
}

/// `memtrace table ELF --out OUT --configs-file SWEEP` (built-in layers and
/// the sweep).
fn table(elf: &Path, out: &Path) -> Value {
    let o = memtrace([
        "table",
        path_str(elf),
        "--out",
        path_str(out),
        "--configs-file",
        SWEEP,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap()
}

/// (monotone, exact) of a traced layer.
fn overlap(layer: &Value) -> (u64, u64) {
    let o = &layer["overlap"];
    (u(&o["monotone_bytes"]), u(&o["exact_bytes"]))
}

/// Rows whose O_s shrank, computed without `table` or `regress`: every
/// built-in layer from one `run` of each ELF, every sweep config from a
/// `run --job` on each.
fn shrunk_by_run(target: &str) -> BTreeSet<String> {
    let shrank = |old: (u64, u64), new: (u64, u64)| new.0 < old.0 || new.1 < old.1;
    let mut names = BTreeSet::new();
    let reference = run_json(&suite(target), &[]);
    let cmsis = run_json(&suite_cmsis(target), &[]);
    let layers = |r: &Value| r["layers"].as_array().unwrap().clone();
    for (old, new) in layers(&reference).iter().zip(layers(&cmsis).iter()) {
        assert_eq!(old["name"], new["name"]);
        if shrank(overlap(old), overlap(new)) {
            names.insert(old["name"].as_str().unwrap().to_owned());
        }
    }
    for (i, spec) in sweep_specs().iter().enumerate() {
        let (old, new) = (
            run_job(&suite(target), spec),
            run_job(&suite_cmsis(target), spec),
        );
        if shrank(overlap(&old), overlap(&new)) {
            names.insert(format!("config {}", i + 1));
        }
    }
    names
}

#[test]
#[cfg_attr(no_cmsis, ignore = "CMSIS-NN guests not built: set CMSIS_NN_DIR")]
fn regress_from_the_reference_kernels_to_cmsis_nn_names_every_layer_whose_o_s_shrank() {
    let dir = tempfile::tempdir().unwrap();
    let specs = sweep_specs();
    for target in ["cortex-m4", "x86_64"] {
        // The baseline: suite.elf's five built-in layers and the sweep, each
        // row recording the kernel that ran it.
        let base = dir.path().join(format!("base-{target}.json"));
        let baseline = table(&suite(target), &base);
        let rows = baseline["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 5 + specs.len());
        for r in rows {
            assert_eq!(r["library"], "TFLM reference", "{r}");
        }

        // Markdown to stdout, one SHRANK line per row on stderr, exit 1.
        let o = memtrace(["regress", path_str(&base), path_str(&suite_cmsis(target))]);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        let (md, err) = (stdout(&o), stderr(&o));
        let named: BTreeSet<String> = err
            .lines()
            .filter_map(|l| l.strip_prefix("SHRANK "))
            .map(|l| l.split(" (").next().unwrap().to_owned())
            .collect();

        // Exactly the layers whose O_s is smaller in the CMSIS-NN trace.
        let expected = shrunk_by_run(target);
        assert_eq!(named, expected, "{target}");
        // Among them the two pointwise layers of MobileNet v1 0.25, every 1x1
        // conv of the sweep, and the single-channel stride-2 max pool.
        let config = |needle: &str| {
            let i = specs.iter().position(|s| s.contains(needle)).unwrap();
            format!("config {}", i + 1)
        };
        let mut known: BTreeSet<String> = ["conv2", "conv3"].map(String::from).into();
        known.extend(["32x1x1x16", "15x1x1x16", "8x1x1x16", "1x10x9x1"].map(config));
        assert_eq!(named, known, "{target}");

        let shrank = md
            .split("## Shrank")
            .nth(1)
            .and_then(|s| s.split("\n## ").next())
            .expect("a Shrank section");
        let kernels = md
            .split("## Kernels and specs")
            .nth(1)
            .and_then(|s| s.split("\n## ").next())
            .expect("a Kernels section");
        for name in &named {
            assert!(
                shrank
                    .lines()
                    .any(|l| l.starts_with(&format!("| {name} |"))),
                "{name} not in Shrank:\n{md}"
            );
            // Each names the kernel change, from the TFLM reference to
            // CMSIS-NN, in its section and on its stderr line.
            let row = kernels
                .lines()
                .find(|l| l.starts_with(&format!("| {name} |")))
                .unwrap_or_else(|| panic!("{name} not in Kernels:\n{md}"));
            assert!(row.contains("(TFLM reference) → `arm_"), "{row}");
            assert!(row.contains("(CMSIS-NN)"), "{row}");
            let line = err
                .lines()
                .find(|l| l.starts_with(&format!("SHRANK {name} (")))
                .unwrap();
            assert!(line.contains("(TFLM reference) → `arm_"), "{line}");
        }
        assert!(
            shrank.contains("| conv2 |") && shrank.contains("32761 → 2 |"),
            "{shrank}"
        );
        assert!(err.contains("regress:") && err.contains("FAIL"), "{err}");

        // The JSON report: every row traced, kernels before and after.
        let report_path = dir.path().join(format!("report-{target}.json"));
        let o = memtrace([
            "regress",
            path_str(&base),
            path_str(&suite_cmsis(target)),
            "--format",
            "json",
            "--out",
            path_str(&report_path),
        ]);
        assert_eq!(o.status.code(), Some(1));
        let report: Value =
            serde_json::from_str(&std::fs::read_to_string(&report_path).unwrap()).unwrap();
        assert_eq!(report["passed"], false);
        assert_eq!(u(&report["counts"]["shrank"]), named.len() as u64);
        assert_eq!(
            u(&report["counts"]["missing"]) + u(&report["counts"]["errors"]),
            0
        );
        for row in report["rows"].as_array().unwrap() {
            assert!(
                row["kernel_before"]
                    .as_str()
                    .unwrap()
                    .ends_with("(TFLM reference)"),
                "{row}"
            );
            assert!(!row["kernel_after"].is_null(), "{row}");
            let is_shrunk = named.contains(row["name"].as_str().unwrap());
            assert_eq!(row["status"] == "shrank", is_shrunk, "{row}");
        }

        // suite-cmsis.elf tabulates like any kernel binary and passes against
        // its own baseline.
        let own = dir.path().join(format!("cmsis-{target}.json"));
        let cmsis_table = table(&suite_cmsis(target), &own);
        assert!(cmsis_table["rows"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["library"] == "CMSIS-NN"));
        let o = memtrace(["regress", path_str(&own), path_str(&suite_cmsis(target))]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(stdout(&o).contains("**PASS**"));
    }
}

/// The kernel suite checks every layer a CMSIS-NN kernel runs against TFLM's
/// reference kernel on the same inputs, bit for bit. Against its own
/// baseline the real library differs in no row; `suite-cmsis-skewed.elf`
/// (`harness-c/guests/skewed_max_pool.c`) flips the lowest bit of the first
/// three output bytes of every int8 max pool, and regress names exactly
/// those rows with their kernel and the bytes: min(3, the output size `run`
/// reports on the reference kernels), the first at byte 0. Their O_s is
/// still compared (the rows are traced, not errors).
#[test]
#[cfg_attr(no_cmsis, ignore = "CMSIS-NN guests not built: set CMSIS_NN_DIR")]
fn a_cmsis_nn_kernel_unlike_the_reference_kernels_is_named_with_its_bytes() {
    let target = "cortex-m4";
    let dir = tempfile::tempdir().unwrap();
    let own = dir.path().join("cmsis.json");
    table(&suite_cmsis(target), &own);
    let regress = |elf: &Path| {
        let o = memtrace(["regress", path_str(&own), path_str(elf), "--format", "json"]);
        (o.status.code(), json(&o), stderr(&o))
    };

    let (code, clean, _) = regress(&suite_cmsis(target));
    assert_eq!(code, Some(0), "{clean:#}");
    assert!(u(&clean["counts"]["reference_checked"]) > 0, "{clean:#}");
    assert_eq!(u(&clean["counts"]["differ_from_reference"]), 0, "{clean:#}");

    let (code, skewed, err) = regress(&guest(target, "suite-cmsis-skewed"));
    assert_eq!(code, Some(1), "{skewed:#}");
    let mut named = 0;
    for row in skewed["rows"].as_array().unwrap() {
        let reference: Vec<&Value> = row["changes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["kind"] == "reference")
            .collect();
        let kernel = row["kernel_after"].as_str().unwrap_or("");
        if !kernel.contains("`arm_max_pool_s8`") {
            assert!(reference.is_empty(), "{row:#}");
            continue;
        }
        named += 1;
        let spec = row["spec"].as_str().unwrap();
        let output = u(&buffer(&run_job(&suite(target), spec), "output")["size"]);
        let bytes = format!(
            "{} of {output} bytes differ, the first at byte 0",
            output.min(3)
        );
        assert_eq!(reference.len(), 1, "{row:#}");
        assert!(
            reference[0]["detail"].as_str().unwrap().ends_with(&bytes),
            "{row:#}"
        );
        assert_eq!(row["fails"], true, "{row:#}");
        assert_eq!(row["status"], "same", "{row:#}");
        let name = row["name"].as_str().unwrap();
        assert!(
            err.lines().any(|l| l.starts_with(&format!(
                "OUTPUT {name} ({spec}, `arm_max_pool_s8` (CMSIS-NN)): "
            )) && l.ends_with(&bytes)),
            "{name}: {err}"
        );
    }
    assert!(named > 0, "no int8 max pool in the sweep: {skewed:#}");
    assert_eq!(u(&skewed["counts"]["differ_from_reference"]), named);
    assert_eq!(u(&skewed["counts"]["errors"]), 0, "{skewed:#}");
}
