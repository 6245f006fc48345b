//! `memtrace check` against hostile unmodified programs: calloc arguments
//! whose product wraps, semihosting calls in tight loops (opens that never
//! close, huge lengths, bad handles, pointers into code, freed and unmapped
//! memory), stores into read-only segments, command lines too long for the
//! program's buffer, and stripped ELFs. Each ends within a time limit with
//! the right finding or a clear error — exit 0, 1 or 99 as docs/check.md
//! says, never a panic (101), a signal or a hang.
//!
//! The guests are the C files of `tests/hostile/guests/`, built here with
//! newlib's semihosting (`--specs=rdimon.specs`) and cached by content.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::ended::{run_for, Ended};
use crate::common::unit_tests::{line_of, unit_tests, ARCH};
use crate::common::{path_str, stderr};

/// The guests' sources, by name.
const GUESTS: [(&str, &str); 8] = [
    ("calloc_wrap", include_str!("guests/calloc_wrap.c")),
    ("open_loop", include_str!("guests/open_loop.c")),
    ("read_only", include_str!("guests/read_only.c")),
    ("freed_host", include_str!("guests/freed_host.c")),
    ("cmdline", include_str!("guests/cmdline.c")),
    ("heap_user", include_str!("guests/heap_user.c")),
    ("sh_loop", include_str!("guests/sh_loop.c")),
    ("scratch_sizing", include_str!("guests/scratch_sizing.c")),
];

/// The compiler flags of every guest (with [`ARCH`]): -O0 gives each
/// statement its own line.
const FLAGS: [&str; 5] = [
    "-O0",
    "-g",
    "--specs=rdimon.specs",
    "-Wall",
    "-Wno-use-after-free",
];

/// FNV-1a, a stable hash for the build cache's names.
fn fnv1a(parts: &[&str]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in parts.iter().flat_map(|p| p.bytes().chain([0])) {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// The source of guest `name`.
fn source(name: &str) -> &'static str {
    GUESTS
        .iter()
        .find(|g| g.0 == name)
        .unwrap_or_else(|| panic!("no guest {name}"))
        .1
}

/// Guest `name` built (once per source and flags) under the tests' temporary
/// folder; the file name is `<name>.elf` in a folder named by the hash.
fn guest(name: &str) -> PathBuf {
    let text = source(name);
    let mut key: Vec<&str> = vec![text];
    key.extend(ARCH);
    key.extend(FLAGS);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("check-programs")
        .join(format!("{name}-{:016x}", fnv1a(&key)));
    let elf = dir.join(format!("{name}.elf"));
    if elf.exists() {
        return elf;
    }
    std::fs::create_dir_all(&dir).unwrap();
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, text).unwrap();
    // Built under a name of this process, then renamed: tests build the
    // same guest at once.
    let partial = dir.join(format!(
        "{name}.{}.{:?}.elf",
        std::process::id(),
        std::thread::current().id()
    ));
    let status = Command::new("arm-none-eabi-gcc")
        .args(ARCH)
        .args(FLAGS)
        .arg(&c)
        .args(["-lm", "-o"])
        .arg(&partial)
        .status()
        .expect("arm-none-eabi-gcc runs");
    assert!(status.success(), "compiling {name}.c failed");
    std::fs::rename(&partial, &elf).unwrap();
    elf
}

/// `memtrace ARGS` in the folder `cwd`, ended by `limit` at the latest
/// (then killed).
fn memtrace_in(cwd: &Path, args: &[&str], limit: Duration) -> Ended {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_memtrace"));
    cmd.args(args).current_dir(cwd);
    run_for(cmd, limit)
}

/// `memtrace check --format json ELF EXTRA`, which must end by itself within
/// `limit`: its status and report (`Null` when it printed none).
fn check_for(elf: &Path, extra: &[&str], limit: Duration) -> (i32, Value, String) {
    let mut args = vec!["check", "--format", "json", path_str(elf)];
    args.extend_from_slice(extra);
    let cwd = tempfile::tempdir().unwrap();
    match memtrace_in(cwd.path(), &args, limit) {
        Ended::Exited(out) => {
            let report = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
            (out.status.code().unwrap_or(-1), report, stderr(&out))
        }
        Ended::Killed { signal, hung } => {
            panic!("memtrace {args:?}: killed (signal {signal:?}, hung: {hung})")
        }
    }
}

/// Memcheck's findings of a report.
fn findings(report: &Value) -> &[Value] {
    report["memcheck"]["findings"]
        .as_array()
        .map_or(&[], Vec::as_slice)
}

/// The findings of `kind`.
fn of_kind<'a>(report: &'a Value, kind: &str) -> Vec<&'a Value> {
    findings(report)
        .iter()
        .filter(|f| f["kind"] == kind)
        .collect()
}

/// Whether a finding's chain has a frame of `function` in `file` at `line`.
fn has_frame(finding: &Value, function: &str, file: &str, line: u64) -> bool {
    finding["chain"].as_array().is_some_and(|chain| {
        chain.iter().any(|f| {
            f["function"] == function
                && f["file"].as_str().is_some_and(|p| p.ends_with(file))
                && f["line"] == line
        })
    })
}

/// The program's stdout in a report.
fn program_stdout(report: &Value) -> &str {
    report["stdout"].as_str().unwrap_or("")
}

const MINUTE: Duration = Duration::from_secs(60);

#[test]
fn a_calloc_whose_product_wraps_is_fishy_and_the_small_block_it_returns_is_checked() {
    let elf = guest("calloc_wrap");
    let (status, report, err) = check_for(&elf, &[], MINUTE);
    assert_eq!(status, 99, "{err}{report}");
    assert_eq!(
        program_stdout(&report),
        "calloc(268435457, 16) returned a block\n"
    );
    let src = source("calloc_wrap");
    // Valgrind's fishy argument, at the call, with the product in full.
    let fishy = of_kind(&report, "fishy-argument");
    assert_eq!(fishy.len(), 1, "{report}");
    let product = 0x1000_0001u64 * 16;
    assert!(
        fishy[0]["message"]
            .as_str()
            .unwrap()
            .contains(&format!("268435457 × 16 = {product} does not fit 32 bits")),
        "{}",
        fishy[0]
    );
    let call = line_of(src, "CALLOC_CALL");
    assert!(
        has_frame(fishy[0], "main", "calloc_wrap.c", call),
        "{}",
        fishy[0]
    );
    // The block is the wrapped product's (2^32 + 16 mod 2^32 = 16 B): the
    // one-byte store at p[16] reaches 1 B past its end.
    let overrun = of_kind(&report, "overrun");
    assert_eq!(overrun.len(), 1, "{report}");
    let wrapped = product % (1 << 32);
    assert_eq!(overrun[0]["block"]["size"], wrapped);
    assert!(
        overrun[0]["message"].as_str().unwrap().contains(&format!(
            "write of 1 B past the end of a {wrapped}-byte block"
        )),
        "{}",
        overrun[0]
    );
    let line = line_of(src, "CALLOC_OVERRUN");
    assert!(
        has_frame(overrun[0], "main", "calloc_wrap.c", line),
        "{}",
        overrun[0]
    );
}

#[test]
fn two_million_opens_that_never_close_end_in_seconds_each_past_the_limit_with_emfile() {
    let elf = guest("open_loop");
    let start = Instant::now();
    let (status, report, err) = check_for(&elf, &["--", "2000000"], Duration::from_secs(120));
    let took = start.elapsed();
    assert_eq!(status, 0, "{err}{report}");
    let line = program_stdout(&report);
    let numbers: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    let [opened, failed, errno] = numbers[..] else {
        panic!("{line}")
    };
    assert_eq!(opened + failed, 2_000_000, "{line}");
    // newlib holds the console's handles (stdin, stdout, stderr) itself:
    // the program gets the rest of the 1024 (docs/check.md).
    assert!((1000..=1024).contains(&opened), "{line}");
    assert_eq!(errno, 24, "EMFILE: {line}");
    eprintln!("2 million opens: {took:?}");
}

#[test]
fn a_loop_of_opens_is_stopped_by_the_instruction_budget() {
    let elf = guest("open_loop");
    let budget = 2_000_000u64;
    let b = budget.to_string();
    let args = ["--max-instructions", b.as_str(), "--", "4000000000"];
    let (status, report, err) = check_for(&elf, &args, MINUTE);
    assert_eq!(status, 99, "{err}{report}");
    assert_eq!(report["end"]["kind"], "budget", "{report}");
    let retired = report["instructions"].as_u64().unwrap();
    assert!(retired > budget && retired < budget + 1000, "{retired}");
}

/// `arm-none-eabi-strip ARGS -o OUT ELF`: a stripped copy (never `strip
/// ELF`, which strips in place).
fn stripped(elf: &Path, how: Strip, dir: &Path) -> PathBuf {
    let name = elf.file_name().unwrap().to_string_lossy();
    let out = dir.join(format!("{}-{name}", how.name()));
    let args: &[&str] = match how {
        Strip::All => &["--strip-all"],
        Strip::Debug => &["--strip-debug"],
        Strip::Symbols => &["--strip-all", "--keep-section=.debug*"],
    };
    let status = Command::new("arm-none-eabi-strip")
        .args(args)
        .arg("-o")
        .arg(&out)
        .arg(elf)
        .status()
        .expect("arm-none-eabi-strip runs");
    assert!(status.success(), "strip {args:?} {}", elf.display());
    out
}

/// What a stripped copy lacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Strip {
    /// Symbols and DWARF (`strip --strip-all`).
    All,
    /// DWARF only (`strip --strip-debug`).
    Debug,
    /// The symbol table only (DWARF kept).
    Symbols,
}

impl Strip {
    fn name(self) -> &'static str {
        match self {
            Strip::All => "all",
            Strip::Debug => "debug",
            Strip::Symbols => "symbols",
        }
    }
}

/// Asserts that a run of a program without symbols checked no heap, said
/// why, and found nothing.
fn assert_no_heap_checking(report: &Value, what: &str) {
    let m = &report["memcheck"];
    assert_eq!(m["heap_checked"], false, "{what}: {report}");
    let why = m["heap_unchecked"].as_str().unwrap_or("");
    assert!(why.contains("no allocator symbols"), "{what}: {why}");
    assert!(findings(report).is_empty(), "{what}: {report}");
    assert_eq!(m["allocations"], 0, "{what}");
}

#[test]
fn a_stripped_program_checks_no_heap_says_why_and_reports_no_false_error() {
    let dir = tempfile::tempdir().unwrap();
    let user = guest("heap_user");
    let suite = unit_tests().join("test_arm_convolve_s8.elf");
    for elf in [&user, &suite] {
        let (status, whole, err) = check_for(elf, &[], MINUTE);
        assert_eq!(status, 0, "{err}{whole}");
        assert!(whole["memcheck"]["allocations"].as_u64().unwrap() > 0);
        let bare = stripped(elf, Strip::All, dir.path());
        let what = bare.display().to_string();
        let (status, report, err) = check_for(&bare, &[], MINUTE);
        assert_eq!(status, 0, "{what}: {err}{report}");
        assert_eq!(program_stdout(&report), program_stdout(&whole), "{what}");
        assert_no_heap_checking(&report, &what);
        // The text report says so too.
        let out = crate::common::memtrace(["check", path_str(&bare)]);
        let text = stderr(&out);
        assert!(
            text.contains("memcheck: no heap checking: the program has no allocator symbols"),
            "{text}"
        );
    }
}

#[test]
fn stores_into_read_only_segments_are_findings_and_host_writes_there_fail() {
    let elf = guest("read_only");
    let (status, report, err) = check_for(&elf, &[], MINUTE);
    assert_eq!(status, 99, "{err}{report}");
    // The host's write into main's code failed: read() returned -1.
    assert_eq!(program_stdout(&report), "open 1, read into main -1\n");
    let src = source("read_only");
    let found = of_kind(&report, "read-only-write");
    let at = |needle: &str| {
        let line = line_of(src, needle);
        found
            .iter()
            .find(|f| has_frame(f, "main", "read_only.c", line))
            .unwrap_or_else(|| panic!("no finding at {needle} (line {line}): {report}"))
    };
    let rodata = at("RODATA_STORE");
    let message = rodata["message"].as_str().unwrap();
    assert!(message.contains("`table`"), "{message}");
    assert_eq!(rodata["chain"][0]["function"], "main");
    let code = at("CODE_STORE");
    assert!(
        code["message"]
            .as_str()
            .unwrap()
            .contains("the code of `main`"),
        "{code}"
    );
    let host = at("HOST_WRITE");
    let message = host["message"].as_str().unwrap();
    assert!(message.starts_with("SYS_READ would write 4 B"), "{message}");
    assert!(message.contains("the call fails"), "{message}");
    assert_eq!(found.len(), 3, "{report}");
    // The kind is one a suppression may name.
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("known.supp");
    std::fs::write(&rules, "read-only-write main\n").unwrap();
    let (status, report, err) = check_for(&elf, &["--suppressions", path_str(&rules)], MINUTE);
    assert_eq!(status, 0, "{err}{report}");
    assert_eq!(report["memcheck"]["suppressed"], 3);
}

#[test]
fn host_accesses_of_freed_and_unwritten_heap_are_findings_naming_the_call() {
    let elf = guest("freed_host");
    let (status, report, err) = check_for(&elf, &[], MINUTE);
    assert_eq!(status, 99, "{err}{report}");
    let src = source("freed_host");
    let expect = [
        ("use-after-free", "SYS_WRITE reads 25 B", "WRITE_FREED"),
        ("uninitialised", "SYS_WRITE reads 8 B", "WRITE_UNWRITTEN"),
        ("use-after-free", "SYS_READ writes 4 B", "READ_FREED"),
    ];
    for (kind, words, needle) in expect {
        let line = line_of(src, needle);
        let hit = of_kind(&report, kind).into_iter().find(|f| {
            f["message"].as_str().unwrap().starts_with(words)
                && has_frame(f, "main", "freed_host.c", line)
        });
        let f = hit.unwrap_or_else(|| panic!("no {kind} `{words}` at line {line}: {report}"));
        if kind == "use-after-free" {
            assert!(f["block"]["freed"].is_array(), "{f}");
        }
    }
    assert_eq!(findings(&report).len(), 3, "{report}");
}

/// The command line `check` gives a program: its file name and arguments,
/// joined by spaces.
fn command_line(elf: &Path, args: &[String]) -> usize {
    let name = elf.file_name().unwrap().len();
    name + args.iter().map(|a| 1 + a.len()).sum::<usize>()
}

#[test]
fn a_command_line_longer_than_the_program_s_buffer_is_refused_naming_both() {
    let elf = guest("cmdline");
    // newlib's crt0 asks with a 255-byte buffer: 254 characters and a NUL.
    let fill = |total: usize| -> Vec<String> {
        let room = total - command_line(&elf, &[]) - 1;
        vec!["a".repeat(room)]
    };
    let longest = fill(254);
    assert_eq!(command_line(&elf, &longest), 254);
    let mut args = vec!["--"];
    args.extend(longest.iter().map(String::as_str));
    let (status, report, err) = check_for(&elf, &args, MINUTE);
    assert_eq!(status, 0, "{err}");
    assert_eq!(program_stdout(&report), "argc 2, 254 bytes\n");

    let too_long = fill(255);
    let mut args = vec!["--"];
    args.extend(too_long.iter().map(String::as_str));
    let (status, report, err) = check_for(&elf, &args, MINUTE);
    assert_eq!(status, 1, "{err}{report}");
    assert!(
        report["memcheck"].is_null(),
        "a report for a run refused: {report}"
    );
    for needle in [
        "256 B with the terminating NUL",
        "255 B buffer",
        "SYS_GET_CMDLINE",
    ] {
        assert!(err.contains(needle), "`{needle}` not in: {err}");
    }
}

/// A tiny deterministic generator (xorshift64*), so a campaign's cases are
/// the same on every run of one seed.
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

/// What a hostile semihosting loop must give.
#[derive(Clone, Copy, Debug, Default)]
struct Expect {
    /// The first call's result, as the guest prints it.
    first: Option<i64>,
    /// A finding of this kind whose message starts with the call's name
    /// (or, for the host's writes into read-only memory, "… would write").
    finding: Option<&'static str>,
    /// No finding at all.
    clean: bool,
    /// Refused by memtrace (exit 1, naming the call).
    refused: bool,
    /// Stopped as a call memtrace does not answer.
    unsupported: bool,
    /// A loop whose calls are each costly (huge writes): a few iterations.
    few: bool,
}

/// One hostile loop: the operation, its three words (sh_loop.c's places or
/// numbers) and what it must give.
struct Loop {
    op: u32,
    words: [&'static str; 3],
    expect: Expect,
}

const fn first(v: i64) -> Expect {
    Expect {
        first: Some(v),
        finding: None,
        clean: true,
        refused: false,
        unsupported: false,
        few: false,
    }
}

const fn found(kind: &'static str, v: Option<i64>) -> Expect {
    Expect {
        first: v,
        finding: Some(kind),
        clean: false,
        refused: false,
        unsupported: false,
        few: false,
    }
}

const ANY: Expect = Expect {
    first: None,
    finding: None,
    clean: false,
    refused: false,
    unsupported: false,
    few: false,
};

/// The loops the campaign draws from.
fn loops() -> Vec<Loop> {
    let l = |op: u32, words: [&'static str; 3], expect: Expect| Loop { op, words, expect };
    let few = |e: Expect| Expect { few: true, ..e };
    let uaf = "use-after-free";
    let ro = "read-only-write";
    vec![
        l(0x01, ["tt", "4", "3"], ANY),
        l(0x01, ["freed", "0", "3"], found(uaf, Some(-1))),
        l(0x01, ["unmapped", "0", "3"], first(-1)),
        l(0x01, ["code", "0", "3"], first(-1)),
        l(0x01, ["features", "0", "0xffffffff"], first(-1)),
        l(0x02, ["4097", "0", "0"], first(-1)),
        l(0x02, ["out", "0", "0"], first(0)),
        l(0x05, ["out", "live", "16"], first(0)),
        l(0x05, ["out", "freed", "16"], found(uaf, Some(0))),
        l(
            0x05,
            ["out", "fresh", "16"],
            found("uninitialised", Some(0)),
        ),
        l(0x05, ["out", "unmapped", "16"], first(-1)),
        l(0x05, ["77", "live", "16"], first(16)),
        // 64 KiB a call at most: the rest, 2^32 − 1 − 65536, comes back.
        l(
            0x05,
            ["out", "live", "0xffffffff"],
            few(found("overrun", Some(-65537))),
        ),
        l(0x05, ["out", "stack", "0xffffffff"], few(first(-1))),
        l(0x04, ["freed", "0", "0"], found(uaf, Some(0))),
        l(0x04, ["unmapped", "0", "0"], first(0)),
        l(0x04, ["live", "0", "0"], first(0)),
        l(0x03, ["unmapped", "0", "0"], first(0)),
        l(0x06, ["feat", "code", "4"], found(ro, Some(-1))),
        l(0x06, ["feat", "rodata", "4"], found(ro, Some(-1))),
        l(0x06, ["feat", "freed", "4"], found(uaf, Some(0))),
        l(0x06, ["feat", "unmapped", "4"], first(-1)),
        l(0x06, ["in", "code", "16"], first(16)),
        l(0x06, ["12345", "live", "4"], first(-1)),
        // The features file has 5 bytes: 2^32 − 1 − 5 are not read.
        l(0x06, ["feat", "live", "0xffffffff"], first(-6)),
        l(0x0A, ["feat", "0xffffffff", "0"], first(0)),
        l(0x0A, ["999", "0", "0"], first(-1)),
        l(0x0C, ["feat", "0", "0"], first(5)),
        l(0x0C, ["0", "0", "0"], first(-1)),
        l(0x09, ["out", "0", "0"], first(1)),
        l(0x09, ["0xffffffff", "0", "0"], first(-1)),
        l(0x10, ["0", "0", "0"], ANY),
        l(0x11, ["0", "0", "0"], ANY),
        l(0x13, ["0", "0", "0"], ANY),
        l(0x31, ["0", "0", "0"], first(100_000_000)),
        l(0x30, ["code", "0", "0"], found(ro, Some(-1))),
        l(0x30, ["unmapped", "0", "0"], first(-1)),
        l(0x30, ["freed", "0", "0"], found(uaf, Some(0))),
        l(0x30, ["stack", "0", "0"], first(0)),
        l(0x16, ["code", "0", "0"], found(ro, Some(-1))),
        l(0x16, ["freed", "0", "0"], found(uaf, Some(0))),
        l(0x16, ["unmapped", "0", "0"], first(-1)),
        l(0x15, ["code", "255", "0"], found(ro, Some(-1))),
        l(0x15, ["freed", "64", "0"], found(uaf, Some(0))),
        l(
            0x15,
            ["live", "4", "0"],
            Expect {
                refused: true,
                ..ANY
            },
        ),
        l(0x08, ["0xffffffff", "0", "0"], ANY),
        l(
            0x99,
            ["0", "0", "0"],
            Expect {
                unsupported: true,
                ..ANY
            },
        ),
    ]
}

/// The guest's summary line: its calls, first and last results.
fn loop_results(stdout: &str) -> Option<(u64, i64, i64)> {
    let line = stdout.lines().rev().find(|l| l.starts_with("sh_loop: "))?;
    let n: Vec<i64> = line
        .split([' ', ','])
        .filter_map(|w| w.parse().ok())
        .collect();
    match n[..] {
        [calls, first, last] => Some((calls as u64, first, last)),
        _ => None,
    }
}

/// The semihosting call `op`'s name (Arm's).
fn call_name(op: u32) -> &'static str {
    match op {
        0x01 => "SYS_OPEN",
        0x04 => "SYS_WRITE0",
        0x05 => "SYS_WRITE",
        0x06 => "SYS_READ",
        0x15 => "SYS_GET_CMDLINE",
        0x16 => "SYS_HEAPINFO",
        0x30 => "SYS_ELAPSED",
        _ => "",
    }
}

/// Why a loop's run is wrong, if it is.
fn loop_wrong(c: &Loop, status: i32, report: &Value, err: &str) -> Option<String> {
    let e = c.expect;
    let name = call_name(c.op);
    if e.refused {
        return (status != 1 || !err.contains(name))
            .then(|| format!("not refused: {status} {err}"));
    }
    if e.unsupported {
        let stopped = report["end"]["kind"] == "unsupported";
        return (status != 99 || !stopped).then(|| format!("not unsupported: {status}"));
    }
    if ![0, 99].contains(&status) || report.is_null() {
        return Some(format!("exit {status}: {err}"));
    }
    let budget = report["end"]["kind"] == "budget";
    if let Some(kind) = e.finding {
        let named = of_kind(report, kind).iter().any(|f| {
            let m = f["message"].as_str().unwrap_or("");
            m.starts_with(name)
        });
        if !named || status != 99 {
            return Some(format!("no {kind} finding naming {name}"));
        }
    }
    if e.clean && !findings(report).is_empty() {
        return Some(format!("false finding: {}", findings(report)[0]));
    }
    match (loop_results(program_stdout(report)), e.first) {
        (Some((_, got, _)), Some(want)) if got != want => Some(format!("first {got}, not {want}")),
        (None, _) if !budget => Some("no summary line and no budget stop".into()),
        _ => None,
    }
}

#[test]
fn campaign_hostile_semihosting_loops() {
    let seed = 0x5e41_1005_c4ec_u64;
    let mut rng = Rng(seed);
    let elf = guest("sh_loop");
    let work = tempfile::tempdir().unwrap();
    let all = loops();
    let iterations = ["1", "2", "1000", "100000", "4000000000"];
    let budgets = ["1000000", "3000000"];
    let (mut ok, mut found_, mut refused, mut budget, mut wrong) = (0, 0, 0, 0, Vec::new());
    let (mut panics, mut aborts, mut hangs) = (0, 0, 0);
    let mut seen = std::collections::HashSet::new();
    for _ in 0..all.len() + 8 {
        // Every loop once before any twice.
        let mut i = (rng.next() % all.len() as u64) as usize;
        while seen.len() < all.len() && !seen.insert(i) {
            i = (i + 1) % all.len();
        }
        let c = &all[i];
        let n = match c.expect.few {
            true => "3",
            false => rng.pick(&iterations),
        };
        let op = format!("{:#x}", c.op);
        let max = rng.pick(&budgets);
        let mut args = vec!["check", "--format", "json", "--max-instructions", max];
        args.extend([path_str(&elf), "--", &op]);
        args.extend(c.words);
        args.push(n);
        let cmd = format!("{op} {:?} × {n}", c.words);
        let out = match memtrace_in(work.path(), &args, Duration::from_secs(30)) {
            Ended::Exited(out) => out,
            Ended::Killed { hung: true, .. } => {
                hangs += 1;
                eprintln!("hang: {cmd}");
                continue;
            }
            Ended::Killed { .. } => {
                aborts += 1;
                continue;
            }
        };
        let status = out.status.code().unwrap_or(-1);
        let report: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        let err = stderr(&out);
        if status == 101 {
            panics += 1;
        }
        if let Some(why) = loop_wrong(c, status, &report, &err) {
            wrong.push(format!("{cmd}: {why}"));
        }
        match status {
            0 => ok += 1,
            1 => refused += 1,
            _ if report["end"]["kind"] == "budget" => budget += 1,
            _ => found_ += 1,
        }
    }
    let left = std::fs::read_dir(work.path()).unwrap().count();
    eprintln!(
        "campaign seed {seed:#x}: {ok} ok, {found_} findings or stops (99), {budget} budget stops, \
         {refused} refused (1), {panics} panics, {aborts} aborts, {hangs} hangs, {} wrong, {left} leftovers",
        wrong.len()
    );
    assert!(wrong.is_empty(), "{wrong:#?}");
    assert_eq!((panics, aborts, hangs, left), (0, 0, 0, 0));
    assert!(
        found_ > 0 && ok > 0 && budget > 0,
        "the campaign tried too little"
    );
}

/// Why a stripped copy's run is wrong against the whole program's, if it
/// is: the same output and verdict; without symbols no heap checked and no
/// finding, without DWARF alone the same findings.
fn stripped_wrong(how: Strip, whole: (i32, &Value), copy: (i32, &Value)) -> Option<String> {
    let ((ws, w), (cs, c)) = (whole, copy);
    if program_stdout(c) != program_stdout(w) {
        return Some("its output differs".into());
    }
    match how {
        Strip::All | Strip::Symbols => {
            let m = &c["memcheck"];
            if m["heap_checked"] != false || !findings(c).is_empty() {
                return Some(format!("heap checked or findings: {m}"));
            }
            let own = w["exit_status"].as_i64().unwrap_or(-1) as i32;
            (cs != own).then(|| format!("exit {cs}, the program's own is {own}"))
        }
        Strip::Debug => {
            let kinds = |r: &Value| -> Vec<String> {
                findings(r).iter().map(|f| f["kind"].to_string()).collect()
            };
            (cs != ws || kinds(c) != kinds(w) || c["memcheck"]["heap_checked"] != true).then(|| {
                format!(
                    "exit {cs} (whole {ws}), findings {:?} (whole {:?})",
                    kinds(c),
                    kinds(w)
                )
            })
        }
    }
}

#[test]
fn campaign_stripped_unit_test_programs() {
    let seed = 0x5791_99ed_e1f5_u64;
    let mut rng = Rng(seed);
    let mut programs: Vec<PathBuf> = std::fs::read_dir(unit_tests())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "elf"))
        .collect();
    programs.sort();
    programs.push(guest("heap_user"));
    let dir = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let flags = ["--no-calls", "--no-operators"];
    let (mut runs, mut wrong) = (0, Vec::new());
    let (mut panics, mut aborts, mut hangs) = (0, 0, 0);
    for _ in 0..8 {
        let i = (rng.next() % programs.len() as u64) as usize;
        let elf = programs.remove(i);
        let (ws, whole, err) = check_for(&elf, &flags, MINUTE);
        assert!([0, 99].contains(&ws), "{}: {ws} {err}", elf.display());
        for how in [Strip::All, Strip::Debug, Strip::Symbols] {
            let copy = stripped(&elf, how, dir.path());
            let mut args = vec!["check", "--format", "json", path_str(&copy)];
            args.extend(flags);
            runs += 1;
            let what = format!("{} ({how:?})", elf.display());
            let out = match memtrace_in(work.path(), &args, MINUTE) {
                Ended::Exited(out) => out,
                Ended::Killed { hung, .. } => {
                    *(if hung { &mut hangs } else { &mut aborts }) += 1;
                    continue;
                }
            };
            let cs = out.status.code().unwrap_or(-1);
            panics += (cs == 101) as usize;
            let report: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
            if ![0, 99].contains(&cs) || report.is_null() {
                wrong.push(format!("{what}: exit {cs}: {}", stderr(&out)));
            } else if let Some(why) = stripped_wrong(how, (ws, &whole), (cs, &report)) {
                wrong.push(format!("{what}: {why}"));
            }
            std::fs::remove_file(&copy).unwrap();
        }
    }
    let left = std::fs::read_dir(work.path()).unwrap().count();
    eprintln!(
        "campaign seed {seed:#x}: {runs} stripped programs, {panics} panics, {aborts} aborts, \
         {hangs} hangs, {} wrong, {left} leftovers",
        wrong.len()
    );
    assert!(wrong.is_empty(), "{wrong:#?}");
    assert_eq!((panics, aborts, hangs, left), (0, 0, 0, 0));
}

/// The scratch `scratch_sizing.c`'s kernel uses per copy, and the bytes it
/// copies through it in all (its `CHUNK` and `BYTES`).
const CHUNK: u64 = 64;
const COPIED: u64 = 256;

/// `memtrace check` of `scratch_sizing LAYOUT SHORT`: status and report.
fn scratch_sizing(layout: &str, short: u64) -> (i32, Value, String) {
    let elf = guest("scratch_sizing");
    let short = short.to_string();
    check_for(&elf, &["--", layout, &short], MINUTE)
}

/// Whether a contract violation's callers have `function` at `line` of
/// `scratch_sizing.c`.
fn has_caller(violation: &Value, function: &str, line: u64) -> bool {
    violation["callers"].as_array().is_some_and(|c| {
        c.iter().any(|f| {
            f["function"] == function
                && f["file"]
                    .as_str()
                    .is_some_and(|p| p.ends_with("scratch_sizing.c"))
                && f["line"] == line
        })
    })
}

#[test]
fn a_kernel_copying_past_its_under_sized_scratch_is_named_with_its_call_line_and_the_exact_bytes() {
    let src = source("scratch_sizing");
    let copy = line_of(src, "/* the copy into the scratch */");
    let call = line_of(src, "/* the call */");
    let allocated = line_of(src, "/* the scratch block */");
    for layout in ["apart", "shared"] {
        for short in [4u64, 16, 32] {
            let (status, report, err) = scratch_sizing(layout, short);
            let what = format!("{layout} {short}: {err}{report}");
            assert_eq!(status, 99, "{what}");
            // The layer: one stray write per copy, of exactly the bytes
            // past the scratch, at memcpy called by the kernel's line.
            let calls = report["calls"].as_array().expect("calls traced");
            assert_eq!(calls.len(), 1, "{what}");
            let stray = &calls[0]["layer"]["contract"]["stray_write"];
            assert_eq!(stray["violations"], COPIED / CHUNK, "{what}");
            let first = &stray["first"];
            assert_eq!(first["function"], "memcpy", "{what}");
            assert_eq!(first["size"], short, "{what}");
            assert_eq!(first["nearest"]["buffer"], "scratch", "{what}");
            assert_eq!(first["nearest"]["side"], "after_end", "{what}");
            assert_eq!(first["nearest"]["bytes"], short, "{what}");
            assert!(has_caller(first, "arm_avgpool_s8", copy), "{what}");
            assert!(has_caller(first, "main", call), "{what}");
            // Ordinary scratch writes are no stray writes: the scratch is
            // declared, ending where the output starts in a shared block.
            let buffers = calls[0]["layer"]["buffers"].to_string();
            assert!(buffers.contains("scratch"), "{what}");
            if layout == "apart" {
                // The write is blamed on the heap block it hit first.
                let region = first["region"].as_str().unwrap_or_default();
                let hit = format!(
                    "in the heap, {short} B past the end of the {}-byte block",
                    CHUNK - short
                );
                assert!(region.starts_with(&hit), "{what}");
                assert!(region.contains("allocated at main ("), "{what}");
            }
            if layout == "shared" {
                // One block holds both: no byte is outside it.
                assert!(findings(&report).is_empty(), "{what}");
                continue;
            }
            // Memcheck: the copy's overrun of the scratch block, the
            // exact bytes past it (not only those in the gap before the
            // output's block), with the kernel and the program's line.
            let overruns = of_kind(&report, "overrun");
            let block = format!("{short} B past the end of a {}-byte block", CHUNK - short);
            let by_copy = overruns
                .iter()
                .find(|f| {
                    f["message"]
                        .as_str()
                        .is_some_and(|m| m.starts_with("memcpy writes"))
                })
                .unwrap_or_else(|| panic!("no memcpy overrun: {what}"));
            let message = by_copy["message"].as_str().unwrap();
            assert!(message.contains(&block), "{message}");
            assert_eq!(by_copy["chain"][0]["function"], "memcpy", "{what}");
            assert!(
                has_frame(by_copy, "arm_avgpool_s8", "scratch_sizing.c", copy),
                "{what}"
            );
            assert!(
                has_frame(by_copy, "main", "scratch_sizing.c", call),
                "{what}"
            );
            assert_eq!(by_copy["block"]["size"], CHUNK - short, "{what}");
            let alloc = &by_copy["block"]["allocated"];
            assert!(
                alloc
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|f| f["line"] == allocated),
                "{what}"
            );
            // The kernel's own loop reads the same bytes back: one finding,
            // its consecutive reads joined, the same count.
            let reads: Vec<_> = overruns
                .iter()
                .filter(|f| {
                    f["message"]
                        .as_str()
                        .is_some_and(|m| m.starts_with("invalid read"))
                })
                .collect();
            assert_eq!(reads.len(), 1, "{what}");
            let message = reads[0]["message"].as_str().unwrap();
            assert!(message.contains(&format!("read of {block}")), "{message}");
            assert_eq!(reads[0]["chain"][0]["function"], "arm_avgpool_s8", "{what}");
            // Nothing is blamed on the output's block.
            assert!(
                overruns.iter().all(|f| f["block"]["size"] == CHUNK - short),
                "{what}"
            );
        }
    }
}

#[test]
fn a_kernel_whose_scratch_is_sized_right_passes_clean_alone_or_sharing_a_block_with_its_output() {
    for layout in ["apart", "shared"] {
        let (status, report, err) = scratch_sizing(layout, 0);
        let what = format!("{layout}: {err}{report}");
        assert_eq!(status, 0, "{what}");
        assert!(program_stdout(&report).ends_with("output ok\n"), "{what}");
        assert_eq!(report["memcheck"]["errors"], 0, "{what}");
        assert!(findings(&report).is_empty(), "{what}");
        let layer = &report["calls"][0]["layer"];
        assert_eq!(layer["contract"]["ok"], true, "{what}");
        assert_eq!(layer["contract"]["stray_write"]["violations"], 0, "{what}");
        // Every byte of the scratch and of the output is the layer's own.
        let scratch = layer["buffers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["name"] == "scratch")
            .unwrap_or_else(|| panic!("no scratch declared: {what}"));
        assert_eq!(scratch["size"], CHUNK, "{what}");
    }
}
