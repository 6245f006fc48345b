//! Tracing layers of a kernel binary (`memtrace run`): buffers, access
//! counts and O_s per layer, optionally every event as Parquet and the trace
//! as a picture.

use std::path::PathBuf;

use memtrace_abi::Analysis;
use memtrace_abi::LayerSpec;
use memtrace_analyzer::contract::{contract_frame, ContractCheck};
use memtrace_analyzer::event_table::EventTable;
use memtrace_analyzer::layer_stats::LayerStats;
use memtrace_analyzer::overlap::check::{explain, explain_other_kernel, MethodValues};
use memtrace_analyzer::pc_counts::PcCounts;
use memtrace_analyzer::plot::trace::TracePlot;
use memtrace_analyzer::report::{buffers_frame, overlap_frame, RunReport};
use memtrace_tracer::{AccessPath, ElfImage, Job, TraceOptions};

use crate::attribution::{kernel_of, kernel_text, other_than_reference, KernelResolver};
use crate::common::{check_output, configure_table_printing, trace_with};
use crate::error::{Context, Result};
use crate::{bail, failed};

/// What to trace and what to write.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The kernel binary.
    pub elf: PathBuf,
    /// Layers to trace (all when empty).
    pub layers: Vec<String>,
    /// A layer configuration for the guest's job mailbox.
    pub job: Option<String>,
    /// Seed of the guest's data generator for `job`.
    pub seed: u32,
    /// Parquet file of every event.
    pub events: Option<PathBuf>,
    /// Picture of the trace (.png or .svg).
    pub plot: Option<PathBuf>,
    /// Draw the trace without the O_s curves.
    pub no_overlay: bool,
    /// Instruction budget of the guest.
    pub max_instructions: u64,
    /// Use memory hooks even when no output needs exact instruction times.
    pub exact_time: bool,
}

/// The MMIO path unless some output needs each access's exact instruction.
pub fn access_path(exact_time: bool) -> AccessPath {
    if exact_time {
        AccessPath::Hooks
    } else {
        AccessPath::Mmio
    }
}

/// Traces the selected layers and writes the requested files.
pub fn run(opts: &RunOptions) -> Result<RunReport> {
    let job = opts
        .job
        .as_deref()
        .map(|text| {
            LayerSpec::parse(text)
                .map(|spec| Job {
                    spec,
                    seed: opts.seed,
                })
                .map_err(|e| failed!("bad --job `{text}`: {e}"))
        })
        .transpose()?;
    for path in opts.events.iter().chain(&opts.plot) {
        check_output(path, &[&opts.elf])?;
    }
    if let Some(plot) = &opts.plot {
        if !matches!(
            plot.extension().and_then(|e| e.to_str()),
            Some("png" | "svg")
        ) {
            bail!(
                "--plot {}: the file must end in .png or .svg",
                plot.display()
            );
        }
    }
    let image = ElfImage::load(&opts.elf)?;
    let rerun_job = job.clone();
    let mut stats = LayerStats::default();
    let mut contract = ContractCheck::default();
    let mut pcs = PcCounts::default();
    // Streamed to its file while the trace runs: memory bounded by one row
    // group, whatever the event count.
    let mut table = opts
        .events
        .as_deref()
        .map(EventTable::streaming)
        .transpose()?;
    let mut plot = opts.plot.as_ref().map(|_| {
        if opts.no_overlay {
            TracePlot::default()
        } else {
            TracePlot::with_overlays()
        }
    });
    let options = TraceOptions {
        job,
        layers: (!opts.layers.is_empty()).then(|| opts.layers.clone()),
        max_instructions: opts.max_instructions,
        access: access_path(opts.exact_time || table.is_some() || plot.is_some()),
        stray_writes: true,
        ..TraceOptions::default()
    };
    let summary = {
        let mut analyses: Vec<&mut (dyn Analysis + Send)> = vec![&mut stats, &mut contract];
        analyses.push(&mut pcs);
        if let Some(t) = table.as_mut() {
            analyses.push(t);
        }
        if let Some(p) = plot.as_mut() {
            analyses.push(p);
        }
        trace_with(&image, options, &mut analyses)
            .with_context(|| format!("tracing {}", opts.elf.display()))?
    };
    let unknown: Vec<&String> = opts
        .layers
        .iter()
        .filter(|l| !summary.layers.contains(l))
        .collect();
    if !unknown.is_empty() {
        bail!(
            "unknown --layer {}; {} has the layers: {}",
            unknown
                .iter()
                .map(|l| format!("`{l}`"))
                .collect::<Vec<_>>()
                .join(", "),
            opts.elf.display(),
            summary.layers.join(", ")
        );
    }
    if summary.exit_code != 0 {
        bail!(
            "the guest {}",
            crate::common::exit_text(
                summary.exit_code,
                summary.exit_reason.as_deref(),
                "a rejected job or a failed kernel check"
            )
        );
    }
    let rerun = crate::contract::Rerun {
        image: &image,
        job: rerun_job,
        max_instructions: opts.max_instructions,
        layers: &summary.layers,
    };
    let contracts = crate::contract::finish(rerun, summary.access, contract.layers)?;
    for layer in &mut stats.layers {
        layer.contract = contracts.iter().find(|c| c.index == layer.index).cloned();
    }
    KernelResolver::new(&image).attribute(&mut stats.layers, &pcs);
    if let Some(table) = table {
        table.finish()?;
    }
    if let (Some(plot), Some(path)) = (plot, &opts.plot) {
        plot.render(path)?;
    }
    Ok(RunReport {
        elf: opts.elf.display().to_string(),
        arch: summary.arch.name().to_owned(),
        access: summary.access.name().to_owned(),
        exit_code: summary.exit_code,
        instructions: summary.instructions,
        layers: stats.layers,
    })
}

/// One warning per failed O_s cross-check of each layer, then one per
/// broken rule of the memory contract.
pub fn warnings(report: &RunReport) -> Vec<String> {
    let mut lines = Vec::new();
    for layer in &report.layers {
        for (k, o) in layer.overlaps().enumerate() {
            let methods = MethodValues {
                algorithmic: o.algorithmic_bytes,
                analytic: o.analytic_bytes,
                analytic_printed: o.analytic_printed_bytes,
            };
            let (library, kernel) = kernel_of(layer);
            // A second input's warnings name it.
            let which = if k > 0 {
                format!(" input `{}`", o.input)
            } else {
                String::new()
            };
            for flag in &o.flags {
                let text = if other_than_reference(library, kernel) {
                    let kernel = kernel_text(library, kernel);
                    explain_other_kernel(*flag, o.monotone_bytes, o.exact_bytes, &methods, &kernel)
                } else {
                    explain(*flag, o.monotone_bytes, o.exact_bytes, &methods)
                };
                lines.push(format!(
                    "WARNING: layer `{}` ({}){which}: {text}",
                    layer.name, layer.params,
                ));
            }
        }
    }
    lines.extend(crate::contract::warnings(report));
    lines
}

/// Layers with at least one failed cross-check.
pub fn flagged_layers(report: &RunReport) -> usize {
    report
        .layers
        .iter()
        .filter(|l| l.overlaps().any(|o| !o.flags.is_empty()))
        .count()
}

/// The buffer and O_s tables of `memtrace run`.
pub fn tables_text(report: &RunReport) -> Result<String> {
    configure_table_printing();
    Ok(format!(
        "{} ({}): {} layer(s) traced, {} instructions in total\n{}\n{}\nmemory contract:\n{}\n",
        report.elf,
        report.arch,
        report.layers.len(),
        report.instructions,
        buffers_frame(report)?,
        overlap_frame(report)?,
        contract_frame(report)?
    ))
}
