//! Safe input/output buffer overlap O_s (DMO paper, Section III;
//! docs/overlap.md), three ways, each the check of another:
//!
//! - [`empirical`]: monotone, exact and reverse O_s online from a trace's
//!   events;
//! - [`algorithmic`]: the paper's Algorithm 2 on the reference loop nests;
//! - [`analytic`]: the closed forms (eqs. 1–15 and those of the other ops);
//!
//! with [`check`] (the cross-checks), [`configs`] (random and grid layer
//! configurations), [`timeline`] (minR / maxW curves for pictures) and
//! [`rng`] (the deterministic generator behind every random choice).
//!
//! It knows layer specifications and events (`memtrace_abi`), nothing of
//! models, files or the emulator.
//!
//! Two examples print what the methods give and cost (`cargo run --release
//! -p memtrace-overlap --example NAME`): `analytic_readings` (every analytic
//! reading beside the algorithmic value, for well-known layers) and
//! `method_timing` (each method's time on the Table I layer).

pub mod algorithmic;
pub mod analytic;
pub mod check;
pub mod configs;
pub mod empirical;
pub mod rng;
pub mod timeline;
