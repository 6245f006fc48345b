//! Scratch from the shapes: every operator's scratch need, derived from its
//! shapes and parameters with formulas written from the kernels' use of
//! their buffers, against what the operator asked TFLM for. A shortfall
//! fails `run --strict` and `verify` whatever TFLM's layout hid.
//!
//! The derived needs are cross-checked against an independent method: the
//! scratch high-water mark the red-zoned run traces for each kernel.

use crate::common;

use common::{json_run, shared_model, u};
use memtrace_model::export::{materialize, to_tflite};
use memtrace_model::zoo::GraphBuilder;
use memtrace_model::Dtype;
use serde_json::Value;

/// The traced scratch of each operator of a run report: operator index →
/// (declared, high-water) of its scratch buffers, summed.
fn traced_scratch(report: &Value) -> std::collections::BTreeMap<u64, (u64, u64)> {
    let mut used = std::collections::BTreeMap::new();
    for layer in report["layers"].as_array().expect("layers") {
        let Some(op) = layer["name"]
            .as_str()
            .and_then(|n| n.split(':').next())
            .and_then(|k| k.parse::<u64>().ok())
        else {
            continue;
        };
        for s in layer["contract"]["scratch"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let e = used.entry(op).or_insert((0, 0));
            e.0 += u(&s["declared_bytes"]);
            e.1 += u(&s["high_water_bytes"]);
        }
    }
    used
}

/// On DS-CNN and ResNet-8 with CMSIS-NN on the Cortex-M4, every operator's
/// need is derived, at most what it asked for, and exactly the high-water
/// mark the red-zoned run sees its kernel write; an operator derived to
/// need none declares none and keeps its contract. ResNet-8's first
/// convolution (3×3×3, 27 columns) asks for 112 B, the library's padding
/// of each im2col column to 28, and writes 110 B of it.
#[test]
#[cfg_attr(no_cmsis, ignore = "CMSIS-NN guests not built: set CMSIS_NN_DIR")]
fn every_operator_of_ds_cnn_and_resnet8_needs_what_its_kernel_is_seen_to_use() {
    for model in [
        "mlperf_tiny_kws_ds_cnn_int8.tflite",
        "mlperf_tiny_ic_resnet8_int8.tflite",
    ] {
        let path = shared_model(model);
        let (code, r) = json_run(&["run", &path, "--kernels", "cmsis-nn", "--strict"]);
        assert_eq!(code, 0, "{model}: {r}");
        let sizing = &r["tflm"]["scratch_sizing"];
        assert!(
            sizing["modelled"]
                .as_str()
                .unwrap()
                .contains("CMSIS-NN v7.0.0"),
            "{sizing}"
        );
        let traced = traced_scratch(&r);
        let ops = sizing["operators"].as_array().expect("operators");
        assert_eq!(ops.len() as u64, u(&r["tflm"]["operators"]), "{model}");
        let mut with_scratch = 0;
        for o in ops {
            let op = u(&o["op"]);
            let needed = o["needed_bytes"]
                .as_u64()
                .unwrap_or_else(|| panic!("{model}: operator not checked: {o}"));
            let requested = u(&o["requested_bytes"]);
            assert!(needed <= requested, "{model}: {o}");
            assert_eq!(u(&o["short_bytes"]), 0, "{model}: {o}");
            match traced.get(&op) {
                Some(&(declared, high_water)) => {
                    with_scratch += 1;
                    assert_eq!(declared, requested, "{model}: {o}");
                    assert_eq!(needed, high_water, "{model}: {o}");
                }
                None => assert_eq!(needed, 0, "{model}: {o}"),
            }
        }
        assert!(with_scratch >= 2, "{model}: {with_scratch}");
        if model.contains("resnet8") {
            assert_eq!(ops[0]["kernel"], "arm_convolve_s8");
            assert_eq!(traced[&0], (112, 110));
        }
    }
}

/// A one-operator model: a transpose convolution of a 1×3×3×2 int8 input
/// with a 2×1 filter at stride 1×3 (VALID) to 2 channels: output 1×4×7×2.
fn transpose_conv_1x3(dir: &std::path::Path) -> String {
    let mut g = GraphBuilder::new("tconv_1x3", Dtype::Int8);
    let x = g.input("input", &[1, 3, 3, 2]);
    let y = g.transpose_conv("up", x, 2, 1, 1);
    let mut m = g.finish(&[y]);
    // The builder's filters and strides are square: make them 2×1 and 1×3.
    m.ops[0].options.stride = (1, 3);
    let filter = m.ops[0].inputs[1];
    m.tensors[filter].shape = vec![2, 2, 1, 2];
    m.tensors[filter].bytes = 8;
    m.tensors[y].shape = vec![1, 4, 7, 2];
    m.tensors[y].bytes = 56;
    let model = materialize(&m, 1);
    let path = dir.join("tconv_1x3.tflite");
    std::fs::write(&path, to_tflite(&model).unwrap()).unwrap();
    path.display().to_string()
}

/// The CMSIS-NN that TFLM pins sizes `arm_transpose_conv_s8`'s rolling
/// buffer with `MAX(filter_w, stride_h)` where the kernel uses
/// `MAX(filter_w, stride_w)`: at stride 1×3 with a 1-wide filter it asks
/// for 2 rows of (2·3 + 1)·2 int32 = 112 B where the kernel uses 2 rows
/// of (2·3 + 3)·2 int32 = 144 B. `run --strict` and `verify` both fail naming the
/// operator, the kernel, the shapes and both byte counts.
#[test]
#[cfg_attr(no_cmsis, ignore = "CMSIS-NN guests not built: set CMSIS_NN_DIR")]
fn a_transpose_convolution_whose_size_function_takes_the_wrong_stride_is_short() {
    let dir = tempfile::tempdir().unwrap();
    let model = transpose_conv_1x3(dir.path());
    let (code, r) = json_run(&["run", &model, "--kernels", "cmsis-nn", "--strict"]);
    assert_eq!(code, 1, "{r}");
    let op = &r["tflm"]["scratch_sizing"]["operators"][0];
    assert_eq!(op["kernel"], "arm_transpose_conv_s8", "{op}");
    assert_eq!(u(&op["requested_bytes"]), 2 * 7 * 2 * 4, "{op}");
    assert_eq!(u(&op["needed_bytes"]), 2 * 9 * 2 * 4, "{op}");
    assert_eq!(u(&op["short_bytes"]), 32, "{op}");
    assert!(
        op["shapes"]
            .as_str()
            .unwrap()
            .contains("input=1x3x3x2,filter=2x2x1x2"),
        "{op}"
    );
    // The independent method: the red-zoned run sees the kernel write the
    // 144 B (its 112 B and 32 B past them).
    let layer = &r["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["op"] == "TRANSPOSE_CONV")
        .unwrap()["contract"];
    let reach: u64 = layer["stray_reach"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n.to_string().contains("scratch"))
        .map(|n| u(&n["bytes"]))
        .max()
        .unwrap_or(0);
    assert_eq!(112 + reach, 144, "{layer}");

    let (code, v) = json_run(&[
        "verify",
        &model,
        "--kernels",
        "cmsis-nn",
        "--no-oracle",
        "--no-cache",
    ]);
    assert_eq!(code, 1, "{v}");
    assert_eq!(v["proven"], false);
    let short = &v["scratch_sizing"]["operators"][0];
    assert_eq!(u(&short["short_bytes"]), 32, "{short}");
    let out = common::memtrace(["verify", &model, "--kernels", "cmsis-nn", "--no-oracle"]);
    let text = common::stdout(&out);
    assert!(
        text.contains("SCRATCH SHORT: operator 0:TRANSPOSE_CONV: arm_transpose_conv_s8")
            && text.contains("asked for 112 B of scratch and uses 144 B (32 B short)"),
        "{text}"
    );
}

/// The same model on TFLM's reference kernels asks for the int32
/// accumulator of every output element and uses it all: no shortfall.
#[test]
fn the_reference_transpose_convolution_asks_for_what_it_uses() {
    let dir = tempfile::tempdir().unwrap();
    let model = transpose_conv_1x3(dir.path());
    let (code, r) = json_run(&["run", &model, "--strict"]);
    assert_eq!(code, 0, "{r}");
    let op = &r["tflm"]["scratch_sizing"]["operators"][0];
    assert_eq!(u(&op["requested_bytes"]), 4 * 56, "{op}");
    assert_eq!(u(&op["needed_bytes"]), 4 * 56, "{op}");
    assert_eq!(traced_scratch(&r)[&0], (4 * 56, 4 * 56));
}

/// The firmware `main` of docs/deploy.md for `model` on `kernels`, from the
/// header `plan --emit-offline` writes, linked as an ordinary semihosted
/// program (`make -C harness-c deploy-check`): a firmware as a user builds
/// it, which `memtrace check` runs with TFLM's own planner.
fn firmware_for_check(dir: &std::path::Path, model: &str, kernels: &str) -> std::path::PathBuf {
    let emitted = dir.join(format!("{kernels}.tflite"));
    let out = common::memtrace([
        "plan",
        model,
        "--runtime",
        "tflm",
        "--kernels",
        kernels,
        "--emit-offline",
        emitted.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "plan: {}", common::stderr(&out));
    let elf = dir.join(format!("{kernels}.elf"));
    let harness = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("harness-c");
    let make = std::process::Command::new("make")
        .arg("-C")
        .arg(&harness)
        .arg("--no-print-directory")
        .arg("deploy-check")
        .arg(format!("HEADER={}", emitted.with_extension("h").display()))
        .arg(format!("DEPLOY_KERNELS={kernels}"))
        .arg(format!("DEPLOY_CHECK_ELF={}", elf.display()))
        .output()
        .expect("make runs");
    assert!(
        make.status.success(),
        "make deploy-check: {}{}",
        String::from_utf8_lossy(&make.stdout),
        String::from_utf8_lossy(&make.stderr)
    );
    elf
}

/// `memtrace check --operators` of `elf`: status, JSON report, text report.
fn check_firmware(elf: &std::path::Path) -> (i32, Value, String) {
    let elf = elf.to_str().unwrap();
    let (code, report) = json_run(&["check", elf, "--operators"]);
    // The text report goes to stderr, after the program's own output.
    let text = common::stderr(&common::memtrace(["check", elf, "--operators"]));
    (code, report, text)
}

/// `check` on a firmware as built cannot red-zone TFLM's own plan, but it
/// reads the model from the program's data and each node's scratch
/// requests from its prepare, and sizes them from the shapes: the CMSIS-NN
/// firmware of the 1×3 transpose convolution fails naming the operator,
/// kernel, shapes and both byte counts, the same figures `run` gives from
/// its own runner's requests; the reference-kernel firmware passes clean.
#[test]
#[cfg_attr(no_cmsis, ignore = "CMSIS-NN guests not built: set CMSIS_NN_DIR")]
fn check_sizes_a_firmwares_scratch_from_the_model_it_holds() {
    let dir = tempfile::tempdir().unwrap();
    let model = transpose_conv_1x3(dir.path());

    let (code, report, text) = check_firmware(&firmware_for_check(dir.path(), &model, "cmsis-nn"));
    assert_ne!(code, 0, "{report}");
    let tflm = &report["tflm"];
    assert_eq!(u(&tflm["scratch_short"]), 1, "{tflm}");
    let models = tflm["scratch_sizing"].as_array().unwrap();
    assert_eq!(models.len(), 1, "{tflm}");
    assert!(
        models[0]["model"].as_str().unwrap().starts_with("`kModel`"),
        "{}",
        models[0]
    );
    assert_eq!(models[0]["kernels"], "cmsis-nn");
    let op = &models[0]["sizing"]["operators"][0];
    let (_, run) = json_run(&["run", &model, "--kernels", "cmsis-nn"]);
    let theirs = &run["tflm"]["scratch_sizing"]["operators"][0];
    for field in [
        "kernel",
        "shapes",
        "requested_bytes",
        "needed_bytes",
        "short_bytes",
    ] {
        assert_eq!(op[field], theirs[field], "{field}: {op} vs {theirs}");
    }
    assert_eq!(u(&op["requested_bytes"]), 2 * 7 * 2 * 4, "{op}");
    assert_eq!(u(&op["short_bytes"]), 32, "{op}");
    assert!(
        text.contains("SCRATCH SHORT: operator 0:TRANSPOSE_CONV: arm_transpose_conv_s8")
            && text.contains("asked for 112 B of scratch and uses 144 B (32 B short)"),
        "{text}"
    );

    let (code, report, _) = check_firmware(&firmware_for_check(dir.path(), &model, "tflm"));
    let tflm = &report["tflm"];
    assert_eq!(code, 0, "{report}");
    assert_eq!(u(&tflm["scratch_short"]), 0, "{tflm}");
    let op = &tflm["scratch_sizing"][0]["sizing"]["operators"][0];
    assert_eq!(tflm["scratch_sizing"][0]["kernels"], "tflm");
    assert_eq!(u(&op["requested_bytes"]), 4 * 56, "{op}");
    assert_eq!(u(&op["needed_bytes"]), 4 * 56, "{op}");
}
