//! `memtrace regress --unit-tests OLD NEW`: a library's own unit tests,
//! built against two releases, compared under `memtrace check`: per suite
//! Unity's verdict and memcheck's findings, per CMSIS-NN API call its O_s,
//! its memory contract and its instructions. The tests are the same source
//! on both sides, so every call pairs with its twin by its place in the
//! test (function, call site, shapes and order); what differs is the
//! library.
//!
//! A change fails the comparison when it can break a user: a test that
//! now fails, a memcheck finding or contract violation the old release did
//! not have, an O_s that shrank (a plan made with the old value may now
//! clobber). So does what vanished, as nothing was compared for it: a
//! suite of the old build the new one lacks (or cannot run), a Unity
//! summary the new build does not print, fewer Unity tests run, an old
//! call with no counterpart in the new run. Instruction changes beyond the
//! threshold, new suites, new calls and calls made with other argument
//! shapes are reported, not failed.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::programs::{not_a_program, programs, Side};
use super::scratch::ScratchOverrun;
use crate::bail;
use crate::support::error::Result;
use crate::support::outcome::{Answer, Format, Outcome};
use crate::workflows::check::{
    check, CallReport, CheckOptions, CheckReport, Operators, ReportEnd, Suppressions,
};

/// What to compare.
#[derive(Clone, Debug)]
pub struct UnitTestOptions {
    /// The unit-test programs built against the old release: a folder of
    /// `*.elf`, or one program.
    pub old: PathBuf,
    /// The same tests built against the new release.
    pub new: PathBuf,
    /// Instruction budget of each program.
    pub max_instructions: u64,
    /// Heap bytes of each program (where its linker script places none).
    pub heap_bytes: u64,
    /// Stack bytes of each program (likewise).
    pub stack_bytes: u64,
    /// Percent of instruction change worth reporting.
    pub instruction_threshold: f64,
}

/// One suite's figures under one release.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SuiteFigures {
    /// Why the program could not be run (then every figure is empty).
    pub error: Option<String>,
    /// Unity's tests and failures, if it printed its verdict.
    pub unity: Option<(u64, u64)>,
    /// The program's exit status (`None`: it did not exit).
    pub exit_status: Option<i32>,
    /// memcheck's errors (findings, lost blocks, a stop).
    pub memcheck_errors: usize,
    /// API calls that broke their memory contract.
    pub broken_calls: usize,
    /// API calls traced.
    pub calls: usize,
    /// Instructions the program retired.
    pub instructions: u64,
}

/// One API call of a suite under both releases.
#[derive(Clone, Debug, Serialize)]
pub struct CallChange {
    /// Its index among the suite's calls.
    pub index: usize,
    /// The API function.
    pub function: String,
    /// Where the test calls it (file:line).
    pub site: String,
    /// Traced exact O_s, old and new.
    pub os_bytes: (Option<u64>, Option<u64>),
    /// Instructions inside the call, old and new.
    pub instructions: (u64, u64),
    /// Whether it broke its memory contract, old and new.
    pub violates: (bool, bool),
    /// What changed, worded for the report; `fails` marks what fails it.
    pub changes: Vec<String>,
    /// One of the changes can break a user.
    pub fails: bool,
}

/// One suite under both releases.
#[derive(Clone, Debug, Serialize)]
pub struct SuiteChange {
    /// The suite (its program's file name without `.elf`).
    pub suite: String,
    /// Its figures built against the old release.
    pub old: SuiteFigures,
    /// Against the new release.
    pub new: SuiteFigures,
    /// What changed in the suite as a whole.
    pub changes: Vec<String>,
    /// The calls that changed.
    pub calls: Vec<CallChange>,
    /// The calls whose scratch (the heap block at `ctx->buf`) either build
    /// overran: a size function that under-reports its kernel's use.
    pub scratch_overruns: Vec<ScratchOverrun>,
    /// Something in it fails the comparison.
    pub fails: bool,
}

/// The comparison.
#[derive(Clone, Debug, Serialize)]
pub struct UnitTestRegress {
    /// The old build.
    pub old: String,
    /// The new build.
    pub new: String,
    /// Suites built on both sides.
    pub suites: Vec<SuiteChange>,
    /// Suites built against the old release only: the new build lost them
    /// (it lacks an API they call, or the build was not asked for), which
    /// fails the comparison.
    pub only_old: Vec<String>,
    /// Suites built against the new release only (reported).
    pub only_new: Vec<String>,
    /// No change that can break a user, and nothing vanished.
    pub passed: bool,
}

/// Runs every suite present on both sides under `check` and compares them.
pub fn regress_unit_tests(options: &UnitTestOptions) -> Result<UnitTestRegress> {
    let old = programs(&options.old, Side::Old)?;
    let new = programs(&options.new, Side::New)?;
    let mut suites = Vec::new();
    for (name, a) in &old {
        let Some(b) = new.get(name) else { continue };
        let (a, b) = (run(a, options), run(b, options));
        suites.push(compare_suite(name, &a, &b, options.instruction_threshold));
    }
    if suites.is_empty() {
        bail!(
            "{} and {} have no unit-test program in common (same file names, `*.elf`)",
            options.old.display(),
            options.new.display()
        );
    }
    let only = |this: &BTreeMap<String, PathBuf>, other: &BTreeMap<String, PathBuf>| {
        this.keys()
            .filter(|k| !other.contains_key(*k))
            .cloned()
            .collect::<Vec<_>>()
    };
    let only_old = only(&old, &new);
    let passed = suites.iter().all(|s| !s.fails) && only_old.is_empty();
    Ok(UnitTestRegress {
        old: options.old.display().to_string(),
        new: options.new.display().to_string(),
        suites,
        only_old,
        only_new: only(&new, &old),
        passed,
    })
}

/// One suite run as `memtrace check` runs it, with its calls traced; or
/// why it could not be.
fn run(program: &Path, options: &UnitTestOptions) -> std::result::Result<CheckReport, String> {
    if let Some(why) = not_a_program(program) {
        return Err(why);
    }
    check(&CheckOptions {
        program: program.to_path_buf(),
        args: Vec::new(),
        max_instructions: options.max_instructions,
        heap_bytes: options.heap_bytes,
        stack_bytes: options.stack_bytes,
        memcheck: true,
        echo: false,
        suppressions: Suppressions::default(),
        calls: true,
        operators: Operators::Off,
    })
    .map_err(|e| e.to_string())
}

fn figures(report: &CheckReport) -> SuiteFigures {
    SuiteFigures {
        error: None,
        unity: report.unity.as_ref().map(|u| (u.tests, u.failures)),
        exit_status: report.program_status(),
        memcheck_errors: report.memcheck_errors(),
        broken_calls: report.broken_calls(),
        calls: report.calls.as_ref().map_or(0, Vec::len),
        instructions: report.instructions,
    }
}

type Run = std::result::Result<CheckReport, String>;

/// The changes of one suite between its two runs; a suite one side could
/// not run fails, as nothing of it was compared.
fn compare_suite(name: &str, old: &Run, new: &Run, threshold: f64) -> SuiteChange {
    let (Ok(a), Ok(b)) = (old, new) else {
        let mut changes = Vec::new();
        let mut side = |run: &Run, which: &str| match run {
            Ok(report) => figures(report),
            Err(why) => {
                changes.push(format!("the {which} build's program cannot be run: {why}"));
                SuiteFigures {
                    error: Some(why.clone()),
                    ..SuiteFigures::default()
                }
            }
        };
        let (old, new) = (side(old, "old"), side(new, "new"));
        return SuiteChange {
            suite: name.to_string(),
            old,
            new,
            changes,
            calls: Vec::new(),
            scratch_overruns: Vec::new(),
            fails: true,
        };
    };
    compare_runs(name, a, b, threshold)
}

/// The changes of one suite between two runs.
fn compare_runs(name: &str, old: &CheckReport, new: &CheckReport, threshold: f64) -> SuiteChange {
    let (a, b) = (figures(old), figures(new));
    let mut changes = Vec::new();
    let mut fails = false;
    let mut fail = |why: String| {
        changes.push(why);
        fails = true;
    };
    match (&old.unity, &new.unity) {
        (_, None) => fail(format!(
            "no Unity summary: the new build's program {} before Unity printed its verdict{}",
            ended(new),
            if old.unity.is_none() {
                " (nor did the old build's print one)"
            } else {
                ""
            }
        )),
        (Some(u), Some(v))
            if v.tests - v.ignored.min(v.tests) < u.tests - u.ignored.min(u.tests) =>
        {
            fail(format!(
                "Unity tests run {} → {} (of {} → {}, {} → {} ignored)",
                u.tests - u.ignored.min(u.tests),
                v.tests - v.ignored.min(v.tests),
                u.tests,
                v.tests,
                u.ignored,
                v.ignored
            ));
        }
        _ => {}
    }
    let failures = |f: &SuiteFigures| f.unity.map_or(0, |(_, failed)| failed);
    // Without a summary, how the program ended is said above.
    let exit_failed = a.exit_status == Some(0) && b.exit_status != Some(0);
    if new.unity.is_some() && (failures(&b) > failures(&a) || exit_failed) {
        fail(format!(
            "tests fail: Unity {} → {} failures, exit {} → {}",
            failures(&a),
            failures(&b),
            status_text(a.exit_status),
            status_text(b.exit_status)
        ));
    }
    if b.memcheck_errors > a.memcheck_errors {
        fail(format!(
            "memcheck errors {} → {}{}",
            a.memcheck_errors,
            b.memcheck_errors,
            first_finding(new).map_or_else(String::new, |f| format!(": {f}"))
        ));
    } else if b.memcheck_errors < a.memcheck_errors {
        changes.push(format!(
            "memcheck errors {} → {}",
            a.memcheck_errors, b.memcheck_errors
        ));
    }
    // Each scratch overrun named as its call's, whichever build has it.
    let scratch_overruns = super::scratch::compare(old, new);
    for overrun in scratch_overruns.iter().filter(|o| o.is_change()) {
        changes.push(overrun.line());
        fails |= overrun.fails();
    }
    let empty = Vec::new();
    let (old_calls, new_calls) = (
        old.calls.as_ref().unwrap_or(&empty),
        new.calls.as_ref().unwrap_or(&empty),
    );
    let pairs = matching_calls(old_calls, new_calls);
    let balance = CallBalance::of(old_calls, new_calls, &pairs);
    if !balance.vanished.is_empty() {
        fails = true;
    }
    changes.extend(balance.describe(old_calls, new_calls.len()));
    let mut calls = Vec::new();
    for pair in &pairs {
        let [Some(i), Some(j)] = *pair else { continue };
        if let Some(change) = compare_call(j, &old_calls[i], &new_calls[j], threshold) {
            fails |= change.fails;
            calls.push(change);
        }
    }
    SuiteChange {
        suite: name.to_string(),
        old: a,
        new: b,
        changes,
        calls,
        scratch_overruns,
        fails,
    }
}

/// How a run ended, for a missing Unity summary.
fn ended(report: &CheckReport) -> String {
    match &report.end {
        ReportEnd::Exit { code } => format!("exited with status {code}"),
        ReportEnd::Abnormal { .. } => "aborted".to_string(),
        ReportEnd::Stopped { kind, message, .. } => format!("was stopped ({kind}: {message})"),
    }
}

/// The calls of the two runs without a twin: an old call whose function
/// is still called at its site with other argument shapes changed (its
/// figures are not comparable); one with no such call vanished.
struct CallBalance {
    /// Old calls (indices) nothing in the new run stands for.
    vanished: Vec<usize>,
    /// Old calls made again at their site with other shapes.
    reshaped: usize,
    /// New calls that stand for no old one.
    added: usize,
}

impl CallBalance {
    fn of(old: &[CallReport], new: &[CallReport], pairs: &[[Option<usize>; 2]]) -> Self {
        let mut unpaired_new: HashMap<(&str, String), usize> = HashMap::new();
        for pair in pairs {
            if let [None, Some(j)] = *pair {
                *unpaired_new
                    .entry((new[j].call.function, site(&new[j])))
                    .or_default() += 1;
            }
        }
        let mut balance = CallBalance {
            vanished: Vec::new(),
            reshaped: 0,
            added: unpaired_new.values().sum(),
        };
        for pair in pairs {
            let [Some(i), None] = *pair else { continue };
            match unpaired_new.get_mut(&(old[i].call.function, site(&old[i]))) {
                Some(left) if *left > 0 => {
                    *left -= 1;
                    balance.reshaped += 1;
                    balance.added -= 1;
                }
                _ => balance.vanished.push(i),
            }
        }
        balance
    }

    /// The suite's change line, if any: the vanished calls (what fails)
    /// first, then the others (reported).
    fn describe(&self, old: &[CallReport], new_calls: usize) -> Option<String> {
        let mut parts = Vec::new();
        if !self.vanished.is_empty() {
            parts.push(format!(
                "{} of the old build's calls not made any more ({})",
                self.vanished.len(),
                vanished_list(old, &self.vanished)
            ));
        }
        if self.reshaped > 0 {
            parts.push(format!(
                "{} made with other argument shapes (not compared)",
                self.reshaped
            ));
        }
        if self.added > 0 {
            parts.push(format!("{} new", self.added));
        }
        (!parts.is_empty()).then(|| {
            format!(
                "API calls {} → {new_calls}: {}",
                old.len(),
                parts.join(", ")
            )
        })
    }
}

/// The vanished calls by function and site, in the old run's order, with
/// how many times each (the first few).
fn vanished_list(old: &[CallReport], vanished: &[usize]) -> String {
    const SHOWN: usize = 4;
    let mut seen: Vec<((&str, String), usize)> = Vec::new();
    for &i in vanished {
        let key = (old[i].call.function, site(&old[i]));
        match seen.iter_mut().find(|(k, _)| *k == key) {
            Some((_, n)) => *n += 1,
            None => seen.push((key, 1)),
        }
    }
    let mut text: Vec<String> = seen
        .iter()
        .take(SHOWN)
        .map(|((function, at), n)| match n {
            1 => format!("`{function}` at {at}"),
            n => format!("`{function}` at {at} (×{n})"),
        })
        .collect();
    if seen.len() > SHOWN {
        text.push(format!("and {} more", seen.len() - SHOWN));
    }
    text.join(", ")
}

/// The calls of the two runs paired with their twins: the longest common
/// subsequence of (function, call site, argument shapes), so a call the
/// new release makes in addition (or no longer) does not shift every pair
/// after it. Each pair is `[old index, new index]`, one side `None` for an
/// unmatched call.
fn matching_calls(old: &[CallReport], new: &[CallReport]) -> Vec<[Option<usize>; 2]> {
    fn key(c: &CallReport) -> (&str, String, &str) {
        (c.call.function, site(c), c.call.shapes.as_str())
    }
    let (a, b): (Vec<_>, Vec<_>) = (old.iter().map(key).collect(), new.iter().map(key).collect());
    super::pairing::pair_by_key(&a, &b)
}

fn status_text(status: Option<i32>) -> String {
    status.map_or_else(|| "none".to_string(), |s| s.to_string())
}

fn first_finding(report: &CheckReport) -> Option<String> {
    report.findings.first().map(|f| f.message.clone())
}

fn site(call: &CallReport) -> String {
    let at = &call.call.call_site;
    match (&at.file, at.line) {
        (Some(file), Some(line)) => format!("{file}:{line}"),
        _ => format!("pc {:#x}", at.pc),
    }
}

fn exact_os(call: &CallReport) -> Option<u64> {
    call.layer
        .as_ref()
        .and_then(|l| l.overlap.as_ref())
        .map(|o| o.exact_bytes)
}

/// What changed in one call, if anything worth reporting.
fn compare_call(
    index: usize,
    old: &CallReport,
    new: &CallReport,
    threshold: f64,
) -> Option<CallChange> {
    let mut changes = Vec::new();
    let mut fails = false;
    let (os_old, os_new) = (exact_os(old), exact_os(new));
    match (os_old, os_new) {
        (Some(a), Some(b)) if b < a => {
            changes.push(format!("O_s shrank {a} → {b} B"));
            fails = true;
        }
        (Some(a), Some(b)) if b > a => changes.push(format!("O_s grew {a} → {b} B")),
        _ => {}
    }
    let (v_old, v_new) = (old.violates(), new.violates());
    if v_new && !v_old {
        changes.push("breaks its memory contract".to_string());
        fails = true;
    } else if v_old && !v_new {
        changes.push("no longer breaks its memory contract".to_string());
    }
    let (i_old, i_new) = (old.call.instructions, new.call.instructions);
    let percent = 100.0 * (i_new as f64 - i_old as f64) / (i_old.max(1) as f64);
    if percent.abs() > threshold {
        changes.push(format!("instructions {i_old} → {i_new} ({percent:+.1} %)"));
    }
    (!changes.is_empty()).then(|| CallChange {
        index,
        function: new.call.function.to_string(),
        site: site(new),
        os_bytes: (os_old, os_new),
        instructions: (i_old, i_new),
        violates: (v_old, v_new),
        changes,
        fails,
    })
}

impl UnitTestRegress {
    /// The report as Markdown.
    pub fn to_markdown(&self) -> String {
        let mut s = format!(
            "## Unit tests: {} → {}\n\n{} suites on both sides, {} failing the comparison\n\n",
            self.old,
            self.new,
            self.suites.len(),
            self.suites.iter().filter(|s| s.fails).count()
        );
        s += "| suite | Unity (tests, failures) | memcheck errors | broken calls | instructions | changes |\n|---|---|---|---|---|---|\n";
        for suite in &self.suites {
            let unity = |f: &SuiteFigures| {
                f.unity
                    .map_or("-".to_string(), |(t, x)| format!("{t}, {x}"))
            };
            let mut what: Vec<String> = suite.changes.clone();
            // Overruns both builds share are not changes but still shown.
            what.extend(
                suite
                    .scratch_overruns
                    .iter()
                    .filter(|o| !o.is_change())
                    .map(ScratchOverrun::line),
            );
            what.extend(suite.calls.iter().map(|c| {
                format!(
                    "call {} `{}` ({}): {}",
                    c.index,
                    c.function,
                    c.site,
                    c.changes.join("; ")
                )
            }));
            let _ = writeln!(
                s,
                "| {}{} | {} → {} | {} → {} | {} → {} | {} → {} | {} |",
                if suite.fails { "**FAIL** " } else { "" },
                suite.suite,
                unity(&suite.old),
                unity(&suite.new),
                suite.old.memcheck_errors,
                suite.new.memcheck_errors,
                suite.old.broken_calls,
                suite.new.broken_calls,
                suite.old.instructions,
                suite.new.instructions,
                if what.is_empty() {
                    "none".to_string()
                } else {
                    what.join("<br>")
                }
            );
        }
        if !self.only_old.is_empty() {
            let _ = writeln!(
                s,
                "\n**FAIL** Built against the old release only (their programs are not in {}): {}",
                self.new,
                self.only_old.join(", ")
            );
        }
        if !self.only_new.is_empty() {
            let _ = writeln!(
                s,
                "\nBuilt against the new release only: {}",
                self.only_new.join(", ")
            );
        }
        s
    }
}

impl Answer for UnitTestRegress {
    /// After the report, each failing suite and the summary; exit status 1
    /// when a change can break a user.
    fn answer(&self, format: Format) -> Result<Outcome> {
        let report = match format {
            Format::Json => serde_json::to_string_pretty(self)? + "\n",
            _ => self.to_markdown(),
        };
        let mut verdict: Vec<String> = self
            .suites
            .iter()
            .filter(|s| s.fails)
            .map(|s| {
                let mut why = s.changes.clone();
                why.extend(s.calls.iter().filter(|c| c.fails).map(|c| {
                    format!(
                        "call {} {} at {}: {}",
                        c.index,
                        c.function,
                        c.site,
                        c.changes.join("; ")
                    )
                }));
                format!("FAIL {}: {}", s.suite, why.join("; "))
            })
            .collect();
        verdict.extend(self.only_old.iter().map(|suite| {
            format!(
                "FAIL {suite}: the suite vanished: its program is in {} but not in {}",
                self.old, self.new
            )
        }));
        verdict.push(format!(
            "regress: {} suites compared, {} fail, {} vanished (old build only), {} new (new build only)",
            self.suites.len(),
            self.suites.iter().filter(|s| s.fails).count(),
            self.only_old.len(),
            self.only_new.len()
        ));
        Ok(Outcome {
            notes: Vec::new(),
            report,
            verdict,
            status: Outcome::status_of(self.passed),
        })
    }
}
