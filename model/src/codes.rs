//! TFLite's schema codes for memtrace's vocabulary: what the exporter
//! writes and the importer reads (and the TinySeg operators' options, which
//! both use) for a dtype and an activation.

use crate::schema::tflite as fb;
use crate::{Activation, Dtype};

/// The TFLite tensor type of `d`.
pub(crate) fn tensor_type(d: Dtype) -> fb::TensorType {
    match d {
        Dtype::Float32 => fb::TensorType::Float32,
        Dtype::Int8 => fb::TensorType::Int8,
        Dtype::Uint8 => fb::TensorType::Uint8,
        Dtype::Int16 => fb::TensorType::Int16,
        Dtype::Int32 => fb::TensorType::Int32,
        Dtype::Int64 => fb::TensorType::Int64,
        Dtype::Bool => fb::TensorType::Bool,
        Dtype::Float16 => fb::TensorType::Float16,
        Dtype::Uint16 => fb::TensorType::Uint16,
        Dtype::Uint32 => fb::TensorType::Uint32,
        Dtype::Uint64 => fb::TensorType::Uint64,
        Dtype::Float64 => fb::TensorType::Float64,
        Dtype::Complex64 => fb::TensorType::Complex64,
        Dtype::Complex128 => fb::TensorType::Complex128,
        Dtype::Int4 => fb::TensorType::Int4,
        Dtype::Resource => fb::TensorType::Resource,
    }
}

/// The TFLite fused activation of `a`.
pub(crate) fn act(a: Activation) -> fb::ActivationFunctionType {
    use fb::ActivationFunctionType as A;
    match a {
        Activation::None => A::None,
        Activation::Relu => A::Relu,
        Activation::ReluN1To1 => A::ReluN1To1,
        Activation::Relu6 => A::Relu6,
        Activation::Tanh => A::Tanh,
        Activation::SignBit => A::SignBit,
    }
}

/// The element type of a TFLite tensor type: every type TFLM gives a size
/// in the arena (`TfLiteTypeSizeOf`); `None` for those it has none for
/// (strings, variants, and types newer than TFLM's allocator).
pub(crate) fn dtype(t: fb::TensorType) -> Option<Dtype> {
    use fb::TensorType as T;
    Some(match t {
        T::Float32 => Dtype::Float32,
        T::Int8 => Dtype::Int8,
        T::Uint8 => Dtype::Uint8,
        T::Int16 => Dtype::Int16,
        T::Int32 => Dtype::Int32,
        T::Int64 => Dtype::Int64,
        T::Bool => Dtype::Bool,
        T::Float16 => Dtype::Float16,
        T::Uint16 => Dtype::Uint16,
        T::Uint32 => Dtype::Uint32,
        T::Uint64 => Dtype::Uint64,
        T::Float64 => Dtype::Float64,
        T::Complex64 => Dtype::Complex64,
        T::Complex128 => Dtype::Complex128,
        T::Int4 => Dtype::Int4,
        T::Resource => Dtype::Resource,
        _ => return None,
    })
}
