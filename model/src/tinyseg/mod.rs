//! TinySeg (Chae, Kim and Heo): lowering the arena peak of hourglass models
//! by spilling tensors to storage through their cold ranges and fetching
//! them back fused with their reader.
//!
//! * `transform`: the graph edits — spill (whole, or the tail after a
//!   split), fuse a fetch into the following `CONCATENATION` / `CONV_2D`;
//! * `optimize` ([`optimize()`]): the loop of Algorithms 1 and 3 around a base planner
//!   (`memtrace plan --planner tinyseg --base PLANNER`);
//! * [`compress`]: the paper's tensor compression, to measure what spilled
//!   bytes would cost compressed.
//!
//! The per-step table and the reports are the analyzer's
//! (`memtrace_analyzer::tinyseg`).
//!
//! Real TFLM runs the transformed model (`memtrace verify --planner
//! tinyseg`), its storage operators written as the TFLM runner's custom
//! operators (`crate::export`), its storage tensors in a storage region
//! outside the arena (docs/tinyseg.md).

pub mod bench;
pub mod compress;
pub(crate) mod optimize;
pub(crate) mod transform;

pub use optimize::{optimize, Optimized, Step, StepAction, TinysegOptions};
pub use transform::{Graph, NarrowScratch};

#[cfg(test)]
mod tests;
