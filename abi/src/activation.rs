//! Fused activations: the clamp (or function) a kernel applies to its
//! output, as TFLite's `ActivationFunctionType` names them. The kernel
//! suite's job mailbox knows three of them ([`Activation::job_code`]); a
//! model may carry all of them.

use serde::{Deserialize, Serialize};

/// Fused activation of an operator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    /// No activation.
    #[default]
    None,
    /// Clamps outputs below 0 to 0.
    Relu,
    /// Clamps outputs to `[-1, 1]`.
    ReluN1To1,
    /// Clamps outputs to `[0, 6]`.
    Relu6,
    /// Hyperbolic tangent.
    Tanh,
    /// TFLite `SIGN_BIT`.
    SignBit,
}

impl Activation {
    /// The activations a kernel-suite layer can fuse, by their spec names.
    pub(crate) const SUITE: [Activation; 3] =
        [Activation::None, Activation::Relu, Activation::Relu6];

    /// Name used in specs and reports (`none`, `relu`, `relu6`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Activation::None => "none",
            Activation::Relu => "relu",
            Activation::ReluN1To1 => "relu_n1_to1",
            Activation::Relu6 => "relu6",
            Activation::Tanh => "tanh",
            Activation::SignBit => "sign_bit",
        }
    }

    /// Code in the job mailbox's `JOB_ACTIVATION` word (0 none, 1 relu,
    /// 2 relu6); `None` for the activations the kernel suite does not fuse.
    pub fn job_code(self) -> Option<i32> {
        match self {
            Activation::None => Some(0),
            Activation::Relu => Some(1),
            Activation::Relu6 => Some(2),
            _ => None,
        }
    }

    /// The activation a suite spec names `name`.
    pub(crate) fn from_suite_name(name: &str) -> Option<Activation> {
        Activation::SUITE.into_iter().find(|a| a.name() == name)
    }
}
