//! `memtrace check` on CMSIS-NN v7.0.0's own SVDF and LSTM unit-test
//! suites, unmodified: each `arm_svdf_*` and `arm_lstm_unidirectional_*`
//! call is one layer (the kernels an LSTM calls are its inner calls, not
//! layers), with Unity's verdict reproduced and no contract violation.
//!
//! Every buffer size is checked against what the test itself passes, found
//! without memtrace: the arrays of the suite's test data by their sizes in
//! the ELF's symbol table as binutils' `nm` prints them, and the arrays the
//! test allocates or puts on its stack by its own formulas over the test
//! data's `#define`s. Every O_s is checked against the closed form of the
//! kernel's loop order.

use crate::common;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use common::u;
use common::unit_tests::{
    check_json, define, defines, line_of, planted_copy, replace_first, tests_dir, unit_tests,
};
use serde_json::Value;

/// The sizes of the defined symbols of `elf`, as `arm-none-eabi-nm -S`
/// prints them.
pub(crate) fn symbol_sizes(elf: &Path) -> HashMap<String, u64> {
    let out = Command::new("arm-none-eabi-nm")
        .args(["-S", "--defined-only"])
        .arg(elf)
        .output()
        .expect("arm-none-eabi-nm runs");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.len() == 4).then(|| (w[3].to_owned(), u64::from_str_radix(w[1], 16).ok()))
        })
        .filter_map(|(name, size)| Some((name, size?)))
        .collect()
}

/// Whether the test data's `<data>_biases` array holds only zeros (its
/// initialiser in `biases_data.h`).
fn zero_biases(data: &str) -> bool {
    let text = std::fs::read_to_string(
        tests_dir()
            .join("TestData")
            .join(data)
            .join("biases_data.h"),
    )
    .unwrap();
    let start = text.find('{').expect("an initialiser");
    let end = text[start..].find('}').expect("its end") + start;
    text[start + 1..end]
        .split(',')
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .all(|v| v == "0")
}

/// `name → size` of a layer's buffers.
pub(crate) fn buffer_sizes(layer: &Value) -> HashMap<String, u64> {
    layer["buffers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["name"].as_str().unwrap().to_owned(), u(&b["size"])))
        .collect()
}

/// The test data a call uses: its test function is named after it
/// (`svdf_int8_arm_svdf_s8` uses `svdf_int8`, `lstm_1_s16` `lstm_1_s16`).
fn test_data_of(call: &Value) -> String {
    let site = call["call_site"]["function"].as_str().unwrap();
    let function = call["function"].as_str().unwrap();
    site.strip_suffix(&format!("_{function}"))
        .unwrap_or(site)
        .to_owned()
}

/// The suite's verdict, as the program printed it: every test passed.
pub(crate) fn passes(report: &Value, status: i32, suite: &str) {
    assert_eq!(status, 0, "{suite}: {report}");
    let unity = &report["unity"];
    assert_eq!(unity["ok"], true, "{suite}");
    assert_eq!(unity["failures"], 0, "{suite}");
    let stdout = report["stdout"].as_str().unwrap();
    assert_eq!(
        u(&unity["tests"]) as usize,
        stdout.lines().filter(|l| l.ends_with(":PASS")).count(),
        "{suite}"
    );
    assert_eq!(report["memcheck"]["errors"], 0, "{suite}");
}

/// A call is a layer that keeps its memory contract and reads nothing
/// astray, and its kernel writes each scratch buffer to its last byte.
pub(crate) fn clean_layer(call: &Value) {
    assert_eq!(call["violates"], false, "{call}");
    assert_eq!(call["stray_reads"], 0, "{call}");
    let contract = &call["layer"]["contract"];
    assert_eq!(contract["ok"], true, "{call}");
    for s in contract["scratch"].as_array().unwrap() {
        assert_eq!(s["high_water_bytes"], s["declared_bytes"], "{call}");
    }
}

/// `(monotone, exact)` O_s of a call's layer.
pub(crate) fn overlap(call: &Value) -> (u64, u64) {
    let o = &call["layer"]["overlap"];
    (u(&o["monotone_bytes"]), u(&o["exact_bytes"]))
}

#[test]
fn each_svdf_call_is_one_layer_with_the_test_datas_sizes_and_reads_its_input_first() {
    for (suite, function, state_elem) in [
        ("test_arm_svdf_s8", "arm_svdf_s8", 1),
        ("test_arm_svdf_state_s16_s8", "arm_svdf_state_s16_s8", 2),
    ] {
        let elf = unit_tests().join(format!("{suite}.elf"));
        let (report, status) = check_json(&elf, &[]);
        passes(&report, status, suite);
        let symbols = symbol_sizes(&elf);
        let calls = report["calls"].as_array().unwrap();
        // The suite calls nothing else of the API.
        assert!(calls.iter().all(|c| c["function"] == function), "{suite}");
        let mut per_data: HashMap<String, u64> = HashMap::new();
        for c in calls {
            clean_layer(c);
            assert_eq!(c["inner_calls"], Value::Array(vec![]), "{c}");
            let data = test_data_of(c);
            *per_data.entry(data.clone()).or_default() += 1;
            let d = defines(&data);
            let (batches, input, features, time, rank) = (
                define(&d, &data, "INPUT_BATCHES"),
                define(&d, &data, "INPUT_SIZE"),
                define(&d, &data, "FEATURE_BATCHES"),
                define(&d, &data, "TIME_BATCHES"),
                define(&d, &data, "RANK"),
            );
            let units = features / rank;
            let symbol = |s: &str| {
                let name = format!("{data}_{s}");
                *symbols
                    .get(&name)
                    .unwrap_or_else(|| panic!("no symbol {name}"))
            };
            // Arrays of the test data, as the symbol table sizes them; the
            // test's own malloc'd input and scratch and its output array by
            // its formulas.
            let mut expected: HashMap<String, u64> = [
                ("input", batches * input),
                ("state", symbol("state")),
                ("weights_feature", symbol("weights_feature")),
                ("weights_time", symbol("weights_time")),
                ("output", define(&d, &data, "DST_SIZE")),
                ("input_ctx", batches * features * 4),
                ("output_ctx", batches * units * 4),
            ]
            .into_iter()
            .map(|(n, s)| (n.to_owned(), s))
            .collect();
            // The s16 suite passes NULL for a bias of zeros.
            if function == "arm_svdf_s8" || !zero_biases(&data) {
                expected.insert("bias".into(), symbol("biases"));
            }
            assert_eq!(buffer_sizes(&c["layer"]), expected, "{suite}: {c}");
            assert_eq!(
                symbol("state"),
                batches * features * time * state_elem,
                "{data}"
            );
            assert!(
                c["shapes"]
                    .as_str()
                    .unwrap()
                    .ends_with(&format!(",rank={rank}")),
                "{c}"
            );
            // The kernel reads its whole input (the feature product) before
            // it writes an output byte (the last loop): the output may
            // overwrite all of it.
            assert_eq!(overlap(c), (batches * input, batches * input), "{c}");
        }
        // One call per input frame of the sequence, per test.
        for (data, calls) in &per_data {
            let d = defines(data);
            let frame = define(&d, data, "INPUT_BATCHES") * define(&d, data, "INPUT_SIZE");
            let frames = symbols[&format!("{data}_input_sequence")] / frame;
            assert_eq!(*calls, frames, "{suite}: {data}");
        }
    }
}

/// The LSTM's O_s by its loop order: step t reads its input (at `m_t`)
/// only after step t − 1 wrote its output (up to `M_t`), and the output of
/// step t is written after its last input read. The binding pair is the
/// end of one step's writes and the first input byte of the next:
/// `min(IB, min_t OB − M_t + m_t)` (docs/overlap.md, section 1).
fn lstm_overlap(d: &HashMap<String, i64>, data: &str, in_elem: u64, out_elem: u64) -> u64 {
    let (b, t, i, h) = (
        define(d, data, "BATCH_SIZE"),
        define(d, data, "TIME_STEPS"),
        define(d, data, "INPUT_SIZE"),
        define(d, data, "HIDDEN_SIZE"),
    );
    let time_major = define(d, data, "TIME_MAJOR") == 1;
    let (ib, ob) = (b * t * i * in_elem, b * t * h * out_elem);
    (0..t.saturating_sub(1))
        .map(|step| {
            // The output end after step `step`, the next step's first read.
            let written = if time_major {
                (step + 1) * b * h
            } else {
                ((b - 1) * t + step + 1) * h
            };
            let next_read = if time_major {
                (step + 1) * b * i
            } else {
                (step + 1) * i
            };
            ob - written * out_elem + next_read * in_elem
        })
        .fold(ib, u64::min)
}

#[test]
fn each_lstm_call_is_one_layer_its_kernels_inner_calls_and_its_buffers_the_test_datas() {
    for (suite, function, elem, bias) in [
        (
            "test_arm_lstm_unidirectional_s8",
            "arm_lstm_unidirectional_s8",
            1,
            4,
        ),
        (
            "test_arm_lstm_unidirectional_s16",
            "arm_lstm_unidirectional_s16",
            2,
            8,
        ),
    ] {
        let elf = unit_tests().join(format!("{suite}.elf"));
        let (report, status) = check_json(&elf, &[]);
        passes(&report, status, suite);
        let symbols = symbol_sizes(&elf);
        let calls = report["calls"].as_array().unwrap();
        // Beside the kernel sums the test computes first, the LSTM calls
        // are the only layers: the elementwise and activation kernels
        // they run are none.
        let lstm: Vec<&Value> = calls.iter().filter(|c| c["function"] == function).collect();
        assert!(
            calls.iter().all(|c| c["function"] == function
                || c["function"]
                    .as_str()
                    .unwrap()
                    .starts_with("arm_vector_sum_s8")),
            "{suite}"
        );
        let source =
            std::fs::read_to_string(tests_dir().join(suite).join(format!("{suite}.c"))).unwrap();
        assert_eq!(lstm.len(), source.matches(&format!("{function}(")).count());
        for c in lstm {
            clean_layer(c);
            let data = test_data_of(c);
            let d = defines(&data);
            let (b, t, h) = (
                define(&d, &data, "BATCH_SIZE"),
                define(&d, &data, "TIME_STEPS"),
                define(&d, &data, "HIDDEN_SIZE"),
            );
            // arm_nn_lstm_step_*: four gates, each with its activation,
            // the cell's tanh and one elementwise product, per time step.
            let inner: HashMap<String, u64> = c["inner_calls"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| (i["function"].as_str().unwrap().to_owned(), u(&i["calls"])))
                .collect();
            let expected_inner: HashMap<String, u64> = [
                ("arm_nn_activation_s16".to_owned(), 5 * t),
                ("arm_elementwise_mul_s16".to_owned(), t),
            ]
            .into();
            assert_eq!(inner, expected_inner, "{c}");
            let symbol = |s: &str| {
                let name = format!("{data}_{s}");
                *symbols
                    .get(&name)
                    .unwrap_or_else(|| panic!("no symbol {name}"))
            };
            let mut expected: HashMap<String, u64> = HashMap::new();
            expected.insert("input".into(), symbol("input_tensor"));
            // The test's output array, `[BATCH_SIZE * TIME_STEPS * HIDDEN_SIZE]`.
            expected.insert("output".into(), b * t * h * elem);
            for gate in ["forget", "input", "cell", "output"] {
                for w in ["input_weights", "hidden_weights"] {
                    expected.insert(
                        format!("{gate}_gate.{w}"),
                        symbol(&format!("{gate}_gate_{w}")),
                    );
                }
                // The kernel sums the test computes on its stack: one per
                // hidden unit, of the bias' type.
                for e in ["input_effective_bias", "hidden_effective_bias"] {
                    expected.insert(format!("{gate}_gate.{e}"), h * bias);
                }
                assert_eq!(symbol(&format!("{gate}_gate_bias")), h * bias, "{data}");
            }
            for s in ["temp1", "temp2", "cell_state"] {
                expected.insert(s.into(), b * h * 2);
            }
            assert_eq!(buffer_sizes(&c["layer"]), expected, "{suite}: {c}");
            let os = lstm_overlap(&d, &data, elem, elem);
            assert_eq!(overlap(c), (os, os), "{c}");
        }
    }
}

#[test]
fn an_svdf_scratch_smaller_than_its_dims_is_noted_and_overrun_at_the_kernel() {
    let dir = tempfile::tempdir().unwrap();
    let (elf, source) = planted_copy(dir.path(), "test_arm_svdf_s8", |s| {
        replace_first(
            s,
            "input_ctx.buf = malloc(scratch_size);",
            "input_ctx.buf = malloc(scratch_size - 4); /* PLANTED */",
        )
    });
    let (report, status) = check_json(&elf, &[]);
    assert_eq!(status, 99, "{report}");
    let planted = line_of(&source, "/* PLANTED */");
    // The test's first function's calls: each says its scratch reaches
    // 4 B past the block the test allocated.
    let first: Vec<&Value> = report["calls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| u(&c["call_site"]["line"]) < line_of(&source, "void svdf_int8_2_arm_svdf_s8"))
        .collect();
    assert!(!first.is_empty());
    for c in &first {
        let notes = c["notes"].as_array().unwrap();
        assert!(
            notes.iter().any(|n| {
                let n = n.as_str().unwrap();
                n.starts_with(
                    "`input_ctx` (48 B by its shapes) reaches 4 B past the end of the heap block",
                )
            }),
            "{c}"
        );
    }
    // Memcheck sees the kernel write there, in the block allocated at the
    // planted line.
    let overrun = report["memcheck"]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "overrun")
        .unwrap_or_else(|| panic!("no overrun: {report}"));
    let chain = overrun["chain"].as_array().unwrap();
    assert!(
        chain.iter().any(|f| f["function"] == "arm_svdf_s8"),
        "{overrun}"
    );
    assert_eq!(u(&overrun["block"]["size"]), 44, "{overrun}");
    let allocated = overrun["block"]["allocated"].as_array().unwrap();
    assert!(
        allocated
            .iter()
            .any(|f| f["line"].as_u64() == Some(planted)),
        "{overrun}"
    );
}

#[test]
fn lstm_scratch_buffers_passed_twice_are_named_at_the_call_whose_test_fails() {
    let dir = tempfile::tempdir().unwrap();
    let (elf, source) = planted_copy(dir.path(), "test_arm_lstm_unidirectional_s8", |s| {
        replace_first(
            s,
            "buffers.temp2 = buffer2;",
            "buffers.temp2 = buffer1; /* PLANTED */",
        )
    });
    let (report, status) = check_json(&elf, &[]);
    // Unity: the first test fails (the forget and cell gates share one
    // buffer), and the program's exit status says so.
    assert_eq!(report["unity"]["failures"], 1, "{report}");
    assert_eq!(status, 1, "{report}");
    let planted = line_of(&source, "/* PLANTED */");
    let call = report["calls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["function"] == "arm_lstm_unidirectional_s8")
        .unwrap();
    assert!(u(&call["call_site"]["line"]) > planted);
    let notes = call["notes"].as_array().unwrap();
    assert!(
        notes
            .iter()
            .any(|n| n.as_str().unwrap().starts_with("`temp2` [")
                && n.as_str().unwrap().contains("overlaps `temp1`")),
        "{call}"
    );
    // temp2's accesses are temp1's: its layer has no `temp2`.
    assert!(!buffer_sizes(&call["layer"]).contains_key("temp2"));
}
