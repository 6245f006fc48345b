//! What a firmware needs from a plan: the arena it must give TFLM, measured
//! on real TFLM at the boundary (`measure.rs`), the C header it includes
//! (`header.rs`) and the budget check
//! (`--fits`, [`parse_size`], [`Budget`]).
//!
//! `measure` finds the arena to allocate, `header` writes the header beside
//! the model, `budget` reads and checks `--fits` and `proven` delivers a
//! proven plan ([`Deployment`]); what they share, the
//! arena to allocate ([`ArenaToAllocate`]) and a plan stated with it
//! ([`MeasuredPlan`]), is here.

mod budget;
mod header;
mod measure;
mod proven;

pub use budget::{parse_size, Budget};
pub(crate) use header::write_measured_plan;
pub use header::{deployment_refusal, header_path, Provenance};
pub(crate) use measure::{measure_arena, measure_arena_on};
pub use proven::{Deployed, Deployment};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use memtrace_tracer::Arch;

use crate::runtime::kernels::Kernels;

/// Alignment the header's arena buffer has (`alignas(16)`), and the one the
/// runner's arena region starts at: the measured size holds for it.
pub(crate) const ARENA_ALIGNMENT: u64 = 16;

/// The smallest arena with which TFLM allocates and runs a model.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArenaToAllocate {
    /// The arena a firmware must give TFLM (`kTensorArenaSize`): TFLM's
    /// `AllocateTensors()` and `Invoke()` succeed with it, and
    /// `AllocateTensors()` fails with one byte less.
    pub bytes: u64,
    /// The arena buffer's alignment this holds for (a buffer declared
    /// `alignas(16)`).
    pub alignment: u64,
    /// `arena_used_bytes()` TFLM reported in that arena.
    pub arena_used_bytes: u64,
    /// TFLM's head (planned tensors and scratch buffers) in that arena.
    pub head_bytes: u64,
    /// TFLM's tail (persistent buffers) in that arena.
    pub tail_bytes: u64,
    /// Kernels of the TFLM build measured.
    pub kernels: Kernels,
    /// Target of the TFLM build measured.
    pub target: Arch,
    /// The TFLM runner measured (file name).
    pub runner: String,
    /// SHA-256 of the runner ELF (its first 16 hex digits): the TFLM build,
    /// kernels and compiler the size holds for.
    pub runner_sha256: String,
    /// TFLM runs it took (allocation probes and the confirming run).
    pub runs: u32,
}

impl ArenaToAllocate {
    /// One line for tables and messages: the size and what it holds for.
    pub fn describe(&self) -> String {
        format!(
            "arena to allocate: {} B (alignas({}) buffer; TFLM head {} + tail {} = {} B used; \
             measured on TFLM {} kernels, {}, {} sha256 {})",
            self.bytes,
            self.alignment,
            self.head_bytes,
            self.tail_bytes,
            self.arena_used_bytes,
            self.kernels,
            self.target,
            self.runner,
            self.runner_sha256
        )
    }
}

/// A plan and the arena TFLM needs for it, as plan and verify state them.
#[derive(Clone, Debug, Serialize)]
pub struct MeasuredPlan {
    /// The planner whose plan was measured.
    pub planner: String,
    /// Its O_s source.
    pub overlap: String,
    /// The planner's head: the arena its tensors span.
    pub planned_bytes: u64,
    /// The arena to allocate, measured on real TFLM.
    pub arena: Option<ArenaToAllocate>,
    /// Why it was not measured (no TFLM runner, or TFLM refused the model).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_measured: Option<String>,
}

impl MeasuredPlan {
    /// Lines for a text report.
    pub(crate) fn to_text(&self) -> String {
        let head = format!(
            "{} planner (O_s: {}): head {} B",
            self.planner, self.overlap, self.planned_bytes
        );
        match (&self.arena, &self.not_measured) {
            (Some(a), _) => format!("{head}; {}\n", a.describe()),
            (None, Some(why)) => format!("{head}; arena to allocate not measured: {why}\n"),
            (None, None) => format!("{head}\n"),
        }
    }
}

/// The first 16 hex digits of the SHA-256 of `bytes`.
pub(crate) fn sha256_prefix(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}
