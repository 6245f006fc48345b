//! One module per command: each takes a plain options type and returns a
//! report that renders itself and says the command's exit status.
//!
//! `run` traces a binary's layers; `sweep` and `validate` run swept layer
//! configurations; `baseline` and `regress` keep and compare O_s tables;
//! `check` runs a library's own tests under the contract; `plan` plans a
//! model's arena, `verify` proves a plan by running the model and `deploy`
//! turns a proven plan into what firmware compiles; `cold` measures the
//! tensors' cold ranges; `bench` measures the tracer.

pub mod baseline;
pub mod bench;
pub mod check;
pub mod cold;
pub mod deploy;
pub mod plan;
pub mod regress;
pub mod run;
pub mod sweep;
pub mod validate;
pub mod verify;
