//! Tracing layers of a kernel binary (`memtrace run`): buffers, access
//! counts and O_s per layer, optionally every event as Parquet and the trace
//! as a picture. A `.tflite` model runs on real TensorFlow Lite Micro (a
//! runner guest, [`crate::runtime`]) with one layer per operator.
//!
//! `guest` loads what runs (a kernel binary with its job, or a model with
//! its inputs on a runner) and traces it; `report` turns the report into
//! warnings and tables.

mod guest;
mod report;

pub use guest::is_model;
pub use report::{warnings, RunAnswer};

use std::path::PathBuf;

use memtrace_abi::selection::selects;
use memtrace_abi::Analysis;
use memtrace_abi::EngineKind;
use memtrace_abi::LayerSpec;
use memtrace_analyzer::contract::ContractCheck;
use memtrace_analyzer::event_table::EventTable;
use memtrace_analyzer::layer_stats::LayerStats;
use memtrace_analyzer::pc_counts::PcCounts;
use memtrace_analyzer::plot::trace::TracePlot;
use memtrace_analyzer::report::RunReport;
use memtrace_tracer::{AccessPath, Arch, ElfImage, Job};

use crate::runtime::kernels::Kernels;
use crate::support::attribution::KernelResolver;
use crate::support::common::{access_path, check_output};
use crate::support::error::{Context, Result};
use crate::{bail, failed};
use guest::{attach_model_specs, model_guest, trace_guest, Guest};

/// What to trace and what to write.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The kernel binary, or a `.tflite` model to run on real TFLM.
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
    /// How a `.tflite` model runs (ignored for a kernel binary).
    pub model: ModelOptions,
    /// The emulator (default: the core's own, `EngineKind::default_for`).
    pub engine: Option<EngineKind>,
}

/// How `memtrace run MODEL.tflite` runs the model on real TFLM.
#[derive(Debug, Clone)]
pub struct ModelOptions {
    /// TFLM's kernels: its reference kernels or its CMSIS-NN kernels.
    pub kernels: Kernels,
    /// Architecture of the runner guest.
    pub target: Arch,
    /// The core a kernel binary runs on when asked (default: the one its
    /// build attributes name).
    pub elf_target: Option<Arch>,
    /// The runner guest (default: harness-c/build/TARGET/tflm-runner*.elf).
    pub runner: Option<PathBuf>,
    /// The arena TFLM gets (default: the runner's whole arena region).
    pub arena_bytes: Option<u64>,
    /// Raw bytes of all graph inputs, concatenated (default: seeded data).
    pub input: Option<PathBuf>,
    /// Check the memory contract in a second, red-zoned run
    /// ([`crate::runtime::RED_ZONE_BYTES`] free around every planned
    /// buffer): a kernel that overruns its scratch writes a stray byte
    /// there instead of into the tensor TFLM placed next to it.
    pub red_zones: bool,
}

impl Default for ModelOptions {
    fn default() -> Self {
        ModelOptions {
            kernels: Kernels::Tflm,
            target: Arch::CortexM4,
            elf_target: None,
            runner: None,
            arena_bytes: None,
            input: None,
            red_zones: false,
        }
    }
}

/// The guest `opts` names, checked with what is asked of it before any
/// run: a model on its runner, or a kernel binary with its `--job`.
fn load_guest(opts: &RunOptions) -> Result<Guest> {
    let tflite = is_model(&opts.elf);
    if tflite && opts.job.is_some() {
        bail!(
            "--job is for kernel-suite ELFs; {} is a .tflite model",
            opts.elf.display()
        );
    }
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
    if tflite {
        return model_guest(opts);
    }
    let image = match ElfImage::load(&opts.elf) {
        // Neither of the two things `run` takes.
        Err(memtrace_tracer::TraceError::NoElfMagic { path, first_bytes }) => bail!(
            "{} is neither an ELF program nor a .tflite model (first bytes {first_bytes})",
            path.display()
        ),
        loaded => loaded?,
    };
    let image = match opts.model.elf_target {
        Some(target) => image.on_target(target)?,
        None => image,
    };
    Ok(Guest::Elf { image, job })
}

/// Refuses a `--layer` that selected none of the run's layers (`names`),
/// listing them.
fn check_layers_known(opts: &RunOptions, stats: &LayerStats, names: &[String]) -> Result<()> {
    let unknown: Vec<&String> = opts
        .layers
        .iter()
        .filter(|sel| {
            !stats
                .layers
                .iter()
                .any(|l| selects(sel, l.index, &l.name, &l.op))
        })
        .collect();
    if !unknown.is_empty() {
        bail!(
            "unknown --layer {}; {} has the layers: {} (a layer is also named by its index, \
             `3`, or its index and operator, `3:CONV_2D`; {} layer(s) in all)",
            unknown
                .iter()
                .map(|l| format!("`{l}`"))
                .collect::<Vec<_>>()
                .join(", "),
            opts.elf.display(),
            names.join(", "),
            names.len()
        );
    }
    Ok(())
}

/// Traces the selected layers and writes the requested files.
pub fn run(opts: &RunOptions) -> Result<RunReport> {
    let mut guest = load_guest(opts)?;
    let mut stats = LayerStats::default();
    let runtime_code = match &guest {
        Guest::Model { image, .. } => crate::runtime::runtime_code(image),
        Guest::Elf { .. } => Vec::new(),
    };
    let mut contract = ContractCheck::with_runtime_code(runtime_code.clone());
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
    let access = access_path(opts.exact_time || table.is_some() || plot.is_some());
    let layers = (!opts.layers.is_empty()).then(|| opts.layers.clone());
    let (summary, preload) = {
        let mut analyses: Vec<&mut (dyn Analysis + Send)> = vec![&mut stats, &mut contract];
        analyses.push(&mut pcs);
        if let Some(t) = table.as_mut() {
            analyses.push(t);
        }
        if let Some(p) = plot.as_mut() {
            analyses.push(p);
        }
        trace_guest(&mut guest, opts, access, layers.clone(), &mut analyses)
            .with_context(|| format!("tracing {}", opts.elf.display()))?
    };
    check_layers_known(opts, &stats, &summary.layers)?;
    if summary.exit_code != 0 {
        bail!(
            "the guest {}",
            crate::support::common::exit_text(
                summary.exit_code,
                summary.exit_reason.as_deref(),
                "a rejected job or a failed kernel check"
            )
        );
    }
    let red_zoned = matches!(guest, Guest::Model { .. }) && opts.model.red_zones;
    let contracts = if red_zoned {
        red_zoned_contracts(&guest, opts, access, layers, &summary.layers)?
    } else {
        let rerun = crate::support::violations::Rerun {
            image: guest.image(),
            job: match &guest {
                Guest::Elf { job, .. } => job.clone(),
                Guest::Model { .. } => None,
            },
            preload,
            max_instructions: opts.max_instructions,
            runtime_code,
            layers: &summary.layers,
            engine: crate::runtime::engines::engine_for(guest.image().arch, opts.engine)?,
        };
        crate::support::violations::finish(rerun, summary.access, contract.layers)?
    };
    let image = guest.image();
    for layer in &mut stats.layers {
        layer.contract = contracts.iter().find(|c| c.index == layer.index).cloned();
    }
    if let Guest::Model { file, .. } = &guest {
        attach_model_specs(file, &mut stats.layers);
    }
    KernelResolver::new(image).attribute(&mut stats.layers, &pcs);
    crate::support::violations::excuse_library_scratch(&mut stats.layers);
    if let Some(table) = table {
        table.finish()?;
    }
    if let (Some(plot), Some(path)) = (plot, &opts.plot) {
        plot.render(path)?;
    }
    Ok(RunReport {
        elf: image.path.display().to_string(),
        arch: summary.arch,
        access: summary.access,
        engine: summary.engine,
        exit_code: summary.exit_code,
        exit_reason: summary.exit_reason.clone(),
        instructions: summary.instructions,
        layers: stats.layers,
        tflm: match guest {
            Guest::Model { mut info, .. } => {
                info.red_zone_bytes = red_zoned.then_some(crate::runtime::RED_ZONE_BYTES);
                Some(info)
            }
            Guest::Elf { .. } => None,
        },
    })
}

/// The memory contract of every layer of a model, from a red-zoned run of
/// it ([`crate::runtime::red_zoned_check`]): the same operators on the same
/// inputs, every planned buffer with free bytes on both sides.
fn red_zoned_contracts(
    guest: &Guest,
    opts: &RunOptions,
    access: AccessPath,
    layers: Option<Vec<String>>,
    names: &[String],
) -> Result<Vec<memtrace_analyzer::contract::ContractReport>> {
    let Guest::Model {
        image,
        file,
        inputs,
        ..
    } = guest
    else {
        bail!("a red-zoned run is for a model");
    };
    let check = crate::runtime::red_zoned_check(
        image,
        &file.given,
        inputs,
        opts.max_instructions,
        access,
        layers,
    )
    .with_context(|| format!("checking {}", opts.elf.display()))?;
    if check.layers.as_slice() != names {
        bail!(
            "the red-zoned run of {} opened other layers than its run ({} against {})",
            opts.elf.display(),
            check.layers.len(),
            names.len()
        );
    }
    Ok(check.contracts)
}
