//! Where a plan's O_s values come from.
//!
//! An [`OverlapSource`] answers "how many bytes may the start of operator
//! `op`'s input overlap the end of its output" (`None` = unknown, treated as
//! 0). The O_s of an operator applies to every activation input that dies at
//! that operator, paired with its first output — except for a
//! CONCATENATION, whose inputs each have their own O_s: its value is its
//! first input's, and only that input may overlap the output
//! (`Op::overlap_inputs`).
//!
//! Built-in sources ([`OverlapMethod`]) use the analytic or algorithmic method
//! of [`memtrace_overlap`] on the operator's [`LayerSpec`]
//! ([`Model::layer_spec`]: the kernel suite's operators, two-input
//! CONCATENATION and PAD with constant paddings included). Operators the
//! kernel suite does not run follow
//! one documented policy (`structural_overlap`): the flat unary activations
//! RELU6 / RELU_N1_TO_1 get O_s = OB (the loop of RELU, which is traced);
//! everything else — SOFTMAX (three passes over each row), RESHAPE / SQUEEZE
//! (a `memcpy`, safe only fully in place or not at all, so not monotone),
//! QUANTIZE / DEQUANTIZE (element size changes), concatenations of other
//! than two inputs, MEAN,
//! SUB, MUL, LOGISTIC, TANH, broadcast ADDs — gets 0 until a trace proves more.
//! A table of traced values ([`TracedOverlaps`]) only credits what was traced.

use std::collections::HashMap;

use memtrace_abi::spec::LayerSpec;

use crate::{Model, OpKind};
use memtrace_overlap::{algorithmic, analytic};

/// A source of per-operator O_s values.
pub trait OverlapSource {
    /// Name shown in reports (`analytic`, `algorithmic`, `traced`, …).
    fn name(&self) -> String;
    /// O_s in bytes of operator `op` of `model`.
    fn overlap(&self, model: &Model, op: usize) -> Option<u64>;
}

/// The built-in methods.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OverlapMethod {
    /// No overlap anywhere (classic planning).
    None,
    /// [`analytic::analytic_overlap`] (the safe reading of the paper's
    /// equations), plus `structural_overlap`.
    Analytic,
    /// [`algorithmic::algorithmic_overlap`] (monotone O_s of the reference
    /// kernel's loop nest), plus `structural_overlap`.
    Algorithmic,
}

impl OverlapSource for OverlapMethod {
    fn name(&self) -> String {
        match self {
            OverlapMethod::None => "none",
            OverlapMethod::Analytic => "analytic",
            OverlapMethod::Algorithmic => "algorithmic",
        }
        .to_string()
    }
    fn overlap(&self, model: &Model, op: usize) -> Option<u64> {
        let f: fn(&LayerSpec) -> Option<u64> = match self {
            OverlapMethod::None => return Some(0),
            OverlapMethod::Analytic => analytic::analytic_overlap,
            OverlapMethod::Algorithmic => algorithmic::algorithmic_overlap,
        };
        match model.layer_spec(op) {
            Some(spec) => f(&spec),
            None => structural_overlap(model, op),
        }
    }
}

/// O_s of operators without a [`LayerSpec`] (see the module docs): OB for
/// RELU6 and RELU_N1_TO_1 on same-shaped, same-typed tensors, else 0.
pub(crate) fn structural_overlap(model: &Model, op: usize) -> Option<u64> {
    let o = model.ops.get(op)?;
    let input = model.tensors.get(*o.inputs.first()?)?;
    let output = model.tensors.get(*o.outputs.first()?)?;
    let flat = matches!(o.kind, OpKind::Relu6 | OpKind::ReluN1To1)
        && input.shape == output.shape
        && input.dtype == output.dtype;
    Some(if flat { output.bytes } else { 0 })
}

/// Traced O_s values, keyed by operator index or by the canonical
/// [`LayerSpec`] text (what `memtrace run` prints). Operators with no entry
/// get no overlap.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct TracedOverlaps {
    /// O_s in bytes by operator index.
    pub by_op: HashMap<usize, u64>,
    /// O_s in bytes by canonical layer-spec text.
    pub by_spec: HashMap<String, u64>,
}

impl OverlapSource for TracedOverlaps {
    fn name(&self) -> String {
        "traced".into()
    }
    fn overlap(&self, model: &Model, op: usize) -> Option<u64> {
        if let Some(&v) = self.by_op.get(&op) {
            return Some(v);
        }
        let spec = model.layer_spec(op)?;
        self.by_spec.get(&spec.to_string()).copied()
    }
}

/// O_s of every operator of a model, evaluated once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Overlaps {
    /// The source's name.
    pub method: String,
    /// By operator index; 0 where the source knows nothing.
    pub per_op: Vec<u64>,
}

impl Overlaps {
    /// Evaluates `source` on every operator of `model` (0 where it has no value).
    pub fn compute(model: &Model, source: &dyn OverlapSource) -> Overlaps {
        Overlaps {
            method: source.name(),
            per_op: (0..model.ops.len())
                .map(|op| source.overlap(model, op).unwrap_or(0))
                .collect(),
        }
    }

    /// No overlap anywhere.
    pub fn none(model: &Model) -> Overlaps {
        Overlaps {
            method: "none".into(),
            per_op: vec![0; model.ops.len()],
        }
    }

    /// O_s in bytes of operator `op` (0 if unknown).
    pub(crate) fn get(&self, op: usize) -> u64 {
        self.per_op.get(op).copied().unwrap_or(0)
    }
}
