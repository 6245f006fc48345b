//! Scratch from the shapes: for each operator whose kernel's scratch need
//! follows from its shapes and parameters, the bytes the kernel will use,
//! against the bytes the operator asked TFLM for
//! (`RequestScratchBufferInArena`). A shortfall is a finding whatever
//! buffer TFLM's layout happens to put after the scratch.
//!
//! The formulas are written from each kernel's use of its buffer (the
//! highest byte it writes), never from the library's own
//! `*_get_buffer_size`, which is the function under test. They model:
//!
//! - CMSIS-NN: the int8 kernels of release v7.0.0 (and of the v7.0.0 + 33
//!   commits TFLM pins, 4ab83cc3, whose kernels use their buffers the same
//!   way) on a core with the DSP extension and no MVE (Cortex-M4, M7, M33),
//!   each wrapper's choice of kernel as the wrapper makes it, TFLM's
//!   CMSIS-NN glue built with GCC;
//! - TFLM's reference kernels: the int8 TRANSPOSE_CONV accumulator, and the
//!   operators that ask for none.
//!
//! Every other operator is listed as not checked, with the reason.

use memtrace_abi::{Arch, Dtype, Kernels, OpKind};
use serde::Serialize;

use crate::{Model, Op};

/// What release of which library the formulas model.
pub const CMSIS_NN_MODELLED: &str =
    "CMSIS-NN v7.0.0 (and TFLM's pin 4ab83cc3), int8, DSP extension without MVE";

/// One operator's scratch: what it asked for and what its kernel uses.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct OperatorScratch {
    /// Operator index in subgraph 0.
    pub op: usize,
    /// TFLite's name of the operator (`CONV_2D`).
    pub name: String,
    /// The kernel the operator runs (`arm_convolve_s8`), when known.
    pub kernel: String,
    /// The shapes and parameters the need follows from.
    pub shapes: String,
    /// Bytes the operator asked for (all its scratch buffers).
    pub requested_bytes: u64,
    /// Bytes its kernel uses (one past the highest byte it writes);
    /// `None` when not checked.
    pub needed_bytes: Option<u64>,
    /// Bytes the kernel uses beyond what was asked for, buffer by buffer
    /// (one buffer's slack never covers another's shortfall).
    pub short_bytes: u64,
    /// Why the need was not derived.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_checked: Option<String>,
}

impl OperatorScratch {
    /// Bytes the kernel uses beyond what the operator asked for.
    pub fn short_by(&self) -> Option<u64> {
        (self.short_bytes > 0).then_some(self.short_bytes)
    }
}

/// Every operator's scratch, sized from its shapes.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, Default)]
pub struct ScratchSizing {
    /// The kernels the formulas model.
    pub modelled: String,
    /// One entry per operator, in execution order.
    pub operators: Vec<OperatorScratch>,
}

impl ScratchSizing {
    /// Operators whose kernel uses more scratch than they asked for.
    pub fn shortfalls(&self) -> impl Iterator<Item = &OperatorScratch> {
        self.operators.iter().filter(|o| o.short_by().is_some())
    }

    /// Operators whose need was not derived.
    pub fn not_checked(&self) -> impl Iterator<Item = &OperatorScratch> {
        self.operators.iter().filter(|o| o.needed_bytes.is_none())
    }

    /// One finding line per shortfall.
    pub fn findings(&self) -> Vec<String> {
        self.shortfalls()
            .map(|o| {
                format!(
                    "operator {}:{}: {} ({}) asked for {} B of scratch and uses {} B ({} B \
                     short)",
                    o.op,
                    o.name,
                    o.kernel,
                    o.shapes,
                    o.requested_bytes,
                    o.needed_bytes.unwrap_or(0),
                    o.short_by().unwrap_or(0)
                )
            })
            .collect()
    }

    /// The report's text: one line, plus one per shortfall.
    pub fn to_text(&self) -> String {
        let checked = self.operators.len() - self.not_checked().count();
        let skipped: Vec<String> = self
            .not_checked()
            .map(|o| format!("{}:{}", o.op, o.name))
            .collect();
        let skipped = if skipped.is_empty() {
            String::new()
        } else {
            format!("; not checked: {}", skipped.join(", "))
        };
        let findings = self.findings();
        let mut s = if findings.is_empty() {
            format!(
                "scratch: {checked} operator(s) sized from their shapes ({}), each asked for \
                 enough{skipped}\n",
                self.modelled
            )
        } else {
            format!(
                "scratch: {} of {checked} operator(s) sized from their shapes ({}) asked for \
                 less than their kernel uses{skipped}\n",
                findings.len(),
                self.modelled
            )
        };
        for f in findings {
            s += &format!("  SCRATCH SHORT: {f}\n");
        }
        s
    }
}

/// Sizes every operator of `model` from its shapes: `names[k]` is operator
/// k's TFLite name, `requested` every scratch buffer TFLM gave (operator,
/// bytes), for `kernels` on `arch`.
pub fn size_scratch(
    model: &Model,
    names: &[String],
    kernels: Kernels,
    arch: Arch,
    requested: &[(usize, u64)],
) -> ScratchSizing {
    let operators = model
        .ops
        .iter()
        .enumerate()
        .map(|(k, op)| {
            let asked: Vec<u64> = requested
                .iter()
                .filter(|(o, _)| *o == k)
                .map(|&(_, b)| b)
                .collect();
            let name = names.get(k).cloned().unwrap_or_else(|| "?".into());
            let derived = derive(model, op, kernels, arch).and_then(|need| {
                if asked.len() > need.buffers.len() {
                    Err(format!(
                        "{} scratch buffers asked for, the kernel uses {}",
                        asked.len(),
                        need.buffers.len()
                    ))
                } else {
                    Ok(need)
                }
            });
            match derived {
                Ok(need) => {
                    let asked_of = |i: usize| asked.get(i).copied().unwrap_or(0);
                    let short = need
                        .buffers
                        .iter()
                        .enumerate()
                        .map(|(i, &n)| n.saturating_sub(asked_of(i)))
                        .sum();
                    OperatorScratch {
                        op: k,
                        name,
                        kernel: need.kernel.to_string(),
                        shapes: need.shapes,
                        requested_bytes: asked.iter().sum(),
                        needed_bytes: Some(need.buffers.iter().sum()),
                        short_bytes: short,
                        not_checked: None,
                    }
                }
                Err(why) => OperatorScratch {
                    op: k,
                    name,
                    kernel: String::new(),
                    shapes: String::new(),
                    requested_bytes: asked.iter().sum(),
                    needed_bytes: None,
                    short_bytes: 0,
                    not_checked: Some(why),
                },
            }
        })
        .collect();
    ScratchSizing {
        modelled: match kernels {
            Kernels::CmsisNn => CMSIS_NN_MODELLED.into(),
            Kernels::Tflm => "TFLM reference kernels".into(),
        },
        operators,
    }
}

/// A kernel's need: which kernel, its shapes, the bytes it uses of each
/// scratch buffer, in the order the operator asks for them.
struct Need {
    kernel: &'static str,
    shapes: String,
    buffers: Vec<u64>,
}

/// The operator's need on `kernels`, or why it is not derived.
fn derive(model: &Model, op: &Op, kernels: Kernels, arch: Arch) -> Result<Need, String> {
    let shapes = Shapes::of(model, op)?;
    match kernels {
        Kernels::CmsisNn => {
            if !matches!(arch, Arch::CortexM4 | Arch::CortexM7 | Arch::CortexM33) {
                return Err(format!("the formulas model DSP cores, not {arch:?}"));
            }
            if shapes.dtype != Dtype::Int8 {
                return Err(format!("{:?} (the formulas are int8's)", shapes.dtype));
            }
            cmsis_nn(op, &shapes)
        }
        Kernels::Tflm => reference(op, &shapes),
    }
}

/// The shapes of an operator's data input, weights and output.
struct Shapes {
    dtype: Dtype,
    input: Vec<u32>,
    weights: Option<Vec<u32>>,
    weights_dtype: Option<Dtype>,
    output: Vec<u32>,
}

impl Shapes {
    fn of(model: &Model, op: &Op) -> Result<Shapes, String> {
        let input = op
            .data_input()
            .and_then(|t| model.tensors.get(t))
            .ok_or("no data input")?;
        let output = op
            .outputs
            .first()
            .and_then(|&t| model.tensors.get(t))
            .ok_or("no output")?;
        // The weights are input 1 of each (TRANSPOSE_CONV's input 0 is the
        // output shape).
        let weights = matches!(
            op.kind,
            OpKind::Conv2d
                | OpKind::DepthwiseConv2d
                | OpKind::FullyConnected
                | OpKind::TransposeConv
        )
        .then(|| op.inputs.get(1).and_then(|&t| model.tensors.get(t)))
        .flatten();
        Ok(Shapes {
            dtype: input.dtype,
            input: input.shape.clone(),
            weights: weights.map(|w| w.shape.clone()),
            weights_dtype: weights.map(|w| w.dtype),
            output: output.shape.clone(),
        })
    }

    /// A 4-D NHWC shape of `shape`, or why not.
    fn nhwc(shape: &[u32], what: &str) -> Result<[u64; 4], String> {
        match shape {
            &[n, h, w, c] => Ok([n as u64, h as u64, w as u64, c as u64]),
            _ => Err(format!("{what} {shape:?} is not 4-D")),
        }
    }
}

/// `1x49x10x1`.
fn text(shape: &[u64]) -> String {
    shape
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join("x")
}

/// TFLM's padding before the window (`ComputePaddingHeightWidth`): half of
/// what the output needs beyond the input, rounded down.
fn pad_before(input: u64, output: u64, filter: u64, stride: u64, dilation: u64) -> u64 {
    let window = (filter - 1) * dilation + 1;
    let reach = (output.max(1) - 1) * stride + window;
    reach.saturating_sub(input) / 2
}

/// A convolution's shapes as CMSIS-NN's wrappers read them (an int8
/// filter, NHWC input and output; the padding before the first row and
/// column recomputed from the output size).
struct Window {
    input: [u64; 4],
    filter: [u64; 4],
    /// Output height and width.
    output: (u64, u64),
    stride: (u64, u64),
    dilation: (u64, u64),
    pad: (u64, u64),
}

impl Window {
    fn of(op: &Op, s: &Shapes) -> Result<Window, String> {
        let o = &op.options;
        let (sh, sw) = (o.stride.0 as u64, o.stride.1 as u64);
        let (dh, dw) = (o.dilation.0 as u64, o.dilation.1 as u64);
        let input @ [_, h, w, _] = Shapes::nhwc(&s.input, "input")?;
        let f = s.weights.as_deref().ok_or("no filter")?;
        if s.weights_dtype != Some(Dtype::Int8) {
            return Err("a filter that is not int8".into());
        }
        let filter @ [_, kh, kw, _] = Shapes::nhwc(f, "filter")?;
        let [_, oh, ow, _] = Shapes::nhwc(&s.output, "output")?;
        Ok(Window {
            input,
            filter,
            output: (oh, ow),
            stride: (sh, sw),
            dilation: (dh, dw),
            pad: (pad_before(h, oh, kh, sh, dh), pad_before(w, ow, kw, sw, dw)),
        })
    }
}

/// CMSIS-NN's int8 convolution wrapper: the kernel it picks and its im2col
/// buffer.
fn conv(op: &Op, s: &Shapes) -> Result<Need, String> {
    let g = Window::of(op, s)?;
    let ([n, h, w, c], [oc, kh, kw, kc], (oh, ow)) = (g.input, g.filter, g.output);
    let ((sh, sw), (dh, dw), (ph, pw)) = (g.stride, g.dilation, g.pad);
    let shapes = format!(
        "input={},filter={},output={}x{}x{}x{oc},stride={sh}x{sw},dilation={dh}x{dw},\
         pad={ph}x{pw}",
        text(&[n, h, w, c]),
        text(&[oc, kh, kw, kc]),
        n,
        oh,
        ow
    );
    let one_by_one = ph == 0 && pw == 0 && kh == 1 && kw == 1 && dh == 1 && dw == 1;
    let (kernel, bytes) = if one_by_one && c == kc {
        // Neither 1×1 kernel touches `ctx->buf` on a GCC build.
        if sh == 1 && sw == 1 {
            ("arm_convolve_1x1_s8_fast", 0)
        } else {
            ("arm_convolve_1x1_s8", 0)
        }
    } else if h == 1 && dw == 1 && kh == 1 && (sw * c) % 4 == 0 && c == kc {
        // Without MVE the 1×N kernel is `arm_convolve_s8`.
        ("arm_convolve_1_x_n_s8", im2col_used(kh * kw * kc, oh * ow))
    } else {
        ("arm_convolve_s8", im2col_used(kh * kw * kc, oh * ow))
    };
    Ok(Need {
        kernel,
        shapes,
        buffers: vec![bytes],
    })
}

/// CMSIS-NN's int8 depthwise wrapper: the kernel it picks and its buffer.
fn depthwise_conv(op: &Op, s: &Shapes) -> Result<Need, String> {
    let g = Window::of(op, s)?;
    let ([n, h, w, c], [_, kh, kw, oc], (oh, ow)) = (g.input, g.filter, g.output);
    let ((sh, sw), (dh, dw), (ph, pw)) = (g.stride, g.dilation, g.pad);
    let shapes = format!(
        "input={},filter=1x{kh}x{kw}x{oc},output={n}x{oh}x{ow}x{oc},stride={sh}x{sw},\
         dilation={dh}x{dw},pad={ph}x{pw}",
        text(&[n, h, w, c])
    );
    let (kernel, bytes) = if oc == c && n == 1 && dh == 1 && dw == 1 {
        if kh == 3 && kw == 3 && ph <= 1 && pw <= 1 {
            ("arm_depthwise_conv_3x3_s8", 0)
        } else {
            // One int16 column of the whole window, every channel.
            ("arm_depthwise_conv_s8_opt", 2 * kh * kw * c)
        }
    } else {
        ("arm_depthwise_conv_s8", 0)
    };
    Ok(Need {
        kernel,
        shapes,
        buffers: vec![bytes],
    })
}

/// The int8 CMSIS-NN kernels TFLM's glue calls, as each wrapper chooses.
fn cmsis_nn(op: &Op, s: &Shapes) -> Result<Need, String> {
    let o = &op.options;
    let (sh, sw) = (o.stride.0 as u64, o.stride.1 as u64);
    match op.kind {
        OpKind::Conv2d => conv(op, s),
        OpKind::DepthwiseConv2d => depthwise_conv(op, s),
        OpKind::AveragePool => {
            let [n, h, w, c] = Shapes::nhwc(&s.input, "input")?;
            Ok(Need {
                kernel: "arm_avgpool_s8",
                shapes: format!(
                    "input={},filter={}x{},stride={sh}x{sw}",
                    text(&[n, h, w, c]),
                    o.filter.0,
                    o.filter.1
                ),
                // One int32 running sum per channel.
                buffers: vec![4 * c],
            })
        }
        OpKind::FullyConnected => {
            if s.output.len() > 2 {
                return Err("an output of more than 2 dimensions (the glue's 1×1 path)".into());
            }
            if s.weights_dtype != Some(Dtype::Int8) {
                return Err("weights that are not int8".into());
            }
            Ok(Need {
                kernel: "arm_fully_connected_s8",
                shapes: format!(
                    "input={},weights={},output={}",
                    text(&widen(&s.input)),
                    text(&widen(s.weights.as_deref().unwrap_or(&[]))),
                    text(&widen(&s.output))
                ),
                buffers: vec![0],
            })
        }
        OpKind::TransposeConv => transpose_conv(op, s),
        OpKind::MaxPool => no_scratch("arm_max_pool_s8", s),
        OpKind::Add => no_scratch("arm_elementwise_add_s8", s),
        OpKind::Mul => no_scratch("arm_elementwise_mul_s8", s),
        OpKind::Softmax => no_scratch("arm_softmax_s8", s),
        OpKind::Reshape => no_scratch("memcpy", s),
        other => Err(format!("memtrace has no formula for {other:?} on CMSIS-NN")),
    }
}

/// `arm_transpose_conv_wrapper_s8` (TFLM's glue asks for two buffers:
/// `ctx` and `reverse_conv_ctx`). With strides of at most 2 and more than
/// 16 input channels it reverses the filter into the second buffer and runs
/// `arm_convolve_s8` on the input upscaled by the stride; otherwise
/// `arm_transpose_conv_s8` accumulates `MAX(KH, stride_h)` int32 rows of
/// `((in_w − 1)·stride_w + MAX(KW, stride_w))·out_c` in the first.
fn transpose_conv(op: &Op, s: &Shapes) -> Result<Need, String> {
    let [n, h, w, c] = Shapes::nhwc(&s.input, "input")?;
    let f = s.weights.as_deref().ok_or("no filter")?;
    let [oc, kh, kw, kc] = Shapes::nhwc(f, "filter")?;
    let [_, oh, ow, _] = Shapes::nhwc(&s.output, "output")?;
    let (sh, sw) = (op.options.stride.0 as u64, op.options.stride.1 as u64);
    let shapes = format!(
        "input={},filter={},output={n}x{oh}x{ow}x{oc},stride={sh}x{sw}",
        text(&[n, h, w, c]),
        text(&[oc, kh, kw, kc])
    );
    let reverse = sh <= 2 && sw <= 2 && c > 16;
    let (kernel, buffers) = if reverse {
        (
            "arm_transpose_conv_wrapper_s8 (reverse convolution)",
            vec![im2col_used(kh * kw * c, oh * ow), oc * kh * kw * kc],
        )
    } else {
        let row = ((w - 1) * sw + kw.max(sw)) * oc;
        ("arm_transpose_conv_s8", vec![kh.max(sh) * row * 4, 0])
    };
    Ok(Need {
        kernel,
        shapes,
        buffers,
    })
}

/// Bytes `arm_convolve_s8` writes of its buffer without MVE, for columns
/// of `k` elements and `pixels` output pixels per group: it copies each
/// pixel's `k` int8 values to byte `2·a` onwards (`a`: `k` rounded up to
/// a multiple of 4), the second pixel's right after the first's, and
/// widens each to int16 at column `0` or `a`; the buffer is flushed every
/// two pixels. So one pixel reaches `2a + k`, two `2a + 2k`.
fn im2col_used(k: u64, pixels: u64) -> u64 {
    let aligned = k.next_multiple_of(4);
    match pixels {
        0 => 0,
        1 => 2 * aligned + k,
        _ => 2 * aligned + 2 * k,
    }
}

/// A shape as `u64`s.
fn widen(shape: &[u32]) -> Vec<u64> {
    shape.iter().map(|&d| d as u64).collect()
}

/// A kernel that takes no scratch.
fn no_scratch(kernel: &'static str, s: &Shapes) -> Result<Need, String> {
    Ok(Need {
        kernel,
        shapes: format!(
            "input={},output={}",
            text(&widen(&s.input)),
            text(&widen(&s.output))
        ),
        buffers: vec![0],
    })
}

/// TFLM's reference kernels: the int8 transpose convolution's int32
/// accumulator (zeroed whole, `memset` of every output element), and the
/// operators that take none with int8 weights.
fn reference(op: &Op, s: &Shapes) -> Result<Need, String> {
    if s.weights_dtype == Some(Dtype::Int4) {
        return Err("int4 weights (unpacked into scratch)".into());
    }
    match op.kind {
        OpKind::TransposeConv if s.dtype == Dtype::Int8 => {
            let elements: u64 = s.output.iter().map(|&d| d as u64).product();
            Ok(Need {
                kernel: "reference_integer_ops::TransposeConv",
                shapes: format!(
                    "input={},output={}",
                    text(&widen(&s.input)),
                    text(&widen(&s.output))
                ),
                buffers: vec![4 * elements],
            })
        }
        OpKind::TransposeConv => Err(format!("{:?} transpose convolution", s.dtype)),
        OpKind::Conv2d
        | OpKind::DepthwiseConv2d
        | OpKind::FullyConnected
        | OpKind::AveragePool
        | OpKind::MaxPool
        | OpKind::Add
        | OpKind::Mul
        | OpKind::Softmax
        | OpKind::Reshape => no_scratch("reference", s),
        other => Err(format!("memtrace has no formula for {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Written from the traced high-water marks of `docs/kernels.md`: a
    /// 3×3×3 filter (27 columns) writes 110 of 112 B, 3×3×16 writes 576 B.
    #[test]
    fn im2col_reaches_two_padded_columns_of_which_the_last_is_short() {
        assert_eq!(im2col_used(27, 100), 110);
        assert_eq!(im2col_used(144, 100), 576);
        assert_eq!(im2col_used(27, 1), 56 + 27);
    }

    #[test]
    fn same_padding_is_half_the_missing_reach() {
        // DS-CNN's first layer: 49x10 input, 10x4 filter, stride 2, 25x5 out.
        assert_eq!(pad_before(49, 25, 10, 2, 1), 4);
        assert_eq!(pad_before(10, 5, 4, 2, 1), 1);
        assert_eq!(pad_before(8, 8, 1, 1, 1), 0);
    }
}
