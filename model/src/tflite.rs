//! `.tflite` import and `OfflineMemoryAllocation` export, through the Rust
//! code that `model/build.rs` generates with planus from TensorFlow's
//! official schema (no hand-written flatbuffer access).
//!
//! planus verifies every offset, length and enum tag as it reads, so a
//! truncated or corrupted file is an error naming what was being read, never
//! a panic or an out-of-bounds read.

use std::path::Path;

use super::codes::dtype;
use super::schema::tflite as fb;
use super::{
    Activation, Dtype, Model, ModelError, Op, OpKind, OpOptions, Padding, Quantization, Tensor,
};

pub(super) fn fb_err(context: impl Into<String>) -> impl FnOnce(planus::Error) -> ModelError {
    let context = context.into();
    move |source| ModelError::Flatbuffer { context, source }
}

/// Reads a `.tflite` file: a regular file of at most
/// [`MAX_TFLITE_FILE`](memtrace_io::input::MAX_TFLITE_FILE) bytes. The model is
/// named after the file stem.
pub fn import_file(path: &Path) -> Result<Model, ModelError> {
    let bytes = read_model_file(path)?;
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    import_bytes(&name, &bytes)
}

/// The bytes of a `.tflite` file, bounded (see [`memtrace_io::input::read_limited`]).
pub(crate) fn read_model_file(path: &Path) -> Result<Vec<u8>, ModelError> {
    use memtrace_io::input::{read_limited, ReadError, MAX_TFLITE_FILE};
    read_limited(path, MAX_TFLITE_FILE, ".tflite models").map_err(|e| match e {
        ReadError::Io { path, source } => ModelError::Io { path, source },
        other => ModelError::Invalid(other.to_string()),
    })
}

/// What bytes that are no flatbuffer model are, when they lack TFLite's
/// file identifier (`TFL3` at byte 4) too: an ELF program, or neither.
pub(super) fn not_a_model(bytes: &[u8]) -> Option<ModelError> {
    if bytes.get(4..8) == Some(b"TFL3") {
        return None;
    }
    Some(ModelError::Invalid(if bytes.starts_with(b"\x7fELF") {
        "it is an ELF program, not a .tflite model".to_owned()
    } else {
        format!(
            "it is neither an ELF program nor a .tflite model (first bytes {})",
            memtrace_io::input::first_bytes(bytes)
        )
    }))
}

/// TFLite's name of a builtin operator (`CONV_2D`) or type (`UINT32`) from
/// planus' variant name (`Conv2d`, `Uint32`).
pub(super) fn builtin_name(debug: &str) -> String {
    let mut out = String::new();
    let mut prev: Option<char> = None;
    for c in debug.chars() {
        if let Some(p) = prev {
            let boundary = (c.is_ascii_uppercase()
                && (p.is_ascii_lowercase() || p.is_ascii_digit()))
                || (c.is_ascii_digit() && p.is_ascii_alphabetic());
            if boundary {
                out.push('_');
            }
        }
        out.push(c.to_ascii_uppercase());
        prev = Some(c);
    }
    out
}

fn activation(a: fb::ActivationFunctionType) -> Activation {
    use fb::ActivationFunctionType as A;
    match a {
        A::None => Activation::None,
        A::Relu => Activation::Relu,
        A::ReluN1To1 => Activation::ReluN1To1,
        A::Relu6 => Activation::Relu6,
        A::Tanh => Activation::Tanh,
        A::SignBit => Activation::SignBit,
    }
}

fn padding(p: fb::Padding) -> Padding {
    match p {
        fb::Padding::Same => Padding::Same,
        fb::Padding::Valid => Padding::Valid,
    }
}

/// Parses `.tflite` bytes (subgraph 0, the main graph); an operator memtrace
/// does not model is an error naming it.
pub fn import_bytes(name: &str, bytes: &[u8]) -> Result<Model, ModelError> {
    import_with(name, bytes, false)
}

/// Parses `.tflite` bytes for planning on real TFLM: an operator memtrace
/// does not model becomes an [`OpKind::Other`] node (TFLM runs it; the
/// planners need only its tensors' lifetimes, and a trace on TFLM its O_s).
pub fn import_for_tflm(name: &str, bytes: &[u8]) -> Result<Model, ModelError> {
    import_with(name, bytes, true)
}

fn import_with(name: &str, bytes: &[u8], opaque: bool) -> Result<Model, ModelError> {
    let (root, _) = verified_root(bytes)?;
    model_of(name, root, opaque)
}

/// The root of `.tflite` bytes, read lazily (nothing is checked beyond the
/// root table). Every reading of model bytes starts here, so
/// [`crate::source::DecodeLog`] sees each one.
pub(crate) fn root(bytes: &[u8]) -> Result<fb::ModelRef<'_>, ModelError> {
    crate::decodes::note_decode(bytes);
    <fb::ModelRef as planus::ReadAsRoot>::read_as_root(bytes).map_err(fb_err("model root"))
}

/// The root of `.tflite` bytes and the whole model decoded from it,
/// including parts memtrace does not use (other subgraphs, metadata,
/// signatures): a truncated or corrupted file is rejected as a whole
/// instead of only where it is read.
pub(crate) fn verified_root(bytes: &[u8]) -> Result<(fb::ModelRef<'_>, fb::Model), ModelError> {
    root(bytes)
        .and_then(|m| {
            let whole = fb::Model::try_from(m).map_err(fb_err("verifying the whole file"))?;
            Ok((m, whole))
        })
        .map_err(|e| not_a_model(bytes).unwrap_or(e))
}

/// memtrace's model of the verified root `model` ([`import_with`]).
pub(crate) fn model_of(
    name: &str,
    model: fb::ModelRef<'_>,
    opaque: bool,
) -> Result<Model, ModelError> {
    let subgraphs = model
        .subgraphs()
        .map_err(fb_err("model.subgraphs"))?
        .ok_or_else(|| ModelError::Invalid("the model has no subgraphs".into()))?;
    let graph = subgraphs
        .get(0)
        .ok_or_else(|| ModelError::Invalid("the model has no subgraphs".into()))?
        .map_err(fb_err("subgraph 0"))?;
    let buffers = model.buffers().map_err(fb_err("model.buffers"))?;
    let codes = model
        .operator_codes()
        .map_err(fb_err("model.operator_codes"))?;
    let fb_tensors = graph
        .tensors()
        .map_err(fb_err("subgraph 0 tensors"))?
        .ok_or_else(|| ModelError::Invalid("subgraph 0 has no tensors".into()))?;
    let mut tensors = Vec::with_capacity(fb_tensors.len());
    for (i, t) in fb_tensors.iter().enumerate() {
        let t = t.map_err(fb_err(format!("tensor {i}")))?;
        tensors.push(read_tensor(i, &t, buffers)?);
    }
    let n_tensors = tensors.len();
    let mut ops = Vec::new();
    // TinySeg's custom operators name their storage tensor in their options.
    let mut storage_words = Vec::new();
    if let Some(fb_ops) = graph.operators().map_err(fb_err("subgraph 0 operators"))? {
        for (i, op) in fb_ops.iter().enumerate() {
            let op = op.map_err(fb_err(format!("operator {i}")))?;
            let read = read_operator(i, &op, codes, n_tensors, opaque)?;
            storage_words.push(match read.kind {
                OpKind::SpillKeep => None,
                k if k.is_tinyseg() => Some(crate::tflite_storage::decode(
                    op.custom_options()
                        .map_err(fb_err(format!("operator {i} custom options")))?,
                    i,
                )?),
                _ => None,
            });
            ops.push(read);
        }
    }
    crate::tflite_storage::attach_storage(&mut tensors, &mut ops, &storage_words)?;
    let inputs = index_list(
        graph.inputs().map_err(fb_err("subgraph inputs"))?,
        "graph input",
        n_tensors,
    )?;
    let outputs = index_list(
        graph.outputs().map_err(fb_err("subgraph outputs"))?,
        "graph output",
        n_tensors,
    )?;
    let model = Model {
        name: name.to_string(),
        tensors,
        ops,
        inputs,
        outputs,
    };
    model.validate()?;
    model.check_shapes()?;
    Ok(model)
}

/// Tensor `i` of subgraph 0: its type, static shape, constant data and
/// quantisation, each checked.
fn read_tensor(
    i: usize,
    t: &fb::TensorRef<'_>,
    buffers: Option<planus::Vector<'_, planus::Result<fb::BufferRef<'_>>>>,
) -> Result<Tensor, ModelError> {
    let tname = t
        .name()
        .map_err(fb_err(format!("tensor {i} name")))?
        .unwrap_or("")
        .to_string();
    let ty = t
        .type_()
        .map_err(fb_err(format!("tensor {i} `{tname}` type")))?;
    let dt = dtype(ty).ok_or_else(|| ModelError::UnsupportedType {
        index: i,
        name: tname.clone(),
        dtype: builtin_name(&format!("{ty:?}")),
    })?;
    let shape = tensor_shape(i, t, &tname)?;
    let bytes_needed = shape
        .iter()
        .try_fold(dt.size(), |acc, &d| acc.checked_mul(d as u64))
        .ok_or_else(|| {
            ModelError::Invalid(format!("tensor {i} `{tname}` is larger than 2^64 bytes"))
        })?;
    let buffer = t.buffer().map_err(fb_err(format!("tensor {i} buffer")))?;
    let data = tensor_data(i, &tname, buffer, buffers)?;
    if let Some(d) = &data {
        if d.len() as u64 != constant_bytes(dt, bytes_needed) {
            return Err(ModelError::Invalid(format!(
                "tensor {i} `{tname}`: constant buffer {buffer} holds {} bytes, its shape needs {}",
                d.len(),
                constant_bytes(dt, bytes_needed)
            )));
        }
    }
    let quantization = tensor_quantization(i, t, &tname)?;
    let is_variable = t
        .is_variable()
        .map_err(fb_err(format!("tensor {i} is_variable")))?;
    Ok(Tensor {
        name: if tname.is_empty() {
            format!("tensor{i}")
        } else {
            tname
        },
        shape,
        dtype: dt,
        bytes: bytes_needed,
        is_constant: data.is_some(),
        is_variable,
        quantization,
        data,
        in_storage: false,
    })
}

/// Bytes of a constant buffer holding a tensor of `arena_bytes` in the
/// arena: int4 constants are packed two elements to a byte (TFLM unpacks
/// them), every other type is stored as it is used.
fn constant_bytes(dt: Dtype, arena_bytes: u64) -> u64 {
    match dt {
        Dtype::Int4 => arena_bytes.div_ceil(2),
        _ => arena_bytes,
    }
}

/// The tensor's dimensions; a dynamic one (negative) is an error.
fn tensor_shape(i: usize, t: &fb::TensorRef<'_>, tname: &str) -> Result<Vec<u32>, ModelError> {
    let mut shape = Vec::new();
    if let Some(dims) = t
        .shape()
        .map_err(fb_err(format!("tensor {i} `{tname}` shape")))?
    {
        for d in dims.iter() {
            if d < 0 {
                return Err(ModelError::Invalid(format!(
                    "tensor {i} `{tname}` has a dynamic dimension ({d}); memtrace plans static shapes only"
                )));
            }
            shape.push(d as u32);
        }
    }
    Ok(shape)
}

/// The bytes of the tensor's buffer, if it has a non-empty one (buffer 0 is
/// TFLite's empty sentinel).
fn tensor_data(
    i: usize,
    tname: &str,
    buffer: u32,
    buffers: Option<planus::Vector<'_, planus::Result<fb::BufferRef<'_>>>>,
) -> Result<Option<Vec<u8>>, ModelError> {
    if buffer == 0 {
        return Ok(None);
    }
    let bufs = buffers.ok_or_else(|| {
        ModelError::Invalid(format!(
            "tensor {i} `{tname}` refers to buffer {buffer}, but the model has no buffers"
        ))
    })?;
    let b = bufs
        .get(buffer as usize)
        .ok_or_else(|| {
            ModelError::Invalid(format!(
                "tensor {i} `{tname}` refers to buffer {buffer}, but there are {} buffers",
                bufs.len()
            ))
        })?
        .map_err(fb_err(format!("buffer {buffer}")))?;
    Ok(b.data()
        .map_err(fb_err(format!("buffer {buffer} data")))?
        .filter(|d| !d.is_empty())
        .map(|d| d.to_vec()))
}

/// The tensor's quantisation parameters, if it has any.
fn tensor_quantization(
    i: usize,
    t: &fb::TensorRef<'_>,
    tname: &str,
) -> Result<Option<Quantization>, ModelError> {
    let Some(q) = t
        .quantization()
        .map_err(fb_err(format!("tensor {i} quantization")))?
    else {
        return Ok(None);
    };
    let scale: Vec<f32> = q
        .scale()
        .map_err(fb_err(format!("tensor {i} quantization scale")))?
        .map(|v| v.iter().collect())
        .unwrap_or_default();
    let zero_point: Vec<i64> = q
        .zero_point()
        .map_err(fb_err(format!("tensor {i} quantization zero point")))?
        .map(|v| v.iter().collect())
        .unwrap_or_default();
    let quantized_dimension = q
        .quantized_dimension()
        .map_err(fb_err(format!("tensor {i} quantized dimension")))?;
    // A zero, negative or non-finite scale makes every real value of the
    // tensor meaningless (and TFLM's multipliers undefined): refused, not
    // run to arbitrary outputs.
    if let Some((c, s)) = scale
        .iter()
        .enumerate()
        .find(|(_, s)| !(s.is_finite() && **s > 0.0))
    {
        return Err(ModelError::Invalid(format!(
            "tensor {i} `{tname}`: quantisation scale {s} (channel {c}) is not a \
             positive finite number"
        )));
    }
    if scale.is_empty() && zero_point.is_empty() {
        return Ok(None);
    }
    Ok(Some(Quantization {
        scale,
        zero_point,
        quantized_dimension,
    }))
}

/// Tensor indices of an operator's or the graph's operand list; `-1` (an
/// absent optional operand) is left out, any other index must name one of
/// the `n_tensors` tensors.
fn index_list(
    v: Option<planus::Vector<'_, i32>>,
    what: &str,
    n_tensors: usize,
) -> Result<Vec<usize>, ModelError> {
    let mut out = Vec::new();
    for t in v.into_iter().flat_map(|v| v.iter()) {
        if t == -1 {
            continue;
        }
        if t < 0 || t as usize >= n_tensors {
            return Err(ModelError::Invalid(format!(
                "{what} refers to tensor {t}, but there are {n_tensors} tensors"
            )));
        }
        out.push(t as usize);
    }
    Ok(out)
}

/// Operator `i`: its kind (an operator memtrace does not model is an error,
/// or with `opaque` an [`OpKind::Other`]), operands and options.
fn read_operator(
    i: usize,
    op: &fb::OperatorRef<'_>,
    codes: Option<planus::Vector<'_, planus::Result<fb::OperatorCodeRef<'_>>>>,
    n_tensors: usize,
    opaque: bool,
) -> Result<Op, ModelError> {
    let code = operator_code(codes, op, i)?;
    let kind = match operator_kind(&code, i) {
        Ok(kind) => kind,
        Err(_) if opaque => OpKind::Other,
        Err(e) => return Err(e),
    };
    let inputs = index_list(
        op.inputs()
            .map_err(fb_err(format!("operator {i} inputs")))?,
        &format!("operator {i} ({}) input", kind.tflite_name()),
        n_tensors,
    )?;
    let outputs = index_list(
        op.outputs()
            .map_err(fb_err(format!("operator {i} outputs")))?,
        &format!("operator {i} ({}) output", kind.tflite_name()),
        n_tensors,
    )?;
    let options = read_options(op, i, kind)?;
    Ok(Op {
        kind,
        inputs,
        outputs,
        options,
        scratch: None,
    })
}

/// The operator code operator `i` (`op`) uses, or an error when the model
/// does not define it.
pub(super) fn operator_code<'a>(
    codes: Option<planus::Vector<'a, planus::Result<fb::OperatorCodeRef<'a>>>>,
    op: &fb::OperatorRef<'_>,
    i: usize,
) -> Result<fb::OperatorCodeRef<'a>, ModelError> {
    let code_index = op
        .opcode_index()
        .map_err(fb_err(format!("operator {i} opcode index")))?;
    codes
        .and_then(|c| c.get(code_index as usize))
        .ok_or_else(|| {
            ModelError::Invalid(format!(
                "operator {i} uses operator code {code_index}, which the model does not define"
            ))
        })?
        .map_err(fb_err(format!("operator code {code_index}")))
}

/// The kind of an operator code, or an error naming the operator memtrace
/// does not model.
pub(super) fn operator_kind(
    code: &fb::OperatorCodeRef<'_>,
    i: usize,
) -> Result<OpKind, ModelError> {
    // TFLM's GetBuiltinCode: the larger of the two fields (files from
    // before schema 3a only set the deprecated byte).
    let deprecated = code
        .deprecated_builtin_code()
        .map_err(fb_err(format!("operator {i} code")))?;
    let builtin = match code.builtin_code() {
        Ok(b) => b as i32,
        Err(e) => {
            return Err(ModelError::UnsupportedOp {
                index: i,
                name: format!("with an unknown builtin code ({e})"),
            })
        }
    };
    let raw = builtin.max(deprecated as i32);
    let builtin = fb::BuiltinOperator::try_from(raw).map_err(|_| ModelError::UnsupportedOp {
        index: i,
        name: format!("with unknown builtin code {raw}"),
    })?;
    if builtin == fb::BuiltinOperator::Custom {
        let custom = code.custom_code().ok().flatten().unwrap_or("?");
        if let Some(kind) = OpKind::from_custom_code(custom) {
            return Ok(kind);
        }
        return Err(ModelError::UnsupportedOp {
            index: i,
            name: format!("CUSTOM `{custom}`"),
        });
    }
    OpKind::from_builtin_code(raw).ok_or_else(|| ModelError::UnsupportedOp {
        index: i,
        name: format!(
            "{} (builtin code {raw})",
            builtin_name(&format!("{builtin:?}"))
        ),
    })
}

/// The options of operator `i` of `kind`, each checked: a stride, dilation,
/// window or depth multiplier below 1 is an error naming the operator.
pub(super) fn read_options(
    op: &fb::OperatorRef<'_>,
    i: usize,
    kind: OpKind,
) -> Result<OpOptions, ModelError> {
    use fb::BuiltinOptionsRef as O;
    let r = OptionsReader { i, kind };
    let opts = op.builtin_options().map_err(fb_err(r.context()))?;
    let mut o = OpOptions::default();
    match (kind, opts) {
        (OpKind::Conv2d, Some(O::Conv2DOptions(c))) => r.conv(&c, &mut o)?,
        (OpKind::Conv2d, _) => return Err(r.needs("Conv2D")),
        (OpKind::DepthwiseConv2d, Some(O::DepthwiseConv2DOptions(c))) => r.depthwise(&c, &mut o)?,
        (OpKind::DepthwiseConv2d, _) => return Err(r.needs("DepthwiseConv2D")),
        (OpKind::MaxPool | OpKind::AveragePool, Some(O::Pool2DOptions(p))) => r.pool(&p, &mut o)?,
        (OpKind::MaxPool | OpKind::AveragePool, _) => return Err(r.needs("Pool2D")),
        (OpKind::TransposeConv, Some(O::TransposeConvOptions(t))) => {
            r.transpose_conv(&t, &mut o)?
        }
        (OpKind::TransposeConv, _) => return Err(r.needs("TransposeConv")),
        // Options that only fuse an activation are optional.
        (OpKind::FullyConnected, Some(O::FullyConnectedOptions(f))) => {
            o.activation = r.activation(f.fused_activation_function())?
        }
        (OpKind::Add, Some(O::AddOptions(a))) => {
            o.activation = r.activation(a.fused_activation_function())?
        }
        (OpKind::Sub, Some(O::SubOptions(a))) => {
            o.activation = r.activation(a.fused_activation_function())?
        }
        (OpKind::Mul, Some(O::MulOptions(a))) => {
            o.activation = r.activation(a.fused_activation_function())?
        }
        (OpKind::Concatenation, Some(O::ConcatenationOptions(c))) => {
            o.axis = Some(c.axis().map_err(fb_err(r.context()))?);
            o.activation = r.activation(c.fused_activation_function())?;
        }
        _ => {}
    }
    Ok(o)
}

/// Reads the builtin options of operator `i`, one method per options table.
struct OptionsReader {
    i: usize,
    kind: OpKind,
}

impl OptionsReader {
    /// What a flatbuffer error is about.
    fn context(&self) -> String {
        format!("operator {} ({}) options", self.i, self.kind.tflite_name())
    }

    /// The operator lacks the options table its kind needs.
    fn needs(&self, what: &str) -> ModelError {
        ModelError::Invalid(format!(
            "operator {} ({}) has no {what} options",
            self.i,
            self.kind.tflite_name()
        ))
    }

    /// A fused activation field.
    fn activation(
        &self,
        f: planus::Result<fb::ActivationFunctionType>,
    ) -> Result<Activation, ModelError> {
        Ok(activation(f.map_err(fb_err(self.context()))?))
    }

    /// An option that must be at least 1 (a stride, dilation, window or
    /// multiplier of 0 makes TFLM's kernels divide by zero or loop for ever).
    fn positive(&self, v: i32, what: &str) -> Result<u32, ModelError> {
        if v >= 1 {
            Ok(v as u32)
        } else {
            Err(ModelError::Invalid(format!(
                "operator {} ({}): {what} is {v}, must be at least 1",
                self.i,
                self.kind.tflite_name()
            )))
        }
    }

    /// Stride (height, width), each at least 1.
    fn stride(&self, h: i32, w: i32) -> Result<(u32, u32), ModelError> {
        Ok((self.positive(h, "stride_h")?, self.positive(w, "stride_w")?))
    }

    /// Dilation (height, width), each at least 1.
    fn dilation(&self, h: i32, w: i32) -> Result<(u32, u32), ModelError> {
        Ok((
            self.positive(h, "dilation_h_factor")?,
            self.positive(w, "dilation_w_factor")?,
        ))
    }

    fn conv(&self, c: &fb::Conv2DOptionsRef<'_>, o: &mut OpOptions) -> Result<(), ModelError> {
        let r = (|| -> planus::Result<_> {
            Ok((
                c.padding()?,
                c.stride_h()?,
                c.stride_w()?,
                c.dilation_h_factor()?,
                c.dilation_w_factor()?,
                c.fused_activation_function()?,
            ))
        })()
        .map_err(fb_err(self.context()))?;
        o.padding = padding(r.0);
        o.stride = self.stride(r.1, r.2)?;
        o.dilation = self.dilation(r.3, r.4)?;
        o.activation = activation(r.5);
        Ok(())
    }

    fn depthwise(
        &self,
        c: &fb::DepthwiseConv2DOptionsRef<'_>,
        o: &mut OpOptions,
    ) -> Result<(), ModelError> {
        let r = (|| -> planus::Result<_> {
            Ok((
                c.padding()?,
                c.stride_h()?,
                c.stride_w()?,
                c.dilation_h_factor()?,
                c.dilation_w_factor()?,
                c.fused_activation_function()?,
                c.depth_multiplier()?,
            ))
        })()
        .map_err(fb_err(self.context()))?;
        o.padding = padding(r.0);
        o.stride = self.stride(r.1, r.2)?;
        o.dilation = self.dilation(r.3, r.4)?;
        o.activation = activation(r.5);
        // CMSIS-NN's depthwise kernels loop on the multiplier: 0 never ends.
        o.depth_multiplier = self.positive(r.6, "depth_multiplier")?;
        Ok(())
    }

    fn pool(&self, p: &fb::Pool2DOptionsRef<'_>, o: &mut OpOptions) -> Result<(), ModelError> {
        let r = (|| -> planus::Result<_> {
            Ok((
                p.padding()?,
                p.stride_h()?,
                p.stride_w()?,
                p.filter_height()?,
                p.filter_width()?,
                p.fused_activation_function()?,
            ))
        })()
        .map_err(fb_err(self.context()))?;
        o.padding = padding(r.0);
        o.stride = self.stride(r.1, r.2)?;
        o.filter = (
            self.positive(r.3, "filter_height")?,
            self.positive(r.4, "filter_width")?,
        );
        o.activation = activation(r.5);
        Ok(())
    }

    fn transpose_conv(
        &self,
        t: &fb::TransposeConvOptionsRef<'_>,
        o: &mut OpOptions,
    ) -> Result<(), ModelError> {
        let r = (|| -> planus::Result<_> {
            Ok((
                t.padding()?,
                t.stride_h()?,
                t.stride_w()?,
                t.fused_activation_function()?,
            ))
        })()
        .map_err(fb_err(self.context()))?;
        o.padding = padding(r.0);
        o.stride = self.stride(r.1, r.2)?;
        o.activation = activation(r.3);
        Ok(())
    }
}

/// Name of the TFLM metadata entry that carries an offline arena plan.
pub(crate) const OFFLINE_METADATA: &str = "OfflineMemoryAllocation";

/// Name of the metadata entry in which `memtrace plan --emit-offline` says
/// whose the `OfflineMemoryAllocation` is (a small JSON text: memtrace's
/// version, planner, O_s source, kernels, target, TFLM build, model digest).
pub const PLAN_METADATA: &str = "memtrace_plan";

/// Writes `offsets` (one per tensor of subgraph 0: a byte offset into the
/// arena's head section, or -1 to leave the tensor to TFLM's own planner) as
/// TFLM `OfflineMemoryAllocation` metadata into a copy of the `.tflite`
/// `original`: a new buffer holding the int32 words `[version 1, 1, n,
/// offset_0, …, offset_{n-1}]` and a `Metadata` entry naming it. An existing
/// entry of that name is replaced (its old buffer is left unreferenced but
/// kept, so buffer indices stay valid).
///
/// TFLM reads one offset per tensor of *every* subgraph, subgraph after
/// subgraph, and refuses a list of any other length; memtrace plans
/// subgraph 0 only, so the tensors of the other subgraphs (the bodies of
/// control-flow operators) get -1: TFLM places them online, around the
/// offline ones. `n` counts them all.
///
/// The file is decoded into planus' owned types and serialised again with
/// the generated builders. planus 1.1 ignores the schema's
/// `force_align: 16` on buffer data, so buffers come out 4-byte aligned
/// (enough for TFLM's reference kernels, which read at most 32-bit elements
/// from flash); [`emit_offline`] reports the alignment it achieved.
pub fn emit_offline(original: &[u8], offsets: &[i64]) -> Result<EmitReport, ModelError> {
    emit_offline_noted(original, offsets, None)
}

/// [`emit_offline`], with `note` (when given) written as the
/// [`PLAN_METADATA`] entry that names the plan's maker. Any earlier entry
/// of that name is replaced: it described another plan.
pub fn emit_offline_noted(
    original: &[u8],
    offsets: &[i64],
    note: Option<&[u8]>,
) -> Result<EmitReport, ModelError> {
    let root = root(original)?;
    let model = fb::Model::try_from(root).map_err(fb_err("decoding the whole model"))?;
    emit_into(model, offsets, note)
}

/// [`emit_offline_noted`] of a model already decoded.
pub(crate) fn emit_into(
    mut model: fb::Model,
    offsets: &[i64],
    note: Option<&[u8]>,
) -> Result<EmitReport, ModelError> {
    let counts = tensors_per_subgraph(&model);
    let n_tensors = counts.first().copied().unwrap_or(0);
    if offsets.len() != n_tensors {
        return Err(ModelError::Invalid(format!(
            "the plan has {} offsets, subgraph 0 has {n_tensors} tensors",
            offsets.len()
        )));
    }
    let all_offsets = offline_words(offsets, counts.iter().sum())?;
    let mut words: Vec<i32> = vec![1, 1, word_count(all_offsets.len())?];
    words.extend(&all_offsets);
    let data: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let buffers = model.buffers.get_or_insert_with(Vec::new);
    if buffers.is_empty() {
        // Buffer 0 is the empty sentinel by convention.
        buffers.push(fb::Buffer { data: None });
    }
    buffers.push(fb::Buffer { data: Some(data) });
    let buffer_index = (buffers.len() - 1) as u32;
    let metadata = model.metadata.get_or_insert_with(Vec::new);
    metadata.retain(|m| !matches!(m.name.as_deref(), Some(OFFLINE_METADATA | PLAN_METADATA)));
    metadata.push(fb::Metadata {
        name: Some(OFFLINE_METADATA.to_string()),
        buffer: buffer_index,
    });
    if let Some(note) = note {
        let buffers = model.buffers.get_or_insert_with(Vec::new);
        buffers.push(fb::Buffer {
            data: Some(note.to_vec()),
        });
        let index = (buffers.len() - 1) as u32;
        model
            .metadata
            .get_or_insert_with(Vec::new)
            .push(fb::Metadata {
                name: Some(PLAN_METADATA.to_string()),
                buffer: index,
            });
    }
    let bytes = serialize(&model);
    // Read it back through the same code: the plan must round-trip.
    let check = read_offline(&bytes)?.ok_or_else(|| {
        ModelError::Invalid("the written model has no OfflineMemoryAllocation entry".into())
    })?;
    if !check
        .iter()
        .copied()
        .eq(all_offsets.iter().map(|&w| i64::from(w)))
    {
        return Err(ModelError::Invalid(
            "the written OfflineMemoryAllocation does not read back as written".into(),
        ));
    }
    let min_alignment = buffer_alignment(&bytes)?;
    Ok(EmitReport {
        bytes,
        buffer_index,
        min_buffer_alignment: min_alignment,
    })
}

/// Tensors of each subgraph, in the file's order.
fn tensors_per_subgraph(model: &fb::Model) -> Vec<usize> {
    model
        .subgraphs
        .iter()
        .flatten()
        .map(|g| g.tensors.as_ref().map_or(0, |t| t.len()))
        .collect()
}

/// The plan's words for all `total` tensors of the file: subgraph 0's
/// `offsets` (each an int32, as TFLM reads them), then -1 (online) for every
/// tensor of the other subgraphs.
fn offline_words(offsets: &[i64], total: usize) -> Result<Vec<i32>, ModelError> {
    let mut words = Vec::with_capacity(total);
    for (i, &o) in offsets.iter().enumerate() {
        words.push(i32::try_from(o).map_err(|_| {
            ModelError::Invalid(format!(
                "offset {o} of tensor {i} does not fit TFLM's int32"
            ))
        })?);
    }
    words.resize(total.max(offsets.len()), -1);
    Ok(words)
}

/// A count of offsets as the plan's int32 header word.
fn word_count(n: usize) -> Result<i32, ModelError> {
    i32::try_from(n).map_err(|_| {
        ModelError::Invalid(format!(
            "the model has {n} tensors, more than TFLM's offline plan can count"
        ))
    })
}

/// Decodes `.tflite` bytes into planus' owned model, lets `edit` change it
/// and serialises the result again (with TFLite's file identifier): one
/// model derived from another with the generated code only.
pub fn rewrite(original: &[u8], edit: impl FnOnce(&mut fb::Model)) -> Result<Vec<u8>, ModelError> {
    let root = root(original)?;
    let mut model = fb::Model::try_from(root).map_err(fb_err("decoding the whole model"))?;
    edit(&mut model);
    Ok(serialize(&model))
}

/// Serialises an owned model as a `.tflite` file: how a model built from
/// the schema's types (a test's, a tool's) becomes one TFLM reads.
pub fn encode(model: &fb::Model) -> Vec<u8> {
    serialize(model)
}

/// Serialises a model with TFLite's file identifier `TFL3`.
///
/// planus 1.1.1's `Builder::finish` writes the identifier and the root
/// offset in swapped order when given an identifier (the root offset must
/// come first), and a file without the identifier is rejected by TFLite's
/// verifier. So the final 8-byte header is written here with the builder's
/// own low-level `write_with`, in the right order; everything else is the
/// generated serialiser.
fn serialize(model: &fb::Model) -> Vec<u8> {
    let mut builder = planus::Builder::new();
    let _root = planus::WriteAsOffset::prepare(model, &mut builder);
    // Right after `prepare`, the root table starts `len()` bytes from the end.
    let root_from_end = builder.len() as u32;
    // SAFETY: the closure initialises all 8 bytes of the block it is given.
    unsafe {
        builder.write_with(8, 15, |block_from_end, bytes| {
            // The block is the start of the file, so the root's position is
            // the distance between the two.
            let root = (block_from_end - root_from_end).to_le_bytes();
            for (dst, src) in bytes.iter_mut().zip(root.iter().chain(b"TFL3")) {
                dst.write(*src);
            }
        });
    }
    builder.as_slice().to_vec()
}

/// A serialised model with an offline plan.
#[derive(Debug, Clone)]
pub struct EmitReport {
    /// The whole `.tflite` file with the plan in its metadata.
    pub bytes: Vec<u8>,
    /// Index of the buffer holding the plan.
    pub buffer_index: u32,
    /// Largest power of two (≤ 16) dividing the file offset of every
    /// non-empty buffer's data.
    pub min_buffer_alignment: usize,
}

/// The `OfflineMemoryAllocation` offsets of a `.tflite`, if it has any.
pub fn read_offline(bytes: &[u8]) -> Result<Option<Vec<i64>>, ModelError> {
    offline_of(root(bytes)?)
}

/// [`read_offline`] of a root already read.
pub(crate) fn offline_of(root: fb::ModelRef<'_>) -> Result<Option<Vec<i64>>, ModelError> {
    let Some(data) = metadata_of(root, OFFLINE_METADATA)? else {
        return Ok(None);
    };
    if data.len() % 4 != 0 || data.len() < 12 {
        return Err(ModelError::Invalid(format!(
            "{OFFLINE_METADATA} buffer holds {} bytes, not a list of int32 words with a 3-word header",
            data.len()
        )));
    }
    let words: Vec<i32> = data
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let n = words[2].max(0) as usize;
    if words.len() != 3 + n {
        return Err(ModelError::Invalid(format!(
            "{OFFLINE_METADATA} says {n} offsets but holds {}",
            words.len() - 3
        )));
    }
    Ok(Some(words[3..].iter().map(|&w| w as i64).collect()))
}

/// A copy of the `.tflite` `original` without its `OfflineMemoryAllocation`
/// (and the `memtrace_plan` entry that describes it), or `None` when it
/// carries none: the model TFLM lays out with its own planner. The metadata
/// entries are removed and the buffers they named emptied (not removed, so
/// every other buffer keeps its index), unless a tensor or another metadata
/// entry also names that buffer.
pub fn strip_offline(original: &[u8]) -> Result<Option<Vec<u8>>, ModelError> {
    if read_metadata(original, OFFLINE_METADATA)?.is_none() {
        return Ok(None);
    }
    strip_entries(original, &[OFFLINE_METADATA, PLAN_METADATA])
}

/// A copy of the `.tflite` `original` without its metadata entry `name`, or
/// `None` when it has none (buffers emptied as by [`strip_offline`]).
pub fn strip_metadata(original: &[u8], name: &str) -> Result<Option<Vec<u8>>, ModelError> {
    if read_metadata(original, name)?.is_none() {
        return Ok(None);
    }
    strip_entries(original, &[name])
}

/// [`strip_metadata`] of every entry named in `names`.
fn strip_entries(original: &[u8], names: &[&str]) -> Result<Option<Vec<u8>>, ModelError> {
    let root = root(original)?;
    let model = fb::Model::try_from(root).map_err(fb_err("decoding the whole model"))?;
    Ok(without_entries(model, names))
}

/// The bytes of the decoded `model` without its metadata entries named in
/// `names`, or `None` when it has none of them ([`strip_entries`]).
pub(crate) fn without_entries(mut model: fb::Model, names: &[&str]) -> Option<Vec<u8>> {
    remove_entries(&mut model, names).then(|| serialize(&model))
}

/// Removes the metadata entries of `model` named in `names` (emptying the
/// buffers only they named); whether it had any.
pub(crate) fn remove_entries(model: &mut fb::Model, names: &[&str]) -> bool {
    let Some(metadata) = model.metadata.as_mut() else {
        return false;
    };
    let mut removed = Vec::new();
    metadata.retain(|m| {
        let gone = m.name.as_deref().is_some_and(|n| names.contains(&n));
        if gone {
            removed.push(m.buffer);
        }
        !gone
    });
    if removed.is_empty() {
        return false;
    }
    let still_named: std::collections::HashSet<u32> = metadata
        .iter()
        .map(|m| m.buffer)
        .chain(
            model
                .subgraphs
                .iter()
                .flatten()
                .flat_map(|g| g.tensors.iter().flatten())
                .map(|t| t.buffer),
        )
        .collect();
    let buffers = model.buffers.get_or_insert_with(Vec::new);
    for b in removed.iter().filter(|b| !still_named.contains(b)) {
        if let Some(buffer) = buffers.get_mut(*b as usize) {
            buffer.data = None;
        }
    }
    true
}

/// The bytes of the buffer the metadata entry `name` of a `.tflite` names,
/// or `None` when it has no such entry. Most models carry little metadata:
/// read without decoding the whole model.
pub fn read_metadata(bytes: &[u8], name: &str) -> Result<Option<Vec<u8>>, ModelError> {
    metadata_of(root(bytes)?, name)
}

/// [`read_metadata`] of a root already read.
pub(crate) fn metadata_of(
    root: fb::ModelRef<'_>,
    name: &str,
) -> Result<Option<Vec<u8>>, ModelError> {
    let Some(metadata) = root.metadata().map_err(fb_err("model.metadata"))? else {
        return Ok(None);
    };
    for m in metadata.iter() {
        let m = m.map_err(fb_err("metadata entry"))?;
        if m.name().map_err(fb_err("metadata name"))? != Some(name) {
            continue;
        }
        let index = m.buffer().map_err(fb_err("metadata buffer"))? as usize;
        let data = root
            .buffers()
            .map_err(fb_err("model.buffers"))?
            .and_then(|b| b.get(index))
            .ok_or_else(|| {
                ModelError::Invalid(format!(
                    "metadata `{name}` refers to missing buffer {index}"
                ))
            })?
            .map_err(fb_err(format!("buffer {index}")))?
            .data()
            .map_err(fb_err(format!("buffer {index} data")))?
            .unwrap_or(&[]);
        return Ok(Some(data.to_vec()));
    }
    Ok(None)
}

fn buffer_alignment(bytes: &[u8]) -> Result<usize, ModelError> {
    let root = root(bytes)?;
    let base = bytes.as_ptr() as usize;
    let mut align = 16usize;
    if let Some(buffers) = root.buffers().map_err(fb_err("model.buffers"))? {
        for b in buffers.iter() {
            let b = b.map_err(fb_err("buffer"))?;
            if let Some(d) = b.data().map_err(fb_err("buffer data"))? {
                if !d.is_empty() {
                    let off = d.as_ptr() as usize - base;
                    while align > 1 && !off.is_multiple_of(align) {
                        align /= 2;
                    }
                }
            }
        }
    }
    Ok(align)
}

/// [`emit_offline`] from file to file, written through
/// [`memtrace_io::output::write_atomically`] (a temporary file renamed into
/// place; FIFOs and character devices written through).
pub fn write_offline(
    source: &Path,
    offsets: &[i64],
    dest: &Path,
) -> Result<EmitReport, ModelError> {
    write_offline_noted(source, offsets, None, dest)
}

/// [`write_offline`] with a [`PLAN_METADATA`] note ([`emit_offline_noted`]).
pub fn write_offline_noted(
    source: &Path,
    offsets: &[i64],
    note: Option<&[u8]>,
    dest: &Path,
) -> Result<EmitReport, ModelError> {
    use memtrace_io::output::{write_atomically, write_error};
    let original = read_model_file(source)?;
    let report = emit_offline_noted(&original, offsets, note)?;
    write_atomically(dest, |w| {
        std::io::Write::write_all(w, &report.bytes).map_err(|e| write_error(dest, e))
    })?;
    Ok(report)
}

#[cfg(test)]
pub(crate) fn serialize_for_tests(model: &fb::Model) -> Vec<u8> {
    serialize(model)
}
