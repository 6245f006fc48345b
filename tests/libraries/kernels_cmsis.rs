//! CMSIS-NN as a kernel library: every traced layer names the library and the
//! function that made its buffer accesses, and the O_s workflows (`run`,
//! `validate`) work on `suite-cmsis.elf` unchanged, reporting where the
//! algorithmic and analytic methods — models of the TFLM reference loop nest —
//! disagree with the CMSIS-NN trace (docs/kernels.md).

use crate::common;

use std::collections::BTreeMap;

use common::*;
use memtrace_tracer::ElfImage;
use serde_json::Value;

const TARGETS: [&str; 2] = ["cortex-m4", "x86_64"];
const SWEEP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/kernels/sweep.specs");

/// `layer name -> (library, kernel)` of a run report.
fn kernels(report: &Value) -> BTreeMap<String, (String, String)> {
    report["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            let s = |k: &str| {
                l[k].as_str()
                    .unwrap_or_else(|| panic!("{k}: {l}"))
                    .to_owned()
            };
            (s("name"), (s("library"), s("kernel")))
        })
        .collect()
}

/// Every buffer access of a layer is counted for exactly one function.
fn assert_functions_account_for_every_access(report: &Value) {
    for l in report["layers"].as_array().unwrap() {
        let events: u64 = l["buffers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| u(&b["loads"]) + u(&b["stores"]) + u(&b["updates"]))
            .sum();
        let functions = l["functions"].as_array().unwrap();
        let attributed: u64 = functions.iter().map(|f| u(&f["accesses"])).sum();
        assert_eq!(attributed, events, "layer {}: {functions:?}", l["name"]);
        // The kernel is one of them, and no kernel-library function has more.
        let of = |f: &Value| (f["function"].clone(), f["library"].clone());
        let kernel = functions
            .iter()
            .find(|f| f["function"] == l["kernel"] && f["library"] == l["library"])
            .unwrap_or_else(|| panic!("the kernel is listed: {l}"));
        for f in functions {
            if f["library"] == "CMSIS-NN" || f["library"] == "TFLM reference" {
                assert!(u(&f["accesses"]) <= u(&kernel["accesses"]), "{:?}", of(f));
            }
        }
    }
}

/// Runs every built-in layer of `elf` on both access paths and checks that
/// each names `library` and the kernel `want` gives for it.
fn assert_kernels(elf: &std::path::Path, library: &str, want: &BTreeMap<&str, &str>) {
    let report = run_json(elf, &[]);
    assert_functions_account_for_every_access(&report);
    let got = kernels(&report);
    let expected: BTreeMap<String, (String, String)> = want
        .iter()
        .map(|(l, k)| (l.to_string(), (library.to_owned(), k.to_string())))
        .collect();
    assert_eq!(got, expected, "{}", elf.display());
    // Second method: the hook path resolves each access's own PC, where the
    // default MMIO path only has its block's address.
    let exact = run_json(elf, &["--exact-time"]);
    assert_eq!(exact["access"], "hooks");
    assert_eq!(kernels(&exact), got, "{} on both paths", elf.display());
    assert_functions_account_for_every_access(&exact);
    // Third: the C functions named are functions of the ELF.
    let image = ElfImage::load(elf).unwrap();
    for (_, kernel) in got.values().filter(|(l, _)| l == "CMSIS-NN") {
        let sym = image.symbol(kernel).unwrap_or_else(|| panic!("{kernel}"));
        assert!(sym.is_function && sym.size > 0, "{kernel}");
        assert_eq!(image.function_at(sym.address), Some(kernel.as_str()));
    }
    // The run table has a kernel (library) column.
    let o = memtrace(["run", path_str(elf)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let table = stdout(&o);
    assert!(table.contains("| kernel (library)"), "{table}");
    for (library, kernel) in got.values() {
        let short = kernel.rsplit("::").next().unwrap();
        assert!(table.contains(&format!("| {short} ({library})")), "{table}");
    }
}

#[test]
fn every_reference_layer_names_its_tflm_kernel() {
    let conv = "tflite::reference_integer_ops::ConvPerChannel";
    let dw = "tflite::reference_integer_ops::DepthwiseConvPerChannel";
    let want: BTreeMap<&str, &str> = [
        ("conv1", conv),
        ("dw1", dw),
        ("conv2", conv),
        ("dw2", dw),
        ("conv3", conv),
    ]
    .into();
    for target in TARGETS {
        assert_kernels(&suite(target), "TFLM reference", &want);
    }
}

#[test]
#[cfg_attr(no_cmsis, ignore = "CMSIS-NN guests not built: set CMSIS_NN_DIR")]
fn every_cmsis_nn_layer_names_the_function_that_made_its_accesses() {
    // conv1 (3x3, padding) goes through im2col and a matrix multiply, the 1x1
    // layers through arm_convolve_1x1_s8_fast, whose accesses are all made by
    // the matrix multiply it calls.
    let want: BTreeMap<&str, &str> = [
        ("conv1", "arm_nn_mat_mult_kernel_s8_s16"),
        ("dw1", "arm_depthwise_conv_3x3_s8"),
        ("conv2", "arm_nn_mat_mult_nt_t_s8"),
        ("dw2", "arm_depthwise_conv_3x3_s8"),
        ("conv3", "arm_nn_mat_mult_nt_t_s8"),
    ]
    .into();
    for target in TARGETS {
        assert_kernels(&suite_cmsis(target), "CMSIS-NN", &want);
    }
}

#[test]
#[cfg_attr(no_cmsis, ignore = "CMSIS-NN guests not built: set CMSIS_NN_DIR")]
fn run_on_cmsis_nn_flags_the_reference_models_and_says_why() {
    // conv2 is 1x1: the analytic bound of the reference loop nest (32 761 B)
    // is far above what CMSIS-NN leaves (2 B): UNSAFE, not hidden.
    let o = memtrace([
        "run",
        path_str(&suite_cmsis("cortex-m4")),
        "--layer",
        "conv2",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let layer = &json(&o)["layers"][0];
    let overlap = &layer["overlap"];
    assert_eq!(overlap["flags"], serde_json::json!(["UNSAFE", "MISMATCH"]));
    assert!(u(&overlap["analytic_bytes"]) > u(&overlap["monotone_bytes"]));
    // Expected on CMSIS-NN: one note pointing to the docs, no warning.
    let err = stderr(&o);
    assert!(!err.contains("WARNING"), "{err}");
    let notes: Vec<&str> = err.lines().filter(|l| l.starts_with("note:")).collect();
    assert_eq!(notes.len(), 1, "{err}");
    assert!(
        notes[0].contains("2 O_s cross-check(s) of 1 layer input(s)"),
        "{err}"
    );
    assert!(
        notes[0].contains("`arm_nn_mat_mult_nt_t_s8` (CMSIS-NN)"),
        "{err}"
    );
    assert!(notes[0].contains("docs/kernels.md"), "{err}");
    // --explain gives each, saying why.
    let o = memtrace([
        "run",
        path_str(&suite_cmsis("cortex-m4")),
        "--layer",
        "conv2",
        "--explain",
    ]);
    let err = stderr(&o);
    let warnings: Vec<&str> = err.lines().filter(|l| l.starts_with("WARNING")).collect();
    assert_eq!(warnings.len(), 2, "{err}");
    assert!(warnings[0].contains(
        "UNSAFE: analytic O_s 32761 B > traced monotone O_s 2 B (a plan built on the analytic value clobbers live input): the analytic bound models the TFLM reference loop nest, but this layer ran `arm_nn_mat_mult_nt_t_s8` (CMSIS-NN)"
    ), "{err}");
    assert!(warnings[1].contains(
        "MISMATCH: algorithmic O_s 32761 B != traced monotone O_s 2 B: the algorithmic method models the TFLM reference loop nest, but this layer ran `arm_nn_mat_mult_nt_t_s8` (CMSIS-NN)"
    ), "{err}");
    // --strict-os turns the flags into a failure, as for any kernel;
    // --strict gates the memory contract only, which this layer keeps.
    let run = |flag: &str| {
        memtrace([
            "run",
            path_str(&suite_cmsis("cortex-m4")),
            "--layer",
            "conv2",
            flag,
        ])
    };
    let o = run("--strict-os");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let o = run("--strict");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
#[cfg_attr(no_cmsis, ignore = "CMSIS-NN guests not built: set CMSIS_NN_DIR")]
fn a_fast_path_mismatch_on_cmsis_nn_points_to_the_exact_path() {
    // arm_max_pool_s8 loads 5-channel rows with unaligned words on
    // Cortex-M4: the fast path sees the aligned words around them and gives
    // 172 B; the exact path gives 175 B, what the reference loop-order model
    // (the algorithmic method, a second method) gives, so no MISMATCH there.
    let spec = "op=max_pool,dtype=int8,input=1x9x7x5,filter=1x2,stride=2x1,padding=same";
    let elf = suite_cmsis("cortex-m4");
    let run = |exact: bool| {
        let mut args = vec!["run", path_str(&elf), "--job", spec, "--explain"];
        if exact {
            args.push("--exact-time");
        }
        args.extend(["--format", "json"]);
        let o = memtrace(args);
        assert!(o.status.success(), "{}", stderr(&o));
        (json(&o)["layers"][0]["overlap"].clone(), stderr(&o))
    };
    let (fast, err) = run(false);
    assert!(
        u(&fast["monotone_bytes"]) < u(&fast["algorithmic_bytes"]),
        "{fast}"
    );
    assert!(
        err.contains("MISMATCH") && err.contains("`--exact-time` gives the exact value"),
        "{err}"
    );
    let (exact, err) = run(true);
    assert_eq!(
        exact["monotone_bytes"], exact["algorithmic_bytes"],
        "{exact}"
    );
    assert!(!err.contains("WARNING"), "{err}");
}

/// `validate --configs-file fixtures/kernels/sweep.specs --format json`.
fn validate(elf: &std::path::Path) -> (Option<i32>, Value, String) {
    let o = memtrace([
        "validate",
        path_str(elf),
        "--configs-file",
        SWEEP,
        "--format",
        "json",
    ]);
    (o.status.code(), json(&o), stderr(&o))
}

#[test]
#[cfg_attr(no_cmsis, ignore = "CMSIS-NN guests not built: set CMSIS_NN_DIR")]
fn validate_on_cmsis_nn_reports_every_disagreement_with_the_reference_model() {
    for target in TARGETS {
        // The reference kernels agree with their own model: exit 0.
        let (code, report, err) = validate(&suite(target));
        assert_eq!(code, Some(0), "{err}");
        let rows = report["configs"].as_array().unwrap();
        assert!(
            rows.iter().all(|r| r["library"] == "TFLM reference"),
            "{rows:?}"
        );
        assert_eq!(u(&report["summary"]["violations_on_other_kernels"]), 0);

        // CMSIS-NN: exit 1; every flag is what the numbers say, none hidden.
        let (code, report, err) = validate(&suite_cmsis(target));
        assert_eq!(code, Some(1), "{target}: {err}");
        let rows = report["configs"].as_array().unwrap();
        assert_eq!(rows.len(), rows_in_sweep());
        let mut violations = 0;
        for r in rows {
            let kernel = r["kernel"].as_str().unwrap();
            // On x86-64 (-ffreestanding) every memcpy is a call into the
            // harness's libc shim, and CMSIS-NN's max pool reads and writes
            // only through memcpy (its row copy and arm_nn_read_s8x4): those
            // layers name the function that made the accesses.
            if target == "x86_64" && r["op"] == "max_pool" && kernel == "memcpy" {
                assert_eq!(r["library"], "harness-c", "{r}");
            } else {
                assert_eq!(r["library"], "CMSIS-NN", "{r}");
                assert!(kernel.starts_with("arm_"), "{r}");
            }
            let m = u(&r["monotone_bytes"]);
            let flags: Vec<&str> = r["flags"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f.as_str().unwrap())
                .collect();
            assert_eq!(
                flags.contains(&"UNSAFE"),
                u(&r["analytic_bytes"]) > m,
                "{r}"
            );
            assert_eq!(
                flags.contains(&"MISMATCH"),
                u(&r["algorithmic_bytes"]) != m,
                "{r}"
            );
            if flags.is_empty() {
                continue;
            }
            violations += 1;
            let line = err
                .lines()
                .find(|l| l.starts_with(&format!("VIOLATION {} [", r["name"].as_str().unwrap())))
                .unwrap_or_else(|| panic!("{err}"));
            assert!(
                line.contains(&format!(
                    "the layer ran `{kernel}` ({})",
                    r["library"].as_str().unwrap()
                )) && line.contains("model the TFLM reference loop nest"),
                "{line}"
            );
            // A 1x1 conv is where the reference model is unsafe.
            if r["op"] == "conv2d" && r["spec"].as_str().unwrap().contains("x1x1x") {
                assert!(flags.contains(&"UNSAFE"), "{r}");
            }
        }
        let summary = &report["summary"];
        assert_eq!(u(&summary["violations"]), violations);
        assert_eq!(u(&summary["violations_on_other_kernels"]), violations);
        assert!(u(&summary["unsafe_analytic"]) >= 3, "the three 1x1 convs");
        assert!(
            err.contains("ran a kernel other than the TFLM reference ones"),
            "{err}"
        );

        // Second method: the same configurations traced one by one with
        // `memtrace run --job` give the same O_s and kernel.
        for r in rows {
            let l = run_job(&suite_cmsis(target), r["spec"].as_str().unwrap());
            assert_eq!(l["overlap"]["monotone_bytes"], r["monotone_bytes"], "{r}");
            assert_eq!(l["overlap"]["exact_bytes"], r["exact_bytes"], "{r}");
            assert_eq!((&l["library"], &l["kernel"]), (&r["library"], &r["kernel"]));
        }
    }
}

fn rows_in_sweep() -> usize {
    std::fs::read_to_string(SWEEP)
        .unwrap()
        .lines()
        .filter(|l| !l.split('#').next().unwrap().trim().is_empty())
        .count()
}

/// `scripts/cmsis-nn-loop-orders.py`: each kernel's loop order reduced to its
/// reads and writes (read off the TFLM and CMSIS-NN sources, nothing traced)
/// and its monotone O_s by definition. Its three columns must equal the
/// traced monotone O_s of suite.elf, and of suite-cmsis.elf on Cortex-M4
/// (DSP paths) and on x86-64 (plain C paths), layer by layer.
#[test]
#[cfg_attr(no_cmsis, ignore = "CMSIS-NN guests not built: set CMSIS_NN_DIR")]
fn loop_order_models_of_the_kernels_reproduce_every_traced_o_s() {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scripts/cmsis-nn-loop-orders.py"
    );
    let out = std::process::Command::new("python3")
        .args([script, "--specs", SWEEP])
        .output()
        .expect("python3 runs (a dependency of `make test`)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let modelled: Vec<(String, [u64; 3])> = text
        .lines()
        .skip(2)
        .map(|l| {
            let c: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            let v = |i: usize| c[i].parse::<u64>().unwrap();
            (c[0].to_owned(), [v(1), v(2), v(3)])
        })
        .collect();
    let specs: Vec<String> = std::fs::read_to_string(SWEEP)
        .unwrap()
        .lines()
        .map(|l| l.split('#').next().unwrap().trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(modelled.len(), 5 + specs.len(), "{text}");
    // Traced monotone O_s, in the script's row order.
    let traced = |elf: &std::path::Path| -> Vec<u64> {
        let mut v: Vec<u64> = run_json(elf, &[])["layers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| u(&l["overlap"]["monotone_bytes"]))
            .collect();
        v.extend(
            specs
                .iter()
                .map(|s| u(&run_job(elf, s)["overlap"]["monotone_bytes"])),
        );
        v
    };
    let columns = [
        traced(&suite("cortex-m4")),
        traced(&suite_cmsis("cortex-m4")),
        traced(&suite_cmsis("x86_64")),
    ];
    assert_eq!(
        traced(&suite("x86_64")),
        columns[0],
        "the reference is the same on both"
    );
    for (i, (name, model)) in modelled.iter().enumerate() {
        let trace = [columns[0][i], columns[1][i], columns[2][i]];
        assert_eq!(
            *model, trace,
            "{name}: model vs trace (reference, M4, x86-64)"
        );
    }
    // The models are not all alike: CMSIS-NN differs from the reference on
    // at least the 1x1 convolutions (both targets) and the average pools (M4).
    assert!(modelled
        .iter()
        .any(|(n, m)| n == "conv2" && m[1] < m[0] && m[2] < m[0]));
    assert!(modelled
        .iter()
        .any(|(n, m)| n.starts_with("avgpool") && m[1] > m[0] && m[2] == m[0]));
}
