//! Real TensorFlow Lite Micro in the emulator: one run of a `.tflite` on a
//! TFLM runner guest (`harness-c/tflm/`, `memtrace_tflm.h`).
//!
//! The model is data: its bytes go to `memtrace_model`, the input bytes to
//! `memtrace_io` and the mailbox to `memtrace_tflm_job`; TFLM's own
//! `MicroInterpreter` lays out the arena (or honours the model's
//! `OfflineMemoryAllocation`) and runs it, one memtrace layer per operator.
//! What it wrote back (outputs, arena use, where every tensor lives) is read
//! once the guest has exited.

use std::path::{Path, PathBuf};

use memtrace_abi::tflm::{self, op_index, symbols, TflmJob, TflmResult};
use memtrace_abi::{Analysis, Role};
use memtrace_analyzer::layer_stats::LayerStats;
use memtrace_analyzer::report::LayerReport;
use memtrace_model::export::{materialize, to_tflite};
use memtrace_model::graph::TfliteGraph;
use memtrace_model::planner::TracedOverlaps;
use memtrace_model::synth::synth_values;
use memtrace_model::{self as model, tflite, Model};
use memtrace_overlap::rng::Rng;
use memtrace_tracer::{AccessPath, Arch, ClockMode, ElfImage, RunSummary, TraceOptions};

use crate::common::trace_with;
use crate::error::{Context, Result};
use crate::kernels::{check_built_with, harness_guest, Kernels};
use crate::trace_cache::TraceCache;
use crate::{bail, failed};

/// The runner guest of `kernels` for `arch`, or the one the user named
/// (with `option`, which a missing harness build's error suggests).
pub fn runner_path(
    arch: Arch,
    kernels: Kernels,
    explicit: Option<&Path>,
    option: &str,
) -> Result<PathBuf> {
    match explicit {
        Some(p) => Ok(p.to_path_buf()),
        None => harness_guest(arch, kernels.runner_file(), option),
    }
}

/// The runner of `kernels` for `target` (or the one named with `option`),
/// loaded and checked: a runner built with `kernels`, for `target`.
pub fn target_runner(
    target: Arch,
    kernels: Kernels,
    explicit: Option<&Path>,
    option: &str,
) -> Result<(PathBuf, ElfImage)> {
    let path = runner_path(target, kernels, explicit, option)?;
    let image = load_runner(&path, kernels)?;
    if image.arch != target {
        bail!(
            "{} is a {} runner but --target is {}",
            path.display(),
            image.arch.name(),
            target.name()
        );
    }
    Ok((path, image))
}

/// The graph inputs of a run: the bytes of `input` (every graph input,
/// concatenated in order; its size must be theirs), or seeded data.
pub fn run_inputs(input: Option<&Path>, seed: u64, graph: &TfliteGraph) -> Result<Vec<u8>> {
    let Some(p) = input else {
        return seeded_inputs(graph, seed);
    };
    let data =
        memtrace_io::input::read_limited(p, memtrace_io::input::MAX_INPUT_FILE, "--input files")?;
    let want = input_bytes(graph)?;
    if data.len() as u64 != want {
        bail!(
            "--input {} has {} bytes; the graph inputs need {want}",
            p.display(),
            data.len()
        );
    }
    Ok(data)
}

/// Loads a runner guest and checks that it is one, built with `kernels`
/// (a report would otherwise name a library whose code never ran).
pub fn load_runner(path: &Path, kernels: Kernels) -> Result<ElfImage> {
    let image = ElfImage::load(path)?;
    if image.symbol(symbols::JOB).is_none() {
        bail!(
            "{} is no TFLM runner (it has no `{}`): pass a harness-c/build/*/tflm-runner*.elf",
            path.display(),
            symbols::JOB
        );
    }
    check_built_with(&image, kernels, "runner", kernels.runner_file())?;
    Ok(image)
}

/// TFLM's runtime classes (mangled name components) whose code runs inside
/// an operator's window around the kernel: the interpreter loop and the
/// allocator resetting its temporary allocations after each operator.
const RUNTIME_CLASSES: [&str; 5] = [
    "26SingleArenaBufferAllocator",
    "14MicroAllocator",
    "21MicroInterpreterGraph",
    "23MicroInterpreterContext",
    "16MicroInterpreter",
];

/// Code ranges of TFLM's runtime in a runner: their writes inside a window
/// are the runtime's bookkeeping, not the kernel's
/// ([`memtrace_analyzer::contract::ContractCheck::with_runtime_code`]).
pub fn runtime_code(image: &ElfImage) -> Vec<(u64, u64)> {
    image
        .functions()
        .filter(|(_, _, name)| {
            name.starts_with("_ZN6tflite") && RUNTIME_CLASSES.iter().any(|c| name.contains(c))
        })
        .map(|(at, size, _)| (at, at + size.max(1)))
        .collect()
}

/// One run of a model on a runner.
pub struct ModelRun<'a> {
    /// The runner guest.
    pub image: &'a ElfImage,
    /// The `.tflite` bytes.
    pub model: &'a [u8],
    /// The graph inputs' bytes, concatenated in order (empty: all zero).
    pub inputs: &'a [u8],
    /// The arena TFLM gets; `None`: the runner's whole arena region.
    pub arena_bytes: Option<u64>,
    /// One layer per operator (otherwise only the `load_input` windows).
    pub layers: bool,
    /// Declare constant tensors as buffers of their operators.
    pub weights: bool,
    /// What the run records of the operators' scratch buffers (declared
    /// either way).
    pub scratch: ScratchWatch,
    /// Instruction budget.
    pub max_instructions: u64,
    /// Two runs at once, one counting instructions beside one recording
    /// ([`ClockMode::Parallel`], the default), or one timed run: the pair
    /// costs twice the CPU, which pays only while a core is free.
    pub split: bool,
    /// Read the runner's storage region back after the run (a model with
    /// TinySeg's storage operators, `harness-c/tflm/storage_ops.cc`).
    pub storage: bool,
}

/// What a run records of the operators' scratch buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScratchWatch {
    /// Every access, as for any buffer (event tables, pictures).
    Traced,
    /// One store over the whole buffer at its declaration: where scratch
    /// may write, which is all a shadow map needs of it (the plan under
    /// test could put scratch over a live tensor). Stricter than the
    /// accesses: a plan is caught even where this run's kernel leaves part
    /// of its scratch unwritten.
    WrittenWhole,
    /// Nothing: O_s needs only inputs and outputs.
    Untraced,
}

/// A guest region: start address and length.
#[derive(Clone, Copy, Debug)]
struct Region {
    at: u64,
    len: u64,
}

/// The region between two symbols of the runner.
fn region(image: &ElfImage, start: &str, end: &str) -> Result<Region> {
    match (image.symbol(start), image.symbol(end)) {
        (Some(s), Some(e)) if e.address > s.address => Ok(Region {
            at: s.address,
            len: e.address - s.address,
        }),
        _ => Err(failed!(
            "{} lacks the region `{start}`..`{end}`: rebuild it with harness-c",
            image.path.display()
        )),
    }
}

/// The runner's storage region of TinySeg's spilled tensors
/// (`memtrace_storage`..`memtrace_storage_end`): its guest address and
/// bytes.
pub fn runner_storage(image: &ElfImage) -> Result<(u64, u64)> {
    let r = region(
        image,
        memtrace_abi::symbols::STORAGE,
        memtrace_abi::symbols::STORAGE_END,
    )?;
    Ok((r.at, r.len))
}

/// Bytes of the runner's arena region (`memtrace_arena`..`memtrace_arena_end`):
/// the most TFLM can be given, so the bound for every size taken from a
/// model or a plan before anything is allocated for it.
pub fn runner_arena_bytes(image: &ElfImage) -> Result<u64> {
    Ok(region(image, symbols::ARENA, symbols::ARENA_END)?.len)
}

/// What one run produced.
pub struct ModelOutcome {
    /// The runner's answer.
    pub result: TflmResult,
    /// The traced run.
    pub summary: RunSummary,
    /// Guest address of `memtrace_arena`.
    pub arena_at: u64,
    /// The arena bytes TFLM was given.
    pub arena_bytes: u64,
    /// The storage region after the run (empty unless [`ModelRun::storage`]).
    pub storage: Vec<u8>,
}

/// Where the runner's mailbox and regions are, and what the host writes.
struct Layout {
    job_at: u64,
    io: Region,
    arena: Region,
    arena_bytes: u64,
    preload: Vec<(u64, Vec<u8>)>,
}

impl<'a> ModelRun<'a> {
    /// A run of the whole model, one layer per operator, in the arena the
    /// runner has, weights left undeclared, scratch traced (what O_s and
    /// clobbers need).
    pub fn whole(
        image: &'a ElfImage,
        model: &'a [u8],
        inputs: &'a [u8],
        max_instructions: u64,
    ) -> ModelRun<'a> {
        ModelRun {
            image,
            model,
            inputs,
            arena_bytes: None,
            layers: true,
            weights: false,
            scratch: ScratchWatch::Traced,
            max_instructions,
            split: true,
            storage: false,
        }
    }

    /// This run without the scratch buffers' events: what O_s needs.
    pub fn without_scratch(self) -> ModelRun<'a> {
        ModelRun {
            scratch: ScratchWatch::Untraced,
            ..self
        }
    }

    fn layout(&self) -> Result<Layout> {
        let image = self.image;
        let job = image
            .symbol(symbols::JOB)
            .ok_or_else(|| failed!("{} is no TFLM runner", image.path.display()))?;
        let model = region(image, symbols::MODEL, symbols::MODEL_END)?;
        let io = region(image, symbols::IO, symbols::IO_END)?;
        let arena = region(image, symbols::ARENA, symbols::ARENA_END)?;
        let fits = |what: &str, bytes: u64, r: Region| -> Result<u32> {
            if bytes > r.len || bytes > u32::MAX as u64 {
                bail!(
                    "{what} of {bytes} bytes does not fit the runner's region of {} bytes ({})",
                    r.len,
                    image.path.display()
                );
            }
            Ok(bytes as u32)
        };
        let model_bytes = fits("the model", self.model.len() as u64, model)?;
        let input_bytes = fits("the input data", self.inputs.len() as u64, io)?;
        let arena_bytes = fits("an arena", self.arena_bytes.unwrap_or(arena.len), arena)?;
        let words = TflmJob {
            model_bytes,
            arena_bytes,
            input_bytes,
            layers: self.layers,
            weights: self.weights,
        }
        .bytes();
        let mut preload = vec![(job.address, words), (model.at, self.model.to_vec())];
        if !self.inputs.is_empty() {
            preload.push((io.at, self.inputs.to_vec()));
        }
        Ok(Layout {
            job_at: job.address,
            io,
            arena,
            arena_bytes: arena_bytes as u64,
            preload,
        })
    }

    /// What the host writes into guest memory before the run.
    pub fn preload(&self) -> Result<Vec<(u64, Vec<u8>)>> {
        Ok(self.layout()?.preload)
    }

    /// Runs the model with `analyses` watching, on `access`, recording the
    /// `layers` named (all when `None`).
    pub fn trace(
        &self,
        access: AccessPath,
        layers: Option<Vec<String>>,
        stray_writes: bool,
        analyses: &mut [&mut (dyn Analysis + Send)],
    ) -> Result<ModelOutcome> {
        let image = self.image;
        let layout = self.layout()?;
        let mailbox_len = tflm::MEMTRACE_TFLM_WORDS as u64 * 4;
        let summary = trace_with(
            image,
            TraceOptions {
                layers,
                max_instructions: self.max_instructions,
                access,
                preload: layout.preload,
                readback: {
                    let mut r = vec![(layout.job_at, mailbox_len), (layout.io.at, layout.io.len)];
                    if self.storage {
                        r.push(runner_storage(image)?);
                    }
                    r
                },
                stray_writes,
                // A whole model is one run: the second core counts its
                // instructions (the tracer counts in this run instead when
                // an analysis reads event times).
                clock: if self.split {
                    ClockMode::Parallel
                } else {
                    ClockMode::Auto
                },
                untraced_roles: match self.scratch {
                    ScratchWatch::Untraced => vec![Role::Scratch],
                    _ => Vec::new(),
                },
                written_whole_roles: match self.scratch {
                    ScratchWatch::WrittenWhole => vec![Role::Scratch],
                    _ => Vec::new(),
                },
                ..TraceOptions::default()
            },
            analyses,
        )?;
        if summary.exit_code != 0 {
            let reason = summary
                .exit_reason
                .as_deref()
                .map(|r| with_abort_site(image, r));
            bail!(
                "TFLM {}",
                crate::common::exit_text(
                    summary.exit_code,
                    reason.as_deref(),
                    "2: bad job, 3: bad model, 4: AllocateTensors failed, 5: Invoke failed, \
                     6: inputs or outputs do not fit; docs/protocol.md, \"The TFLM runner\""
                )
            );
        }
        let result = TflmResult::decode(&summary.memory[0], &summary.memory[1])
            .map_err(|e| failed!("{}: {e}", image.path.display()))?;
        if result.stage != tflm::TFLM_STAGE_INVOKED {
            bail!(
                "the TFLM runner exited without finishing (stage {})",
                result.stage
            );
        }
        let storage = match self.storage {
            true => summary.memory.get(2).cloned().unwrap_or_default(),
            false => Vec::new(),
        };
        Ok(ModelOutcome {
            result,
            summary,
            arena_at: layout.arena.at,
            arena_bytes: layout.arena_bytes,
            storage,
        })
    }
}

/// What the runner says of an abort ("abort() called from 0xADDR", its
/// `memtrace_rt_abort_hook`) with the address turned into the call's
/// function and source line: which of TFLM's checks failed.
fn with_abort_site(image: &ElfImage, reason: &str) -> String {
    const FROM: &str = "abort() called from 0x";
    let Some(at) = reason.find(FROM) else {
        return reason.to_string();
    };
    let digits = &reason[at + FROM.len()..];
    let end = digits
        .find(|c: char| !c.is_ascii_hexdigit())
        .unwrap_or(digits.len());
    let Ok(address) = u64::from_str_radix(&digits[..end], 16) else {
        return reason.to_string();
    };
    // A return address: the call is the instruction before it (on the
    // Cortex-M4 without the Thumb bit).
    let call = (address & !1).saturating_sub(1);
    let site = memtrace_tracer::debuginfo::DebugInfo::load(image).locate(image, call);
    let function = site.function.as_deref().unwrap_or("?");
    let line = match (&site.file, site.line) {
        (Some(file), Some(line)) => format!(" ({file}:{line})"),
        _ => String::new(),
    };
    format!(
        "{}abort() called from `{function}`{line}{}",
        &reason[..at],
        &digits[end..]
    )
}

/// Seeded bytes for every graph input, concatenated in order
/// ([`synth_values`], seeded per input).
pub fn seeded_inputs(graph: &TfliteGraph, seed: u64) -> Result<Vec<u8>> {
    // Sizes come from the model: bounded before anything is generated, by
    // the bound an `--input` file has.
    let total = input_bytes(graph)?;
    let limit = memtrace_io::input::MAX_INPUT_FILE;
    if total > limit {
        bail!("the graph inputs need {total} bytes, more than memtrace generates ({limit} bytes)");
    }
    let mut rng = Rng::new(seed ^ 0x5446_4C4D);
    let mut out = Vec::new();
    for &t in &graph.inputs {
        let tensor = &graph.tensors[t];
        let (Some(dtype), Some(bytes)) = (tensor.dtype, tensor.bytes) else {
            bail!(
                "graph input `{}` has type {} and shape {:?}: memtrace cannot generate its data \
                 (pass --input)",
                graph.tensor_name(t),
                tensor.type_name,
                tensor.shape
            );
        };
        let n = (bytes / dtype.size().max(1)) as usize;
        out.extend(synth_values(&mut rng, dtype, n));
    }
    Ok(out)
}

/// Bytes of all graph inputs together, or an error naming the input whose
/// size is unknown.
pub fn input_bytes(graph: &TfliteGraph) -> Result<u64> {
    graph.inputs.iter().try_fold(0u64, |acc, &t| {
        graph.tensors[t]
            .bytes
            .map(|b| acc.saturating_add(b))
            .ok_or_else(|| {
                failed!(
                    "graph input `{}` has no fixed size (shape {:?})",
                    graph.tensor_name(t),
                    graph.tensors[t].shape
                )
            })
    })
}

/// Monotone O_s per operator index from a run's layers: the first arena
/// input against the first output. An operator with more activation inputs
/// than the trace pairs with its output (other than CONCATENATION, whose
/// later inputs never overlap) gets none.
pub fn traced_overlaps(layers: &[LayerReport]) -> TracedOverlaps {
    let mut traced = TracedOverlaps::default();
    for l in layers {
        let Some(op) = op_index(&l.params) else {
            continue;
        };
        let inputs = l.buffers.iter().filter(|b| b.role == Role::Input).count();
        let paired = usize::from(l.overlap.is_some()) + usize::from(l.input2_overlap.is_some());
        if inputs > paired && l.op != "CONCATENATION" {
            continue;
        }
        let values = [&l.overlap, &l.input2_overlap];
        let first = match l.op.as_str() {
            "CONCATENATION" => l.overlap.as_ref().map(|o| o.monotone_bytes),
            _ => values
                .iter()
                .filter_map(|o| o.as_ref().map(|o| o.monotone_bytes))
                .min(),
        };
        if let Some(v) = first {
            traced.by_op.insert(op, v);
        }
    }
    traced
}

/// Every operator of `model` traced on `image` (O_s, counts; no weights
/// declared, scratch untraced): the runner's answer and the layers.
pub fn trace_layers(
    image: &ElfImage,
    model: &[u8],
    inputs: &[u8],
    max_instructions: u64,
) -> Result<(TflmResult, Vec<LayerReport>)> {
    let mut stats = LayerStats::default();
    let outcome = ModelRun::whole(image, model, inputs, max_instructions)
        .without_scratch()
        .trace(AccessPath::Mmio, None, false, &mut [&mut stats])?;
    Ok((outcome.result, stats.layers))
}

/// TFLM's buffer alignment (`MicroArenaBufferAlignment()`): every planned
/// buffer, each scratch buffer on its own, starts and is sized to it.
const TFLM_BUFFER_ALIGNMENT: u64 = 16;

/// Scratch bytes per operator, as TFLM gave them: an operator with several
/// scratch buffers (LSTM asks for four) gets one tensor as large as TFLM's
/// buffers side by side, each rounded up to TFLM's alignment.
pub fn scratch_needs(result: &TflmResult, ops: usize) -> Vec<u64> {
    let mut needs = vec![0u64; ops];
    for s in &result.scratch {
        if let Some(n) = needs.get_mut(s.op as usize) {
            *n += s.bytes.next_multiple_of(TFLM_BUFFER_ALIGNMENT);
        }
    }
    needs
}

/// What a plan for real TFLM takes from one traced run of the model: the
/// scratch bytes TFLM gave each operator and each operator's traced O_s.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct PlanInputs {
    /// Scratch bytes per operator.
    pub scratch: Vec<u64>,
    /// Monotone O_s per operator.
    pub overlaps: TracedOverlaps,
}

/// Traces `model` (a `.tflite` or `zoo:NAME`, `ops` operators) on the
/// Cortex-M4 runner of `kernels` with seeded inputs (seed 1), or takes the
/// result from `cache` when the runner, model and inputs were traced before.
pub fn plan_inputs(
    model: &str,
    ops: usize,
    kernels: Kernels,
    target: Arch,
    cache: &TraceCache,
) -> Result<PlanInputs> {
    // TFLM's own plan gives the scratch and O_s, not an offline plan the
    // model may carry.
    let bytes = model_bytes(model, 1)?;
    let bytes = tflite::strip_offline(&bytes)?.unwrap_or(bytes);
    let graph = memtrace_model::graph::read_graph(&bytes)?;
    let inputs = seeded_inputs(&graph, 1)?;
    let image = load_runner(&runner_path(target, kernels, None, "--runner")?, kernels)?;
    let key = TraceCache::key(
        "tflm-plan-inputs-v1",
        &[&image.bytes, &bytes, &inputs, &(ops as u64).to_le_bytes()],
    );
    cache.fetch(&key, || {
        let (result, layers) =
            trace_layers(&image, &bytes, &inputs, crate::common::MAX_INSTRUCTIONS)?;
        Ok(PlanInputs {
            scratch: scratch_needs(&result, ops),
            overlaps: traced_overlaps(&layers),
        })
    })
}

/// The `.tflite` bytes of `MODEL.tflite` or `zoo:NAME` (the zoo model with
/// verify's seeded weights).
pub fn model_bytes(arg: &str, seed: u64) -> Result<Vec<u8>> {
    Ok(match arg.strip_prefix("zoo:") {
        Some(_) => {
            let m = model::source::load(arg).with_context(|| format!("loading {arg}"))?;
            to_tflite(&materialize(&m, seed))?
        }
        None => memtrace_io::input::read_limited(
            std::path::Path::new(arg),
            memtrace_io::input::MAX_TFLITE_FILE,
            ".tflite models",
        )?,
    })
}

/// The model of `MODEL.tflite` or `zoo:NAME` for planning on real TFLM:
/// operators memtrace does not model are opaque nodes
/// ([`tflite::import_for_tflm`]).
pub fn load_for_tflm(arg: &str) -> Result<Model> {
    Ok(match arg.strip_prefix("zoo:") {
        Some(_) => model::source::load(arg)?,
        None => {
            let bytes = model_bytes(arg, 1)?;
            let name = std::path::Path::new(arg)
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "model".into());
            tflite::import_for_tflm(&name, &bytes).with_context(|| format!("loading {arg}"))?
        }
    })
}
