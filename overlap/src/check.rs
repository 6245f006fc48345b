//! Cross-checking the three O_s methods against each other (docs/overlap.md).
//!
//! For a traced layer with a known [`LayerSpec`] memtrace has four numbers:
//! the traced *exact* and *monotone* O_s ([`super::empirical`]), the
//! *algorithmic* value ([`super::algorithmic`], the TFLM reference loop nest
//! without arithmetic) and the *analytic* lower bound ([`super::analytic`]).
//! They must satisfy
//!
//! * `analytic <= monotone` — otherwise a plan built on the analytic value
//!   clobbers live input: [`Flag::Unsafe`];
//! * `algorithmic == monotone` — otherwise the compiled kernel does not follow
//!   the reference loop order the algorithmic method models: [`Flag::Mismatch`];
//! * `exact >= monotone` — by definition; a failure is a bug in memtrace:
//!   [`Flag::ExactBelowMonotone`].
//!
//! Values are never clamped to make a check pass.

use std::fmt;

use memtrace_abi::LayerSpec;
use serde::{Deserialize, Serialize};

use super::algorithmic::{algorithmic_overlap, algorithmic_overlap_of_input};
use super::analytic::{analytic_overlap, analytic_overlap_as_printed, analytic_overlap_of_input};

/// A failed cross-check of one layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Flag {
    /// analytic > traced monotone: the lower bound is not a lower bound.
    #[serde(rename = "UNSAFE")]
    Unsafe,
    /// algorithmic ≠ traced monotone: the kernel's loop order is not the
    /// modelled one (or the model is wrong).
    #[serde(rename = "MISMATCH")]
    Mismatch,
    /// traced exact < traced monotone: impossible by definition.
    #[serde(rename = "EXACT_BELOW_MONOTONE")]
    ExactBelowMonotone,
}

impl Flag {
    /// Name used in reports (`UNSAFE`, `MISMATCH`, `EXACT_BELOW_MONOTONE`).
    pub fn name(self) -> &'static str {
        match self {
            Flag::Unsafe => "UNSAFE",
            Flag::Mismatch => "MISMATCH",
            Flag::ExactBelowMonotone => "EXACT_BELOW_MONOTONE",
        }
    }
}

impl fmt::Display for Flag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The host-side methods evaluated for one layer spec.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MethodValues {
    /// Algorithmic (monotone) O_s of the TFLM reference loop nest, bytes.
    pub algorithmic: Option<u64>,
    /// memtrace's safe reading of the analytic bound, bytes.
    pub analytic: Option<u64>,
    /// The paper's equations exactly as printed, bytes (may be negative, and
    /// may exceed the true value: see docs/overlap.md).
    pub analytic_printed: Option<i64>,
}

/// Evaluates the algorithmic and analytic methods for `spec`, but only when
/// the traced buffers are the ones the spec describes (`input_bytes`,
/// `output_bytes`); otherwise every value is `None`.
pub(crate) fn method_values(spec: &LayerSpec, input_bytes: u64, output_bytes: u64) -> MethodValues {
    if spec.input_bytes() != input_bytes || spec.output_bytes() != output_bytes {
        return MethodValues::default();
    }
    MethodValues {
        algorithmic: algorithmic_overlap(spec),
        analytic: analytic_overlap(spec),
        analytic_printed: analytic_overlap_as_printed(spec),
    }
}

/// `method_values` for activation input `input` of `spec` against its
/// output (input 0 is `method_values` itself). The paper prints no
/// equation for a second input, so `analytic_printed` is `None` for it.
pub fn method_values_of_input(
    spec: &LayerSpec,
    input: usize,
    input_bytes: u64,
    output_bytes: u64,
) -> MethodValues {
    if input == 0 {
        return method_values(spec, input_bytes, output_bytes);
    }
    if spec.input_bytes_of(input) != Some(input_bytes) || spec.output_bytes() != output_bytes {
        return MethodValues::default();
    }
    MethodValues {
        algorithmic: algorithmic_overlap_of_input(spec, input),
        analytic: analytic_overlap_of_input(spec, input),
        analytic_printed: None,
    }
}

/// The failed checks of one layer, in a fixed order.
pub fn check(monotone: u64, exact: u64, methods: &MethodValues) -> Vec<Flag> {
    let mut flags = Vec::new();
    if methods.analytic.is_some_and(|a| a > monotone) {
        flags.push(Flag::Unsafe);
    }
    if methods.algorithmic.is_some_and(|a| a != monotone) {
        flags.push(Flag::Mismatch);
    }
    if exact < monotone {
        flags.push(Flag::ExactBelowMonotone);
    }
    flags
}

/// One line explaining `flag` with the numbers, for warnings.
pub fn explain(flag: Flag, monotone: u64, exact: u64, methods: &MethodValues) -> String {
    let show = |v: Option<u64>| v.map_or("-".to_owned(), |v| v.to_string());
    match flag {
        Flag::Unsafe => format!(
            "UNSAFE: analytic O_s {} B > traced monotone O_s {monotone} B (a plan built on the analytic value clobbers live input)",
            show(methods.analytic)
        ),
        Flag::Mismatch => format!(
            "MISMATCH: algorithmic O_s {} B != traced monotone O_s {monotone} B (the kernel does not follow the TFLM reference loop order)",
            show(methods.algorithmic)
        ),
        Flag::ExactBelowMonotone => format!(
            "EXACT_BELOW_MONOTONE: traced exact O_s {exact} B < monotone {monotone} B (a memtrace bug)"
        ),
    }
}

/// [`explain`] for a layer that ran `kernel` (e.g. `` `arm_nn_mat_mult_nt_t_s8`
/// (CMSIS-NN) ``), some other kernel than the TFLM reference ones whose loop
/// nests the algorithmic and analytic methods model: `UNSAFE` and
/// `MISMATCH` say that, and that the paper's claim (DMO §III-F: vectorised
/// kernels keep the reference O_s) does not hold for the layer.
pub fn explain_other_kernel(
    flag: Flag,
    monotone: u64,
    exact: u64,
    methods: &MethodValues,
    kernel: &str,
) -> String {
    let show = |v: Option<u64>| v.map_or("-".to_owned(), |v| v.to_string());
    match flag {
        Flag::Unsafe => format!(
            "UNSAFE: analytic O_s {} B > traced monotone O_s {monotone} B (a plan built on the analytic value clobbers live input): the analytic bound models the TFLM reference loop nest, but this layer ran {kernel}, which does not keep the reference O_s (DMO §III-F assumes vectorised kernels do)",
            show(methods.analytic)
        ),
        Flag::Mismatch => format!(
            "MISMATCH: algorithmic O_s {} B != traced monotone O_s {monotone} B: the algorithmic method models the TFLM reference loop nest, but this layer ran {kernel}, whose own loop order gives the traced value (use it; DMO §III-F assumes vectorised kernels keep the reference O_s)",
            show(methods.algorithmic)
        ),
        Flag::ExactBelowMonotone => explain(flag, monotone, exact, methods),
    }
}

/// `(monotone − analytic) / monotone` in percent: how much of the traced
/// monotone O_s the analytic bound gives away (negative when the bound is
/// unsafe; 0 when both are 0). `None` without an analytic value.
pub fn analytic_error_percent(monotone: u64, analytic: Option<u64>) -> Option<f64> {
    let a = analytic?;
    if monotone == 0 {
        return Some(if a == 0 { 0.0 } else { -100.0 * a as f64 });
    }
    Some(100.0 * (monotone as f64 - a as f64) / monotone as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(t: &str) -> LayerSpec {
        LayerSpec::parse(t).unwrap()
    }

    #[test]
    fn methods_need_matching_buffers() {
        let s =
            spec("op=depthwise_conv2d,input=1x112x112x96,filter=1x3x3x96,stride=2,padding=same");
        let m = method_values(&s, s.input_bytes(), s.output_bytes());
        assert_eq!(m.algorithmic, Some(1_204_224));
        assert_eq!(m.analytic, Some(1_193_376));
        assert_eq!(m.analytic_printed, Some(1_193_376));
        assert_eq!(
            method_values(&s, s.input_bytes() + 4, s.output_bytes()),
            MethodValues::default()
        );
    }

    #[test]
    fn table_two_row_three_is_inception_resnet_v2_stem_conv() {
        // Conv2d_2b_3x3: 147x147x32 -> 147x147x64, 3x3, same. Paper: 2 746 884
        // exact and estimate (0 %). Traced value: docs/overlap.md §7.
        let s = spec("op=conv2d,input=1x147x147x32,filter=64x3x3x32,stride=1,padding=same");
        let m = method_values(&s, s.input_bytes(), s.output_bytes());
        assert_eq!(m.algorithmic, Some(2_746_884));
        assert_eq!(m.analytic, Some(2_746_884));
        assert_eq!(m.analytic_printed, Some(2_746_884));
        assert_eq!(s.input_bytes() - ((147 + 2) * 32 - 1) * 4, 2_746_884);
    }

    #[test]
    fn flags_are_raised_without_clamping() {
        let m = MethodValues {
            algorithmic: Some(100),
            analytic: Some(120),
            analytic_printed: None,
        };
        assert_eq!(
            check(100, 100, &m),
            vec![Flag::Unsafe],
            "analytic above monotone"
        );
        assert_eq!(check(384, 384, &m), vec![Flag::Mismatch]);
        assert_eq!(
            check(110, 90, &m),
            vec![Flag::Unsafe, Flag::Mismatch, Flag::ExactBelowMonotone]
        );
        assert!(check(100, 100, &MethodValues::default()).is_empty());
        assert!(explain(Flag::Unsafe, 100, 100, &m).contains("120 B > traced monotone O_s 100 B"));
        let other = |f| explain_other_kernel(f, 100, 100, &m, "`arm_x` (CMSIS-NN)");
        assert!(other(Flag::Unsafe)
            .starts_with("UNSAFE: analytic O_s 120 B > traced monotone O_s 100 B"));
        assert!(other(Flag::Mismatch).contains(
            "models the TFLM reference loop nest, but this layer ran `arm_x` (CMSIS-NN)"
        ));
        assert_eq!(
            other(Flag::ExactBelowMonotone),
            explain(Flag::ExactBelowMonotone, 100, 100, &m)
        );
        assert_eq!(
            serde_json::to_string(&Flag::Mismatch).unwrap(),
            "\"MISMATCH\""
        );
    }

    #[test]
    fn error_percent() {
        assert_eq!(analytic_error_percent(200, Some(150)), Some(25.0));
        assert_eq!(analytic_error_percent(0, Some(0)), Some(0.0));
        assert_eq!(analytic_error_percent(100, None), None);
        assert!(analytic_error_percent(100, Some(110)).unwrap() < 0.0);
    }
}
