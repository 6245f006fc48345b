//! Real TensorFlow Lite Micro in the emulator: one run of a `.tflite` on a
//! TFLM runner guest (`harness-c/tflm/`, `memtrace_tflm.h`).
//!
//! The model is data: its bytes go to `memtrace_model`, the input bytes to
//! `memtrace_io` and the mailbox to `memtrace_tflm_job`; TFLM's own
//! `MicroInterpreter` lays out the arena (or honours the model's
//! `OfflineMemoryAllocation`) and runs it, one memtrace layer per operator.
//! What it wrote back (outputs, arena use, where every tensor lives) is read
//! once the guest has exited.
//!
//! `runner` finds, loads and checks the runner guest; `inputs` gives a run
//! its `.tflite` bytes and graph inputs; `model_run` is the run itself
//! ([`ModelRun`]); `plan_inputs` is what a plan for TFLM takes from one
//! traced run ([`PlanInputs`]); `red_zones` is the red-zoned run that checks
//! the kernels' memory contract ([`RedZoneCheck`]); `per_operator` compares
//! every operator's outputs across kernel builds ([`OperatorComparison`]). The runner's regions
//! they share are here.

pub mod engines;
mod inputs;
pub mod kernels;
mod model_run;
pub mod oracle;
mod per_operator;
pub mod plan_file;
mod plan_inputs;
mod red_zones;
mod runner;
mod runner_build;
pub mod trace_cache;

pub use inputs::input_bytes;
pub(crate) use inputs::{open_model, run_inputs, seeded_inputs};
pub use model_run::RED_ZONE_BYTES;
pub use model_run::{ModelOutcome, ModelRun, ScratchWatch};
pub(crate) use per_operator::compare_operators;
pub use per_operator::{OperatorComparison, OperatorDifference};
pub(crate) use plan_inputs::scratch_requested;
pub(crate) use plan_inputs::{
    plan_inputs, scratch_needs, size_scratch, size_scratch_of, trace_model_operators,
};
pub use plan_inputs::{traced_overlaps, PlanInputs};
pub(crate) use red_zones::red_zoned_check;
pub use red_zones::RedZoneCheck;
pub(crate) use runner::{
    load_runner, model_runner, runner_arena_bytes, runner_path, runner_storage, runtime_code,
    target_runner,
};
pub use runner_build::OpsNeeded;

use memtrace_tracer::ElfImage;

use crate::failed;
use crate::support::error::Result;

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
