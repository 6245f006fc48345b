//! `plan` and `verify` take their traced O_s from one source: an
//! un-overlapped run of the whole model on the library's TFLM runner (each
//! its own run). Kernel-suite layers alone would miss QUANTIZE and
//! DEQUANTIZE (no suite layer), and the two would plan different arenas.

use crate::common;

use common::*;
use memtrace_model::export::{materialize, to_tflite};
use memtrace_model::zoo;
use serde_json::Value;

fn run_json(args: &[&str]) -> Value {
    let out = memtrace(args);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    json(&out)
}

/// An int8 convolution between float QUANTIZE and DEQUANTIZE operators, as
/// converters write models with float inputs and outputs.
fn quantize_sandwich(dir: &std::path::Path) -> std::path::PathBuf {
    use memtrace_model::{Activation, Dtype, Op, OpKind, OpOptions};
    let mut g = zoo::GraphBuilder::new("quantize_sandwich", Dtype::Int8);
    let x = g.input("input_int8", &[1, 16, 16, 8]);
    let y = g.conv2d("conv", x, 8, 3, 1, Activation::Relu);
    let mut m = g.finish(&[y]);
    let float = |m: &mut memtrace_model::Model, name: &str, like: usize| {
        let mut t = m.tensors[like].clone();
        t.name = name.into();
        t.dtype = Dtype::Float32;
        t.bytes *= 4;
        t.quantization = None;
        m.tensors.push(t);
        m.tensors.len() - 1
    };
    let input = float(&mut m, "input", x);
    let output = float(&mut m, "output", y);
    let op = |kind, inputs: Vec<usize>, outputs: Vec<usize>| Op {
        kind,
        inputs,
        outputs,
        options: OpOptions::default(),
        scratch: None,
    };
    m.ops.insert(0, op(OpKind::Quantize, vec![input], vec![x]));
    m.ops.push(op(OpKind::Dequantize, vec![y], vec![output]));
    m.inputs = vec![input];
    m.outputs = vec![output];
    let path = dir.join("quantize_sandwich.tflite");
    std::fs::write(&path, to_tflite(&materialize(&m, 1)).unwrap()).unwrap();
    path
}

#[test]
fn plan_and_verify_plan_with_the_same_traced_overlaps() {
    let dir = std::env::temp_dir().join(format!("memtrace-one-source-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sandwich = quantize_sandwich(&dir);
    let hello = tfmicro_model("hello_world");
    for model in [path_str(&sandwich), path_str(&hello), "zoo:sakr_cifar10"] {
        let v = run_json(&["verify", model, "--planner", "dmo-heap", "--format", "json"]);
        let p = run_json(&[
            "plan",
            model,
            "--overlap",
            "traced",
            "--planner",
            "dmo-heap",
            "--format",
            "json",
        ]);
        // Every operator's O_s as plan credits it and as verify measures it.
        let credited = p["op_overlap_bytes"].as_array().unwrap();
        for o in v["traced_overlaps"].as_array().unwrap() {
            let op = u(&o["index"]) as usize;
            assert_eq!(
                credited[op].as_u64(),
                Some(o["monotone_bytes"].as_u64().unwrap_or(0)),
                "{model}: operator {op} ({})",
                o["op"]
            );
        }
        // Same O_s, same planner, same options: the same arena.
        let plan = &p["plans"][0];
        assert_eq!(plan["overlap"], "traced");
        assert_eq!(v["plan"]["planner"], "dmo-heap");
        assert_eq!(v["plan"]["overlap"], "traced");
        assert_eq!(
            u(&plan["peak_bytes"]),
            u(&v["plan"]["planned_bytes"]),
            "{model}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
