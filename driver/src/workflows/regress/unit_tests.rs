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
//! clobber). Instruction changes beyond the threshold and calls present on
//! one side only are reported, not failed.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::bail;
use crate::support::error::{Context, Result};
use crate::support::outcome::{Answer, Format, Outcome};
use crate::workflows::check::{
    check, CallReport, CheckOptions, CheckReport, Operators, Suppressions,
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
#[derive(Clone, Debug, Serialize)]
pub struct SuiteFigures {
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
    /// Suites built against the old release only (the new one lacks an
    /// API they call, or the build was not asked for).
    pub only_old: Vec<String>,
    /// Suites built against the new release only.
    pub only_new: Vec<String>,
    /// No change that can break a user.
    pub passed: bool,
}

/// Runs every suite present on both sides under `check` and compares them.
pub fn regress_unit_tests(options: &UnitTestOptions) -> Result<UnitTestRegress> {
    let old = programs(&options.old)?;
    let new = programs(&options.new)?;
    let mut suites = Vec::new();
    for (name, a) in &old {
        let Some(b) = new.get(name) else { continue };
        let (a, b) = (run(a, options)?, run(b, options)?);
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
            .collect()
    };
    let passed = suites.iter().all(|s| !s.fails);
    Ok(UnitTestRegress {
        old: options.old.display().to_string(),
        new: options.new.display().to_string(),
        suites,
        only_old: only(&old, &new),
        only_new: only(&new, &old),
        passed,
    })
}

/// The programs of `path` by suite name: its `*.elf` files, or the one
/// program.
fn programs(path: &Path) -> Result<BTreeMap<String, PathBuf>> {
    let found: BTreeMap<String, PathBuf> = if path.is_file() {
        [(suite_name(path), path.to_path_buf())].into()
    } else {
        std::fs::read_dir(path)
            .with_context(|| format!("reading {}", path.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "elf") && p.is_file())
            .map(|p| (suite_name(&p), p))
            .collect()
    };
    if found.is_empty() {
        bail!("{} holds no unit-test program (*.elf)", path.display());
    }
    Ok(found)
}

fn suite_name(program: &Path) -> String {
    program
        .file_stem()
        .map_or_else(String::new, |s| s.to_string_lossy().into_owned())
}

/// One suite run as `memtrace check` runs it, with its calls traced.
fn run(program: &Path, options: &UnitTestOptions) -> Result<CheckReport> {
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
}

fn figures(report: &CheckReport) -> SuiteFigures {
    SuiteFigures {
        unity: report.unity.as_ref().map(|u| (u.tests, u.failures)),
        exit_status: report.program_status(),
        memcheck_errors: report.memcheck_errors(),
        broken_calls: report.broken_calls(),
        calls: report.calls.as_ref().map_or(0, Vec::len),
        instructions: report.instructions,
    }
}

/// The changes of one suite between its two runs.
fn compare_suite(name: &str, old: &CheckReport, new: &CheckReport, threshold: f64) -> SuiteChange {
    let (a, b) = (figures(old), figures(new));
    let mut changes = Vec::new();
    let mut fails = false;
    let failures = |f: &SuiteFigures| f.unity.map_or(0, |(_, failed)| failed);
    if failures(&b) > failures(&a) || (a.exit_status == Some(0) && b.exit_status != Some(0)) {
        changes.push(format!(
            "tests fail: Unity {} → {} failures, exit {} → {}",
            failures(&a),
            failures(&b),
            status_text(a.exit_status),
            status_text(b.exit_status)
        ));
        fails = true;
    }
    if b.memcheck_errors > a.memcheck_errors {
        changes.push(format!(
            "memcheck errors {} → {}{}",
            a.memcheck_errors,
            b.memcheck_errors,
            first_finding(new).map_or_else(String::new, |f| format!(": {f}"))
        ));
        fails = true;
    } else if b.memcheck_errors < a.memcheck_errors {
        changes.push(format!(
            "memcheck errors {} → {}",
            a.memcheck_errors, b.memcheck_errors
        ));
    }
    let empty = Vec::new();
    let (old_calls, new_calls) = (
        old.calls.as_ref().unwrap_or(&empty),
        new.calls.as_ref().unwrap_or(&empty),
    );
    let pairs = matching_calls(old_calls, new_calls);
    let unmatched = |side: usize| pairs.iter().filter(|p| p[side].is_none()).count();
    let (gone, added) = (unmatched(1), unmatched(0));
    if gone + added > 0 {
        changes.push(format!(
            "API calls {} → {}: {gone} not made any more, {added} new",
            old_calls.len(),
            new_calls.len()
        ));
    }
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
        fails,
    }
}

/// The calls of the two runs paired with their twins: the longest common
/// subsequence of (function, call site, argument shapes), so a call the
/// new release makes in
/// addition (or no longer) does not shift every pair after it. Each pair is
/// `[old index, new index]`, one side `None` for an unmatched call.
fn matching_calls(old: &[CallReport], new: &[CallReport]) -> Vec<[Option<usize>; 2]> {
    fn key(c: &CallReport) -> (&str, String, &str) {
        (c.call.function, site(c), c.call.shapes.as_str())
    }
    let (a, b): (Vec<_>, Vec<_>) = (old.iter().map(key).collect(), new.iter().map(key).collect());
    // common[i][j]: the longest common subsequence of a[i..] and b[j..].
    let mut common = vec![vec![0u32; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            common[i][j] = if a[i] == b[j] {
                common[i + 1][j + 1] + 1
            } else {
                common[i + 1][j].max(common[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut pairs) = (0, 0, Vec::new());
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            pairs.push([Some(i), Some(j)]);
            (i, j) = (i + 1, j + 1);
        } else if j == b.len() || (i < a.len() && common[i + 1][j] >= common[i][j + 1]) {
            pairs.push([Some(i), None]);
            i += 1;
        } else {
            pairs.push([None, Some(j)]);
            j += 1;
        }
    }
    pairs
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
        for (side, list) in [("old", &self.only_old), ("new", &self.only_new)] {
            if !list.is_empty() {
                let _ = writeln!(
                    s,
                    "\nBuilt against the {side} release only: {}",
                    list.join(", ")
                );
            }
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
        verdict.push(format!(
            "regress: {} suites compared, {} fail, {} built against one release only",
            self.suites.len(),
            self.suites.iter().filter(|s| s.fails).count(),
            self.only_old.len() + self.only_new.len()
        ));
        Ok(Outcome {
            notes: Vec::new(),
            report,
            verdict,
            status: Outcome::status_of(self.passed),
        })
    }
}
