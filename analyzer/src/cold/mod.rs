//! Cold ranges (TinySeg): stretches of a tensor's lifetime in which nothing
//! accesses it. A planner can spill a tensor to storage for its cold range and
//! fetch it back before its next use, lowering the arena peak at the price of
//! the bytes moved.
//!
//! `memtrace_model::cold` measures them in operators from the graph alone
//! (TinySeg's Algorithm 2); [`bytes`] measures them per byte, in operators and in
//! instructions, from a trace of the model on TFLM; [`report`] puts the two side
//! by side (`memtrace cold`) and [`plot`] draws them over the arena.

pub mod bytes;
pub mod plot;
pub mod report;

pub use bytes::{BufferTensors, ByteCold, ByteColdRun};
pub use report::{tensor_colds, ColdReport, TensorCold};
