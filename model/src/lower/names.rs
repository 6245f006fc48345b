//! The buffer names of a model's tensors in a program and in errors.

use crate::Model;

/// Unique buffer names: the tensor's name, with `#index` when two tensors
/// share it (or it is empty).
pub fn tensor_names(model: &Model) -> Vec<String> {
    let mut count = std::collections::HashMap::new();
    for t in &model.tensors {
        *count.entry(t.name.as_str()).or_insert(0) += 1;
    }
    model
        .tensors
        .iter()
        .enumerate()
        .map(|(i, t)| {
            if t.name.is_empty() || count[t.name.as_str()] > 1 {
                format!("{}#{i}", t.name)
            } else {
                t.name.clone()
            }
        })
        .collect()
}
