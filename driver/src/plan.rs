//! `memtrace plan`: every arena planner on one model, side by side (the DMO
//! paper's Table III), each plan checked by the independent validator.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, ValueEnum};
use memtrace_analyzer::model::{self, tflite, Model};
use memtrace_analyzer::planner::overlap::{OverlapMethod, TracedOverlaps};
use memtrace_analyzer::planner::plot::plot_comparison;
use memtrace_analyzer::planner::report::{compare, compare_all, Comparison};
use memtrace_analyzer::planner::{OverlapSource, Overlaps, PlanOptions, PlannerKind};
use memtrace_tracer::{ElfImage, LayerSpec};

use super::common::check_writable;
use super::sweep::trace_specs;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Format {
    Table,
    Json,
}

#[derive(Args, Debug)]
pub struct PlanArgs {
    /// A `.tflite` file or a built-in model, e.g. `zoo:mobilenet_v1_0.25_128_int8`.
    pub model: String,
    /// `all`, or one of linear, tflm-greedy, dmo-heap, replacement, reorder, exact.
    #[arg(long, default_value = "all")]
    pub planner: String,
    /// Where O_s comes from: analytic, algorithmic, traced (runs every layer
    /// through --suite) or none.
    #[arg(long, default_value = "analytic")]
    pub overlap: String,
    /// Kernel suite traced for `--overlap traced`.
    #[arg(long, default_value = "harness-c/build/cortex-m4/suite.elf")]
    pub suite: PathBuf,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Draw the arena allocation of every plan (.svg or .png).
    #[arg(long, value_name = "OUT.svg")]
    pub plot: Option<PathBuf>,
    /// Write the best plan (or --planner's) into a copy of the model as TFLM
    /// `OfflineMemoryAllocation` metadata.
    #[arg(long, value_name = "OUT.tflite")]
    pub emit_offline: Option<PathBuf>,
    /// Offsets and sizes are multiples of this (TFLM uses 16).
    #[arg(long, default_value_t = 16)]
    pub alignment: u64,
}

pub fn run(args: PlanArgs) -> Result<ExitCode> {
    for path in args.plot.iter().chain(&args.emit_offline) {
        check_writable(path)?;
    }
    if args.emit_offline.is_some() && args.model.starts_with("zoo:") {
        bail!("--emit-offline needs a .tflite model to copy; a zoo model has none");
    }
    let model = model::load(&args.model).with_context(|| format!("loading {}", args.model))?;
    let overlaps = overlaps(&model, &args)?;
    let opts = PlanOptions {
        alignment: args.alignment.max(1),
        ..PlanOptions::default()
    };
    let comparison = if args.planner == "all" {
        compare_all(&model, &overlaps, &opts)?
    } else {
        let kind = PlannerKind::parse(&args.planner).ok_or_else(|| {
            anyhow!(
                "unknown --planner `{}` (known: all, linear, tflm-greedy, dmo-heap, replacement, reorder, exact)",
                args.planner
            )
        })?;
        compare(&model, &overlaps, &[(kind, kind.uses_overlap())], &opts)?
    };
    if let Some(path) = &args.plot {
        plot_comparison(&model, &comparison, path)?;
    }
    if let Some(dest) = &args.emit_offline {
        emit(&args.model, &model, &comparison, dest)?;
    }
    match args.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&comparison)?),
        Format::Table => print!("{}", comparison.to_table()),
    }
    Ok(ExitCode::SUCCESS)
}

/// O_s of every operator from the chosen method.
fn overlaps(model: &Model, args: &PlanArgs) -> Result<Overlaps> {
    if args.overlap == "traced" {
        return Ok(Overlaps::compute(model, &traced(model, args)?));
    }
    let method = OverlapMethod::parse(&args.overlap).ok_or_else(|| {
        anyhow!(
            "unknown --overlap `{}` (known: analytic, algorithmic, traced, none)",
            args.overlap
        )
    })?;
    Ok(Overlaps::compute(model, &method as &dyn OverlapSource))
}

/// Traces each distinct layer configuration of the model through the
/// compiled kernel suite and keeps its monotone O_s.
fn traced(model: &Model, args: &PlanArgs) -> Result<TracedOverlaps> {
    let image = ElfImage::load(&args.suite)?;
    let mut specs: Vec<LayerSpec> = Vec::new();
    for op in 0..model.ops.len() {
        if let Some(spec) = model.layer_spec(op) {
            if !specs.contains(&spec) {
                specs.push(spec);
            }
        }
    }
    let names: Vec<String> = (0..specs.len()).map(|i| format!("layer {i}")).collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let rows = trace_specs(&image, &specs, &names, 1, threads, 20_000_000_000);
    let mut by_spec = HashMap::new();
    for (spec, row) in specs.iter().zip(rows) {
        let Some(bytes) = row.monotone_bytes else {
            bail!(
                "tracing {spec} through {} failed: {}",
                args.suite.display(),
                row.error.unwrap_or_else(|| "no O_s".into())
            );
        };
        by_spec.insert(spec.to_string(), bytes);
    }
    Ok(TracedOverlaps {
        by_op: HashMap::new(),
        by_spec,
    })
}

fn emit(
    source: &str,
    model: &Model,
    comparison: &Comparison,
    dest: &std::path::Path,
) -> Result<()> {
    let plan = comparison
        .best_plan()
        .ok_or_else(|| anyhow!("no plan to emit"))?;
    let report = tflite::write_offline(
        std::path::Path::new(source),
        &plan.offline_offsets(model),
        dest,
    )?;
    eprintln!(
        "wrote {} ({} planner, {} B arena) with OfflineMemoryAllocation in buffer {}",
        dest.display(),
        plan.planner,
        plan.peak_bytes.unwrap_or(0),
        report.buffer_index
    );
    Ok(())
}
