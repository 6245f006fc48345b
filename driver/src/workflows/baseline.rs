//! O_s baseline tables (`memtrace table`): a kernel binary's built-in layers
//! and/or swept configurations, each with the traced exact and monotone O_s
//! and the algorithmic and analytic values, in a JSON file that
//! [`crate::workflows::regress`] compares a later build against.

use std::path::{Path, PathBuf};

use memtrace_io::input::{read_text_limited, MAX_TEXT_FILE};
use memtrace_io::output::write_atomically;
use memtrace_tracer::{Arch, ElfImage};
use serde::{Deserialize, Serialize};

use crate::bail;
use crate::support::common::check_output;
use crate::support::error::Result;
use crate::support::outcome::{Answer, Format, Outcome};
use crate::workflows::sweep::{
    require_job_mailbox, start, summarise, ConfigSelection, Depth, Row, RowContract, SpecStream,
    Sweep,
};

/// Format tag of baseline files.
pub const FORMAT: &str = "memtrace-os-table/1";

/// [`Baseline::access`] of a baseline traced on the exact (hook) path.
pub(crate) const EXACT_ACCESS: &str = "hooks";

/// One row of a baseline.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BaselineRow {
    /// Layer name (`builtin`) or `config N` (`job`).
    pub name: String,
    /// `builtin`: a layer the binary runs without a job, found again by name;
    /// `job`: re-traced from `spec` through the job mailbox.
    pub source: String,
    /// Operator name.
    pub op: String,
    /// Element type.
    pub dtype: String,
    /// Architecture the row was traced on.
    pub arch: String,
    /// Canonical layer spec (the params text for a layer without one).
    pub spec: String,
    /// Traced exact O_s.
    pub exact_bytes: Option<u64>,
    /// Traced monotone O_s.
    pub monotone_bytes: Option<u64>,
    /// Traced exact O_s of the reverse sweep (input below the output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverse_exact_bytes: Option<u64>,
    /// Traced monotone O_s of the reverse sweep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverse_monotone_bytes: Option<u64>,
    /// Algorithmic O_s of the spec.
    pub algorithmic_bytes: Option<u64>,
    /// Analytic O_s of the spec.
    pub analytic_bytes: Option<u64>,
    /// Kernel library that ran the row (absent in baselines written before
    /// memtrace attributed kernels).
    #[serde(default)]
    pub library: Option<String>,
    /// The function that made most of the row's buffer accesses (absent
    /// like `library`).
    #[serde(default)]
    pub kernel: Option<String>,
    /// Traced exact O_s of the second input (`add`, `concatenation`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input2_exact_bytes: Option<u64>,
    /// Traced monotone O_s of the second input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input2_monotone_bytes: Option<u64>,
    /// Traced exact O_s of the second input's reverse sweep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input2_reverse_exact_bytes: Option<u64>,
    /// Traced monotone O_s of the second input's reverse sweep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input2_reverse_monotone_bytes: Option<u64>,
    /// Instructions retired inside the layer window (absent in baselines
    /// written before memtrace recorded the whole memory behaviour).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<u64>,
    /// The layer's memory contract (absent like `instructions`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contract: Option<RowContract>,
    /// FNV-1a (64-bit, hex) of the layer's outputs when it ended (absent in
    /// baselines written before memtrace digested them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_digest: Option<String>,
}

/// A baseline file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Baseline {
    /// [`FORMAT`].
    pub format: String,
    /// The binary the rows were traced from.
    pub elf: String,
    /// Its architecture.
    pub arch: String,
    /// The memtrace that wrote the file.
    pub memtrace_version: String,
    /// Seed the guest's data generator got for job rows.
    pub seed: u64,
    /// The access path the rows were traced on: `hooks` (exact). Absent in
    /// baselines written on the fast path, whose CMSIS-NN values can be a
    /// few bytes small where the kernel loads unaligned words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<String>,
    /// One row per layer or configuration.
    pub rows: Vec<BaselineRow>,
}

impl BaselineRow {
    /// The baseline record of a swept row.
    pub fn of(row: &Row) -> BaselineRow {
        BaselineRow {
            name: row.name.clone(),
            source: row.source.to_owned(),
            op: row.op.clone(),
            dtype: row.dtype.clone(),
            arch: row.arch.clone(),
            spec: row.spec.clone(),
            exact_bytes: row.exact_bytes,
            monotone_bytes: row.monotone_bytes,
            reverse_exact_bytes: row.reverse_exact_bytes,
            reverse_monotone_bytes: row.reverse_monotone_bytes,
            algorithmic_bytes: row.algorithmic_bytes,
            analytic_bytes: row.analytic_bytes,
            library: row.library.clone(),
            kernel: row.kernel.clone(),
            input2_exact_bytes: row.input2.as_ref().map(|i| i.exact_bytes),
            input2_monotone_bytes: row.input2.as_ref().map(|i| i.monotone_bytes),
            input2_reverse_exact_bytes: row.input2.as_ref().map(|i| i.reverse_exact_bytes),
            input2_reverse_monotone_bytes: row.input2.as_ref().map(|i| i.reverse_monotone_bytes),
            instructions: Some(row.instructions),
            contract: row.contract.clone(),
            output_digest: row.output_digest.clone(),
        }
    }
}

impl Baseline {
    /// Reads and checks a baseline file.
    pub fn load(path: &Path) -> Result<Baseline> {
        let text = read_text_limited(path, MAX_TEXT_FILE, "baselines")?;
        let b: Baseline = serde_json::from_str(&text)
            .map_err(|e| crate::failed!("{} is not a memtrace O_s table: {e}", path.display()))?;
        if b.format != FORMAT {
            bail!(
                "{}: format `{}`, expected `{FORMAT}`",
                path.display(),
                b.format
            );
        }
        Ok(b)
    }
}

/// What to tabulate and where.
#[derive(Debug, Clone)]
pub struct TableOptions {
    /// The kernel binary.
    pub elf: PathBuf,
    /// The core to trace it on (`None`: the one it was built for).
    pub target: Option<Arch>,
    /// The baseline file to write.
    pub out: PathBuf,
    /// Leave out the binary's built-in layers.
    pub no_builtin: bool,
    /// Swept configurations.
    pub configs: ConfigSelection,
}

/// A written baseline and the rows behind it.
#[derive(Debug, Clone)]
pub struct Tabulated {
    /// The baseline as written.
    pub baseline: Baseline,
    /// The traced rows.
    pub rows: Vec<Row>,
    /// Swept configurations among them.
    pub configs: usize,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// The kernel binary.
    pub elf: PathBuf,
    /// The file written.
    pub out: PathBuf,
}

/// Traces the built-in layers and the selected configurations and writes the
/// baseline file atomically; nothing is written when any row fails.
pub fn tabulate(opts: &TableOptions) -> Result<Tabulated> {
    if opts.no_builtin && !opts.configs.any() {
        bail!("--no-builtin leaves nothing to tabulate: add --op, --configs-file or --grid");
    }
    check_output(&opts.out, &[&opts.elf])?;
    let specs = if opts.configs.any() {
        Some(opts.configs.stream()?)
    } else {
        None
    };
    let mut image = ElfImage::load(&opts.elf)?;
    if let Some(target) = opts.target {
        image = image.on_target(target)?;
    }
    if specs.as_ref().is_some_and(|s| !s.is_empty()) {
        require_job_mailbox(&image)?;
    }
    let sweep = Sweep::configured(&image, Depth::Baseline, &opts.configs);
    let threads = sweep.threads;
    let t0 = start();
    let mut rows = Vec::new();
    if !opts.no_builtin {
        rows.extend(sweep.builtin()?);
    }
    let configs = specs.as_ref().map_or(0, SpecStream::len);
    if let Some(specs) = specs {
        rows.extend(sweep.stream(specs)?);
    }
    let summary = summarise(&rows, t0.elapsed(), threads);
    let failed: Vec<String> = rows
        .iter()
        .filter_map(|r| {
            let e = r.error.as_deref()?;
            Some(format!("ERROR {}: {}: {e}", r.name, r.spec))
        })
        .collect();
    if !failed.is_empty() {
        bail!(
            "{} of {} configurations could not be traced; no table written\n{}",
            failed.len(),
            rows.len(),
            failed.join("\n")
        );
    }
    let baseline = Baseline {
        format: FORMAT.to_owned(),
        elf: opts.elf.display().to_string(),
        arch: image.arch.name().to_owned(),
        memtrace_version: env!("CARGO_PKG_VERSION").to_owned(),
        seed: opts.configs.seed,
        access: Some(EXACT_ACCESS.to_owned()),
        rows: rows.iter().map(BaselineRow::of).collect(),
    };
    // Safe to print, as every JSON memtrace writes: a row names a layer.
    let text = serde_json::to_string_pretty(&baseline)? + "\n";
    let text = crate::support::text::json_terminal_safe(&text);
    write_atomically(&opts.out, |w| {
        std::io::Write::write_all(w, text.as_bytes())
            .map_err(|e| memtrace_io::output::write_error(&opts.out, e))
    })?;
    Ok(Tabulated {
        baseline,
        rows,
        configs,
        seconds: summary.seconds,
        elf: opts.elf.clone(),
        out: opts.out.clone(),
    })
}

impl Answer for Tabulated {
    /// The baseline is in its file: on stderr, what was written and a
    /// warning per row that failed its O_s cross-checks (recorded as traced).
    fn answer(&self, _format: Format) -> Result<Outcome> {
        let mut verdict = vec![format!(
            "{}: {} rows ({} built-in layers, {} configs) written to {} in {:.1} s",
            self.elf.display(),
            self.rows.len(),
            self.rows.iter().filter(|r| r.source == "builtin").count(),
            self.configs,
            self.out.display(),
            self.seconds
        )];
        for r in self.rows.iter().filter(|r| !r.flags.is_empty()) {
            let flags: Vec<&str> = r.flags.iter().map(|f| f.name()).collect();
            verdict.push(format!(
                "WARNING {}: {} fails the O_s cross-checks [{}] (recorded as traced)",
                r.name,
                r.spec,
                flags.join(" ")
            ));
        }
        Ok(Outcome {
            verdict,
            ..Outcome::default()
        })
    }
}
