//! Rust flatbuffers code generated at build time from TensorFlow's official
//! TFLite schema (see `model/build.rs`). Never edited by hand.
#![allow(
    clippy::all,
    clippy::pedantic,
    dead_code,
    unused_imports,
    non_camel_case_types,
    non_snake_case,
    missing_docs,
    unreachable_patterns,
    unused_qualifications
)]

include!(concat!(env!("OUT_DIR"), "/tflite_schema.rs"));
