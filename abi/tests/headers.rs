//! The guest's C headers and the Rust ABI must agree on every constant: a
//! word index, command or code that differs between `harness-c/include/*.h`
//! and `memtrace-abi` would make host and guest misread each other silently.
//! This test reads the headers as text (`#define NAME VALUE` and enum entries
//! `NAME = VALUE,`) and compares both ways: every header constant of the
//! ABI's namespaces has a Rust twin of the same value, and every Rust
//! constant is in the header.

use std::collections::BTreeMap;
use std::path::Path;

use memtrace_abi::{dtype, op, protocol, runner, spec, symbols};

/// The text of `file` under `harness-c/`.
fn harness_text(file: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../harness-c")
        .join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `NAME -> value` of the `#define`s and enum entries of a header in
/// `harness-c/include/`.
fn header_constants(file: &str) -> BTreeMap<String, i64> {
    constants_of(&harness_text(&format!("include/{file}")))
}

/// `NAME -> value` of the `#define`s and enum entries of C text.
fn constants_of(text: &str) -> BTreeMap<String, i64> {
    let mut found = BTreeMap::new();
    for line in text.lines() {
        let code = line.split("/*").next().unwrap_or("").trim();
        if let Some(rest) = code.strip_prefix("#define ") {
            let mut parts = rest.split_whitespace();
            if let (Some(name), Some(value)) = (parts.next(), parts.next()) {
                if let Some(v) = parse_c_integer(value) {
                    found.insert(name.to_owned(), v);
                }
            }
            continue;
        }
        // Enum entries, one or several on a line: `A = 1, B = 2,`.
        let body = code.rsplit('{').next().unwrap_or("");
        for entry in body.split([',', '}']) {
            if let Some((name, value)) = entry.split_once('=') {
                let name = name.trim();
                let is_identifier =
                    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                if let (true, Some(v)) = (is_identifier, parse_c_integer(value.trim())) {
                    found.insert(name.to_owned(), v);
                }
            }
        }
    }
    found
}

/// A C integer literal (decimal or hex, optional `u` suffix).
fn parse_c_integer(text: &str) -> Option<i64> {
    let t = text.trim_end_matches(['u', 'U']);
    match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => i64::from_str_radix(hex, 16).ok(),
        None => t.parse().ok(),
    }
}

/// Checks one header against the Rust tables; `prefixes` are the header
/// namespaces the ABI owns.
fn agree(file: &str, prefixes: &[&str], tables: &[&[(&str, i64)]]) {
    let header = header_constants(file);
    let rust: BTreeMap<&str, i64> = tables.iter().flat_map(|t| t.iter().copied()).collect();
    let mut problems = Vec::new();
    for (name, value) in &rust {
        match header.get(*name) {
            Some(h) if h == value => {}
            Some(h) => problems.push(format!("{name}: header {h}, Rust {value}")),
            None => problems.push(format!("{name}: in Rust ({value}) but not in {file}")),
        }
    }
    for (name, value) in &header {
        let owned = prefixes.iter().any(|p| name.starts_with(p));
        if owned && !rust.contains_key(name.as_str()) {
            problems.push(format!(
                "{name}: in {file} ({value}) but not in memtrace-abi"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "{file} and memtrace-abi disagree:\n{}",
        problems.join("\n")
    );
}

#[test]
fn memtrace_h_matches_the_protocol_module() {
    agree(
        "memtrace.h",
        &["MEMTRACE_CMD_", "MEMTRACE_ROLE_", "MEMTRACE_MAX_"],
        &[protocol::MEMTRACE_H],
    );
}

#[test]
fn memtrace_job_h_matches_the_spec_module() {
    agree(
        "memtrace_job.h",
        &["MEMTRACE_JOB_", "JOB_", "OP_", "DTYPE_"],
        &[
            spec::JOB_HEADER,
            spec::JOB_LAYOUT,
            op::JOB_OP_CODES,
            dtype::JOB_DTYPE_CODES,
        ],
    );
}

#[test]
fn memtrace_tflm_h_matches_the_tflm_module() {
    agree(
        "memtrace_tflm.h",
        &["MEMTRACE_TFLM_", "TFLM_"],
        &[
            runner::TFLM_HEADER,
            runner::TFLM_LAYOUT,
            runner::TFLM_CODES,
            runner::TFLM_STORAGE_LAYOUT,
            runner::TFLM_STORAGE_CODES,
        ],
    );
}

/// Whether the harness defines `symbol`: a linker-script assignment
/// `symbol = .` or a C definition (`type symbol[...]`, `type symbol(...)`
/// outside `extern` declarations and comments).
fn defines(texts: &[(String, String)], symbol: &str) -> bool {
    texts.iter().any(|(file, text)| {
        if file.ends_with(".ld") {
            return text.contains(&format!("{symbol} = ."));
        }
        text.lines().map(str::trim).any(|line| {
            let code = !line.starts_with("extern")
                && !line.starts_with('*')
                && !line.starts_with("//")
                && !line.starts_with("/*");
            let declared = [format!(" {symbol}["), format!(" {symbol}(")]
                .iter()
                .any(|d| line.contains(d.as_str()));
            code && declared && !line.contains(&format!("{symbol}[w]"))
        })
    })
}

#[test]
fn guest_symbols_are_defined_by_the_harness() {
    let files = [
        "rt/cortex-m4/memtrace.ld",
        "rt/x86_64/memtrace.ld",
        "rt/cortex-m4/memtrace-tflm.ld",
        "rt/x86_64/memtrace-tflm.ld",
        "include/memtrace.h",
        "rt/port.c",
        "suite/main.cc",
        "tflm/runner.cc",
    ];
    let texts: Vec<(String, String)> = files
        .iter()
        .map(|f| (f.to_string(), harness_text(f)))
        .collect();
    let missing: Vec<&str> = symbols::ALL
        .iter()
        .chain(runner::symbols::ALL.iter())
        .copied()
        .filter(|s| !defines(&texts, s))
        .collect();
    assert!(missing.is_empty(), "not defined in harness-c: {missing:?}");
    // The check can fail.
    assert!(!defines(&texts, "memtrace_no_such_symbol"));
}

#[test]
fn the_parser_reads_both_forms_and_a_changed_value_is_caught() {
    // The check must be able to fail: a value the header does not have.
    let header = header_constants("memtrace_tflm.h");
    assert_eq!(header.get("MEMTRACE_TFLM_WORDS"), Some(&32));
    assert_eq!(header.get("MEMTRACE_TFLM_MAGIC"), Some(&0x5446_4C31));
    // An enum entry with a comment after it.
    assert_eq!(header.get("TFLM_ARENA_USED"), Some(&9));
    // Several entries on one line.
    let one_line = constants_of("enum { A_ONE = 1, A_TWO = 2, A_SIX = 0x6 };");
    assert_eq!(one_line.get("A_TWO"), Some(&2));
    assert_eq!(one_line.get("A_SIX"), Some(&6));
    let wrong: &[(&str, i64)] = &[("TFLM_STAGE", 1)];
    let caught = std::panic::catch_unwind(|| agree("memtrace_tflm.h", &[], &[wrong]));
    assert!(caught.is_err());
}

/// The runner's buffer ids (`kIdOutputs`, `kIdScratch` of
/// `harness-c/tflm/runner.cc`, constants of the runner alone) are the ones
/// the host attributes a window's buffers by.
#[test]
fn tflm_runner_buffer_ids_match_the_tflm_module() {
    let text = harness_text("tflm/runner.cc");
    let value = |name: &str| -> i64 {
        let line = text
            .lines()
            .find(|l| l.contains("constexpr") && l.contains(&format!(" {name} =")))
            .unwrap_or_else(|| panic!("runner.cc defines no `{name}`"));
        let v = line.split('=').nth(1).unwrap().trim().trim_end_matches(';');
        parse_c_integer(v).unwrap_or_else(|| panic!("`{line}`"))
    };
    assert_eq!(value("kIdOutputs"), i64::from(runner::BUFFER_ID_OUTPUTS));
    assert_eq!(value("kIdScratch"), i64::from(runner::BUFFER_ID_SCRATCH));
}
