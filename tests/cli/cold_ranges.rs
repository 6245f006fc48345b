//! `memtrace cold`: every arena tensor's cold ranges at graph level
//! (TinySeg's Algorithm 2) and at byte level (from one traced run of the
//! model on real TFLM, under TFLM's own greedy plan), and how the two must
//! relate.
//!
//! Graph level treats every access as touching every byte of a tensor. A
//! byte's accessing positions are therefore a subset of its tensor's that
//! always contains the writer, and removing accesses only merges gaps: no
//! byte is idle for fewer operators than its tensor's cold range, and a byte
//! accessed at every graph-level access has exactly that cold range. Bytes
//! idle longer are bytes some reader never touches, which hand-built models
//! with strided readers and VALID pools predict byte for byte.

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use common::{json, memtrace, path_str, stderr, tfmicro_model, u};
use memtrace_model::export::{materialize, to_tflite};
use memtrace_model::zoo::GraphBuilder;
use memtrace_model::{Activation, Dtype, Model, OpKind};
use serde_json::Value;

/// A scratch directory for this test process.
fn scratch_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("memtrace-cold-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `model` with seeded weights, written as a `.tflite` file.
fn export(model: &Model, dir: &Path) -> PathBuf {
    let path = dir.join(format!("{}.tflite", model.name));
    std::fs::write(&path, to_tflite(&materialize(model, 1)).unwrap()).unwrap();
    path
}

/// `memtrace cold MODEL --format json EXTRA…`, asserting success.
fn cold_json(model: &str, extra: &[&str]) -> Value {
    let mut args = vec!["cold", model, "--format", "json"];
    args.extend_from_slice(extra);
    let out = memtrace(&args);
    assert!(out.status.success(), "cold {model}: {}", stderr(&out));
    json(&out)
}

fn tensor<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no tensor `{name}`"))
}

fn usizes(v: &Value) -> Vec<u64> {
    v.as_array().unwrap().iter().map(u).collect()
}

/// Every byte offset a class's runs cover.
fn class_bytes(class: &Value) -> BTreeSet<u64> {
    let mut out = BTreeSet::new();
    for r in class["runs"].as_array().unwrap() {
        let (o, l, s, n) = (
            u(&r["offset"]),
            u(&r["len"]),
            u(&r["stride"]),
            u(&r["count"]),
        );
        for k in 0..n {
            out.extend(o + k * s..o + k * s + l);
        }
    }
    out
}

fn classes(t: &Value) -> &Vec<Value> {
    t["byte_level"]["classes"].as_array().unwrap()
}

fn longest(class: &Value) -> &Value {
    &class["gaps"][class["longest"].as_u64().unwrap() as usize]
}

/// The widest gap between consecutive accesses, first on ties (the
/// definition, not Algorithm 2's incremental form).
fn widest_gap(at: &[u64]) -> (u64, u64) {
    let mut best = (at[0], at[0]);
    for w in at.windows(2) {
        if w[1] - w[0] > best.1 - best.0 {
            best = (w[0], w[1]);
        }
    }
    best
}

/// Instruction span `[start, end]` of the windows at `position` (the
/// `load_input` windows share position 0 with the first operator).
fn window_span(report: &Value, position: u64) -> (u64, u64) {
    let ws: Vec<&Value> = report["windows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| u(&w["position"]) == position)
        .collect();
    assert!(!ws.is_empty(), "no window at position {position}");
    (
        ws.iter().map(|w| u(&w["start"])).min().unwrap(),
        ws.iter().map(|w| u(&w["end"])).max().unwrap(),
    )
}

/// The relations between the two levels, on every tensor of `report`.
fn assert_levels_agree(report: &Value) {
    let model = report["model"].as_str().unwrap();
    let windows = report["windows"].as_array().unwrap();
    for w in windows.windows(2) {
        assert_eq!(
            w[0]["end"], w[1]["start"],
            "{model}: windows follow each other"
        );
    }
    assert!(report["problems"].as_array().unwrap().is_empty(), "{model}");
    assert!(report["clobbers"].as_array().unwrap().is_empty(), "{model}");
    let tensors = report["tensors"].as_array().unwrap();
    assert!(!tensors.is_empty(), "{model}");
    for t in tensors {
        let name = format!("{model}/{}", t["name"]);
        let g = &t["graph"];
        let accesses = usizes(&g["accesses"]);
        let (start, end) = widest_gap(&accesses);
        assert_eq!((u(&g["start"]), u(&g["end"])), (start, end), "{name}");
        let graph_idle = u(&g["idle_ops"]);
        let mut covered = BTreeSet::new();
        let mut longer = 0;
        for c in classes(t) {
            let bytes = class_bytes(c);
            assert_eq!(bytes.len() as u64, u(&c["bytes"]), "{name}: runs and bytes");
            assert!(bytes.is_disjoint(&covered), "{name}: classes overlap");
            covered.extend(bytes);
            let positions = usizes(&c["positions"]);
            assert!(
                positions.iter().all(|p| accesses.contains(p)),
                "{name}: byte accesses {positions:?} outside the graph's {accesses:?}"
            );
            assert_eq!(
                positions.first(),
                Some(&u(&g["defined"])),
                "{name}: writer writes every byte"
            );
            let idle = c["longest"]
                .as_u64()
                .map_or(0, |_| u(&longest(c)["idle_ops"]));
            assert!(
                idle >= graph_idle,
                "{name}: a byte idle {idle} < graph {graph_idle}"
            );
            if positions == accesses && graph_idle > 0 {
                let l = longest(c);
                assert_eq!((u(&l["from"]), u(&l["to"])), (start, end), "{name}");
                assert_eq!(idle, graph_idle, "{name}");
            }
            if idle > graph_idle {
                assert_ne!(
                    positions, accesses,
                    "{name}: idle longer only when a reader skips"
                );
                longer += u(&c["bytes"]);
            }
            for gap in c["gaps"].as_array().unwrap() {
                let before = window_span(report, u(&gap["from"]));
                let lb = usizes(&gap["last_before"]);
                assert!(before.0 <= lb[0] && lb[1] <= before.1, "{name}: {gap}");
                if let Some(to) = gap["to"].as_u64() {
                    let after = window_span(report, to);
                    let fa = usizes(&gap["first_after"]);
                    assert!(after.0 <= fa[0] && fa[1] <= after.1, "{name}: {gap}");
                    // The operators in between ran entirely inside the gap.
                    let between = window_span(report, to).0 - before.1;
                    assert!(u(&gap["idle_instructions"][0]) >= between, "{name}: {gap}");
                }
            }
        }
        assert_eq!(
            covered.len() as u64,
            u(&t["bytes"]),
            "{name}: every byte in one class"
        );
        assert_eq!(u(&t["byte_level"]["bytes_idle_longer"]), longer, "{name}");
    }
}

/// x → a (1×1) → s (1×1, stride 2) → c → d (3×3), and e (1×1) reads a
/// again at the end: a skip connection whose first reader samples only the
/// even rows and columns.
fn strided_skip() -> Model {
    let mut g = GraphBuilder::new("strided_skip", Dtype::Int8);
    let x = g.input("x", &[1, 8, 8, 4]);
    let a = g.conv2d("a", x, 4, 1, 1, Activation::Relu);
    let s = g.conv2d("s", a, 4, 1, 2, Activation::Relu);
    let c = g.conv2d("c", s, 4, 3, 1, Activation::Relu);
    let d = g.conv2d("d", c, 4, 3, 1, Activation::Relu);
    let e = g.conv2d("e", a, 4, 1, 1, Activation::None);
    g.finish(&[d, e])
}

#[test]
fn a_stride_2_reader_leaves_odd_rows_and_columns_idle_longer() {
    let dir = scratch_dir("strided");
    let path = export(&strided_skip(), &dir);
    let report = cold_json(path_str(&path), &[]);
    assert_levels_agree(&report);
    let a = tensor(&report, "a");
    assert_eq!(usizes(&a["graph"]["accesses"]), vec![0, 1, 4]);
    assert_eq!((u(&a["graph"]["start"]), u(&a["graph"]["end"])), (1, 4));
    assert_eq!(u(&a["graph"]["idle_ops"]), 2);
    // Pixel (y, x) of the 8×8×4 tensor is bytes 4·(8y + x) .. + 4; the
    // stride-2 1×1 convolution reads the pixels with y and x even.
    let even: BTreeSet<u64> = (0..8u64)
        .flat_map(|y| (0..8u64).map(move |x| (y, x)))
        .filter(|(y, x)| y % 2 == 0 && x % 2 == 0)
        .flat_map(|(y, x)| 4 * (8 * y + x)..4 * (8 * y + x) + 4)
        .collect();
    let cs = classes(a);
    assert_eq!(cs.len(), 2, "{cs:?}");
    let read = cs
        .iter()
        .find(|c| usizes(&c["positions"]) == [0, 1, 4])
        .unwrap();
    let skipped = cs
        .iter()
        .find(|c| usizes(&c["positions"]) == [0, 4])
        .unwrap();
    assert_eq!(class_bytes(read), even);
    assert_eq!(class_bytes(skipped).len(), 256 - 64);
    let l = longest(skipped);
    assert_eq!((u(&l["from"]), u(&l["to"]), u(&l["idle_ops"])), (0, 4, 3));
    assert_eq!(u(&a["byte_level"]["bytes_idle_longer"]), 192);
    assert_eq!(u(&a["byte_level"]["idle_cost"]), 64 * 2 + 192 * 3);
    assert_eq!(u(&a["graph"]["idle_cost"]), 256 * 2);
    // Every other tensor is read whole by each reader.
    for t in report["tensors"].as_array().unwrap() {
        if t["name"] != "a" {
            assert_eq!(classes(t).len(), 1, "{}", t["name"]);
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// x → a (1×1) → b (1×1, 2 filters) → p (2×2 max pool, stride 2) → q (3×3
/// max pool, stride 2, VALID: reads rows and columns 0..=2 of p's 4×4).
fn pools() -> Model {
    let mut g = GraphBuilder::new("pools", Dtype::Int8);
    let x = g.input("x", &[1, 8, 8, 2]);
    let a = g.conv2d("a", x, 2, 1, 1, Activation::Relu);
    let b = g.conv2d("b", a, 2, 1, 1, Activation::Relu);
    let p = g.pool(OpKind::MaxPool, "p", b, 2, 2);
    let q = g.pool(OpKind::MaxPool, "q", p, 3, 2);
    g.finish(&[q])
}

#[test]
fn pools_read_every_byte_once_and_valid_padding_leaves_a_dead_border() {
    let dir = scratch_dir("pools");
    let path = export(&pools(), &dir);
    let report = cold_json(path_str(&path), &["--exact-time"]);
    assert_eq!(report["access_path"], "hooks");
    assert_levels_agree(&report);
    // The 2×2 stride-2 pool reads each byte of b exactly once: first and
    // last access in its window are the same instruction; the 1×1
    // convolution with two filters reads each byte of a twice.
    let b = classes(tensor(&report, "b"));
    assert_eq!(b.len(), 1);
    assert_eq!(usizes(&b[0]["busy_instructions"][1]), vec![0, 0]);
    let a = classes(tensor(&report, "a"));
    assert_eq!(a.len(), 1);
    assert!(u(&a[0]["busy_instructions"][1][0]) > 0, "{}", a[0]);
    // Row 3 and column 3 of p (4×4×2) are never read: written at 2, dead
    // until q, the last reader, has run.
    let p = tensor(&report, "p");
    let unread: BTreeSet<u64> = (0..4u64)
        .flat_map(|y| (0..4u64).map(move |x| (y, x)))
        .filter(|&(y, x)| y == 3 || x == 3)
        .flat_map(|(y, x)| 2 * (4 * y + x)..2 * (4 * y + x) + 2)
        .collect();
    let dead = classes(p)
        .iter()
        .find(|c| usizes(&c["positions"]) == [2])
        .unwrap();
    assert_eq!(class_bytes(dead), unread);
    let tail = longest(dead);
    assert!(tail["to"].is_null(), "{tail}");
    assert_eq!((u(&tail["from"]), u(&tail["idle_ops"])), (2, 1));
    assert_eq!(u(&p["byte_level"]["bytes_idle_longer"]), 14);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn skip_connections_of_mobilenet_v2_are_cold_between_their_readers() {
    let report = cold_json("zoo:mobilenet_v2_0.35_96_int8", &[]);
    assert_levels_agree(&report);
    // Each residual ADD reads its block's input again after the expand,
    // depthwise and project convolutions: 2 idle operators.
    let skips: Vec<&Value> = report["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| u(&t["graph"]["idle_ops"]) > 0)
        .collect();
    assert_eq!(skips.len(), 10, "one per residual block");
    assert!(skips.iter().all(|t| u(&t["graph"]["idle_ops"]) == 2));
}

#[test]
fn an_imported_model_agrees_at_both_levels_and_draws_its_picture() {
    let dir = scratch_dir("imported");
    let png = dir.join("magic_wand.png");
    let model = tfmicro_model("magic_wand");
    let report = cold_json(path_str(&model), &["--plot", path_str(&png)]);
    assert_levels_agree(&report);
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[1..4], b"PNG");
    assert!(bytes.len() > 5_000);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn csv_has_one_row_per_tensor_class_and_gap() {
    let dir = scratch_dir("csv");
    let path = export(&strided_skip(), &dir);
    let csv = dir.join("cold.csv");
    let out = memtrace([
        "cold",
        path_str(&path),
        "--format",
        "csv",
        "--out",
        path_str(&csv),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(out.stdout.is_empty());
    let text = std::fs::read_to_string(&csv).unwrap();
    let report = cold_json(path_str(&path), &[]);
    let rows: usize = report["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            classes(t)
                .iter()
                .map(|c| c["gaps"].as_array().unwrap().len().max(1))
                .sum::<usize>()
        })
        .sum();
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    for column in [
        "name",
        "class_positions",
        "gap_from",
        "gap_idle_ops",
        "idle_instructions_min",
    ] {
        assert!(header.split(',').any(|h| h == column), "{header}");
    }
    assert_eq!(lines.count(), rows);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn bad_inputs_are_clean_errors_before_any_run() {
    let dir = scratch_dir("bad");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["zoo:no_such_model".into()], "unknown zoo model"),
        (
            vec![path_str(&dir.join("missing.tflite")).into()],
            "missing.tflite",
        ),
        (
            vec![
                "zoo:sakr_cifar10".into(),
                "--plot".into(),
                path_str(&dir.join("p.txt")).into(),
            ],
            "must end in .png or .svg",
        ),
        (
            vec![
                "zoo:sakr_cifar10".into(),
                "--out".into(),
                "/nonexistent-dir/c.txt".into(),
            ],
            "/nonexistent-dir",
        ),
    ];
    for (args, message) in cases {
        let mut all = vec!["cold".to_string()];
        all.extend(args);
        let out = memtrace(&all);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{all:?}: {err}");
        assert!(
            err.starts_with("error:") && err.contains(message),
            "{all:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
    assert!(!dir.join("p.txt").exists());
    // A model TFLM refuses fails in TFLM's words, and leaves no report.
    let hybrid = tfmicro_model("person_detection_grayscale");
    let report = dir.join("r.json");
    let out = memtrace(["cold", path_str(&hybrid), "--out", path_str(&report)]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("Hybrid models are not supported on TFLite Micro"),
        "{}",
        stderr(&out)
    );
    assert!(!report.exists());
    let _ = std::fs::remove_dir_all(dir);
}

/// The byte-level run is the model's run on TFLM: each window takes the
/// instructions `memtrace run MODEL.tflite` counts for that layer, and
/// every tensor sits where `memtrace verify`'s reference run (TFLM's own
/// plan, another run) found it, with the head both report.
#[test]
fn the_traced_run_is_the_one_run_and_verify_report() {
    let dir = scratch_dir("independent");
    let path = export(&strided_skip(), &dir);
    let model = path_str(&path);
    let cold = cold_json(model, &[]);
    let out = memtrace(["run", model, "--format", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let run = json(&out);
    let windows: Vec<(String, u64)> = cold["windows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["name"].as_str().unwrap().to_string(),
                u(&w["end"]) - u(&w["start"]),
            )
        })
        .collect();
    let layers: Vec<(String, u64)> = run["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["name"].as_str().unwrap().to_string(),
                u(&l["instructions"]),
            )
        })
        .collect();
    assert_eq!(windows, layers);
    assert_eq!(
        u(&cold["instructions"]),
        layers.iter().map(|l| l.1).sum::<u64>()
    );
    assert_eq!(u(&cold["arena_bytes"]), u(&run["tflm"]["head_bytes"]));
    let out = memtrace(["verify", model, "--no-oracle", "--format", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let verify = json(&out);
    let tensors = cold["tensors"].as_array().unwrap();
    assert_eq!(tensors.len(), 6, "x and the five convolutions' outputs");
    for t in tensors {
        let name = t["name"].as_str().unwrap();
        let placed = verify["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("verify places no `{name}`"));
        assert_eq!(t["offset"], placed["reference_offset"], "{name}");
        assert!(
            u(&t["offset"]) + u(&t["bytes"]) <= u(&cold["arena_bytes"]),
            "{name}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// `--runner` names the TFLM runner (`--executor`, its old name, still
/// works but is not offered); anything else is refused before the run.
#[test]
fn the_runner_is_named_by_runner_and_the_old_option_still_works() {
    let dir = scratch_dir("runner");
    let path = export(&pools(), &dir);
    let runner = common::guest("cortex-m4", "tflm-runner");
    let by_new = cold_json(path_str(&path), &["--runner", path_str(&runner)]);
    let by_old = cold_json(path_str(&path), &["--executor", path_str(&runner)]);
    assert_eq!(by_new["tensors"], by_old["tensors"]);
    assert_eq!(by_new["windows"], by_old["windows"]);
    let help = common::stdout(&memtrace(["cold", "--help"]));
    assert!(help.contains("--runner <ELF>"), "{help}");
    assert!(!help.contains("--executor"), "{help}");
    // The kernel suite is no runner.
    let out = memtrace([
        "cold",
        path_str(&path),
        "--runner",
        path_str(&common::suite("cortex-m4")),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("is no TFLM runner"),
        "{}",
        stderr(&out)
    );
    let _ = std::fs::remove_dir_all(dir);
}
