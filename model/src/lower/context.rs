//! The state of one lowering: the program's tensor table as it grows, and
//! the operator being lowered.

use memtrace_abi::program::{OpParams, ProgramTensor, TensorData};
use memtrace_overlap::rng::Rng;

use super::error::{LowerError, LowerSubject};
use super::quant::{act_q, act_range, float_range};
use super::synth::stream;
use crate::spill_ops::storage_layout;
use crate::{Dtype, Model, Op, OpKind, Tensor};

/// Everything `lower` needs besides the model.
pub struct LowerInput<'a> {
    /// Execution order (operator indices).
    pub order: &'a [usize],
    /// Arena offset of every tensor the plan places (`None` for constants).
    pub offsets: &'a [Option<u64>],
    /// Size of the activation arena in bytes.
    pub arena_bytes: u64,
    /// Seed of the generated weights and input data.
    pub seed: u64,
    /// Raw bytes of the first graph input, instead of seeded data.
    pub input_data: Option<&'a [u8]>,
}

/// `d` if the executor's program has tensors of that type.
pub(super) fn program_dtype(d: Dtype) -> Option<Dtype> {
    d.program_code().map(|_| d)
}

/// The program's tensors as they are created, and what they are made from.
pub(super) struct Lowering<'m> {
    /// The model, its constants materialised.
    pub(super) model: &'m Model,
    /// Unique buffer names of its tensors.
    pub(super) names: Vec<String>,
    /// Arena offsets of the plan.
    offsets: &'m [Option<u64>],
    /// Storage offsets of the storage tensors.
    storage: Vec<Option<u64>>,
    /// Bytes of the storage region.
    pub(super) storage_bytes: u64,
    /// Which operator writes each tensor.
    producers: Vec<Option<usize>>,
    /// Program tensor index per model tensor, created on first use.
    pub(super) map: Vec<Option<u32>>,
    /// The program's tensor table.
    pub(super) tensors: Vec<ProgramTensor>,
    /// Seeds constants the model lacks and the graph inputs.
    pub(super) rng: Rng,
}

impl<'m> Lowering<'m> {
    /// A lowering of `model` placed at `offsets`, seeded with `seed`.
    pub(super) fn new(model: &'m Model, offsets: &'m [Option<u64>], seed: u64) -> Self {
        let (storage, storage_bytes) = storage_layout(model);
        Lowering {
            model,
            names: model.tensor_names(),
            offsets,
            storage,
            storage_bytes,
            producers: model.producers(),
            map: vec![None; model.tensors.len()],
            tensors: Vec::new(),
            rng: stream(seed),
        }
    }

    /// The error of operator `op`.
    pub(super) fn fail(&self, op: usize, reason: String) -> LowerError {
        LowerError {
            op,
            kind: LowerSubject::Operator(self.model.ops[op].kind),
            reason,
        }
    }

    /// Whether tensor `t` is a SOFTMAX output (TFLM fixes its quantisation).
    fn is_softmax_out(&self, t: usize) -> bool {
        self.producers[t].is_some_and(|p| self.model.ops[p].kind == OpKind::Softmax)
    }

    /// The program tensor of activation `t` (in the arena or in storage),
    /// created on first use; `op` is who asks, for errors.
    pub(super) fn arena_tensor(&mut self, t: usize, op: usize) -> Result<u32, LowerError> {
        if let Some(i) = self.map[t] {
            return Ok(i);
        }
        let m = &self.model.tensors[t];
        let d = program_dtype(m.dtype)
            .ok_or_else(|| self.fail(op, format!("tensor `{}` has type {}", m.name, m.dtype)))?;
        let data = match self.storage[t] {
            Some(offset) => TensorData::Storage { offset },
            None => TensorData::Arena {
                offset: self.offsets.get(t).copied().flatten().ok_or_else(|| {
                    self.fail(op, format!("tensor `{}` has no place in the plan", m.name))
                })?,
            },
        };
        let (_, zp) = act_q(m, self.is_softmax_out(t));
        let i = self.push(ProgramTensor {
            name: self.names[t].clone(),
            dtype: d,
            dims: dims_of(m),
            zero_point: zp,
            data,
        });
        self.map[t] = Some(i);
        Ok(i)
    }

    /// Appends a tensor to the program; its index.
    pub(super) fn push(&mut self, t: ProgramTensor) -> u32 {
        self.tensors.push(t);
        self.tensors.len() as u32 - 1
    }
}

/// A tensor's dimensions in the program: a scalar is `[1]`.
pub(super) fn dims_of(t: &Tensor) -> Vec<u32> {
    if t.shape.is_empty() {
        vec![1]
    } else {
        t.shape.clone()
    }
}

/// One operator being lowered: its data input and output, their
/// quantisation, and the operator record's fields as they are filled.
pub(super) struct OpLowering<'m> {
    /// Index of the operator in the model.
    pub(super) index: usize,
    /// The operator.
    pub(super) op: &'m Op,
    /// Its data input ([`Op::data_input`]).
    pub(super) x: &'m Tensor,
    /// Its (first) output.
    pub(super) y: &'m Tensor,
    /// The kernel's element type (the input's).
    pub(super) dtype: Dtype,
    /// Scale and zero point of the input.
    pub(super) sx: f64,
    pub(super) zx: i32,
    /// Scale and zero point of the output.
    pub(super) sy: f64,
    pub(super) zy: i32,
    /// The record's parameters.
    pub(super) params: OpParams,
    /// Activation inputs (program tensor indices), the data input first.
    pub(super) inputs: Vec<u32>,
    /// Weights tensor, if any.
    pub(super) weights: Option<u32>,
    /// Bias tensor, if any.
    pub(super) bias: Option<u32>,
    /// Per-channel (multiplier, shift) of the output rescaling.
    pub(super) per_channel: Vec<(i32, i32)>,
    /// The output's program tensor.
    pub(super) output: u32,
}

impl<'m> OpLowering<'m> {
    /// Starts operator `index`: its input and output tensors made, their
    /// quantisation read and the parameters every kernel shares set (window,
    /// offsets, the fused activation's clamp).
    pub(super) fn start(cx: &mut Lowering<'m>, index: usize) -> Result<Self, LowerError> {
        let model = cx.model;
        let op = &model.ops[index];
        let x = op
            .data_input()
            .ok_or_else(|| cx.fail(index, "no input".into()))?;
        let y = *op
            .outputs
            .first()
            .ok_or_else(|| cx.fail(index, "no output".into()))?;
        let (xt, yt) = (&model.tensors[x], &model.tensors[y]);
        let dtype = program_dtype(xt.dtype)
            .filter(|d| *d != Dtype::Int32)
            .ok_or_else(|| cx.fail(index, format!("input type {}", xt.dtype)))?;
        let xi = cx.arena_tensor(x, index)?;
        let yi = cx.arena_tensor(y, index)?;
        let (sx, zx) = act_q(xt, false);
        let (sy, zy) = act_q(yt, op.kind == OpKind::Softmax);
        let mut params = OpParams {
            stride_h: op.options.stride.0 as i32,
            stride_w: op.options.stride.1 as i32,
            dilation_h: op.options.dilation.0 as i32,
            dilation_w: op.options.dilation.1 as i32,
            depth_multiplier: op.options.depth_multiplier as i32,
            input_offset: -zx,
            output_offset: zy,
            beta: 1.0,
            ..OpParams::default()
        };
        (params.act_min, params.act_max) = act_range(op.options.activation, yt.dtype, sy, zy);
        (params.float_min, params.float_max) = float_range(op.options.activation);
        Ok(OpLowering {
            index,
            op,
            x: xt,
            y: yt,
            dtype,
            sx,
            zx,
            sy,
            zy,
            params,
            inputs: vec![xi],
            weights: None,
            bias: None,
            per_channel: Vec::new(),
            output: yi,
        })
    }

    /// Whether the kernel is quantised (not float32).
    pub(super) fn quantized(&self) -> bool {
        self.dtype != Dtype::Float32
    }
}
