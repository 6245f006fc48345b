//! From a [`Model`](crate::Model) and a placement to the executor's
//! [`Program`](memtrace_abi::program::Program): kernel
//! parameters, quantisation computed the way TFLM's kernels compute it in
//! their `Prepare` (multipliers and shifts from the tensors' scales), and the
//! constant data.
//!
//! Imported `.tflite` models carry their weights and quantisation. Zoo models
//! only know shapes, so they get seeded data: weights uniform in the int8
//! range (float: ±g·√(3/K)), biases small, and for int8 a fixed activation
//! scale of 0.05 with zero point 0 and weight scales chosen so that an output
//! keeps roughly the spread of its input (real multiplier g / (73·√K)), with
//! g = √2 before a ReLU/ReLU6 (He) and 1 otherwise; softmax outputs use TFLM's
//! required scale 1/256 and zero point −128.
//!
//! * `context`: the program's tensors as they are made, the operator being
//!   lowered; `ops`: each operator's lowering, one function per kind;
//! * `quant`: TFLite's quantisation arithmetic; `synth`: the seeded
//!   constants and inputs (weight synthesis, apart from their encoding);
//! * `placement`: the placement checks and the storage layout; `names`: the
//!   tensors' buffer names; `program`: [`lower`], the whole model in order.

mod context;
mod error;
mod ops;
mod placement;
mod program;
mod quant;
mod synth;

pub use crate::spill_ops::storage_layout;
pub use context::LowerInput;
pub use error::{LowerError, LowerSubject};
pub use placement::check_placement;
pub use program::lower;
pub use synth::{materialize, synth_values};

#[cfg(test)]
mod tests;
