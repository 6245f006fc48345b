//! TinySeg in memtrace (`--planner tinyseg`): the spill planner transforms
//! the graph, the executor runs the transformed model with its spilled
//! tensors in a storage region outside the arena, and the run is checked
//! against the untransformed model's reference run, byte for byte.

mod common;

use std::path::PathBuf;

use common::{memtrace, stderr};
use memtrace_analyzer::model::zoo::GraphBuilder;
use memtrace_analyzer::model::{Activation, DataType, Model};
use memtrace_analyzer::verify::export::{materialize, to_tflite};
use serde_json::Value;

/// `model` as a `.tflite` file (seeded weights, int8 quantisation) in a
/// fresh temporary directory.
fn tflite_file(model: &Model) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "memtrace-tinyseg-{}-{}",
        std::process::id(),
        model.name
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{}.tflite", model.name));
    std::fs::write(&path, to_tflite(&materialize(model, 1)).unwrap()).unwrap();
    path
}

/// `memtrace verify MODEL --planner tinyseg ARGS --format json`.
fn verify_tinyseg(model: &str, args: &[&str]) -> (i32, Value) {
    let mut all = vec!["verify", model, "--planner", "tinyseg", "--format", "json"];
    all.extend(args);
    let out = memtrace(&all);
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("memtrace {all:?}: no JSON ({e}): {}", stderr(&out)));
    (out.status.code().unwrap_or(-1), report)
}

/// A long skip connection around wider layers: `a` (32×32×8) waits while
/// three 32×32×16 convolutions run, then an ADD with the narrowed result.
fn skip_add() -> Model {
    let mut g = GraphBuilder::new("skip_add", DataType::Int8);
    let x = g.input("input", &[1, 32, 32, 3]);
    let a = g.conv2d("a", x, 8, 3, 1, Activation::Relu);
    let mut y = g.conv2d("b", a, 16, 3, 1, Activation::Relu);
    y = g.conv2d("c", y, 16, 3, 1, Activation::Relu);
    y = g.conv2d("d", y, 16, 3, 1, Activation::Relu);
    y = g.conv2d("e", y, 8, 1, 1, Activation::None);
    let s = g.add("sum", a, y);
    let out = g.conv2d("head", s, 1, 1, 1, Activation::None);
    g.finish(&[out])
}

#[test]
fn a_spilled_skip_connection_runs_bit_exact_with_a_clean_shadow() {
    let path = tflite_file(&skip_add());
    let (code, r) = verify_tinyseg(path.to_str().unwrap(), &[]);
    eprintln!("{}", serde_json::to_string_pretty(&r["tinyseg"]).unwrap());
    assert_eq!(code, 0);
    assert_eq!(r["bit_exact"], true);
}
