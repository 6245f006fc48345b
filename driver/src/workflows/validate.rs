//! Validation of the O_s methods (`memtrace validate`): sweep layer configurations through a compiled kernel
//! and check every O_s method against the trace (DMO Table II, generalised).
//!
//! Exit status: 0 when every configuration passes, 1 when any violates a check
//! (analytic > traced monotone, algorithmic ≠ traced monotone, exact <
//! monotone), 2 when none violates but some could not be traced (e.g. the
//! guest rejected a configuration).

use std::path::PathBuf;

use memtrace_tracer::ElfImage;
use serde::Serialize;

use crate::bail;
use crate::support::attribution::{kernel_text, other_than_reference};
use crate::support::common::{check_output, configure_table_printing, show};
use crate::support::error::Result;
use crate::support::outcome::{Answer, Format, Outcome};
use crate::workflows::sweep::{
    require_job_mailbox, start, summarise, ConfigSelection, Depth, Row, Summary, Sweep,
};
use memtrace_analyzer::report::unqualified;

/// What to validate.
#[derive(Debug, Clone)]
pub struct ValidateOptions {
    /// Kernel-suite binary with the job mailbox.
    pub elf: PathBuf,
    /// The configurations.
    pub configs: ConfigSelection,
    /// Where the report will be written (checked before tracing).
    pub out: Option<PathBuf>,
}

/// The outcome of `memtrace validate`.
#[derive(Debug, Clone, Serialize)]
pub struct ValidateReport {
    /// The kernel binary.
    pub elf: String,
    /// Its architecture.
    pub arch: &'static str,
    /// Counts and statistics.
    pub summary: Summary,
    /// One row per configuration.
    pub configs: Vec<Row>,
    /// The report goes to a file (`--out`), not the terminal.
    #[serde(skip)]
    pub to_file: bool,
}

/// Sweeps the selected configurations and checks every O_s method.
pub fn validate(opts: &ValidateOptions) -> Result<ValidateReport> {
    if !opts.configs.any() {
        bail!("nothing to validate: give --op OP (or `all`), --configs-file FILE or --grid SPEC");
    }
    if let Some(out) = &opts.out {
        check_output(out, &[&opts.elf])?;
    }
    let specs = opts.configs.stream()?;
    if specs.is_empty() {
        bail!("the configuration sources gave no configuration");
    }
    let image = ElfImage::load(&opts.elf)?;
    require_job_mailbox(&image)?;
    let sweep = Sweep::configured(&image, Depth::Overlap, &opts.configs);
    let t0 = start();
    let rows = sweep.stream(specs)?;
    let threads = sweep.threads;
    Ok(ValidateReport {
        elf: opts.elf.display().to_string(),
        arch: image.arch.name(),
        summary: summarise(&rows, t0.elapsed(), threads),
        configs: rows,
        to_file: opts.out.is_some(),
    })
}

impl ValidateReport {
    /// The Table II-style table with the summary line under it.
    pub(crate) fn to_table(&self) -> Result<String> {
        let mut t = table_text(&self.configs)?;
        t.push_str(&self.summary_line());
        t.push('\n');
        Ok(t)
    }

    /// The report as pretty JSON.
    pub(crate) fn to_json(&self) -> Result<String> {
        Ok(serde_json::to_string_pretty(self)? + "\n")
    }

    /// The rows as CSV.
    pub(crate) fn to_csv(&self) -> Result<String> {
        csv_text(&self.configs)
    }

    /// The summary line.
    pub(crate) fn summary_line(&self) -> String {
        summary_line(&self.summary, self.arch)
    }

    /// One stderr line per violating row, then one per failed row.
    pub(crate) fn problem_lines(&self) -> Vec<String> {
        let violations = self
            .configs
            .iter()
            .filter(|r| !r.flags.is_empty())
            .map(|r| {
                format!(
                    "VIOLATION {} [{}]: {}: exact {} monotone {} algorithmic {} analytic {}{}{}",
                    r.name,
                    r.flags
                        .iter()
                        .map(|f| f.name())
                        .collect::<Vec<_>>()
                        .join(" "),
                    r.spec,
                    show(r.exact_bytes),
                    show(r.monotone_bytes),
                    show(r.algorithmic_bytes),
                    show(r.analytic_bytes),
                    r.input2.as_ref().map_or_else(String::new, |i| format!(
                        "; input2: exact {} monotone {} algorithmic {} analytic {}",
                        i.exact_bytes,
                        i.monotone_bytes,
                        show(i.algorithmic_bytes),
                        show(i.analytic_bytes)
                    )),
                    reference_note(r)
                )
            });
        let errors = self.configs.iter().filter(|r| r.error.is_some()).map(|r| {
            format!(
                "ERROR {}: {}: {}",
                r.name,
                r.spec,
                r.error.as_deref().unwrap_or("")
            )
        });
        violations.chain(errors).collect()
    }
}

/// For a row that ran some other kernel than the TFLM reference ones, what
/// its violations mean; empty otherwise.
fn reference_note(r: &Row) -> String {
    let (library, kernel) = (r.library.as_deref(), r.kernel.as_deref());
    if !other_than_reference(library, kernel) {
        return String::new();
    }
    format!(
        " — the layer ran {}: the algorithmic and analytic methods model the TFLM reference loop nest, so they disagree with its trace (DMO §III-F assumes vectorised kernels keep the reference O_s); the traced value is the one to plan with",
        kernel_text(library, kernel)
    )
}

/// The summary line printed under the table.
pub(crate) fn summary_line(s: &Summary, arch: &str) -> String {
    let pct = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2} %"));
    format!(
        "{} configs on {arch}: {} violations ({} UNSAFE analytic, {} algorithmic MISMATCH, {} exact < monotone{}), {} errors; analytic error max {}, mean {}; paper equations as printed above the trace in {} configs (a paper finding, not a violation); {:.1} s, {:.1} configs/s on {} threads",
        s.configs,
        s.violations,
        s.unsafe_analytic,
        s.algorithmic_mismatch,
        s.exact_below_monotone,
        if s.violations_on_other_kernels > 0 {
            format!(
                "; {} of them ran a kernel other than the TFLM reference ones, whose loop nests the algorithmic and analytic methods model",
                s.violations_on_other_kernels
            )
        } else {
            String::new()
        },
        s.errors,
        pct(s.max_analytic_error_percent),
        pct(s.mean_analytic_error_percent),
        s.printed_above_traced,
        s.seconds,
        s.configs_per_second,
        s.threads
    )
}

/// Table II-style table.
fn table_text(rows: &[Row]) -> Result<String> {
    use polars::prelude::*;
    configure_table_printing();
    let verdict = |r: &Row| match (&r.error, r.flags.is_empty()) {
        (Some(e), _) => format!("ERROR: {e}"),
        (None, true) => "ok".to_owned(),
        (None, false) => format!(
            "VIOLATION {}",
            r.flags
                .iter()
                .map(|f| f.name())
                .collect::<Vec<_>>()
                .join(" ")
        ),
    };
    let printed = |r: &Row| match r.analytic_printed_bytes {
        None => String::new(),
        Some(p) if r.printed_above_traced => format!("{p} (>)"),
        Some(p) => p.to_string(),
    };
    let df = df!(
        "#" => rows.iter().map(|r| r.name.trim_start_matches("config ").to_owned()).collect::<Vec<_>>(),
        "config" => rows.iter().map(|r| r.short.clone()).collect::<Vec<_>>(),
        "exact B" => rows.iter().map(|r| r.exact_bytes).collect::<Vec<_>>(),
        "monotone B" => rows.iter().map(|r| r.monotone_bytes).collect::<Vec<_>>(),
        "algorithmic B" => rows.iter().map(|r| r.algorithmic_bytes).collect::<Vec<_>>(),
        "analytic B" => rows.iter().map(|r| r.analytic_bytes).collect::<Vec<_>>(),
        "error %" => rows.iter().map(|r| r.analytic_error_percent.map(|e| (e * 100.0).round() / 100.0)).collect::<Vec<_>>(),
        "printed B" => rows.iter().map(printed).collect::<Vec<_>>(),
        "verdict" => rows.iter().map(verdict).collect::<Vec<_>>(),
        "kernel (library)" => rows.iter().map(|r| match (&r.kernel, &r.library) {
            (Some(k), Some(l)) => format!("{} ({l})", unqualified(k)),
            _ => String::new(),
        }).collect::<Vec<_>>(),
    )?;
    // Second inputs (add, concatenation): monotone / algorithmic, only when
    // some row has one.
    let df = if rows.iter().any(|r| r.input2.is_some()) {
        let mut df = df;
        let column = rows
            .iter()
            .map(|r| {
                r.input2.as_ref().map_or_else(String::new, |i| {
                    format!("{} / {}", i.monotone_bytes, show(i.algorithmic_bytes))
                })
            })
            .collect::<Vec<_>>();
        df.insert_column(6, Column::new("input2 mono / alg B".into(), column))?;
        df
    } else {
        df
    };
    Ok(format!("{df}\n"))
}

/// The rows as CSV (polars' writer), one line per row with a header.
pub(crate) fn csv_text(rows: &[Row]) -> Result<String> {
    use polars::prelude::*;
    let text = |f: fn(&Row) -> String| rows.iter().map(f).collect::<Vec<_>>();
    let mut df = df!(
        "name" => text(|r| r.name.clone()),
        "source" => text(|r| r.source.to_owned()),
        "op" => text(|r| r.op.clone()),
        "dtype" => text(|r| r.dtype.clone()),
        "arch" => text(|r| r.arch.clone()),
        "spec" => text(|r| r.spec.clone()),
        "instructions" => rows.iter().map(|r| r.instructions).collect::<Vec<_>>(),
        "events" => rows.iter().map(|r| r.events).collect::<Vec<_>>(),
        "input_bytes" => rows.iter().map(|r| r.input_bytes).collect::<Vec<_>>(),
        "output_bytes" => rows.iter().map(|r| r.output_bytes).collect::<Vec<_>>(),
        "exact_bytes" => rows.iter().map(|r| r.exact_bytes).collect::<Vec<_>>(),
        "monotone_bytes" => rows.iter().map(|r| r.monotone_bytes).collect::<Vec<_>>(),
        "algorithmic_bytes" => rows.iter().map(|r| r.algorithmic_bytes).collect::<Vec<_>>(),
        "analytic_bytes" => rows.iter().map(|r| r.analytic_bytes).collect::<Vec<_>>(),
        "analytic_printed_bytes" => rows.iter().map(|r| r.analytic_printed_bytes).collect::<Vec<_>>(),
        "analytic_error_percent" => rows.iter().map(|r| r.analytic_error_percent).collect::<Vec<_>>(),
        "flags" => text(|r| r.flags.iter().map(|f| f.name()).collect::<Vec<_>>().join(" ")),
        "printed_above_traced" => rows.iter().map(|r| r.printed_above_traced).collect::<Vec<_>>(),
        "verdict" => text(|r| r.verdict.name().to_owned()),
        "error" => text(|r| r.error.clone().unwrap_or_default()),
        "library" => text(|r| r.library.clone().unwrap_or_default()),
        "kernel" => text(|r| r.kernel.clone().unwrap_or_default()),
        "input2_bytes" => rows.iter().map(|r| r.input2.as_ref().map(|i| i.input_bytes)).collect::<Vec<_>>(),
        "input2_exact_bytes" => rows.iter().map(|r| r.input2.as_ref().map(|i| i.exact_bytes)).collect::<Vec<_>>(),
        "input2_monotone_bytes" => rows.iter().map(|r| r.input2.as_ref().map(|i| i.monotone_bytes)).collect::<Vec<_>>(),
        "input2_algorithmic_bytes" => rows.iter().map(|r| r.input2.as_ref().and_then(|i| i.algorithmic_bytes)).collect::<Vec<_>>(),
        "input2_analytic_bytes" => rows.iter().map(|r| r.input2.as_ref().and_then(|i| i.analytic_bytes)).collect::<Vec<_>>(),
    )?;
    let mut out = Vec::new();
    CsvWriter::new(&mut out).finish(&mut df)?;
    String::from_utf8(out).map_err(|e| crate::failed!("CSV is not UTF-8: {e}"))
}

impl Answer for ValidateReport {
    /// After the report, the summary line (unless the table on the terminal
    /// already ends with it) and each problem. Exit status 1 when a method
    /// violated the trace or a configuration failed.
    fn answer(&self, format: Format) -> Result<Outcome> {
        let report = match format {
            Format::Json => self.to_json()?,
            Format::Csv => self.to_csv()?,
            _ => self.to_table()?,
        };
        let mut verdict = Vec::new();
        if format != Format::Table || self.to_file {
            verdict.push(self.summary_line());
        }
        verdict.extend(self.problem_lines());
        Ok(Outcome {
            notes: Vec::new(),
            report,
            verdict,
            status: Outcome::status_of(self.summary.violations == 0 && self.summary.errors == 0),
        })
    }
}
