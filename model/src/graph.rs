//! The operator graph of a `.tflite` as TensorFlow Lite Micro sees it:
//! every operator of subgraph 0 by TFLite's own name (any builtin or custom
//! operator, whether memtrace's planners know it or not), and every tensor's
//! name, type, shape and size.
//!
//! This is what a run on real TFLM needs from the file (inputs to generate,
//! names to report, tensor sizes to plan); [`super::tflite::import_bytes`]
//! builds the richer [`super::Model`] for operators memtrace lowers itself.

use serde::Serialize;

use super::codes::dtype;
use super::schema::tflite as fb;
use super::tflite::{builtin_name, fb_err, operator_code, operator_kind, read_options};
use super::{Dtype, ModelError, OpKind};

/// One tensor of subgraph 0.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GraphTensor {
    /// Its name in the model (may be empty).
    pub name: String,
    /// TFLite's type name (`INT8`, `UINT32`, ...).
    pub type_name: String,
    /// The element type when memtrace knows its size.
    #[serde(skip)]
    pub dtype: Option<Dtype>,
    /// Dimensions, outermost first.
    pub shape: Vec<i32>,
    /// Bytes of its data, when the type and shape fix them.
    pub bytes: Option<u64>,
    /// Holds constant data from the model's buffers.
    pub is_constant: bool,
    /// A TFLite variable tensor (state kept between invocations).
    pub is_variable: bool,
}

/// One operator of subgraph 0.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GraphOp {
    /// TFLite's name: `CONV_2D`, or a custom operator's code.
    pub name: String,
    /// Input tensor indices (-1: an omitted optional input).
    pub inputs: Vec<i32>,
    /// Output tensor indices.
    pub outputs: Vec<i32>,
}

/// Subgraph 0 of a `.tflite`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TfliteGraph {
    /// Tensors, in the model's order.
    pub tensors: Vec<GraphTensor>,
    /// Operators, in execution order.
    pub ops: Vec<GraphOp>,
    /// Graph input tensors.
    pub inputs: Vec<usize>,
    /// Graph output tensors.
    pub outputs: Vec<usize>,
    /// Subgraphs in the file (control-flow operators run the others).
    pub subgraphs: usize,
}

impl TfliteGraph {
    /// The tensor's name, or `tensor<N>` when it has none.
    pub fn tensor_name(&self, t: usize) -> String {
        match self.tensors.get(t) {
            Some(x) if !x.name.is_empty() => x.name.clone(),
            _ => format!("tensor{t}"),
        }
    }

    /// Distinct operator names, in first-use order.
    #[cfg(test)]
    pub(crate) fn op_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for op in &self.ops {
            if !names.contains(&op.name.as_str()) {
                names.push(&op.name);
            }
        }
        names
    }
}

/// Reads subgraph 0 of `.tflite` bytes; the whole file is verified first.
pub fn read_graph(bytes: &[u8]) -> Result<TfliteGraph, ModelError> {
    graph_of(crate::tflite::verified_root(bytes)?.0)
}

/// [`read_graph`] of a verified root.
pub(crate) fn graph_of(model: fb::ModelRef<'_>) -> Result<TfliteGraph, ModelError> {
    let subgraphs = model
        .subgraphs()
        .map_err(fb_err("model.subgraphs"))?
        .ok_or_else(|| ModelError::Invalid("the model has no subgraphs".into()))?;
    let graph = subgraphs
        .get(0)
        .ok_or_else(|| ModelError::Invalid("the model has no subgraphs".into()))?
        .map_err(fb_err("subgraph 0"))?;
    let codes = model
        .operator_codes()
        .map_err(fb_err("model.operator_codes"))?;
    let buffers = model.buffers().map_err(fb_err("model.buffers"))?;

    let mut tensors = Vec::new();
    if let Some(list) = graph.tensors().map_err(fb_err("subgraph 0 tensors"))? {
        for (i, t) in list.iter().enumerate() {
            let t = t.map_err(fb_err(format!("tensor {i}")))?;
            tensors.push(graph_tensor(i, &t, buffers)?);
        }
    }

    let mut ops = Vec::new();
    if let Some(list) = graph.operators().map_err(fb_err("subgraph 0 operators"))? {
        for (i, op) in list.iter().enumerate() {
            let op = op.map_err(fb_err(format!("operator {i}")))?;
            let code = operator_code(codes, &op, i)?;
            let name = operator_name(&code);
            let list = |v: Option<planus::Vector<'_, i32>>| -> Vec<i32> {
                v.map(|v| v.iter().collect()).unwrap_or_default()
            };
            let graph_op = GraphOp {
                name,
                inputs: list(
                    op.inputs()
                        .map_err(fb_err(format!("operator {i} inputs")))?,
                ),
                outputs: list(
                    op.outputs()
                        .map_err(fb_err(format!("operator {i} outputs")))?,
                ),
            };
            check_options(&op, &code, i, &graph_op, &tensors)?;
            ops.push(graph_op);
        }
    }
    let index_list = |v: Option<planus::Vector<'_, i32>>, what: &str| {
        v.map(|v| v.iter().collect::<Vec<i32>>())
            .unwrap_or_default()
            .into_iter()
            .map(|t| {
                usize::try_from(t)
                    .ok()
                    .filter(|&t| t < tensors.len())
                    .ok_or_else(|| {
                        ModelError::Invalid(format!(
                            "graph {what} {t} is not a tensor of subgraph 0"
                        ))
                    })
            })
            .collect::<Result<Vec<usize>, ModelError>>()
    };
    let inputs = index_list(
        graph.inputs().map_err(fb_err("subgraph 0 inputs"))?,
        "input",
    )?;
    let outputs = index_list(
        graph.outputs().map_err(fb_err("subgraph 0 outputs"))?,
        "output",
    )?;
    Ok(TfliteGraph {
        tensors,
        ops,
        inputs,
        outputs,
        subgraphs: subgraphs.len(),
    })
}

/// Tensor `i` of subgraph 0 as TFLM reads it: its type, shape, bytes (when
/// fixed) and whether a buffer holds its data.
fn graph_tensor(
    i: usize,
    t: &fb::TensorRef<'_>,
    buffers: Option<planus::Vector<'_, planus::Result<fb::BufferRef<'_>>>>,
) -> Result<GraphTensor, ModelError> {
    let name = t.name().ok().flatten().unwrap_or("").to_string();
    let ty = t.type_().map_err(fb_err(format!("tensor {i} type")))?;
    let shape: Vec<i32> = t
        .shape()
        .map_err(fb_err(format!("tensor {i} shape")))?
        .map(|d| d.iter().collect())
        .unwrap_or_default();
    let dt = dtype(ty);
    let bytes = dt.and_then(|d| {
        shape.iter().try_fold(d.size(), |acc, &x| {
            u64::try_from(x).ok().and_then(|x| acc.checked_mul(x))
        })
    });
    let buffer = t.buffer().map_err(fb_err(format!("tensor {i} buffer")))?;
    let is_constant = buffer != 0
        && buffers
            .and_then(|b| b.get(buffer as usize)?.ok())
            .and_then(|b| b.data().ok().flatten())
            .is_some_and(|d| !d.is_empty());
    Ok(GraphTensor {
        name,
        type_name: builtin_name(&format!("{ty:?}")),
        dtype: dt,
        shape,
        bytes,
        is_constant,
        is_variable: t.is_variable().unwrap_or(false),
    })
}

/// Refuses options of operator `i` that TFLM's own `Prepare` lets through
/// but its kernels cannot run: a stride, dilation, pool window or depth
/// multiplier below 1 (a division by zero, or a CMSIS-NN loop that never
/// ends), and a depthwise multiplier that disagrees with the channels.
/// Operators memtrace does not model are TFLM's to judge.
fn check_options(
    op: &fb::OperatorRef<'_>,
    code: &fb::OperatorCodeRef<'_>,
    i: usize,
    graph_op: &GraphOp,
    tensors: &[GraphTensor],
) -> Result<(), ModelError> {
    let Ok(kind) = operator_kind(code, i) else {
        return Ok(());
    };
    let options = read_options(op, i, kind)?;
    if kind == OpKind::DepthwiseConv2d {
        check_depthwise_channels(i, options.depth_multiplier, graph_op, tensors)?;
    }
    Ok(())
}

/// A depthwise filter has the input's channels times the multiplier (when
/// both are 4-D; other shapes are TFLM's to refuse).
fn check_depthwise_channels(
    i: usize,
    multiplier: u32,
    op: &GraphOp,
    tensors: &[GraphTensor],
) -> Result<(), ModelError> {
    let shape = |k: usize| {
        op.inputs
            .get(k)
            .and_then(|&t| usize::try_from(t).ok())
            .and_then(|t| tensors.get(t))
            .map(|t| t.shape.as_slice())
    };
    let (Some(&[_, _, _, c]), Some(&[_, _, _, f])) = (shape(0), shape(1)) else {
        return Ok(());
    };
    if i64::from(c) * i64::from(multiplier) != i64::from(f) {
        return Err(ModelError::Invalid(format!(
            "operator {i} (DEPTHWISE_CONV_2D): depth_multiplier {multiplier} with {c} input \
             channels makes {} output channels, but the filter has {f}",
            i64::from(c) * i64::from(multiplier)
        )));
    }
    Ok(())
}

/// TFLite's name of an operator code: the builtin's (the larger of the two
/// code fields, as TFLM's `GetBuiltinCode`), or the custom code.
fn operator_name(code: &fb::OperatorCodeRef<'_>) -> String {
    let deprecated = code.deprecated_builtin_code().unwrap_or(0) as i32;
    let builtin = code.builtin_code().map(|b| b as i32).unwrap_or(0);
    let raw = builtin.max(deprecated);
    match fb::BuiltinOperator::try_from(raw) {
        Ok(fb::BuiltinOperator::Custom) => code
            .custom_code()
            .ok()
            .flatten()
            .unwrap_or("CUSTOM")
            .to_string(),
        Ok(b) => builtin_name(&format!("{b:?}")),
        Err(_) => format!("BUILTIN_{raw}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared_model(name: &str) -> Option<Vec<u8>> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/models")
            .join(name);
        std::fs::read(path).ok()
    }

    #[test]
    fn the_graph_of_a_model_memtrace_cannot_plan_is_still_read() {
        // SVDF is no operator memtrace lowers, but TFLM runs it.
        let Some(bytes) = shared_model("tflm_keyword_scrambled_8bit.tflite") else {
            return;
        };
        let g = read_graph(&bytes).unwrap();
        assert!(g.op_names().contains(&"SVDF"), "{:?}", g.op_names());
        assert!(super::super::tflite::import_bytes("k", &bytes).is_err());
        for op in &g.ops {
            for &t in op.inputs.iter().chain(&op.outputs) {
                assert!(t == -1 || (t as usize) < g.tensors.len());
            }
        }
    }

    #[test]
    fn tensor_sizes_agree_with_the_planning_import() {
        // Two readers of one file: sizes, names and the graph's inputs and
        // outputs must agree tensor by tensor.
        let Some(bytes) = shared_model("mlperf_tiny_kws_ds_cnn_int8.tflite") else {
            return;
        };
        let g = read_graph(&bytes).unwrap();
        let m = super::super::tflite::import_bytes("kws", &bytes).unwrap();
        assert_eq!(g.tensors.len(), m.tensors.len());
        for (a, b) in g.tensors.iter().zip(&m.tensors) {
            assert_eq!(a.name, b.name);
            assert_eq!(a.bytes, Some(b.bytes), "{}", a.name);
            assert_eq!(a.is_constant, b.is_constant, "{}", a.name);
        }
        assert_eq!(g.inputs, m.inputs);
        assert_eq!(g.outputs, m.outputs);
        assert_eq!(g.ops.len(), m.ops.len());
        assert_eq!(g.ops[0].name, "CONV_2D");
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(read_graph(b"not a flatbuffer at all").is_err());
        assert!(read_graph(&[]).is_err());
    }
}
