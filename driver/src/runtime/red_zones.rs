//! The red-zoned run of a model ([`red_zoned_check`]): TFLM plans every
//! tensor and scratch buffer with [`RED_ZONE_BYTES`] free on each side
//! (`harness-c/tflm/red_zones.cc`), the operators run on the same inputs,
//! and the memory contract is checked with the stray-write watch on. A
//! kernel that writes past its buffer then writes into a zone, a stray
//! write next to the buffer it overran, where TFLM's own layout may put a
//! tensor that the kernel's later stores hide.

use memtrace_analyzer::contract::{ContractCheck, ContractReport};
use memtrace_tracer::{AccessPath, ElfImage};

use super::{runtime_code, ModelRun, ScratchWatch, RED_ZONE_BYTES};
use crate::support::error::{Context, Result};
use crate::support::violations::{finish, Rerun};

/// What the red-zoned run of a model found.
pub struct RedZoneCheck {
    /// Bytes left free on each side of every planned buffer.
    pub zone_bytes: u32,
    /// The layers the run opened, in order.
    pub layers: Vec<String>,
    /// Each layer's memory contract, exact PCs and source lines filled in.
    pub contracts: Vec<ContractReport>,
    /// Instructions the run took.
    pub instructions: u64,
}

impl RedZoneCheck {
    /// The layers that broke the contract, with their reports.
    pub fn broken(&self) -> impl Iterator<Item = (&str, &ContractReport)> {
        self.contracts
            .iter()
            .filter(|c| !c.ok)
            .map(|c| (self.layers.get(c.index).map_or("?", String::as_str), c))
    }
}

/// Runs `model` on `inputs` red-zoned on the runner `image` (constant
/// tensors declared, scratch traced), on `access`, recording `layers` (all
/// when `None`).
pub(crate) fn red_zoned_check(
    image: &ElfImage,
    model: &[u8],
    inputs: &[u8],
    max_instructions: u64,
    access: AccessPath,
    layers: Option<Vec<String>>,
) -> Result<RedZoneCheck> {
    let run = ModelRun {
        weights: true,
        red_zones: true,
        ..ModelRun::whole(image, model, inputs, max_instructions)
    };
    debug_assert_eq!(run.scratch, ScratchWatch::Traced);
    let code = runtime_code(image);
    let mut contract = ContractCheck::with_runtime_code(code.clone());
    let outcome = run
        .trace(access, layers, true, &mut [&mut contract])
        .with_context(|| {
            format!("the red-zoned run ({RED_ZONE_BYTES} B free around every buffer TFLM plans)")
        })?;
    let summary = outcome.summary;
    let rerun = Rerun {
        image,
        job: None,
        preload: run.preload()?,
        max_instructions,
        runtime_code: code,
        layers: &summary.layers,
        engine: memtrace_tracer::Engine::Unicorn,
    };
    let contracts = finish(rerun, summary.access, contract.layers)?;
    Ok(RedZoneCheck {
        zone_bytes: RED_ZONE_BYTES,
        layers: summary.layers.clone(),
        contracts,
        instructions: summary.instructions,
    })
}
