//! `memtrace table` + `memtrace regress`: a baseline of suite.elf, re-traced
//! with suite-modified.elf (depthwise convolution with its channel loops moved
//! outermost), must fail and name every depthwise layer and configuration.

use crate::common;

use common::*;
use serde_json::Value;

/// Baseline of suite.elf: built-in layers, 6 random configs each of three
/// ops, and (on Cortex-M4, to keep the test short) the Table I layer.
fn baseline(arch: &str, dir: &std::path::Path) -> std::path::PathBuf {
    let out = dir.join(format!("baseline-{arch}.json"));
    let elf = suite(arch);
    let mut args = vec![
        "table",
        path_str(&elf),
        "--out",
        path_str(&out),
        "--op",
        "depthwise_conv2d,conv2d,max_pool",
        "--configs",
        "6",
    ];
    if arch == "cortex-m4" {
        args.extend(["--grid", TABLE_ONE]);
    }
    let o = memtrace(args);
    assert!(o.status.success(), "{}", stderr(&o));
    out
}

#[test]
fn modified_depthwise_kernel_makes_regress_fail_and_name_the_layers() {
    let dir = tempfile::tempdir().unwrap();
    for arch in ["cortex-m4", "x86_64"] {
        let base = baseline(arch, dir.path());
        let table: Value = serde_json::from_str(&std::fs::read_to_string(&base).unwrap()).unwrap();
        assert_eq!(table["format"], "memtrace-os-table/1");
        assert_eq!(
            table["arch"],
            if arch == "x86_64" {
                "x86-64"
            } else {
                "cortex-m4"
            }
        );
        let rows = table["rows"].as_array().unwrap();
        // 5 built-in layers + 3 ops x 6 configs (+ Table I)
        let table_one = usize::from(arch == "cortex-m4");
        assert_eq!(rows.len(), 5 + 18 + table_one);
        for r in rows {
            for key in [
                "op",
                "spec",
                "dtype",
                "arch",
                "exact_bytes",
                "monotone_bytes",
                "algorithmic_bytes",
                "analytic_bytes",
            ] {
                assert!(!r[key].is_null(), "{key}: {r}");
            }
        }
        let depthwise: Vec<&str> = rows
            .iter()
            .filter(|r| r["op"] == "depthwise_conv2d")
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert_eq!(depthwise.len(), 2 + 6 + table_one);

        // Markdown report to stdout, exit 1, every depthwise row named.
        let o = memtrace(["regress", path_str(&base), path_str(&modified(arch))]);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        let md = stdout(&o);
        let err = stderr(&o);
        assert!(md.contains("**FAIL**"), "{md}");
        let shrank = md
            .split("## Shrank")
            .nth(1)
            .and_then(|s| s.split("## Unchanged").next())
            .expect("a Shrank section");
        for name in &depthwise {
            assert!(
                shrank.contains(&format!("| {name} |")),
                "{name} not in Shrank:\n{md}"
            );
            assert!(err.contains(&format!("SHRANK {name} (")), "{err}");
        }
        // Table I: 1 204 224 -> 384 B
        if table_one == 1 {
            assert!(shrank.contains("1204224 → 384"), "{shrank}");
        }
        assert!(err.contains("FAIL"));

        // JSON report to a file: conv and pool rows unchanged.
        let report = dir.path().join(format!("report-{arch}.json"));
        let o = memtrace([
            "regress",
            path_str(&base),
            path_str(&modified(arch)),
            "--format",
            "json",
            "--out",
            path_str(&report),
        ]);
        assert_eq!(o.status.code(), Some(1));
        let r: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
        assert_eq!(r["passed"], false);
        assert_eq!(u(&r["counts"]["shrank"]), depthwise.len() as u64);
        assert_eq!(
            u(&r["counts"]["same"]),
            (rows.len() - depthwise.len()) as u64
        );
        for row in r["rows"].as_array().unwrap() {
            let want = if row["op"] == "depthwise_conv2d" {
                "shrank"
            } else {
                "same"
            };
            assert_eq!(row["status"], want, "{row}");
            if want == "shrank" {
                assert!(row["monotone_delta"].as_i64().unwrap() < 0);
                assert_eq!(row["analytic_now_unsafe"], true);
            }
        }

        // The unmodified binary passes against its own baseline.
        let o = memtrace(["regress", path_str(&base), path_str(&suite(arch))]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(stdout(&o).contains("**PASS**"));
    }
}

#[test]
fn regress_reports_grown_missing_and_bad_baselines() {
    let dir = tempfile::tempdir().unwrap();
    // A hand-edited baseline: one layer that no longer exists, one whose O_s
    // was recorded too small (so it grew).
    let base = dir.path().join("b.json");
    let o = memtrace([
        "table",
        path_str(&suite("cortex-m4")),
        "--out",
        path_str(&base),
        "--no-builtin",
        "--grid",
        "op=relu,input=1x4x4x{1,2}",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut t: Value = serde_json::from_str(&std::fs::read_to_string(&base).unwrap()).unwrap();
    t["rows"][0]["monotone_bytes"] = 8.into();
    let mut ghost = t["rows"][1].clone();
    ghost["name"] = "ghost".into();
    ghost["source"] = "builtin".into();
    t["rows"].as_array_mut().unwrap().push(ghost);
    std::fs::write(&base, serde_json::to_string(&t).unwrap()).unwrap();
    let o = memtrace([
        "regress",
        path_str(&base),
        path_str(&suite("cortex-m4")),
        "--format",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(1), "a missing layer fails");
    let r = json(&o);
    assert_eq!(r["rows"][0]["status"], "grew");
    assert_eq!(r["rows"][1]["status"], "same");
    assert_eq!(r["rows"][2]["status"], "missing");
    assert!(stderr(&o).contains("MISSING ghost"));

    std::fs::write(&base, "{\"rows\": 3}").unwrap();
    let o = memtrace(["regress", path_str(&base), path_str(&suite("cortex-m4"))]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("is not a memtrace O_s table"),
        "{}",
        stderr(&o)
    );
    // table refuses an unwritable output before tracing
    let o = memtrace([
        "table",
        path_str(&suite("cortex-m4")),
        "--out",
        "/nonexistent/dir/b.json",
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("not writable"), "{}", stderr(&o));
}

/// Every layer's outputs are digested when it ends. Two independent builds
/// of the same reference kernels, the Cortex-M4's and x86-64's (two
/// compilers, two emulated machines), give each int8 row the same digest;
/// a baseline row whose outputs differ from the new build's fails, named
/// with both digests, while its O_s stays `same`.
#[test]
fn other_output_bytes_fail_the_layer_and_int8_digests_agree_across_cores() {
    let dir = tempfile::tempdir().unwrap();
    let (m4, x86) = (
        baseline("cortex-m4", dir.path()),
        baseline("x86_64", dir.path()),
    );
    let read = |p: &std::path::Path| -> Value {
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    };
    let (mut m4_table, x86_table) = (read(&m4), read(&x86));
    let int8 = |t: &Value| -> Vec<(String, String, String)> {
        t["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["dtype"] == "int8")
            .map(|r| {
                let digest = r["output_digest"].as_str().unwrap_or_else(|| panic!("{r}"));
                assert_eq!(digest.len(), 16, "{r}");
                (
                    r["name"].to_string(),
                    r["spec"].to_string(),
                    digest.to_owned(),
                )
            })
            .collect()
    };
    let (ours, theirs) = (int8(&m4_table), int8(&x86_table));
    assert!(!ours.is_empty(), "int8 rows: {m4_table}");
    for row in &ours {
        if let Some(other) = theirs.iter().find(|t| t.0 == row.0 && t.1 == row.1) {
            assert_eq!(row.2, other.2, "{}: cortex-m4 vs x86-64", row.0);
        }
    }

    // One int8 row's baseline outputs changed: that row fails, no other.
    let rows = m4_table["rows"].as_array_mut().unwrap();
    let k = rows.iter().position(|r| r["dtype"] == "int8").unwrap();
    let name = rows[k]["name"].clone();
    rows[k]["output_digest"] = Value::from("0123456789abcdef");
    std::fs::write(&m4, m4_table.to_string()).unwrap();
    let out = memtrace([
        "regress",
        path_str(&m4),
        path_str(&suite("cortex-m4")),
        "--format",
        "json",
    ]);
    let report = json(&out);
    assert_eq!(out.status.code(), Some(1), "{report:#}");
    assert_eq!(u(&report["counts"]["outputs_differ"]), 1, "{report:#}");
    for row in report["rows"].as_array().unwrap() {
        let output: Vec<&Value> = row["changes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["kind"] == "output")
            .collect();
        if row["name"] == name {
            assert_eq!(row["fails"], true, "{row:#}");
            assert_eq!(row["status"], "same", "{row:#}");
            assert_eq!(output.len(), 1, "{row:#}");
            assert_eq!(output[0]["old"], "0123456789abcdef");
            assert_eq!(output[0]["exact"], true);
        } else {
            assert!(output.is_empty(), "{row:#}");
        }
    }
}
