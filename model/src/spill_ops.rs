//! The operators TinySeg's graph transformation adds ([`OpKind::is_tinyseg`])
//! and the storage tensors they move: what makes them well formed.
//!
//! A storage tensor ([`Tensor::in_storage`]) is written by exactly one
//! `SPILL` and read only by the fetching operators (`FETCH`, `FETCH_CONCAT`,
//! `FETCH_CONV_2D`); it is never a graph input or output. Every other tensor
//! these operators write is an ordinary arena tensor.

use super::{concat_dims, Model, Op, OpKind, Tensor};

/// Alignment of every storage slot.
const STORAGE_ALIGN: u64 = 16;

/// Where each storage tensor ([`Tensor::in_storage`](crate::Tensor::in_storage))
/// lies in the storage region — every one in its own slot,
/// `STORAGE_ALIGN`-aligned, in tensor order — and the bytes the region needs.
pub fn storage_layout(model: &Model) -> (Vec<Option<u64>>, u64) {
    let mut end = 0u64;
    let offsets = model
        .tensors
        .iter()
        .map(|t| {
            t.in_storage.then(|| {
                let at = end;
                end = (end + t.bytes).div_ceil(STORAGE_ALIGN) * STORAGE_ALIGN;
                at
            })
        })
        .collect();
    (offsets, end)
}

/// The operands of a `FETCH_CONV_2D`: the activations it concatenates (one
/// or two tensor indices, in concatenation order), the filter and the bias.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchConvParts {
    /// Leading non-constant inputs, concatenated along the op's axis.
    pub activations: Vec<usize>,
    /// The filter tensor.
    pub filter: usize,
    /// The bias tensor, if any.
    pub bias: Option<usize>,
    /// The concatenation axis, made non-negative.
    pub axis: usize,
    /// Shape of the concatenated input the convolution reads.
    pub input_shape: Vec<u32>,
}

impl Model {
    /// The operands of `FETCH_CONV_2D` operator `op` and the shape of the
    /// input it convolves, or why they do not fit together.
    pub fn fetch_conv_parts(&self, op: &Op) -> Result<FetchConvParts, String> {
        let n_acts = op
            .inputs
            .iter()
            .take_while(|&&t| self.tensors.get(t).is_some_and(|t| !t.is_constant))
            .count();
        if !(1..=2).contains(&n_acts) {
            return Err(format!(
                "concatenates {n_acts} activation inputs (1 or 2 supported)"
            ));
        }
        let activations = op.inputs[..n_acts].to_vec();
        let filter = *op
            .inputs
            .get(n_acts)
            .ok_or("has no filter after its activation inputs")?;
        let bias = op.inputs.get(n_acts + 1).copied();
        if op.inputs.len() > n_acts + 2 {
            return Err(format!("has {} inputs", op.inputs.len()));
        }
        let acts: Vec<&Tensor> = activations.iter().map(|&t| &self.tensors[t]).collect();
        let (axis, dims) = concat_dims(&acts, op.options.axis.or(Some(-1)))?;
        let input_shape = dims
            .iter()
            .map(|&d| u32::try_from(d).map_err(|_| format!("dimension {d} is too large")))
            .collect::<Result<Vec<u32>, String>>()?;
        Ok(FetchConvParts {
            activations,
            filter,
            bias,
            axis,
            input_shape,
        })
    }

    /// Shape rules of the TinySeg operators (see [`OpKind`]); called by
    /// [`Model::check_shapes`].
    pub(crate) fn check_tinyseg_op(&self, op: &Op) -> Result<(), String> {
        let get = |t: usize| {
            self.tensors
                .get(t)
                .ok_or_else(|| format!("uses tensor {t}, but there are {}", self.tensors.len()))
        };
        let x = get(*op.inputs.first().ok_or("has no input")?)?;
        let y = get(*op.outputs.first().ok_or("has no output")?)?;
        let show = |t: &Tensor| format!("`{}` {:?}", t.name, t.shape);
        let same_type = |a: &Tensor, b: &Tensor| {
            if a.dtype == b.dtype {
                Ok(())
            } else {
                Err(format!(
                    "{} is {}, {} is {}",
                    show(a),
                    a.dtype,
                    show(b),
                    b.dtype
                ))
            }
        };
        match op.kind {
            OpKind::Spill | OpKind::SpillKeep => {
                same_type(x, y)?;
                if y.bytes == 0 || y.bytes > x.bytes {
                    return Err(format!(
                        "copies {} bytes of input {} ({} bytes)",
                        y.bytes,
                        show(x),
                        x.bytes
                    ));
                }
                Ok(())
            }
            OpKind::Fetch => {
                same_type(x, y)?;
                if x.shape != y.shape {
                    return Err(format!("fetches {} into {}", show(x), show(y)));
                }
                Ok(())
            }
            OpKind::FetchConcat => {
                let inputs = op
                    .inputs
                    .iter()
                    .map(|&t| get(t))
                    .collect::<Result<Vec<_>, _>>()?;
                for t in &inputs {
                    same_type(t, y)?;
                }
                let (axis, want) = concat_dims(&inputs, op.options.axis)?;
                let got: Vec<u64> = y.shape.iter().map(|&d| d as u64).collect();
                if got != want {
                    return Err(format!(
                        "output {} should be {want:?} (concatenation along axis {axis})",
                        show(y)
                    ));
                }
                Ok(())
            }
            OpKind::FetchConv2d => {
                let parts = self.fetch_conv_parts(op)?;
                self.as_conv2d(op, &parts).check_shapes().map_err(|e| {
                    let e = e.to_string();
                    // The stand-in's own operator index means nothing here.
                    e.split_once(": ").map_or(e.clone(), |(_, r)| r.to_string())
                })
            }
            _ => Ok(()),
        }
    }

    /// A one-operator model of the `CONV_2D` that `FETCH_CONV_2D` operator
    /// `op` computes (input = the concatenation it reads), for its shape
    /// rules. Tensor data is left out.
    fn as_conv2d(&self, op: &Op, parts: &FetchConvParts) -> Model {
        let meta = |t: usize| Tensor {
            data: None,
            ..self.tensors[t].clone()
        };
        let first = meta(parts.activations[0]);
        let input = Tensor {
            name: format!("{}+concatenated", first.name),
            shape: parts.input_shape.clone(),
            bytes: parts.input_shape.iter().map(|&d| d as u64).product::<u64>()
                * first.dtype.size(),
            in_storage: false,
            ..first
        };
        let mut tensors = vec![input, meta(parts.filter), meta(op.outputs[0])];
        let mut inputs = vec![0, 1];
        if let Some(b) = parts.bias {
            tensors.push(meta(b));
            inputs.push(3);
        }
        Model {
            name: self.name.clone(),
            tensors,
            ops: vec![Op {
                kind: OpKind::Conv2d,
                inputs,
                outputs: vec![2],
                options: op.options.clone(),
                scratch: None,
            }],
            inputs: vec![0],
            outputs: vec![2],
        }
    }

    /// Where storage tensors may appear: written by one `SPILL` (which writes
    /// nothing else), read only by fetching operators, never a graph input or
    /// output; and a fetching operator reads at least one of them.
    pub(crate) fn check_storage(&self) -> Result<(), String> {
        let stored = |t: usize| self.tensors[t].in_storage;
        for (list, what) in [
            (&self.inputs, "graph input"),
            (&self.outputs, "graph output"),
        ] {
            if let Some(&t) = list.iter().find(|&&t| stored(t)) {
                return Err(format!(
                    "{what} tensor {t} `{}` is a storage tensor",
                    self.tensors[t].name
                ));
            }
        }
        for (i, op) in self.ops.iter().enumerate() {
            let fetching = matches!(
                op.kind,
                OpKind::Fetch | OpKind::FetchConcat | OpKind::FetchConv2d
            );
            let fail = |why: String| Err(format!("operator {i} ({}) {why}", op.kind.tflite_name()));
            if let Some(&t) = op.inputs.iter().find(|&&t| stored(t) && !fetching) {
                return fail(format!(
                    "reads storage tensor `{}`; only fetching operators may",
                    self.tensors[t].name
                ));
            }
            if fetching && !op.inputs.iter().any(|&t| stored(t)) {
                return fail("reads no storage tensor".into());
            }
            for &t in op.outputs.iter().chain(&op.scratch) {
                if stored(t) != (op.kind == OpKind::Spill) {
                    return fail(format!(
                        "writes `{}`, {} storage tensor",
                        self.tensors[t].name,
                        if stored(t) { "a" } else { "not a" }
                    ));
                }
            }
        }
        Ok(())
    }
}
