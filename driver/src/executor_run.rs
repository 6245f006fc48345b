//! The one way to run a model on memtrace's executor: lower the model at a
//! placement, encode the program, load it at `memtrace_arena`, run the
//! executor (traced, untraced, or in scratch-query mode) and read back what
//! the run left. `verify`, `cold`, the scratch query and `plan`'s reference
//! run all go through [`ExecutorRun`].

use std::path::Path;
use std::time::Instant;

use memtrace_abi::program::{EncodedProgram, ExecutorExit, Program, TensorData};
use memtrace_abi::symbols;
use memtrace_abi::Analysis;
use memtrace_analyzer::plot::arena::ArenaTrace;
use memtrace_analyzer::shadow::{Clobber, LayerOverlap, ShadowMap};
use memtrace_model::lower::{lower, LowerInput};
use memtrace_model::planner::Plan;
use memtrace_model::Model;
use memtrace_tracer::{AccessPath, Arch, ElfImage, TraceOptions};
use serde::{Deserialize, Serialize};

use crate::common::{access_path, exit_text, run_without_hooks, trace_with};
use crate::error::Result;
use crate::kernels::{check_built_with, harness_guest, Kernels};
use crate::trace_cache::TraceCache;
use crate::{bail, failed};

/// Where a model's tensors are in one run: the execution order, each
/// tensor's arena offset (`None`: not in the arena) and the arena's size.
#[derive(Clone, Debug)]
pub(crate) struct Placement {
    pub order: Vec<usize>,
    pub offsets: Vec<Option<u64>>,
    pub arena_bytes: u64,
}

impl Placement {
    /// `plan`'s placement of `model`.
    pub fn of(plan: &Plan, model: &Model) -> Placement {
        Placement {
            order: plan.order.clone(),
            offsets: plan.offsets(model),
            arena_bytes: plan.arena_bytes(model),
        }
    }
}

/// One executor and what every run of it shares.
#[derive(Clone, Copy)]
pub(crate) struct ExecutorRun<'a> {
    pub image: &'a ElfImage,
    /// Seed of generated inputs (and of synthesised weights).
    pub seed: u64,
    /// Instruction budget (a time limit for untraced runs).
    pub max_instructions: u64,
    /// Raw bytes of the first graph input; generated when `None`.
    pub input: Option<&'a [u8]>,
}

/// What a traced run watches besides the shadow map.
#[derive(Default)]
pub(crate) struct Watch<'a> {
    /// Draw the arena over time under this title.
    pub plot_title: Option<String>,
    /// Layers allowed to read their own output (from a reference run).
    pub output_readers: Vec<String>,
    /// Analyses another workflow adds.
    pub analyses: Vec<&'a mut (dyn Analysis + Send)>,
    /// The analyses need each access's own instruction (the hook path).
    pub exact_time: bool,
    /// Also time the program in Unicorn without hooks (`--baseline`).
    pub baseline: bool,
}

/// What a traced run left. All but the picture can be kept in the trace
/// cache.
#[derive(Serialize, Deserialize)]
pub(crate) struct Outcome {
    pub seconds: f64,
    /// Wall-clock seconds of the same program without hooks (`--baseline`).
    pub untraced_seconds: Option<f64>,
    /// Reads of clobbered arena bytes (the shadow map's finding).
    pub clobbers: Vec<Clobber>,
    /// Per layer, in run order: its O_s and whether it read its output.
    pub layers: Vec<LayerOverlap>,
    #[serde(skip)]
    pub trace: Option<ArenaTrace>,
    pub instructions: u64,
    /// The access path the run used.
    pub access: AccessPath,
    /// The graph outputs, concatenated in order.
    pub outputs: Vec<u8>,
    /// The graph inputs the program carried, concatenated in order.
    pub inputs: Vec<u8>,
    /// The storage region after the run (empty when the program spills
    /// nothing) and the clobbered reads of it.
    pub storage: Vec<u8>,
    pub storage_clobbers: Vec<Clobber>,
}

/// A program placed in the executor's memory.
struct Loaded {
    program: Program,
    encoded: EncodedProgram,
    /// Guest address of `memtrace_arena`, where the program goes.
    at: u64,
    /// Guest address of arena offset 0 (after the program).
    base: u64,
    /// Guest address of the storage region, when the program spills.
    storage: Option<u64>,
}

impl Loaded {
    fn preload(&self) -> Vec<(u64, Vec<u8>)> {
        vec![(self.at, self.encoded.bytes.clone())]
    }

    /// The graph outputs' guest ranges, in order.
    fn outputs(&self) -> Vec<(u64, u64)> {
        let output = |o: u32| {
            let t = &self.program.tensors[o as usize];
            let offset = match t.data {
                TensorData::Arena { offset } => offset,
                _ => 0,
            };
            (self.base + offset, t.bytes())
        };
        self.program.outputs.iter().map(|&o| output(o)).collect()
    }

    /// The graph outputs' guest ranges, then the storage region's.
    fn readback(&self) -> Vec<(u64, u64)> {
        let mut ranges = self.outputs();
        ranges.extend(self.storage.map(|at| (at, self.program.storage_bytes)));
        ranges
    }

    fn inputs(&self) -> Vec<u8> {
        self.program
            .inputs
            .iter()
            .flat_map(|(_, b)| b.clone())
            .collect()
    }
}

impl ExecutorRun<'_> {
    /// Lowers `model` at `placement` and places the program in the
    /// executor's memory; `query_scratch` asks for scratch sizes instead of
    /// a run.
    fn load(&self, model: &Model, placement: &Placement, query_scratch: bool) -> Result<Loaded> {
        let mut program = lower(
            model,
            &LowerInput {
                order: &placement.order,
                offsets: &placement.offsets,
                arena_bytes: placement.arena_bytes,
                seed: self.seed,
                input_data: self.input.filter(|_| !query_scratch),
            },
        )?;
        program.query_scratch = query_scratch;
        let encoded = program.encode()?;
        let path = self.image.path.display();
        let at = self
            .image
            .symbol(symbols::ARENA)
            .ok_or_else(|| failed!("{path} has no memtrace_arena symbol"))?
            .address;
        let base = at + encoded.arena_offset;
        if let Some(end) = self.image.symbol(symbols::ARENA_END).map(|s| s.address) {
            if base + placement.arena_bytes > end {
                bail!(
                    "program ({} bytes) and arena ({} bytes) do not fit the executor's arena ({} bytes)",
                    encoded.arena_offset,
                    placement.arena_bytes,
                    end - at
                );
            }
        }
        let storage = storage_region(self.image, program.storage_bytes)?;
        Ok(Loaded {
            program,
            encoded,
            at,
            base,
            storage,
        })
    }

    /// Runs `model` at `placement` with every arena read checked by the
    /// shadow map, and whatever `watch` adds.
    pub fn traced(
        &self,
        model: &Model,
        placement: &Placement,
        watch: Watch<'_>,
    ) -> Result<Outcome> {
        let loaded = self.load(model, placement, false)?;
        let preload = loaded.preload();
        let untraced_seconds = if watch.baseline {
            let started = Instant::now();
            self.untraced(&loaded, &[])?;
            Some(started.elapsed().as_secs_f64())
        } else {
            None
        };
        let started = Instant::now();
        let mut extra = watch.analyses;
        let arena = placement.arena_bytes;
        let mut shadow =
            ShadowMap::new(loaded.base, arena).with_output_readers(watch.output_readers);
        let mut trace = watch
            .plot_title
            .map(|t| ArenaTrace::new(format!("{t}: {arena} B"), loaded.base, arena));
        let storage_bytes = loaded.program.storage_bytes;
        let mut storage_shadow = loaded.storage.map(|at| ShadowMap::new(at, storage_bytes));
        // Only the arena plot (or an added analysis) needs each access's
        // exact instruction.
        let access = access_path(trace.is_some() || watch.exact_time);
        let summary = {
            let mut analyses: Vec<&mut (dyn Analysis + Send)> = vec![&mut shadow];
            analyses.extend(trace.as_mut().map(|t| t as &mut (dyn Analysis + Send)));
            analyses.extend(
                storage_shadow
                    .as_mut()
                    .map(|s| s as &mut (dyn Analysis + Send)),
            );
            // Reborrowed: the added analyses outlive this run.
            for a in extra.iter_mut() {
                analyses.push(&mut **a);
            }
            let options = TraceOptions {
                max_instructions: self.max_instructions,
                preload,
                readback: loaded.readback(),
                access,
                ..TraceOptions::default()
            };
            trace_with(self.image, options, &mut analyses)?
        };
        self.check_exit(summary.exit_code, summary.exit_reason.as_deref(), "")?;
        let mut memory = summary.memory;
        let storage = match loaded.storage {
            Some(_) => memory.pop().unwrap_or_default(),
            None => Vec::new(),
        };
        Ok(Outcome {
            seconds: started.elapsed().as_secs_f64(),
            untraced_seconds,
            clobbers: shadow.clobbers,
            layers: shadow.layers,
            trace,
            instructions: summary.instructions,
            access: summary.access,
            outputs: memory.concat(),
            inputs: loaded.inputs(),
            storage,
            storage_clobbers: storage_shadow.map(|s| s.clobbers).unwrap_or_default(),
        })
    }

    /// The graph outputs of `model` run at `placement` in Unicorn without
    /// hooks: for a run whose only product is its outputs.
    pub fn outputs(&self, model: &Model, placement: &Placement) -> Result<Vec<u8>> {
        let loaded = self.load(model, placement, false)?;
        Ok(self.untraced(&loaded, &loaded.outputs())?.concat())
    }

    /// Scratch bytes each operator of `model` (by model operator index)
    /// needs, asked of the executor with the model at `placement`
    /// (docs/protocol.md §13).
    fn query_scratch(&self, model: &Model, placement: &Placement) -> Result<Vec<u64>> {
        let loaded = self.load(model, placement, true)?;
        let words: Vec<(u64, u64)> = (0..placement.order.len())
            .map(|k| (loaded.at + loaded.encoded.scratch_bytes_word(k), 4))
            .collect();
        let summary = memtrace_tracer::trace(
            self.image,
            TraceOptions {
                max_instructions: self.max_instructions,
                preload: loaded.preload(),
                readback: words,
                access: AccessPath::Mmio,
                ..TraceOptions::default()
            },
            &mut [],
        )?;
        self.check_exit(
            summary.exit_code,
            summary.exit_reason.as_deref(),
            " when asked for scratch sizes",
        )?;
        let mut needs = vec![0u64; model.ops.len()];
        for (&op, word) in placement.order.iter().zip(&summary.memory) {
            let bytes: [u8; 4] = word
                .as_slice()
                .try_into()
                .map_err(|_| failed!("short read-back of a scratch word"))?;
            needs[op] = u32::from_le_bytes(bytes) as u64;
        }
        Ok(needs)
    }

    /// `model` with the scratch tensors the executor's kernel library needs.
    ///
    /// The library is asked itself: in query mode the executor runs nothing
    /// and writes what each operator's `*_get_buffer_size` returns into the
    /// program (`OPW_SCRATCH_BYTES`, docs/protocol.md §13), with the model
    /// under TFLM's greedy plan (any fitting placement works for the query).
    /// TFLM places these buffers in the arena, so they become tensors of the
    /// plan ([`Model::with_scratch`]).
    pub fn with_scratch(&self, model: &Model) -> Result<Model> {
        Ok(model.with_scratch(&self.scratch_needs(model)?))
    }

    /// The scratch bytes [`ExecutorRun::with_scratch`] adds, per model
    /// operator.
    pub fn scratch_needs(&self, model: &Model) -> Result<Vec<u64>> {
        let plain = Plan::tflm_greedy(model)?;
        self.query_scratch(model, &Placement::of(&plain, model))
    }

    /// The trace-cache key of a `kind` of record about a run of `model`:
    /// everything the run depends on (executor, model with its weights,
    /// input or seed, budget).
    pub fn cache_key(&self, kind: &str, model: &Model) -> String {
        TraceCache::key(
            kind,
            &[
                &self.image.bytes,
                &TraceCache::model_part(model),
                self.input.unwrap_or_default(),
                &[u8::from(self.input.is_some())],
                &self.seed.to_le_bytes(),
                &self.max_instructions.to_le_bytes(),
            ],
        )
    }

    /// Runs `loaded` without hooks ([`run_without_hooks`]: the budget as a
    /// time limit) and reads back `readback`.
    fn untraced(&self, loaded: &Loaded, readback: &[(u64, u64)]) -> Result<Vec<Vec<u8>>> {
        let run = run_without_hooks(
            self.image,
            &loaded.preload(),
            readback,
            self.max_instructions,
        )?;
        self.check_exit(
            run.exit_code,
            run.exit_reason.as_deref(),
            " (run without hooks)",
        )?;
        Ok(run.memory)
    }

    fn check_exit(&self, code: i32, reason: Option<&str>, when: &str) -> Result<()> {
        if code != 0 {
            bail!(
                "{} {}{when}",
                self.image.path.display(),
                exit_text(code, reason, &ExecutorExit::hint())
            );
        }
        Ok(())
    }
}

/// Guest address of the executor's storage region when a program needs
/// `bytes` of it (`None` for none); an error when it has no such region or
/// the region is too small.
fn storage_region(image: &ElfImage, bytes: u64) -> Result<Option<u64>> {
    if bytes == 0 {
        return Ok(None);
    }
    let (Some(start), Some(end)) = (
        image.symbol(symbols::STORAGE),
        image.symbol(symbols::STORAGE_END),
    ) else {
        bail!(
            "{} has no storage region (memtrace_storage): rebuild it with harness-c's linker scripts",
            image.path.display()
        );
    };
    if start.address + bytes > end.address {
        bail!(
            "the program spills {bytes} bytes, more than the executor's storage region ({} bytes)",
            end.address - start.address
        );
    }
    Ok(Some(start.address))
}

/// The executor of `kernels` for `target`: the ELF at `path` when given,
/// the harness build otherwise.
pub(crate) fn executor(target: Arch, kernels: Kernels, path: Option<&Path>) -> Result<ElfImage> {
    let path = match path {
        Some(p) => p.to_path_buf(),
        None => harness_guest(target, kernels.executor_file(), "--executor")?,
    };
    let image = ElfImage::load(&path)?;
    // A kernel suite would ignore the program and report nonsense.
    if image.symbol(symbols::JOB).is_some() || image.symbol(symbols::ARENA).is_none() {
        bail!(
            "{} is not a model executor (it has {}): pass harness-c/build/TARGET/{}",
            path.display(),
            if image.symbol(symbols::JOB).is_some() {
                "a kernel suite's memtrace_job mailbox"
            } else {
                "no memtrace_arena to load a model program into"
            },
            kernels.executor_file()
        );
    }
    check_built_with(&image, kernels, "executor", kernels.executor_file())?;
    if image.arch != target {
        bail!(
            "{} is a {} executor but --target is {}",
            path.display(),
            image.arch.name(),
            target.name()
        );
    }
    Ok(image)
}
