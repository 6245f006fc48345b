//! memtrace analyzer: everything that happens to a trace after the emulator.
//!
//! It knows events (from `memtrace_abi::event`), O_s (empirical,
//! algorithmic, analytic), models, planners and plots, and nothing of Unicorn.

pub mod cold;
pub mod contract;
pub mod error;
pub mod event_table;
pub mod kernel;
pub mod layer_stats;
pub mod model;
pub mod pc_counts;
pub mod planner;
pub mod plot;
pub mod report;
pub mod tinyseg;
pub mod verify;

pub use error::{Error, Result};
