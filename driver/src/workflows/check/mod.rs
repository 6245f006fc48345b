//! `memtrace check`: an unmodified Cortex-M4 program run as it was built —
//! semihosting for its console and exit, memcheck of its heap and stack —
//! and the report of what it printed, how it ended and what memcheck found
//! (docs/check.md).
//!
//! The tracer runs the program (`memtrace_tracer::program`); here its
//! findings are filtered through the user's suppressions, Unity's verdict is
//! read from its output, and the report is rendered (`report.rs`).

pub mod calls;
pub mod operators;
mod report;
pub mod scratch;
pub mod suppress;
pub mod unity;

use std::path::PathBuf;

use memtrace_tracer::program::{
    find_interpreter, run_program, Finding, Leak, ProgramEnd, ProgramOptions, ProgramRun, StopKind,
};
use memtrace_tracer::semihosting::Exit;
use memtrace_tracer::ElfImage;

pub use calls::CallReport;
pub use operators::{OperatorReport, TflmReport};
pub use report::{CheckAnswer, CheckReport, ReportEnd};
pub use suppress::Suppressions;
pub use unity::UnityResult;

use crate::Result;

/// Default heap, where the program's linker script does not place one.
pub const HEAP_BYTES: u64 = 16 << 20;
/// Default stack, where the program's linker script does not place one.
pub const STACK_BYTES: u64 = 1 << 20;
/// The heap and stack sizes `check` accepts (`--heap`, `--stack`).
pub use memtrace_tracer::program::layout::{MAX_HEAP, MAX_STACK, MIN_STACK};

/// Default instruction budget.
pub const MAX_INSTRUCTIONS: u64 = 10_000_000_000;

/// What `memtrace check` runs and how.
#[derive(Clone, Debug)]
pub struct CheckOptions {
    /// The program (a Cortex-M4 ELF).
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Instruction budget.
    pub max_instructions: u64,
    /// Heap bytes (where the linker script does not say).
    pub heap_bytes: u64,
    /// Stack bytes (where the linker script does not say).
    pub stack_bytes: u64,
    /// Run memcheck (heap and stack checks, leaks).
    pub memcheck: bool,
    /// Echo the program's output as it comes (text reports).
    pub echo: bool,
    /// Findings not to report.
    pub suppressions: Suppressions,
    /// Trace the program's CMSIS-NN API calls as layers.
    pub calls: bool,
    /// Trace TFLM's operator invocations as layers.
    pub operators: Operators,
}

/// Whether `check` traces TFLM's operator invocations as layers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Operators {
    /// When the program has a TFLM interpreter (the report says why it
    /// found none).
    #[default]
    Found,
    /// The program must have one: without, `check` fails before running it.
    Required,
    /// Never.
    Off,
}

/// Runs the program and reports.
pub fn check(options: &CheckOptions) -> Result<CheckReport> {
    let image = ElfImage::load(&options.program)?;
    let program = ProgramOptions {
        args: options.args.clone(),
        max_instructions: options.max_instructions,
        heap_bytes: options.heap_bytes,
        stack_bytes: options.stack_bytes,
        echo: options.echo,
        memcheck: options.memcheck,
    };
    if options.operators == Operators::Required {
        if let Err(why) = find_interpreter(&image) {
            crate::bail!(
                "{}: no TFLM operators to trace: {why}",
                options.program.display()
            );
        }
    }
    let operators = options.operators != Operators::Off;
    if !options.calls && !operators {
        return Ok(report_of(options, run_program(&image, &program)?));
    }
    let (run, layers) = calls::run_traced(&image, &program, options.calls, operators)?;
    let calls = options.calls.then(|| calls::reports(&run, &layers));
    let tflm = operators::report(&image, &run, &layers);
    let mut report = report_of(options, run);
    report.calls = calls;
    report.tflm = tflm;
    Ok(report)
}

fn functions(chain: &[memtrace_tracer::error::CodeLocation]) -> Vec<&str> {
    chain.iter().filter_map(|l| l.function.as_deref()).collect()
}

fn report_of(options: &CheckOptions, run: ProgramRun) -> CheckReport {
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    let unity = unity::parse(&stdout);
    let end = match &run.end {
        ProgramEnd::Exited(Exit::Status(code)) => ReportEnd::Exit { code: *code },
        ProgramEnd::Exited(Exit::Reason { reason, subcode }) => ReportEnd::Abnormal {
            reason: *reason,
            subcode: *subcode,
        },
        ProgramEnd::Stopped {
            kind,
            message,
            chain,
        } => ReportEnd::Stopped {
            kind: match kind {
                StopKind::Fault => "fault",
                StopKind::StackOverflow => "stack-overflow",
                StopKind::Budget => "budget",
                StopKind::Loop => "loop",
                StopKind::Unsupported => "unsupported",
            },
            message: message.clone(),
            chain: chain.clone(),
        },
    };
    let rules = &options.suppressions;
    let mut suppressed = 0;
    let (mut findings, mut leaks): (Vec<Finding>, Vec<Leak>) = (Vec::new(), Vec::new());
    let (mut allocations, mut frees) = (0, 0);
    let mut heap_unchecked = None;
    if let Some(m) = run.memcheck {
        allocations = m.allocations;
        frees = m.frees;
        heap_unchecked = m.heap_unchecked;
        for f in m.findings {
            match rules.matching(f.kind.name(), &functions(&f.chain)) {
                Some(_) => suppressed += 1,
                None => findings.push(f),
            }
        }
        for l in m.leaks {
            match rules.matching("leak", &functions(&l.allocated)) {
                Some(_) if !l.reachable => suppressed += 1,
                _ => leaks.push(l),
            }
        }
    }
    CheckReport {
        program: options.program.clone(),
        end,
        instructions: run.instructions,
        stdout,
        stderr,
        unity,
        memcheck: options.memcheck,
        findings,
        leaks,
        suppressed,
        allocations,
        frees,
        heap_unchecked,
        layout: run.layout,
        calls: None,
        tflm: None,
    }
}
