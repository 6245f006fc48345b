//! Regression of a kernel library's memory behaviour between builds
//! (`memtrace regress`): re-trace the layers and configurations of a
//! baseline (`memtrace table`) with another build and name, per row, every
//! change with its direction ([`Change`]).
//!
//! A change that can break a user fails the run (exit 1) and is named on
//! stderr: a smaller traced O_s (a memory plan built on the baseline value
//! now overlaps bytes the kernel still reads), a newly broken rule of the
//! memory contract, a scratch buffer used beyond its declared size, other
//! output bytes from an integer layer (the same seeded inputs and weights:
//! a bit-exact kernel gives the same bytes). A
//! baseline layer the new binary no longer runs, or a configuration it can
//! no longer trace, also fails (its safety is unknown). Instruction counts
//! that moved beyond a threshold are reported as speed regressions or gains.
//!
//! `compare` sets each baseline row against the new build's, `change` names
//! each change with its direction and decides which can break a user, and
//! `render` prints the report.

mod change;
mod compare;
mod pairing;
mod programs;
mod render;
mod scratch;
mod unit_tests;

use std::collections::HashMap;
use std::path::PathBuf;

use memtrace_abi::LayerSpec;
use memtrace_analyzer::kernel::Library;
use memtrace_tracer::{Arch, ElfImage};
use serde::Serialize;

use crate::failed;
use crate::support::common::threads;
use crate::support::error::Result;
use crate::workflows::baseline::{Baseline, BaselineRow, EXACT_ACCESS};
use crate::workflows::sweep::{require_job_mailbox, Depth, Row, Sweep};
pub use change::Change;
use compare::compare;
pub use programs::check_report_path;
pub use scratch::{ScratchOverrun, ScratchUse};
pub use unit_tests::{
    regress_unit_tests, CallChange, SuiteChange, SuiteFigures, UnitTestOptions, UnitTestRegress,
};

/// Instruction-count changes up to this many percent are not reported.
pub const DEFAULT_INSTRUCTION_THRESHOLD: f64 = 2.0;

/// What to compare.
#[derive(Debug, Clone)]
pub struct RegressOptions {
    /// Baseline written by `memtrace table`.
    pub baseline: PathBuf,
    /// The new build of the kernel binary.
    pub elf: PathBuf,
    /// The core to trace it on; given, a baseline of another core is
    /// compared across cores instead of refused.
    pub target: Option<Arch>,
    /// Worker threads (default: all cores).
    pub jobs: Option<usize>,
    /// Stop a guest that runs longer than this many instructions.
    pub max_instructions: u64,
    /// Report instruction-count changes beyond this many percent.
    pub instruction_threshold: f64,
}

/// What happened to one baseline row's traced O_s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Some traced O_s is smaller: plans on the old value are unsafe.
    Shrank,
    /// Larger (and nothing smaller): old plans stay safe, memory is left unused.
    Grew,
    /// Every traced O_s is unchanged.
    Same,
    /// A built-in layer the new binary does not run.
    Missing,
    /// The configuration could not be traced.
    Error,
}

impl Status {
    /// The status as the reports print it.
    pub fn name(self) -> &'static str {
        match self {
            Status::Shrank => "SHRANK",
            Status::Grew => "grew",
            Status::Same => "same",
            Status::Missing => "MISSING",
            Status::Error => "ERROR",
        }
    }
}

/// Traced O_s of one row in one build.
#[derive(Debug, Clone, Serialize)]
pub struct Values {
    /// Exact O_s.
    pub exact_bytes: Option<u64>,
    /// Monotone O_s.
    pub monotone_bytes: Option<u64>,
    /// Exact O_s of the second input (`add`, `concatenation`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input2_exact_bytes: Option<u64>,
    /// Monotone O_s of the second input.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input2_monotone_bytes: Option<u64>,
    /// Instructions retired inside the layer window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instructions: Option<u64>,
}

/// One baseline row against the new build.
#[derive(Debug, Clone, Serialize)]
pub struct RowChange {
    /// Layer name or `config N`.
    pub name: String,
    /// `builtin` or `job`.
    pub source: String,
    /// Operator name.
    pub op: String,
    /// Canonical spec.
    pub spec: String,
    /// What happened to its traced O_s.
    pub status: Status,
    /// Some change can break a user (or the row is missing or failed).
    pub fails: bool,
    /// Every change, each with its direction.
    pub changes: Vec<Change>,
    /// The baseline's values.
    pub old: Values,
    /// The new build's values, when it traced the row.
    pub new: Option<Values>,
    /// new − old monotone O_s, bytes.
    pub monotone_delta: Option<i64>,
    /// new − old exact O_s, bytes.
    pub exact_delta: Option<i64>,
    /// The analytic bound of the spec now exceeds the traced monotone value
    /// and did not in the baseline.
    pub analytic_now_unsafe: bool,
    /// Why a row is missing or failed.
    pub note: Option<String>,
    /// The kernel that ran the row in the baseline, `` `function` (library) ``
    /// (`None` for a baseline written before memtrace attributed kernels).
    pub kernel_before: Option<String>,
    /// The kernel that ran the row in the new build.
    pub kernel_after: Option<String>,
}

/// Rows per outcome.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Counts {
    /// All rows.
    pub rows: usize,
    /// Rows whose O_s shrank.
    pub shrank: usize,
    /// Rows whose O_s grew.
    pub grew: usize,
    /// Rows whose O_s is unchanged.
    pub same: usize,
    /// Built-in layers the new build no longer runs.
    pub missing: usize,
    /// Rows that could not be traced.
    pub errors: usize,
    /// Rows whose memory contract changed in a way that can break a user.
    pub contract_broken: usize,
    /// Rows whose outputs differ from the baseline's.
    pub outputs_differ: usize,
    /// Rows the new build ran with a CMSIS-NN kernel: the suite checks each
    /// against TFLM's reference kernel on the same inputs.
    pub reference_checked: usize,
    /// Of those, rows whose outputs differ from the reference kernel's.
    pub differ_from_reference: usize,
    /// Rows with more instructions than the threshold allows.
    pub slower: usize,
    /// Rows with fewer instructions beyond the threshold.
    pub faster: usize,
}

/// The outcome of `memtrace regress`.
#[derive(Debug, Clone, Serialize)]
pub struct RegressReport {
    /// The baseline file.
    pub baseline: String,
    /// The binary the baseline was traced from.
    pub baseline_elf: String,
    /// Its architecture.
    pub baseline_arch: String,
    /// The access path of the baseline's values (`None`: the fast path of
    /// an older memtrace).
    pub baseline_access: Option<String>,
    /// The new build.
    pub elf: String,
    /// Its architecture.
    pub arch: String,
    /// Instruction-count changes up to this many percent are not reported.
    pub instruction_threshold: f64,
    /// No row failed.
    pub passed: bool,
    /// Rows per outcome.
    pub counts: Counts,
    /// One entry per baseline row, in baseline order.
    pub rows: Vec<RowChange>,
}

/// Re-traces every baseline row with the new build and compares.
pub fn regress(opts: &RegressOptions) -> Result<RegressReport> {
    let baseline = Baseline::load(&opts.baseline)?;
    if baseline.rows.is_empty() {
        crate::bail!(
            "{} has no rows: nothing to compare (write one with `memtrace table`)",
            opts.baseline.display()
        );
    }
    let mut image = ElfImage::load(&opts.elf)?;
    if let Some(target) = opts.target {
        image = image.on_target(target)?;
    } else if baseline.arch != image.arch.name() {
        crate::bail!(
            "{} was traced on {} but {} is {}: a baseline only says what a build of the same \
             core must keep; to compare across cores, name the core with --target {} (or \
             write a baseline for this ELF with `memtrace table`)",
            opts.baseline.display(),
            baseline.arch,
            opts.elf.display(),
            image.arch.name(),
            image.arch.name()
        );
    }
    let sweep = Sweep {
        image: &image,
        depth: Depth::Baseline,
        seed: baseline.seed as u32,
        threads: threads(opts.jobs),
        max_instructions: opts.max_instructions,
    };
    // Built-in layers: one run of the binary without a job.
    let builtin: HashMap<String, Row> = if baseline.rows.iter().any(|r| r.source == "builtin") {
        sweep
            .builtin()?
            .into_iter()
            .map(|r| (r.name.clone(), r))
            .collect()
    } else {
        HashMap::new()
    };
    // Job rows: re-traced from their spec text.
    let jobs: Vec<&BaselineRow> = baseline.rows.iter().filter(|r| r.source == "job").collect();
    let specs = jobs
        .iter()
        .map(|r| {
            LayerSpec::parse(&r.spec)
                .map_err(|e| failed!("baseline row `{}`: bad spec `{}`: {e}", r.name, r.spec))
        })
        .collect::<Result<Vec<_>>>()?;
    if !specs.is_empty() {
        require_job_mailbox(&image)?;
    }
    let names: Vec<String> = jobs.iter().map(|r| r.name.clone()).collect();
    let traced = sweep.specs(&specs, &names);
    let traced: HashMap<&str, &Row> = jobs
        .iter()
        .map(|r| r.name.as_str())
        .zip(traced.iter())
        .collect();
    let rows: Vec<RowChange> = baseline
        .rows
        .iter()
        .map(|old| {
            let new = if old.source == "builtin" {
                builtin.get(&old.name)
            } else {
                traced.get(old.name.as_str()).copied()
            };
            compare(old, new, opts.instruction_threshold)
        })
        .collect();
    Ok(RegressReport {
        baseline: opts.baseline.display().to_string(),
        baseline_elf: baseline.elf.clone(),
        baseline_arch: baseline.arch.clone(),
        baseline_access: baseline.access.clone(),
        elf: opts.elf.display().to_string(),
        arch: image.arch.name().to_owned(),
        instruction_threshold: opts.instruction_threshold,
        passed: !rows.iter().any(|r| r.fails),
        counts: counts(&rows),
        rows,
    })
}

fn counts(rows: &[RowChange]) -> Counts {
    let count = |s: Status| rows.iter().filter(|r| r.status == s).count();
    let with =
        |f: &dyn Fn(&Change) -> bool| rows.iter().filter(|r| r.changes.iter().any(f)).count();
    let instructions = |c: &Change, slower: bool| matches!(c, Change::Instructions { old, new, .. } if (new > old) == slower);
    Counts {
        rows: rows.len(),
        shrank: count(Status::Shrank),
        grew: count(Status::Grew),
        same: count(Status::Same),
        missing: count(Status::Missing),
        errors: count(Status::Error),
        contract_broken: with(&|c| c.is_contract() && c.breaks()),
        outputs_differ: with(&|c| matches!(c, Change::Output { .. })),
        // `kernel_after` is `kernel_text`'s "`function` (library)".
        reference_checked: rows
            .iter()
            .filter(|r| {
                r.kernel_after
                    .as_deref()
                    .is_some_and(|k| k.ends_with(&format!("({})", Library::CmsisNn.name())))
            })
            .count(),
        differ_from_reference: with(&|c| matches!(c, Change::Reference { .. })),
        slower: with(&|c| instructions(c, true)),
        faster: with(&|c| instructions(c, false)),
    }
}

impl RegressReport {
    /// Warnings about the comparison itself: another architecture, or a
    /// baseline written before `table` traced exactly and kept the contract.
    pub fn warnings(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if self.arch != self.baseline_arch {
            lines.push(format!(
                "NOTE: compared across cores: the baseline was traced on {} and {} on {}",
                self.baseline_arch, self.elf, self.arch
            ));
        }
        if self.baseline_access.as_deref() != Some(EXACT_ACCESS) {
            lines.push(format!(
                "WARNING: {} was written by an older memtrace on the fast access path, without \
                 the memory contract or instruction counts: its O_s can be a few bytes small \
                 where a kernel loads unaligned words; write it again with `memtrace table`",
                self.baseline
            ));
        }
        lines
    }
}
