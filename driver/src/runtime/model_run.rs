//! One run of a model on a runner ([`ModelRun`]): the job, model and inputs
//! preloaded, the run traced, and what TFLM wrote back read once the guest
//! has exited ([`ModelOutcome`]).

use memtrace_abi::runner::{self, symbols, TflmJob, TflmResult};
use memtrace_abi::{Analysis, Role};
use memtrace_tracer::{AccessPath, ClockMode, ElfImage, RunSummary, TraceOptions};

use super::{region, runner_storage, Region};
use crate::support::common::trace_with;
use crate::support::error::Result;
use crate::{bail, failed};

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
    /// A red-zoned run: [`RED_ZONE_BYTES`] left free before and after every
    /// buffer TFLM plans (the offline plan ignored), so that a kernel
    /// writing past its buffer writes a stray byte, not its neighbour's.
    pub red_zones: bool,
    /// A digest of every operator's outputs ([`TflmResult::digests`]).
    pub digests: bool,
    /// Copy this operator's outputs back ([`TflmResult::dump`]).
    pub dump_op: Option<u32>,
}

/// The bytes a red-zoned run leaves free on each side of a planned buffer:
/// four of the Cortex-M55's 16-byte vector stores, so that a kernel whose
/// scratch is a few vectors short is caught, whatever the alignment.
pub const RED_ZONE_BYTES: u32 = 64;

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
            red_zones: false,
            digests: false,
            dump_op: None,
        }
    }

    /// This run without the scratch buffers' events: what O_s needs.
    pub(crate) fn without_scratch(self) -> ModelRun<'a> {
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
            red_zone_bytes: if self.red_zones { RED_ZONE_BYTES } else { 0 },
            digests: self.digests,
            dump_op: self.dump_op,
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
    pub(crate) fn preload(&self) -> Result<Vec<(u64, Vec<u8>)>> {
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
        let mailbox_len = runner::MEMTRACE_TFLM_WORDS as u64 * 4;
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
                // A kernel's own op data and state: declared, so that its
                // writes there are its own, but not traced (per-channel
                // multipliers are re-read at every output channel).
                untraced_roles: match self.scratch {
                    ScratchWatch::Untraced => vec![Role::Scratch, Role::Persistent],
                    _ => vec![Role::Persistent],
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
                "TFLM {}{}",
                crate::support::common::exit_text(
                    summary.exit_code,
                    reason.as_deref(),
                    "2: bad job, 3: bad model, 4: AllocateTensors failed, 5: Invoke failed, \
                     6: inputs or outputs do not fit; docs/protocol.md, \"The TFLM runner\""
                ),
                super::runner::narrowed_runner_note(image).unwrap_or_default()
            );
        }
        let result = TflmResult::decode(&summary.memory[0], &summary.memory[1])
            .map_err(|e| failed!("{}: {e}", image.path.display()))?;
        if result.stage != runner::TFLM_STAGE_INVOKED {
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
