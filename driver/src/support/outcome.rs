//! What a command answers: the report it prints, the lines it says on
//! stderr, and the status it exits with — decided by the report itself, so
//! the binary makes one call per command and prints what comes back.

use serde::Serialize;

use crate::support::error::Result;

/// The form of a printed report (each command offers some of them; the
/// others print its text form).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Text tables, for a person.
    Table,
    /// One JSON document.
    Json,
    /// Comma-separated rows.
    Csv,
    /// A Markdown document (a pull-request comment).
    Markdown,
}

/// A command's answer, in the order it is printed.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Stderr lines before the report: warnings, notes.
    pub notes: Vec<String>,
    /// The report: standard output, or the `--out` file.
    pub report: String,
    /// Stderr lines after the report: what failed, the summary.
    pub verdict: Vec<String>,
    /// The exit status: 0 when the command's check passed.
    pub status: u8,
}

impl Outcome {
    /// The status of a check that passed (`true`: 0) or failed (1).
    pub(crate) fn status_of(passed: bool) -> u8 {
        u8::from(!passed)
    }
}

/// A report that knows what its command answers.
pub trait Answer {
    /// The report in `format`, its stderr lines and its exit status.
    fn answer(&self, format: Format) -> Result<Outcome>;
}

/// A report and its verdict, as JSON prints them: every field of the
/// report, then `"ok"` (what the text's `result:` line and the exit status
/// say).
#[derive(Serialize)]
struct WithVerdict<'a, R: Serialize> {
    #[serde(flatten)]
    report: &'a R,
    ok: bool,
}

/// `report` as pretty JSON with its verdict `ok`, and a final newline.
pub(crate) fn json_with_verdict<R: Serialize>(report: &R, ok: bool) -> Result<String> {
    Ok(serde_json::to_string_pretty(&WithVerdict { report, ok })? + "\n")
}
