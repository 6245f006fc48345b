//! Element types of tensors: one enum for the model's tensors and the kernel
//! suite's layers. The suite knows only some of them ([`Dtype::job_code`]).

use std::fmt;
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

/// Element type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dtype {
    /// 32-bit float.
    Float32,
    /// Signed 8-bit integer (quantised).
    Int8,
    /// Unsigned 8-bit integer.
    Uint8,
    /// Signed 16-bit integer.
    Int16,
    /// Signed 32-bit integer.
    Int32,
    /// Signed 64-bit integer.
    Int64,
    /// Boolean, one byte per element.
    Bool,
    /// 16-bit float.
    Float16,
    /// Unsigned 16-bit integer.
    Uint16,
    /// Unsigned 32-bit integer (TFLM's signal library, e.g. its energy op).
    Uint32,
    /// Unsigned 64-bit integer.
    Uint64,
    /// 64-bit float.
    Float64,
    /// Complex number of two 32-bit floats.
    Complex64,
    /// Complex number of two 64-bit floats.
    Complex128,
    /// Signed 4-bit integer: packed two to a byte in the file's constant
    /// buffers, one byte per element in the arena (TFLM unpacks it).
    Int4,
    /// A resource handle (TFLM's resource variables), an int32 in the arena.
    Resource,
}

impl Dtype {
    /// The element types of kernel-suite layers, by their spec names.
    pub const SUITE: [Dtype; 2] = [Dtype::Float32, Dtype::Int8];

    /// Bytes per element (T_s in the DMO paper), as TFLM's
    /// `TfLiteTypeSizeOf` counts them in the arena.
    pub fn size(self) -> u64 {
        match self {
            Dtype::Int8 | Dtype::Uint8 | Dtype::Bool | Dtype::Int4 => 1,
            Dtype::Int16 | Dtype::Float16 | Dtype::Uint16 => 2,
            Dtype::Float32 | Dtype::Int32 | Dtype::Uint32 | Dtype::Resource => 4,
            Dtype::Int64 | Dtype::Uint64 | Dtype::Float64 | Dtype::Complex64 => 8,
            Dtype::Complex128 => 16,
        }
    }

    /// Lower-case name used in model reports (`float32`, `int8`, ...); also
    /// the serde name.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Float32 => "float32",
            Dtype::Int8 => "int8",
            Dtype::Uint8 => "uint8",
            Dtype::Int16 => "int16",
            Dtype::Int32 => "int32",
            Dtype::Int64 => "int64",
            Dtype::Bool => "bool",
            Dtype::Float16 => "float16",
            Dtype::Uint16 => "uint16",
            Dtype::Uint32 => "uint32",
            Dtype::Uint64 => "uint64",
            Dtype::Float64 => "float64",
            Dtype::Complex64 => "complex64",
            Dtype::Complex128 => "complex128",
            Dtype::Int4 => "int4",
            Dtype::Resource => "resource",
        }
    }

    /// Name used in specs (`f32`, `int8`): float32 is written `f32` there.
    pub fn spec_name(self) -> &'static str {
        match self {
            Dtype::Float32 => "f32",
            other => other.name(),
        }
    }

    /// Code in the job mailbox (`enum memtrace_dtype`), if the kernel suite
    /// has layers of this type.
    pub fn job_code(self) -> Option<i32> {
        match self {
            Dtype::Float32 => Some(DTYPE_F32),
            Dtype::Int8 => Some(DTYPE_INT8),
            _ => None,
        }
    }

    /// The kernel-suite dtype whose O_s applies. `uint8` maps to `int8`: same
    /// element size, and TFLite's uint8 reference kernels (Conv, DepthwiseConv,
    /// pools, FullyConnected) walk exactly the loop nests of the int8 ones, so
    /// their load/store order — the only thing O_s depends on — is the same.
    pub fn suite_equivalent(self) -> Option<Dtype> {
        match self {
            Dtype::Float32 => Some(Dtype::Float32),
            Dtype::Int8 | Dtype::Uint8 => Some(Dtype::Int8),
            _ => None,
        }
    }
}

impl fmt::Display for Dtype {
    /// The lower-case [`Dtype::name`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Dtype {
    type Err = UnknownName;
    /// A kernel-suite element type by its spec name (`f32` or `float32`,
    /// `int8` or `i8`).
    fn from_str(s: &str) -> Result<Self, UnknownName> {
        match s {
            "f32" | "float32" => Ok(Dtype::Float32),
            "int8" | "i8" => Ok(Dtype::Int8),
            _ => Err(UnknownName::new("dtype", s, &["f32", "int8"])),
        }
    }
}

/// Serde of a kernel-suite layer's dtype by its spec name (`f32`, `int8`),
/// as specs are written in reports and baselines.
pub(crate) mod spec_serde {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::Dtype;

    pub(crate) fn serialize<S: Serializer>(d: &Dtype, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(d.spec_name())
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Dtype, D::Error> {
        let name = String::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}
