//! `memtrace check`: unmodified Cortex-M4 programs built with newlib's
//! semihosting, run as built, with memcheck. The programs are small C files
//! compiled here and CMSIS-NN's own Unity suites (`make -C
//! harness-c/unit-tests`); every number is checked against the program's
//! own output or its source.

use crate::common;

use std::path::{Path, PathBuf};

use common::unit_tests::{
    check_json, compile, line_of, planted_suite, replace_first, tests_dir, unit_tests,
};
use common::{memtrace, path_str};
use serde_json::Value;

/// A C program in a fresh directory, compiled at -O0 (each statement its
/// own line).
fn program(dir: &Path, name: &str, source: &str) -> PathBuf {
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, source).unwrap();
    let elf = dir.join(format!("{name}.elf"));
    compile(&[&c], &[], &["-O0"], &elf);
    elf
}

/// Memcheck's findings of a report.
fn findings(report: &Value) -> &Vec<Value> {
    report["memcheck"]["findings"].as_array().unwrap()
}

/// Whether a chain has a frame of `file` (its name) at a line in `lines`.
fn has_frame(chain: &Value, file: &str, lines: std::ops::RangeInclusive<u64>) -> bool {
    chain.as_array().unwrap().iter().any(|f| {
        f["file"].as_str().is_some_and(|p| p.ends_with(file))
            && f["line"].as_u64().is_some_and(|l| lines.contains(&l))
    })
}

#[test]
fn a_semihosted_program_prints_reads_its_arguments_and_exits_with_its_status() {
    let dir = tempfile::tempdir().unwrap();
    let elf = program(
        dir.path(),
        "hello",
        r#"#include <stdio.h>
int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) printf("arg %d=%s\n", i, argv[i]);
  fprintf(stderr, "to stderr\n");
  return 42;
}
"#,
    );
    let out = memtrace(["check", path_str(&elf), "--", "alpha", "beta"]);
    let stdout = common::stdout(&out);
    assert_eq!(stdout, "arg 1=alpha\narg 2=beta\n");
    let stderr = common::stderr(&out);
    assert!(stderr.starts_with("to stderr\n"), "{stderr}");
    assert!(stderr.contains("exited with status 42"), "{stderr}");
    assert_eq!(out.status.code(), Some(42));
    let (report, status) = check_json(&elf, &[]);
    assert_eq!(status, 42);
    assert_eq!(report["exit_status"], 42);
    assert_eq!(report["stderr"], "to stderr\n");
    assert_eq!(report["memcheck"]["errors"], 0);
}

#[test]
fn a_peripheral_access_a_stack_overflow_and_an_endless_loop_are_stopped_with_their_line() {
    let dir = tempfile::tempdir().unwrap();
    let source = r#"#include <stdint.h>
#include <stdlib.h>
int deep(int n) { volatile char pad[64]; pad[0] = n; return n ? deep(n - 1) + pad[0] : 0; }
volatile int spins;
int main(int argc, char **argv) {
  if (argc > 3) while (1) spins++;  /* busy */
  if (argc > 2) while (1) { }       /* endless */
  if (argc > 1) return deep(1 << 20);
  return *(volatile uint32_t *)0x40021000; /* peripheral */
}
"#;
    let elf = program(dir.path(), "stops", source);
    let (fault, status) = check_json(&elf, &[]);
    assert_eq!(status, 99, "{fault}");
    assert_eq!(fault["end"]["kind"], "fault");
    let message = fault["end"]["message"].as_str().unwrap();
    assert!(
        message.contains("0x40021000") && message.contains("peripheral"),
        "{message}"
    );
    let line = line_of(source, "/* peripheral */");
    assert!(
        has_frame(&fault["end"]["chain"], "stops.c", line..=line),
        "{fault}"
    );

    let (overflow, _) = check_json(&elf, &["--stack", "65536", "--", "deep"]);
    assert_eq!(overflow["end"]["kind"], "stack-overflow", "{overflow}");
    let line = line_of(source, "int deep(");
    assert!(
        has_frame(&overflow["end"]["chain"], "stops.c", line..=line),
        "{overflow}"
    );

    // A branch to itself is stopped at once, at its line, whatever the budget.
    let (endless, status) = check_json(&elf, &["--", "a", "b"]);
    assert_eq!(
        (status, endless["end"]["kind"].as_str()),
        (99, Some("loop")),
        "{endless}"
    );
    let line = line_of(source, "/* endless */");
    assert!(
        has_frame(&endless["end"]["chain"], "stops.c", line..=line),
        "{endless}"
    );
    // A loop that does something runs into the budget.
    let (busy, status) = check_json(&elf, &["--max-instructions", "200000", "--", "a", "b", "c"]);
    assert_eq!(
        (status, busy["end"]["kind"].as_str()),
        (99, Some("budget")),
        "{busy}"
    );
    let retired = busy["instructions"].as_u64().unwrap();
    assert!((200_000..200_100).contains(&retired), "{retired}");
}

#[test]
fn heap_findings_name_the_block_where_it_was_allocated_and_suppressions_hide_them() {
    let dir = tempfile::tempdir().unwrap();
    let source = r#"#include <stdlib.h>
#include <stdio.h>
volatile int sink;
int main(void) {
  char *a = malloc(10);          /* alloc a */
  for (int i = 0; i <= 10; i++) a[i] = i; /* overrun */
  char *b = malloc(8);           /* alloc b */
  sink = b[3];                   /* uninit */
  free(b);                       /* free b */
  sink = b[0];                   /* after free */
  free(b);                       /* double free */
  char *c = calloc(4, 4);
  sink = c[15];
  c = malloc(32);                /* lost */
  c = 0;
  free(a);
  printf("done\n");
  return 0;
}
"#;
    let elf = program(dir.path(), "heap", source);
    let (report, status) = check_json(&elf, &[]);
    assert_eq!(status, 99);
    assert_eq!(report["stdout"], "done\n", "the program ran on");
    let expect = [
        ("overrun", "/* overrun */", "/* alloc a */"),
        ("uninitialised", "/* uninit */", "/* alloc b */"),
        ("use-after-free", "/* after free */", "/* alloc b */"),
        ("double-free", "/* double free */", "/* alloc b */"),
    ];
    let found = findings(&report);
    for (kind, at, allocated) in expect {
        let f = found
            .iter()
            .find(|f| f["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} in {report}"));
        let (at, allocated) = (line_of(source, at), line_of(source, allocated));
        assert!(has_frame(&f["chain"], "heap.c", at..=at), "{kind}: {f}");
        assert!(
            has_frame(&f["block"]["allocated"], "heap.c", allocated..=allocated),
            "{kind}: {f}"
        );
    }
    let uaf = found
        .iter()
        .find(|f| f["kind"] == "use-after-free")
        .unwrap();
    let freed = line_of(source, "/* free b */");
    assert!(
        has_frame(&uaf["block"]["freed"], "heap.c", freed..=freed),
        "{uaf}"
    );
    assert_eq!(
        found.len(),
        expect.len(),
        "calloc'd bytes are defined: {report}"
    );
    // Both blocks `c` pointed at are lost; `a` was freed.
    let lost: Vec<&Value> = report["memcheck"]["leaks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["reachable"] == false)
        .collect();
    let sizes: Vec<u64> = lost.iter().map(|l| l["size"].as_u64().unwrap()).collect();
    assert_eq!(sizes, [16, 32], "{report}");
    let line = line_of(source, "/* lost */");
    assert!(has_frame(&lost[1]["allocated"], "heap.c", line..=line));
    assert_eq!(report["memcheck"]["errors"], expect.len() + 2);

    let rules = dir.path().join("rules.supp");
    std::fs::write(&rules, "# all in main\n* main\n").unwrap();
    let (quiet, status) = check_json(&elf, &["--suppressions", path_str(&rules)]);
    assert_eq!((status, &quiet["memcheck"]["errors"]), (0, &Value::from(0)));
    assert_eq!(quiet["memcheck"]["suppressed"], expect.len() + 2);
    std::fs::write(&rules, "overrun\n").unwrap();
    let out = memtrace(["check", "--suppressions", path_str(&rules), path_str(&elf)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        common::stderr(&out).contains("line 1"),
        "{}",
        common::stderr(&out)
    );
}

/// Unity's verdict as the program printed it, counted line by line: one
/// `file:line:test:PASS|FAIL|IGNORE` line per test.
fn unity_lines(stdout: &str) -> (u64, u64, u64) {
    let count = |what: &str| {
        stdout
            .lines()
            .filter(|l| l.contains(&format!(":{what}")) && l.split(':').count() >= 4)
            .count() as u64
    };
    let pass = count("PASS");
    let fail = count("FAIL");
    let ignored = count("IGNORE");
    (pass + fail + ignored, fail, ignored)
}

/// Suites whose memcheck findings are real (docs/kernels.md, "CMSIS-NN's
/// unit tests under memcheck"), each checked by its own test below.
const KNOWN_FINDINGS: [&str; 3] = [
    "test_arm_ds_cnn_l_s8",
    "test_arm_ds_cnn_s_s8",
    "test_arm_depthwise_conv_s8",
];

#[test]
fn every_cmsis_nn_unit_test_suite_runs_with_unitys_own_verdict() {
    let dir = unit_tests();
    let suites: Vec<String> = std::fs::read_dir(tests_dir())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("test_arm_"))
        .collect();
    assert_eq!(suites.len(), 41);
    for suite in &suites {
        let elf = dir.join(format!("{suite}.elf"));
        let (report, status) = check_json(&elf, &[]);
        let unity = &report["unity"];
        let stdout = report["stdout"].as_str().unwrap();
        let (tests, failures, ignored) = unity_lines(stdout);
        assert_eq!(unity["tests"], tests, "{suite}: {stdout}");
        assert_eq!(unity["failures"], failures, "{suite}");
        assert_eq!(unity["ignored"], ignored, "{suite}");
        // The runner calls every test_ function of the suite's test file.
        let runner =
            std::fs::read_to_string(dir.join(format!("runners/{suite}_runner.c"))).unwrap();
        assert_eq!(
            runner.matches("run_test(test_").count() as u64,
            tests,
            "{suite}"
        );
        assert_eq!(unity["ok"], failures == 0, "{suite}");
        // Unity's main returns its failure count, and exit carries it.
        assert_eq!(report["exit_status"], failures, "{suite}");
        let errors = report["memcheck"]["errors"].as_u64().unwrap();
        if KNOWN_FINDINGS.contains(&suite.as_str()) {
            assert!(errors > 0, "{suite}");
            assert_eq!(status, 99);
        } else {
            assert_eq!(errors, 0, "{suite}: {report}");
            assert_eq!(status as u64, failures, "{suite}");
        }
    }
}

/// A `#define NAME value` of a test-data header.
fn define(header: &Path, name: &str) -> u64 {
    let text = std::fs::read_to_string(header).unwrap();
    text.lines()
        .find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("#define") && w.next() == Some(name))
                .then(|| w.next()?.parse().ok())
                .flatten()
        })
        .unwrap_or_else(|| panic!("{name} not in {}", header.display()))
}

#[test]
fn the_ds_cnn_suites_scratch_is_smaller_than_their_average_pool_needs() {
    // The test sizes its scratch as the largest of its conv, depthwise and
    // fully-connected layers' needs and leaves out the average pool, which
    // on a DSP build (Cortex-M4) needs 4 B per channel.
    for (suite, data) in [
        ("test_arm_ds_cnn_s_s8", "ds_cnn_s"),
        ("test_arm_ds_cnn_l_s8", "ds_cnn_l"),
    ] {
        let (report, _) = check_json(&unit_tests().join(format!("{suite}.elf")), &[]);
        let headers = tests_dir().join("TestData").join(data);
        let pool = std::fs::read_dir(&headers)
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| path_str(p).contains("average_pool_2d_config"))
            .unwrap();
        let prefix = {
            let text = std::fs::read_to_string(&pool).unwrap();
            let name = text
                .split_whitespace()
                .find(|w| w.starts_with("AVERAGE_POOL_2D_") && w.ends_with("_IN_CH"))
                .unwrap()
                .to_owned();
            name.trim_end_matches("IN_CH").to_owned()
        };
        let needed = define(&pool, &format!("{prefix}IN_CH")) * 4;
        let overruns: Vec<&Value> = findings(&report)
            .iter()
            .filter(|f| f["kind"] == "overrun")
            .collect();
        assert!(!overruns.is_empty(), "{suite}: {report}");
        for f in &overruns {
            let size = f["block"]["size"].as_u64().unwrap();
            assert!(
                size < needed,
                "{suite}: a {size}-byte scratch, {needed} needed"
            );
            let chain = f["chain"].as_array().unwrap();
            assert!(
                chain.iter().any(|c| c["function"] == "arm_avgpool_s8"),
                "{f}"
            );
        }
    }
}

#[test]
fn bugs_planted_in_a_copy_of_a_unit_test_are_found_at_their_lines() {
    const CALL: &str = "arm_cmsis_nn_status result = arm_convolve_s8(&ctx,";
    let call_lines = |source: &str| {
        let first = line_of(source, CALL);
        let last = source
            .lines()
            .skip(first as usize)
            .position(|l| l.contains(");"))
            .unwrap() as u64;
        first..=first + last + 1
    };
    // Which chain of the finding's block the planted line is in: where it
    // was allocated or freed. An uninitialised input byte is read where a
    // copy of it lands (the kernel's im2col scratch, as Valgrind reports
    // it at its use without --track-origins), so its block is not checked.
    let plants: [(&str, &str, &str, &str); 4] = [
        (
            "overrun",
            "ctx.buf = malloc(buf_size);",
            "ctx.buf = malloc(buf_size - 1); /* PLANTED */",
            "allocated",
        ),
        (
            "use-after-free",
            "ctx.size = 0;",
            "ctx.size = 0; free(ctx.buf); /* PLANTED */",
            "freed",
        ),
        (
            "uninitialised",
            "const int8_t *input_data = basic_input;",
            "int8_t *planted = malloc(sizeof(basic_input)); memcpy(planted, basic_input, sizeof(basic_input) - 1); /* PLANTED */\n    const int8_t *input_data = planted;",
            "",
        ),
        (
            "overrun",
            "int8_t output[BASIC_DST_SIZE] = {0};",
            "int8_t *output = malloc(BASIC_DST_SIZE - 1); /* PLANTED */",
            "allocated",
        ),
    ];
    for (kind, old, new, site) in plants {
        let dir = tempfile::tempdir().unwrap();
        let (elf, source) = planted_suite(dir.path(), |s| replace_first(s, old, new));
        let (report, status) = check_json(&elf, &[]);
        assert_eq!(status, 99, "{kind}: {report}");
        let planted = line_of(&source, "/* PLANTED */");
        let calls = call_lines(&source);
        let hit = findings(&report).iter().find(|f| {
            f["kind"] == kind
                && has_frame(&f["chain"], "test_arm_convolve_s8.c", calls.clone())
                && (site.is_empty()
                    || has_frame(
                        &f["block"][site],
                        "test_arm_convolve_s8.c",
                        planted..=planted,
                    ))
        });
        let hit = hit.unwrap_or_else(|| panic!("{new}: no {kind} in the kernel call: {report}"));
        // The innermost frame is the library's, not the test's.
        let first = &hit["chain"][0]["file"];
        assert!(
            !first.as_str().unwrap().ends_with("test_arm_convolve_s8.c"),
            "{hit}"
        );
    }
    // The copy as it is: nothing found, and the same verdict as the suite.
    let dir = tempfile::tempdir().unwrap();
    let (elf, _) = planted_suite(dir.path(), str::to_owned);
    let (report, status) = check_json(&elf, &[]);
    assert_eq!(
        (status, &report["memcheck"]["errors"]),
        (0, &Value::from(0)),
        "{report}"
    );
    let (suite, _) = check_json(&unit_tests().join("test_arm_convolve_s8.elf"), &[]);
    assert_eq!(report["unity"], suite["unity"]);
}
