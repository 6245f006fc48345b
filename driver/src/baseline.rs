//! `memtrace table`: write an O_s baseline table of a kernel binary — its
//! built-in layers and/or swept configurations, each with the traced exact
//! and monotone O_s and the algorithmic and analytic values — for
//! `memtrace regress` to compare a later build against.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Args;
use memtrace_analyzer::output::write_atomically;
use memtrace_tracer::ElfImage;
use serde::{Deserialize, Serialize};

use super::common::check_writable;
use super::sweep::{
    config_names, require_job_mailbox, start, summarise, trace_builtin, trace_specs, ConfigArgs,
    Row,
};

/// Format tag of baseline files.
pub const FORMAT: &str = "memtrace-os-table/1";

#[derive(Args, Debug)]
pub struct TableArgs {
    /// Kernel-suite binary (ELF for Cortex-M4 or x86-64).
    pub elf: PathBuf,
    /// Where to write the table (JSON).
    #[arg(long, value_name = "baseline.json")]
    pub out: PathBuf,
    /// Leave out the binary's built-in layers (by default they are traced
    /// once, without a job, and recorded by layer name).
    #[arg(long)]
    pub no_builtin: bool,
    #[command(flatten)]
    pub configs: ConfigArgs,
}

/// One row of a baseline.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BaselineRow {
    /// Layer name (`builtin`) or `config N` (`job`).
    pub name: String,
    /// `builtin`: a layer the binary runs without a job, found again by name;
    /// `job`: re-traced from `spec` through the job mailbox.
    pub source: String,
    pub op: String,
    pub dtype: String,
    pub arch: String,
    /// Canonical layer spec (the params text for a layer without one).
    pub spec: String,
    pub exact_bytes: Option<u64>,
    pub monotone_bytes: Option<u64>,
    pub algorithmic_bytes: Option<u64>,
    pub analytic_bytes: Option<u64>,
}

/// A baseline file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Baseline {
    pub format: String,
    pub elf: String,
    pub arch: String,
    pub memtrace_version: String,
    /// Seed the guest's data generator got for job rows.
    pub seed: u64,
    pub rows: Vec<BaselineRow>,
}

impl BaselineRow {
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
            algorithmic_bytes: row.algorithmic_bytes,
            analytic_bytes: row.analytic_bytes,
        }
    }
}

impl Baseline {
    pub fn load(path: &std::path::Path) -> Result<Baseline> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read baseline {}", path.display()))?;
        let b: Baseline = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a memtrace O_s table", path.display()))?;
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

pub fn run(args: TableArgs) -> Result<ExitCode> {
    if args.no_builtin && !args.configs.any() {
        bail!("--no-builtin leaves nothing to tabulate: add --op, --configs-file or --grid");
    }
    check_writable(&args.out)?;
    let specs = if args.configs.any() {
        args.configs.specs()?
    } else {
        Vec::new()
    };
    let image = ElfImage::load(&args.elf)?;
    if !specs.is_empty() {
        require_job_mailbox(&image)?;
    }
    let threads = args.configs.threads();
    let t0 = start();
    let mut rows = Vec::new();
    if !args.no_builtin {
        rows.extend(trace_builtin(&image, args.configs.max_instructions)?);
    }
    rows.extend(trace_specs(
        &image,
        &specs,
        &config_names(specs.len()),
        args.configs.seed as u32,
        threads,
        args.configs.max_instructions,
    ));
    let summary = summarise(&rows, t0.elapsed(), threads);
    let failed: Vec<&Row> = rows.iter().filter(|r| r.error.is_some()).collect();
    if !failed.is_empty() {
        for r in &failed {
            eprintln!(
                "ERROR {}: {}: {}",
                r.name,
                r.spec,
                r.error.as_deref().unwrap_or("")
            );
        }
        bail!(
            "{} of {} configurations could not be traced; no table written",
            failed.len(),
            rows.len()
        );
    }
    let baseline = Baseline {
        format: FORMAT.to_owned(),
        elf: args.elf.display().to_string(),
        arch: image.arch.name().to_owned(),
        memtrace_version: env!("CARGO_PKG_VERSION").to_owned(),
        seed: args.configs.seed,
        rows: rows.iter().map(BaselineRow::of).collect(),
    };
    let text = serde_json::to_string_pretty(&baseline)? + "\n";
    write_atomically(&args.out, |w| {
        Ok(std::io::Write::write_all(w, text.as_bytes())?)
    })?;
    eprintln!(
        "{}: {} rows ({} built-in layers, {} configs) written to {} in {:.1} s",
        args.elf.display(),
        rows.len(),
        rows.iter().filter(|r| r.source == "builtin").count(),
        specs.len(),
        args.out.display(),
        summary.seconds
    );
    for r in rows.iter().filter(|r| !r.flags.is_empty()) {
        eprintln!(
            "WARNING {}: {} fails the O_s cross-checks [{}] (recorded as traced)",
            r.name,
            r.spec,
            r.flags
                .iter()
                .map(|f| f.name())
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    Ok(ExitCode::SUCCESS)
}
