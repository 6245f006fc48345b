//! `memtrace check` on our own program `harness-c/unit-tests/extra/
//! memtrace_misc.c`, which calls the CMSIS-NN v7.0.0 functions no suite of
//! the release calls — `arm_concatenation_s8_{x,y,z,w}`, `arm_reshape_s8`,
//! `arm_relu_q7`, `arm_relu6_s8`, `arm_relu_q15` — and checks their
//! outputs itself: each call is one layer, with the program's verdict
//! reproduced and no contract violation.
//!
//! Every buffer is checked against the program's arrays as the ELF's
//! symbol table gives them (`arm-none-eabi-nm -S`) and
//! against the extents the program passes; every O_s against a closed form
//! and against the monotone O_s of the kernel's loop order byte by byte.

use crate::common;

use std::collections::HashMap;
use std::path::PathBuf;

use super::check_recurrent::{buffer_sizes, clean_layer, overlap, symbol_sizes};
use super::check_tensors::{monotone, Step};
use common::u;
use common::unit_tests::{check_json, unit_tests};
use serde_json::Value;

/// The program, built by `make -C harness-c/unit-tests`.
fn program() -> PathBuf {
    let elf = unit_tests().join("extra/memtrace_misc.elf");
    assert!(elf.exists(), "{} is missing", elf.display());
    elf
}

/// A concatenation the program makes: its axis (0 = x … 3 = w) and the
/// extents `(x, y, z, w)` of its two inputs (memtrace_misc.c's `main`).
struct Concat {
    axis: usize,
    a: [u64; 4],
    b: [u64; 4],
}

const CONCATS: [Concat; 4] = [
    Concat {
        axis: 0,
        a: [2, 3, 2, 2],
        b: [3, 3, 2, 2],
    },
    Concat {
        axis: 1,
        a: [3, 1, 2, 2],
        b: [3, 2, 2, 2],
    },
    Concat {
        axis: 2,
        a: [2, 2, 3, 2],
        b: [2, 2, 1, 2],
    },
    Concat {
        axis: 3,
        a: [2, 3, 2, 1],
        b: [2, 3, 2, 2],
    },
];

/// `(x, y, z, w)` of the whole output of `c`.
fn output_extents(c: &Concat) -> [u64; 4] {
    let mut e = c.a;
    e[c.axis] += c.b[c.axis];
    e
}

/// Bytes of a tensor of extents `e`.
fn volume(e: &[u64; 4]) -> u64 {
    e.iter().product()
}

/// The rows a concatenation copies: `(input start, output start, bytes)`
/// per `arm_memcpy_s8` of the kernel (arm_concatenation_s8_<axis>.c), for
/// an input of extents `e` at `offset` along the axis of an output whose
/// extent there is `out_extent`.
fn copied_rows(axis: usize, e: &[u64; 4], out_extent: u64, offset: u64) -> Vec<(u64, u64, u64)> {
    let [x, y, z, w] = *e;
    // (rows, bytes per row, output stride, output start).
    let (rows, row, stride, start) = match axis {
        0 => (y * z * w, x, out_extent, offset),
        1 => (z * w, x * y, x * out_extent, offset * x),
        2 => (w, x * y * z, x * y * out_extent, offset * x * y),
        _ => (1, x * y * z * w, 0, offset * x * y * z),
    };
    (0..rows)
        .map(|i| (i * row, start + i * stride, row))
        .collect()
}

/// The monotone O_s of copying `rows` byte by byte in order (each byte
/// read, then written): docs/overlap.md's definition over the kernel's
/// loop order.
fn copy_os(ib: u64, ob: u64, rows: &[(u64, u64, u64)]) -> u64 {
    let steps = rows.iter().flat_map(|&(from, to, n)| {
        (0..n).flat_map(move |k| [Step::Read(from + k), Step::Write(to + k + 1)])
    });
    monotone(ib, ob, steps)
}

/// The closed form of a forward copy's O_s: `OB + IB − E`, `E` the end of
/// the highest output byte written. Every read of row `j` at byte `t`
/// follows writes ending at most at `out_j + t`; its term `OB − M + r` is
/// `OB − (out_j − in_j)`, least for the last row, where it equals the
/// final term `OB − E + IB`.
fn closed_form_os(ib: u64, ob: u64, rows: &[(u64, u64, u64)]) -> u64 {
    let end = rows.iter().map(|&(_, to, n)| to + n).max().unwrap_or(0);
    (ob + ib).saturating_sub(end)
}

/// The program's calls, checked to be its twelve, in its order, each a
/// clean layer of its own; the program's verdict checked.
fn program_calls() -> (Vec<Value>, HashMap<String, u64>) {
    let elf = program();
    let (report, status) = check_json(&elf, &[]);
    assert_eq!(status, 0, "{report}");
    let stdout = report["stdout"].as_str().unwrap();
    assert!(stdout.contains("memtrace_misc: all ok"), "{stdout}");
    assert_eq!(stdout.matches(" ok\n").count(), 9, "{stdout}");
    assert_eq!(report["memcheck"]["errors"], 0);
    let calls = report["calls"].as_array().unwrap().clone();
    let functions: Vec<&str> = calls
        .iter()
        .map(|c| c["function"].as_str().unwrap())
        .collect();
    let mut expected = Vec::new();
    for axis in ["x", "y", "z", "w"] {
        let name = format!("arm_concatenation_s8_{axis}");
        expected.extend([name.clone(), name]);
    }
    expected.extend(
        [
            "arm_reshape_s8",
            "arm_relu_q7",
            "arm_relu6_s8",
            "arm_relu_q15",
        ]
        .map(String::from),
    );
    assert_eq!(functions, expected);
    for c in &calls {
        clean_layer(c);
        assert!(c["layer"].is_object(), "{c}");
    }
    (calls, symbol_sizes(&elf))
}

/// The layer's buffer `name` as the report gives it.
fn buffer_json<'a>(call: &'a Value, name: &str) -> &'a Value {
    call["layer"]["buffers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {call}"))
}

/// Bytes of the layer's buffer `name`.
fn buffer(call: &Value, name: &str) -> u64 {
    u(&buffer_json(call, name)["size"])
}

#[test]
fn each_concatenation_is_one_layer_over_its_input_and_the_whole_output_tensor() {
    let (calls, symbols) = program_calls();
    for (i, c) in CONCATS.iter().enumerate() {
        let letter = ["x", "y", "z", "w"][c.axis];
        let out = symbols[&format!("concat_{letter}_out")];
        let mut offset = 0;
        for (k, (input, part)) in [(&c.a, "a"), (&c.b, "b")].into_iter().enumerate() {
            let call = &calls[2 * i + k];
            let symbol = symbols[&format!("concat_{letter}_{part}")];
            assert_eq!(buffer(call, "input"), symbol, "{call}");
            assert_eq!(symbol, volume(input));
            // W has no output extent: its output ends with the block.
            let whole = volume(&output_extents(c));
            let output = if c.axis == 3 {
                whole / output_extents(c)[3] * (offset + input[3])
            } else {
                whole
            };
            assert_eq!(buffer(call, "output"), output, "{call}");
            let shapes = call["shapes"].as_str().unwrap();
            assert!(
                shapes.ends_with(&format!("axis={letter},offset={offset}")),
                "{shapes}"
            );
            assert_eq!(buffer_sizes(&call["layer"]).len(), 2, "{call}");
            if k == 1 {
                assert_eq!(out, output, "the last block ends the tensor");
            }
            offset += input[c.axis];
        }
    }
}

#[test]
fn each_copy_has_the_closed_form_o_s_of_its_loop_order() {
    let (calls, symbols) = program_calls();
    for (i, c) in CONCATS.iter().enumerate() {
        let out_extent = output_extents(c)[c.axis];
        let mut offset = 0;
        for (k, input) in [c.a, c.b].iter().enumerate() {
            let call = &calls[2 * i + k];
            let (ib, ob) = (buffer(call, "input"), buffer(call, "output"));
            let rows = copied_rows(c.axis, input, out_extent, offset);
            let os = closed_form_os(ib, ob, &rows);
            assert_eq!(os, copy_os(ib, ob, &rows), "axis {}", c.axis);
            assert_eq!(overlap(call), (os, os), "{call}");
            offset += input[c.axis];
        }
    }
    // Reshape: one forward copy of the whole array, which may overlap
    // its output entirely.
    let reshape = &calls[8];
    let n = symbols["reshape_in"];
    assert_eq!(buffer(reshape, "input"), n);
    assert_eq!(buffer(reshape, "output"), symbols["reshape_out"]);
    let rows = [(0, 0, n)];
    assert_eq!(closed_form_os(n, n, &rows), copy_os(n, n, &rows));
    assert_eq!(overlap(reshape), (n, n), "{reshape}");
}

#[test]
fn each_relu_is_one_in_place_layer_whose_output_may_overlap_all_its_input() {
    let (calls, symbols) = program_calls();
    for (call, array, elem, elements) in [
        (&calls[9], "relu_q7_data", 1, 11),
        (&calls[10], "relu6_s8_data", 1, 9),
        (&calls[11], "relu_q15_data", 2, 7),
    ] {
        let data = symbols[array];
        assert_eq!(data, elem * elements, "{array}");
        // The one buffer, declared as both the input and the output: the
        // same size, and every access recorded against both.
        assert_eq!(buffer(call, "input"), data, "{call}");
        assert_eq!(buffer(call, "output"), data, "{call}");
        let (input, output) = (buffer_json(call, "input"), buffer_json(call, "output"));
        for count in ["loads", "stores", "updates"] {
            assert_eq!(input[count], output[count], "{count}: {call}");
        }
        assert!(u(&input["stores"]) > 0, "{call}");
        let contract = &call["layer"]["contract"];
        assert_eq!(contract["ok"], true, "{call}");
        // Each element read, then written (the last one is negative, so
        // every path writes it): O_s is the whole buffer.
        let steps = (0..elements).flat_map(|e| [Step::Read(e * elem), Step::Write((e + 1) * elem)]);
        let os = monotone(data, data, steps);
        assert_eq!(os, data);
        assert_eq!(overlap(call), (os, os), "{call}");
    }
}
