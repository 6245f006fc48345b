//! TinySeg's operators in a `.tflite`: custom operators (`MEMTRACE_SPILL`,
//! `MEMTRACE_SPILL_KEEP`, `MEMTRACE_FETCH`, `MEMTRACE_FETCH_CONCAT`,
//! `MEMTRACE_FETCH_CONV_2D`; [`OpKind::custom_code`]) that the TFLM runner
//! registers (`harness-c/tflm/storage_ops.cc`), with their custom options
//! (`memtrace_tflm.h`, `TFLM_STORAGE_WORD_*`).
//!
//! A storage tensor is not written as a TFLite tensor: TFLM plans every
//! tensor an operator reads or writes in its arena, which is exactly what
//! spilling avoids, and a constant placeholder would put the bytes in the
//! model (flash) and make TFLM treat them as read-only. The tensor lives in a
//! slot of the runner's storage region instead, and the custom options of
//! the SPILL that writes it and of the fetching operator that reads it name
//! the slot (offset and bytes, [`storage_layout`]) and describe the tensor
//! (type, shape, quantisation), so that [`attach_storage`] rebuilds it on
//! import.

use memtrace_abi::runner::*;

use crate::schema::tflite as fb;
use crate::spill_ops::storage_layout;
use crate::{
    Activation, Dtype, Model, ModelError, Op, OpKind, OpOptions, Padding, Quantization, Tensor,
};

/// The custom options of a TinySeg operator: one little-endian word per
/// `TFLM_STORAGE_WORD_*`.
type Words = [i32; TFLM_STORAGE_WORDS];

/// What the exporter writes for model `model`: each storage tensor's slot.
pub(crate) struct Slots(Vec<Option<u64>>);

impl Slots {
    /// Every storage tensor of `model` in its own slot.
    pub(crate) fn of(model: &Model) -> Slots {
        Slots(storage_layout(model).0)
    }
}

/// The TFLite operands of `op` (its inputs and outputs without the storage
/// tensor, which the custom options name instead).
pub(crate) fn tflite_operands(model: &Model, op: &Op) -> (Vec<usize>, Vec<usize>) {
    let arena = |ts: &[usize]| -> Vec<usize> {
        ts.iter()
            .copied()
            .filter(|&t| !model.tensors[t].in_storage)
            .collect()
    };
    (arena(&op.inputs), arena(&op.outputs))
}

/// The custom options of TinySeg operator `op` (`None` for SPILL_KEEP, which
/// has none); an error names what the TFLM runner cannot express.
pub(crate) fn custom_options(
    model: &Model,
    op: &Op,
    slots: &Slots,
) -> Result<Option<Vec<u8>>, String> {
    let stored: Vec<usize> = op
        .inputs
        .iter()
        .chain(&op.outputs)
        .copied()
        .filter(|&t| model.tensors[t].in_storage)
        .collect();
    if op.kind == OpKind::SpillKeep {
        return Ok(None);
    }
    let &[s] = stored.as_slice() else {
        return Err(format!(
            "reads or writes {} storage tensors; the TFLM runner's storage operators take one",
            stored.len()
        ));
    };
    let mut w = stored_words(&model.tensors[s], slots.0[s])?;
    match op.kind {
        OpKind::Spill => {
            let x = &model.tensors[op.inputs[0]];
            w[TFLM_STORAGE_WORD_FROM] = word(x.bytes - model.tensors[s].bytes, "spill offset")?;
        }
        OpKind::Fetch => {}
        OpKind::FetchConcat => {
            let parts: Vec<&Tensor> = op.inputs.iter().map(|&t| &model.tensors[t]).collect();
            let (axis, _) = crate::concat_dims(&parts, op.options.axis)?;
            concat_words(&mut w, &op.inputs, s, axis)?;
        }
        OpKind::FetchConv2d => {
            let parts = model.fetch_conv_parts(op)?;
            concat_words(&mut w, &parts.activations, s, parts.axis)?;
            conv_words(&mut w, &op.options);
        }
        other => return Err(format!("{} is no storage operator", other.tflite_name())),
    }
    Ok(Some(w.iter().flat_map(|v| v.to_le_bytes()).collect()))
}

fn word(v: u64, what: &str) -> Result<i32, String> {
    i32::try_from(v).map_err(|_| format!("{what} {v} does not fit a 32-bit word"))
}

/// The words that describe the stored tensor and its slot.
fn stored_words(t: &Tensor, slot: Option<u64>) -> Result<Words, String> {
    let mut w = [0i32; TFLM_STORAGE_WORDS];
    let slot = slot.ok_or_else(|| format!("storage tensor `{}` has no slot", t.name))?;
    if t.shape.len() > 4 {
        return Err(format!(
            "storage tensor `{}` has more than 4 dimensions",
            t.name
        ));
    }
    w[TFLM_STORAGE_WORD_VERSION] = TFLM_STORAGE_VERSION;
    w[TFLM_STORAGE_WORD_OFFSET] = word(slot, "storage offset")?;
    w[TFLM_STORAGE_WORD_BYTES] = word(t.bytes, "stored bytes")?;
    w[TFLM_STORAGE_WORD_TYPE] = crate::codes::tensor_type(t.dtype) as i32;
    w[TFLM_STORAGE_WORD_RANK] = t.shape.len() as i32;
    for (k, &d) in t.shape.iter().enumerate() {
        w[TFLM_STORAGE_WORD_DIMS + k] = word(d as u64, "dimension")?;
    }
    if let Some(q) = &t.quantization {
        w[TFLM_STORAGE_WORD_SCALE] = q.scale.first().copied().unwrap_or(0.0).to_bits() as i32;
        w[TFLM_STORAGE_WORD_ZERO_POINT] = q.zero_point.first().copied().unwrap_or(0) as i32;
    }
    Ok(w)
}

/// The concatenation of `parts` along `axis`, storage tensor `s` among them.
fn concat_words(w: &mut Words, parts: &[usize], s: usize, axis: usize) -> Result<(), String> {
    let position = parts
        .iter()
        .position(|&t| t == s)
        .ok_or("the storage tensor is not one of the concatenated parts")?;
    if !(1..=2).contains(&parts.len()) {
        return Err(format!(
            "concatenates {} parts (1 or 2 supported)",
            parts.len()
        ));
    }
    w[TFLM_STORAGE_WORD_AXIS] = axis as i32;
    w[TFLM_STORAGE_WORD_PARTS] = parts.len() as i32;
    w[TFLM_STORAGE_WORD_POSITION] = position as i32;
    Ok(())
}

/// The convolution's parameters, with the schema's codes.
fn conv_words(w: &mut Words, o: &OpOptions) {
    w[TFLM_STORAGE_WORD_PADDING] = match o.padding {
        Padding::Same => fb::Padding::Same as i32,
        Padding::Valid => fb::Padding::Valid as i32,
    };
    w[TFLM_STORAGE_WORD_STRIDE_W] = o.stride.1 as i32;
    w[TFLM_STORAGE_WORD_STRIDE_H] = o.stride.0 as i32;
    w[TFLM_STORAGE_WORD_DILATION_W] = o.dilation.1 as i32;
    w[TFLM_STORAGE_WORD_DILATION_H] = o.dilation.0 as i32;
    w[TFLM_STORAGE_WORD_ACTIVATION] = crate::codes::act(o.activation) as i32;
}

/// Decodes custom options `bytes` of operator `i`.
pub(crate) fn decode(bytes: Option<&[u8]>, i: usize) -> Result<Words, ModelError> {
    let bad = |why: &str| ModelError::Invalid(format!("operator {i}: custom options {why}"));
    let bytes = bytes.ok_or_else(|| bad("are missing"))?;
    if bytes.len() != TFLM_STORAGE_WORDS * 4 {
        return Err(bad(&format!(
            "have {} bytes, not {}",
            bytes.len(),
            TFLM_STORAGE_WORDS * 4
        )));
    }
    let mut w = [0i32; TFLM_STORAGE_WORDS];
    for (k, c) in bytes.chunks_exact(4).enumerate() {
        w[k] = i32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
    if w[TFLM_STORAGE_WORD_VERSION] != TFLM_STORAGE_VERSION {
        return Err(bad(&format!(
            "are of layout version {}, not {TFLM_STORAGE_VERSION}",
            w[TFLM_STORAGE_WORD_VERSION]
        )));
    }
    Ok(w)
}

/// After import: gives every TinySeg operator its storage tensor back (one
/// per slot, named after the spilled tensor as the transformation names it)
/// and a FETCH_CONV_2D its convolution options. `words[i]` are operator
/// `i`'s decoded custom options.
pub(crate) fn attach_storage(
    tensors: &mut Vec<Tensor>,
    ops: &mut [Op],
    words: &[Option<Words>],
) -> Result<(), ModelError> {
    let mut by_slot: Vec<(i32, usize)> = Vec::new();
    for (i, (op, w)) in ops.iter_mut().zip(words).enumerate() {
        let Some(w) = w else { continue };
        let slot = w[TFLM_STORAGE_WORD_OFFSET];
        let s = match by_slot.iter().find(|(o, _)| *o == slot) {
            Some(&(_, s)) => s,
            None => {
                let named = op.inputs.first().map(|&t| tensors[t].name.clone());
                tensors.push(stored_tensor(w, named, i)?);
                by_slot.push((slot, tensors.len() - 1));
                tensors.len() - 1
            }
        };
        match op.kind {
            OpKind::Spill => op.outputs.insert(0, s),
            OpKind::Fetch => op.inputs.insert(0, s),
            OpKind::FetchConcat | OpKind::FetchConv2d => {
                let at = w[TFLM_STORAGE_WORD_POSITION] as usize;
                if at > op.inputs.len() {
                    return Err(ModelError::Invalid(format!(
                        "operator {i}: storage part {at} of {} inputs",
                        op.inputs.len()
                    )));
                }
                op.inputs.insert(at, s);
                op.options.axis = Some(w[TFLM_STORAGE_WORD_AXIS]);
                if op.kind == OpKind::FetchConv2d {
                    op.options = conv_options(w, op.options.axis);
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// The storage tensor the words describe; `spilled` is the SPILL's input,
/// whose name it takes (`NAME/spilled`).
fn stored_tensor(w: &Words, spilled: Option<String>, i: usize) -> Result<Tensor, ModelError> {
    let bad = |why: String| ModelError::Invalid(format!("operator {i}: {why}"));
    let code = i8::try_from(w[TFLM_STORAGE_WORD_TYPE])
        .ok()
        .and_then(|c| fb::TensorType::try_from(c).ok())
        .ok_or_else(|| bad(format!("stored type {}", w[TFLM_STORAGE_WORD_TYPE])))?;
    let dtype: Dtype = crate::codes::dtype(code)
        .ok_or_else(|| bad(format!("stored type {code:?} is not supported")))?;
    let rank = w[TFLM_STORAGE_WORD_RANK];
    if !(0..=4).contains(&rank) {
        return Err(bad(format!("stored rank {rank}")));
    }
    let shape = w[TFLM_STORAGE_WORD_DIMS..TFLM_STORAGE_WORD_DIMS + rank as usize]
        .iter()
        .map(|&d| u32::try_from(d).map_err(|_| bad(format!("stored dimension {d}"))))
        .collect::<Result<Vec<u32>, _>>()?;
    let bytes = shape.iter().map(|&d| d as u64).product::<u64>() * dtype.size();
    if bytes != w[TFLM_STORAGE_WORD_BYTES] as u64 {
        return Err(bad(format!(
            "a slot of {} bytes holds a stored tensor of {bytes}",
            w[TFLM_STORAGE_WORD_BYTES]
        )));
    }
    let scale = f32::from_bits(w[TFLM_STORAGE_WORD_SCALE] as u32);
    Ok(Tensor {
        name: match spilled {
            Some(n) => format!("{n}/spilled"),
            None => format!("storage@{}", w[TFLM_STORAGE_WORD_OFFSET]),
        },
        shape,
        dtype,
        bytes,
        is_constant: false,
        is_variable: false,
        quantization: (scale != 0.0).then(|| Quantization {
            scale: vec![scale],
            zero_point: vec![w[TFLM_STORAGE_WORD_ZERO_POINT] as i64],
            quantized_dimension: 0,
        }),
        data: None,
        in_storage: true,
    })
}

fn conv_options(w: &Words, axis: Option<i32>) -> OpOptions {
    let activation = match w[TFLM_STORAGE_WORD_ACTIVATION] {
        1 => Activation::Relu,
        2 => Activation::ReluN1To1,
        3 => Activation::Relu6,
        4 => Activation::Tanh,
        5 => Activation::SignBit,
        _ => Activation::None,
    };
    let at_least_one = |v: i32| v.max(1) as u32;
    OpOptions {
        padding: if w[TFLM_STORAGE_WORD_PADDING] == fb::Padding::Valid as i32 {
            Padding::Valid
        } else {
            Padding::Same
        },
        stride: (
            at_least_one(w[TFLM_STORAGE_WORD_STRIDE_H]),
            at_least_one(w[TFLM_STORAGE_WORD_STRIDE_W]),
        ),
        dilation: (
            at_least_one(w[TFLM_STORAGE_WORD_DILATION_H]),
            at_least_one(w[TFLM_STORAGE_WORD_DILATION_W]),
        ),
        activation,
        axis,
        ..OpOptions::default()
    }
}

#[cfg(test)]
mod tests {
    use crate::export::{materialize, to_tflite_indexed};
    use crate::planner::Overlaps;
    use crate::tinyseg::{optimize, TinysegOptions};
    use crate::zoo::GraphBuilder;
    use crate::{tflite, Activation, Dtype, OpKind};

    /// A skip connection `s` idle across three convolutions, concatenated
    /// with their result and convolved: TinySeg spills `s` and fuses its
    /// fetch into the concatenation and the convolution.
    fn skip_concat() -> crate::Model {
        let mut g = GraphBuilder::new("skip_concat", Dtype::Int8);
        let x = g.input("input", &[1, 16, 16, 1]);
        let s = g.conv2d("s", x, 4, 3, 1, Activation::Relu);
        let a = g.conv2d("a", s, 4, 3, 1, Activation::Relu);
        let b = g.conv2d("b", a, 4, 3, 1, Activation::Relu);
        let c = g.conv2d("c", b, 8, 3, 1, Activation::Relu);
        let y = g.concat_channels("y", &[s, c]);
        let z = g.conv2d("z", y, 8, 1, 1, Activation::None);
        materialize(&g.finish(&[z]), 1)
    }

    #[test]
    fn a_transformed_model_round_trips_through_the_custom_operators() {
        let model = skip_concat();
        let o = optimize(&model, &Overlaps::none(&model), &TinysegOptions::default()).unwrap();
        let m = &o.graph.model;
        let kinds: Vec<OpKind> = m.ops.iter().map(|op| op.kind).collect();
        assert!(kinds.contains(&OpKind::Spill) && kinds.contains(&OpKind::FetchConv2d));
        let (bytes, index) = to_tflite_indexed(m).unwrap();
        // The storage tensor and the concatenation nothing reads any more
        // are no tensors of the file.
        for (t, i) in index.iter().enumerate() {
            let unused = !m.ops.iter().any(|op| op.inputs.contains(&t));
            let dropped = m.tensors[t].in_storage || (unused && !m.outputs.contains(&t));
            assert_eq!(i.is_none(), dropped, "{}", m.tensors[t].name);
        }
        let back = tflite::import_bytes(&m.name, &bytes).unwrap();
        assert_eq!(back.ops.iter().map(|op| op.kind).collect::<Vec<_>>(), kinds);
        // The storage tensor comes back from the custom options, named and
        // shaped as the transformation made it, read and written by the
        // same operators.
        let stored = |m: &crate::Model| -> Vec<(String, Vec<u32>, usize)> {
            m.tensors
                .iter()
                .enumerate()
                .filter(|(_, t)| t.in_storage)
                .map(|(i, t)| {
                    let users = m
                        .ops
                        .iter()
                        .filter(|op| op.inputs.contains(&i) || op.outputs.contains(&i))
                        .count();
                    (t.name.clone(), t.shape.clone(), users)
                })
                .collect()
        };
        assert_eq!(stored(&back), stored(m));
        assert_eq!(
            stored(&back),
            [("s/spilled".to_string(), vec![1, 16, 16, 4], 2)]
        );
        let fused = |m: &crate::Model| {
            m.ops
                .iter()
                .find(|op| op.kind == OpKind::FetchConv2d)
                .map(|op| (op.options.axis, op.options.stride, op.options.padding))
        };
        assert_eq!(fused(&back), fused(m));
        // A second export of the imported model is the same file.
        assert!(crate::export::to_tflite(&back).unwrap() == bytes);
    }
}
