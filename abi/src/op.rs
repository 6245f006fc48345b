//! The operator vocabulary: every operator memtrace knows, with its name in
//! each layer of the stack — the kernel suite's job code and spec name.

use std::fmt;
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

/// The operators the memtrace kernel suite runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// 2-D convolution.
    Conv2d,
    /// Depthwise 2-D convolution.
    DepthwiseConv2d,
    /// Max pooling.
    MaxPool,
    /// Average pooling.
    AveragePool,
    /// Fully connected layer.
    FullyConnected,
    /// Element-wise addition of two inputs of the same shape.
    Add,
    /// Element-wise ReLU.
    Relu,
    /// Naive accumulating matrix multiply written for memtrace (paper Fig. 3b).
    Matmul,
    /// Transposed 2-D convolution (TFLite `TRANSPOSE_CONV`): the output shape
    /// is given, as TFLite's `output_shape` input gives it.
    TransposeConv,
    /// Concatenation of two inputs along one NHWC axis.
    Concatenation,
    /// Constant padding before and after every NHWC dimension.
    Pad,
}

impl Op {
    /// Every operator, in job-code order.
    pub const ALL: [Op; 11] = [
        Op::Conv2d,
        Op::DepthwiseConv2d,
        Op::MaxPool,
        Op::AveragePool,
        Op::FullyConnected,
        Op::Add,
        Op::Relu,
        Op::Matmul,
        Op::TransposeConv,
        Op::Concatenation,
        Op::Pad,
    ];

    /// Name used in specs, layer-begin markers and reports.
    pub fn name(self) -> &'static str {
        match self {
            Op::Conv2d => "conv2d",
            Op::DepthwiseConv2d => "depthwise_conv2d",
            Op::MaxPool => "max_pool",
            Op::AveragePool => "average_pool",
            Op::FullyConnected => "fully_connected",
            Op::Add => "add",
            Op::Relu => "relu",
            Op::Matmul => "matmul",
            Op::TransposeConv => "transpose_conv",
            Op::Concatenation => "concatenation",
            Op::Pad => "pad",
        }
    }

    /// Code in the job mailbox (`enum memtrace_op` in `memtrace_job.h`).
    pub fn job_code(self) -> i32 {
        match self {
            Op::Conv2d => OP_CONV2D,
            Op::DepthwiseConv2d => OP_DEPTHWISE_CONV2D,
            Op::MaxPool => OP_MAX_POOL,
            Op::AveragePool => OP_AVERAGE_POOL,
            Op::FullyConnected => OP_FULLY_CONNECTED,
            Op::Add => OP_ADD,
            Op::Relu => OP_RELU,
            Op::Matmul => OP_MATMUL,
            Op::TransposeConv => OP_TRANSPOSE_CONV,
            Op::Concatenation => OP_CONCATENATION,
            Op::Pad => OP_PAD,
        }
    }

    /// Ops with a sliding window: stride, dilation, padding and the derived
    /// before-padding `pad` apply (transpose_conv has all but dilation).
    pub(crate) fn has_window(self) -> bool {
        matches!(
            self,
            Op::Conv2d | Op::DepthwiseConv2d | Op::MaxPool | Op::AveragePool | Op::TransposeConv
        )
    }

    /// Number of activation inputs (2 for `add` and `concatenation`).
    pub fn inputs(self) -> usize {
        match self {
            Op::Add | Op::Concatenation => 2,
            _ => 1,
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Op {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, UnknownName> {
        Op::ALL
            .into_iter()
            .find(|op| op.name() == s)
            .ok_or_else(|| UnknownName::new("op", s, &Op::ALL.map(Op::name)))
    }
}
