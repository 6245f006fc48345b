//! `regress --unit-tests`: what vanished from the new build is never a
//! pass, the report never lands on a program either build reads, and a
//! folder that is not one of programs is named as such.
//!
//! * A suite whose program is gone from the new folder, cannot be run (a
//!   FIFO, a dangling link, a truncated file), prints no Unity summary, or
//!   makes none of the old build's API calls at their sites fails (exit 1)
//!   naming the suite and what vanished; a new suite is only reported.
//! * `--out` naming a program of either folder, or a new `*.elf` in one
//!   (the next comparison would run it), is refused before anything runs.
//! * A missing folder, a file or FIFO given as one, an empty folder and a
//!   folder with no program each get their own words.
//!
//! The folders hold copies of a few quick CMSIS-NN suites
//! (`harness-c/build/cortex-m4/unit-tests/`); what each suite calls is read
//! from a `check` run of the old program on its own.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use memtrace_overlap::rng::Rng;
use serde_json::Value;

use super::ended::{run_for, Ended};
use crate::common::unit_tests::{check_json, compile, unit_tests};
use crate::common::{path_str, stderr};

/// Quick suites (a fraction of a second each under `check`) that make
/// API calls: 17, 10 and 2 of them.
const SUITES: [&str; 3] = [
    "test_arm_max_pool_s8",
    "test_arm_transpose_s8",
    "test_arm_softmax_s16",
];

/// A comparison of these suites that takes longer is a hang.
const LIMIT: Duration = Duration::from_secs(90);

/// A folder `dir/name` holding copies of `suites`' programs.
fn folder(dir: &Path, name: &str, suites: &[&str]) -> PathBuf {
    let folder = dir.join(name);
    std::fs::create_dir_all(&folder).unwrap();
    for suite in suites {
        let file = format!("{suite}.elf");
        std::fs::copy(unit_tests().join(&file), folder.join(&file)).unwrap();
    }
    folder
}

/// A program that exits 0 at once and prints nothing (no Unity at all),
/// built once per test binary.
fn silent_program() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("regress-ut-silent");
            std::fs::create_dir_all(&dir).unwrap();
            let source = dir.join("silent.c");
            std::fs::write(&source, "int main(void) { return 0; }\n").unwrap();
            let elf = dir.join("silent.elf");
            compile(&[&source], &[], &["-O1"], &elf);
            elf
        })
        .clone()
}

/// `program` with its symbols stripped, built once per suite.
fn stripped(suite: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("regress-ut-stripped");
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(format!("{suite}.elf"));
    if !out.exists() {
        let tmp = dir.join(format!("{suite}.{}.tmp", std::process::id()));
        let status = Command::new("arm-none-eabi-strip")
            .arg("-o")
            .arg(&tmp)
            .arg(unit_tests().join(format!("{suite}.elf")))
            .status()
            .expect("arm-none-eabi-strip runs");
        assert!(status.success());
        std::fs::rename(&tmp, &out).unwrap();
    }
    out
}

/// Makes a FIFO at `path`.
fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success(), "mkfifo {}", path.display());
}

/// `memtrace ARGS`, bounded by [`LIMIT`].
fn memtrace_for(args: &[&str]) -> Ended {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_memtrace"));
    cmd.args(args);
    run_for(cmd, LIMIT)
}

/// `regress --unit-tests OLD NEW --format json EXTRA`, which must end by
/// itself.
fn regress(old: &Path, new: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "regress",
        "--unit-tests",
        path_str(old),
        path_str(new),
        "--format",
        "json",
    ];
    args.extend_from_slice(extra);
    match memtrace_for(&args) {
        Ended::Exited(out) => out,
        other => panic!("regress {args:?}: {other:?}"),
    }
}

/// The report of a comparison that ran (exit 0 or 1).
fn report_of(out: &Output) -> Value {
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "exit {:?}: {}",
        out.status.code(),
        stderr(out)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(out)))
}

/// An error before anything ran: exit 1, no report, `error:` saying
/// `words`.
fn assert_refused(out: &Output, words: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(err.starts_with("error: "), "{err}");
    assert!(err.contains(words), "`{words}` not in: {err}");
}

/// One of `n` things.
fn pick(rng: &mut Rng, n: usize) -> usize {
    rng.range(0, n as u32 - 1) as usize
}

/// The functions a suite's program calls, by a `check` run of it alone.
fn functions_called(suite: &str) -> Vec<String> {
    let (run, _) = check_json(&unit_tests().join(format!("{suite}.elf")), &[]);
    let mut names: Vec<String> = run["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["function"].as_str().unwrap().to_owned())
        .collect();
    names.dedup();
    assert!(!names.is_empty(), "{suite} makes no API call");
    names
}

fn suite<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["suites"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["suite"] == name)
        .unwrap_or_else(|| panic!("no suite {name} in {report:#}"))
}

/// Every file under `dir` (not following links) with its kind and bytes.
fn snapshot(dir: &Path) -> Vec<(PathBuf, String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let kind = format!("{:?}", meta.file_type());
        let bytes = if meta.is_file() {
            std::fs::read(&path).unwrap()
        } else if meta.file_type().is_symlink() {
            std::fs::read_link(&path)
                .unwrap()
                .into_os_string()
                .into_encoded_bytes()
        } else {
            Vec::new()
        };
        out.push((path, kind, bytes));
    }
    out
}

#[test]
fn a_suite_whose_program_is_another_suites_fails_naming_the_vanished_calls() {
    let dir = tempfile::tempdir().unwrap();
    let [pool, transpose, _] = SUITES;
    let old = folder(dir.path(), "old", &[pool, transpose]);
    let new = folder(dir.path(), "new", &[transpose]);
    // The new build's max-pool "suite" is the transpose suite: Unity's
    // summary is there, but none of max pool's calls.
    std::fs::copy(
        unit_tests().join(format!("{transpose}.elf")),
        new.join(format!("{pool}.elf")),
    )
    .unwrap();
    let out = regress(&old, &new, &[]);
    let report = report_of(&out);
    assert_eq!(out.status.code(), Some(1), "{report:#}");
    assert_eq!(report["passed"], false);
    let s = suite(&report, pool);
    assert_eq!(s["fails"], true, "{s:#}");
    assert_eq!(suite(&report, transpose)["fails"], false);
    let changes = s["changes"].to_string();
    assert!(changes.contains("not made any more"), "{changes}");
    for function in functions_called(pool) {
        assert!(changes.contains(&function), "{function} not in {changes}");
    }
    let err = stderr(&out);
    assert!(
        err.contains(&format!("FAIL {pool}")) && err.contains("not made any more"),
        "{err}"
    );
}

#[test]
fn a_suite_that_prints_no_unity_summary_fails() {
    let dir = tempfile::tempdir().unwrap();
    let [_, _, softmax] = SUITES;
    let old = folder(dir.path(), "old", &[softmax]);
    let new = folder(dir.path(), "new", &[]);
    std::fs::copy(silent_program(), new.join(format!("{softmax}.elf"))).unwrap();
    let out = regress(&old, &new, &[]);
    let report = report_of(&out);
    assert_eq!(out.status.code(), Some(1), "{report:#}");
    let s = suite(&report, softmax);
    assert_eq!(s["new"]["unity"], Value::Null);
    // It exited 0, as a passing suite does: only the summary tells.
    assert_eq!(s["new"]["exit_status"], 0);
    let changes = s["changes"].to_string();
    assert!(changes.contains("no Unity summary"), "{changes}");
    assert!(stderr(&out).contains(&format!("FAIL {softmax}")));
}

#[test]
fn a_suite_missing_from_the_new_folder_fails_and_a_new_suite_is_only_reported() {
    let dir = tempfile::tempdir().unwrap();
    let [pool, transpose, softmax] = SUITES;
    let old = folder(dir.path(), "old", &[pool, transpose]);
    let new = folder(dir.path(), "new", &[transpose, softmax]);
    let out = regress(&old, &new, &[]);
    let report = report_of(&out);
    assert_eq!(out.status.code(), Some(1), "{report:#}");
    assert_eq!(report["only_old"], serde_json::json!([pool]));
    assert_eq!(report["only_new"], serde_json::json!([softmax]));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("FAIL {pool}")) && err.contains("vanished"),
        "{err}"
    );
    assert!(!err.contains(&format!("FAIL {softmax}")), "{err}");

    // A suite added, nothing lost: reported, and the comparison passes.
    let grown = folder(dir.path(), "grown", &[pool, transpose, softmax]);
    let out = regress(&old, &grown, &[]);
    let report = report_of(&out);
    assert_eq!(out.status.code(), Some(0), "{report:#}");
    assert_eq!(report["only_new"], serde_json::json!([softmax]));
}

#[test]
fn a_stripped_program_fails_as_its_calls_vanish() {
    let dir = tempfile::tempdir().unwrap();
    let [_, transpose, _] = SUITES;
    let old = folder(dir.path(), "old", &[transpose]);
    let new = folder(dir.path(), "new", &[]);
    std::fs::copy(stripped(transpose), new.join(format!("{transpose}.elf"))).unwrap();
    let out = regress(&old, &new, &[]);
    let report = report_of(&out);
    assert_eq!(out.status.code(), Some(1), "{report:#}");
    // Its calls are found by symbol: without symbols every one vanished,
    // which fails the suite whatever memcheck finds.
    let s = suite(&report, transpose);
    assert_eq!(s["new"]["calls"], 0, "{s:#}");
    let changes = s["changes"].to_string();
    assert!(
        changes.contains("of the old build's calls not made any more"),
        "{changes}"
    );
    assert!(stderr(&out).contains(&format!("FAIL {transpose}")));
}

#[test]
fn a_fifo_or_a_dangling_link_in_a_programs_place_fails_that_suite_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let [pool, transpose, softmax] = SUITES;
    let old = folder(dir.path(), "old", &[pool, transpose, softmax]);
    let new = folder(dir.path(), "new", &[softmax]);
    mkfifo(&new.join(format!("{pool}.elf")));
    std::os::unix::fs::symlink(
        dir.path().join("nowhere.elf"),
        new.join(format!("{transpose}.elf")),
    )
    .unwrap();
    let out = regress(&old, &new, &[]);
    let report = report_of(&out);
    assert_eq!(out.status.code(), Some(1), "{report:#}");
    let fifo = suite(&report, pool);
    assert_eq!(fifo["fails"], true);
    assert!(
        fifo["new"]["error"].as_str().unwrap().contains("a FIFO"),
        "{fifo:#}"
    );
    let link = suite(&report, transpose);
    assert!(
        link["new"]["error"]
            .as_str()
            .unwrap()
            .contains("does not exist"),
        "{link:#}"
    );
    assert_eq!(suite(&report, softmax)["fails"], false);
}

#[test]
fn a_report_named_as_a_program_of_either_build_is_refused_and_nothing_is_touched() {
    let dir = tempfile::tempdir().unwrap();
    let [_, _, softmax] = SUITES;
    let old = folder(dir.path(), "old", &[softmax]);
    let new = folder(dir.path(), "new", &[softmax]);
    let program = format!("{softmax}.elf");
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let link = elsewhere.join("link.md");
    std::os::unix::fs::symlink(old.join(&program), &link).unwrap();
    let hard = elsewhere.join("hard.md");
    std::fs::hard_link(new.join(&program), &hard).unwrap();
    let (before_old, before_new) = (snapshot(&old), snapshot(&new));
    for out_path in [
        old.join(&program),
        new.join(&program),
        // Not there yet, but the next comparison would run it.
        old.join("report.elf"),
        new.join("report.elf"),
        link.clone(),
        hard.clone(),
    ] {
        let out = regress(&old, &new, &["--out", path_str(&out_path)]);
        assert_refused(&out, "refusing");
        assert_eq!(snapshot(&old), before_old, "{}", out_path.display());
        assert_eq!(snapshot(&new), before_new, "{}", out_path.display());
    }
    // A report beside the programs under another name is no program.
    let beside = old.join("report.json");
    let out = regress(&old, &new, &["--out", path_str(&beside)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let written: Value = serde_json::from_slice(&std::fs::read(&beside).unwrap()).unwrap();
    assert_eq!(written["passed"], true);
}

#[test]
fn folders_that_hold_no_programs_are_named_for_what_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let [_, _, softmax] = SUITES;
    let new = folder(dir.path(), "new", &[softmax]);
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("notes.txt"), b"no programs here").unwrap();
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, b"not a program").unwrap();
    let fifo = dir.path().join("fifo");
    mkfifo(&fifo);
    let missing = dir.path().join("missing");
    for (old, words) in [
        (
            &missing,
            format!("the folder {} does not exist", missing.display()),
        ),
        (&empty, format!("the folder {} is empty", empty.display())),
        (
            &other,
            format!("the folder {} holds no unit-test program", other.display()),
        ),
        (
            &text,
            format!("{} is a file but not a program", text.display()),
        ),
        (&fifo, format!("{} is a FIFO, not a folder", fifo.display())),
    ] {
        for out_flag in [&[][..], &["--out", "/dev/null"][..]] {
            let out = regress(old, &new, out_flag);
            assert_refused(&out, &words);
            assert!(!stderr(&out).contains("writing the report"));
        }
    }
}

/// What a campaign case does to the new folder's copy of one suite.
#[derive(Clone, Copy, Debug)]
enum Vanish {
    /// Nothing (the control: the comparison must pass).
    Keep,
    /// The program is removed.
    Remove,
    /// Replaced by another suite's program.
    Other,
    /// Cut to a fraction of its bytes.
    Truncate,
    /// Its symbols stripped.
    Strip,
    /// Replaced by a program that prints nothing and exits 0.
    Silent,
    /// A FIFO in its place.
    Fifo,
    /// A link to a FIFO in its place.
    LinkToFifo,
    /// A link to nothing.
    Dangling,
}

/// Where a campaign case points `--out`.
#[derive(Clone, Copy, Debug)]
enum Report {
    /// Stdout.
    Stdout,
    /// A file outside both folders.
    Outside,
    /// An old program.
    OldProgram,
    /// A new program.
    NewProgram,
    /// A new `*.elf` in the old folder.
    NewElfInOld,
}

/// What a comparison answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    /// Exit 0 and a report that passed.
    Passed,
    /// Exit 1 and a report that failed.
    Failed,
    /// Exit 1 with an error and no report.
    Refused,
    /// A panic (exit 101).
    Panicked,
    /// Anything else (a report contradicting its exit status).
    Other,
}

/// The verdict of `out`, whose report is `report` (stdout or `--out`).
fn verdict(out: &Output, report: &[u8]) -> Verdict {
    let passed = serde_json::from_slice::<Value>(report)
        .ok()
        .and_then(|r| r["passed"].as_bool());
    match (out.status.code(), passed) {
        (Some(0), Some(true)) => Verdict::Passed,
        (Some(1), Some(false)) => Verdict::Failed,
        (Some(1), None) if stderr(out).starts_with("error: ") => Verdict::Refused,
        (Some(101), _) => Verdict::Panicked,
        _ => Verdict::Other,
    }
}

#[test]
fn campaign_vanishing_calls_summaries_and_programs() {
    let seed = 0x0766_16e1_54ed_u64;
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let old = folder(dir.path(), "old", &SUITES);
    let before_old = snapshot(&old);
    let fifo = dir.path().join("fifo");
    mkfifo(&fifo);
    let vanishes = [
        Vanish::Keep,
        Vanish::Remove,
        Vanish::Other,
        Vanish::Truncate,
        Vanish::Strip,
        Vanish::Silent,
        Vanish::Fifo,
        Vanish::LinkToFifo,
        Vanish::Dangling,
    ];
    let reports = [
        Report::Stdout,
        Report::Outside,
        Report::OldProgram,
        Report::NewProgram,
        Report::NewElfInOld,
    ];
    let (mut passed, mut failed, mut refused) = (0, 0, 0);
    let (mut wrong, mut panics, mut aborts, mut hangs, mut touched, mut leftovers) =
        (0, 0, 0, 0, 0, 0);
    for case in 0..24 {
        // The first cases are each kind of vanishing once, then at random.
        let vanish = vanishes
            .get(case)
            .copied()
            .unwrap_or_else(|| vanishes[pick(&mut rng, vanishes.len())]);
        let report_to = if case < vanishes.len() {
            Report::Stdout
        } else {
            reports[pick(&mut rng, reports.len())]
        };
        let target = SUITES[pick(&mut rng, SUITES.len())];
        let new = folder(dir.path(), &format!("new-{case}"), &SUITES);
        let program = new.join(format!("{target}.elf"));
        match vanish {
            Vanish::Keep => {}
            Vanish::Remove => std::fs::remove_file(&program).unwrap(),
            Vanish::Other => {
                let other = SUITES.iter().find(|s| **s != target).unwrap();
                std::fs::copy(unit_tests().join(format!("{other}.elf")), &program).unwrap();
            }
            Vanish::Truncate => {
                let len = std::fs::metadata(&program).unwrap().len();
                let keep = u64::from(rng.range(0, 99)) * len / 100;
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(&program)
                    .unwrap()
                    .set_len(keep)
                    .unwrap();
            }
            Vanish::Strip => {
                std::fs::copy(stripped(target), &program).unwrap();
            }
            Vanish::Silent => {
                std::fs::copy(silent_program(), &program).unwrap();
            }
            Vanish::Fifo => {
                std::fs::remove_file(&program).unwrap();
                mkfifo(&program);
            }
            Vanish::LinkToFifo => {
                std::fs::remove_file(&program).unwrap();
                std::os::unix::fs::symlink(&fifo, &program).unwrap();
            }
            Vanish::Dangling => {
                std::fs::remove_file(&program).unwrap();
                std::os::unix::fs::symlink(dir.path().join("gone.elf"), &program).unwrap();
            }
        }
        let outside = dir.path().join(format!("report-{case}.json"));
        let out_path = match report_to {
            Report::Stdout => None,
            Report::Outside => Some(outside.clone()),
            Report::OldProgram => Some(old.join(format!("{target}.elf"))),
            Report::NewProgram => Some(new.join(format!("{}.elf", SUITES[0]))),
            Report::NewElfInOld => Some(old.join(format!("report-{case}.elf"))),
        };
        let before_new = snapshot(&new);
        let mut args = vec![
            "regress",
            "--unit-tests",
            path_str(&old),
            path_str(&new),
            "--format",
            "json",
        ];
        if let Some(p) = &out_path {
            args.extend(["--out", path_str(p)]);
        }
        // Refused before anything runs; else what vanished fails and only
        // the untouched copy passes.
        let expected = if !matches!(report_to, Report::Stdout | Report::Outside) {
            Verdict::Refused
        } else if matches!(vanish, Vanish::Keep) {
            Verdict::Passed
        } else {
            Verdict::Failed
        };
        match memtrace_for(&args) {
            Ended::Exited(out) => {
                let written = std::fs::read(&outside).unwrap_or_default();
                let got = verdict(
                    &out,
                    if out.stdout.is_empty() {
                        &written
                    } else {
                        &out.stdout
                    },
                );
                match got {
                    Verdict::Passed => passed += 1,
                    Verdict::Failed => failed += 1,
                    Verdict::Refused => refused += 1,
                    Verdict::Panicked => panics += 1,
                    Verdict::Other => {}
                }
                if got != expected {
                    wrong += 1;
                    eprintln!(
                        "case {case}: {vanish:?} {target}, {report_to:?}: {got:?}, not {expected:?}: {}",
                        stderr(&out)
                    );
                }
            }
            Ended::Killed { hung: true, .. } => hangs += 1,
            Ended::Killed { signal, .. } => {
                aborts += 1;
                eprintln!("case {case}: {vanish:?}, {report_to:?}: killed by signal {signal:?}");
            }
        }
        if snapshot(&old) != before_old || snapshot(&new) != before_new {
            touched += 1;
            eprintln!("case {case}: {vanish:?}, {report_to:?}: an input changed");
        }
        // Nothing but the report outside.
        let extra = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| {
                !(n == "old" || n == "fifo" || n.starts_with("new-") || n.starts_with("report-"))
            })
            .count();
        leftovers += extra;
        if !matches!(report_to, Report::Outside) && outside.exists() {
            leftovers += 1;
        }
        std::fs::remove_dir_all(&new).unwrap();
    }
    eprintln!(
        "campaign seed {seed:#x}: {passed} passed (0), {failed} failed (1), {refused} refused (1, no report), \
         {wrong} wrong answers, {panics} panics, {aborts} aborts, {hangs} hangs, \
         {touched} inputs touched, {leftovers} leftovers"
    );
    assert_eq!(
        (wrong, panics, aborts, hangs, touched, leftovers),
        (0, 0, 0, 0, 0, 0)
    );
    assert!(passed > 0 && failed > 0 && refused > 0, "a class never ran");
}
