//! The exit-code table of docs/user-guide.md ("Errors and exit codes") is a
//! specification: every example command in it is run here and must exit
//! with the code its row gives.

use crate::common;

use std::process::{Command, Stdio};

/// `(code, command)` of every row of the table.
fn rows() -> Vec<(i32, String)> {
    let guide = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/user-guide.md"),
    )
    .unwrap();
    let table = guide
        .split("## Errors and exit codes")
        .nth(1)
        .expect("the section exists");
    table
        .lines()
        .skip_while(|l| !l.starts_with("| code"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.split(" | ").collect();
            let code = cells[0].trim_start_matches("| ").trim().parse().unwrap();
            let example = cells.last().unwrap().trim_end_matches(" |").trim();
            (code, example.trim_matches('`').replace("\\|", "|"))
        })
        .collect()
}

#[test]
fn every_documented_example_exits_with_its_documented_code() {
    let rows = rows();
    assert!(rows.len() >= 5, "{rows:?}");
    let bin = env!("CARGO_BIN_EXE_memtrace");
    let suite = common::guest("cortex-m4", "suite");
    for (code, example) in rows {
        let command = example
            .replacen("memtrace", bin, 1)
            .replace("SUITE", common::path_str(&suite));
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!("set -o pipefail; {command}"))
            .env("CI", "1")
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdout(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{example}: {err}");
        assert_eq!(out.status.code(), Some(code), "{example}: {err}");
    }
}
