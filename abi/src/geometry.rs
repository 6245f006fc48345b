//! Window geometry shared by every layer of the stack: TFLite's padding
//! schemes and the two formulas derived from them, the output extent of a
//! window (`ComputeOutSize`) and the padding before the first input row or
//! column (`ComputePadding`). The kernel suite's specs, the model's shape
//! checks and the TinySeg transform all use these, so they can never
//! disagree on a shape.

use serde::{Deserialize, Serialize};

/// A 4-D NHWC shape.
pub type Shape = [u32; 4];

/// TFLite padding scheme.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Padding {
    /// Output size `ceil(input / stride)`, input padded as needed.
    #[default]
    Same,
    /// No padding: the window stays inside the input.
    Valid,
}

impl Padding {
    /// Name used in specs (`same`, `valid`).
    pub fn name(self) -> &'static str {
        match self {
            Padding::Same => "same",
            Padding::Valid => "valid",
        }
    }

    /// Code in the job mailbox's `JOB_PADDING` word (1 = same, 2 = valid).
    pub(crate) fn job_code(self) -> i32 {
        match self {
            Padding::Same => 1,
            Padding::Valid => 2,
        }
    }
}

/// TFLite `ComputeOutSize`: the output extent of a window of `filter`
/// (dilated by `dilation`) sliding over `size` with `stride`, in 64 bits so
/// that no 32-bit input overflows. `None` when the window, stride or
/// dilation is empty or the output would have no element.
pub fn out_size(
    padding: Padding,
    size: u64,
    filter: u64,
    stride: u64,
    dilation: u64,
) -> Option<u64> {
    if stride == 0 || filter == 0 || dilation == 0 {
        return None;
    }
    let effective = (filter - 1).checked_mul(dilation)?.checked_add(1)?;
    let out = match padding {
        Padding::Same => size.div_ceil(stride),
        Padding::Valid => (size + stride).saturating_sub(effective) / stride,
    };
    (out > 0).then_some(out)
}

/// TFLite `ComputePadding` for one dimension: rows (or columns) of padding
/// before the first input row; TFLM's kernels ignore the odd remainder
/// after the last one. Clamped to `i32::MAX`, the largest value the guest's
/// words hold.
pub fn pad_before(stride: u32, dilation: u32, input: u32, filter: u32, output: u32) -> u32 {
    let effective = (filter as i64 - 1) * dilation as i64 + 1;
    let total = (output as i64 - 1) * stride as i64 + effective - input as i64;
    (total.max(0) / 2).min(i32::MAX as i64) as u32
}

/// Elements of a shape: the product of its dimensions.
pub fn elements(shape: &Shape) -> u64 {
    shape.iter().map(|&d| d as u64).product()
}

/// `1x112x112x96`
pub fn shape_text(shape: &Shape) -> String {
    shape.map(|d| d.to_string()).join("x")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_size_follows_tflite() {
        // Same: ceil(in / stride); valid: the window stays inside.
        assert_eq!(out_size(Padding::Same, 112, 3, 2, 1), Some(56));
        assert_eq!(out_size(Padding::Valid, 9, 3, 2, 1), Some(4));
        assert_eq!(out_size(Padding::Valid, 5, 3, 1, 2), Some(1));
        assert_eq!(out_size(Padding::Valid, 2, 5, 1, 1), None);
        assert_eq!(out_size(Padding::Same, 4, 0, 1, 1), None);
    }

    #[test]
    fn pad_before_is_half_the_total_padding() {
        // (56 − 1)·2 + 3 − 112 = 1 → 0 before; (8 − 1)·1 + 3 − 8 = 2 → 1.
        assert_eq!(pad_before(2, 1, 112, 3, 56), 0);
        assert_eq!(pad_before(1, 1, 8, 3, 8), 1);
    }
}
