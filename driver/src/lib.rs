//! memtrace's workflows: the tracer and the analyzer combined into what the
//! commands do — trace a binary's layers ([`run`]), sweep configurations
//! ([`sweep`], [`validate`]), keep and compare O_s baselines ([`baseline`],
//! [`regress`]), plan a model's arena ([`plan`]), prove a plan by running the
//! model ([`verify`]), measure its tensors' cold ranges ([`cold`]) and measure the tracer ([`bench`](mod@bench), [`ladder`]).
//!
//! Every workflow takes a plain options type and returns a report value that
//! knows how to render itself; printing and exit codes are the binary's.
//! Imports run one way: the binary → this crate → analyzer and tracer → abi.

pub mod attribution;
pub mod baseline;
pub mod bench;
pub mod bench_models;
pub mod check;
pub mod cold;
pub mod common;
pub mod contract;
pub mod deploy;
pub mod error;
pub mod kernels;
pub mod ladder;
pub mod oracle;
pub mod plan;
pub mod plan_file;
pub mod provenance;
pub mod regress;
pub mod run;
pub mod spill;
pub mod sweep;
pub mod text;
pub mod tflm;
pub mod trace_cache;
pub mod validate;
pub mod verify;

pub use error::{Context, Error, Result};
