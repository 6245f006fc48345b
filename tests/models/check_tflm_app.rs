//! `memtrace check` on TFLM's own person_detection test, built unmodified
//! (`make -C harness-c tflm-apps`): each operator the interpreter invokes
//! is a layer, found from TFLM's node loop by symbol and read through the
//! program's DWARF. Its figures are set against a second, independent path
//! to the same model: `memtrace run person_detect.tflite`, memtrace's own
//! TFLM runner, whose layer windows come from TFLM's profiler hooks and
//! whose tensors it declares itself.

use crate::common;

use std::path::{Path, PathBuf};

use common::{json, memtrace, path_str, stderr, u};
use serde_json::Value;

/// A program of `make -C harness-c tflm-apps`.
pub fn tflm_app(name: &str) -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("harness-c/build/cortex-m4/tflm-apps")
        .join(name);
    assert!(
        p.exists(),
        "{} is missing: build TFLM's example tests first (`make -C harness-c tflm-apps`, or `make test`)",
        p.display()
    );
    p
}

fn person_detect_model() -> PathBuf {
    let p =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/models/tflm_person_detect.tflite");
    assert!(p.exists(), "{} is missing", p.display());
    p
}

/// `memtrace check --format json PROGRAM EXTRA…`: the report and the exit
/// status.
pub fn check(program: &Path, extra: &[&str]) -> (Value, i32) {
    let mut args = vec!["check", "--format", "json", path_str(program)];
    args.extend_from_slice(extra);
    let out = memtrace(&args);
    assert!(out.status.code().is_some(), "{}", stderr(&out));
    (json(&out), out.status.code().unwrap_or(-1))
}

/// `(role, size)` of every buffer of a layer, sorted: the two paths declare
/// them in different orders (and name them differently: the runner reads
/// the tensors' names from the model).
pub fn buffer_sizes(layer: &Value) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = layer["buffers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["role"].as_str().unwrap().to_owned(), u(&b["size"])))
        .collect();
    v.sort();
    v
}

/// Loads, stores and updates of every buffer, by role and size, sorted.
pub fn buffer_counts(layer: &Value) -> Vec<(String, u64, u64, u64, u64)> {
    let mut v: Vec<_> = layer["buffers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["role"].as_str().unwrap().to_owned(),
                u(&b["size"]),
                u(&b["loads"]),
                u(&b["stores"]),
                u(&b["updates"]),
            )
        })
        .collect();
    v.sort();
    v
}

/// A layer's O_s figures: the pair's sizes and forward O_s, then the
/// reverse sweep's.
pub fn overlap(layer: &Value) -> (Vec<u64>, Vec<u64>) {
    let o = &layer["overlap"];
    let get = |keys: &[&str]| keys.iter().map(|k| u(&o[*k])).collect();
    (
        get(&[
            "input_bytes",
            "output_bytes",
            "monotone_bytes",
            "exact_bytes",
        ]),
        get(&["reverse_monotone_bytes", "reverse_exact_bytes"]),
    )
}

/// `check` on `program`, TFLM's person_detection test built on `kernels`
/// (`tflm` reference or `cmsis-nn`), against `memtrace run` of the same
/// model on the runner with the same kernels.
fn person_detection_is_the_runners(program: &str, kernels: &str) {
    let program = tflm_app(program);
    let (report, status) = check(&program, &["--operators"]);
    // The program's own verdict, reproduced.
    assert_eq!(status, 0, "{report}");
    assert_eq!(report["exit_status"], 0);
    let stdout = report["stdout"].as_str().unwrap();
    assert!(stdout.contains("~~~ALL TESTS PASSED~~~"), "{stdout}");
    assert_eq!(report["memcheck"]["errors"], 0, "{report}");

    let tflm = &report["tflm"];
    assert!(tflm["missing"].is_null(), "{tflm}");
    let invocations = tflm["invocations"].as_array().unwrap();
    // The test invokes the model twice: a person, then no person.
    assert_eq!(invocations.len(), 2, "{tflm}");
    let operators = tflm["operators"].as_array().unwrap();

    // The same model on memtrace's runner, with the test's first image as
    // its input and the test's arena size.
    let input = tflm_app("person_image.bin");
    let out = memtrace([
        "run",
        path_str(&person_detect_model()),
        "--format",
        "json",
        "--kernels",
        kernels,
        "--input",
        path_str(&input),
        "--arena-bytes",
        "139264",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let run = json(&out);
    // The runner's own window that copies the input in is no operator.
    let run_layers: Vec<&Value> = run["layers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["op"] != "load_input")
        .collect();
    assert_eq!(u(&run["tflm"]["operators"]) as usize, run_layers.len());

    for (n, inv) in invocations.iter().enumerate() {
        let ops: Vec<&Value> = operators
            .iter()
            .filter(|o| u(&o["invocation"]) as usize == n)
            .collect();
        assert_eq!(ops.len(), run_layers.len(), "invocation {n}: {tflm}");
        assert_eq!(u(&inv["operators"]) as usize, ops.len());
        for (k, (op, theirs)) in ops.iter().zip(&run_layers).enumerate() {
            same_operator(
                op,
                theirs,
                &format!("invocation {n}, operator {k} ({})", op["op"]),
            );
            assert_eq!(u(&op["node"]) as usize, k);
        }
        same_arena(&inv["arena"], &run["tflm"]);
    }
    same_scratch_sizing(tflm, &run["tflm"]["scratch_sizing"], kernels);
}

/// Scratch from the shapes: check reads the model from the program's own
/// array and each node's requests from its prepare; the runner from the
/// file and its own requests. One model (both invocations run it), every
/// operator the same kernel, request and need, and none short.
fn same_scratch_sizing(tflm: &Value, runner: &Value, kernels: &str) {
    let models = tflm["scratch_sizing"].as_array().unwrap();
    assert_eq!(models.len(), 1, "{tflm}");
    let m = &models[0];
    assert!(
        m["model"]
            .as_str()
            .unwrap()
            .starts_with("`g_person_detect_model_data`"),
        "{m}"
    );
    assert_eq!(m["kernels"], kernels, "{m}");
    assert_eq!(tflm["scratch_short"], 0, "{m}");
    let ours = m["sizing"]["operators"].as_array().unwrap();
    let theirs = runner["operators"].as_array().unwrap();
    assert_eq!(ours.len(), theirs.len(), "{m}");
    for (o, t) in ours.iter().zip(theirs) {
        for field in [
            "name",
            "kernel",
            "requested_bytes",
            "needed_bytes",
            "short_bytes",
        ] {
            assert_eq!(o[field], t[field], "{field}: {o} vs {t}");
        }
    }
    // The CMSIS-NN build asks for scratch and it is sized: the check can fail.
    if kernels == "cmsis-nn" {
        assert!(
            ours.iter()
                .any(|o| u(&o["requested_bytes"]) > 0 && !o["needed_bytes"].is_null()),
            "{m}"
        );
    }
}

/// One operator: the same op and buffers (scratch included), the same
/// O_s, and every buffer's accesses to the count.
fn same_operator(op: &Value, theirs: &Value, what: &str) {
    let ours = &op["layer"];
    assert_eq!(op["op"], theirs["op"], "{what}");
    assert_eq!(op["violates"], false, "{op}");
    // The operators the runner attributes to CMSIS-NN (by the PCs that
    // ran, through the DWARF) are those that entered its API inside their
    // layer (its entries hooked): inner calls, no layers of their own.
    let inner = op["inner_calls"].as_array().unwrap();
    assert_eq!(
        !inner.is_empty(),
        theirs["library"] == "CMSIS-NN",
        "{what}: {op}"
    );
    assert_eq!(buffer_sizes(ours), buffer_sizes(theirs), "{what}");
    let ((forward, reverse), (their_forward, their_reverse)) = (overlap(ours), overlap(theirs));
    assert_eq!(forward, their_forward, "O_s of {what}: {ours} vs {theirs}");
    // Every access of TFLM's kernels is the same on both paths, to the
    // count. Not RESHAPE's: TFLM copies its tensor with `memcpy`, the C
    // library's — the runner links memtrace's run-time `memcpy` (one byte
    // at a time, forward: 2 loads and 2 stores for its 2 bytes), the
    // program newlib's (one halfword load and store). The forward O_s
    // agree (2 B of 2 B); the reverse sweep's do not (0 B on the runner,
    // 2 B in the program: newlib reads both bytes before it writes either).
    if theirs["library"] == "harness-c" {
        assert_eq!(op["op"], "RESHAPE", "{what}");
        assert_eq!(theirs["kernel"], "memcpy", "{what}");
        assert_eq!((&reverse, &their_reverse), (&vec![2, 2], &vec![0, 0]));
        return;
    }
    assert_eq!(reverse, their_reverse, "reverse O_s of {what}");
    assert_eq!(buffer_counts(ours), buffer_counts(theirs), "{what}");
}

/// TFLM's arena, read from the program's allocator when the loop
/// returned, against the runner's. The head is the same plan. The tail is
/// the same allocations, aligned down from the arena's end: the runner's
/// region is 16-aligned, so its arena ends `arena_bytes` mod 16 past a
/// 16-byte boundary, the program's where the linker put its array. From
/// the first 16-aligned allocation on, both tails are aligned alike, so
/// they differ by that first allocation's padding: a difference of less
/// than 16 B, congruent to the difference of the two ends modulo 16 (none
/// when they end alike).
pub fn same_arena(arena: &Value, runner: &Value) {
    assert_eq!(
        u(&arena["head_bytes"]),
        u(&runner["head_bytes"]),
        "{arena} vs {runner}"
    );
    let end = u(&arena["start"]) + u(&arena["arena_bytes"]);
    let runner_end = u(&runner["arena_bytes"]);
    let tail = u(&arena["tail_bytes"]) as i64 - u(&runner["tail_bytes"]) as i64;
    assert!(
        tail.abs() < 16 && tail.rem_euclid(16) == (end as i64 - runner_end as i64).rem_euclid(16),
        "tail {arena} vs {runner}: the arena ends at {end:#x}"
    );
    assert_eq!(
        u(&arena["arena_used_bytes"]) as i64 - u(&runner["arena_used_bytes"]) as i64,
        tail
    );
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn person_detection_unmodified_gives_the_runners_operators_os_and_arena() {
    // Its `tensor_arena` ends on a 16-byte boundary: the tails are equal.
    person_detection_is_the_runners("person_detection_test.elf", "tflm");
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn person_detection_on_cmsis_nn_gives_the_runners_operators_and_scratch() {
    // TFLM's CMSIS-NN kernels ask for scratch buffers (the average pool's,
    // 1024 B): found from the requests made while they were prepared, they
    // are the runner's, to the access.
    person_detection_is_the_runners("person_detection_test_cmsis.elf", "cmsis-nn");
}

#[test]
fn a_program_without_tflm_says_why_it_has_no_operators() {
    let program = common::unit_tests::unit_tests().join("test_arm_convolve_s8.elf");
    let out = memtrace(["check", "--operators", path_str(&program)]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("no TFLM operators to trace")
            && err.contains("tflite::MicroInterpreterGraph::InvokeSubgraph(int)"),
        "{err}"
    );
    // By default the JSON says it, and the program runs as before.
    let (report, status) = check(&program, &[]);
    assert_eq!(status, 0, "{report}");
    let missing = report["tflm"]["missing"].as_str().unwrap();
    assert!(missing.contains("does not link TFLM"), "{missing}");
}

/// The number in the program's line `[RecordingMicroAllocator] Arena
/// allocation <what> N bytes`.
fn recorded(stdout: &str, what: &str) -> u64 {
    let prefix = format!("[RecordingMicroAllocator] Arena allocation {what} ");
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no `{prefix}` line in {stdout}"));
    line.trim_end_matches(" bytes").parse().unwrap()
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn hello_world_reads_the_arena_its_recording_allocator_prints() {
    let program = tflm_app("hello_world_test.elf");
    let (report, status) = check(&program, &["--operators"]);
    assert_eq!(status, 0, "{report}");
    let stdout = report["stdout"].as_str().unwrap();
    assert!(stdout.contains("~~~ALL TESTS PASSED~~~"), "{stdout}");
    let tflm = &report["tflm"];
    // One Invoke() under the RecordingMicroInterpreter, then four each on
    // the float and the int8 model: three FULLY_CONNECTED each.
    let invocations = tflm["invocations"].as_array().unwrap();
    assert_eq!(invocations.len(), 9, "{tflm}");
    for op in tflm["operators"].as_array().unwrap() {
        assert_eq!(op["op"], "FULLY_CONNECTED", "{op}");
        assert_eq!(op["violates"], false, "{op}");
    }
    // TFLM's own account of its arena (RecordingMicroAllocator's
    // PrintAllocations, after the first Invoke()) is what memtrace read
    // from the allocator's fields.
    let arena = &invocations[0]["arena"];
    assert_eq!(u(&arena["arena_used_bytes"]), recorded(stdout, "total"));
    assert_eq!(u(&arena["head_bytes"]), recorded(stdout, "head"));
    assert_eq!(u(&arena["tail_bytes"]), recorded(stdout, "tail"));
}

/// TFLM's own kernel tests of the operators memtrace plans, built
/// unmodified (`make -C harness-c tflm-kernel-tests`), each run under
/// `check`: the verdict the program prints itself and its exit status come
/// back unchanged, and memcheck finds nothing in them. They run their
/// kernels through `KernelRunner`, not an interpreter, so `check` traces no
/// operator and says why.
#[test]
fn tflms_own_kernel_tests_pass_under_check_as_they_do_natively() {
    let dir = tflm_app("kernels");
    let mut programs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "elf"))
        .collect();
    programs.sort();
    assert!(programs.len() >= 11, "{programs:?}");
    for program in &programs {
        let (report, status) = check(program, &[]);
        let name = program.display();
        // micro_test_v2.h's own verdict, in the program's own output.
        let stdout = report["stdout"].as_str().unwrap();
        assert!(
            stdout.contains("~~~ALL TESTS PASSED~~~"),
            "{name}: {stdout}"
        );
        assert_eq!(report["end"]["kind"], "exit", "{name}");
        assert_eq!(report["exit_status"], 0, "{name}");
        assert_eq!(status, 0, "{name}");
        assert_eq!(
            report["memcheck"]["errors"], 0,
            "{name}: {:#}",
            report["memcheck"]
        );
        let missing = report["tflm"]["missing"].as_str().unwrap_or_default();
        assert!(
            missing.contains("MicroInterpreter"),
            "{name}: {:#}",
            report["tflm"]
        );
        assert!(u(&report["instructions"]) > 10_000, "{name}");
    }
}
