//! memtrace's model world: a graph of operators over tensors, and what is
//! done to it before anything runs.
//!
//! A [`Model`] comes from a `.tflite` file ([`tflite::import_file`]) or from
//! the built-in zoo ([`zoo::build`], `zoo:NAME`). Operators are kept in the
//! file's order; the planners derive other valid execution orders from it.
//!
//! For the operators memtrace's kernel suite runs, [`Model::layer_spec`]
//! describes one operator as a [`LayerSpec`](memtrace_abi::LayerSpec), so the O_s methods of
//! [`memtrace_overlap`] apply to it.
//!
//! Around the graph: the arena [`planner`]s and the lower bound, TinySeg's
//! graph transformation ([`tinyseg`]), the graph-level cold ranges
//! ([`cold`]), the seeded constants and inputs of zoo models ([`synth`])
//! and `.tflite` export of zoo models ([`export`]). No
//! events, no emulator, no pictures: the analyzer and the driver do those.
//!
//! The example `planning_times` (`cargo run --release -p memtrace-model
//! --example planning_times`) times the heuristic planners.

mod codes;
pub mod cold;
mod decodes;
pub mod export;
pub mod graph;
pub(crate) mod order;
pub mod planner;
/// The Rust flatbuffers code generated from TensorFlow's TFLite schema:
/// public so that tools and tests can edit a model with
/// [`tflite::rewrite`] instead of hand-written flatbuffer code.
pub mod schema;
pub mod scratch_sizing;
mod shape;
pub mod source;
pub(crate) mod spill_ops;
pub mod synth;
pub use spill_ops::storage_layout;
mod suite;
pub mod tflite;
mod tflite_storage;
pub mod tinyseg;
pub mod zoo;

use std::collections::HashSet;

pub use memtrace_abi::{Activation, Dtype, OpKind, Padding};
pub use order::{OrderKind, PlanOrder};
use serde::{Deserialize, Serialize};

/// Affine quantisation parameters (`real = scale · (q − zero_point)`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Quantization {
    /// Scale per channel, or a single per-tensor scale.
    pub scale: Vec<f32>,
    /// Zero point per channel, or a single per-tensor zero point.
    pub zero_point: Vec<i64>,
    /// Axis of per-channel parameters (0 when per-tensor).
    pub quantized_dimension: i32,
}

/// One tensor of the graph.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tensor {
    /// Tensor name from the model (or the builder).
    pub name: String,
    /// Dimensions, outermost first (empty for a scalar).
    pub shape: Vec<u32>,
    /// Element type.
    pub dtype: Dtype,
    /// Bytes of its data: elements × element size.
    pub bytes: u64,
    /// Holds constant data (weights, biases, shape operands): it lives in
    /// flash, never in the arena.
    pub is_constant: bool,
    /// TFLite variable tensor: allocated persistently by TFLM, not planned.
    pub is_variable: bool,
    /// Quantisation parameters, if the tensor is quantised.
    pub quantization: Option<Quantization>,
    /// The constant's bytes when the model carries them (imported models do;
    /// zoo models only know sizes).
    #[serde(skip)]
    pub data: Option<Vec<u8>>,
    /// A spilled copy held in storage outside the arena (written by a
    /// TinySeg `Spill`, read by a `Fetch`): never placed in the arena.
    #[serde(default)]
    pub in_storage: bool,
}

impl Tensor {
    /// Number of elements: the product of the dimensions.
    pub(crate) fn elements(&self) -> u64 {
        self.shape.iter().map(|&d| d as u64).product()
    }

    /// Whether an arena planner must place it.
    pub(crate) fn needs_arena(&self) -> bool {
        !self.is_constant && !self.is_variable && !self.in_storage
    }
}

/// Operator options (only the fields that matter for the op's kind are set).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpOptions {
    /// (height, width)
    pub stride: (u32, u32),
    /// (height, width)
    pub dilation: (u32, u32),
    /// Padding scheme of convolutions and pools.
    pub padding: Padding,
    /// Output channels per input channel of a depthwise convolution.
    pub depth_multiplier: u32,
    /// Fused activation.
    pub activation: Activation,
    /// Pool window (height, width).
    pub filter: (u32, u32),
    /// Concatenation / softmax axis etc.
    pub axis: Option<i32>,
    /// Width of the accumulator scratch buffer of a quantised
    /// TRANSPOSE_CONV (TinySeg's "temporary tensor quantisation" narrows it
    /// to int16, halving the scratch). Not part of the `.tflite` format.
    #[serde(default)]
    pub accumulator: Accumulator,
}

/// Element type of the accumulator scratch buffer of an operator that keeps
/// its partial sums in the arena (TFLM's int8 TRANSPOSE_CONV).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum Accumulator {
    /// 32-bit, as TFLM's reference kernel (`int32_t* scratch_buffer`).
    #[default]
    Int32,
    /// 16-bit: half the bytes; partial sums wrap modulo 2^16, so an output
    /// is exact exactly when its final sum fits in int16.
    Int16,
}

impl Accumulator {
    /// Bytes per accumulator element.
    pub(crate) fn size(self) -> u64 {
        match self {
            Accumulator::Int32 => 4,
            Accumulator::Int16 => 2,
        }
    }
}

impl Default for OpOptions {
    fn default() -> Self {
        OpOptions {
            stride: (1, 1),
            dilation: (1, 1),
            padding: Padding::Same,
            depth_multiplier: 1,
            activation: Activation::None,
            filter: (1, 1),
            axis: None,
            accumulator: Accumulator::Int32,
        }
    }
}

/// One operator: tensor indices in TFLite's positional order (conv: input,
/// filter, bias). Absent optional inputs (`-1` in TFLite) are dropped.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Op {
    /// Operator kind.
    pub kind: OpKind,
    /// Input tensor indices.
    pub inputs: Vec<usize>,
    /// Output tensor indices.
    pub outputs: Vec<usize>,
    /// Options of the operator.
    pub options: OpOptions,
    /// Arena tensor the kernel library uses as scratch memory during this
    /// operator (TFLM places scratch buffers in the arena too), if any.
    #[serde(default)]
    pub scratch: Option<usize>,
}

impl Op {
    /// Whether the operator's O_s belongs to its first input alone. A
    /// concatenation's inputs each have an O_s of their own
    /// (docs/overlap.md §6) and cannot all sit at the output's end at once,
    /// so the planners overlap its output with its first input only; for
    /// every other operator the O_s applies to each input that dies there
    /// (ADD reads both inputs at the same step).
    pub(crate) fn overlaps_first_input_only(&self) -> bool {
        matches!(self.kind, OpKind::Concatenation)
    }

    /// The inputs the operator's O_s may apply to: the first only for a
    /// concatenation ([`Op::overlaps_first_input_only`]), else all.
    pub(crate) fn overlap_inputs(&self) -> &[usize] {
        if self.overlaps_first_input_only() {
            &self.inputs[..self.inputs.len().min(1)]
        } else {
            &self.inputs
        }
    }
    /// Index into [`Op::inputs`] of the activation the operator transforms:
    /// the third operand of TRANSPOSE_CONV (after the output shape and the
    /// weights), the first of every other kind.
    pub(crate) fn data_position(&self) -> usize {
        match self.kind {
            OpKind::TransposeConv => 2,
            _ => 0,
        }
    }

    /// The tensor of `Op::data_position`, if the operator has it.
    pub fn data_input(&self) -> Option<usize> {
        self.inputs.get(self.data_position()).copied()
    }
}

/// A graph of operators over tensors.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Model {
    /// Model name (the file stem of an imported model, the zoo name otherwise).
    pub name: String,
    /// All tensors; operators and graph inputs/outputs refer to them by index.
    pub tensors: Vec<Tensor>,
    /// In the file's (or builder's) execution order.
    pub ops: Vec<Op>,
    /// Graph input tensor indices.
    pub inputs: Vec<usize>,
    /// Graph output tensor indices.
    pub outputs: Vec<usize>,
}

/// A model that is not a well-formed graph, or a feature memtrace does not
/// support.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The graph is malformed or uses something unsupported; the message says what.
    #[error("{0}")]
    Invalid(String),
    /// A TFLite operator memtrace cannot plan.
    #[error("operator {index}: unsupported operator {name}")]
    UnsupportedOp {
        /// Index of the operator in the model.
        index: usize,
        /// TFLite name of the operator (or what is known of it).
        name: String,
    },
    /// A tensor element type memtrace does not support.
    #[error("tensor {index} `{name}`: unsupported element type {dtype}")]
    UnsupportedType {
        /// Index of the tensor.
        index: usize,
        /// Name of the tensor.
        name: String,
        /// The element type, as TFLite names it.
        dtype: String,
    },
    /// The `.tflite` flatbuffer could not be read.
    #[error("malformed .tflite flatbuffer ({context}): {source}")]
    Flatbuffer {
        /// The table or field being read.
        context: String,
        /// Underlying planus error.
        #[source]
        source: planus::Error,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// Path of the file.
        path: String,
        /// Underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// An output file could not be written.
    #[error(transparent)]
    Write(#[from] memtrace_io::WriteError),
}

impl Model {
    /// For each tensor, the operator that writes it (at most one).
    pub(crate) fn producers(&self) -> Vec<Option<usize>> {
        let mut p = vec![None; self.tensors.len()];
        for (i, op) in self.ops.iter().enumerate() {
            for &t in &op.outputs {
                p[t] = Some(i);
            }
        }
        p
    }

    /// For each tensor, the operators that read it (each at most once, in
    /// op order).
    pub(crate) fn consumers(&self) -> Vec<Vec<usize>> {
        let mut c: Vec<Vec<usize>> = vec![Vec::new(); self.tensors.len()];
        for (i, op) in self.ops.iter().enumerate() {
            for &t in &op.inputs {
                if c[t].last() != Some(&i) {
                    c[t].push(i);
                }
            }
        }
        c
    }

    /// Operators whose outputs op `i` reads (deduplicated, sorted).
    pub(crate) fn predecessors(&self) -> Vec<Vec<usize>> {
        let producers = self.producers();
        self.ops
            .iter()
            .map(|op| {
                let mut p: Vec<usize> = op.inputs.iter().filter_map(|&t| producers[t]).collect();
                p.sort_unstable();
                p.dedup();
                p
            })
            .collect()
    }

    /// Operators that read op `i`'s outputs (deduplicated, sorted).
    pub(crate) fn successors(&self) -> Vec<Vec<usize>> {
        let mut s: Vec<Vec<usize>> = vec![Vec::new(); self.ops.len()];
        for (i, preds) in self.predecessors().into_iter().enumerate() {
            for p in preds {
                s[p].push(i);
            }
        }
        for v in &mut s {
            v.sort_unstable();
            v.dedup();
        }
        s
    }

    /// Checks indices, single producers, that graph inputs are not produced,
    /// that the operator order is a valid execution order, and that every
    /// activation an operator reads exists by then.
    pub fn validate(&self) -> Result<(), ModelError> {
        let n = self.tensors.len();
        let bad = |what: String| Err(ModelError::Invalid(what));
        for (list, what) in [
            (&self.inputs, "graph input"),
            (&self.outputs, "graph output"),
        ] {
            if let Some(&t) = list.iter().find(|&&t| t >= n) {
                return bad(format!("{what} tensor {t} does not exist ({n} tensors)"));
            }
        }
        let mut produced: Vec<Option<usize>> = vec![None; n];
        let mut available: Vec<bool> = self
            .tensors
            .iter()
            .enumerate()
            .map(|(i, t)| t.is_constant || t.is_variable || self.inputs.contains(&i))
            .collect();
        for (i, op) in self.ops.iter().enumerate() {
            for &t in op.inputs.iter().chain(&op.outputs) {
                if t >= n {
                    return bad(format!(
                        "operator {i} ({}) uses tensor {t}, but there are {n} tensors",
                        op.kind.tflite_name()
                    ));
                }
            }
            if op.outputs.is_empty() {
                return bad(format!(
                    "operator {i} ({}) has no output",
                    op.kind.tflite_name()
                ));
            }
            for &t in &op.inputs {
                if !available[t] {
                    return bad(format!(
                        "operator {i} ({}) reads tensor {t} `{}` before any operator writes it",
                        op.kind.tflite_name(),
                        self.tensors[t].name
                    ));
                }
            }
            for &t in &op.outputs {
                if let Some(p) = produced[t] {
                    return bad(format!(
                        "tensor {t} `{}` is written by operators {p} and {i}",
                        self.tensors[t].name
                    ));
                }
                if self.tensors[t].is_constant {
                    return bad(format!(
                        "operator {i} ({}) writes constant tensor {t} `{}`",
                        op.kind.tflite_name(),
                        self.tensors[t].name
                    ));
                }
                if self.inputs.contains(&t) {
                    return bad(format!(
                        "operator {i} ({}) writes graph input tensor {t} `{}`",
                        op.kind.tflite_name(),
                        self.tensors[t].name
                    ));
                }
                produced[t] = Some(i);
                available[t] = true;
            }
        }
        for &t in &self.outputs {
            if !available[t] {
                return bad(format!(
                    "graph output tensor {t} `{}` is never written",
                    self.tensors[t].name
                ));
            }
        }
        self.check_storage().map_err(ModelError::Invalid)
    }

    /// Operators that carry a non-constant input into a non-constant output
    /// and form a single chain: every op reads exactly the previous op's
    /// output (or the graph input) and every intermediate tensor has one
    /// reader. `Err` names the first reason it is not.
    pub(crate) fn sequential_chain(&self) -> Result<(), ModelError> {
        self.chain_break()
            .map_or(Ok(()), |reason| Err(ModelError::Invalid(reason)))
    }

    /// Why the model is not a sequential chain, if it is not.
    fn chain_break(&self) -> Option<String> {
        self.chain_check().err()
    }

    fn chain_check(&self) -> Result<(), String> {
        let consumers = self.consumers();
        let mut prev: Option<usize> = None;
        for (i, op) in self.ops.iter().enumerate() {
            let acts: Vec<usize> = op
                .inputs
                .iter()
                .copied()
                .filter(|&t| self.tensors[t].needs_arena())
                .collect::<HashSet<_>>()
                .into_iter()
                .collect();
            let outs: Vec<usize> = op
                .outputs
                .iter()
                .copied()
                .filter(|&t| self.tensors[t].needs_arena())
                .collect();
            if outs.len() != 1 {
                return Err(format!(
                    "operator {i} ({}) has {} activation outputs",
                    op.kind.tflite_name(),
                    outs.len()
                ));
            }
            if acts.len() != 1 {
                return Err(format!(
                    "operator {i} ({}) reads {} activation tensors",
                    op.kind.tflite_name(),
                    acts.len()
                ));
            }
            let input = acts[0];
            match prev {
                Some(p) if p != input => {
                    return Err(format!(
                        "operator {i} ({}) does not read the previous operator's output",
                        op.kind.tflite_name()
                    ))
                }
                None if !self.inputs.contains(&input) => {
                    return Err(format!(
                        "operator {i} ({}) does not read a graph input",
                        op.kind.tflite_name()
                    ))
                }
                _ => {}
            }
            if consumers[input].len() > 1 || (prev.is_some() && self.outputs.contains(&input)) {
                return Err(format!(
                    "tensor `{}` is read by {} operators",
                    self.tensors[input].name,
                    consumers[input].len() + usize::from(self.outputs.contains(&input))
                ));
            }
            prev = Some(outs[0]);
        }
        Ok(())
    }

    /// Non-constant, non-variable tensors that some operator touches or that
    /// are graph inputs/outputs: the tensors an arena planner places.
    pub(crate) fn arena_tensors(&self) -> Vec<usize> {
        let mut used = vec![false; self.tensors.len()];
        for op in &self.ops {
            for &t in op.inputs.iter().chain(&op.outputs).chain(&op.scratch) {
                used[t] = true;
            }
        }
        for &t in self.inputs.iter().chain(&self.outputs) {
            used[t] = true;
        }
        (0..self.tensors.len())
            .filter(|&t| used[t] && self.tensors[t].needs_arena())
            .collect()
    }
}

impl Model {
    /// Unique buffer names, by tensor index: the tensor's name, with
    /// `#index` when two tensors share it (or it is empty). The TFLM runner's
    /// buffers and every report name tensors so.
    pub fn tensor_names(&self) -> Vec<String> {
        let mut count = std::collections::HashMap::new();
        for t in &self.tensors {
            *count.entry(t.name.as_str()).or_insert(0) += 1;
        }
        self.tensors
            .iter()
            .enumerate()
            .map(|(i, t)| {
                if t.name.is_empty() || count[t.name.as_str()] > 1 {
                    format!("{}#{i}", t.name)
                } else {
                    t.name.clone()
                }
            })
            .collect()
    }

    /// Scratch bytes TFLM's reference kernels request in the arena for each
    /// operator (`RequestScratchBufferInArena` in the kernel's `Prepare`):
    /// an int8 TRANSPOSE_CONV asks for one int32 accumulator per output
    /// element (`GetTensorShape(output).FlatSize() * sizeof(int32_t)`,
    /// tflite-micro `kernels/transpose_conv.cc`), or int16 when the operator's
    /// [`OpOptions::accumulator`] says so; every other operator memtrace
    /// runs, and the float TRANSPOSE_CONV, asks for none.
    pub(crate) fn reference_scratch_needs(&self) -> Vec<u64> {
        self.ops
            .iter()
            .map(|op| {
                let input = op.data_input().and_then(|t| self.tensors.get(t));
                let output = op.outputs.first().and_then(|&t| self.tensors.get(t));
                match (op.kind, input, output) {
                    (OpKind::TransposeConv, Some(x), Some(y)) if x.dtype == Dtype::Int8 => {
                        y.elements() * op.options.accumulator.size()
                    }
                    _ => 0,
                }
            })
            .collect()
    }

    /// This model with the scratch tensors of TFLM's reference kernels
    /// (`Model::reference_scratch_needs`), as TFLM's planner sees them.
    pub fn with_reference_scratch(&self) -> Model {
        self.with_scratch(&self.reference_scratch_needs())
    }

    /// This model with a scratch tensor of `needs[op]` bytes for every
    /// operator that needs one (int8, shape `[bytes]`, named after the
    /// operator's output), replacing any scratch tensors it had.
    pub fn with_scratch(&self, needs: &[u64]) -> Model {
        let mut m = self.clone();
        for (op, &bytes) in needs.iter().enumerate().take(m.ops.len()) {
            m.ops[op].scratch = None;
            if bytes == 0 {
                continue;
            }
            let owner = m.ops[op]
                .outputs
                .first()
                .map(|&t| m.tensors[t].name.clone());
            m.tensors.push(Tensor {
                name: format!("{}/scratch", owner.unwrap_or_else(|| format!("op{op}"))),
                shape: vec![bytes as u32],
                dtype: Dtype::Int8,
                bytes,
                is_constant: false,
                is_variable: false,
                quantization: None,
                data: None,
                in_storage: false,
            });
            m.ops[op].scratch = Some(m.tensors.len() - 1);
        }
        m
    }
}

/// The axis (made non-negative) and the output dimensions of a
/// concatenation of `inputs` along `axis` (TFLite's default: the last), or
/// why the inputs do not concatenate.
pub(crate) fn concat_dims(
    inputs: &[&Tensor],
    axis: Option<i32>,
) -> Result<(usize, Vec<u64>), String> {
    let show = |t: &Tensor| format!("`{}` {:?}", t.name, t.shape);
    let dims = |t: &Tensor| t.shape.iter().map(|&d| d as u64).collect::<Vec<u64>>();
    let x = inputs.first().ok_or("has no input")?;
    let rank = x.shape.len() as i64;
    let axis = axis.unwrap_or(-1) as i64;
    let axis = if axis < 0 { axis + rank } else { axis };
    if !(0..rank).contains(&axis) {
        return Err(format!("axis {axis} is outside input {}", show(x)));
    }
    let axis = axis as usize;
    let mut want = dims(x);
    for t in &inputs[1..] {
        let d = dims(t);
        let agrees = d.len() == want.len()
            && d.iter()
                .zip(&want)
                .enumerate()
                .all(|(j, (a, b))| j == axis || a == b);
        if !agrees {
            return Err(format!(
                "input {} does not match input {} outside axis {axis}",
                show(t),
                show(x)
            ));
        }
        want[axis] += d[axis];
    }
    Ok((axis, want))
}

/// A shape as 4-D NHWC (rank ≤ 4, left-padded with 1s).
pub(crate) fn shape4(shape: &[u32]) -> Option<[u32; 4]> {
    if shape.len() > 4 {
        return None;
    }
    let mut s = [1u32; 4];
    s[4 - shape.len()..].copy_from_slice(shape);
    Some(s)
}

#[cfg(test)]
pub(crate) mod tests;
