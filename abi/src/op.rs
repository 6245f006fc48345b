//! The operator vocabulary: every operator memtrace knows, in one enum, with
//! its name and code in each layer of the stack — TFLite's builtin operator
//! (import and export of `.tflite`) and the kernel suite's job
//! (`memtrace_job.h`, one layer traced in isolation). [`OpKind::names`] is the one table
//! that says all of them; an operator that a layer does not know has `None`
//! there.

use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::UnknownName;

c_constants! {
    /// Operator codes of the job (`enum memtrace_op` of `memtrace_job.h`).
    JOB_OP_CODES: i32 {
        OP_CONV2D = 1,
        OP_DEPTHWISE_CONV2D = 2,
        OP_MAX_POOL = 3,
        OP_AVERAGE_POOL = 4,
        OP_FULLY_CONNECTED = 5,
        OP_ADD = 6,
        OP_RELU = 7,
        OP_MATMUL = 8,
        OP_TRANSPOSE_CONV = 9,
        OP_CONCATENATION = 10,
        OP_PAD = 11,
    }
}

/// An operator kind. Anything a `.tflite` file holds that is not here is
/// rejected on import with the operator's name and index, or (for runs on
/// real TFLM) imported as [`OpKind::Other`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// TFLite `CONV_2D`.
    Conv2d,
    /// TFLite `DEPTHWISE_CONV_2D`.
    DepthwiseConv2d,
    /// TFLite `FULLY_CONNECTED`.
    FullyConnected,
    /// TFLite `MAX_POOL_2D`.
    MaxPool,
    /// TFLite `AVERAGE_POOL_2D`.
    AveragePool,
    /// TFLite `ADD`: element-wise addition of two inputs.
    Add,
    /// TFLite `SUB`.
    Sub,
    /// TFLite `MUL`.
    Mul,
    /// TFLite `RELU`.
    Relu,
    /// TFLite `RELU6`.
    Relu6,
    /// TFLite `RELU_N1_TO_1`.
    ReluN1To1,
    /// TFLite `LOGISTIC` (sigmoid).
    Logistic,
    /// TFLite `TANH`.
    Tanh,
    /// TFLite `SOFTMAX`.
    Softmax,
    /// TFLite `RESHAPE`.
    Reshape,
    /// TFLite `SQUEEZE`.
    Squeeze,
    /// TFLite `QUANTIZE`.
    Quantize,
    /// TFLite `DEQUANTIZE`.
    Dequantize,
    /// TFLite `CONCATENATION`.
    Concatenation,
    /// TFLite `PAD`: constant padding before and after every dimension.
    Pad,
    /// TFLite `MEAN`.
    Mean,
    /// TFLite `TRANSPOSE_CONV`. Inputs in TFLite's order: the constant
    /// int32 output shape, the weights `[O, KH, KW, I]`, the activation
    /// input and an optional bias.
    TransposeConv,
    /// TinySeg `Spill` (no TFLite builtin): copies the last `output.bytes`
    /// bytes of its input (all of it, or the tail of a partial spill) into its
    /// output, a storage tensor.
    Spill,
    /// The part of a partially spilled tensor that stays in memory: copies
    /// the first `output.bytes` bytes of its input into a new arena tensor,
    /// so that the input (and with it the spilled tail's arena bytes) dies.
    /// It plays the role of TinySeg's `Split` without materialising the tail.
    SpillKeep,
    /// TinySeg `Fetching`: copies a storage tensor back into the arena.
    Fetch,
    /// TinySeg `Fetching` fused with a `CONCATENATION`: concatenates its
    /// inputs along `axis`, at least one of which is a storage tensor.
    FetchConcat,
    /// Any other TFLite operator (builtin or custom), imported for real TFLM
    /// only: planned from its tensors' lifetimes, overlapped only where a
    /// trace on TFLM proves it; no kernel-suite layer.
    Other,
    /// TinySeg `FetchingConv2D`: a `CONV_2D` whose input is the
    /// concatenation along `axis` of its leading non-constant inputs (one or
    /// two, at least one in storage), read in place and never materialised;
    /// the filter and bias follow as in `CONV_2D`.
    FetchConv2d,
    /// Naive accumulating matrix multiply written for memtrace (paper
    /// Fig. 3b): a kernel-suite layer only, no TFLite operator.
    Matmul,
}

/// The names and codes of one operator in each layer of the stack.
pub struct OpNames {
    /// Lower-case name in specs, layer windows and reports (`conv2d`).
    pub name: &'static str,
    /// TFLite's name (`CONV_2D`), or the name memtrace gives an operator
    /// TFLite does not have (`SPILL`).
    pub tflite: &'static str,
    /// TFLite's `BuiltinOperator` code.
    pub builtin: Option<i32>,
    /// The kernel suite's job code (`OP_*`).
    pub job: Option<i32>,
}

/// One row of [`OpKind::names`].
const fn row(
    name: &'static str,
    tflite: &'static str,
    builtin: Option<i32>,
    job: Option<i32>,
) -> OpNames {
    OpNames {
        name,
        tflite,
        builtin,
        job,
    }
}

impl OpKind {
    /// The operators of the kernel suite (those with a job code), in
    /// job-code order.
    pub const SUITE: [OpKind; 11] = [
        OpKind::Conv2d,
        OpKind::DepthwiseConv2d,
        OpKind::MaxPool,
        OpKind::AveragePool,
        OpKind::FullyConnected,
        OpKind::Add,
        OpKind::Relu,
        OpKind::Matmul,
        OpKind::TransposeConv,
        OpKind::Concatenation,
        OpKind::Pad,
    ];

    /// Every operator kind.
    pub const ALL: [OpKind; 29] = [
        OpKind::Conv2d,
        OpKind::DepthwiseConv2d,
        OpKind::FullyConnected,
        OpKind::MaxPool,
        OpKind::AveragePool,
        OpKind::Add,
        OpKind::Sub,
        OpKind::Mul,
        OpKind::Relu,
        OpKind::Relu6,
        OpKind::ReluN1To1,
        OpKind::Logistic,
        OpKind::Tanh,
        OpKind::Softmax,
        OpKind::Reshape,
        OpKind::Squeeze,
        OpKind::Quantize,
        OpKind::Dequantize,
        OpKind::Concatenation,
        OpKind::Pad,
        OpKind::Mean,
        OpKind::TransposeConv,
        OpKind::Spill,
        OpKind::SpillKeep,
        OpKind::Fetch,
        OpKind::FetchConcat,
        OpKind::Other,
        OpKind::FetchConv2d,
        OpKind::Matmul,
    ];

    /// The operator's names and codes in every layer of the stack: the one
    /// table to extend when an operator is added.
    pub const fn names(self) -> OpNames {
        use OpKind as K;
        match self {
            K::Conv2d => row("conv2d", "CONV_2D", Some(3), Some(OP_CONV2D)),
            K::DepthwiseConv2d => row(
                "depthwise_conv2d",
                "DEPTHWISE_CONV_2D",
                Some(4),
                Some(OP_DEPTHWISE_CONV2D),
            ),
            K::FullyConnected => row(
                "fully_connected",
                "FULLY_CONNECTED",
                Some(9),
                Some(OP_FULLY_CONNECTED),
            ),
            K::MaxPool => row("max_pool", "MAX_POOL_2D", Some(17), Some(OP_MAX_POOL)),
            K::AveragePool => row(
                "average_pool",
                "AVERAGE_POOL_2D",
                Some(1),
                Some(OP_AVERAGE_POOL),
            ),
            K::Add => row("add", "ADD", Some(0), Some(OP_ADD)),
            K::Sub => row("sub", "SUB", Some(41), None),
            K::Mul => row("mul", "MUL", Some(18), None),
            K::Relu => row("relu", "RELU", Some(19), Some(OP_RELU)),
            K::Relu6 => row("relu6", "RELU6", Some(21), None),
            K::ReluN1To1 => row("relu_n1_to1", "RELU_N1_TO_1", Some(20), None),
            K::Logistic => row("logistic", "LOGISTIC", Some(14), None),
            K::Tanh => row("tanh", "TANH", Some(28), None),
            K::Softmax => row("softmax", "SOFTMAX", Some(25), None),
            K::Reshape => row("reshape", "RESHAPE", Some(22), None),
            K::Squeeze => row("squeeze", "SQUEEZE", Some(43), None),
            K::Quantize => row("quantize", "QUANTIZE", Some(114), None),
            K::Dequantize => row("dequantize", "DEQUANTIZE", Some(6), None),
            K::Concatenation => row(
                "concatenation",
                "CONCATENATION",
                Some(2),
                Some(OP_CONCATENATION),
            ),
            K::Pad => row("pad", "PAD", Some(34), Some(OP_PAD)),
            K::Mean => row("mean", "MEAN", Some(40), None),
            K::TransposeConv => row(
                "transpose_conv",
                "TRANSPOSE_CONV",
                Some(67),
                Some(OP_TRANSPOSE_CONV),
            ),
            K::Spill => row("spill", "SPILL", None, None),
            K::SpillKeep => row("spill_keep", "SPILL_KEEP", None, None),
            K::Fetch => row("fetch", "FETCH", None, None),
            K::FetchConcat => row("fetch_concat", "FETCH_CONCAT", None, None),
            K::FetchConv2d => row("fetch_conv2d", "FETCH_CONV_2D", None, None),
            K::Other => row("other", "OTHER", None, None),
            K::Matmul => row("matmul", "MATMUL", None, Some(OP_MATMUL)),
        }
    }

    /// Lower-case name used in specs, layer-begin markers and reports.
    pub fn name(self) -> &'static str {
        self.names().name
    }

    /// TFLite's name of the operator (`CONV_2D`), as model reports and
    /// errors say it.
    pub fn tflite_name(self) -> &'static str {
        self.names().tflite
    }

    /// TFLite's `BuiltinOperator` code, if TFLite has the operator.
    pub fn builtin_code(self) -> Option<i32> {
        self.names().builtin
    }

    /// The operator of TFLite builtin `code`, if memtrace models it.
    pub fn from_builtin_code(code: i32) -> Option<OpKind> {
        OpKind::ALL
            .into_iter()
            .find(|k| k.builtin_code() == Some(code))
    }

    /// The custom code of a TinySeg operator in a `.tflite` (TFLite has no
    /// builtin for them): the name under which the TFLM runner registers its
    /// kernel (`harness-c/tflm/storage_ops.cc`) and a firmware must register
    /// one (docs/deploy.md).
    pub fn custom_code(self) -> Option<&'static str> {
        match self {
            OpKind::Spill => Some("MEMTRACE_SPILL"),
            OpKind::SpillKeep => Some("MEMTRACE_SPILL_KEEP"),
            OpKind::Fetch => Some("MEMTRACE_FETCH"),
            OpKind::FetchConcat => Some("MEMTRACE_FETCH_CONCAT"),
            OpKind::FetchConv2d => Some("MEMTRACE_FETCH_CONV_2D"),
            _ => None,
        }
    }

    /// The TinySeg operator of custom code `code`, if it is one.
    pub fn from_custom_code(code: &str) -> Option<OpKind> {
        OpKind::ALL
            .into_iter()
            .find(|k| k.custom_code() == Some(code))
    }

    /// Code in the job mailbox (`enum memtrace_op` in `memtrace_job.h`), if
    /// the kernel suite runs the operator as a layer of its own.
    pub fn job_code(self) -> Option<i32> {
        self.names().job
    }

    /// Ops with a sliding window: stride, dilation, padding and the derived
    /// before-padding `pad` apply (transpose_conv has all but dilation).
    pub fn has_window(self) -> bool {
        matches!(
            self,
            OpKind::Conv2d
                | OpKind::DepthwiseConv2d
                | OpKind::MaxPool
                | OpKind::AveragePool
                | OpKind::TransposeConv
        )
    }

    /// Number of activation inputs of a kernel-suite layer (2 for `add` and
    /// `concatenation`).
    pub fn inputs(self) -> usize {
        match self {
            OpKind::Add | OpKind::Concatenation => 2,
            _ => 1,
        }
    }

    /// The operators TinySeg's graph transformation inserts: they have no
    /// TFLite builtin and move tensors between the arena and storage.
    pub fn is_tinyseg(self) -> bool {
        matches!(
            self,
            OpKind::Spill
                | OpKind::SpillKeep
                | OpKind::Fetch
                | OpKind::FetchConcat
                | OpKind::FetchConv2d
        )
    }
}

impl FromStr for OpKind {
    type Err = UnknownName;
    /// A kernel-suite operator by its spec name (`conv2d`).
    fn from_str(s: &str) -> Result<Self, UnknownName> {
        OpKind::SUITE
            .into_iter()
            .find(|op| op.name() == s)
            .ok_or_else(|| UnknownName::new("op", s, &OpKind::SUITE.map(OpKind::name)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_listed_once_and_names_are_unique() {
        for (i, a) in OpKind::ALL.iter().enumerate() {
            for b in &OpKind::ALL[i + 1..] {
                assert_ne!(a, b);
                assert_ne!(a.name(), b.name());
                assert_ne!(a.tflite_name(), b.tflite_name());
            }
            // The lower-case name is the serde name.
            assert_eq!(
                serde_json::to_string(a).unwrap(),
                format!("\"{}\"", a.name())
            );
        }
        let suite: Vec<OpKind> = OpKind::ALL
            .into_iter()
            .filter(|k| k.job_code().is_some())
            .collect();
        assert_eq!(suite.len(), OpKind::SUITE.len());
        for k in OpKind::SUITE {
            assert!(suite.contains(&k));
            assert_eq!(k.name().parse::<OpKind>(), Ok(k));
        }
        assert!("softmax".parse::<OpKind>().is_err());
    }
}
