//! `memtrace run` outputs: JSON schema, Parquet event table, plots,
//! determinism.

use crate::common;

use common::*;

#[test]
fn json_report_keeps_the_documented_names() {
    let report = run_json(&guest("cortex-m4", "suite"), &["--layer", "dw2"]);
    assert_eq!(report["arch"], "cortex-m4");
    let layer = &report["layers"][0];
    assert_eq!(layer["name"], "dw2");
    assert_eq!(layer["op"], "depthwise_conv2d");
    assert!(u(&layer["instructions"]) > 0);
    for b in layer["buffers"].as_array().unwrap() {
        for key in ["name", "role", "size", "loads", "stores", "updates"] {
            assert!(!b[key].is_null(), "buffer lacks {key}: {b}");
        }
    }
    for key in ["monotone_bytes", "exact_bytes"] {
        assert!(layer["overlap"][key].is_u64(), "overlap lacks {key}");
    }
}

/// Without --events or --plot, `run` watches the buffers through MMIO pages;
/// `--exact-time` forces memory hooks. Only the `access` field may differ.
#[test]
fn both_access_paths_report_the_same_layers() {
    for target in ["cortex-m4", "x86_64"] {
        let suite = guest(target, "suite");
        let mut fast = run_json(&suite, &[]);
        let mut exact = run_json(&suite, &["--exact-time"]);
        assert_eq!(fast["access"], "mmio", "{target}");
        assert_eq!(exact["access"], "hooks", "{target}");
        fast["access"] = serde_json::Value::Null;
        exact["access"] = serde_json::Value::Null;
        assert_eq!(fast, exact, "{target}");
    }
}

#[test]
fn tracing_the_same_elf_twice_gives_identical_parquet() {
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<_> = (0..2)
        .map(|i| {
            let path = dir.path().join(format!("run{i}.parquet"));
            let out = memtrace([
                "run",
                guest("cortex-m4", "suite").to_str().unwrap(),
                "--layer",
                "dw2",
                "--events",
                path.to_str().unwrap(),
            ]);
            assert!(out.status.success(), "{}", stderr(&out));
            std::fs::read(path).unwrap()
        })
        .collect();
    assert!(files[0].len() > 1000);
    assert_eq!(files[0], files[1]);
}

#[test]
fn the_event_table_agrees_with_the_reported_counts() {
    use polars::prelude::*;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.parquet");
    let report = run_json(
        &guest("cortex-m4", "suite"),
        &[
            "--job",
            "op=matmul,dtype=f32,input=3x4,filter=4x5",
            "--events",
            path.to_str().unwrap(),
        ],
    );
    let frame = ParquetReader::new(std::fs::File::open(&path).unwrap())
        .finish()
        .unwrap();
    let columns: Vec<&str> = frame
        .get_column_names()
        .iter()
        .map(|c| c.as_str())
        .collect();
    assert_eq!(
        columns,
        ["layer", "t", "seq", "pc", "buffer", "offset", "size", "kind"]
    );
    assert_eq!(report["access"], "hooks", "--events needs exact t and pc");
    let kind = frame.column("kind").unwrap().str().unwrap();
    let count = |k: &str| kind.iter().filter(|v| *v == Some(k)).count() as u64;
    let layer = &report["layers"][0];
    let total = |key: &str| -> u64 {
        layer["buffers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| u(&b[key]))
            .sum()
    };
    assert_eq!(count("load"), total("loads"));
    assert_eq!(count("store"), total("stores"));
    assert_eq!(count("update"), total("updates"));
    // seq is the total order: 0, 1, 2, ...; t never goes backwards.
    let seq: Vec<u64> = frame
        .column("seq")
        .unwrap()
        .u64()
        .unwrap()
        .into_no_null_iter()
        .collect();
    assert!(seq.iter().enumerate().all(|(i, s)| *s == i as u64));
    let t: Vec<u64> = frame
        .column("t")
        .unwrap()
        .u64()
        .unwrap()
        .into_no_null_iter()
        .collect();
    assert!(t.windows(2).all(|w| w[0] <= w[1]));
    assert!(*t.last().unwrap() < u(&layer["instructions"]));
}

#[test]
fn plots_are_written_as_png_and_svg() {
    let dir = tempfile::tempdir().unwrap();
    for ext in ["png", "svg"] {
        let path = dir.path().join(format!("trace.{ext}"));
        let out = memtrace([
            "run",
            guest("cortex-m4", "suite").to_str().unwrap(),
            "--layer",
            "dw2",
            "--plot",
            path.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        let bytes = std::fs::read(&path).unwrap();
        match ext {
            "png" => assert_eq!(&bytes[1..4], b"PNG"),
            _ => assert!(String::from_utf8_lossy(&bytes).contains("<svg")),
        }
    }
}
