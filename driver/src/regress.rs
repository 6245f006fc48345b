//! Regression of O_s between kernel-library builds (`memtrace regress`):
//! re-trace the layers and configurations of an O_s
//! baseline (`memtrace table`) with another build of the kernel library and
//! report, per row, whether its safe overlap shrank, grew or stayed.
//!
//! A shrunk traced O_s (monotone or exact) means a memory plan built on the
//! baseline value now overlaps buffers the new kernel still reads: the run
//! exits with status 1 and names every such layer. A baseline layer the new
//! binary no longer runs, or a configuration it can no longer trace, also
//! fails (its safety is unknown).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use memtrace_abi::LayerSpec;
use memtrace_tracer::ElfImage;
use serde::Serialize;

use crate::attribution::kernel_text;
use crate::baseline::{Baseline, BaselineRow};
use crate::common::{show, threads};
use crate::error::Result;
use crate::failed;
use crate::sweep::{require_job_mailbox, trace_builtin, trace_specs, Row};

/// What to compare.
#[derive(Debug, Clone)]
pub struct RegressOptions {
    /// Baseline written by `memtrace table`.
    pub baseline: PathBuf,
    /// The new build of the kernel binary.
    pub elf: PathBuf,
    /// Worker threads (default: all cores).
    pub jobs: Option<usize>,
    /// Stop a guest that runs longer than this many instructions.
    pub max_instructions: u64,
}

/// What happened to one baseline row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Traced monotone or exact O_s is smaller: plans on the old value are unsafe.
    Shrank,
    /// Larger (and nothing smaller): old plans stay safe, memory is left unused.
    Grew,
    /// Traced monotone and exact O_s are unchanged.
    Same,
    /// A built-in layer the new binary does not run.
    Missing,
    /// The configuration could not be traced.
    Error,
}

impl Status {
    /// Whether this row fails the regression.
    pub fn fails(self) -> bool {
        matches!(self, Status::Shrank | Status::Missing | Status::Error)
    }
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
    /// What happened.
    pub status: Status,
    /// The baseline's values.
    pub old: Values,
    /// The new build's values, when it traced the row.
    pub new: Option<Values>,
    /// new − old monotone O_s, bytes.
    pub monotone_delta: Option<i64>,
    /// new − old exact O_s, bytes.
    pub exact_delta: Option<i64>,
    /// The analytic bound of the spec exceeds the new traced monotone value.
    pub analytic_now_unsafe: bool,
    /// Why a row is missing or failed, or how its spec changed.
    pub note: Option<String>,
    /// The kernel that ran the row in the baseline, `` `function` (library) ``
    /// (`None` for a baseline written before memtrace attributed kernels).
    pub kernel_before: Option<String>,
    /// The kernel that ran the row in the new build.
    pub kernel_after: Option<String>,
}

impl RowChange {
    /// `` kernel `A` (TFLM reference) → `B` (CMSIS-NN) `` when the row ran
    /// another kernel in the new build.
    pub fn kernel_change(&self) -> Option<String> {
        match (&self.kernel_before, &self.kernel_after) {
            (Some(a), Some(b)) if a != b => Some(format!("kernel {a} → {b}")),
            _ => None,
        }
    }
}

/// Rows per status.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Counts {
    /// All rows.
    pub rows: usize,
    /// Rows whose O_s shrank.
    pub shrank: usize,
    /// Rows whose O_s grew.
    pub grew: usize,
    /// Unchanged rows.
    pub same: usize,
    /// Built-in layers the new build no longer runs.
    pub missing: usize,
    /// Rows that could not be traced.
    pub errors: usize,
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
    /// The new build.
    pub elf: String,
    /// Its architecture.
    pub arch: String,
    /// No row failed.
    pub passed: bool,
    /// Rows per status.
    pub counts: Counts,
    /// One entry per baseline row, in baseline order.
    pub rows: Vec<RowChange>,
}

fn known(text: String) -> Option<String> {
    (text != "-").then_some(text)
}

fn delta(new: Option<u64>, old: Option<u64>) -> Option<i64> {
    Some(new? as i64 - old? as i64)
}

fn compare(old: &BaselineRow, new: Option<&Row>) -> RowChange {
    let mut c = RowChange {
        name: old.name.clone(),
        source: old.source.clone(),
        op: old.op.clone(),
        spec: old.spec.clone(),
        status: Status::Same,
        old: Values {
            exact_bytes: old.exact_bytes,
            monotone_bytes: old.monotone_bytes,
            input2_exact_bytes: old.input2_exact_bytes,
            input2_monotone_bytes: old.input2_monotone_bytes,
        },
        new: None,
        monotone_delta: None,
        exact_delta: None,
        analytic_now_unsafe: false,
        note: None,
        kernel_before: known(kernel_text(old.library.as_deref(), old.kernel.as_deref())),
        kernel_after: None,
    };
    let Some(new) = new else {
        c.status = Status::Missing;
        c.note = Some("the new binary does not run this layer".into());
        return c;
    };
    if let Some(e) = &new.error {
        c.status = Status::Error;
        c.note = Some(e.clone());
        return c;
    }
    c.kernel_after = known(kernel_text(new.library.as_deref(), new.kernel.as_deref()));
    let input2 = new.input2.as_ref();
    c.new = Some(Values {
        exact_bytes: new.exact_bytes,
        monotone_bytes: new.monotone_bytes,
        input2_exact_bytes: input2.map(|i| i.exact_bytes),
        input2_monotone_bytes: input2.map(|i| i.monotone_bytes),
    });
    c.monotone_delta = delta(new.monotone_bytes, old.monotone_bytes);
    c.exact_delta = delta(new.exact_bytes, old.exact_bytes);
    // A second input's O_s shrinking makes plans on it unsafe just the same.
    let input2_deltas = [
        delta(input2.map(|i| i.monotone_bytes), old.input2_monotone_bytes),
        delta(input2.map(|i| i.exact_bytes), old.input2_exact_bytes),
    ];
    let deltas = [
        c.monotone_delta,
        c.exact_delta,
        input2_deltas[0],
        input2_deltas[1],
    ];
    c.status = if deltas.iter().flatten().any(|&d| d < 0) {
        Status::Shrank
    } else if deltas.iter().flatten().any(|&d| d > 0) {
        Status::Grew
    } else {
        Status::Same
    };
    if new.spec != old.spec {
        c.note = Some(format!("the layer's spec changed to `{}`", new.spec));
    } else if input2_deltas.iter().flatten().any(|&d| d != 0) {
        c.note = Some(format!(
            "input2: monotone {} -> {}, exact {} -> {}",
            show(old.input2_monotone_bytes),
            show(input2.map(|i| i.monotone_bytes)),
            show(old.input2_exact_bytes),
            show(input2.map(|i| i.exact_bytes))
        ));
    }
    c.analytic_now_unsafe = matches!(
        (new.analytic_bytes, new.monotone_bytes),
        (Some(a), Some(m)) if a > m
    );
    c
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
    let image = ElfImage::load(&opts.elf)?;
    if baseline.arch != image.arch.name() {
        crate::bail!(
            "{} was traced on {} but {} is {}: a baseline only says what a build of the same \
             architecture must keep (write one for this ELF with `memtrace table`)",
            opts.baseline.display(),
            baseline.arch,
            opts.elf.display(),
            image.arch.name()
        );
    }
    let threads = threads(opts.jobs);
    // Built-in layers: one run of the binary without a job.
    let builtin: HashMap<String, Row> = if baseline.rows.iter().any(|r| r.source == "builtin") {
        trace_builtin(&image, opts.max_instructions)?
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
    let traced = trace_specs(
        &image,
        &specs,
        &names,
        baseline.seed as u32,
        threads,
        opts.max_instructions,
    );
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
            compare(old, new)
        })
        .collect();
    let count = |s: Status| rows.iter().filter(|r| r.status == s).count();
    let counts = Counts {
        rows: rows.len(),
        shrank: count(Status::Shrank),
        grew: count(Status::Grew),
        same: count(Status::Same),
        missing: count(Status::Missing),
        errors: count(Status::Error),
    };
    Ok(RegressReport {
        baseline: opts.baseline.display().to_string(),
        baseline_elf: baseline.elf.clone(),
        baseline_arch: baseline.arch.clone(),
        elf: opts.elf.display().to_string(),
        arch: image.arch.name().to_owned(),
        passed: !rows.iter().any(|r| r.status.fails()),
        counts,
        rows,
    })
}

impl RegressReport {
    /// A warning when the baseline and the new build differ in architecture.
    pub fn arch_warning(&self) -> Option<String> {
        (self.arch != self.baseline_arch).then(|| {
            format!(
                "WARNING: the baseline was traced on {} and {} is {}",
                self.baseline_arch, self.elf, self.arch
            )
        })
    }

    /// One line per failing row, for stderr.
    pub fn failure_lines(&self) -> Vec<String> {
        self.rows
            .iter()
            .filter(|r| r.status.fails())
            .map(|r| {
                format!(
                    "{} {} ({}): monotone {} -> {}, exact {} -> {}{}",
                    r.status.name(),
                    r.name,
                    r.spec,
                    show(r.old.monotone_bytes),
                    show(r.new.as_ref().and_then(|v| v.monotone_bytes)),
                    show(r.old.exact_bytes),
                    show(r.new.as_ref().and_then(|v| v.exact_bytes)),
                    r.note
                        .iter()
                        .cloned()
                        .chain(r.kernel_change())
                        .map(|n| format!(" — {n}"))
                        .collect::<String>()
                )
            })
            .collect()
    }

    /// The closing summary line.
    pub fn summary_line(&self) -> String {
        let c = &self.counts;
        format!(
            "regress: {} rows: {} shrank, {} grew, {} same, {} missing, {} errors — {}",
            c.rows,
            c.shrank,
            c.grew,
            c.same,
            c.missing,
            c.errors,
            if self.passed { "PASS" } else { "FAIL" }
        )
    }

    /// The report as Markdown.
    pub fn to_markdown(&self) -> String {
        markdown(self)
    }
}

fn signed(v: Option<i64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:+}"))
}

fn markdown(r: &RegressReport) -> String {
    let mut s = String::new();
    let c = &r.counts;
    let _ = writeln!(s, "# memtrace regress: O_s of `{}`\n", r.elf);
    let _ = writeln!(
        s,
        "Baseline `{}` (traced from `{}`, {}); new binary `{}` ({}).\n",
        r.baseline, r.baseline_elf, r.baseline_arch, r.elf, r.arch
    );
    if r.passed {
        let _ = writeln!(
            s,
            "**PASS** — no safe overlap shrank: {} rows, {} grew, {} same.\n",
            c.rows, c.grew, c.same
        );
    } else {
        let _ = writeln!(
            s,
            "**FAIL** — {} of {} rows shrank (memory plans built on the baseline O_s are unsafe for them), {} missing, {} could not be traced; {} grew, {} same.\n",
            c.shrank, c.rows, c.missing, c.errors, c.grew, c.same
        );
    }
    let section = |s: &mut String, title: &str, rows: Vec<&RowChange>| {
        if rows.is_empty() {
            return;
        }
        let _ = writeln!(s, "## {title} ({})\n", rows.len());
        let _ = writeln!(
            s,
            "| layer / config | spec | monotone O_s B (old → new) | Δ | exact O_s B (old → new) | Δ | note |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|");
        for r in rows {
            let new = r.new.as_ref();
            let mut note = r.note.clone().unwrap_or_default();
            if let Some(change) = r.kernel_change() {
                if !note.is_empty() {
                    note.push_str("; ");
                }
                note.push_str(&change);
            }
            if r.analytic_now_unsafe {
                if !note.is_empty() {
                    note.push_str("; ");
                }
                note.push_str("analytic bound now above the traced value");
            }
            let _ = writeln!(
                s,
                "| {} | `{}` | {} → {} | {} | {} → {} | {} | {} |",
                r.name,
                r.spec,
                show(r.old.monotone_bytes),
                show(new.and_then(|v| v.monotone_bytes)),
                signed(r.monotone_delta),
                show(r.old.exact_bytes),
                show(new.and_then(|v| v.exact_bytes)),
                signed(r.exact_delta),
                note
            );
        }
        let _ = writeln!(s);
    };
    let of = |st: Status| r.rows.iter().filter(|x| x.status == st).collect::<Vec<_>>();
    section(
        &mut s,
        "Shrank — unsafe for existing plans",
        of(Status::Shrank),
    );
    section(&mut s, "Missing from the new binary", of(Status::Missing));
    section(&mut s, "Could not be traced", of(Status::Error));
    section(&mut s, "Grew", of(Status::Grew));
    section(&mut s, "Unchanged", of(Status::Same));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::Verdict;

    fn old(monotone: u64, exact: u64) -> BaselineRow {
        BaselineRow {
            name: "dw1".into(),
            source: "builtin".into(),
            op: "depthwise_conv2d".into(),
            dtype: "int8".into(),
            arch: "cortex-m4".into(),
            spec: "op=depthwise_conv2d".into(),
            exact_bytes: Some(exact),
            monotone_bytes: Some(monotone),
            algorithmic_bytes: None,
            analytic_bytes: None,
            library: Some("TFLM reference".into()),
            kernel: Some("tflite::reference_integer_ops::DepthwiseConvPerChannel".into()),
            input2_exact_bytes: None,
            input2_monotone_bytes: None,
        }
    }

    fn new(monotone: u64, exact: u64, error: Option<&str>) -> Row {
        Row {
            name: "dw1".into(),
            source: "builtin",
            op: "depthwise_conv2d".into(),
            dtype: "int8".into(),
            arch: "cortex-m4".into(),
            spec: "op=depthwise_conv2d".into(),
            short: String::new(),
            instructions: 1,
            events: 1,
            input_bytes: Some(100),
            output_bytes: Some(100),
            exact_bytes: Some(exact),
            monotone_bytes: Some(monotone),
            algorithmic_bytes: None,
            analytic_bytes: Some(monotone + 1),
            analytic_printed_bytes: None,
            analytic_error_percent: None,
            flags: Vec::new(),
            printed_above_traced: false,
            verdict: Verdict::Ok,
            error: error.map(str::to_owned),
            library: Some("CMSIS-NN".into()),
            kernel: Some("arm_depthwise_conv_3x3_s8".into()),
            input2: None,
        }
    }

    #[test]
    fn a_second_input_whose_o_s_shrinks_fails_like_the_first() {
        // A concatenation whose first input keeps its O_s while the second's
        // drops from its whole size (40 B, the reference kernel) to one
        // chunk (2 B, CMSIS-NN's per-input copies).
        let mut before = old(60, 60);
        before.input2_monotone_bytes = Some(40);
        before.input2_exact_bytes = Some(40);
        let mut after = new(60, 60, None);
        after.input2 = Some(crate::sweep::InputOverlap {
            input_bytes: 40,
            exact_bytes: 2,
            monotone_bytes: 2,
            algorithmic_bytes: Some(40),
            analytic_bytes: Some(40),
            flags: Vec::new(),
        });
        let c = compare(&before, Some(&after));
        assert_eq!(c.status, Status::Shrank);
        assert_eq!((c.monotone_delta, c.exact_delta), (Some(0), Some(0)));
        let note = c.note.unwrap();
        assert!(
            note.contains("input2: monotone 40 -> 2, exact 40 -> 2"),
            "{note}"
        );
        // Unchanged second input: the row is the same.
        after.input2.as_mut().unwrap().monotone_bytes = 40;
        after.input2.as_mut().unwrap().exact_bytes = 40;
        assert_eq!(compare(&before, Some(&after)).status, Status::Same);
    }

    #[test]
    fn a_smaller_monotone_or_exact_value_is_a_shrink_and_fails() {
        let c = compare(&old(64, 80), Some(&new(48, 80, None)));
        assert_eq!(c.status, Status::Shrank);
        assert_eq!(c.monotone_delta, Some(-16));
        assert!(c.status.fails());
        // Exact alone shrinking is a shrink too.
        assert_eq!(
            compare(&old(64, 80), Some(&new(64, 72, None))).status,
            Status::Shrank
        );
    }

    #[test]
    fn growth_and_equality_pass() {
        let grew = compare(&old(64, 80), Some(&new(96, 80, None)));
        assert_eq!((grew.status, grew.monotone_delta), (Status::Grew, Some(32)));
        assert!(!grew.status.fails());
        let same = compare(&old(64, 80), Some(&new(64, 80, None)));
        assert_eq!(same.status, Status::Same);
    }

    #[test]
    fn missing_and_untraceable_rows_fail_with_a_note() {
        let missing = compare(&old(64, 80), None);
        assert_eq!(missing.status, Status::Missing);
        assert!(missing.note.is_some() && missing.status.fails());
        let failed = compare(&old(64, 80), Some(&new(0, 0, Some("exit 2"))));
        assert_eq!(failed.status, Status::Error);
        assert_eq!(failed.note.as_deref(), Some("exit 2"));
    }

    #[test]
    fn a_row_that_ran_another_kernel_names_both() {
        let c = compare(&old(64, 80), Some(&new(48, 80, None)));
        assert_eq!(
            c.kernel_change().as_deref(),
            Some("kernel `tflite::reference_integer_ops::DepthwiseConvPerChannel` (TFLM reference) → `arm_depthwise_conv_3x3_s8` (CMSIS-NN)")
        );
        // A baseline from before kernel attribution has no `kernel_before`.
        let mut legacy = old(64, 80);
        (legacy.library, legacy.kernel) = (None, None);
        let c = compare(&legacy, Some(&new(64, 80, None)));
        assert_eq!(
            (c.kernel_before.as_deref(), c.kernel_change()),
            (None, None)
        );
    }

    #[test]
    fn a_baseline_without_kernel_fields_still_loads() {
        let row: BaselineRow = serde_json::from_str(
            r#"{"name":"dw1","source":"builtin","op":"depthwise_conv2d","dtype":"int8","arch":"cortex-m4","spec":"x","exact_bytes":1,"monotone_bytes":1,"algorithmic_bytes":null,"analytic_bytes":null}"#,
        )
        .unwrap();
        assert_eq!((row.library, row.kernel), (None, None));
    }

    #[test]
    fn an_analytic_bound_above_the_new_trace_is_flagged() {
        // `new` puts the analytic value one byte above the traced monotone.
        assert!(compare(&old(64, 80), Some(&new(64, 80, None))).analytic_now_unsafe);
    }
}
