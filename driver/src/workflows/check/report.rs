//! The report of `memtrace check`: how the program ended, Unity's verdict,
//! memcheck's findings and leaks — as text (after the program's own
//! output, Valgrind-style) or as one JSON document.

use std::path::PathBuf;

use serde_json::{json, Value};

use memtrace_tracer::error::CodeLocation;
use memtrace_tracer::program::{Finding, Layout, Leak};
use memtrace_tracer::semihosting::RUNTIME_ERROR;

use super::unity::UnityResult;
use crate::support::error::Result;
use crate::support::outcome::{Answer, Format, Outcome};

/// How the program ended.
#[derive(Clone, Debug)]
pub enum ReportEnd {
    /// It exited normally with this status.
    Exit {
        /// The status.
        code: i32,
    },
    /// It exited with another reason (newlib's `abort`).
    Abnormal {
        /// The `ADP_Stopped_*` reason code.
        reason: u32,
        /// Its subcode (the signal, for `abort`).
        subcode: Option<u32>,
    },
    /// memtrace stopped it.
    Stopped {
        /// `fault`, `stack-overflow`, `budget` or `unsupported`.
        kind: &'static str,
        /// What happened.
        message: String,
        /// Where.
        chain: Vec<CodeLocation>,
    },
}

/// Everything `memtrace check` reports.
#[derive(Clone, Debug)]
pub struct CheckReport {
    /// The program.
    pub program: PathBuf,
    /// How it ended.
    pub end: ReportEnd,
    /// Instructions it retired.
    pub instructions: u64,
    /// What it wrote to stdout.
    pub stdout: String,
    /// What it wrote to stderr.
    pub stderr: String,
    /// Unity's verdict, if it printed one.
    pub unity: Option<UnityResult>,
    /// Whether memcheck ran.
    pub memcheck: bool,
    /// Findings not suppressed.
    pub findings: Vec<Finding>,
    /// Blocks live at exit (lost ones suppressed are left out).
    pub leaks: Vec<Leak>,
    /// Findings and lost blocks the suppressions matched.
    pub suppressed: usize,
    /// Allocations the program made.
    pub allocations: u64,
    /// Frees it made.
    pub frees: u64,
    /// Why memcheck checked no heap (no allocator symbols); `None` when it
    /// did.
    pub heap_unchecked: Option<String>,
    /// Its memory.
    pub layout: Layout,
    /// Its CMSIS-NN API calls as layers, when they were traced.
    pub calls: Option<Vec<super::CallReport>>,
    /// TFLM's interpreter and its operator invocations as layers, when
    /// they were traced.
    pub tflm: Option<super::TflmReport>,
}

/// `abort`'s signal, SIGABRT; a shell reports such an end as 128 + 6.
const SIGABRT_STATUS: i32 = 134;

impl CheckReport {
    /// Errors memtrace found: memcheck's ([`CheckReport::memcheck_errors`])
    /// the API calls and operator invocations that broke their memory
    /// contract, and the operators that asked for less scratch than their
    /// kernel uses.
    pub fn errors(&self) -> usize {
        self.memcheck_errors()
            + self.broken_calls()
            + self
                .tflm
                .as_ref()
                .map_or(0, |t| t.broken() + t.scratch_short())
    }

    /// Memcheck's errors: findings, lost blocks, and a stop (fault, stack
    /// overflow, budget) of the program.
    pub fn memcheck_errors(&self) -> usize {
        let stopped = matches!(self.end, ReportEnd::Stopped { .. }) as usize;
        self.findings.len() + self.lost().count() + stopped
    }

    /// API calls that broke their memory contract.
    pub(crate) fn broken_calls(&self) -> usize {
        self.calls
            .as_ref()
            .map_or(0, |c| c.iter().filter(|r| r.violates()).count())
    }

    fn lost(&self) -> impl Iterator<Item = &Leak> {
        self.leaks.iter().filter(|l| !l.reachable)
    }

    /// The program's own exit status, as a shell would see it (an abort is
    /// 134), when it exited.
    pub(crate) fn program_status(&self) -> Option<i32> {
        match self.end {
            ReportEnd::Exit { code } => Some(code),
            ReportEnd::Abnormal { .. } => Some(SIGABRT_STATUS),
            ReportEnd::Stopped { .. } => None,
        }
    }

    /// The report after the program's output, for a terminal.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let name = self.program.display();
        let ended = match &self.end {
            ReportEnd::Exit { code } => format!("exited with status {code}"),
            ReportEnd::Abnormal { reason, subcode } => abnormal_text(*reason, *subcode),
            ReportEnd::Stopped { message, chain, .. } => {
                format!("was stopped: {message}\n{}", chain_lines(chain, "    "))
            }
        };
        out.push_str(&format!(
            "memtrace check: {name} {ended} after {} instructions\n",
            self.instructions
        ));
        if let Some(u) = self.unity {
            out.push_str(&format!(
                "memtrace check: Unity: {} tests, {} failures, {} ignored: {}\n",
                u.tests,
                u.failures,
                u.ignored,
                if u.ok { "OK" } else { "FAIL" }
            ));
        }
        if let Some(calls) = &self.calls {
            out.push_str(&super::calls::text(calls));
        }
        // Why a program has no interpreter is said by `--operators` (an
        // error) and the JSON: most programs checked have none.
        if let Some(tflm) = self.tflm.as_ref().filter(|t| t.missing.is_none()) {
            out.push_str(&super::operators::text(tflm));
        }
        if !self.memcheck {
            return out;
        }
        if let Some(why) = &self.heap_unchecked {
            out.push_str(&format!("memcheck: no heap checking: {why}\n"));
        }
        for f in &self.findings {
            out.push_str(&finding_text(f));
        }
        for l in &self.leaks {
            let what = if l.reachable {
                "still reachable"
            } else {
                "lost"
            };
            out.push_str(&format!(
                "memcheck: leak: {} B at {:#x} {what}, allocated at\n{}",
                l.size,
                l.address,
                chain_lines(&l.allocated, "    ")
            ));
        }
        let lost: u64 = self.lost().map(|l| l.size).sum();
        out.push_str(&format!(
            "memcheck: {} errors ({} suppressed); {} allocations, {} frees; {} B lost in {} blocks, {} blocks still reachable\n",
            self.memcheck_errors(),
            self.suppressed,
            self.allocations,
            self.frees,
            lost,
            self.lost().count(),
            self.leaks.len() - self.lost().count()
        ));
        out
    }

    /// The report as one JSON document (the program's output included).
    pub fn json(&self) -> String {
        let end = match &self.end {
            ReportEnd::Exit { code } => json!({"kind": "exit", "code": code}),
            ReportEnd::Abnormal { reason, subcode } => json!({
                "kind": "abnormal", "reason": reason, "subcode": subcode,
                "message": abnormal_text(*reason, *subcode),
            }),
            ReportEnd::Stopped {
                kind,
                message,
                chain,
            } => json!({"kind": kind, "message": message, "chain": chain_json(chain)}),
        };
        let findings: Vec<Value> = self
            .findings
            .iter()
            .map(|f| {
                json!({
                    "kind": f.kind.name(),
                    "message": f.message,
                    "count": f.count,
                    "chain": chain_json(&f.chain),
                    "block": f.block.as_ref().map(|b| json!({
                        "address": b.address,
                        "size": b.size,
                        "allocated": chain_json(&b.allocated),
                        "freed": b.freed.as_deref().map(chain_json),
                    })),
                })
            })
            .collect();
        let leaks: Vec<Value> = self
            .leaks
            .iter()
            .map(|l| {
                json!({
                    "address": l.address, "size": l.size, "reachable": l.reachable,
                    "allocated": chain_json(&l.allocated),
                })
            })
            .collect();
        let doc = json!({
            "program": self.program.display().to_string(),
            "end": end,
            "exit_status": self.program_status(),
            "instructions": self.instructions,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "unity": self.unity,
            "memcheck": self.memcheck.then(|| json!({
                "errors": self.memcheck_errors(),
                "suppressed": self.suppressed,
                "allocations": self.allocations,
                "frees": self.frees,
                "heap_checked": self.heap_unchecked.is_none(),
                "heap_unchecked": self.heap_unchecked,
                "findings": findings,
                "leaks": leaks,
            })),
            "calls": self.calls.as_deref().map(super::calls::json),
            "tflm": self.tflm.as_ref().map(super::operators::json),
            "layout": {
                "heap": [self.layout.heap.0, self.layout.heap.1],
                "stack": [self.layout.stack.0, self.layout.stack.1],
                "initial_sp": self.layout.initial_sp,
            },
        });
        let mut text = serde_json::to_string_pretty(&doc).unwrap_or_default();
        text.push('\n');
        text
    }
}

fn abnormal_text(reason: u32, subcode: Option<u32>) -> String {
    match (reason, subcode) {
        (RUNTIME_ERROR, _) => "aborted (abort(), a run-time error)".to_owned(),
        (r, Some(s)) => format!("ended abnormally (semihosting reason {r:#x}, subcode {s})"),
        (r, None) => format!("ended abnormally (semihosting reason {r:#x})"),
    }
}

fn finding_text(f: &Finding) -> String {
    let times = match f.count {
        1 => String::new(),
        n => format!(" ({n} times by this instruction)"),
    };
    let mut out = format!(
        "memcheck: {}: {}{times}\n{}",
        f.kind.name(),
        f.message,
        chain_lines(&f.chain, "    ")
    );
    if let Some(b) = &f.block {
        out.push_str(&format!(
            "  the {}-byte block at {:#x} was allocated at\n{}",
            b.size,
            b.address,
            chain_lines(&b.allocated, "    ")
        ));
        if let Some(freed) = &b.freed {
            out.push_str(&format!("  and freed at\n{}", chain_lines(freed, "    ")));
        }
    }
    out
}

/// One line per frame, innermost first, up to `main`.
fn chain_lines(chain: &[CodeLocation], indent: &str) -> String {
    let mut out = String::new();
    for (i, l) in chain.iter().enumerate() {
        let word = if i == 0 { "at" } else { "by" };
        let name = l.function.as_deref().unwrap_or("?");
        let place = match (&l.file, l.line) {
            (Some(f), Some(line)) => format!("{f}:{line}"),
            (Some(f), None) => f.clone(),
            _ => format!("{:#x}", l.pc),
        };
        out.push_str(&format!("{indent}{word} {name} ({place})\n"));
        if l.function.as_deref() == Some("main") {
            break;
        }
    }
    out
}

fn chain_json(chain: &[CodeLocation]) -> Value {
    Value::Array(
        chain
            .iter()
            .map(|l| json!({"pc": l.pc, "function": l.function, "file": l.file, "line": l.line}))
            .collect(),
    )
}

/// `memtrace check`'s answer: its report, with the status for errors.
pub struct CheckAnswer<'a> {
    /// The checked run.
    pub report: &'a CheckReport,
    /// The status when memcheck found an error (`--error-exitcode`).
    pub error_exitcode: u8,
}

impl Answer for CheckAnswer<'_> {
    /// JSON on stdout; the text report on stderr (stdout is the program's
    /// own output, echoed). The status is `error_exitcode` when memcheck
    /// found an error, else the program's own.
    fn answer(&self, format: Format) -> Result<Outcome> {
        let (report, verdict) = match format {
            Format::Json => (self.report.json(), Vec::new()),
            _ => (
                String::new(),
                self.report.text().lines().map(str::to_owned).collect(),
            ),
        };
        let status = if self.report.errors() > 0 {
            self.error_exitcode
        } else {
            // A shell sees the low 8 bits of a status.
            self.report
                .program_status()
                .map_or(self.error_exitcode, |s| s as u8)
        };
        Ok(Outcome {
            notes: Vec::new(),
            report,
            verdict,
            status,
        })
    }
}
