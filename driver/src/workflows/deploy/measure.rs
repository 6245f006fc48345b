//! The arena to allocate for a model, measured on a TFLM runner at the
//! boundary ([`measure_arena`]).
//!
//! The arena to allocate is not the head plus the tail TFLM reports:
//! `arena_used_bytes()` leaves out the alignment its allocator loses at the
//! arena's end. It is found by running TFLM's own `AllocateTensors()` in the
//! emulator, with arenas around head + tail, until N fits and N − 1 does not;
//! then one full run (`Invoke()`) at N confirms it. Every probe runs the
//! model on the inputs of the run whose plan it measures: real TFLM may abort
//! on other data (a synthetic model's SOFTMAX does on all-zero inputs, in
//! PyPI's TFLM as in the runner). The runner's arena starts
//! 16-byte aligned (`memtrace_arena`), as the header's
//! `alignas(16) static uint8_t arena[kTensorArenaSize]` does.

use std::path::Path;

use memtrace_abi::runner::{self, symbols};
use memtrace_tracer::{Arch, ElfImage, TraceError};

use super::{sha256_prefix, ArenaToAllocate, ARENA_ALIGNMENT};
use crate::runtime::kernels::Kernels;
use crate::runtime::trace_cache::TraceCache;
use crate::runtime::{load_runner, runner_path, ModelRun, OpsNeeded};
use crate::support::common::run_without_hooks;
use crate::support::error::{Error, Result};
use crate::{bail, failed};

/// What one allocation probe found.
enum Probe {
    /// `AllocateTensors()` succeeded: TFLM's arena use.
    Fits { used: u64, head: u64, tail: u64 },
    /// `AllocateTensors()` failed: TFLM's own message.
    TooSmall(String),
}

/// Where the runner's mailbox is, and how large its arena region.
struct RunnerLayout {
    job_at: u64,
    arena_len: u64,
}

impl RunnerLayout {
    fn of(image: &ElfImage) -> Result<RunnerLayout> {
        let at = |name| {
            image
                .symbol(name)
                .map(|s| s.address)
                .ok_or_else(|| failed!("{} lacks `{name}`: rebuild it", image.path.display()))
        };
        let (start, end) = (at(symbols::ARENA)?, at(symbols::ARENA_END)?);
        Ok(RunnerLayout {
            job_at: at(symbols::JOB)?,
            arena_len: end.saturating_sub(start),
        })
    }
}

/// Instruction budget of the confirming run of the whole model.
const RUN_INSTRUCTIONS: u64 = 200_000_000_000;

/// Runs TFLM on `model` with an arena of `arena` bytes, the whole model on
/// `inputs` (every graph input's bytes, in order); `allocate_only` asks only that `AllocateTensors()` fitted.
/// (The runner has no stop after `AllocateTensors()`: an early return there
/// made the CMSIS-NN runner's operator names read empty, a difference in
/// its compiled code not yet explained, so every probe runs the model.) Exit code 4 (`AllocateTensors()` failed) is [`Probe::TooSmall`];
/// any other failure is an error.
fn probe(
    image: &ElfImage,
    layout: &RunnerLayout,
    model: &[u8],
    inputs: &[u8],
    arena: u64,
    allocate_only: bool,
) -> Result<Probe> {
    // The job, the model and the inputs written as every run writes them
    // (each checked to fit its region).
    let preload = ModelRun {
        arena_bytes: Some(arena),
        layers: false,
        ..ModelRun::whole(image, model, inputs, RUN_INSTRUCTIONS)
    }
    .preload()?;
    let mailbox = runner::MEMTRACE_TFLM_WORDS as u64 * 4;
    let run = match run_without_hooks(
        image,
        &preload,
        &[(layout.job_at, mailbox)],
        RUN_INSTRUCTIONS,
    ) {
        Ok(run) => run,
        // TFLM does not always check the arena it was given: too small, its
        // greedy planner can write through a pointer it never got
        // (keyword_scrambled on CMSIS-NN faults in
        // `GreedyMemoryPlanner::CalculateOffsetsIfNeeded`). A firmware with
        // that arena would corrupt memory: it is too small.
        Err(Error::Trace(fault @ TraceError::GuestFault { .. })) => {
            return Ok(Probe::TooSmall(format!(
                "TFLM faulted with an arena of {arena} B: {fault}"
            )))
        }
        Err(e) => return Err(e),
    };
    let reason = run.exit_reason.clone().unwrap_or_default();
    match run.exit_code as u32 {
        runner::TFLM_EXIT_OK => {}
        runner::TFLM_EXIT_ALLOCATE => return Ok(Probe::TooSmall(reason)),
        code => bail!(
            "TFLM on {} exited with code {code} with an arena of {arena} B: {reason}",
            image.path.display()
        ),
    }
    let word = |i: usize| -> u64 {
        run.memory[0]
            .get(i * 4..i * 4 + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u64)
            .unwrap_or(0)
    };
    let stage = word(runner::TFLM_STAGE) as u32;
    let wanted = if allocate_only {
        runner::TFLM_STAGE_ALLOCATED
    } else {
        runner::TFLM_STAGE_INVOKED
    };
    if stage < wanted {
        bail!("the TFLM runner exited at stage {stage}, not {wanted}");
    }
    Ok(Probe::Fits {
        used: word(runner::TFLM_ARENA_USED),
        head: word(runner::TFLM_HEAD_BYTES),
        tail: word(runner::TFLM_TAIL_BYTES),
    })
}

/// The smallest arena (from `start`, a guess) with which `fits` holds, and
/// the largest without: doubling steps away from `start` until the answer
/// changes, then bisection. `fits` must be monotone (more arena never
/// hurts), and hold at `ceiling`.
fn boundary(start: u64, ceiling: u64, mut fits: impl FnMut(u64) -> Result<bool>) -> Result<u64> {
    let start = start.clamp(1, ceiling);
    let (mut bad, mut good) = if fits(start)? {
        let mut good = start;
        let mut step = 8;
        loop {
            let lower = good.saturating_sub(step);
            if lower == 0 {
                break (0, good);
            }
            if !fits(lower)? {
                break (lower, good);
            }
            good = lower;
            step *= 2;
        }
    } else {
        let mut bad = start;
        let mut step = 8;
        loop {
            let higher = (bad + step).min(ceiling);
            if fits(higher)? {
                break (bad, higher);
            }
            if higher == ceiling {
                bail!("TFLM does not fit the model even in the runner's whole arena");
            }
            bad = higher;
            step *= 2;
        }
    };
    while good - bad > 1 {
        let mid = bad + (good - bad) / 2;
        if fits(mid)? {
            good = mid;
        } else {
            bad = mid;
        }
    }
    Ok(good)
}

/// Measures the arena a firmware must allocate for `model` (a `.tflite`,
/// with or without `OfflineMemoryAllocation`) run on `inputs` (every graph
/// input's bytes, in order) on the `target` TFLM runner of `kernels` (or
/// `runner`), or takes it from `cache` when this runner measured these
/// bytes before.
pub(crate) fn measure_arena(
    model: &[u8],
    inputs: &[u8],
    kernels: Kernels,
    target: Arch,
    runner: Option<&Path>,
    cache: &TraceCache,
) -> Result<ArenaToAllocate> {
    let path = runner_path(
        target,
        kernels,
        runner,
        "--runner",
        memtrace_model::graph::read_graph(model)
            .ok()
            .map(|g| OpsNeeded::of(&g))
            .as_ref(),
    )?;
    measure_arena_on(&load_runner(&path, kernels)?, model, inputs, kernels, cache)
}

/// [`measure_arena`] on a runner already loaded.
pub(crate) fn measure_arena_on(
    image: &ElfImage,
    model: &[u8],
    inputs: &[u8],
    kernels: Kernels,
    cache: &TraceCache,
) -> Result<ArenaToAllocate> {
    let key = TraceCache::key(
        "deploy-arena-to-allocate-v2",
        &[&image.bytes, model, inputs],
    );
    cache.fetch(&key, || measure_uncached(image, model, inputs, kernels))
}

/// [`measure_arena`] without the cache.
fn measure_uncached(
    image: &ElfImage,
    model: &[u8],
    inputs: &[u8],
    kernels: Kernels,
) -> Result<ArenaToAllocate> {
    let layout = RunnerLayout::of(image)?;
    let ceiling = layout.arena_len.min(u32::MAX as u64);
    let mut runs = 0u32;
    let mut allocate = |arena: u64| {
        runs += 1;
        probe(image, &layout, model, inputs, arena, true)
    };
    // TFLM's own figure in the whole arena is where the search starts.
    let start = match allocate(ceiling)? {
        Probe::Fits { used, .. } => used,
        Probe::TooSmall(reason) => bail!(
            "TFLM cannot allocate this model even in the runner's {ceiling} B arena: {reason}"
        ),
    };
    let bytes = boundary(start, ceiling, |arena| {
        Ok(matches!(allocate(arena)?, Probe::Fits { .. }))
    })?;
    runs += 1;
    let Probe::Fits { used, head, tail } = probe(image, &layout, model, inputs, bytes, false)?
    else {
        bail!("TFLM allocated the model in {bytes} B but failed to run it there");
    };
    Ok(ArenaToAllocate {
        bytes,
        alignment: ARENA_ALIGNMENT,
        arena_used_bytes: used,
        head_bytes: head,
        tail_bytes: tail,
        kernels,
        target: image.arch,
        runner: image
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        runner_sha256: sha256_prefix(&image.bytes),
        runs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boundary_is_the_first_size_that_fits() {
        for need in [1u64, 7, 100, 82316, 1 << 20] {
            for start in [1u64, need - need / 2, need, need + 3, need * 3] {
                let mut calls = 0;
                let got = boundary(start, 1 << 26, |n| {
                    calls += 1;
                    Ok(n >= need)
                })
                .unwrap();
                assert_eq!(got, need, "start {start}");
                assert!(calls < 80, "{calls} probes");
            }
        }
        assert!(boundary(10, 100, |_| Ok(false)).is_err());
    }
}
