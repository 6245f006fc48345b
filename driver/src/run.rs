//! `memtrace run`: trace layers, report buffers, access counts and O_s.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, ValueEnum};
use memtrace_analyzer::layer_stats::LayerStats;
use memtrace_analyzer::overlap::check::{explain, MethodValues};
use memtrace_analyzer::pipeline::Analysis;
use memtrace_analyzer::plot::trace::TracePlot;
use memtrace_analyzer::report::{buffers_frame, overlap_frame, RunReport};
use memtrace_analyzer::table::EventTable;
use memtrace_tracer::{AccessPath, ElfImage, Job, LayerSpec, TraceOptions};

use super::common::{check_writable, configure_table_printing, trace_with};

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Format {
    Table,
    Json,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Kernel binary (ELF for Cortex-M4 or x86-64) built with memtrace.h.
    pub elf: PathBuf,
    /// Trace only this layer (repeatable); all layers when absent.
    #[arg(long = "layer", value_name = "NAME")]
    pub layers: Vec<String>,
    /// Layer configuration written into the guest's job mailbox, e.g.
    /// 'op=depthwise_conv2d,dtype=f32,input=1x112x112x96,filter=1x3x3x96,stride=2,padding=same'.
    #[arg(long, value_name = "SPEC")]
    pub job: Option<String>,
    /// Seed of the guest's data generator for --job.
    #[arg(long, default_value_t = 1)]
    pub seed: u32,
    /// Write every event to this Parquet file.
    #[arg(long, value_name = "OUT.parquet")]
    pub events: Option<PathBuf>,
    /// Draw the trace (x = instruction, y = byte offset) to a .png or .svg.
    /// Layers with a spec also get the O_s curves drawn over them: maxW on the
    /// output; minR, the clobber front maxW − OB + O_s and the analytic bound
    /// on the input (docs/overlap.md).
    #[arg(long, value_name = "OUT.png|OUT.svg")]
    pub plot: Option<PathBuf>,
    /// With --plot: draw only the trace, without the O_s curves.
    #[arg(long)]
    pub no_overlay: bool,
    /// Exit with status 1 when a layer fails an O_s cross-check (UNSAFE
    /// analytic bound, algorithmic MISMATCH); without it they are warnings.
    #[arg(long)]
    pub strict: bool,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Stop a guest that runs longer than this many instructions.
    #[arg(long, default_value_t = 20_000_000_000)]
    pub max_instructions: u64,
    /// Observe buffers with memory hooks even when neither --events nor
    /// --plot needs each access's exact instruction (several times slower;
    /// the O_s and counts are the same, see docs/protocol.md "Access paths").
    #[arg(long)]
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

pub fn run(args: RunArgs) -> Result<ExitCode> {
    let job = args
        .job
        .as_deref()
        .map(|text| {
            LayerSpec::parse(text)
                .map(|spec| Job {
                    spec,
                    seed: args.seed,
                })
                .map_err(|e| anyhow!("bad --job `{text}`: {e}"))
        })
        .transpose()?;
    for path in args.events.iter().chain(&args.plot) {
        check_writable(path)?;
    }
    if let Some(plot) = &args.plot {
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
    let image = ElfImage::load(&args.elf)?;
    let mut stats = LayerStats::default();
    let mut table = args.events.as_ref().map(|_| EventTable::default());
    let mut plot = args.plot.as_ref().map(|_| {
        if args.no_overlay {
            TracePlot::default()
        } else {
            TracePlot::with_overlays()
        }
    });
    let options = TraceOptions {
        job,
        layers: (!args.layers.is_empty()).then(|| args.layers.clone()),
        max_instructions: args.max_instructions,
        access: access_path(args.exact_time || table.is_some() || plot.is_some()),
        ..TraceOptions::default()
    };
    let summary = {
        let mut analyses: Vec<&mut (dyn Analysis + Send)> = vec![&mut stats];
        if let Some(t) = table.as_mut() {
            analyses.push(t);
        }
        if let Some(p) = plot.as_mut() {
            analyses.push(p);
        }
        trace_with(&image, options, &mut analyses)
            .with_context(|| format!("tracing {}", args.elf.display()))?
    };
    let unknown: Vec<&String> = args
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
            args.elf.display(),
            summary.layers.join(", ")
        );
    }
    if summary.exit_code != 0 {
        bail!(
            "the guest exited with code {} (a rejected job or a failed kernel check)",
            summary.exit_code
        );
    }
    if let (Some(table), Some(path)) = (table, &args.events) {
        table.write_parquet(path)?;
    }
    if let (Some(plot), Some(path)) = (plot, &args.plot) {
        plot.render(path)?;
    }
    let report = RunReport {
        elf: args.elf.display().to_string(),
        arch: summary.arch.name().to_owned(),
        access: summary.access.name().to_owned(),
        exit_code: summary.exit_code,
        instructions: summary.instructions,
        layers: stats.layers,
    };
    if std::env::var_os("MEMTRACE_REPORT_PEAK_RSS").is_some() {
        if let Some(kb) = super::bench::peak_rss_kb() {
            eprintln!("peak RSS kB: {kb}");
        }
    }
    match args.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        Format::Table => print_tables(&report)?,
    }
    let flagged = warn_flags(&report);
    if flagged > 0 && args.strict {
        eprintln!("error: {flagged} layer(s) failed an O_s cross-check (--strict)");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints a warning on stderr for every failed O_s cross-check; returns the
/// number of flagged layers.
fn warn_flags(report: &RunReport) -> usize {
    let mut flagged = 0;
    for layer in &report.layers {
        let Some(o) = &layer.overlap else { continue };
        if o.flags.is_empty() {
            continue;
        }
        flagged += 1;
        let methods = MethodValues {
            algorithmic: o.algorithmic_bytes,
            analytic: o.analytic_bytes,
            analytic_printed: o.analytic_printed_bytes,
        };
        for flag in &o.flags {
            eprintln!(
                "WARNING: layer `{}` ({}): {}",
                layer.name,
                layer.params,
                explain(*flag, o.monotone_bytes, o.exact_bytes, &methods)
            );
        }
    }
    flagged
}

fn print_tables(report: &RunReport) -> Result<()> {
    configure_table_printing();
    println!(
        "{} ({}): {} layer(s) traced, {} instructions in total",
        report.elf,
        report.arch,
        report.layers.len(),
        report.instructions
    );
    println!("{}", buffers_frame(report)?);
    println!("{}", overlap_frame(report)?);
    Ok(())
}
