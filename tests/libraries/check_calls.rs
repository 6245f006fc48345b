//! `memtrace check` with CMSIS-NN API calls as layers: each call of an
//! unmodified unit-test suite is found at its line of the test source, its
//! O_s is the kernel suite's (`memtrace run suite-cmsis.elf --job`, a
//! program marked with memtrace.h that calls the same library) on the same
//! configuration, and a bug planted in a copy of a suite breaks the memory
//! contract of the call it is planted in.

use crate::common;

use std::collections::HashMap;

use common::unit_tests::{
    check_json, line_of, planted_suite, replace_first, tests_dir, unit_tests,
};
use common::{memtrace, path_str, suite_cmsis, u};
use serde_json::Value;

fn calls(report: &Value) -> &Vec<Value> {
    report["calls"].as_array().expect("calls traced by default")
}

#[test]
fn every_api_call_of_the_convolution_suite_is_a_layer_at_its_line() {
    let (report, status) = check_json(&unit_tests().join("test_arm_convolve_s8.elf"), &[]);
    assert_eq!(status, 0, "{report}");
    let source =
        std::fs::read_to_string(tests_dir().join("test_arm_convolve_s8/test_arm_convolve_s8.c"))
            .unwrap();
    let lines: Vec<&str> = source.lines().collect();
    // The calls in the source: each `= arm_convolve_s8(` or wrapper call
    // statement; the test functions run each once.
    let written = |f: &str| source.matches(&format!("= {f}(")).count();
    let calls = calls(&report);
    for f in ["arm_convolve_s8", "arm_convolve_wrapper_s8"] {
        let traced = calls.iter().filter(|c| c["function"] == f).count();
        assert_eq!(traced, written(f), "{f}: {report}");
    }
    for c in calls {
        let f = c["function"].as_str().unwrap();
        assert!(c["layer"].is_object(), "{c}");
        // The call site's line is inside the call statement: the nearest
        // statement start above it calls this function.
        let line = u(&c["call_site"]["line"]) as usize;
        assert!(c["call_site"]["file"]
            .as_str()
            .unwrap()
            .ends_with("test_arm_convolve_s8.c"));
        let start = (0..line)
            .rev()
            .find(|&i| lines[i].contains("= arm_"))
            .unwrap();
        assert!(
            lines[start].contains(&format!("= {f}(")) && line - start <= 12,
            "{f} at line {line}: {}",
            lines[start]
        );
        // The output is the test's output array: its size is the test
        // data's `*_DST_SIZE` (output elements of one byte).
        let layer = &c["layer"];
        let output = layer["buffers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["role"] == "output")
            .unwrap();
        let params = layer["params"].as_str().unwrap();
        let shape = params
            .split(',')
            .find_map(|kv| kv.strip_prefix("output="))
            .unwrap();
        let elements: u64 = shape
            .split('x')
            .map(|d| d.parse::<u64>().unwrap())
            .product();
        assert_eq!(u(&output["size"]), elements, "{params}");
        assert_eq!(layer["contract"]["ok"], true, "{c}");
    }
    assert!(!calls.is_empty());
}

/// The kernel suite's O_s of a configuration: the configuration as the
/// suite ran it, and its monotone and exact O_s.
fn suite_os(spec: &str) -> Option<(Value, u64, u64)> {
    let out = memtrace([
        "run",
        path_str(&suite_cmsis("cortex-m4")),
        "--job",
        spec,
        "--format",
        "json",
    ]);
    if !out.status.success() {
        return None;
    }
    let report = common::json(&out);
    let layer = &report["layers"][0];
    Some((
        layer["spec"].clone(),
        u(&layer["overlap"]["monotone_bytes"]),
        u(&layer["overlap"]["exact_bytes"]),
    ))
}

/// Max pooling is left out: CMSIS-NN's `arm_max_pool_s8` stores an output
/// byte only where a new value is larger, so its O_s depends on the data,
/// and the suite's generated data are not the test's.
#[test]
fn per_call_os_is_the_kernel_suites_on_the_same_configuration() {
    let mut compared = 0;
    let mut cache: HashMap<String, Option<(Value, u64, u64)>> = HashMap::new();
    for suite in [
        "test_arm_convolve_s8",
        "test_arm_depthwise_conv_s8",
        "test_arm_depthwise_conv_3x3_s8",
        "test_arm_avgpool_s8",
        "test_arm_fully_connected_s8",
        "test_arm_elementwise_add_s8",
        "test_arm_ds_cnn_s_s8",
    ] {
        let (report, _) = check_json(&unit_tests().join(format!("{suite}.elf")), &[]);
        for c in calls(&report) {
            let layer = &c["layer"];
            // Only configurations the kernel suite runs (int8, TFLite's
            // shape rules) have a spec.
            if layer["spec"].is_null() || layer["overlap"].is_null() {
                continue;
            }
            let params = layer["params"].as_str().unwrap();
            let Some((ran, monotone, exact)) = cache
                .entry(params.to_owned())
                .or_insert_with(|| suite_os(params))
                .clone()
            else {
                continue;
            };
            // The suite recomputes the padding by TFLite's rules; a test's
            // own padding is another configuration.
            if ran != layer["spec"] {
                continue;
            }
            let o = &layer["overlap"];
            assert_eq!(
                (u(&o["monotone_bytes"]), u(&o["exact_bytes"])),
                (monotone, exact),
                "{suite}: {} at line {}: {params}",
                c["function"],
                c["call_site"]["line"]
            );
            compared += 1;
        }
    }
    assert!(compared >= 30, "only {compared} calls compared");
}

#[test]
fn a_planted_scratch_overrun_breaks_the_contract_of_its_call() {
    let dir = tempfile::tempdir().unwrap();
    let (elf, source) = planted_suite(dir.path(), |s| {
        replace_first(
            s,
            "ctx.buf = malloc(buf_size);",
            "ctx.buf = malloc(buf_size - 1); /* PLANTED */",
        )
    });
    let (report, status) = check_json(&elf, &[]);
    assert_eq!(status, 99, "{report}");
    let planted = line_of(&source, "/* PLANTED */");
    // The first call after the planted line is the one whose scratch it made.
    let next = line_of(
        &source
            .lines()
            .skip(planted as usize)
            .collect::<Vec<_>>()
            .join("\n"),
        "= arm_convolve_s8(",
    ) + planted;
    let broken: Vec<&Value> = calls(&report)
        .iter()
        .filter(|c| c["violates"] == true)
        .collect();
    assert_eq!(broken.len(), 1, "{report}");
    let call = broken[0];
    let line = u(&call["call_site"]["line"]);
    assert!((next..next + 12).contains(&line), "{line} vs {next}");
    let stray = &call["layer"]["contract"]["stray_write"];
    assert_eq!(stray["ok"], false);
    // The kernel writes its whole scratch (the clean run's high-water mark
    // is its size), so it writes the byte the planted malloc took away.
    let nearest = &stray["first"]["nearest"];
    assert_eq!(nearest["buffer"], "scratch", "{stray}");
    assert_eq!(nearest["side"], "after_end");
    assert_eq!(
        call["layer"]["contract"]["stray_reach"][0]["bytes"], 1,
        "{stray}"
    );
    // Memcheck sees the same byte as a heap overrun.
    assert!(report["memcheck"]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["kind"] == "overrun"));
}
