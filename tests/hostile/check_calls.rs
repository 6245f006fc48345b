//! `memtrace check` and `memtrace run` on programs that lie or loop: a
//! CMSIS-NN call whose lengths and dimensions are larger than the guest
//! (never an allocation, a note: "not traced, because …"), a program that
//! branches to itself (stopped at once, named), heap and stack sizes out of
//! range (usage errors stating the range), messages that say what happened
//! (a wild stack pointer, a jump into data, a file that is neither a
//! program nor a model), and two seeded campaigns: hostile CMSIS-NN call
//! arguments, and lying ELFs.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::ended::{run_for, Ended};
use crate::common::unit_tests::compile;
use crate::common::{self, path_str, stderr, stdout};

/// `memtrace ARGS`, ended at `limit` if it has not ended by then.
fn memtrace_for(args: &[&str], limit: Duration) -> Ended {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_memtrace"));
    cmd.args(args);
    run_for(cmd, limit)
}

/// The output of a command that must have ended by itself within `limit`.
fn ended(args: &[&str], limit: Duration) -> Output {
    match memtrace_for(args, limit) {
        Ended::Exited(out) => out,
        other => panic!("memtrace {args:?}: {other:?} (limit {limit:?})"),
    }
}

/// Where this file's programs are built (once per test binary).
fn build_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("hostile-check-calls");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// This file's C programs.
fn source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/hostile/programs")
        .join(name)
}

/// `hostile_calls.elf`: one CMSIS-NN call with the arguments of its
/// command line, linked with the unit tests' CMSIS-NN and semihosting.
fn hostile_calls() -> &'static Path {
    static ELF: OnceLock<PathBuf> = OnceLock::new();
    ELF.get_or_init(|| {
        let elf = build_dir().join("hostile_calls.elf");
        let cmsis =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/third_party/cmsis-nn/Include");
        let library = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("harness-c/build/cortex-m4/unit-tests/libcmsis-nn.a");
        assert!(
            library.exists(),
            "{} is missing: build the unit tests first (`make -C harness-c/unit-tests`, or `make test`)",
            library.display()
        );
        compile(
            &[&source("hostile_calls.c")],
            &[library],
            &["-O1", &format!("-I{}", cmsis.display())],
            &elf,
        );
        elf
    })
}

/// A C program `text` (file `name`) built for `memtrace check` with the
/// Cortex-M4 flags, `-O2 -g` and `specs` (`rdimon.specs` for
/// semihosting, `nosys.specs` for newlib's stubs), plus `extra` flags.
fn check_program(name: &str, text: &str, specs: &str, extra: &[&str]) -> PathBuf {
    let dir = build_dir();
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, text).unwrap();
    let elf = dir.join(format!("{name}.elf"));
    let status = Command::new("arm-none-eabi-gcc")
        .args(common::unit_tests::ARCH)
        .args(["-O2", "-g", &format!("--specs={specs}")])
        .args(extra)
        .arg(&c)
        .arg("-o")
        .arg(&elf)
        .status()
        .expect("arm-none-eabi-gcc runs");
    assert!(status.success(), "building {name}");
    elf
}

/// `memtrace check --format json ELF EXTRA -- ARGS`, which must end by
/// itself within `limit`: its report and exit status.
fn check_json(elf: &Path, extra: &[&str], args: &[&str], limit: Duration) -> (Value, i32) {
    let mut all = vec!["check", "--format", "json"];
    all.extend_from_slice(extra);
    all.push(path_str(elf));
    if !args.is_empty() {
        all.push("--");
        all.extend_from_slice(args);
    }
    let out = ended(&all, limit);
    let report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("memtrace {all:?}: no JSON ({e}): {}", stderr(&out)));
    (report, out.status.code().unwrap_or(-1))
}

/// The one call of a `hostile_calls.elf` report.
fn the_call(report: &Value) -> &Value {
    let calls = report["calls"].as_array().expect("calls traced");
    assert_eq!(calls.len(), 1, "{report}");
    &calls[0]
}

/// How long one command may take before it counts as a hang: far above
/// the second or so each takes here, below the minutes of the defects.
const LIMIT: Duration = Duration::from_secs(120);

#[test]
fn a_reshape_of_0xffffffff_bytes_is_not_traced_and_never_aborts() {
    // The case: the O_s accumulator allocated 8 B per declared
    // byte, 32 GiB, and the process aborted. The kernel itself then copies
    // past the guest's memory: a fault, reported.
    let (report, status) = check_json(
        hostile_calls(),
        &["--heap", "65536", "--max-instructions", "5000000"],
        &["reshape", "ram", "heap", "0xffffffff"],
        LIMIT,
    );
    assert_eq!(status, 99, "{report}");
    let call = the_call(&report);
    assert_eq!(call["function"], "arm_reshape_s8");
    assert!(call["layer"].is_null(), "{call}");
    let error = call["error"].as_str().unwrap();
    assert!(
        error.contains("4294967295 B") && error.contains("larger than the guest's memory"),
        "{error}"
    );
    assert_ne!(report["end"]["kind"], "exit", "{report}");
}

#[test]
fn an_add_of_minus_one_elements_is_a_note_and_the_program_runs_on_to_its_exit() {
    // CMSIS-NN reads `block_size` as a signed count: -1 copies nothing and
    // the program exits 0, while the unsigned word claims 4 GiB.
    let (report, status) = check_json(hostile_calls(), &[], &["add", "ram", "ram", "-1"], LIMIT);
    assert_eq!(status, 0, "{report}");
    assert!(report["stdout"]
        .as_str()
        .unwrap()
        .contains("hostile_calls: done"));
    let call = the_call(&report);
    assert!(call["layer"].is_null(), "{call}");
    assert!(
        call["error"]
            .as_str()
            .unwrap()
            .contains("larger than the guest's memory"),
        "{call}"
    );
}

#[test]
fn dimensions_whose_product_overflows_64_bits_are_refused_not_wrapped_to_nothing() {
    // 65536^4 is 2^64: wrapped, the input was 0 B and left undeclared,
    // and the layer was traced without it.
    let big = "65536";
    let (report, _) = check_json(
        hostile_calls(),
        &["--max-instructions", "5000000"],
        &["maxpool", "ram", "ram", big, big, big, big, "1", "1"],
        LIMIT,
    );
    let call = the_call(&report);
    assert!(call["layer"].is_null(), "{call}");
    let error = call["error"].as_str().unwrap();
    assert!(error.contains("`input`"), "{error}");
    assert!(error.contains("larger than the guest's memory"), "{error}");
}

#[test]
fn a_buffer_outside_mapped_memory_or_wrapping_past_4_gib_is_not_traced() {
    for (pointer, words) in [
        ("unmapped", "not inside the guest's mapped memory"),
        ("wrap", "wraps past the end of the 32-bit address space"),
    ] {
        let (report, _) = check_json(
            hostile_calls(),
            &["--max-instructions", "5000000"],
            &["relu", pointer, "ram", "64"],
            LIMIT,
        );
        let call = the_call(&report);
        assert!(call["layer"].is_null(), "{pointer}: {call}");
        assert!(
            call["error"].as_str().unwrap().contains(words),
            "{pointer}: {call}"
        );
    }
    // The same call on the program's own array is a layer.
    let (report, status) = check_json(hostile_calls(), &[], &["relu", "ram", "ram", "64"], LIMIT);
    assert_eq!(status, 0, "{report}");
    let layer = &the_call(&report)["layer"];
    assert_eq!(layer["buffers"][0]["size"], 64, "{report}");
}

/// A program whose `exit` ends in newlib's nosys `_exit`, `b .`.
const EXIT_NOSYS: &str = "#include <stdlib.h>\n\
volatile int sink;\n\
int main(void) {\n\
    sink = 1;\n\
    exit(3);\n\
}\n";

/// A `while (1);` at -O2 in a function of its own.
const WHILE_ONE: &str = "volatile int ready;\n\
__attribute__((noinline)) void wait_forever(void) {\n\
    while (1);\n\
}\n\
int main(void) {\n\
    ready = 1;\n\
    wait_forever();\n\
    return 0;\n\
}\n";

/// The functions of a stopped `check` report's chain.
fn chain_functions(report: &Value) -> Vec<String> {
    report["end"]["chain"]
        .as_array()
        .unwrap_or_else(|| panic!("no chain: {report}"))
        .iter()
        .filter_map(|f| f["function"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn newlibs_nosys_exit_is_a_loop_found_at_once_not_a_budget_run_out() {
    let elf = check_program("exit_nosys", EXIT_NOSYS, "nosys.specs", &[]);
    let start = Instant::now();
    let (report, status) = check_json(&elf, &[], &[], LIMIT);
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(status, 99, "{report}");
    assert_eq!(report["end"]["kind"], "loop", "{report}");
    let message = report["end"]["message"].as_str().unwrap();
    assert!(message.contains("loops forever at pc 0x"), "{message}");
    let functions = chain_functions(&report);
    assert_eq!(
        functions.first().map(String::as_str),
        Some("_exit"),
        "{report}"
    );
    // Far fewer instructions than the default budget of 10^10.
    assert!(
        report["instructions"].as_u64().unwrap() < 1_000_000,
        "{report}"
    );
}

#[test]
fn a_while_one_at_o2_is_stopped_naming_its_function_line_and_caller() {
    let elf = check_program("while_one", WHILE_ONE, "rdimon.specs", &[]);
    let (report, status) = check_json(&elf, &[], &[], LIMIT);
    assert_eq!(status, 99, "{report}");
    assert_eq!(report["end"]["kind"], "loop", "{report}");
    let chain = report["end"]["chain"].as_array().unwrap();
    assert_eq!(chain[0]["function"], "wait_forever", "{report}");
    assert_eq!(chain[0]["line"], 3, "{report}");
    assert!(chain[0]["file"].as_str().unwrap().ends_with("while_one.c"));
    assert!(
        chain
            .iter()
            .any(|f| f["function"] == "main" && f["line"] == 7),
        "the caller's line: {report}"
    );
    // The text report says it the same way.
    let out = ended(&["check", path_str(&elf)], LIMIT);
    let err = stderr(&out);
    assert!(err.contains("the program loops forever at pc 0x"), "{err}");
    assert!(
        err.contains("at wait_forever (") && err.contains("while_one.c:3)"),
        "{err}"
    );
}

/// A memtrace.h guest for `run` whose `main` calls `park`, a `for (;;);`.
const PARKS: &str = "#include \"memtrace.h\"\n\
__attribute__((noinline)) void park(void) {\n\
    for (;;) {\n\
    }\n\
}\n\
int main(void) {\n\
    park();\n\
    return 0;\n\
}\n";

/// A memtrace.h guest for `run` that calls into its own data.
const JUMPS_INTO_DATA: &str = "#include \"memtrace.h\"\n\
unsigned short table[8] = {0xbf00, 0xbf00};\n\
typedef int (*fn)(void);\n\
__attribute__((noinline)) int call(fn f) { return f() + 1; }\n\
int main(void) {\n\
    int r = call((fn)((char *)table + 1));\n\
    return r + 2;\n\
}\n";

/// The memtrace.h guest `text` (`name.c`) built for `target` with the
/// documented line against the harness's run-time; `None` when the
/// target's run-time is not built.
fn run_guest(target: &str, name: &str, text: &str) -> Option<PathBuf> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = repo.join("harness-c/build").join(target);
    if !lib.join("libmemtrace_rt.a").exists() || !lib.join("memtrace.ld").exists() {
        return None;
    }
    let dir = build_dir().join(target);
    std::fs::create_dir_all(&dir).unwrap();
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, text).unwrap();
    let elf = dir.join(format!("{name}.elf"));
    let (cc, arch): (&str, &[&str]) = match target {
        "riscv32" => (
            "riscv64-unknown-elf-gcc",
            &["-march=rv32imac", "-mabi=ilp32", "-mcmodel=medlow"],
        ),
        _ => ("arm-none-eabi-gcc", &common::unit_tests::ARCH),
    };
    let status = Command::new(cc)
        .args(arch)
        .args(["-O2", "-g", "-ffreestanding", "-nostdlib", "-static"])
        .arg(format!("-I{}", repo.join("harness-c/include").display()))
        .arg(format!("-L{}", lib.display()))
        .args(["-T", "memtrace.ld"])
        .arg(&c)
        .args(["-lmemtrace_rt", "-lgcc", "-o"])
        .arg(&elf)
        .status()
        .expect("the cross compiler runs");
    assert!(status.success(), "building {name}.c for {target}");
    Some(elf)
}

#[test]
fn run_stops_a_branch_to_itself_at_once_on_cortex_m4_and_risc_v() {
    let mut ran = 0;
    for target in ["cortex-m4", "riscv32"] {
        let Some(elf) = run_guest(target, "spins", PARKS) else {
            eprintln!("{target}: run-time not built, skipped");
            continue;
        };
        let start = Instant::now();
        let out = ended(&["run", path_str(&elf)], LIMIT);
        assert!(start.elapsed() < Duration::from_secs(60), "{target}");
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{target}: {err}");
        assert!(
            err.contains("the program loops forever at pc 0x"),
            "{target}: {err}"
        );
        assert!(
            err.contains("`park` (") && err.contains("spins.c:3)"),
            "{target}: {err}"
        );
        assert!(err.contains("called from `main`"), "{target}: {err}");
        ran += 1;
    }
    assert!(ran > 0, "no target's run-time is built");
}

#[test]
fn run_says_where_a_jump_into_data_went_and_who_called() {
    let elf = run_guest("cortex-m4", "jumps", JUMPS_INTO_DATA)
        .expect("the Cortex-M4 run-time is built (make -C harness-c)");
    let out = ended(&["run", path_str(&elf)], LIMIT);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("the program jumped to 0x"), "{err}");
    assert!(err.contains("which is data (`table`, segment"), "{err}");
    assert!(
        err.contains("called from `call` (") && err.contains("from `main` ("),
        "{err}"
    );
    assert!(!err.contains("FETCH_PROT"), "{err}");
}

#[test]
fn heap_and_stack_sizes_out_of_range_are_usage_errors_stating_the_range() {
    let elf = hostile_calls();
    for (option, value, range) in [
        ("--heap", "18446744073709551615", "0..=1073741824"),
        ("--heap", "1073741825", "0..=1073741824"),
        ("--stack", "0", "1024..=1073741824"),
    ] {
        let out = ended(&["check", option, value, path_str(elf)], LIMIT);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{option} {value}: {err}");
        assert!(err.contains(option) && err.contains(range), "{err}");
    }
    // The bounds themselves run.
    let (report, status) = check_json(
        elf,
        &["--heap", "0", "--stack", "1024"],
        &["relu", "ram", "ram", "8"],
        LIMIT,
    );
    assert_eq!(status, 0, "{report}");
}

#[test]
fn a_linker_heap_larger_than_guest_memory_is_a_clear_error() {
    // The linker script's heap end past 3 GiB: memcheck would keep a
    // shadow byte for each.
    let elf = check_program(
        "huge_heap",
        "int main(void) { return 0; }\n",
        "rdimon.specs",
        &["-Wl,--defsym=__HeapLimit=0xf0000000"],
    );
    let out = ended(&["check", path_str(&elf)], LIMIT);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("huge_heap.elf"), "{err}");
    assert!(err.contains("larger than `check` gives"), "{err}");
}

#[test]
fn a_push_through_a_wild_stack_pointer_says_the_stack_pointer_is_wild() {
    let elf = check_program(
        "wild_sp",
        "__attribute__((noinline)) int callee(int x) {\n\
             volatile int a[4] = {x, x, x, x};\n\
             return a[1];\n\
         }\n\
         int main(void) {\n\
             __asm volatile(\"mov sp, %0\" : : \"r\"(0));\n\
             return callee(3);\n\
         }\n",
        "rdimon.specs",
        &[],
    );
    let (report, status) = check_json(&elf, &[], &[], LIMIT);
    assert_eq!(status, 99, "{report}");
    let message = report["end"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("the stack pointer is wild: 0x"),
        "{message}"
    );
    assert!(message.contains("is outside the stack (0x"), "{message}");
    assert!(!message.contains("entry point"), "{message}");
    assert!(!chain_functions(&report).is_empty(), "{report}");
}

#[test]
fn a_jump_into_data_or_the_heap_says_where_it_went_and_who_called() {
    let elf = check_program(
        "jump_data",
        "#include <stdlib.h>\n\
         #include <string.h>\n\
         unsigned short table[8] = {0xbf00, 0xbf00};\n\
         typedef int (*fn)(void);\n\
         __attribute__((noinline)) int call(fn f) {\n\
             return f() + 1;\n\
         }\n\
         int main(int argc, char **argv) {\n\
             fn target = (fn)((char *)table + 1);\n\
             if (argc > 1) {\n\
                 void *block = malloc(16);\n\
                 memset(block, 0, 16);\n\
                 target = (fn)((char *)block + 1);\n\
             }\n\
             int r = call(target);\n\
             return r + argc;\n\
         }\n",
        "rdimon.specs",
        &[],
    );
    for (args, target) in [(&[][..], "data (`table`"), (&["heap"][..], "the heap (0x")] {
        let (report, status) = check_json(&elf, &[], args, LIMIT);
        assert_eq!(status, 99, "{report}");
        let message = report["end"]["message"].as_str().unwrap();
        assert!(message.starts_with("the program jumped to 0x"), "{message}");
        assert!(
            message.contains(target) && message.ends_with("not code"),
            "{message}"
        );
        let functions = chain_functions(&report);
        assert!(
            functions.iter().any(|f| f == "call") && functions.iter().any(|f| f == "main"),
            "the caller from the link register, and its caller: {report}"
        );
    }
}

#[test]
fn a_file_that_is_neither_a_program_nor_a_model_says_so_and_a_fifo_is_a_fifo() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("model.bin");
    std::fs::write(&junk, b"random bytes, no magic at all").unwrap();
    let fifo = dir.path().join("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    for command in ["run", "verify", "plan"] {
        let out = ended(&[command, path_str(&junk)], LIMIT);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{command}: {err}");
        assert!(
            err.contains("neither an ELF program nor a .tflite model (first bytes 72 61 6e 64"),
            "{command}: {err}"
        );
        let out = ended(&[command, path_str(&fifo)], LIMIT);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{command}: {err}");
        assert!(err.contains("is a FIFO"), "{command}: {err}");
        assert!(!err.contains("not an ELF"), "{command}: {err}");
    }
}

/// A tiny deterministic generator (xorshift64*): the same cases on every
/// run of one seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[(self.next() % items.len() as u64) as usize]
    }
}

/// What a campaign counted.
#[derive(Debug, Default)]
struct Counts {
    ok: u32,
    findings: u32,
    errors: u32,
    panics: u32,
    aborts: u32,
    hangs: u32,
    wrong_ok: u32,
}

impl Counts {
    /// Counts how `ended` ended; `claim_holds` judges an exit 0.
    fn add(&mut self, what: &str, ended: Ended, claim_holds: impl FnOnce(&Output) -> bool) {
        match ended {
            Ended::Exited(out) => match out.status.code() {
                Some(0) if claim_holds(&out) => self.ok += 1,
                Some(0) => {
                    eprintln!("wrong-but-OK: {what}: {}", stdout(&out));
                    self.wrong_ok += 1
                }
                Some(101) => {
                    eprintln!("panic: {what}: {}", stderr(&out));
                    self.panics += 1
                }
                Some(99) => self.findings += 1,
                _ => self.errors += 1,
            },
            Ended::Killed { hung: true, .. } => {
                eprintln!("hang: {what}");
                self.hangs += 1
            }
            Ended::Killed { signal, .. } => {
                eprintln!("signal {signal:?}: {what}");
                self.aborts += 1
            }
        }
    }

    fn assert_clean(&self, campaign: &str, seed: u64) {
        eprintln!("{campaign} (seed {seed:#x}): {self:?}");
        assert_eq!(
            (self.panics, self.aborts, self.hangs, self.wrong_ok),
            (0, 0, 0, 0),
            "{campaign}"
        );
    }
}

/// Bytes of the guest's mapped memory a `check` report's layout and the
/// program's segments span at most: a declared buffer is never larger.
fn mapped_at_most(report: &Value) -> u64 {
    let range = |k: &str| {
        let r = &report["layout"][k];
        r[1].as_u64().unwrap() - r[0].as_u64().unwrap()
    };
    // The segments of hostile_calls.elf are far below 1 MiB.
    range("heap") + range("stack") + (1 << 20)
}

/// Whether an exit 0 of `hostile_calls.elf` claims only what is true: the
/// program returned from its call (its own line), and no traced buffer is
/// larger than the guest's memory.
fn hostile_call_claim_holds(out: &Output) -> bool {
    let Ok(report) = serde_json::from_slice::<Value>(&out.stdout) else {
        return false;
    };
    let done = report["stdout"]
        .as_str()
        .is_some_and(|s| s.contains("hostile_calls: done"));
    let limit = mapped_at_most(&report);
    let buffers_fit = report["calls"].as_array().is_some_and(|calls| {
        calls.iter().all(|c| {
            c["layer"]["buffers"].as_array().is_none_or(|bs| {
                bs.iter()
                    .all(|b| b["size"].as_u64().is_some_and(|n| n <= limit))
            })
        })
    });
    done && report["end"]["code"] == 0 && buffers_fit
}

#[test]
fn campaign_hostile_cmsis_nn_call_arguments() {
    let seed = 0xc4_11_5e_ed_u64;
    let mut rng = Rng(seed);
    let elf = hostile_calls();
    let functions = [
        ("reshape", 1),
        ("add", 1),
        ("mul", 1),
        ("relu", 1),
        ("softmax", 2),
        ("concat", 6),
        ("maxpool", 6),
        ("pad", 8),
        ("vecsum", 2),
        ("fc", 3),
        ("transpose", 5),
        ("conv", 8),
    ];
    let pointers = ["ram", "heap", "null", "code", "unmapped", "past", "wrap"];
    // 0, -1, 2^32 − 1, products that overflow 32 and 64 bits, small ones.
    let values = [
        "0",
        "-1",
        "0xffffffff",
        "0x10000",
        "0x10001",
        "0x7fffffff",
        "65535",
        "3",
        "8",
        "1",
    ];
    let mut counts = Counts::default();
    let start = Instant::now();
    for _ in 0..30 {
        let (function, arity) = *rng.pick(&functions);
        let mut args: Vec<&str> = vec![function, *rng.pick(&pointers), *rng.pick(&pointers)];
        for _ in 0..arity {
            args.push(*rng.pick(&values));
        }
        // A small heap and budget: each case ends in well under a second.
        let mut all = vec![
            "check",
            "--format",
            "json",
            "--heap",
            "65536",
            "--max-instructions",
            "1000000",
            path_str(elf),
            "--",
        ];
        all.extend(&args);
        let what = format!("{args:?}");
        counts.add(&what, memtrace_for(&all, LIMIT), hostile_call_claim_holds);
    }
    eprintln!("in {:?}", start.elapsed());
    counts.assert_clean("hostile CMSIS-NN call arguments", seed);
    assert!(
        counts.findings + counts.errors > 0,
        "no hostile call was caught"
    );
}

/// An ELF32 file's layout, as far as the mutations need it.
struct Elf32 {
    bytes: Vec<u8>,
}

/// A section header: name, offset and size in the file.
struct Section {
    name: String,
    header: usize,
    offset: usize,
    size: usize,
}

impl Elf32 {
    fn u16_at(&self, at: usize) -> usize {
        u16::from_le_bytes([self.bytes[at], self.bytes[at + 1]]) as usize
    }
    fn u32_at(&self, at: usize) -> usize {
        u32::from_le_bytes(self.bytes[at..at + 4].try_into().unwrap()) as usize
    }
    fn put_u32(&mut self, at: usize, value: u32) {
        self.bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
    }
    /// File offsets of the program headers.
    fn program_headers(&self) -> Vec<usize> {
        let (off, size, n) = (self.u32_at(0x1c), self.u16_at(0x2a), self.u16_at(0x2c));
        (0..n).map(|i| off + i * size).collect()
    }
    /// The program headers of PT_LOAD segments.
    fn loads(&self) -> Vec<usize> {
        self.program_headers()
            .into_iter()
            .filter(|&h| self.u32_at(h) == 1)
            .collect()
    }
    fn sections(&self) -> Vec<Section> {
        let (off, size, n, names) = (
            self.u32_at(0x20),
            self.u16_at(0x2e),
            self.u16_at(0x30),
            self.u16_at(0x32),
        );
        let strtab = self.u32_at(off + names * size + 0x10);
        (0..n)
            .map(|i| {
                let h = off + i * size;
                let name_at = strtab + self.u32_at(h);
                let end = self.bytes[name_at..].iter().position(|&b| b == 0).unwrap();
                Section {
                    name: String::from_utf8_lossy(&self.bytes[name_at..name_at + end]).into(),
                    header: h,
                    offset: self.u32_at(h + 0x10),
                    size: self.u32_at(h + 0x14),
                }
            })
            .collect()
    }
    fn section(&self, name: &str) -> Option<Section> {
        self.sections().into_iter().find(|s| s.name == name)
    }
    /// The symbol table entries named `name`: their file offsets.
    fn symbols(&self, name: &str) -> Vec<usize> {
        let (Some(symtab), Some(strtab)) = (self.section(".symtab"), self.section(".strtab"))
        else {
            return Vec::new();
        };
        (0..symtab.size / 16)
            .map(|i| symtab.offset + 16 * i)
            .filter(|&e| {
                let at = strtab.offset + self.u32_at(e);
                self.bytes[at..].starts_with(name.as_bytes())
                    && self.bytes.get(at + name.len()) == Some(&0)
            })
            .collect()
    }
}

/// One lie told by an ELF.
#[derive(Clone, Copy, Debug)]
enum Lie {
    FileSizePastTheFile,
    OffsetPastTheFile,
    MemorySizeHuge,
    SegmentsOverlap,
    EntryOutsideCode,
    EntryInData,
    SymbolSizeHuge(&'static str),
    SymbolSizeZero(&'static str),
    SymbolInData(&'static str),
    AttributesNameAnotherCore,
    AttributesGarbage,
    DwarfGarbage(&'static str),
    SectionTableGarbage,
}

/// `base` with `lie` told (`rng` for the garbage); `None` when the file
/// has nothing to lie about there.
fn tell(base: &[u8], lie: Lie, rng: &mut Rng) -> Option<Vec<u8>> {
    let mut e = Elf32 {
        bytes: base.to_vec(),
    };
    let len = e.bytes.len() as u32;
    let loads = e.loads();
    let garbage = |e: &mut Elf32, s: Section, rng: &mut Rng| {
        for b in &mut e.bytes[s.offset..s.offset + s.size] {
            *b = rng.next() as u8;
        }
    };
    match lie {
        Lie::FileSizePastTheFile => e.put_u32(loads[0] + 0x10, len * 2),
        Lie::OffsetPastTheFile => e.put_u32(*loads.last()? + 0x04, len + 0x1000),
        Lie::MemorySizeHuge => e.put_u32(*loads.last()? + 0x14, 0xFFFF_F000),
        Lie::SegmentsOverlap => {
            let first = e.u32_at(loads[0] + 0x08) as u32;
            e.put_u32(*loads.last()? + 0x08, first);
        }
        Lie::EntryOutsideCode => e.put_u32(0x18, 0x3000_0001),
        Lie::EntryInData => {
            let data = e.u32_at(*loads.last()? + 0x08) as u32;
            e.put_u32(0x18, data | 1);
        }
        Lie::SymbolSizeHuge(name) | Lie::SymbolSizeZero(name) | Lie::SymbolInData(name) => {
            let entries = e.symbols(name);
            if entries.is_empty() {
                return None;
            }
            let data = e.u32_at(*loads.last()? + 0x08) as u32;
            for s in entries {
                match lie {
                    Lie::SymbolSizeHuge(_) => e.put_u32(s + 8, 0xFFFF_FFF0),
                    Lie::SymbolSizeZero(_) => e.put_u32(s + 8, 0),
                    _ => e.put_u32(s + 4, data),
                }
            }
        }
        Lie::AttributesNameAnotherCore => {
            let s = e.section(".ARM.attributes")?;
            let text = &mut e.bytes[s.offset..s.offset + s.size];
            let at = text.windows(2).position(|w| w == b"M4" || w == b"m4")?;
            text[at + 1] = b'0';
        }
        Lie::AttributesGarbage => {
            let s = e.section(".ARM.attributes")?;
            garbage(&mut e, s, rng);
        }
        Lie::DwarfGarbage(name) => {
            let s = e.section(name)?;
            garbage(&mut e, s, rng);
        }
        Lie::SectionTableGarbage => {
            let s = e.sections();
            let h = s[(rng.next() % s.len() as u64) as usize].header;
            for b in &mut e.bytes[h..h + 40] {
                *b = rng.next() as u8;
            }
        }
    }
    Some(e.bytes)
}

/// A `check` program that prints its own last line before it returns 0,
/// with an allocation (memcheck hooks `malloc` by its symbol).
const HONEST: &str = "#include <stdio.h>\n\
#include <stdlib.h>\n\
int main(void) {\n\
    char *p = malloc(32);\n\
    for (int i = 0; i < 32; ++i) p[i] = (char)i;\n\
    int sum = 0;\n\
    for (int i = 0; i < 32; ++i) sum += p[i];\n\
    free(p);\n\
    printf(\"lying: done %d\\n\", sum);\n\
    return 0;\n\
}\n";

/// Whether an exit 0 of `check` on a lying copy of the honest program
/// claims only what is true: it ran to its own last line and exited 0.
fn honest_claim_holds(out: &Output) -> bool {
    serde_json::from_slice::<Value>(&out.stdout).is_ok_and(|r| {
        r["end"]["code"] == 0
            && r["stdout"]
                .as_str()
                .is_some_and(|s| s.contains("lying: done 496"))
    })
}

/// The layer names and buffer sizes of a `run` report.
fn run_layers(report: &Value) -> Vec<(String, Vec<u64>)> {
    report["layers"].as_array().map_or(Vec::new(), |ls| {
        ls.iter()
            .map(|l| {
                let sizes = l["buffers"].as_array().map_or(Vec::new(), |bs| {
                    bs.iter().filter_map(|b| b["size"].as_u64()).collect()
                });
                (l["name"].as_str().unwrap_or("").to_owned(), sizes)
            })
            .collect()
    })
}

#[test]
fn campaign_lying_elfs_through_check_and_run() {
    let seed = 0x1a_b1e5_u64;
    let mut rng = Rng(seed);
    let honest = check_program("honest", HONEST, "rdimon.specs", &[]);
    let (report, status) = check_json(&honest, &[], &[], LIMIT);
    assert!(
        status == 0
            && honest_claim_holds(&ended(
                &["check", "--format", "json", path_str(&honest)],
                LIMIT
            )),
        "{report}"
    );
    let guest = common::guest("cortex-m4", "contract");
    let truth = common::run_json(&guest, &[]);
    let truth_layers = run_layers(&truth);
    let lies = [
        Lie::FileSizePastTheFile,
        Lie::OffsetPastTheFile,
        Lie::MemorySizeHuge,
        Lie::SegmentsOverlap,
        Lie::EntryOutsideCode,
        Lie::EntryInData,
        Lie::SymbolSizeHuge("malloc"),
        Lie::SymbolSizeZero("_exit"),
        Lie::SymbolSizeHuge("main"),
        Lie::SymbolInData("malloc"),
        Lie::SymbolInData("main"),
        Lie::AttributesNameAnotherCore,
        Lie::AttributesGarbage,
        Lie::DwarfGarbage(".debug_info"),
        Lie::DwarfGarbage(".debug_line"),
        Lie::DwarfGarbage(".debug_frame"),
        Lie::DwarfGarbage(".debug_abbrev"),
        Lie::SectionTableGarbage,
    ];
    let dir = tempfile::tempdir().unwrap();
    let bases = [
        std::fs::read(&honest).unwrap(),
        std::fs::read(&guest).unwrap(),
    ];
    let (mut check_counts, mut run_counts, mut told) = (Counts::default(), Counts::default(), 0);
    let start = Instant::now();
    for (i, &lie) in lies.iter().enumerate() {
        for (b, base) in bases.iter().enumerate() {
            let Some(bytes) = tell(base, lie, &mut rng) else {
                continue;
            };
            told += 1;
            let path = dir.path().join(format!("lie-{i}-{b}.elf"));
            std::fs::write(&path, bytes).unwrap();
            let p = path_str(&path);
            let what = format!("{lie:?} of base {b}");
            if b == 0 {
                let args = [
                    "check",
                    "--format",
                    "json",
                    "--max-instructions",
                    "20000000",
                    p,
                ];
                check_counts.add(&what, memtrace_for(&args, LIMIT), honest_claim_holds);
            } else {
                let args = [
                    "run",
                    p,
                    "--format",
                    "json",
                    "--max-instructions",
                    "20000000",
                ];
                run_counts.add(&what, memtrace_for(&args, LIMIT), |out| {
                    serde_json::from_slice::<Value>(&out.stdout)
                        .is_ok_and(|r| r["exit_code"] == 0 && run_layers(&r) == truth_layers)
                });
            }
        }
    }
    eprintln!("{told} lying ELFs in {:?}", start.elapsed());
    check_counts.assert_clean("lying ELFs through check", seed);
    run_counts.assert_clean("lying ELFs through run", seed);
    assert!(told >= 24, "only {told} lies told");
}
