//! The analyzer's error: every failure of a table, report or picture, as one
//! type with a [`Result`] alias. Write errors stay typed
//! ([`memtrace_io::WriteError`]) and pass through unchanged.

use std::path::PathBuf;

/// Errors of the analyzer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An output file could not be written.
    #[error(transparent)]
    Write(#[from] memtrace_io::WriteError),
    /// A table could not be built or written.
    #[error(transparent)]
    Table(#[from] polars::error::PolarsError),
    /// An OS error without a path yet (a writer's `?`); the atomic writers
    /// turn it into [`memtrace_io::WriteError::Io`] naming their file.
    #[error("{0}")]
    Os(#[from] std::io::Error),
    /// A picture could not be drawn.
    #[error("cannot draw {path}: {message}")]
    Plot {
        /// The picture file.
        path: PathBuf,
        /// What the drawing backend said.
        message: String,
    },
    /// The drawing backend failed (wrapped into [`Error::Plot`] by the caller).
    #[error("{0}")]
    Drawing(String),
    /// The input cannot be analysed, for the reason given.
    #[error("{0}")]
    Invalid(String),
}

impl memtrace_io::output::WriterError for Error {
    fn into_os(self) -> std::result::Result<std::io::Error, Self> {
        match self {
            Error::Os(e) | Error::Write(memtrace_io::WriteError::Os(e)) => Ok(e),
            other => Err(other),
        }
    }
}

/// Result of the analyzer's operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;
