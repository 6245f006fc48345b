//! Cold ranges (TinySeg): stretches of a tensor's lifetime in which nothing
//! accesses it. A planner can spill a tensor to storage for its cold range and
//! fetch it back before its next use, lowering the arena peak at the price of
//! the bytes moved.
//!
//! [`graph`] measures them in operators from the graph alone (TinySeg's
//! Algorithm 2).

pub mod graph;

pub use graph::{graph_cold_ranges, GraphColdRange};
