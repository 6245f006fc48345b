//! Inputs a careless or hostile user gives memtrace, each answered with a
//! clear `error:` (or the documented behaviour) instead of a file memtrace
//! cannot read, a pass that checked nothing, or an emulator fault.

use crate::common;

use std::path::PathBuf;
use std::process::Command;

use common::*;
use memtrace_model::export::{materialize, to_tflite};
use memtrace_model::{tflite, zoo};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("memtrace-hard-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Asserts a clean failure: exit 1, nothing on stdout, one `error:` line
/// holding every needle.
fn assert_clean_error(out: &std::process::Output, needles: &[&str]) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(out.stdout.is_empty(), "{}", stdout(out));
    assert!(err.starts_with("error: "), "{err}");
    for n in needles {
        assert!(err.contains(n), "`{n}` not in: {err}");
    }
}

#[test]
fn zoo_export_writes_only_files_memtrace_can_load() {
    let dir = scratch("export");
    for name in zoo::names() {
        let path = dir.join(format!("{name}.tflite"));
        let out = memtrace(["zoo", "export", name, path_str(&path)]);
        if out.status.success() {
            // Whatever is written loads, as `plan` and `verify` load it.
            let bytes = std::fs::read(&path).unwrap();
            let model = tflite::import_bytes(name, &bytes)
                .unwrap_or_else(|e| panic!("{name}: wrote a file that does not load: {e}"));
            model.validate().unwrap();
        } else {
            assert_clean_error(&out, &[name, "cannot be exported"]);
            assert!(!path.exists(), "{name}: a refused export left a file");
        }
    }
    // The abstract planning graph (convolutions without filters) is refused.
    let path = dir.join("liberis.tflite");
    let out = memtrace(["zoo", "export", "liberis_fig1", path_str(&path)]);
    assert_clean_error(&out, &["liberis_fig1", "cannot be exported"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn zoo_export_to_dash_writes_the_model_to_stdout() {
    let dir = scratch("export-dash");
    let file = dir.join("m.tflite");
    let out = memtrace(["zoo", "export", "sakr_cifar10", path_str(&file)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = Command::new(env!("CARGO_BIN_EXE_memtrace"))
        .args(["zoo", "export", "sakr_cifar10", "-"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(out.stdout, std::fs::read(&file).unwrap());
    assert!(!dir.join("-").exists(), "wrote a file named `-`");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn verify_of_a_model_without_graph_outputs_is_an_error() {
    let dir = scratch("no-outputs");
    let mut model = materialize(&zoo::build("sakr_cifar10").unwrap(), 1);
    model.outputs.clear();
    let path = dir.join("no-outputs.tflite");
    std::fs::write(&path, to_tflite(&model).unwrap()).unwrap();
    let out = memtrace(["verify", path_str(&path)]);
    assert_clean_error(&out, &["no graph outputs"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn big_endian_elfs_are_unsupported_not_run() {
    let dir = scratch("big-endian");
    // A real big-endian Cortex-M4 executable from the harness's compiler.
    let src = dir.join("be.c");
    std::fs::write(
        &src,
        "int main(void) { return 0; }\nvoid _start(void) { main(); for (;;); }\n",
    )
    .unwrap();
    let be = dir.join("be.elf");
    let status = Command::new("arm-none-eabi-gcc")
        .args([
            "-mbig-endian",
            "-mthumb",
            "-mcpu=cortex-m4",
            "-nostdlib",
            "-e",
            "_start",
        ])
        .arg(&src)
        .arg("-o")
        .arg(&be)
        .status()
        .expect("arm-none-eabi-gcc runs (make deps installs it)");
    assert!(status.success());
    // And the suite with only its header's byte order flipped.
    let mut bytes = std::fs::read(suite("cortex-m4")).unwrap();
    assert_eq!(bytes[5], 1, "EI_DATA of a little-endian ELF");
    bytes[5] = 2;
    let flipped = dir.join("flipped.elf");
    std::fs::write(&flipped, &bytes).unwrap();
    for elf in [&be, &flipped] {
        let out = memtrace(["run", path_str(elf)]);
        assert_clean_error(&out, &["unsupported: big-endian"]);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Asserts a malformed-command-line error: exit 2, nothing on stdout, an
/// `error:` naming every needle.
fn assert_usage_error(out: &std::process::Output, needles: &[&str]) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(out.stdout.is_empty(), "{}", stdout(out));
    assert!(err.starts_with("error: "), "{err}");
    for n in needles {
        assert!(err.contains(n), "`{n}` not in: {err}");
    }
}

#[test]
fn options_that_would_have_no_effect_are_errors_naming_them() {
    let model = "zoo:sakr_cifar10";
    for cmd in ["plan", "verify"] {
        for (option, value) in [
            ("--base", "dmo-heap"),
            ("--target-bytes", "1000"),
            ("--scratch-int16", "always"),
        ] {
            let out = memtrace([cmd, model, option, value]);
            assert_usage_error(&out, &[option, "--planner tinyseg"]);
        }
    }
    let out = memtrace([
        "verify",
        model,
        "--overlap",
        "analytic",
        "--overlap-from",
        "tflm",
    ]);
    assert_usage_error(&out, &["--overlap-from", "--overlap analytic"]);
    let dir = scratch("no-effect");
    let plan = dir.join("p.json");
    std::fs::write(&plan, r#"{"tensors": []}"#).unwrap();
    let with = |option: &str, value: &str| {
        memtrace(["verify", model, "--plan", path_str(&plan), option, value])
    };
    assert_usage_error(&with("--overlap", "none"), &["--overlap", "--plan"]);
    // --planner picks a plan of a `plan` document; a plain placement has
    // none to pick, which only reading the file can tell.
    let out = with("--planner", "exact");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(out.stdout.is_empty(), "{}", stdout(&out));
    for n in ["--planner exact", "single placement"] {
        assert!(stderr(&out).contains(n), "`{n}` not in {}", stderr(&out));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_unreached_tinyseg_target_is_said_on_stderr_and_in_the_json() {
    let out = memtrace([
        "plan",
        "zoo:tiny_unet_80x120_int8",
        "--planner",
        "tinyseg",
        "--target-bytes",
        "0",
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let r = json(&out);
    let peak = u(&r["plan"]["peak_bytes"]);
    assert!(peak > 0);
    let warnings = r["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{r}");
    let w = warnings[0].as_str().unwrap();
    assert!(
        w.contains("--target-bytes 0 was not reached") && w.contains(&peak.to_string()),
        "{w}"
    );
    assert!(stderr(&out).contains(&format!("WARNING: {w}")));
}

#[test]
fn regress_refuses_a_baseline_of_another_architecture() {
    let dir = scratch("regress-arch");
    let base = dir.join("base.json");
    let out = memtrace([
        "table",
        path_str(&suite("cortex-m4")),
        "--out",
        path_str(&base),
        "--no-builtin",
        "--grid",
        "op=relu,input=1x4x4x2",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = memtrace(["regress", path_str(&base), path_str(&suite("x86_64"))]);
    assert_clean_error(&out, &["cortex-m4", "x86-64", "memtrace table"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn nonpositive_or_nonfinite_quantisation_scales_are_refused_at_load() {
    let dir = scratch("scales");
    let base = materialize(&zoo::build("sakr_cifar10").unwrap(), 1);
    // The first tensor with a per-tensor scale: an activation.
    let t = base
        .tensors
        .iter()
        .position(|t| t.quantization.as_ref().is_some_and(|q| q.scale.len() == 1))
        .unwrap();
    for bad in [f32::NAN, f32::INFINITY, 0.0, -0.05] {
        let mut model = base.clone();
        model.tensors[t].quantization.as_mut().unwrap().scale[0] = bad;
        let path = dir.join("bad-scale.tflite");
        std::fs::write(&path, to_tflite(&model).unwrap()).unwrap();
        for args in [&["plan"][..], &["verify"]] {
            let mut args = args.to_vec();
            args.push(path_str(&path));
            let out = memtrace(&args);
            assert_clean_error(&out, &[&model.tensors[t].name, "quantisation scale"]);
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn jobs_is_bounded_with_a_clear_error() {
    let suite = suite("cortex-m4");
    for n in ["0", "100000"] {
        let out = memtrace([
            "validate",
            path_str(&suite),
            "--op",
            "relu",
            "--configs",
            "1",
            "--jobs",
            n,
        ]);
        assert_usage_error(&out, &["--jobs", n, "from 1 to"]);
    }
}

#[test]
fn a_plan_overlapping_two_inputs_of_one_operator_fails_naming_both() {
    // Two CONCATENATION inputs placed over each other: the run under the
    // plan is caught by the shadow map, never reported as a guest
    // "protocol violation" or passed.
    let dir = scratch("two-buffers");
    let mut g = zoo::GraphBuilder::new("two_branches", memtrace_model::Dtype::Int8);
    let x = g.input("input", &[1, 8, 8, 4]);
    let a = g.conv2d("left", x, 4, 1, 1, memtrace_model::Activation::Relu);
    let b = g.conv2d("right", x, 4, 1, 1, memtrace_model::Activation::Relu);
    let y = g.concat_channels("joined", &[a, b]);
    let model = materialize(&g.finish(&[y]), 1);
    let path = dir.join("two.tflite");
    std::fs::write(&path, to_tflite(&model).unwrap()).unwrap();
    // The model verifies as planned.
    let out = memtrace(["verify", path_str(&path)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let plan = dir.join("p.json");
    std::fs::write(
        &plan,
        r#"{"tensors": [{"name": "left", "offset": 0}, {"name": "right", "offset": 0}]}"#,
    )
    .unwrap();
    let out = memtrace([
        "verify",
        path_str(&path),
        "--plan",
        path_str(&plan),
        "--format",
        "json",
    ]);
    // TFLM runs the plan as given; the shadow map catches the
    // CONCATENATION reading `left` after `right` was written over it, and
    // the verdict is FAILED (exit 1), not a guest fault.
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let r = json(&out);
    assert_eq!(r["ok"], false, "{r}");
    let clobbers = r["clobbers"].as_array().unwrap();
    assert!(
        clobbers.iter().any(|c| {
            c["op"].as_str().unwrap().ends_with("CONCATENATION:joined")
                && c["tensor"] == "left"
                && c["overwritten_by"].to_string().contains("right")
        }),
        "{}",
        r["clobbers"]
    );
    assert!(!stderr(&out).contains("protocol violation"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_configs_file_is_bounded_in_all_with_a_clear_error() {
    // Every line may expand to 100 000 configurations;
    // 7 KB of such lines made 18 M configurations and an allocation abort.
    let dir = scratch("configs");
    let line = "op=relu,input=1x{1..100}x{1..1000}x1\n";
    let file = dir.join("configs.txt");
    std::fs::write(&file, line.repeat(180)).unwrap();
    let out = memtrace([
        "validate",
        path_str(&suite("cortex-m4")),
        "--configs-file",
        path_str(&file),
    ]);
    assert_clean_error(&out, &["configs.txt", "line 3", "configurations in all"]);
    // One grid of 10^12 points is refused before anything is built.
    let out = memtrace([
        "validate",
        path_str(&suite("cortex-m4")),
        "--grid",
        "op=relu,input=1x{1..10000}x{1..10000}x{1..10000}",
    ]);
    assert_clean_error(&out, &["more than 100 000 configurations"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn make_install_links_memtrace_into_a_bin_directory_and_says_where() {
    // After `make demo` / `make install` the README's
    // commands work as typed. (`link` is install's last step, without the
    // build this test runs inside.)
    let dir = scratch("bindir");
    let bin = dir.join("bin");
    let exe = env!("CARGO_BIN_EXE_memtrace");
    let out = Command::new("make")
        .args(["-s", "link"])
        .arg(format!("BINDIR={}", bin.display()))
        .arg(format!("MEMTRACE={exe}"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("make runs");
    assert!(out.status.success(), "{}", stderr(&out));
    let said = stdout(&out);
    let link = bin.join("memtrace");
    assert!(
        said.contains(&format!("installed: {}", link.display())),
        "{said}"
    );
    assert!(said.contains("is not on your PATH"), "{said}");
    assert_eq!(std::fs::read_link(&link).unwrap(), PathBuf::from(exe));
    let run = Command::new("memtrace")
        .args(["zoo", "list"])
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .output()
        .unwrap();
    assert!(run.status.success());
    assert!(stdout(&run).contains("sakr_cifar10"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn per_channel_fully_connected_uses_every_scale_and_hybrids_are_refused() {
    // A per-channel FULLY_CONNECTED used scale[0] only,
    // and a hybrid model (float activations, int8 weights) ran to NaNs;
    // both were called OK.
    let dir = scratch("wrong-outputs");
    let base = materialize(&zoo::build("sakr_cifar10").unwrap(), 1);
    let fc = base
        .ops
        .iter()
        .position(|o| o.kind == memtrace_model::OpKind::FullyConnected)
        .unwrap();
    let w = base.ops[fc].inputs[1];
    let units = base.tensors[w].shape[0] as usize;
    let s0 = base.tensors[w].quantization.as_ref().unwrap().scale[0];
    // The same model with per-unit scales, and with every unit at scale[0].
    let digest = |scales: Vec<f32>, name: &str| {
        let mut m = base.clone();
        let q = m.tensors[w].quantization.as_mut().unwrap();
        q.scale = scales;
        q.zero_point = vec![0; units];
        let path = dir.join(name);
        std::fs::write(&path, to_tflite(&m).unwrap()).unwrap();
        let out = memtrace(["verify", path_str(&path), "--format", "json"]);
        assert_eq!(out.status.code(), Some(0), "{name}: {}", stderr(&out));
        json(&out)["output_hex"].as_str().unwrap().to_string()
    };
    let per_unit = digest(
        (0..units).map(|c| s0 * (1.0 + c as f32 / 4.0)).collect(),
        "per-unit.tflite",
    );
    let first_only = digest(vec![s0; units], "first-only.tflite");
    assert_ne!(per_unit, first_only, "the per-unit scales changed nothing");
    // Unit 0 keeps scale[0]: its output bytes agree (every 10th from 0).
    let unit0 = |hex: &str| -> Vec<String> {
        hex.as_bytes()
            .chunks(2)
            .step_by(units)
            .map(|c| String::from_utf8_lossy(c).into_owned())
            .collect()
    };
    assert_eq!(unit0(&per_unit), unit0(&first_only));

    // Hybrid: a float model whose fully connected weights are int8.
    let mut g = zoo::GraphBuilder::new("hybrid", memtrace_model::Dtype::Float32);
    let x = g.input("input", &[1, 16]);
    let y = g.fully_connected("dense", x, 4, memtrace_model::Activation::None);
    let mut hybrid = materialize(&g.finish(&[y]), 1);
    let w = hybrid.ops[0].inputs[1];
    let t = &mut hybrid.tensors[w];
    let elements: u64 = t.shape.iter().map(|&d| d as u64).product();
    t.dtype = memtrace_model::Dtype::Int8;
    t.bytes = elements;
    t.data = Some(vec![1; elements as usize]);
    t.quantization = Some(memtrace_model::Quantization {
        scale: vec![0.01],
        zero_point: vec![0],
        quantized_dimension: 0,
    });
    let path = dir.join("hybrid.tflite");
    std::fs::write(&path, to_tflite(&hybrid).unwrap()).unwrap();
    // TFLM's FULLY_CONNECTED refuses it when the runner prepares it.
    let out = memtrace(["verify", path_str(&path)]);
    assert_clean_error(
        &out,
        &["FULLY_CONNECTED", "FLOAT32", "INT8", "not supported"],
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
