//! The driver's error: what a workflow could not do, with the context it was
//! doing it in. Library errors of the tracer, io, overlap, model and
//! analyzer crates pass through unchanged; the workflows add words, never a
//! second copy of a cause.

use std::path::PathBuf;

/// Errors of the workflows.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Loading or tracing a guest failed.
    #[error(transparent)]
    Trace(#[from] memtrace_tracer::TraceError),
    /// An analysis, report or plot failed.
    #[error(transparent)]
    Analyzer(#[from] memtrace_analyzer::Error),
    /// A model could not be loaded, built or written.
    #[error(transparent)]
    Model(#[from] memtrace_model::ModelError),
    /// A planner failed or produced an invalid plan.
    #[error(transparent)]
    Plan(#[from] memtrace_model::planner::PlanError),
    /// No random configuration fits the instruction budget.
    #[error(transparent)]
    Budget(#[from] memtrace_overlap::configs::BudgetError),
    /// An input file could not be read.
    #[error(transparent)]
    Read(#[from] memtrace_io::ReadError),
    /// An output file could not be written.
    #[error(transparent)]
    Write(#[from] memtrace_io::WriteError),
    /// A file could not be read or written.
    #[error("cannot {action} {path}: {source}")]
    Io {
        /// `read` or `write`.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// A JSON document could not be produced or understood.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// A table could not be built.
    #[error(transparent)]
    Table(#[from] polars::error::PolarsError),
    /// A report could not be written to its stream.
    #[error("writing the report: {0}")]
    Output(#[from] std::io::Error),
    /// A workflow failed for the reason given.
    #[error("{0}")]
    Failed(String),
    /// `inner`, which happened while doing `context`.
    #[error("{context}: {inner}")]
    Context {
        /// What the workflow was doing.
        context: String,
        /// What went wrong.
        inner: Box<Error>,
    },
}

/// Result of the workflows.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Adds what the workflow was doing to an error.
pub trait Context<T> {
    /// Wraps the error with the context `f` describes.
    fn with_context<C: Into<String>>(self, f: impl FnOnce() -> C) -> Result<T>;
}

impl<T, E: Into<Error>> Context<T> for std::result::Result<T, E> {
    fn with_context<C: Into<String>>(self, f: impl FnOnce() -> C) -> Result<T> {
        self.map_err(|e| Error::Context {
            context: f().into(),
            inner: Box::new(e.into()),
        })
    }
}

/// An [`Error::Failed`] from a format string.
#[macro_export]
macro_rules! failed {
    ($($arg:tt)*) => { $crate::Error::Failed(format!($($arg)*)) };
}

/// Returns an [`Error::Failed`] from a format string.
#[macro_export]
macro_rules! bail {
    ($($arg:tt)*) => { return Err($crate::failed!($($arg)*)) };
}
