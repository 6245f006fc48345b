//! memtrace's workflows: the tracer and the analyzer combined into what the
//! commands do. Three tiers, each a folder, imports running downward only:
//!
//! * [`workflows`]: one module per command (`run`, `sweep`, `validate`,
//!   `baseline`, `regress`, `check`, `plan`, `verify`, `deploy`, `cold`,
//!   `bench`), each an options type in and a report out;
//! * [`runtime`]: real TensorFlow Lite Micro in the emulator — the runner
//!   guests, one model run, the kernel builds, the PyPI oracle and the
//!   cache of traced results;
//! * [`support`]: errors, terminal text, provenance and plan files, kernel
//!   attribution, contract-violation sites, TinySeg's transformation.
//!
//! Every report renders itself and says the exit status its command ends
//! with ([`Outcome`]); printing is the binary's. Imports run one way: the
//! binary → this crate → analyzer and tracer → abi.

pub mod runtime;
pub mod support;
pub mod workflows;

pub use support::error::{Context, Error, Result};
pub use support::outcome::{Answer, Format, Outcome};
