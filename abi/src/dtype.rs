//! Element types of tensors.

use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::UnknownName;

c_constants! {
    /// Element-type codes of the job (`enum memtrace_dtype` of `memtrace_job.h`).
    JOB_DTYPE_CODES: i32 {
        DTYPE_F32 = 1,
        DTYPE_INT8 = 2,
    }
}

/// Element type of the layer's tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dtype {
    /// 32-bit float.
    F32,
    /// Signed 8-bit integer (quantised).
    Int8,
}

impl Dtype {
    /// Bytes per element (T_s in the DMO paper).
    pub fn size(self) -> u64 {
        match self {
            Dtype::F32 => 4,
            Dtype::Int8 => 1,
        }
    }
    /// Name used in specs (`f32`, `int8`).
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::Int8 => "int8",
        }
    }
    /// Code in the job mailbox (`enum memtrace_dtype`).
    pub fn job_code(self) -> i32 {
        match self {
            Dtype::F32 => DTYPE_F32,
            Dtype::Int8 => DTYPE_INT8,
        }
    }
}

impl FromStr for Dtype {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, UnknownName> {
        match s {
            "f32" | "float32" => Ok(Dtype::F32),
            "int8" | "i8" => Ok(Dtype::Int8),
            _ => Err(UnknownName::new("dtype", s, &["f32", "int8"])),
        }
    }
}
