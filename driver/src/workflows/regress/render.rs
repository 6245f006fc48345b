//! How a [`RegressReport`] is printed: one stderr line per breaking change,
//! a summary line, and the Markdown report.

use std::fmt::Write as _;

use super::{Change, RegressReport, RowChange, Status};
use crate::support::common::show;
use crate::support::error::Result;
use crate::support::outcome::{Answer, Format, Outcome};

impl RegressReport {
    /// One line per failing row and breaking change, for stderr: `SHRANK`
    /// for a smaller O_s, `CONTRACT` for the memory contract, `MISSING` and
    /// `ERROR` for rows without a new value.
    pub fn failure_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for r in self.rows.iter().filter(|r| r.fails) {
            if r.status != Status::Same && r.status != Status::Grew {
                lines.push(overlap_line(r));
            }
            for c in r.changes.iter().filter(|c| c.breaks()) {
                let tag = if c.is_contract() {
                    "CONTRACT"
                } else if c.is_output() {
                    "OUTPUT"
                } else {
                    continue;
                };
                let kernel = r
                    .kernel_after
                    .as_ref()
                    .map_or_else(String::new, |k| format!(", {k}"));
                lines.push(format!(
                    "{tag} {} ({}{kernel}): {}",
                    r.name,
                    r.spec,
                    c.describe()
                ));
            }
        }
        lines
    }

    /// The closing summary line.
    pub(crate) fn summary_line(&self) -> String {
        let c = &self.counts;
        format!(
            "regress: {} rows: {} shrank, {} grew, {} same, {} missing, {} errors; \
             {} broke the memory contract, {} computed other outputs, {} of {} CMSIS-NN rows \
             differ from the reference kernels'; {} slower, {} faster \
             (beyond {} %) — {}",
            c.rows,
            c.shrank,
            c.grew,
            c.same,
            c.missing,
            c.errors,
            c.contract_broken,
            c.outputs_differ,
            c.differ_from_reference,
            c.reference_checked,
            c.slower,
            c.faster,
            self.instruction_threshold,
            if self.passed { "PASS" } else { "FAIL" }
        )
    }

    /// The report as Markdown.
    pub fn to_markdown(&self) -> String {
        markdown(self)
    }
}

fn overlap_line(r: &RowChange) -> String {
    let new = r.new.as_ref();
    let notes: String = r
        .note
        .iter()
        .cloned()
        .chain(
            r.changes
                .iter()
                .filter(|c| !matches!(c, Change::Overlap { .. }) && !c.is_contract())
                .map(Change::describe),
        )
        .map(|n| format!(" — {n}"))
        .collect();
    format!(
        "{} {} ({}): monotone {} -> {}, exact {} -> {}{notes}",
        r.status.name(),
        r.name,
        r.spec,
        show(r.old.monotone_bytes),
        show(new.and_then(|v| v.monotone_bytes)),
        show(r.old.exact_bytes),
        show(new.and_then(|v| v.exact_bytes)),
    )
}

fn signed(v: Option<i64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:+}"))
}

/// The O_s changes of a row besides its monotone and exact values (which
/// have columns of their own), its spec change and why it has no values,
/// joined for a table cell. Contract, instruction and kernel changes have
/// sections of their own.
fn other_changes(r: &RowChange) -> String {
    let mut notes: Vec<String> = r.note.iter().cloned().collect();
    notes.extend(
        r.changes
            .iter()
            .filter(|c| match c {
                Change::Overlap { value, .. } => !matches!(*value, "monotone" | "exact"),
                Change::Spec { .. } => true,
                _ => false,
            })
            .map(Change::describe),
    );
    if r.analytic_now_unsafe {
        notes.push("the analytic bound is now above the traced value".into());
    }
    notes.join("; ")
}

fn overlap_section(s: &mut String, title: &str, rows: &[&RowChange]) {
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(s, "## {title} ({})\n", rows.len());
    let _ = writeln!(
        s,
        "| layer / config | spec | monotone O_s B (old → new) | Δ | exact O_s B (old → new) | Δ | other O_s changes |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|");
    for r in rows {
        let new = r.new.as_ref();
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
            other_changes(r)
        );
    }
    let _ = writeln!(s);
}

/// A section listing each selected change of each row on its own line.
fn change_section(
    s: &mut String,
    title: &str,
    rows: &[RowChange],
    select: &dyn Fn(&Change) -> bool,
) {
    let lines: Vec<(&RowChange, &Change)> = rows
        .iter()
        .flat_map(|r| r.changes.iter().filter(|c| select(c)).map(move |c| (r, c)))
        .collect();
    if lines.is_empty() {
        return;
    }
    let _ = writeln!(s, "## {title} ({})\n", lines.len());
    let _ = writeln!(s, "| layer / config | spec | change |");
    let _ = writeln!(s, "|---|---|---|");
    for (r, c) in lines {
        let _ = writeln!(s, "| {} | `{}` | {} |", r.name, r.spec, c.describe());
    }
    let _ = writeln!(s);
}

fn verdict(r: &RegressReport) -> String {
    let c = &r.counts;
    if r.passed {
        format!(
            "**PASS** — nothing that can break a user changed: {} rows; O_s {} grew, {} same; \
             {} slower, {} faster beyond {} % instructions.\n",
            c.rows, c.grew, c.same, c.slower, c.faster, r.instruction_threshold
        )
    } else {
        format!(
            "**FAIL** — of {} rows, {} shrank (memory plans built on the baseline O_s are \
             unsafe for them), {} broke the memory contract, {} computed other outputs, {} \
             missing, {} could not be traced; {} grew, {} same.\n",
            c.rows,
            c.shrank,
            c.contract_broken,
            c.outputs_differ,
            c.missing,
            c.errors,
            c.grew,
            c.same
        )
    }
}

fn markdown(r: &RegressReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# memtrace regress: memory behaviour of `{}`\n", r.elf);
    let _ = writeln!(
        s,
        "Baseline `{}` (traced from `{}`, {}); new binary `{}` ({}).\n",
        r.baseline, r.baseline_elf, r.baseline_arch, r.elf, r.arch
    );
    let _ = writeln!(s, "{}", verdict(r));
    if r.counts.reference_checked > 0 {
        let _ = writeln!(
            s,
            "The suite checked each of the {} rows a CMSIS-NN kernel ran against TFLM's \
             reference kernel on the same inputs, bit for bit: {} differ.\n",
            r.counts.reference_checked, r.counts.differ_from_reference
        );
    }
    let of = |st: Status| r.rows.iter().filter(|x| x.status == st).collect::<Vec<_>>();
    overlap_section(
        &mut s,
        "Shrank — unsafe for existing plans",
        &of(Status::Shrank),
    );
    change_section(
        &mut s,
        "Memory contract — can break a user",
        &r.rows,
        &|c| c.is_contract() && c.breaks(),
    );
    change_section(&mut s, "Outputs — can break a user", &r.rows, &|c| {
        c.is_output() && c.breaks()
    });
    overlap_section(&mut s, "Missing from the new binary", &of(Status::Missing));
    overlap_section(&mut s, "Could not be traced", &of(Status::Error));
    overlap_section(&mut s, "Grew", &of(Status::Grew));
    change_section(&mut s, "Memory contract — other changes", &r.rows, &|c| {
        c.is_contract() && !c.breaks()
    });
    change_section(&mut s, "Outputs — other changes", &r.rows, &|c| {
        c.is_output() && !c.breaks()
    });
    change_section(&mut s, "Instructions", &r.rows, &|c| {
        matches!(c, Change::Instructions { .. })
    });
    change_section(&mut s, "Kernels and specs", &r.rows, &|c| {
        matches!(c, Change::Kernel { .. } | Change::Spec { .. })
    });
    overlap_section(&mut s, "O_s unchanged", &of(Status::Same));
    s
}

impl Answer for RegressReport {
    /// Warnings first; after the report, each failure and the summary.
    /// Exit status 1 when a layer's O_s shrank (or another check failed).
    fn answer(&self, format: Format) -> Result<Outcome> {
        let report = match format {
            Format::Json => serde_json::to_string_pretty(self)? + "\n",
            _ => self.to_markdown(),
        };
        let mut verdict = self.failure_lines();
        verdict.push(self.summary_line());
        Ok(Outcome {
            notes: self.warnings(),
            report,
            verdict,
            status: Outcome::status_of(self.passed),
        })
    }
}
