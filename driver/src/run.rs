//! Tracing layers of a kernel binary (`memtrace run`): buffers, access
//! counts and O_s per layer, optionally every event as Parquet and the trace
//! as a picture. A `.tflite` model runs on real TensorFlow Lite Micro (a
//! runner guest, [`crate::tflm`]) with one layer per operator.

use std::path::PathBuf;

use memtrace_abi::selection::selects;
use memtrace_abi::Analysis;
use memtrace_abi::LayerSpec;
use memtrace_analyzer::contract::ContractCheck;
use memtrace_analyzer::event_table::EventTable;
use memtrace_analyzer::kernel::Library;
use memtrace_analyzer::layer_stats::{attach_spec, LayerStats};
use memtrace_analyzer::pc_counts::PcCounts;
use memtrace_analyzer::plot::trace::TracePlot;
use memtrace_analyzer::report::{
    buffers_frame, contract_frame, overlap_frame, LayerReport, OverlapReport, RunReport,
    TflmRunInfo,
};
use memtrace_io::input::{read_limited, MAX_INPUT_FILE, MAX_TFLITE_FILE};
use memtrace_model::graph::read_graph;
use memtrace_overlap::check::{explain, explain_other_kernel, MethodValues};
use memtrace_tracer::{AccessPath, Arch, ElfImage, Job, RunSummary, TraceOptions};

use crate::attribution::{kernel_of, kernel_text, other_than_reference, KernelResolver};
use crate::common::{access_path, check_output, configure_table_printing, trace_with};
use crate::error::{Context, Result};
use crate::kernels::Kernels;
use crate::plan_file::EmbeddedOrigin;
use crate::tflm::{input_bytes, load_runner, runner_path, seeded_inputs, ModelRun, ScratchWatch};
use crate::{bail, failed};

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
}

/// How `memtrace run MODEL.tflite` runs the model on real TFLM.
#[derive(Debug, Clone)]
pub struct ModelOptions {
    /// TFLM's kernels: its reference kernels or its CMSIS-NN kernels.
    pub kernels: Kernels,
    /// Architecture of the runner guest.
    pub target: Arch,
    /// The runner guest (default: harness-c/build/TARGET/tflm-runner*.elf).
    pub runner: Option<PathBuf>,
    /// The arena TFLM gets (default: the runner's whole arena region).
    pub arena_bytes: Option<u64>,
    /// Raw bytes of all graph inputs, concatenated (default: seeded data).
    pub input: Option<PathBuf>,
}

impl Default for ModelOptions {
    fn default() -> Self {
        ModelOptions {
            kernels: Kernels::Tflm,
            target: Arch::CortexM4,
            runner: None,
            arena_bytes: None,
            input: None,
        }
    }
}

/// Whether `path` names a model: `zoo:NAME` (when no file has that name)
/// or a file that holds a `.tflite` ([`is_tflite`]).
pub fn is_model(path: &std::path::Path) -> bool {
    zoo_model(path).is_some() || is_tflite(path)
}

/// `zoo:NAME` when `path` is one (and no file has that name).
fn zoo_model(path: &std::path::Path) -> Option<&str> {
    path.to_str()
        .filter(|p| p.starts_with("zoo:") && !path.exists())
}

/// Whether `path` holds a `.tflite` model (the flatbuffer identifier
/// `TFL3` at byte 4), rather than an ELF.
pub fn is_tflite(path: &std::path::Path) -> bool {
    use std::io::Read;
    // Opening a FIFO would block: only regular files are looked into (the
    // ELF loader refuses the rest with a clear error).
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return false;
    }
    let mut head = [0u8; 8];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .map(|()| &head[4..8] == b"TFL3")
        .unwrap_or(false)
}

/// The guest of a run: a kernel binary with its job, or a model on a runner.
enum Guest {
    Elf {
        image: ElfImage,
        job: Option<Job>,
    },
    Model {
        image: ElfImage,
        model: Vec<u8>,
        inputs: Vec<u8>,
        info: TflmRunInfo,
    },
}

impl Guest {
    fn image(&self) -> &ElfImage {
        match self {
            Guest::Elf { image, .. } | Guest::Model { image, .. } => image,
        }
    }
}

/// Loads a `.tflite` or `zoo:NAME` (its weights from `--seed`, as
/// `verify`'s), its inputs (`--input` or seeded) and its runner.
fn model_guest(opts: &RunOptions) -> Result<Guest> {
    let m = &opts.model;
    let model = match zoo_model(&opts.elf) {
        Some(zoo) => crate::tflm::model_bytes(zoo, opts.seed as u64)?,
        None => read_limited(&opts.elf, MAX_TFLITE_FILE, ".tflite models")?,
    };
    let graph = read_graph(&model).with_context(|| format!("reading {}", opts.elf.display()))?;
    let inputs = match &m.input {
        Some(p) => {
            let data = read_limited(p, MAX_INPUT_FILE, "--input files")?;
            let want = input_bytes(&graph)?;
            if data.len() as u64 != want {
                bail!(
                    "--input has {} bytes; the graph inputs of {} need {want}",
                    data.len(),
                    opts.elf.display()
                );
            }
            data
        }
        None => seeded_inputs(&graph, opts.seed as u64)?,
    };
    let path = runner_path(m.target, m.kernels, m.runner.as_deref(), "--runner")?;
    let image = load_runner(&path, m.kernels)?;
    if image.arch != m.target {
        bail!(
            "{} is a {} runner but --target is {}",
            path.display(),
            image.arch.name(),
            m.target.name()
        );
    }
    // TFLM runs the offline plan a model carries: say whose it is, and
    // warn when memtrace made it for other kernels.
    let origin = memtrace_model::tflite::read_offline(&model)
        .with_context(|| format!("reading {}", opts.elf.display()))?
        .map(|_| EmbeddedOrigin::of(&model));
    let info = TflmRunInfo {
        model: opts.elf.display().to_string(),
        kernels: m.kernels,
        operators: graph.ops.len(),
        embedded_plan: origin.as_ref().map(|o| o.describe()),
        embedded_plan_warning: origin.as_ref().and_then(|o| {
            o.foreign_kernels_warning(m.kernels, &EmbeddedOrigin::run_advice(m.kernels))
        }),
        ..TflmRunInfo::default()
    };
    Ok(Guest::Model {
        image,
        model,
        inputs,
        info,
    })
}

/// Traces the selected layers and writes the requested files.
pub fn run(opts: &RunOptions) -> Result<RunReport> {
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
    let mut guest = if tflite {
        model_guest(opts)?
    } else {
        Guest::Elf {
            image: ElfImage::load(&opts.elf)?,
            job,
        }
    };
    let mut stats = LayerStats::default();
    let runtime_code = match &guest {
        Guest::Model { image, .. } => crate::tflm::runtime_code(image),
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
        trace_guest(&mut guest, opts, access, layers, &mut analyses)
            .with_context(|| format!("tracing {}", opts.elf.display()))?
    };
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
            summary.layers.join(", "),
            summary.layers.len()
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
    let image = guest.image();
    let rerun = crate::contract::Rerun {
        image,
        job: match &guest {
            Guest::Elf { job, .. } => job.clone(),
            Guest::Model { .. } => None,
        },
        preload,
        max_instructions: opts.max_instructions,
        runtime_code,
        layers: &summary.layers,
    };
    let contracts = crate::contract::finish(rerun, summary.access, contract.layers)?;
    for layer in &mut stats.layers {
        layer.contract = contracts.iter().find(|c| c.index == layer.index).cloned();
    }
    if let Guest::Model { model, .. } = &guest {
        attach_model_specs(&opts.elf, model, &mut stats.layers);
    }
    KernelResolver::new(image).attribute(&mut stats.layers, &pcs);
    crate::contract::excuse_library_scratch(&mut stats.layers);
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
        exit_code: summary.exit_code,
        instructions: summary.instructions,
        layers: stats.layers,
        tflm: match guest {
            Guest::Model { info, .. } => Some(info),
            Guest::Elf { .. } => None,
        },
    })
}

/// Gives every operator layer of a model run the layer configuration
/// memtrace knows for its operator, so that its traced O_s is cross-checked
/// against the algorithmic and analytic methods (operators memtrace does not
/// model keep the traced values alone).
fn attach_model_specs(path: &std::path::Path, model: &[u8], layers: &mut [LayerReport]) {
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let Ok(model) = memtrace_model::tflite::import_for_tflm(&name, model) else {
        return;
    };
    for layer in layers {
        let spec = memtrace_abi::tflm::op_index(&layer.params).and_then(|op| model.layer_spec(op));
        if let Some(spec) = spec {
            attach_spec(layer, spec);
        }
    }
}

/// Bytes written into guest memory before a run, by address.
type Preload = Vec<(u64, Vec<u8>)>;

/// Runs the guest with `analyses`; returns the run and the bytes it
/// preloaded (a contract re-trace must run the same guest).
fn trace_guest(
    guest: &mut Guest,
    opts: &RunOptions,
    access: AccessPath,
    layers: Option<Vec<String>>,
    analyses: &mut [&mut (dyn Analysis + Send)],
) -> Result<(RunSummary, Preload)> {
    match guest {
        Guest::Elf { image, job } => {
            let options = TraceOptions {
                job: job.clone(),
                layers,
                max_instructions: opts.max_instructions,
                access,
                stray_writes: true,
                ..TraceOptions::default()
            };
            Ok((trace_with(image, options, analyses)?, Vec::new()))
        }
        Guest::Model {
            image,
            model,
            inputs,
            info,
        } => {
            let run = ModelRun {
                image,
                model,
                inputs,
                arena_bytes: opts.model.arena_bytes,
                layers: true,
                weights: true,
                scratch: ScratchWatch::Traced,
                max_instructions: opts.max_instructions,
                split: true,
                storage: false,
            };
            let outcome = run.trace(access, layers, true, analyses)?;
            let r = &outcome.result;
            info.arena_bytes = outcome.arena_bytes;
            info.arena_used_bytes = r.arena_used_bytes;
            info.head_bytes = r.head_bytes;
            info.tail_bytes = r.tail_bytes;
            info.output_bytes = r.output_bytes.len() as u64;
            info.output_digest = memtrace_analyzer::verify::digest(&r.output_bytes);
            Ok((outcome.summary, run.preload()?))
        }
    }
}

/// One warning per failed O_s cross-check of each layer, then one per
/// broken rule of the memory contract.
///
/// A layer that ran CMSIS-NN is expected to fail the cross-checks (the
/// algorithmic and analytic methods model the reference loop nests, and
/// docs/kernels.md says where the libraries differ): unless asked
/// for each (`explain_each`), those become one summary line that points to the
/// documentation, so that the warnings left are the ones to act on.
pub fn warnings(report: &RunReport, explain_each: bool) -> Vec<String> {
    // A plan made for other kernels is the loudest: it may corrupt data.
    let mut lines: Vec<String> = report
        .tflm
        .iter()
        .filter_map(|t| t.embedded_plan_warning.as_ref())
        .map(|w| format!("WARNING: {w}"))
        .collect();
    let mut expected = ExpectedDifferences::default();
    for layer in &report.layers {
        for (k, o) in layer.overlaps().enumerate() {
            let (library, kernel) = kernel_of(layer);
            let other = other_than_reference(library, kernel);
            // Only a known library's differences are documented as expected;
            // a kernel of the user's own that differs is what to look at.
            let documented = library == Some(Library::CmsisNn.name());
            if documented && !explain_each {
                expected.add(o, &kernel_text(library, kernel));
                continue;
            }
            let methods = MethodValues {
                algorithmic: o.algorithmic_bytes,
                analytic: o.analytic_bytes,
                analytic_printed: o.analytic_printed_bytes,
            };
            // A second input's warnings name it.
            let which = if k > 0 {
                format!(" input `{}`", o.input)
            } else {
                String::new()
            };
            for flag in &o.flags {
                let text = if other {
                    let kernel = kernel_text(library, kernel);
                    let text = explain_other_kernel(
                        *flag,
                        o.monotone_bytes,
                        o.exact_bytes,
                        &methods,
                        &kernel,
                    );
                    // The fast path's one inexactness is in exactly such
                    // kernels (docs/kernels.md, "Known issues").
                    if report.access == AccessPath::Mmio {
                        format!(
                            "{text}; traced on the fast access path, which sees an unaligned \
                             multi-byte load as the aligned words around it: `--exact-time` \
                             gives the exact value"
                        )
                    } else {
                        text
                    }
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
    lines.extend(expected.summary());
    lines.extend(crate::contract::warnings(report));
    lines
}

/// The failed O_s cross-checks of layers that ran CMSIS-NN, counted for one
/// summary line.
#[derive(Default)]
struct ExpectedDifferences {
    checks: usize,
    layers: usize,
    kernels: Vec<String>,
}

impl ExpectedDifferences {
    fn add(&mut self, o: &OverlapReport, kernel: &str) {
        if o.flags.is_empty() {
            return;
        }
        self.checks += o.flags.len();
        self.layers += 1;
        if !self.kernels.iter().any(|k| k == kernel) {
            self.kernels.push(kernel.to_owned());
        }
    }

    fn summary(&self) -> Option<String> {
        if self.checks == 0 {
            return None;
        }
        const SHOWN: usize = 3;
        let mut kernels = self.kernels[..self.kernels.len().min(SHOWN)].join(", ");
        if self.kernels.len() > SHOWN {
            kernels += &format!(" and {} more", self.kernels.len() - SHOWN);
        }
        Some(format!(
            "note: {} O_s cross-check(s) of {} layer input(s) differ from the reference-kernel \
             models because those layers ran {kernels}: expected, and the traced O_s is the one \
             plans use (docs/kernels.md, \"Reference vs CMSIS-NN O_s\"); `--explain` lists each",
            self.checks, self.layers
        ))
    }
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
    let what = match &report.tflm {
        Some(t) => format!(
            "{} on TFLM ({} kernels, {}; arena used {} B: head {} B, tail {} B)",
            t.model, t.kernels, report.elf, t.arena_used_bytes, t.head_bytes, t.tail_bytes
        ),
        None => report.elf.clone(),
    };
    // Whose offline plan TFLM ran, on a line of its own.
    let embedded = report
        .tflm
        .as_ref()
        .and_then(|t| t.embedded_plan.as_ref())
        .map(|o| format!("model: carries an embedded offline plan, {o}\n"))
        .unwrap_or_default();
    Ok(format!(
        "{} ({}): {} layer(s) traced, {} instructions in total\n{embedded}{}\n{}\nmemory \
         contract:\n{}\n",
        what,
        report.arch,
        report.layers.len(),
        report.instructions,
        buffers_frame(report)?,
        overlap_frame(report)?,
        contract_frame(report)?
    ))
}
