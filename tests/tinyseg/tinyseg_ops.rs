//! TRANSPOSE_CONV, CONCATENATION and PAD — the operators of TinySeg's
//! hourglass models — as first-class layers of the kernel suite:
//!
//! * their traced O_s equals the algorithmic value (Algorithm 2 replaying the
//!   TFLM reference loop nest) and the closed forms of docs/overlap.md §6, on
//!   both targets, for every input of a concatenation — and the test checks
//!   those closed forms once more from the spec's sizes alone;
//! * CMSIS-NN's kernels differ where their loop order does (docs/kernels.md);
//! * `--job` rejects malformed layers of these ops, naming what is wrong;
//! * a model with PAD operators plans with PAD's O_s and runs clean and
//!   bit-exact under its DMO plan on real TFLM, with either library.

use crate::common;

use common::{json, memtrace, run_job, stderr, suite, u};
use serde_json::Value;

const TARGETS: [&str; 2] = ["cortex-m4", "x86_64"];

/// `memtrace validate ELF ARGS --format json`, whatever its exit status.
fn validate(elf: &std::path::Path, args: &[&str]) -> (i32, Value) {
    let mut all = vec!["validate".to_owned(), elf.display().to_string()];
    all.extend(args.iter().map(|s| s.to_string()));
    all.extend(["--format".into(), "json".into()]);
    let out = memtrace(&all);
    (out.status.code().unwrap_or(-1), json(&out))
}

/// The O_s the closed forms give, worked out here from the spec text alone:
/// every input of a concatenation and a pad's input may lie wholly inside
/// the output's end (IB); an int8 transpose conv reads all of its input
/// before it writes any output (IB); a float one zeroes its output first
/// and then reads input element 0 (0 — TFLite's padding always lets the
/// first input pixel reach the output).
fn expected(row: &Value, input_bytes: u64) -> u64 {
    let spec = row["spec"].as_str().unwrap();
    if spec.starts_with("op=transpose_conv") && spec.contains("dtype=f32") {
        0
    } else {
        input_bytes
    }
}

#[test]
fn the_traced_o_s_of_every_new_op_is_the_algorithmic_and_closed_form_one_on_both_targets() {
    for target in TARGETS {
        let (code, report) = validate(
            &suite(target),
            &[
                "--op",
                "transpose_conv,concatenation,pad",
                "--dtype",
                "all",
                "--configs",
                "40",
                "--seed",
                "20261122",
            ],
        );
        let s = &report["summary"];
        assert_eq!(
            (code, u(&s["configs"]), u(&s["violations"]), u(&s["errors"])),
            (0, 240, 0, 0),
            "{target}: {s}"
        );
        let mut second_inputs = 0;
        for row in report["configs"].as_array().unwrap() {
            let ib = u(&row["input_bytes"]);
            let traced = u(&row["monotone_bytes"]);
            assert_eq!(u(&row["exact_bytes"]), traced, "{target}: {row}");
            assert_eq!(u(&row["algorithmic_bytes"]), traced, "{target}: {row}");
            assert_eq!(u(&row["analytic_bytes"]), traced, "{target}: {row}");
            assert_eq!(traced, expected(row, ib), "{target}: {row}");
            if row["op"] == "concatenation" {
                // One O_s per input: the second input has its own.
                let i2 = &row["input2"];
                let ib2 = u(&i2["input_bytes"]);
                assert_eq!(u(&i2["monotone_bytes"]), ib2, "{target}: {row}");
                assert_eq!(u(&i2["algorithmic_bytes"]), ib2, "{target}: {row}");
                assert_eq!(u(&i2["analytic_bytes"]), ib2, "{target}: {row}");
                assert_eq!(ib + ib2, u(&row["output_bytes"]), "{row}");
                second_inputs += 1;
            } else {
                assert!(row.get("input2").is_none(), "{row}");
            }
        }
        assert_eq!(second_inputs, 80, "{target}");
    }
}

#[test]
fn int8_transpose_conv_declares_its_int32_accumulator_as_scratch() {
    // TFLM's reference TRANSPOSE_CONV accumulates in an int32 buffer of one
    // word per output element that it takes from the arena.
    let spec = "op=transpose_conv,dtype=int8,input=1x5x6x3,filter=4x3x3x3,stride=2,padding=same";
    for target in TARGETS {
        let layer = run_job(&suite(target), spec);
        let scratch = common::buffer(&layer, "scratch");
        assert_eq!(scratch["role"], "scratch");
        assert_eq!(u(&scratch["size"]), 10 * 12 * 4 * 4, "{target}");
        // Every word is zeroed, then accumulated into: updates, no idle byte.
        assert!(u(&scratch["updates"]) > 0, "{target}: {scratch}");
        let used = &layer["contract"]["scratch"][0];
        assert_eq!(u(&used["written_bytes"]), 480 * 4, "{layer}");
        let f32 = run_job(&suite(target), &spec.replace("int8", "f32"));
        assert!(f32["buffers"]
            .as_array()
            .unwrap()
            .iter()
            .all(|b| b["role"] != "scratch"));
    }
}

#[test]
#[cfg_attr(
    no_cmsis,
    ignore = "CMSIS-NN guests not built: set CMSIS_NN_DIR (docs/kernels.md)"
)]
fn cmsis_nn_keeps_or_loses_o_s_where_its_loop_order_says() {
    let cmsis = common::suite_cmsis("cortex-m4");
    // Concatenation along C: CMSIS-NN copies all of input 1, then all of
    // input 2 (arm_concatenation_s8_x once per input), so input 2's first
    // chunk is read after input 1's last one is written: its O_s drops to
    // one chunk (2 channels), while the reference keeps the whole 40 B.
    let concat = "op=concatenation,dtype=int8,input=1x4x5x3,input2=1x4x5x2,axis=3";
    let reference = run_job(&suite("cortex-m4"), concat);
    let library = common::run_job(&cmsis, concat);
    for (layer, first, second) in [(&reference, 60, 40), (&library, 60, 2)] {
        assert_eq!(u(&layer["overlap"]["monotone_bytes"]), first, "{layer}");
        assert_eq!(
            u(&layer["input2_overlap"]["monotone_bytes"]),
            second,
            "{layer}"
        );
    }
    assert_eq!(library["input2_overlap"]["flags"][1], "MISMATCH");
    // A shrinking transpose conv: CMSIS-NN writes output rows from its
    // rolling accumulator while input rows are still to come.
    let shrink =
        "op=transpose_conv,dtype=int8,input=1x4x10x8,filter=1x4x3x8,padding=valid,output=1x7x12x1";
    assert_eq!(
        u(&run_job(&suite("cortex-m4"), shrink)["overlap"]["monotone_bytes"]),
        320
    );
    let l = run_job(&cmsis, shrink);
    assert_eq!(u(&l["overlap"]["monotone_bytes"]), 152, "{l}");
    assert_eq!(l["library"], "CMSIS-NN");
    // CMSIS-NN v7.0.0's arm_transpose_conv_s8 computes wrong rows when the
    // top padding is not a multiple of the stride (fixed upstream after v7.0.0): the
    // suite's bit-exactness check against the reference kernel catches it.
    let bug = "op=transpose_conv,dtype=int8,input=1x4x4x8,filter=4x4x4x8,stride=2,padding=same";
    assert_eq!(run_job(&suite("cortex-m4"), bug)["spec"]["pad"][0], 1);
    let out = memtrace(["run", common::path_str(&cmsis), "--job", bug]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("code 5"), "{}", stderr(&out));
    // arm_transpose_conv_s8_get_buffer_size sizes a row with
    // MAX(filter_w, stride.h), the kernel fills MAX(filter_w, stride.w):
    // with stride 1x3 the kernel writes 16 B past the 56 B it was given,
    // which the memory contract sees as stray writes.
    let wide = "op=transpose_conv,dtype=int8,input=1x3x3x2,filter=2x1x1x2,stride=1x3,padding=same";
    let l = run_job(&cmsis, wide);
    assert_eq!(u(&common::buffer(&l, "scratch")["size"]), 56, "{l}");
    assert_eq!(u(&l["contract"]["stray_write"]["violations"]), 16, "{l}");
    let r = run_job(&suite("cortex-m4"), wide);
    assert_eq!(r["contract"]["ok"], true, "{r}");
    // Pad: arm_pad_s8 copies rows in order, like the reference: O_s = IB.
    let pad = "op=pad,dtype=int8,input=1x4x5x3,pad_before=0x1x2x0,pad_after=0x1x1x0";
    let l = run_job(&cmsis, pad);
    assert_eq!(u(&l["overlap"]["monotone_bytes"]), 60, "{l}");
}

#[test]
fn malformed_new_op_jobs_are_refused_with_the_reason() {
    let elf = suite("cortex-m4");
    for (job, reason) in [
        (
            "op=concatenation,input=1x2x2x1,input2=1x3x2x1,axis=3",
            "does not match input 1x2x2x1 outside axis 3",
        ),
        (
            "op=concatenation,input=1x2x2x1,input2=1x2x2x1,axis=4",
            "is not an NHWC axis",
        ),
        ("op=pad,input=1x2x2x1", "needs paddings"),
        (
            "op=pad,input=1x2x2x1,filter=1x1x1x1,pad_after=1",
            "takes no filter",
        ),
        (
            "op=relu,input=1x2x2x1,input2=1x2x2x1,axis=1",
            "op relu has no input2 or axis",
        ),
        (
            "op=transpose_conv,input=1x4x4x2,filter=3x3x3x2,stride=2,output=1x9x8x3",
            "maps output height 9 to 5",
        ),
        (
            "op=transpose_conv,input=1x4x4x2,filter=3x3x3x2,dilation=2",
            "has no dilation",
        ),
    ] {
        let out = memtrace(["run", common::path_str(&elf), "--job", job]);
        assert_eq!(out.status.code(), Some(1), "{job}");
        let err = stderr(&out);
        assert!(err.contains(&format!("bad --job `{job}`")), "{err}");
        assert!(err.contains(reason), "{job}: {err}");
    }
}

/// A MobileNet v1 with Keras' explicit ZeroPadding2D before every stride-2
/// layer: 6 PAD operators.
const PADDED: &str = "zoo:mobilenet_v1_0.25_128_int8_zeropad";

#[test]
fn a_model_with_pad_plans_with_pad_s_o_s_and_runs_clean_under_the_plan() {
    // Traced and algorithmic O_s give the same DMO plan (the traced PAD
    // configurations are the reference kernel's, O_s = IB).
    let peaks: Vec<u64> = ["traced", "algorithmic"]
        .iter()
        .map(|o| {
            let out = memtrace([
                "plan",
                PADDED,
                "--planner",
                "dmo-heap",
                "--overlap",
                o,
                "--format",
                "json",
            ]);
            assert!(out.status.success(), "{}", stderr(&out));
            let v = json(&out);
            u(&v["plans"][0]["peak_bytes"])
        })
        .collect();
    assert_eq!(peaks[0], peaks[1]);
    for kernels in ["tflm", "cmsis-nn"] {
        if kernels == "cmsis-nn" && cfg!(no_cmsis) {
            continue;
        }
        let out = memtrace([
            "verify",
            PADDED,
            "--planner",
            "dmo-heap",
            "--overlap",
            "traced",
            "--kernels",
            kernels,
            "--format",
            "json",
        ]);
        assert!(out.status.success(), "{kernels}: {}", stderr(&out));
        let v = json(&out);
        assert_eq!(v["bit_exact"], true, "{kernels}: {v}");
        assert_eq!(v["clobbers"].as_array().unwrap().len(), 0, "{v}");
        assert_eq!(u(&v["plan"]["clobbers"]), 0);
        // TFLM's own head (133 136 B) holds the 65×65×8 PAD outputs; the
        // DMO plan overlaps them.
        assert_eq!(u(&v["reference"]["head_bytes"]), 133_136, "{v}");
        assert!(u(&v["plan"]["planned_bytes"]) < 133_136, "{v}");
        if kernels == "tflm" {
            assert_eq!(u(&v["plan"]["planned_bytes"]), peaks[0], "{v}");
        }
    }
}
