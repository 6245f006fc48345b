//! memtrace analyzer: what a trace's events mean, and the reports and
//! pictures made of them.
//!
//! The analyses implement `memtrace_abi::Analysis` (layer statistics, the
//! memory contract, PC counts, the event table, the trace and arena
//! pictures, the shadow map, byte-level cold ranges); kernel attribution,
//! reports and their renderers, and the plan pictures sit on top. O_s comes
//! from `memtrace_overlap`, models and plans from `memtrace_model`; nothing
//! here links Unicorn or reads an ELF.

pub mod cold;
pub mod contract;
pub mod error;
pub mod event_table;
pub mod kernel;
pub mod layer_stats;
pub mod pc_counts;
pub mod plot;
pub mod report;
pub mod shadow;
pub mod tinyseg;
pub mod verify;

pub use error::{Error, Result};
