//! The canonical spec text: `key=value,...`, parsed and printed so that a
//! printed spec parses back to itself.

use std::fmt;

use super::{
    shape_text, Activation, Dtype, LayerSpec, LayerSpecBuilder, OpKind, Padding, Paddings, Shape,
    SpecError,
};

/// The keys of a spec text as read, before an op's rules apply.
#[derive(Default)]
struct Fields {
    op: Option<OpKind>,
    dtype: Option<Dtype>,
    input: Option<Shape>,
    filter: Option<Shape>,
    /// The filter was written `KHxKW`; only then is `[1, 1, KH, KW]` re-read
    /// as a pool's `[1, KH, KW, 1]` (a printed `1x1xKWx1` must stay as it is).
    filter_2d: bool,
    stride: Option<(u32, u32)>,
    dilation: Option<(u32, u32)>,
    padding: Option<Padding>,
    activation: Option<Activation>,
    output: Option<Shape>,
    pad: Option<(u32, u32)>,
    depth_multiplier: Option<u32>,
    input2: Option<Shape>,
    axis: Option<u32>,
    pad_before: Option<Shape>,
    pad_after: Option<Shape>,
}

impl Fields {
    /// Reads every `key=value` item of `text`; a key given twice is an error.
    fn read(text: &str) -> Result<Fields, SpecError> {
        let mut fields = Fields::default();
        let mut seen: Vec<&str> = Vec::new();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| SpecError::new(format!("`{item}` is not key=value")))?;
            let (key, value) = (key.trim(), value.trim());
            if seen.contains(&key) {
                return Err(SpecError::new(format!(
                    "key `{key}` is given more than once"
                )));
            }
            seen.push(key);
            fields.set(key, value)?;
        }
        Ok(fields)
    }

    /// Sets the field of `key` from its text.
    fn set(&mut self, key: &str, value: &str) -> Result<(), SpecError> {
        match key {
            "op" => self.op = Some(value.parse::<OpKind>()?),
            "dtype" => self.dtype = Some(value.parse()?),
            "input" => self.input = Some(parse_shape(key, value)?),
            "filter" => {
                self.filter = Some(parse_shape(key, value)?);
                self.filter_2d = value.split('x').count() == 2;
            }
            "output" => self.output = Some(parse_shape(key, value)?),
            "stride" => self.stride = Some(parse_pair(key, value)?),
            "dilation" => self.dilation = Some(parse_pair(key, value)?),
            "pad" => self.pad = Some(parse_pair(key, value)?),
            "padding" => self.padding = Some(parse_padding(value)?),
            "depth_multiplier" => self.depth_multiplier = Some(parse_number(key, value)?),
            "input2" => self.input2 = Some(parse_shape(key, value)?),
            "axis" => self.axis = Some(parse_axis(value)?),
            "pad_before" => self.pad_before = Some(parse_paddings(key, value)?),
            "pad_after" => self.pad_after = Some(parse_paddings(key, value)?),
            "activation" => self.activation = Some(parse_activation(value)?),
            _ => {
                return Err(SpecError::new(format!(
                    "unknown key `{key}` (known: op, dtype, input, input2, axis, filter, stride, dilation, padding, depth_multiplier, activation, pad_before, pad_after, output, pad)"
                )))
            }
        }
        Ok(())
    }

    /// The filter, with a pool's `KHxKW` read as `1xKHxKWx1`.
    fn filter(&self, op: OpKind) -> Option<Shape> {
        match (op, self.filter) {
            (OpKind::MaxPool | OpKind::AveragePool, Some([1, 1, kh, kw])) if self.filter_2d => {
                Some([1, kh, kw, 1])
            }
            (_, f) => f,
        }
    }

    /// The paddings of a `pad` layer: a missing side is all 0.
    fn paddings(&self) -> Option<Paddings> {
        match (self.pad_before, self.pad_after) {
            (None, None) => None,
            (before, after) => Some(Paddings {
                before: before.unwrap_or([0; 4]),
                after: after.unwrap_or([0; 4]),
            }),
        }
    }
}

/// As TFLite does, a depthwise filter's last dimension over the input depth
/// is the depth multiplier; an explicit one must agree. Every other op takes
/// the explicit one, or 1.
fn depth_multiplier(
    op: OpKind,
    filter: Option<Shape>,
    input: &Shape,
    explicit: Option<u32>,
) -> Result<u32, SpecError> {
    let given = explicit.unwrap_or(1);
    let (OpKind::DepthwiseConv2d, Some(f)) = (op, filter) else {
        return Ok(given);
    };
    let c = input[3];
    if c == 0 || f[3] == 0 {
        return Ok(given);
    }
    if f[3] % c != 0 {
        return Err(SpecError::new(format!(
            "depthwise_conv2d filter depth {} is not a multiple of the input depth {c}",
            f[3]
        )));
    }
    let inferred = f[3] / c;
    match explicit {
        Some(m) if m != inferred => Err(SpecError::new(format!(
            "depth_multiplier={m} disagrees with filter {} on input depth {c} (depth multiplier {inferred})",
            shape_text(&f)
        ))),
        _ => Ok(inferred),
    }
}

/// Checks the derived keys a text gave (`output`, `pad`) against the spec.
fn check_claims(
    spec: &LayerSpec,
    output: Option<Shape>,
    pad: Option<(u32, u32)>,
) -> Result<(), SpecError> {
    if let Some(out) = output {
        if out != spec.output {
            return Err(SpecError::new(format!(
                "output={} but the layer produces {}",
                shape_text(&out),
                shape_text(&spec.output)
            )));
        }
    }
    if let Some(pad) = pad {
        if pad != spec.pad {
            return Err(SpecError::new(format!(
                "pad={}x{} but TFLite padding gives {}x{}",
                pad.0, pad.1, spec.pad.0, spec.pad.1
            )));
        }
    }
    Ok(())
}

impl LayerSpec {
    /// Parses `op=depthwise_conv2d,dtype=f32,input=1x112x112x96,filter=1x3x3x96,stride=2,padding=same`.
    ///
    /// Keys: `op` (required), `dtype` (default f32), `input` (required), `filter`,
    /// `stride` (`S` or `SHxSW`), `dilation`, `padding` (`same`|`valid`),
    /// `depth_multiplier`, `activation` (`none`|`relu`|`relu6`); for
    /// `concatenation` `input2` and `axis` (0–3, or −4 to −1); for `pad`
    /// `pad_before` and `pad_after` (`NxHxWxC`, missing outer dimensions 0,
    /// a missing key all 0). Pool filters may be written `KHxKW`. The derived
    /// keys `output` and `pad` are accepted and checked against the derived
    /// values, so a printed spec parses back; for `transpose_conv` `output` is
    /// a parameter (TFLite's `output_shape`), checked for consistency.
    pub fn parse(text: &str) -> Result<LayerSpec, SpecError> {
        let fields = Fields::read(text)?;
        let op = fields.op.ok_or_else(|| SpecError::new("missing op=..."))?;
        let input = fields
            .input
            .ok_or_else(|| SpecError::new("missing input=NxHxWxC"))?;
        let filter = fields.filter(op);
        let depth_multiplier = depth_multiplier(op, filter, &input, fields.depth_multiplier)?;
        // A transpose conv's output is a parameter (TFLite's output_shape
        // input); every other op's is derived and only checked.
        let (given_output, claimed_output) = match op {
            OpKind::TransposeConv => (fields.output, None),
            _ => (None, fields.output),
        };
        let spec = LayerSpec::new(LayerSpecBuilder {
            op,
            dtype: fields.dtype.unwrap_or(Dtype::Float32),
            input,
            filter,
            stride: fields.stride.unwrap_or((1, 1)),
            dilation: fields.dilation.unwrap_or((1, 1)),
            padding: fields.padding.unwrap_or(Padding::Same),
            depth_multiplier,
            activation: fields.activation.unwrap_or(Activation::None),
            output: given_output,
            input2: fields.input2,
            axis: fields.axis,
            paddings: fields.paddings(),
        })?;
        check_claims(&spec, claimed_output, fields.pad)?;
        Ok(spec)
    }
}

impl fmt::Display for LayerSpec {
    /// The canonical spec text; [`LayerSpec::parse`] reads it back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "op={},dtype={},input={}",
            self.op.name(),
            self.dtype.spec_name(),
            shape_text(&self.input)
        )?;
        if let (Some(in2), Some(axis)) = (self.input2, self.axis) {
            write!(f, ",input2={},axis={axis}", shape_text(&in2))?;
        }
        if !matches!(
            self.op,
            OpKind::Add | OpKind::Relu | OpKind::Concatenation | OpKind::Pad
        ) {
            write!(f, ",filter={}", shape_text(&self.filter))?;
        }
        if let Some(p) = &self.paddings {
            write!(
                f,
                ",pad_before={},pad_after={}",
                shape_text(&p.before),
                shape_text(&p.after)
            )?;
        }
        write!(f, ",output={}", shape_text(&self.output))?;
        if self.op.has_window() {
            write!(f, ",stride={}x{}", self.stride.0, self.stride.1)?;
            if self.op != OpKind::TransposeConv {
                write!(f, ",dilation={}x{}", self.dilation.0, self.dilation.1)?;
            }
            write!(
                f,
                ",padding={},pad={}x{}",
                self.padding.name(),
                self.pad.0,
                self.pad.1
            )?;
        }
        if self.op == OpKind::DepthwiseConv2d {
            write!(f, ",depth_multiplier={}", self.depth_multiplier)?;
        }
        if self.activation != Activation::None {
            write!(f, ",activation={}", self.activation.name())?;
        }
        Ok(())
    }
}

fn parse_padding(value: &str) -> Result<Padding, SpecError> {
    match value {
        "same" => Ok(Padding::Same),
        "valid" => Ok(Padding::Valid),
        _ => Err(SpecError::new(format!(
            "padding must be same or valid, not `{value}`"
        ))),
    }
}

fn parse_activation(value: &str) -> Result<Activation, SpecError> {
    Activation::from_suite_name(value).ok_or_else(|| {
        SpecError::new(format!(
            "activation must be none, relu or relu6, not `{value}`"
        ))
    })
}

fn parse_number(key: &str, value: &str) -> Result<u32, SpecError> {
    value.parse::<u32>().map_err(|_| {
        let reason = if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
            format!("is too large (at most {})", u32::MAX)
        } else {
            "is not a non-negative integer".to_owned()
        };
        SpecError::new(format!("{key}: `{value}` {reason}"))
    })
}

fn parse_pair(key: &str, value: &str) -> Result<(u32, u32), SpecError> {
    match value.split_once('x') {
        Some((a, b)) => Ok((parse_number(key, a)?, parse_number(key, b)?)),
        None => {
            let v = parse_number(key, value)?;
            Ok((v, v))
        }
    }
}

/// A concatenation axis: 0 to 3, or −4 to −1 counted from the end (as
/// TFLite's negative axes), normalised to 0 to 3.
fn parse_axis(value: &str) -> Result<u32, SpecError> {
    let bad = || {
        SpecError::new(format!(
            "axis: `{value}` is not an NHWC axis (0 to 3, or -4 to -1)"
        ))
    };
    let a: i64 = value.parse().map_err(|_| bad())?;
    match a {
        0..=3 => Ok(a as u32),
        -4..=-1 => Ok((a + 4) as u32),
        _ => Err(bad()),
    }
}

/// Per-dimension paddings `NxHxWxC`; fewer dimensions are the innermost
/// ones, the missing outer ones 0 (TFLite pads a lower-rank paddings tensor
/// the same way).
fn parse_paddings(key: &str, value: &str) -> Result<Shape, SpecError> {
    parse_dims(key, value, 0)
}

/// `1x112x112x96`, `112x96` (left-padded with 1s to 4-D).
fn parse_shape(key: &str, value: &str) -> Result<Shape, SpecError> {
    parse_dims(key, value, 1)
}

/// One to four `x`-separated numbers, the innermost ones of a 4-D value
/// whose missing outer dimensions are `fill`.
fn parse_dims(key: &str, value: &str, fill: u32) -> Result<Shape, SpecError> {
    let dims = value
        .split('x')
        .map(|d| parse_number(key, d))
        .collect::<Result<Vec<_>, _>>()?;
    if dims.is_empty() || dims.len() > 4 {
        return Err(SpecError::new(format!(
            "{key}: `{value}` must have 1 to 4 dimensions"
        )));
    }
    let mut shape = [fill; 4];
    shape[4 - dims.len()..].copy_from_slice(&dims);
    Ok(shape)
}
