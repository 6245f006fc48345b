//! What `memtrace run` runs ([`is_model`]): a kernel binary with its job,
//! or a `.tflite` with its inputs on a TFLM runner; loaded, traced, and a
//! model's layers given the configurations memtrace knows for them.

use memtrace_abi::Analysis;
use memtrace_analyzer::layer_stats::attach_spec;
use memtrace_analyzer::report::{LayerReport, TflmRunInfo};
use memtrace_io::input::{read_limited, MAX_INPUT_FILE};
use memtrace_model::source::{ModelFile, ModelSource};
use memtrace_tracer::{AccessPath, ElfImage, Engine, Job, RunSummary, TraceOptions};

use super::RunOptions;
use crate::bail;
use crate::runtime::plan_file::EmbeddedOrigin;
use crate::runtime::{
    input_bytes, model_runner, open_model, seeded_inputs, ModelRun, ScratchWatch,
};
use crate::support::common::trace_with;
use crate::support::error::Result;

/// Whether `path` names a model: `zoo:NAME` (when no file has that name)
/// or a file that holds a `.tflite` (`is_tflite`).
pub fn is_model(path: &std::path::Path) -> bool {
    ModelSource::parse_existing(path).is_zoo() || is_tflite(path)
}

/// Whether `path` holds a `.tflite` model (the flatbuffer identifier
/// `TFL3` at byte 4), rather than an ELF.
pub(crate) fn is_tflite(path: &std::path::Path) -> bool {
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
pub(super) enum Guest {
    Elf {
        image: ElfImage,
        job: Option<Job>,
    },
    Model {
        image: ElfImage,
        /// The model, read once; TFLM gets its bytes as given.
        file: Box<ModelFile>,
        inputs: Vec<u8>,
        info: TflmRunInfo,
    },
}

impl Guest {
    pub(super) fn image(&self) -> &ElfImage {
        match self {
            Guest::Elf { image, .. } | Guest::Model { image, .. } => image,
        }
    }
}

/// Loads a `.tflite` or `zoo:NAME` (its weights from `--seed`, as
/// `verify`'s), its inputs (`--input` or seeded) and its runner.
pub(super) fn model_guest(opts: &RunOptions) -> Result<Guest> {
    let m = &opts.model;
    let file = open_model(&ModelSource::parse_existing(&opts.elf), opts.seed as u64)?;
    let graph = &file.graph;
    let inputs = match &m.input {
        Some(p) => {
            let data = read_limited(p, MAX_INPUT_FILE, "--input files")?;
            let want = input_bytes(graph)?;
            if data.len() as u64 != want {
                bail!(
                    "--input has {} bytes; the graph inputs of {} need {want}",
                    data.len(),
                    opts.elf.display()
                );
            }
            data
        }
        None => seeded_inputs(graph, opts.seed as u64)?,
    };
    let (_, image) = model_runner(m.target, m.kernels, m.runner.as_deref(), graph)?;
    // TFLM runs the offline plan a model carries: say whose it is, and
    // warn when memtrace made it for other kernels.
    let origin = EmbeddedOrigin::of(&file);
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
        file: Box::new(file),
        inputs,
        info,
    })
}

/// Gives every operator layer of a model run the layer configuration
/// memtrace knows for its operator, so that its traced O_s is cross-checked
/// against the algorithmic and analytic methods (operators memtrace does not
/// model keep the traced values alone).
pub(super) fn attach_model_specs(file: &ModelFile, layers: &mut [LayerReport]) {
    let Ok(model) = file.imported() else {
        return;
    };
    for layer in layers {
        let spec =
            memtrace_abi::runner::op_index(&layer.params).and_then(|op| model.layer_spec(op));
        if let Some(spec) = spec {
            attach_spec(layer, spec);
        }
    }
}

/// Bytes written into guest memory before a run, by address.
type Preload = Vec<(u64, Vec<u8>)>;

/// Runs the guest with `analyses`; returns the run and the bytes it
/// preloaded (a contract re-trace must run the same guest).
pub(super) fn trace_guest(
    guest: &mut Guest,
    opts: &RunOptions,
    access: AccessPath,
    layers: Option<Vec<String>>,
    analyses: &mut [&mut (dyn Analysis + Send)],
) -> Result<(RunSummary, Preload)> {
    match guest {
        Guest::Elf { image, job } => {
            let engine = crate::runtime::engines::engine_for(image.arch, opts.engine)?;
            let options = TraceOptions {
                job: job.clone(),
                layers,
                max_instructions: opts.max_instructions,
                access,
                // The stray-write watch protects pages: Unicorn's.
                stray_writes: engine == Engine::Unicorn,
                engine,
                ..TraceOptions::default()
            };
            Ok((trace_with(image, options, analyses)?, Vec::new()))
        }
        Guest::Model {
            image,
            file,
            inputs,
            info,
        } => {
            let run = ModelRun {
                image,
                model: &file.given,
                inputs,
                arena_bytes: opts.model.arena_bytes,
                layers: true,
                weights: true,
                scratch: ScratchWatch::Traced,
                max_instructions: opts.max_instructions,
                split: true,
                storage: false,
                red_zones: false,
                digests: false,
                dump_op: None,
            };
            let outcome = run.trace(access, layers, true, analyses)?;
            let r = &outcome.result;
            info.arena_bytes = outcome.arena_bytes;
            info.arena_used_bytes = r.arena_used_bytes;
            info.head_bytes = r.head_bytes;
            info.tail_bytes = r.tail_bytes;
            info.output_bytes = r.output_bytes.len() as u64;
            info.output_digest = memtrace_analyzer::verify::digest(&r.output_bytes);
            info.scratch_sizing = scratch_sizing(file, r, opts.model.kernels, opts.model.target);
            Ok((outcome.summary, run.preload()?))
        }
    }
}

/// Every operator's scratch of the run `result` of `file`, sized from its
/// shapes; `None` when memtrace cannot model the file.
fn scratch_sizing(
    file: &ModelFile,
    result: &memtrace_abi::runner::TflmResult,
    kernels: memtrace_abi::Kernels,
    target: memtrace_tracer::Arch,
) -> Option<memtrace_model::scratch_sizing::ScratchSizing> {
    let requested = crate::runtime::scratch_requested(result);
    let model = file.imported().ok()?;
    Some(crate::runtime::size_scratch_of(
        &file.graph,
        &model,
        kernels,
        target,
        &requested,
    ))
}
