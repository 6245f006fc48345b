//! Where a model comes from: the CLI's model argument, a `.tflite` file or
//! `zoo:NAME`.

use crate::{tflite, zoo, Model, ModelError};

/// Loads `MODEL.tflite` or `zoo:NAME` (the CLI's model argument).
pub fn load(arg: &str) -> Result<Model, ModelError> {
    match arg.strip_prefix("zoo:") {
        Some(name) => zoo::build(name),
        None => tflite::import_file(std::path::Path::new(arg)),
    }
}
