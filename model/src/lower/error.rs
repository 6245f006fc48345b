//! What cannot be lowered, and why.

use crate::OpKind;

/// What cannot be lowered.
#[derive(Debug, thiserror::Error)]
#[error("{}", self.describe())]
pub struct LowerError {
    /// The operator (meaningless for the whole-model kinds
    /// [`LowerSubject::Input`] and [`LowerSubject::Placement`]).
    pub op: usize,
    /// What cannot be lowered.
    pub kind: LowerSubject,
    /// Why the executor cannot run it.
    pub reason: String,
}

/// What a [`LowerError`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LowerSubject {
    /// An operator of this kind.
    Operator(OpKind),
    /// The input file.
    Input,
    /// The tensors' offsets and the arena size.
    Placement,
}

impl LowerError {
    fn describe(&self) -> String {
        match self.kind {
            LowerSubject::Input | LowerSubject::Placement => {
                format!("cannot run the model in the executor: {}", self.reason)
            }
            LowerSubject::Operator(kind) => format!(
                "cannot run operator {} ({}) in the executor: {}",
                self.op,
                kind.tflite_name(),
                self.reason
            ),
        }
    }
}
