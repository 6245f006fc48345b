//! Every subcommand that prints to stdout behaves like a Unix tool when
//! stdout goes away: a reader that stops early (`| head -c1`) ends it quietly
//! (no panic, exit 0), and a full device (`> /dev/full`) is a clean error
//! naming stdout, exit 1.

use crate::common;

use std::io::Read;
use std::process::{Command, Stdio};

use common::{guest, path_str};

/// Each subcommand with arguments that make it print to stdout.
fn commands() -> Vec<Vec<String>> {
    let suite = guest("cortex-m4", "suite");
    let suite = path_str(&suite).to_owned();
    let dir = std::env::temp_dir().join(format!("memtrace-stdout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let baseline = dir.join("baseline.json");
    let made = common::memtrace([
        "table",
        &suite,
        "--out",
        path_str(&baseline),
        "--no-builtin",
        "--grid",
        "op=relu,input=1x4x4x2",
    ]);
    assert!(made.status.success(), "{}", common::stderr(&made));
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    vec![
        s(&["run", &suite, "--layer", "conv2"]),
        s(&["run", &suite, "--layer", "conv2", "--format", "json"]),
        s(&["validate", &suite, "--grid", "op=relu,input=1x4x4x{2,3}"]),
        s(&["regress", path_str(&baseline), &suite]),
        s(&["plan", "zoo:sakr_cifar10"]),
        s(&["verify", "zoo:sakr_cifar10", "--planner", "tflm-greedy"]),
        s(&["cold", path_str(&common::tfmicro_model("hello_world"))]),
        s(&["zoo", "list"]),
        s(&["bench", "--no-valgrind", "--no-rss", "--repeat", "1"]),
    ]
}

#[test]
fn a_reader_that_stops_early_ends_every_command_quietly() {
    for args in commands() {
        let mut child = Command::new(env!("CARGO_BIN_EXE_memtrace"))
            .args(&args)
            .env("CI", "1")
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = [0u8; 1];
        let mut out = child.stdout.take().unwrap();
        out.read_exact(&mut first).unwrap();
        drop(out); // `head -c1` exits: the pipe has no reader any more
        let done = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&done.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(done.status.code(), Some(0), "{args:?}: {err}");
    }
}

#[test]
fn a_full_stdout_is_a_clean_error() {
    for args in commands() {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let done = Command::new(env!("CARGO_BIN_EXE_memtrace"))
            .args(&args)
            .env("CI", "1")
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdout(full)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&done.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(done.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("writing to stdout") || err.contains("writing the report"),
            "{args:?}: {err}"
        );
        assert!(err.contains("No space left on device"), "{args:?}: {err}");
    }
}
