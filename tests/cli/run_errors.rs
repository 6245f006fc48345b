//! Every kind of bad input gets a clear message naming what and where, a
//! non-zero exit code, no panic and no half-written output file.

use crate::common;

use std::path::Path;

use common::*;

/// Runs `memtrace ARGS`, expects failure, returns stderr.
fn fails(args: &[&str]) -> String {
    let out = memtrace(args);
    let err = stderr(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "memtrace {args:?} should fail: {err}"
    );
    assert!(
        !err.contains("panicked"),
        "memtrace {args:?} panicked: {err}"
    );
    err
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn a_file_that_is_not_an_elf_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kernel.elf");
    std::fs::write(&file, "this is not an ELF").unwrap();
    let err = fails(&["run", p(&file)]);
    assert!(
        err.contains(
            "kernel.elf is neither an ELF program nor a .tflite model (first bytes 74 68 69 73"
        ),
        "{err}"
    );
}

#[test]
fn a_truncated_elf_is_malformed_not_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cut.elf");
    let bytes = std::fs::read(guest("cortex-m4", "suite")).unwrap();
    std::fs::write(&file, &bytes[..200]).unwrap();
    let err = fails(&["run", p(&file)]);
    assert!(err.contains("cut.elf"), "{err}");
    assert!(
        err.contains("malformed ELF") || err.contains("not an ELF"),
        "{err}"
    );
}

/// The first relocatable object the harness build left behind.
fn an_object_file(dir: &Path) -> Option<std::path::PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if let Some(found) = an_object_file(&path) {
                return Some(found);
            }
        } else if path.extension().is_some_and(|e| e == "o") {
            return Some(path);
        }
    }
    None
}

#[test]
fn an_object_file_is_said_to_be_not_linked() {
    // A Cortex-M object compiled but not linked: no entry point yet, so the
    // message is about linking, not about an A32 entry point.
    let build = guest("cortex-m4", "suite").parent().unwrap().join("obj");
    let object = an_object_file(&build).expect("the harness build keeps its objects");
    let err = fails(&["run", p(&object)]);
    assert!(err.contains("not linked"), "{err}");
    assert!(!err.contains("A32"), "{err}");
}

#[test]
fn an_unsupported_architecture_is_rejected() {
    // The Cortex-M4 suite relabelled as MIPS (e_machine = 8).
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mips.elf");
    let mut bytes = std::fs::read(guest("cortex-m4", "suite")).unwrap();
    bytes[18..20].copy_from_slice(&8u16.to_le_bytes());
    std::fs::write(&file, &bytes).unwrap();
    let err = fails(&["run", p(&file)]);
    assert!(err.contains("unsupported architecture"), "{err}");
}

#[test]
fn a_binary_without_the_protocol_is_explained() {
    let err = fails(&["run", p(&guest("cortex-m4", "no-protocol"))]);
    assert!(err.contains("no `memtrace_port` symbol"), "{err}");
    assert!(err.contains("built without memtrace.h"), "{err}");
}

#[test]
fn an_unknown_layer_lists_the_layers_that_exist() {
    let err = fails(&["run", p(&guest("cortex-m4", "suite")), "--layer", "conv9"]);
    assert!(err.contains("unknown --layer `conv9`"), "{err}");
    assert!(err.contains("conv1, dw1, conv2, dw2, conv3"), "{err}");
}

#[test]
fn a_guest_fault_names_address_pc_function_and_line() {
    for target in ["cortex-m4", "x86_64"] {
        let err = fails(&["run", p(&guest(target, "fault"))]);
        assert!(err.contains("guest fault in layer `fault`"), "{err}");
        assert!(err.contains("unmapped address 0x70000000"), "{err}");
        assert!(err.contains("`read_unmapped`"), "{err}");
        // The calls that led there, unwound from the guest's stack.
        assert!(err.contains("called from `main` (guests/fault.c:"), "{err}");
        assert!(err.contains("guests/fault.c:"), "{err}");
    }
}

#[test]
fn a_runaway_guest_hits_the_instruction_budget() {
    let err = fails(&[
        "run",
        p(&guest("cortex-m4", "spin")),
        "--max-instructions",
        "200000",
    ]);
    assert!(
        err.contains("instruction budget of 200000 exceeded"),
        "{err}"
    );
    assert!(err.contains("guests/spin.c:"), "{err}");
}

#[test]
fn protocol_violations_are_named_with_the_guest_pc() {
    let cases = [
        ("bad-protocol", "LAYER_END without LAYER_BEGIN"),
        ("overlap-decl", "overlaps buffer `input`"),
        ("proto-nested-begin", "LAYER_BEGIN while layer"),
        ("proto-bad-role", "unknown role"),
        ("proto-long-name", "not NUL-terminated within 256 bytes"),
        ("proto-fifo-leftover", "FIFO words but"),
        ("proto-fifo-missing", "FIFO words but"),
        ("proto-duplicate-id", "declared twice"),
    ];
    for (elf, message) in cases {
        let err = fails(&["run", p(&guest("cortex-m4", elf))]);
        assert!(err.contains("protocol violation"), "{elf}: {err}");
        assert!(
            err.contains(message),
            "{elf}: expected `{message}` in {err}"
        );
        assert!(err.contains("at pc 0x"), "{elf}: {err}");
        // The guest line that issued the command (memtrace.h's inline
        // wrapper, inlined into it), not the out-of-line memtrace_signal.
        assert!(err.contains(".c:"), "{elf}: no guest file:line in {err}");
        assert!(!err.contains("`memtrace_signal`"), "{elf}: {err}");
    }
}

#[test]
fn a_bad_job_spec_says_what_is_wrong() {
    let suite = guest("cortex-m4", "suite");
    let err = fails(&["run", p(&suite), "--job", "op=conv3d,input=1x4x4x1"]);
    assert!(
        err.contains("bad --job") && err.contains("unknown op `conv3d`"),
        "{err}"
    );
    let err = fails(&[
        "run",
        p(&suite),
        "--job",
        "op=conv2d,input=1x4x4x3,filter=8x3x3x2",
    ]);
    assert!(err.contains("does not match input depth 3"), "{err}");
}

#[test]
fn bad_cli_arguments_exit_with_a_usage_error() {
    let out = memtrace(["run", "--format", "yaml", "x.elf"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("invalid value 'yaml'"));
}

#[test]
fn an_unwritable_output_fails_before_tracing_and_leaves_nothing() {
    let err = fails(&[
        "run",
        p(&guest("cortex-m4", "suite")),
        "--events",
        "/nonexistent-dir/trace.parquet",
    ]);
    assert!(
        err.contains("cannot write /nonexistent-dir/trace.parquet"),
        "{err}"
    );
    assert!(!Path::new("/nonexistent-dir").exists());
}

#[test]
fn a_failed_trace_writes_no_partial_output() {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.parquet");
    let plot = dir.path().join("trace.png");
    fails(&[
        "run",
        p(&guest("cortex-m4", "fault")),
        "--events",
        p(&events),
        "--plot",
        p(&plot),
    ]);
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "files left behind: {left:?}");
}

#[test]
fn a_well_formed_linux_program_is_unsupported_not_malformed() {
    // This test's own binary: a real, dynamically linked Linux executable.
    let me = std::env::current_exe().unwrap();
    let err = fails(&["run", p(&me)]);
    assert!(err.contains("unsupported ELF"), "{err}");
    assert!(err.contains("dynamically linked"), "{err}");
    assert!(!err.contains("malformed"), "{err}");
}

#[test]
fn a_number_too_large_for_a_job_is_said_to_be_too_large() {
    let suite = guest("cortex-m4", "suite");
    let err = fails(&["run", p(&suite), "--job", "op=relu,input=4294967297"]);
    assert!(err.contains("`4294967297` is too large"), "{err}");
    let err = fails(&["run", p(&suite), "--job", "op=relu,input=-3"]);
    assert!(err.contains("is not a non-negative integer"), "{err}");
}

#[test]
fn a_full_disk_while_writing_a_picture_is_a_clean_error() {
    // A .png name that leads to /dev/full: every write fails with ENOSPC.
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("full.png");
    std::os::unix::fs::symlink("/dev/full", &link).unwrap();
    let suite = guest("cortex-m4", "suite");
    let err = fails(&["run", p(&suite), "--layer", "conv2", "--plot", p(&link)]);
    assert!(err.contains("full.png"), "{err}");
    assert!(err.contains("No space left on device"), "{err}");
    assert!(
        !err.contains("ImageError") && !err.contains("Custom {"),
        "{err}"
    );
}

/// A job the guest rejects comes back with the guest's own reason
/// (`memtrace_exit_reason`), not just its exit code.
#[test]
fn a_job_the_guest_rejects_says_why() {
    for arch in ["cortex-m4", "x86_64"] {
        let elf = guest(arch, "suite");
        let err = fails(&[
            "run",
            p(&elf),
            "--job",
            "op=conv2d,dtype=int8,input=1x4000x4000x8,filter=8x3x3x8",
        ]);
        assert!(err.contains("exited with code 2"), "{arch}: {err}");
        assert!(
            err.contains("do not fit the suite's arena"),
            "{arch}: no reason given: {err}"
        );
    }
}
