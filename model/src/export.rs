//! `memtrace zoo export`: a [`Model`] as a `.tflite` flatbuffer, written with
//! the code generated from TensorFlow's official schema (no hand-written
//! flatbuffer code). Zoo models are first [`materialize`]d: the seeded
//! weights, biases and int8 quantisation `memtrace verify` runs them with.

use crate::codes::{act, tensor_type};
use crate::schema::tflite as fb;
use crate::{Model, OpKind, Padding, Quantization};

pub use crate::synth::materialize;

/// The TFLite builtin of `k`; `None` for `Other`, whose builtin memtrace
/// does not keep (only the TFLM runtime runs such a model, from its own
/// file). TinySeg's operators are `CUSTOM` with their custom code.
fn builtin(k: OpKind) -> Option<fb::BuiltinOperator> {
    if k.custom_code().is_some() {
        return Some(fb::BuiltinOperator::Custom);
    }
    fb::BuiltinOperator::try_from(k.builtin_code()?).ok()
}

fn padding(p: Padding) -> fb::Padding {
    match p {
        Padding::Same => fb::Padding::Same,
        Padding::Valid => fb::Padding::Valid,
    }
}

fn quant(q: &Quantization) -> fb::QuantizationParameters {
    fb::QuantizationParameters {
        scale: Some(q.scale.clone()),
        zero_point: Some(q.zero_point.clone()),
        quantized_dimension: q.quantized_dimension,
        ..Default::default()
    }
}

/// Serialises `model` (its first subgraph only; constants need data).
///
/// TinySeg's operators become the TFLM runner's custom operators
/// (`crate::tflite_storage`): their storage tensors are not written as
/// tensors, and neither are scratch tensors (TFLM's kernels request their
/// scratch themselves).
pub fn to_tflite(model: &Model) -> Result<Vec<u8>, crate::ModelError> {
    Ok(to_tflite_indexed(model)?.0)
}

/// [`to_tflite`] and, per tensor of `model`, its index in the file (`None`
/// for the storage and scratch tensors it leaves out): what maps a plan of
/// `model` onto the file's tensors.
pub fn to_tflite_indexed(
    model: &Model,
) -> Result<(Vec<u8>, Vec<Option<usize>>), crate::ModelError> {
    serialise(model).map_err(crate::ModelError::Invalid)
}

/// Per tensor, its index in the file: every tensor an operator or the
/// graph uses, but the storage and scratch tensors. A tensor nothing uses
/// any more (the concatenation a FETCH_CONV_2D no longer materialises) is
/// left out too: TFLM would still give it arena bytes.
fn file_indices(model: &Model) -> Vec<Option<usize>> {
    let mut used = vec![false; model.tensors.len()];
    for op in &model.ops {
        for &t in op.inputs.iter().chain(&op.outputs) {
            used[t] = true;
        }
    }
    for &t in model.inputs.iter().chain(&model.outputs) {
        used[t] = true;
    }
    let mut next = 0;
    (0..model.tensors.len())
        .map(|t| {
            let written = used[t] && !model.tensors[t].in_storage;
            written.then(|| {
                next += 1;
                next - 1
            })
        })
        .collect()
}

fn serialise(model: &Model) -> Result<(Vec<u8>, Vec<Option<usize>>), String> {
    let index = file_indices(model);
    let remap = |ts: &[usize], what: &str| -> Result<Vec<i32>, String> {
        ts.iter()
            .map(|&t| {
                index[t].map(|i| i as i32).ok_or_else(|| {
                    format!("{what} `{}` is a storage tensor", model.tensors[t].name)
                })
            })
            .collect()
    };
    // Buffer 0 is TFLite's empty sentinel; every constant gets its own.
    let mut buffers = vec![fb::Buffer { data: None }];
    let mut tensors = Vec::new();
    for (t, _) in index.iter().enumerate().filter(|(_, i)| i.is_some()) {
        let t = &model.tensors[t];
        let buffer = if t.is_constant {
            let data = t
                .data
                .clone()
                .ok_or_else(|| format!("constant tensor `{}` has no data", t.name))?;
            buffers.push(fb::Buffer { data: Some(data) });
            buffers.len() as u32 - 1
        } else {
            0
        };
        tensors.push(fb::Tensor {
            shape: Some(t.shape.iter().map(|&d| d as i32).collect()),
            type_: tensor_type(t.dtype),
            buffer,
            name: Some(t.name.clone()),
            quantization: t.quantization.as_ref().map(|q| Box::new(quant(q))),
            is_variable: t.is_variable,
            ..Default::default()
        });
    }
    let slots = crate::tflite_storage::Slots::of(model);
    let mut codes: Vec<(fb::BuiltinOperator, Option<&str>)> = Vec::new();
    let mut operators = Vec::new();
    for (i, op) in model.ops.iter().enumerate() {
        let what = |why: String| format!("operator {i} ({}) {why}", op.kind.tflite_name());
        let code = (
            builtin(op.kind).ok_or_else(|| what("has no TFLite operator".into()))?,
            op.kind.custom_code(),
        );
        let index = match codes.iter().position(|&c| c == code) {
            Some(i) => i,
            None => {
                codes.push(code);
                codes.len() - 1
            }
        };
        let (inputs, outputs) = crate::tflite_storage::tflite_operands(model, op);
        let custom_options = match op.kind.custom_code() {
            Some(_) => crate::tflite_storage::custom_options(model, op, &slots).map_err(what)?,
            None => None,
        };
        operators.push(fb::Operator {
            opcode_index: index as u32,
            inputs: Some(remap(&inputs, "input")?),
            outputs: Some(remap(&outputs, "output")?),
            builtin_options: builtin_options(model, op),
            custom_options,
            ..Default::default()
        });
    }
    let operator_codes = codes
        .into_iter()
        .map(|(c, custom)| fb::OperatorCode {
            deprecated_builtin_code: (c as i32).min(127) as i8,
            custom_code: custom.map(str::to_string),
            version: 1,
            builtin_code: c,
        })
        .collect();
    let m = fb::Model {
        version: 3,
        operator_codes: Some(operator_codes),
        subgraphs: Some(vec![fb::SubGraph {
            tensors: Some(tensors),
            inputs: Some(remap(&model.inputs, "graph input")?),
            outputs: Some(remap(&model.outputs, "graph output")?),
            operators: Some(operators),
            name: Some("main".into()),
        }]),
        description: Some(format!("{} (exported by memtrace)", model.name)),
        buffers: Some(buffers),
        ..Default::default()
    };
    Ok((flatbuffer(&m), index))
}

/// The `.tflite` bytes of a model in TFLite's schema (its generated object
/// API, [`crate::schema::tflite`]), with the standard `TFL3` identifier.
pub fn flatbuffer(m: &fb::Model) -> Vec<u8> {
    let mut builder = planus::Builder::new();
    let mut bytes = builder.finish(m, Some(*b"TFL3")).to_vec();
    // planus (1.x) builds back to front and writes the file identifier
    // *after* the root offset, so the identifier lands in bytes 0..4 and the
    // root offset (relative to its own position, 4) in 4..8. The standard
    // layout is the offset at 0, then the identifier: swap the two words
    // and make the offset relative to position 0.
    if bytes.len() >= 8 && &bytes[0..4] == b"TFL3" {
        let off = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]) + 4;
        bytes[0..4].copy_from_slice(&off.to_le_bytes());
        bytes[4..8].copy_from_slice(b"TFL3");
    }
    bytes
}

/// The builtin options of `op`, as TFLite's schema writes them per operator.
fn builtin_options(model: &Model, op: &crate::Op) -> Option<fb::BuiltinOptions> {
    let o = &op.options;
    match op.kind {
        OpKind::Conv2d => Some(fb::BuiltinOptions::Conv2DOptions(Box::new(
            fb::Conv2DOptions {
                padding: padding(o.padding),
                stride_w: o.stride.1 as i32,
                stride_h: o.stride.0 as i32,
                fused_activation_function: act(o.activation),
                dilation_w_factor: o.dilation.1 as i32,
                dilation_h_factor: o.dilation.0 as i32,
            },
        ))),
        OpKind::DepthwiseConv2d => Some(fb::BuiltinOptions::DepthwiseConv2DOptions(Box::new(
            fb::DepthwiseConv2DOptions {
                padding: padding(o.padding),
                stride_w: o.stride.1 as i32,
                stride_h: o.stride.0 as i32,
                depth_multiplier: o.depth_multiplier as i32,
                fused_activation_function: act(o.activation),
                dilation_w_factor: o.dilation.1 as i32,
                dilation_h_factor: o.dilation.0 as i32,
            },
        ))),
        OpKind::MaxPool | OpKind::AveragePool => Some(fb::BuiltinOptions::Pool2DOptions(Box::new(
            fb::Pool2DOptions {
                padding: padding(o.padding),
                stride_w: o.stride.1 as i32,
                stride_h: o.stride.0 as i32,
                filter_width: o.filter.1 as i32,
                filter_height: o.filter.0 as i32,
                fused_activation_function: act(o.activation),
            },
        ))),
        OpKind::FullyConnected => Some(fb::BuiltinOptions::FullyConnectedOptions(Box::new(
            fb::FullyConnectedOptions {
                fused_activation_function: act(o.activation),
                ..Default::default()
            },
        ))),
        OpKind::Softmax => Some(fb::BuiltinOptions::SoftmaxOptions(Box::new(
            fb::SoftmaxOptions { beta: 1.0 },
        ))),
        OpKind::Reshape => {
            let y = &model.tensors[op.outputs[0]];
            Some(fb::BuiltinOptions::ReshapeOptions(Box::new(
                fb::ReshapeOptions {
                    new_shape: Some(y.shape.iter().map(|&d| d as i32).collect()),
                },
            )))
        }
        OpKind::TransposeConv => Some(fb::BuiltinOptions::TransposeConvOptions(Box::new(
            fb::TransposeConvOptions {
                padding: padding(o.padding),
                stride_w: o.stride.1 as i32,
                stride_h: o.stride.0 as i32,
                fused_activation_function: act(o.activation),
            },
        ))),
        OpKind::Concatenation => Some(fb::BuiltinOptions::ConcatenationOptions(Box::new(
            fb::ConcatenationOptions {
                axis: o.axis.unwrap_or(-1),
                fused_activation_function: act(o.activation),
            },
        ))),
        OpKind::Add => Some(fb::BuiltinOptions::AddOptions(Box::new(fb::AddOptions {
            fused_activation_function: act(o.activation),
            ..Default::default()
        }))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{tflite, zoo};

    #[test]
    fn exported_zoo_models_import_back_with_their_data_and_quantisation() {
        for name in [
            "mobilenet_v1_0.25_128_int8",
            "sakr_cifar10",
            "mobilenet_v1_0.25_128",
            "tiny_unet_80x120_int8",
        ] {
            let m = materialize(&zoo::build(name).unwrap(), 7);
            let bytes = to_tflite(&m).unwrap();
            assert_eq!(&bytes[4..8], b"TFL3");
            let back = tflite::import_bytes(name, &bytes).unwrap();
            assert_eq!(back.ops.len(), m.ops.len(), "{name}");
            assert_eq!(back.inputs, m.inputs);
            assert_eq!(back.outputs, m.outputs);
            for (a, b) in back.ops.iter().zip(&m.ops) {
                assert_eq!(
                    (a.kind, &a.inputs, &a.outputs),
                    (b.kind, &b.inputs, &b.outputs)
                );
                assert_eq!(a.options.stride, b.options.stride);
                assert_eq!(a.options.activation, b.options.activation);
                assert_eq!(a.options.padding, b.options.padding);
                // Concatenation keeps its axis (TFLite's default would be 0).
                assert_eq!(a.options.axis, b.options.axis);
            }
            for (a, b) in back.tensors.iter().zip(&m.tensors) {
                assert_eq!((&a.name, &a.shape, a.dtype), (&b.name, &b.shape, b.dtype));
                assert_eq!(a.is_constant, b.is_constant, "{}", a.name);
                assert_eq!(a.data, b.data, "{}", a.name);
                assert_eq!(
                    a.quantization.as_ref().map(|q| (&q.scale, &q.zero_point)),
                    b.quantization.as_ref().map(|q| (&q.scale, &q.zero_point)),
                    "{}",
                    a.name
                );
            }
        }
    }
}
