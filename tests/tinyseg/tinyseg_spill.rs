//! TinySeg in memtrace (`--planner tinyseg`): the spill planner transforms
//! the graph — spills a tensor through its cold range, partially when a
//! target needs less, fuses the fetch into the following concatenation and
//! convolution — and real TFLM
//! runs the transformed model, its storage operators registered as custom
//! operators of the runner (`MEMTRACE_SPILL`, …), its spilled tensors in the
//! runner's storage region outside the arena. Every run is checked against
//! the untransformed model's run under TFLM's own plan byte for byte (and
//! that one against PyPI `tflite-micro`), by the arena's shadow map, and by
//! a shadow map of the storage region; the plan's arena against the head
//! TFLM allocated. TinySeg's int16 accumulator scratch is not planned:
//! TFLM's TRANSPOSE_CONV keeps its int32 accumulator, and a warning says so.

use crate::common;

use std::path::PathBuf;

use common::{memtrace, stderr};
use memtrace_model::export::{materialize, to_tflite};
use memtrace_model::planner::validate::validate;
use memtrace_model::planner::{Overlaps, PlannerKind};
use memtrace_model::tinyseg::compress::compress;
use memtrace_model::tinyseg::{optimize, NarrowScratch, TinysegOptions};
use memtrace_model::zoo::GraphBuilder;
use memtrace_model::{Activation, Dtype, Model, OpKind};
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

/// `memtrace verify MODEL ARGS --format json` on real TFLM → (exit code,
/// report).
fn verify(model: &str, args: &[&str]) -> (i32, Value) {
    let mut all = vec!["verify", model, "--format", "json"];
    all.extend(args);
    let out = memtrace(&all);
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("memtrace {all:?}: no JSON ({e}): {}", stderr(&out)));
    (out.status.code().unwrap_or(-1), report)
}

fn verify_tinyseg(model: &Model, args: &[&str]) -> (i32, Value) {
    let path = tflite_file(model);
    let mut all = vec!["--planner", "tinyseg"];
    all.extend(args);
    verify(path.to_str().unwrap(), &all)
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Asserts the verified run is clean: bit-exact outputs, no clobber in the
/// arena or in storage, exit code 0, TFLM's head the arena the plan said
/// and the untransformed model's outputs equal to PyPI `tflite-micro`'s.
fn assert_clean(code: i32, r: &Value) {
    assert_eq!(r["clobbers"], serde_json::json!([]), "{}", r["clobbers"]);
    assert_eq!(r["tinyseg"]["storage_clobbers"], serde_json::json!([]));
    assert_eq!(
        r["bit_exact"], true,
        "{} bytes differ",
        r["mismatched_bytes"]
    );
    assert_eq!(code, 0);
    assert_eq!(r["runtime"], "tflm");
    assert_eq!(
        r["plan"]["planned_bytes"], r["plan"]["head_bytes"],
        "{}",
        r["plan"]
    );
    if cfg!(not(no_oracle)) {
        assert_eq!(r["oracle"]["bit_exact"], true, "{}", r["oracle"]);
    }
}

/// The arena of the plan under test and of TFLM's own plan (TFLM's heads).
fn arenas(r: &Value) -> (u64, u64) {
    (
        u(&r["plan"]["head_bytes"]),
        u(&r["reference"]["head_bytes"]),
    )
}

/// A long skip connection around wider layers: `a` (32×32×8) waits while
/// three 32×32×16 convolutions run, then an ADD with the narrowed result.
fn skip_add() -> Model {
    let mut g = GraphBuilder::new("skip_add", Dtype::Int8);
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

/// The U-Net pattern the paper's fused fetching is for: the skip `s` waits
/// while `a`, `b` and `x` run, then CONCATENATION [s, x] → `y` and a 1×1
/// conv `y` → `z`. Sizes: |s| = 1024, |x| = 2048 (t1), |y| = 3072 (t2),
/// |z| = 2048 (t3) bytes.
fn concat_conv() -> Model {
    let mut g = GraphBuilder::new("concat_conv", Dtype::Int8);
    let input = g.input("input", &[1, 16, 16, 1]);
    let s = g.conv2d("s", input, 4, 3, 1, Activation::Relu);
    let a = g.conv2d("a", s, 4, 3, 1, Activation::Relu);
    let b = g.conv2d("b", a, 4, 3, 1, Activation::Relu);
    let x = g.conv2d("x", b, 8, 3, 1, Activation::Relu);
    let y = g.concat_channels("y", &[s, x]);
    let z = g.conv2d("z", y, 8, 1, 1, Activation::None);
    g.finish(&[z])
}

/// Max over steps of the bytes live at that step (each tensor from its
/// producer, or step 0 for a graph input, to its last reader, or the last
/// step for a graph output; sizes rounded up to 16), computed here from the
/// model alone.
fn live_peak(model: &Model) -> u64 {
    let n = model.ops.len();
    let mut span: Vec<Option<(usize, usize)>> = vec![None; model.tensors.len()];
    let mut touch = |t: usize, s: usize| {
        let e = span[t].get_or_insert((s, s));
        e.0 = e.0.min(s);
        e.1 = e.1.max(s);
    };
    for &t in &model.inputs {
        touch(t, 0);
    }
    for (s, op) in model.ops.iter().enumerate() {
        for &t in op.inputs.iter().chain(&op.outputs).chain(&op.scratch) {
            touch(t, s);
        }
    }
    for &t in &model.outputs {
        touch(t, n - 1);
    }
    (0..n)
        .map(|s| {
            span.iter()
                .enumerate()
                .filter(|(t, sp)| {
                    let t = &model.tensors[*t];
                    !t.is_constant && !t.in_storage && sp.is_some_and(|(f, l)| f <= s && s <= l)
                })
                .map(|(t, _)| model.tensors[t].bytes.div_ceil(16) * 16)
                .sum()
        })
        .max()
        .unwrap_or(0)
}

#[test]
fn every_step_keeps_the_model_valid_and_its_peak_is_checked_independently() {
    let tiny = memtrace_model::zoo::build("tiny_unet_80x120_int8")
        .unwrap()
        .with_reference_scratch();
    let hourglass = memtrace_model::zoo::build("hourglass_64x64_int8")
        .unwrap()
        .with_reference_scratch();
    for model in [skip_add(), concat_conv(), tiny, hourglass] {
        let model = materialize(&model, 1);
        for base in [PlannerKind::TflmGreedy, PlannerKind::DmoHeap] {
            for narrow in [NarrowScratch::Never, NarrowScratch::Always] {
                let opts = TinysegOptions {
                    base,
                    narrow_scratch: narrow,
                    ..TinysegOptions::default()
                };
                let o = optimize(&model, &Overlaps::none(&model), &opts).unwrap();
                let what = format!("{} on {base} ({narrow:?})", model.name);
                assert!(o.steps.len() >= 2, "{what}: no step helped");
                assert_eq!(o.steps.len(), o.history.len());
                for (step, (graph, plan)) in o.steps.iter().zip(&o.history) {
                    let m = &graph.model;
                    m.validate().unwrap();
                    m.check_shapes().unwrap();
                    validate(m, plan, &Overlaps::none(m))
                        .unwrap_or_else(|v| panic!("{what}, {}: {v}", step.action));
                    assert_eq!(plan.peak_bytes, Some(step.peak_bytes));
                    // No overlaps: the bound is the live-bytes maximum, and
                    // no placement beats it.
                    assert_eq!(
                        live_peak(m),
                        step.lower_bound_bytes,
                        "{what}, {}",
                        step.action
                    );
                    assert!(step.peak_bytes >= step.lower_bound_bytes);
                }
                let last = o.steps.last().unwrap().peak_bytes;
                assert!(last < o.steps[0].peak_bytes, "{what}");
            }
        }
    }
}

#[test]
fn fused_fetching_lowers_the_peak_by_the_papers_formula() {
    // Section 4.2.2: before fusion max{|t1|+|t2|, |t2|+|t3|}, after |t1|+|t3|.
    let (s, t1, t2, t3) = (1024u64, 2048u64, 3072u64, 2048u64);
    let o = optimize(
        &concat_conv(),
        &Overlaps::none(&concat_conv()),
        &TinysegOptions::default(),
    )
    .unwrap();
    let actions: Vec<&str> = o.steps.iter().map(|s| s.action.name()).collect();
    assert_eq!(
        actions,
        ["original", "spill", "fetch+concat", "fetch+conv2d"]
    );
    let peaks: Vec<u64> = o.steps.iter().map(|s| s.peak_bytes).collect();
    // Unfused, the concatenation step holds the fetched s, x and y.
    assert_eq!(peaks[0], s + t1 + t2);
    assert_eq!(peaks[1], s + t1 + t2);
    // Fetch+concat: the fetched copy is gone; t1+t2 and t2+t3 remain.
    assert_eq!(peaks[2], (t1 + t2).max(t2 + t3));
    // Fetch+conv2d: the interim t2 is never materialised.
    assert_eq!(peaks[3], t1 + t3);
    assert_eq!(peaks[2] - peaks[3], (t1 + t2).max(t2 + t3) - (t1 + t3));
    assert_eq!(o.steps[1].tensor.as_deref(), Some("s"));
    assert_eq!(o.steps[1].spilled_bytes, s);
    let kinds: Vec<OpKind> = o.graph.model.ops.iter().map(|op| op.kind).collect();
    assert!(kinds.contains(&OpKind::Spill) && kinds.contains(&OpKind::FetchConv2d));
    assert!(!kinds.contains(&OpKind::Concatenation) && !kinds.contains(&OpKind::Fetch));
}

#[test]
fn fetch_conv2d_runs_bit_exact_with_the_reference_conv_it_replaces() {
    for target in ["cortex-m4", "x86-64"] {
        let (code, r) = verify_tinyseg(&concat_conv(), &["--target", target]);
        assert_clean(code, &r);
        let t = &r["tinyseg"];
        let actions: Vec<&str> = t["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["action"].as_str().unwrap())
            .collect();
        assert_eq!(actions.last(), Some(&"fetch+conv2d"), "{target}");
        // The arena under test is the last step's peak, the reference the first's.
        assert_eq!(arenas(&r), (2048 + 2048, 1024 + 2048 + 3072));
        // The fused convolution ran as the runner's custom operator.
        assert_eq!(r["plan"]["planner"], "tinyseg+tflm-greedy");
        assert_eq!(u(&t["spilled_bytes"]), 1024);
        assert_eq!(u(&t["storage_bytes"]), 1024);
        assert!(u(&t["storage_op_instructions"]) > 0);
    }
}

#[test]
fn a_spilled_skip_connection_runs_bit_exact_and_its_stored_bytes_compress_as_measured() {
    let (code, r) = verify_tinyseg(&skip_add(), &[]);
    assert_clean(code, &r);
    let t = &r["tinyseg"];
    let step = &t["steps"][1];
    assert_eq!(step["action"], "spill");
    assert_eq!(step["tensor"], "a");
    assert_eq!(u(&step["spilled_bytes"]), 32 * 32 * 8);
    assert_eq!(u(&t["storage_bytes"]), 32 * 32 * 8);
    let (plan, reference) = arenas(&r);
    assert!(plan < reference);
    // Spilling costs instructions: the storage operators' own, at least.
    assert!(u(&t["storage_op_instructions"]) > 0);
    assert!(t["extra_instructions"].as_i64().unwrap() >= u(&t["storage_op_instructions"]) as i64);

    // Second method for the compressed size: the same `a`, as the output of
    // a model cut after it (same seeded weights and input), read back from
    // the arena instead of storage.
    let mut g = GraphBuilder::new("skip_add_cut", Dtype::Int8);
    let x = g.input("input", &[1, 32, 32, 3]);
    let a = g.conv2d("a", x, 8, 3, 1, Activation::Relu);
    let cut = g.finish(&[a]);
    let (code, c) = verify(tflite_file(&cut).to_str().unwrap(), &[]);
    assert_eq!(code, 0);
    let hex = c["output_hex"].as_str().unwrap();
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    assert_eq!(bytes.len(), 32 * 32 * 8);
    let packed = compress(&bytes, 1);
    assert_eq!(packed.decompress(), bytes);
    assert_eq!(u(&step["compressed_bytes"]), packed.bytes());
    assert_eq!(u(&t["compressed_bytes"]), packed.bytes());
}

#[test]
fn a_target_peak_spills_only_the_rows_it_needs() {
    // Unspilled the greedy peak is 40960 B; 36864 needs 4096 B of `a`'s
    // 8192: 16 of its 32 rows of 32×8 bytes.
    let (code, r) = verify_tinyseg(&skip_add(), &["--target-bytes", "36864"]);
    assert_clean(code, &r);
    let t = &r["tinyseg"];
    let (plan, reference) = arenas(&r);
    assert_eq!(reference, 40960);
    let step = &t["steps"][1];
    assert_eq!(step["action"], "partial spill");
    assert_eq!(u(&step["spilled_bytes"]), 16 * 32 * 8);
    assert_eq!(u(&t["storage_bytes"]), 16 * 32 * 8);
    assert!(plan <= 36864);
    assert_eq!(t["steps"].as_array().unwrap().len(), 2);
    // The kept half has its own arena tensor; the spilled half none: it is
    // no TFLite tensor at all, only a slot of the storage region.
    let placed: Vec<&str> = r["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["tflm_offset"].is_u64())
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(placed.contains(&"a/kept") && !placed.contains(&"a/spilled"));
}

/// A 2×2 stride-2 transpose convolution of `channels` input channels into
/// 4, then a 1×1 conv.
fn upsampler(channels: u32) -> Model {
    let mut g = GraphBuilder::new(format!("upsampler_{channels}"), Dtype::Int8);
    let x = g.input("input", &[1, 8, 8, channels]);
    let up = g.transpose_conv("up", x, 4, 2, 2);
    let out = g.conv2d("head", up, 2, 1, 1, Activation::None);
    g.finish(&[out])
}

/// No step of the report narrows a scratch to int16, and a warning names
/// `--scratch-int16 MODE` and TFLM's int32 accumulator.
fn assert_no_scratch_narrowed(r: &serde_json::Value, mode: &str) {
    assert!(r["tinyseg"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["action"] != "scratch int16"));
    let warnings = r["warnings"].to_string();
    assert!(
        warnings.contains(&format!("--scratch-int16 {mode}"))
            && warnings.contains("int32 accumulator"),
        "{warnings}"
    );
}

#[test]
fn on_tflm_no_scratch_is_narrowed_and_a_warning_says_why() {
    // The same one-channel upsampler: TFLM's TRANSPOSE_CONV requests its
    // int32 accumulator itself, so the plan keeps it (no step narrows it),
    // says so, and the arena TFLM allocates is the plan's.
    let (code, r) = verify_tinyseg(&upsampler(1), &[]);
    assert_clean(code, &r);
    assert_no_scratch_narrowed(&r, "exact");
    // Nothing changed: the plan is TFLM's own, whose head holds the int32
    // accumulator TFLM asked for (16×16×4 words).
    let (plan, reference) = arenas(&r);
    assert_eq!(plan, reference);
    assert!(reference >= 16 * 16 * 4 * 4, "{reference}");
    // The warning names only what TinySeg would have narrowed: with 32
    // channels of seeded full-range weights no sum is proven to fit 16
    // bits, so `exact` (the default) would narrow nothing and says nothing;
    // the paper's `always` would, and is refused the same way. Either way
    // TFLM runs its int32 accumulator and the outputs stay exact.
    let (code, r) = verify_tinyseg(&upsampler(32), &[]);
    assert_clean(code, &r);
    assert_eq!(r["warnings"], serde_json::json!([]), "{}", r["warnings"]);
    let (code, r) = verify_tinyseg(&upsampler(32), &["--scratch-int16", "always"]);
    assert_clean(code, &r);
    assert_no_scratch_narrowed(&r, "always");
}

#[test]
fn plan_prints_the_steps_and_refuses_what_a_transformed_model_cannot_do() {
    let out = memtrace([
        "plan",
        "zoo:tiny_unet_80x120_int8",
        "--planner",
        "tinyseg",
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["base"], "tflm-greedy");
    assert_eq!(r["steps"][0]["action"], "original");
    assert_eq!(u(&r["steps"][0]["peak_bytes"]), 307_200);
    assert_eq!(r["steps"][1]["tensor"], "inc/conv2");
    assert_eq!(u(&r["plan"]["peak_bytes"].clone()), 230_400);
    assert!(r["ops"]
        .as_array()
        .unwrap()
        .iter()
        .any(|o| o.as_str().unwrap().starts_with("SPILL ")));
    // The table names every step.
    let out = memtrace(["plan", "zoo:tiny_unet_80x120_int8", "--planner", "tinyseg"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("spill") && text.contains("inc/conv2"),
        "{text}"
    );
    // A base planner that is TinySeg itself.
    let out = memtrace([
        "plan",
        "zoo:tiny_unet_80x120_int8",
        "--planner",
        "tinyseg",
        "--base",
        "tinyseg",
    ]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("another planner"), "{}", stderr(&out));
}

#[test]
fn tiny_unet_spills_its_first_skip_connection_and_runs_bit_exact() {
    // The paper's model and victim ("tensor 3"): the 80×120×8 output of the
    // first DoubleConv, idle from down1/pool to up3/concat.
    let (code, r) = verify("zoo:tiny_unet_80x120_int8", &["--planner", "tinyseg"]);
    assert_clean(code, &r);
    let t = &r["tinyseg"];
    assert_eq!(t["steps"][1]["tensor"], "inc/conv2");
    assert_eq!(u(&t["spilled_bytes"]), 80 * 120 * 8);
    // The spilled 76,800 B leave the peak step (up3/up) of the greedy plan:
    // x1 + up3's input + its output + its int32 accumulator, less x1.
    let peak = 76_800 + 38_400 + 38_400 + 153_600;
    assert_eq!(arenas(&r), (peak - 80 * 120 * 8, peak));
    assert!(u(&t["compressed_bytes"]) < u(&t["spilled_bytes"]));
    // TFLM's persistent tail comes on top of the head a plan places.
    assert!(u(&r["plan"]["tail_bytes"]) > 0);
    assert_eq!(
        u(&r["plan"]["arena_used_bytes"]),
        u(&r["plan"]["head_bytes"]) + u(&r["plan"]["tail_bytes"])
    );

    // On DMO with the O_s traced on TFLM: 307,200 → 192,000 B, the spill
    // taking x1 out of the 268,800 B DMO peak, less the bytes DMO already
    // overlapped there.
    let (code, r) = verify(
        "zoo:tiny_unet_80x120_int8",
        &["--planner", "tinyseg", "--base", "dmo-heap"],
    );
    assert_clean(code, &r);
    let steps = r["tinyseg"]["steps"].as_array().unwrap();
    assert_eq!(u(&steps[0]["peak_bytes"]), 268_800);
    assert_eq!(steps[1]["tensor"], "inc/conv2");
    assert_eq!(arenas(&r), (192_000, peak));
    assert_eq!(u(&steps[1]["peak_bytes"]), 192_000);
}

#[test]
#[cfg_attr(no_cmsis, ignore = "CMSIS-NN guests not built: set CMSIS_NN_DIR")]
fn the_storage_operators_run_the_same_in_the_cmsis_nn_runner() {
    let (code, r) = verify_tinyseg(&concat_conv(), &["--kernels", "cmsis-nn"]);
    assert_clean(code, &r);
    let steps = r["tinyseg"]["steps"].as_array().unwrap();
    assert_eq!(steps.last().unwrap()["action"], "fetch+conv2d");
    // Tiny U-Net on CMSIS-NN (its own, smaller TRANSPOSE_CONV scratch):
    // spill, fetch+concat and fetch+conv2d, 230,400 → 153,888 B.
    let (code, r) = verify(
        "zoo:tiny_unet_80x120_int8",
        &["--planner", "tinyseg", "--kernels", "cmsis-nn"],
    );
    assert_clean(code, &r);
    let actions: Vec<&str> = r["tinyseg"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        ["original", "spill", "fetch+concat", "fetch+conv2d"]
    );
    assert_eq!(arenas(&r), (153_888, 230_400));
}

#[test]
#[cfg_attr(
    no_oracle,
    ignore = "MEMTRACE_TFLM_PYTHON not set: no tflite-micro oracle"
)]
fn the_emitted_tinyseg_model_runs_on_the_runner_and_plain_tflite_micro_refuses_it() {
    let source = tflite_file(&concat_conv());
    let out_path = source.with_file_name("concat_conv-tinyseg.tflite");
    let out = memtrace([
        "verify",
        source.to_str().unwrap(),
        "--planner",
        "tinyseg",
        "--emit-offline",
        out_path.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    // `run` on the runner: the storage operators are layers, the slot a
    // buffer of each, outside the arena.
    let run = common::run_json(&out_path, &[]);
    let ops: Vec<&str> = run["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["op"].as_str().unwrap())
        .collect();
    assert!(ops.contains(&"MEMTRACE_SPILL"), "{ops:?}");
    assert!(ops.contains(&"MEMTRACE_FETCH_CONV_2D"), "{ops:?}");
    let spill = run["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["op"] == "MEMTRACE_SPILL")
        .unwrap();
    let slot = common::buffer(spill, "storage@0");
    assert_eq!(
        (slot["role"].as_str(), u(&slot["size"])),
        (Some("output"), 1024)
    );
    // `verify` of the emitted file runs its embedded plan clean.
    let (code, r) = verify(out_path.to_str().unwrap(), &["--no-oracle"]);
    assert_eq!(code, 0, "{}", r["clobbers"]);
    assert_eq!(r["plan"]["planner"], "embedded");
    assert_eq!(u(&r["plan"]["head_bytes"]), 2048 + 2048);
    // PyPI tflite-micro has no MEMTRACE_* operator: the custom operators
    // are real custom operators, not builtins in disguise.
    let python = std::env::var("MEMTRACE_TFLM_PYTHON").unwrap();
    let refused = std::process::Command::new(python)
        .args([
            "-c",
            "import sys\nfrom tflite_micro.python.tflite_micro import runtime\n\
             runtime.Interpreter.from_file(sys.argv[1])",
            out_path.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("op code CUSTOM"), "{said}");
}
