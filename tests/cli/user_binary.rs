//! A user's own CMSIS-NN binary, built from docs/protocol.md section 11
//! alone, and the four places where the first such user got stuck:
//!
//! 1. no link recipe (`undefined reference to 'memtrace_rt_exit'`): the
//!    documented line links a program with `libmemtrace_rt.a` and nothing
//!    else of memtrace's;
//! 2. `MEMTRACE_IMPLEMENTATION`, as the docs used to say, collided with the
//!    run-time (`multiple definition of 'memtrace_signal'`): programs with
//!    and without it link and run;
//! 3. without `-fno-tree-loop-distribute-patterns` a shim `memcpy` called
//!    itself and the report said `write to unmapped address`: the library's
//!    shims cannot call themselves whatever flags compile them, and a memcpy
//!    that does is reported as a stack overflow;
//! 4. `--strict` failed correct CMSIS-NN code on the expected O_s MISMATCH:
//!    it gates the memory contract only, `--strict-os` the cross-checks.
//!
//! The worked example (`harness-c/examples/user_network.c`, conv ->
//! depthwise -> fully connected -> softmax on CMSIS-NN) is built by make
//! with the commands the doc shows, and its traced O_s are cross-checked
//! against `suite-cmsis.elf` running the same layer configurations. Its
//! buggy sibling (`guests/user_bugs.c`) gets its stray writes named by
//! buffer, distance and the calls up to the user's own function.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::*;
use serde_json::Value;

const TARGETS: [&str; 2] = ["cortex-m4", "x86_64"];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn harness() -> PathBuf {
    repo().join("harness-c")
}

/// `make -C harness-c ARGS`, which must succeed; its output.
fn make(args: &[&str]) -> String {
    make_harness(args)
}

/// The run-time library and the two user programs, built once through
/// harness-c's Makefile (the tests of this file run in parallel).
fn built() -> &'static str {
    static BUILT: OnceLock<String> = OnceLock::new();
    BUILT.get_or_init(|| {
        let mut goals = vec!["rt".to_owned()];
        for t in TARGETS {
            for elf in ["user-network", "user-bugs"] {
                goals.push(format!("build/{t}/{elf}.elf"));
            }
        }
        let goals: Vec<&str> = goals.iter().map(String::as_str).collect();
        make(&goals)
    })
}

fn docs() -> String {
    std::fs::read_to_string(repo().join("docs/protocol.md")).unwrap()
}

/// The fenced block that follows the line containing `marker`.
fn block_after(text: &str, marker: &str) -> String {
    let start = text
        .find(marker)
        .unwrap_or_else(|| panic!("docs/protocol.md has no `{marker}`"));
    let rest = &text[start..];
    let open = rest.find("```").expect("a fenced block");
    let body = &rest[open..];
    let body = &body[body.find('\n').unwrap() + 1..];
    body[..body.find("```").expect("its end")].to_owned()
}

/// The CMSIS-NN checkout harness-c's Makefile uses by default.
fn cmsis_nn_dir() -> PathBuf {
    repo()
        .join("../shared/third_party/cmsis-nn")
        .canonicalize()
        .expect("CMSIS-NN beside the repository")
}

#[test]
fn the_example_in_the_docs_is_the_file_the_tests_build() {
    let file = std::fs::read_to_string(harness().join("examples/user_network.c")).unwrap();
    let shown = block_after(&docs(), "<!-- user_network.c:");
    assert!(
        shown == file,
        "docs/protocol.md section 11 shows another user_network.c than harness-c/examples/: \
         copy the file into the doc"
    );
}

/// What `make -n -B` would run to build `elf`, with the CMSIS-NN path
/// written as the doc writes it.
fn recipe(elf: &str) -> Vec<String> {
    let dry = make(&["-n", "-B", elf]);
    let cmsis = cmsis_nn_dir();
    dry.lines()
        .filter(|l| l.contains("user-network"))
        .map(|l| {
            l.split(' ')
                .map(|word| cmsis_written_as_the_doc(word, &cmsis))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

#[test]
#[cfg_attr(no_cmsis, ignore = "CMSIS-NN guests not built: set CMSIS_NN_DIR")]
fn the_documented_commands_are_the_ones_make_runs() {
    let docs = docs();
    let commands = block_after(&docs, "<!-- user_network commands");
    let compilers: Vec<&str> = commands
        .lines()
        .filter(|l| l.starts_with("arm-none-eabi-gcc"))
        .collect();
    assert_eq!(compilers.len(), 2, "{commands}");
    let made = recipe("build/cortex-m4/user-network.elf");
    for line in &compilers {
        assert!(
            made.iter().any(|m| m == line),
            "docs/protocol.md shows\n  {line}\nbut make runs\n  {}",
            made.join("\n  ")
        );
    }
    // The one-line recipes of the table, for both targets: the same
    // commands with the example's file names.
    for (target, compiler) in [("cortex-m4", "arm-none-eabi-gcc"), ("x86_64", "gcc")] {
        let made = recipe(&format!("build/{target}/user-network.elf"));
        let row = docs
            .lines()
            .find(|l| l.starts_with(&format!("| {} |", table_name(target))))
            .unwrap_or_else(|| panic!("no table row for {target}"));
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let (compile, link) = (cells[2].trim_matches('`'), cells[3].trim_matches('`'));
        assert!(compile.starts_with(&format!("{compiler} ")), "{compile}");
        let compile = compile
            .replace(
                "-I<memtrace>/harness-c/include -I<CMSIS-NN>/Include",
                "-Iinclude -I$CMSIS_NN_DIR/Include",
            )
            .replace(
                "-c net.c",
                &format!("-c examples/user_network.c -o build/{target}/user-network.o"),
            );
        let link = link
            .replace(
                &format!("-L<memtrace>/harness-c/build/{target}"),
                &format!("-Lbuild/{target}"),
            )
            .replace("net.o", &format!("build/{target}/user-network.o"))
            .replace("net.elf", &format!("build/{target}/user-network.elf"));
        for line in [compile, link] {
            assert!(
                made.contains(&line),
                "{target}: the table says\n  {line}\nbut make runs\n  {}",
                made.join("\n  ")
            );
        }
    }
}

fn table_name(target: &str) -> &'static str {
    match target {
        "cortex-m4" => "Cortex-M4",
        _ => "x86-64",
    }
}

/// The documented compile and link lines of `target`, for `source` built
/// into `dir`: `(compile, link)` argument lists.
fn documented_lines(target: &str, source: &Path, dir: &Path) -> (Vec<String>, Vec<String>) {
    let docs = docs();
    let row = docs
        .lines()
        .find(|l| l.starts_with(&format!("| {} |", table_name(target))))
        .unwrap();
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    let memtrace = repo().display().to_string();
    let cmsis_nn = repo()
        .join("../shared/third_party/cmsis-nn")
        .display()
        .to_string();
    let object = dir.join("net.o").display().to_string();
    let elf = dir.join("net.elf").display().to_string();
    let words = |cell: &str| -> Vec<String> {
        cell.trim_matches('`')
            .replace("<memtrace>", &memtrace)
            .replace("<CMSIS-NN>", &cmsis_nn)
            .split_whitespace()
            .map(|w| match w {
                "net.c" => source.display().to_string(),
                "net.o" => object.clone(),
                "net.elf" => elf.clone(),
                w => w.to_owned(),
            })
            .collect()
    };
    let mut compile = words(cells[2]);
    compile.extend(["-o".to_owned(), object.clone()]);
    (compile, words(cells[3]))
}

fn run_tool(argv: &[String]) -> (bool, String) {
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", argv[0]));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// A program of the user's: one layer over its own arrays, optionally
/// defining `MEMTRACE_IMPLEMENTATION` as the docs used to say.
const TINY: &str = r#"
#include <stdint.h>
#include <string.h>
#include "memtrace.h"

static int8_t in[64], out[64];
static volatile uint32_t n = sizeof out;

int main(void) {
    for (int i = 0; i < 64; ++i) in[i] = (int8_t)i;
    memtrace_layer_begin("copy", "custom", "");
    memtrace_buffer(0, MEMTRACE_ROLE_INPUT, in, sizeof in, 1, "in");
    memtrace_buffer(1, MEMTRACE_ROLE_OUTPUT, out, sizeof out, 1, "out");
    memcpy(out, in, n);  /* the library's memcpy */
    memtrace_layer_end();
    return out[63] == 63 ? 0 : 1;
}
"#;

#[test]
fn a_program_links_with_the_documented_line_with_or_without_memtrace_implementation() {
    built();
    let tmp = tempfile::tempdir().unwrap();
    for target in TARGETS {
        for implementation in [false, true] {
            let dir = tmp
                .path()
                .join(format!("{target}-{}", u8::from(implementation)));
            std::fs::create_dir_all(&dir).unwrap();
            let source = dir.join("net.c");
            let define = if implementation {
                "#define MEMTRACE_IMPLEMENTATION\n"
            } else {
                ""
            };
            std::fs::write(&source, format!("{define}{TINY}")).unwrap();
            let (compile, link) = documented_lines(target, &source, &dir);
            let (ok, text) = run_tool(&compile);
            assert!(ok, "{target}: {compile:?}\n{text}");
            // No -lcmsis-nn needed here, but the documented line has it.
            let (ok, text) = run_tool(&link);
            assert!(
                ok,
                "{target} (MEMTRACE_IMPLEMENTATION: {implementation}): {link:?}\n{text}"
            );
            assert!(
                !text.contains("multiple definition") && !text.contains("warning"),
                "{target}: {text}"
            );
            let elf = dir.join("net.elf");
            let report = run_json(&elf, &["--strict"]);
            assert_eq!(report["exit_code"], 0, "{target}");
            let layer = &report["layers"][0];
            assert_eq!(layer["name"], "copy");
            assert_eq!(layer["contract"]["ok"], true, "{target}: {layer}");
            assert!(u(&buffer(layer, "out")["stores"]) > 0, "{target}");
            assert_eq!(
                layer["kernel"], "memcpy",
                "{target}: the copy ran the library's memcpy"
            );
        }
    }
}

/// `objdump -dr` of `object` read by harness-c's self-call check: whether
/// a function of it calls itself.
fn calls_itself(target: &str, object: &Path) -> bool {
    let objdump = match target {
        "cortex-m4" => "arm-none-eabi-objdump",
        _ => "objdump",
    };
    let dump = Command::new(objdump)
        .arg("-dr")
        .arg(object)
        .output()
        .expect("objdump runs");
    assert!(dump.status.success());
    let mut awk = Command::new("awk")
        .arg("-f")
        .arg(harness().join("rt/self-call.awk"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    use std::io::Write;
    awk.stdin.take().unwrap().write_all(&dump.stdout).unwrap();
    !awk.wait().unwrap().success()
}

#[test]
fn the_library_shims_never_call_themselves_whatever_the_flags() {
    let tmp = tempfile::tempdir().unwrap();
    for target in TARGETS {
        // A user's flags: no -fno-tree-loop-distribute-patterns, and -O3,
        // which distributes loops the most.
        let (mut compile, _) = documented_lines(target, Path::new("x.c"), tmp.path());
        compile.retain(|w| w != "-O2" && w != "-c" && w != "x.c" && w != "-o");
        compile.pop(); // the object
        let compile = |source: &Path, object: &Path, extra: &[&str]| {
            let mut argv = compile.clone();
            argv.extend(extra.iter().map(|s| s.to_string()));
            argv.extend([
                "-O3".into(),
                format!("-I{}", harness().join("rt").display()),
                "-c".into(),
                source.display().to_string(),
                "-o".into(),
                object.display().to_string(),
            ]);
            let (ok, text) = run_tool(&argv);
            assert!(ok, "{argv:?}\n{text}");
        };
        let shims = tmp.path().join(format!("{target}-shims.o"));
        compile(&harness().join("rt/libc_shims.c"), &shims, &[]);
        assert!(!calls_itself(target, &shims), "{target}: rt/libc_shims.c");
        // The check itself: a memcpy without the pragma, not freestanding.
        let own = tmp.path().join(format!("{target}-own.o"));
        compile(
            &harness().join("guests/memcpy_recursion.c"),
            &own,
            &["-fhosted"],
        );
        assert!(calls_itself(target, &own), "{target}: the check missed it");
    }
}

#[test]
fn a_memcpy_that_calls_itself_is_reported_as_a_stack_overflow() {
    for target in TARGETS {
        for (elf, function, layer) in [
            ("memcpy-recursion", "memcpy", "copy"),
            ("stack-overflow", "descend", "deep"),
        ] {
            let o = memtrace(["run", path_str(&guest(target, elf))]);
            assert_eq!(o.status.code(), Some(1), "{target} {elf}");
            let err = stderr(&o);
            assert!(!err.contains("panicked"), "{err}");
            assert!(!err.contains("unmapped"), "{target} {elf}: {err}");
            assert!(err.contains("stack overflow: "), "{target} {elf}: {err}");
            assert!(err.contains("B below the stack bottom"), "{err}");
            assert!(err.contains("(the stack is 262144 B;"), "{err}");
            assert!(err.contains(&format!("in layer `{layer}`")), "{err}");
            assert!(err.contains(&format!("in `{function}` (guests/")), "{err}");
            assert!(
                err.contains(&format!("called from `{function}` (guests/")),
                "{err}"
            );
            assert!(err.contains(" × "), "{err}");
            assert!(err.contains(", from `main` (guests/"), "{err}");
        }
    }
}

/// The report of `memtrace run ELF --job SPEC` on suite-cmsis.elf: its one
/// layer.
fn suite_layer(target: &str, spec: &str) -> Value {
    run_job(&suite_cmsis(target), spec)
}

#[test]
#[cfg_attr(no_cmsis, ignore = "CMSIS-NN guests not built: set CMSIS_NN_DIR")]
fn the_worked_example_runs_clean_and_its_os_agrees_with_the_suite() {
    let make_output = built();
    assert!(!make_output.contains("warning"), "{make_output}");
    // The same layers, as suite-cmsis.elf jobs (its own glue, the same
    // CMSIS-NN kernels): an independent instrumentation of each layer.
    let jobs = [
        (
            "conv",
            "op=conv2d,dtype=int8,input=1x16x16x4,filter=8x3x3x4,stride=1,padding=same",
        ),
        (
            "dw",
            "op=depthwise_conv2d,dtype=int8,input=1x16x16x8,filter=1x3x3x8,stride=2,padding=same",
        ),
        (
            "fc",
            "op=fully_connected,dtype=int8,input=1x512,filter=10x512",
        ),
    ];
    for target in TARGETS {
        let elf = guest(target, "user-network");
        let o = memtrace(["run", path_str(&elf), "--strict", "--format", "json"]);
        assert_eq!(o.status.code(), Some(0), "{target}: {}", stderr(&o));
        let report = json(&o);
        assert_eq!(report["exit_code"], 0, "the softmax output sums to 1");
        let names: Vec<&str> = report["layers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["conv", "dw", "fc", "softmax"], "{target}");
        for l in report["layers"].as_array().unwrap() {
            assert_eq!(
                l["contract"]["ok"], true,
                "{target} {}: {}",
                l["name"], l["contract"]
            );
            assert_eq!(l["library"], "CMSIS-NN", "{target} {}", l["name"]);
            assert!(u(&l["instructions"]) > 0);
        }
        // The im2col buffer, declared as the library asked, used to its end.
        let scratch = &layer(&report, "conv")["contract"]["scratch"][0];
        assert_eq!(
            (
                u(&scratch["declared_bytes"]),
                u(&scratch["high_water_bytes"])
            ),
            (144, 144),
            "{target}"
        );
        for (name, spec) in jobs {
            let suite = suite_layer(target, spec);
            assert_eq!(layer(&report, name)["params"], suite["params"], "{target}");
            let (mine, suite) = (&layer(&report, name)["overlap"], &suite["overlap"]);
            for key in [
                "input_bytes",
                "output_bytes",
                "monotone_bytes",
                "exact_bytes",
                "algorithmic_bytes",
                "analytic_bytes",
            ] {
                assert_eq!(mine[key], suite[key], "{target} {name} {key}");
            }
            // analytic <= traced: no UNSAFE flag on any layer.
            let flags = mine["flags"].as_array().unwrap();
            assert!(
                !flags.iter().any(|f| f == "UNSAFE"),
                "{target} {name}: {flags:?}"
            );
            assert!(u(&mine["exact_bytes"]) >= u(&mine["monotone_bytes"]));
        }
        // CMSIS-NN's 3x3 depthwise kernel keeps the reference loop order.
        let dw = &layer(&report, "dw")["overlap"];
        assert_eq!(dw["algorithmic_bytes"], dw["monotone_bytes"], "{target}");
        // softmax has no O_s model: traced values only.
        let sm = &layer(&report, "softmax")["overlap"];
        assert_eq!(sm["algorithmic_bytes"], Value::Null);
        assert_eq!(u(&sm["monotone_bytes"]), 10, "{target}");
    }
}

#[test]
#[cfg_attr(no_cmsis, ignore = "CMSIS-NN guests not built: set CMSIS_NN_DIR")]
fn strict_passes_correct_cmsis_nn_code_and_strict_os_fails_its_mismatch() {
    built();
    for target in TARGETS {
        let elf = guest(target, "user-network");
        let o = memtrace(["run", path_str(&elf), "--strict"]);
        assert_eq!(o.status.code(), Some(0), "{target}: {}", stderr(&o));
        let err = stderr(&o);
        // CMSIS-NN's expected O_s differences: one note, no warning.
        assert!(!err.contains("WARNING"), "{err}");
        assert!(
            err.contains("note: ") && err.contains("(CMSIS-NN)"),
            "{err}"
        );
        let o = memtrace(["run", path_str(&elf), "--explain"]);
        let err = stderr(&o);
        assert!(err.contains("WARNING: layer `conv`"), "{err}");
        assert!(err.contains("MISMATCH"), "{err}");
        assert!(!err.contains("error:"), "{err}");
        let o = memtrace(["run", path_str(&elf), "--strict-os"]);
        assert_eq!(o.status.code(), Some(1), "{target}");
        assert!(
            stderr(&o).contains("failed an O_s cross-check (--strict-os)"),
            "{}",
            stderr(&o)
        );
    }
}

/// The names of the functions of a violation's `callers`.
fn callers(violation: &Value) -> Vec<&str> {
    violation["callers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["function"].as_str().unwrap_or("?"))
        .collect()
}

#[test]
#[cfg_attr(no_cmsis, ignore = "CMSIS-NN guests not built: set CMSIS_NN_DIR")]
fn stray_writes_name_the_buffer_the_distance_and_the_users_caller() {
    built();
    for target in TARGETS {
        let elf = guest(target, "user-bugs");
        let o = memtrace(["run", path_str(&elf), "--format", "json"]);
        assert_eq!(o.status.code(), Some(0), "{target}: {}", stderr(&o));
        let report = json(&o);
        let err = stderr(&o);

        // A scratch buffer 16 B short: each stray write lies past the end of
        // the declared scratch, and together they reach 16 B past it.
        let conv = &layer(&report, "conv")["contract"];
        let first = &conv["stray_write"]["first"];
        assert_eq!(first["nearest"]["buffer"], "scratch", "{target}: {first}");
        assert_eq!(first["nearest"]["side"], "after_end");
        assert_eq!(
            conv["stray_reach"],
            serde_json::json!([{"buffer": "scratch", "side": "after_end", "bytes": 16}]),
            "{target}"
        );
        let chain = callers(first);
        assert!(
            chain.contains(&"arm_convolve_wrapper_s8"),
            "{target}: {chain:?}"
        );
        let user = chain.iter().position(|f| *f == "run_conv");
        assert!(user.is_some(), "{target}: the user's function: {chain:?}");
        let line = err
            .lines()
            .find(|l| l.contains("layer `conv`: memory contract: stray_write"))
            .unwrap_or_else(|| panic!("{target}: {err}"));
        assert!(
            line.contains("in all they reach 16 B past the end of `scratch`"),
            "{line}"
        );
        assert!(
            line.contains("from `run_conv` (guests/user_bugs.c:"),
            "{line}"
        );
        // The chain in the warning stops at the user's function.
        assert!(!line.contains("`main`"), "{line}");

        // One byte past the output, written by the user's own loop.
        let fc = &layer(&report, "fc")["contract"]["stray_write"];
        let first = &fc["first"];
        assert_eq!(u(&fc["violations"]), 1, "{target}: {fc}");
        assert_eq!(u(&first["size"]), 1);
        assert_eq!(first["function"], "clamp_outputs", "{target}");
        assert_eq!(
            first["nearest"],
            serde_json::json!({"buffer": "fc_out", "side": "after_end", "bytes": 1}),
            "{target}"
        );
        assert_eq!(callers(first).first(), Some(&"run_fc"), "{target}");
        let line = err
            .lines()
            .find(|l| l.contains("layer `fc`: memory contract: stray_write"))
            .unwrap();
        assert!(line.contains("1 B past the end of `fc_out`"), "{line}");
        assert!(
            line.contains("called from `run_fc` (guests/user_bugs.c:"),
            "{line}"
        );

        // --strict fails it: the contract is broken in both layers.
        let o = memtrace(["run", path_str(&elf), "--strict"]);
        assert_eq!(o.status.code(), Some(1), "{target}");
        assert!(
            stderr(&o).contains("2 layer(s) broke the memory contract (--strict)"),
            "{}",
            stderr(&o)
        );
    }
}
