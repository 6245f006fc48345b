//! `memtrace check` on CMSIS-NN v7.0.0's own transpose-convolution, batch
//! matmul and transpose unit-test suites, unmodified: each
//! `arm_transpose_conv_wrapper_s8`, `arm_batch_matmul_s{8,16}` and
//! `arm_transpose_s8` call is one layer (the kernel a wrapper dispatches
//! to is its inner call), with Unity's verdict reproduced and no contract
//! violation.
//!
//! Every buffer size is checked against what the test passes, found
//! without memtrace: the test data's arrays by their sizes in the ELF's
//! symbol table (`arm-none-eabi-nm`), the test's own arrays and allocations
//! by its formulas over the test data's `#define`s. Every O_s is checked
//! against a model of the kernel's loop order written from its source.

use crate::common;

use std::collections::HashMap;

use super::check_recurrent::{buffer_sizes, clean_layer, overlap, passes, symbol_sizes};
use common::u;
use common::unit_tests::{
    check_json, define, defines, line_of, planted_copy, replace_first, tests_dir, unit_tests,
};
use serde_json::Value;

/// The test data a call uses: the test function's name up to `_arm_`
/// (`transpose_conv_1_arm_transpose_conv_s8` uses `transpose_conv_1`), or
/// all of it (`batch_matmul_1_s8`).
fn test_data_of(call: &Value) -> String {
    let site = call["call_site"]["function"].as_str().unwrap();
    site.split("_arm_").next().unwrap().to_owned()
}

/// `name → calls` of a call's inner calls.
fn inner_calls(call: &Value) -> HashMap<String, u64> {
    call["inner_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["function"].as_str().unwrap().to_owned(), u(&i["calls"])))
        .collect()
}

/// The monotone O_s (docs/overlap.md, section 1) of reads and writes in
/// program order: `max(0, min(IB + OB − M_last, min over reads after a
/// write of OB − M + r))`, M the output end written before read r (a read
/// before any write is clobbered by none).
pub(crate) fn monotone(ib: u64, ob: u64, steps: impl IntoIterator<Item = Step>) -> u64 {
    let (mut m, mut least) = (0u64, i128::MAX);
    for s in steps {
        match s {
            Step::Read(r) if m > 0 => least = least.min(ob as i128 - m as i128 + r as i128),
            Step::Read(_) => {}
            Step::Write(end) => m = m.max(end),
        }
    }
    least.min(ib as i128 + ob as i128 - m as i128).max(0) as u64
}

/// A step of a kernel's loop order, in bytes from its buffer's start.
pub(crate) enum Step {
    /// The input byte read.
    Read(u64),
    /// The end of the output written.
    Write(u64),
}

/// A transpose convolution's `#define`s.
struct TransposeConv {
    batches: u64,
    in_h: u64,
    in_w: u64,
    in_c: u64,
    out_h: u64,
    out_w: u64,
    out_c: u64,
    fh: u64,
    fw: u64,
    sh: u64,
    sw: u64,
    pad_h: u64,
    pad_w: u64,
}

impl TransposeConv {
    fn of(data: &str) -> TransposeConv {
        let d = defines(data);
        let g = |n: &str| define(&d, data, n);
        TransposeConv {
            batches: g("INPUT_BATCHES"),
            in_h: g("INPUT_H"),
            in_w: g("INPUT_W"),
            in_c: g("IN_CH"),
            out_h: g("OUTPUT_H"),
            out_w: g("OUTPUT_W"),
            out_c: g("OUT_CH"),
            fh: g("FILTER_Y"),
            fw: g("FILTER_X"),
            sh: g("STRIDE_Y"),
            sw: g("STRIDE_X"),
            pad_h: g("PAD_Y"),
            pad_w: g("PAD_X"),
        }
    }

    /// The wrapper's choice (arm_transpose_conv_wrapper_s8.c): stride at
    /// most 2 both ways and more than 16 input channels.
    fn reverse(&self) -> bool {
        self.sh <= 2 && self.sw <= 2 && self.in_c > 16
    }

    /// `arm_transpose_conv_s8`'s loop order: per batch and input row j,
    /// the row is read (unless the filter rows it reaches are all skipped),
    /// then `stride_h` output rows are written once `j · stride_h ≥ pad_h`;
    /// each batch writes its `out_h` rows.
    fn rows_steps(&self) -> Vec<Step> {
        let (in_row, out_row) = (self.in_w * self.in_c, self.out_w * self.out_c);
        let first_out = self.pad_h.div_ceil(self.sh);
        let mut steps = Vec::new();
        for b in 0..self.batches {
            for j in 0..self.in_h {
                let top = self.pad_h.saturating_sub(j * self.sh);
                let bottom = (j * self.sh + self.fh).saturating_sub(self.pad_h + self.out_h + 1);
                if self.fh > top + bottom {
                    steps.push(Step::Read((b * self.in_h + j) * in_row));
                }
                let rows = (self.sh * (j + 1).saturating_sub(first_out)).min(self.out_h);
                steps.push(Step::Write((b * self.out_h + rows) * out_row));
            }
            steps.push(Step::Write((b + 1) * self.out_h * out_row));
        }
        steps
    }

    /// The reverse path's `arm_convolve_s8` on the input upscaled by the
    /// stride: output pixels in order, each gathering its window (the
    /// lowest row and column inside the upscaled input, every other one
    /// when upscaled by 2), written two at a time and the odd one at the
    /// end of each batch.
    fn reverse_steps(&self) -> Vec<Step> {
        let (ys, xs) = (u64::from(self.sh == 2), u64::from(self.sw == 2));
        let pad_y = self.fh as i64 - 1 - self.pad_h as i64;
        let pad_x = self.fw as i64 - 1 - self.pad_w as i64;
        let lowest = |base: i64, k: u64, extent: u64, shift: u64| {
            (0..k as i64)
                .map(|i| base + i)
                .find(|&v| v >= 0 && v < (extent << shift) as i64 && (shift == 0 || v % 2 == 0))
                .map(|v| (v as u64) >> shift)
        };
        let pixels = self.out_h * self.out_w;
        let mut steps = Vec::new();
        for b in 0..self.batches {
            for q in 0..pixels {
                let (oy, ox) = ((q / self.out_w) as i64, (q % self.out_w) as i64);
                let y = lowest(oy - pad_y, self.fh, self.in_h, ys);
                let x = lowest(ox - pad_x, self.fw, self.in_w, xs);
                if let (Some(y), Some(x)) = (y, x) {
                    let pixel = (b * self.in_h + y) * self.in_w + x;
                    steps.push(Step::Read(pixel * self.in_c));
                }
                if q % 2 == 1 || q + 1 == pixels {
                    steps.push(Step::Write((b * pixels + q + 1) * self.out_c));
                }
            }
        }
        steps
    }
}

/// The test data each Unity test of `suite` runs, in order: the function
/// its `test_` wrapper calls, up to `_arm_`. (v7.0.0's transpose-conv
/// suites run their third test again as the fourth.)
fn unity_runs(suite: &str) -> Vec<String> {
    let unity = std::fs::read_to_string(
        tests_dir()
            .join(suite)
            .join("Unity")
            .join(format!("unity_{suite}.c")),
    )
    .unwrap();
    unity
        .lines()
        .filter(|l| l.starts_with("void test_"))
        .filter_map(|l| {
            let body = l.split('{').nth(1)?;
            Some(body.trim().split("_arm_").next()?.to_owned())
        })
        .collect()
}

/// `check`'s report of a suite that passes, and its data symbols' sizes;
/// the report has one traced call per `call` text in the suite's source.
fn passing_suite(suite: &str, call: &str) -> (Value, HashMap<String, u64>) {
    let elf = unit_tests().join(format!("{suite}.elf"));
    let (report, status) = check_json(&elf, &[]);
    passes(&report, status, suite);
    let source =
        std::fs::read_to_string(tests_dir().join(suite).join(format!("{suite}.c"))).unwrap();
    let calls = report["calls"].as_array().unwrap().len();
    assert_eq!(calls, source.matches(call).count(), "{suite}");
    (report, symbol_sizes(&elf))
}

#[test]
fn each_transpose_conv_call_is_one_layer_with_its_paths_scratch_and_the_test_datas_sizes() {
    for suite in [
        "test_arm_transpose_conv_s8",
        "test_arm_reverse_transpose_conv_s8",
    ] {
        let (report, symbols) = passing_suite(suite, "arm_transpose_conv_wrapper_s8(");
        let calls = report["calls"].as_array().unwrap();
        let runs = unity_runs(suite);
        assert_eq!(
            calls.iter().map(test_data_of).collect::<Vec<_>>(),
            runs,
            "{suite}"
        );
        let reverse_calls = runs
            .iter()
            .filter(|data| TransposeConv::of(data).reverse())
            .count();
        let mut reverse = 0;
        for c in calls {
            assert_eq!(c["function"], "arm_transpose_conv_wrapper_s8", "{c}");
            assert_eq!(c["violates"], false, "{c}");
            assert_eq!(c["stray_reads"], 0, "{c}");
            assert_eq!(c["layer"]["contract"]["ok"], true, "{c}");
            let data = test_data_of(c);
            let t = TransposeConv::of(&data);
            let symbol = |s: &str| symbols[&format!("{data}_{s}")];
            // The test data's arrays are the shapes its #defines give.
            assert_eq!(
                symbol("input"),
                t.batches * t.in_h * t.in_w * t.in_c,
                "{data}"
            );
            assert_eq!(symbol("weights"), t.out_c * t.fh * t.fw * t.in_c, "{data}");
            let d = defines(&data);
            let dst = define(&d, &data, "DST_SIZE");
            assert_eq!(dst, t.batches * t.out_h * t.out_w * t.out_c, "{data}");
            let mut expected: HashMap<String, u64> = [
                ("input", symbol("input")),
                ("filter", symbol("weights")),
                ("multiplier", symbol("output_mult")),
                ("shift", symbol("output_shift")),
                ("output", dst),
            ]
            .into_iter()
            .map(|(n, s)| (n.to_owned(), s))
            .collect();
            // A test data's bias may be a NULL pointer (transpose_conv_2):
            // no buffer; else out_c words.
            if !null_biases(&data) {
                assert_eq!(symbol("biases"), t.out_c * 4, "{data}");
                expected.insert("bias".into(), symbol("biases"));
            }
            let scratch = &c["layer"]["contract"]["scratch"];
            let (steps, kernel) = if t.reverse() {
                reverse += 1;
                // arm_convolve_s8_get_buffer_size: two int16 columns of
                // the window, rounded up to four; the reversed filter is
                // the filter's size (the test's getter: in_c · KW · KH · n).
                let columns = t.fh * t.fw * t.in_c;
                let aligned = columns.div_ceil(4) * 4;
                expected.insert("scratch".into(), 4 * aligned);
                expected.insert("reversed_filter".into(), t.in_c * t.fw * t.fh * t.out_c);
                // The second column's end: the kernel writes no further.
                let im2col = scratch
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|s| s["buffer"] == "scratch")
                    .unwrap_or_else(|| panic!("{c}"));
                assert_eq!(u(&im2col["high_water_bytes"]), 2 * aligned + 2 * columns);
                (t.reverse_steps(), "arm_convolve_s8")
            } else {
                // The rolling accumulator, as the test's getter sizes it
                // (its stride.h for stride.w agrees on these data).
                let row = ((t.in_w - 1) * t.sw + t.fw.max(t.sh)) * t.out_c;
                expected.insert("scratch".into(), row * t.fh.max(t.sh) * 4);
                clean_layer(c);
                (t.rows_steps(), "arm_transpose_conv_s8")
            };
            assert_eq!(buffer_sizes(&c["layer"]), expected, "{suite}: {c}");
            assert_eq!(
                inner_calls(c),
                HashMap::from([(kernel.to_owned(), 1)]),
                "{c}"
            );
            let os = monotone(symbol("input"), dst, steps);
            assert_eq!(overlap(c).0, os, "{c}");
            assert!(overlap(c).1 >= os, "{c}");
        }
        assert_eq!(reverse, reverse_calls, "{suite}");
    }
}

/// Whether the test data's `<data>_biases` is a NULL pointer
/// (`biases_data.h`), not an array.
fn null_biases(data: &str) -> bool {
    std::fs::read_to_string(
        tests_dir()
            .join("TestData")
            .join(data)
            .join("biases_data.h"),
    )
    .unwrap()
    .contains("_biases = NULL;")
}

/// The symbol of the test data `data` whose name starts with `prefix`
/// (`batch_matmul_1_s8_lhs_` → `…_lhs_input_tensor`): its size.
fn symbol_with_prefix(symbols: &HashMap<String, u64>, data: &str, prefix: &str) -> u64 {
    let start = format!("{data}_{prefix}");
    let found: Vec<u64> = symbols
        .iter()
        .filter(|(n, _)| n.starts_with(&start))
        .map(|(_, s)| *s)
        .collect();
    assert_eq!(found.len(), 1, "{start}");
    found[0]
}

#[test]
fn each_batch_matmul_call_is_one_layer_with_broadcast_inputs_of_the_test_datas_sizes() {
    for (suite, function, elem) in [
        ("test_arm_batch_matmul_s8", "arm_batch_matmul_s8", 1),
        ("test_arm_batch_matmul_s16", "arm_batch_matmul_s16", 2),
    ] {
        let (report, symbols) = passing_suite(suite, &format!("{function}("));
        let calls = report["calls"].as_array().unwrap();
        for c in calls {
            assert_eq!(c["function"], function, "{c}");
            clean_layer(c);
            assert_eq!(c["inner_calls"], Value::Array(vec![]), "{c}");
            let data = test_data_of(c);
            let d = defines(&data);
            let g = |n: &str| define(&d, &data, n);
            let (lhs, rhs) = (
                symbol_with_prefix(&symbols, &data, "lhs_"),
                symbol_with_prefix(&symbols, &data, "rhs_"),
            );
            assert_eq!(
                lhs,
                g("LHS_BATCH") * g("LHS_HEIGHT") * g("LHS_ROWS") * g("LHS_COLS") * elem
            );
            assert_eq!(
                rhs,
                g("RHS_BATCH") * g("RHS_HEIGHT") * g("RHS_ROWS") * g("RHS_COLS") * elem
            );
            let output = g("DST_SIZE") * elem;
            let expected: HashMap<String, u64> = [("lhs", lhs), ("rhs", rhs), ("output", output)]
                .into_iter()
                .map(|(n, s)| (n.to_owned(), s))
                .collect();
            assert_eq!(buffer_sizes(&c["layer"]), expected, "{c}");
            assert_eq!(overlap(c).0, batch_matmul_os(&d, &data, elem), "{c}");
        }
    }
}

/// The batch matmul's O_s by its loop order (arm_batch_matmul_s8.c and
/// the DSP path of arm_nn_vec_mat_mult_t_s{8,16}): per output matrix
/// (`n`, `h`, an input of extent 1 broadcast), per left-hand row, the row
/// is read whole for each pair of right-hand rows, each pair's two outputs
/// written after it, and an odd last row alone: the row's start is last
/// read after `rows − 2` (even) or `rows − 1` (odd) of its outputs.
fn batch_matmul_os(d: &HashMap<String, i64>, data: &str, elem: u64) -> u64 {
    let g = |n: &str| define(d, data, n);
    let (lhs_n, lhs_h) = (g("LHS_BATCH"), g("LHS_HEIGHT"));
    let (out_n, out_h) = (g("OUTPUT_BATCH"), g("OUTPUT_HEIGHT"));
    // The kernel's rows are the dims' `w`: the test swaps rows and columns
    // of an input it passes transposed, so both are read from the output.
    let (lhs_rows, rhs_rows) = (g("OUTPUT_ROWS"), g("OUTPUT_COLS"));
    let cols = g("LHS_ROWS") * g("LHS_COLS") / lhs_rows;
    let (ib, ob) = (
        lhs_n * lhs_h * lhs_rows * cols * elem,
        out_n * out_h * lhs_rows * rhs_rows * elem,
    );
    let last_read = rhs_rows + rhs_rows % 2 - 2;
    let mut steps = Vec::new();
    let mut row = 0;
    for b in 0..out_n {
        for h in 0..out_h {
            let matrix = (b % lhs_n) * lhs_h + h % lhs_h;
            for i in 0..lhs_rows {
                steps.push(Step::Write((row * rhs_rows + last_read) * elem));
                steps.push(Step::Read((matrix * lhs_rows + i) * cols * elem));
                row += 1;
                steps.push(Step::Write(row * rhs_rows * elem));
            }
        }
    }
    monotone(ib, ob, steps)
}

/// The integers of the brace initialiser of `#define name` in `text`.
fn brace_define(text: &str, name: &str) -> Vec<u64> {
    let at = text
        .find(&format!("#define {name} "))
        .unwrap_or_else(|| panic!("no {name}"));
    let open = text[at..].find('{').unwrap() + at;
    let close = text[open..].find('}').unwrap() + open;
    text[open + 1..close]
        .split(|ch: char| ch == ',' || ch == '\\' || ch.is_whitespace())
        .filter(|v| !v.is_empty())
        .map(|v| v.parse().unwrap())
        .collect()
}

/// `arm_transpose_s8`'s loop order over `input` (NHWC as the test gives
/// it) with `perm` and `output` dims: `(read index, write index)` per
/// element. Two dimensions transpose an `n × h` matrix by input rows;
/// three and four move each element, read in input order, to the sum of
/// its indices times the output strides of the permutation.
fn transpose_moves(input: &[u64], output: &[u64], perm: &[u64]) -> Vec<(u64, u64)> {
    let dims = perm.len();
    if dims == 2 {
        let (rows, cols) = (input[0], input[1]);
        return (0..rows * cols)
            .map(|k| (k, k / cols + (k % cols) * rows))
            .collect();
    }
    let extents = &input[..dims];
    let mut strides = vec![0; dims];
    for (k, &axis) in perm.iter().enumerate() {
        strides[axis as usize] = output[k + 1..dims].iter().product::<u64>();
    }
    let total: u64 = extents.iter().product();
    (0..total)
        .map(|k| {
            let (mut rest, mut to) = (k, 0);
            for axis in (0..dims).rev() {
                to += (rest % extents[axis]) * strides[axis];
                rest /= extents[axis];
            }
            (k, to)
        })
        .collect()
}

#[test]
fn each_transpose_call_is_one_layer_its_output_reached_by_the_permutation() {
    let suite = "test_arm_transpose_s8";
    let elf = unit_tests().join(format!("{suite}.elf"));
    let (report, status) = check_json(&elf, &[]);
    passes(&report, status, suite);
    let symbols = symbol_sizes(&elf);
    let calls = report["calls"].as_array().unwrap();
    let source =
        std::fs::read_to_string(tests_dir().join(suite).join(format!("{suite}.c"))).unwrap();
    assert_eq!(calls.len(), source.matches("= arm_transpose_s8(").count());
    assert_eq!(
        calls.iter().map(test_data_of).collect::<Vec<_>>(),
        unity_runs(suite)
    );
    for c in calls {
        assert_eq!(c["function"], "arm_transpose_s8", "{c}");
        clean_layer(c);
        assert_eq!(c["inner_calls"], Value::Array(vec![]), "{c}");
        let data = test_data_of(c);
        let config = std::fs::read_to_string(
            tests_dir()
                .join("TestData")
                .join(&data)
                .join("config_data.h"),
        )
        .unwrap();
        let upper = data.to_uppercase();
        let input = brace_define(&config, &format!("{upper}_IN_DIM"));
        let output = brace_define(&config, &format!("{upper}_OUT_DIM"));
        let perm = brace_define(&config, &format!("{upper}_PERM"));
        let d = defines(&data);
        let size = define(&d, &data, "SIZE");
        let moves = transpose_moves(&input, &output, &perm);
        // Every element lands once, inside the test's output array.
        let mut targets: Vec<u64> = moves.iter().map(|m| m.1).collect();
        targets.sort_unstable();
        targets.dedup();
        assert_eq!(targets.len() as u64, size, "{data}");
        assert_eq!(*targets.last().unwrap() + 1, size, "{data}");
        let expected: HashMap<String, u64> = [
            ("input", symbols[&format!("{data}_input_tensor")]),
            ("output", size),
        ]
        .into_iter()
        .map(|(n, s)| (n.to_owned(), s))
        .collect();
        assert_eq!(symbols[&format!("{data}_output")], size, "{data}");
        assert_eq!(buffer_sizes(&c["layer"]), expected, "{c}");
        let steps = moves
            .iter()
            .flat_map(|&(from, to)| [Step::Read(from), Step::Write(to + 1)]);
        assert_eq!(overlap(c).0, monotone(size, size, steps), "{c}");
    }
}

#[test]
fn a_transpose_conv_scratch_smaller_than_the_kernels_rolling_buffer_is_noted_and_overrun() {
    let dir = tempfile::tempdir().unwrap();
    let (elf, source) = planted_copy(dir.path(), "test_arm_transpose_conv_s8", |s| {
        replace_first(
            s,
            "ctx.buf = malloc(buf_size);",
            "ctx.buf = malloc(buf_size - 4); /* PLANTED */",
        )
    });
    let (report, _) = check_json(&elf, &[]);
    let planted = line_of(&source, "/* PLANTED */");
    // transpose_conv_1's call: its rolling buffer is MAX(6, 2) rows of
    // ((9 − 1) · 2 + 6) · 3 words, 1584 B, 4 B past the block.
    let t = TransposeConv::of("transpose_conv_1");
    let rolling = t.fh.max(t.sh) * ((t.in_w - 1) * t.sw + t.fw.max(t.sw)) * t.out_c * 4;
    assert_eq!(rolling, 1584);
    let call = &report["calls"][0];
    assert_eq!(test_data_of(call), "transpose_conv_1", "{call}");
    let note =
        format!("`scratch` ({rolling} B by its shapes) reaches 4 B past the end of the heap block");
    assert!(
        call["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().starts_with(&note)),
        "{call}"
    );
    // Memcheck sees the kernel write there, in the block allocated at the
    // planted line.
    let overrun = report["memcheck"]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| {
            f["kind"] == "overrun"
                && f["chain"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|fr| fr["function"] == "arm_transpose_conv_s8")
        })
        .unwrap_or_else(|| panic!("no overrun in the kernel: {report}"));
    assert_eq!(u(&overrun["block"]["size"]), rolling - 4, "{overrun}");
    assert!(
        overrun["block"]["allocated"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["line"].as_u64() == Some(planted)),
        "{overrun}"
    );
}
