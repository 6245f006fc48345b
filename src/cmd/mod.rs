//! Subcommands: each parses its arguments into a driver options type, calls
//! one workflow and hands its report to [`finish`], which prints what the
//! report answers and exits with the status it chose.

pub mod bench;
pub mod check;
pub mod cold;
pub mod model_run_args;
pub mod plan;
pub mod regress;
pub mod run;
pub mod spill_args;
pub mod sweep_args;
pub mod table;
pub mod validate;
pub mod verify;
pub mod zoo;

use std::path::Path;

pub use memtrace_driver::support::text::{json_terminal_safe, terminal_safe};

/// Prints one line to stderr, its control characters escaped
/// ([`terminal_safe`]): warnings and notes quote model and guest strings.
pub fn say(line: &str) {
    eprintln!("{}", terminal_safe(line));
}

/// `--format` of the commands that print a table or JSON.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
}

impl From<Format> for memtrace_driver::Format {
    fn from(format: Format) -> Self {
        match format {
            Format::Table => Self::Table,
            Format::Json => Self::Json,
        }
    }
}

/// `--format` of the commands that print a table, JSON or CSV rows.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum TableFormat {
    Table,
    Json,
    Csv,
}

impl From<TableFormat> for memtrace_driver::Format {
    fn from(format: TableFormat) -> Self {
        match format {
            TableFormat::Table => Self::Table,
            TableFormat::Json => Self::Json,
            TableFormat::Csv => Self::Csv,
        }
    }
}

/// Prints what a command's report answers ([`memtrace_driver::Answer`]):
/// its notes, the report (to `out`, or stdout), its verdict; and ends with
/// the exit status the report chose.
pub fn finish(
    report: &dyn memtrace_driver::Answer,
    format: memtrace_driver::Format,
    out: Option<&Path>,
) -> anyhow::Result<std::process::ExitCode> {
    let outcome = report.answer(format)?;
    for line in &outcome.notes {
        say(line);
    }
    if out.is_some() || !outcome.report.is_empty() {
        write_report(out, &outcome.report, format)?;
    }
    for line in &outcome.verdict {
        say(line);
    }
    Ok(std::process::ExitCode::from(outcome.status))
}

/// Writes a report in `format` to `out` atomically, or to stdout; either
/// way safe to print ([`printable`]).
pub fn write_report(
    out: Option<&Path>,
    text: &str,
    format: memtrace_driver::Format,
) -> anyhow::Result<()> {
    let text = &*printable(text, format, out.is_none());
    match out {
        Some(path) => memtrace_io::output::write_atomically(path, |w| {
            std::io::Write::write_all(w, text.as_bytes())
                .map_err(|e| memtrace_io::output::write_error(path, e))
        })?,
        None => write_stdout(text)?,
    }
    Ok(())
}

/// A report in `format` as it is written (`to_stdout`: on standard
/// output, else to a file). Reports carry names a model or guest chose, and
/// whoever reads a text report reads it on a terminal: a table or Markdown
/// gets its control characters escaped ([`terminal_safe`]). JSON stays
/// JSON: the same characters become JSON `\u` escapes
/// ([`json_terminal_safe`]), so it parses to the very strings. CSV is data
/// with no escape of its own: written as it is, except to a terminal.
pub fn printable(
    text: &str,
    format: memtrace_driver::Format,
    to_stdout: bool,
) -> std::borrow::Cow<'_, str> {
    use memtrace_driver::Format;
    use std::io::IsTerminal;
    match format {
        Format::Json => json_terminal_safe(text),
        Format::Csv if !(to_stdout && std::io::stdout().is_terminal()) => {
            std::borrow::Cow::Borrowed(text)
        }
        Format::Csv | Format::Table | Format::Markdown => terminal_safe(text),
    }
}

/// Writes text to stdout, its control characters escaped ([`terminal_safe`]:
/// reports carry names a model chose); see [`write_stdout`].
pub fn emit(text: &str) -> anyhow::Result<()> {
    write_stdout(&terminal_safe(text))
}

/// Writes `text` to stdout as it is; a closed or full stdout is an error
/// (not a panic), which `main` reports, or for a closed pipe ends quietly.
fn write_stdout(text: &str) -> anyhow::Result<()> {
    use anyhow::Context;
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .context("writing to stdout")
}

/// Ends the process with a malformed-command-line error (exit status 2, as
/// clap's own): for options that are valid alone but have no effect in the
/// combination given.
pub fn usage_error(message: &str) -> ! {
    clap::Error::raw(
        clap::error::ErrorKind::ArgumentConflict,
        format!("{message}\n"),
    )
    .exit()
}

/// `--jobs`: a worker count from 1 to [`MAX_JOBS`](memtrace_driver::support::common::MAX_JOBS).
pub fn jobs(text: &str) -> Result<usize, String> {
    let max = memtrace_driver::support::common::MAX_JOBS;
    text.parse::<usize>()
        .ok()
        .filter(|n| (1..=max).contains(n))
        .ok_or_else(|| {
            format!("`{text}` is not a worker count from 1 to {max} (each worker is an emulator)")
        })
}

/// `--runtime`: only `tflm` is left. memtrace's own executor was retired
/// (TinySeg's storage operators are the TFLM runner's custom operators), so
/// `executor` is an error that says so instead of an unknown value.
pub fn runtime_value(text: &str) -> Result<String, String> {
    match text {
        "tflm" => Ok(text.to_string()),
        "executor" => Err(
            "memtrace's executor was retired: every model runs on real TFLM (the \
             default; TinySeg's spill and fetch operators are the runner's custom operators), so \
             leave out --runtime"
                .into(),
        ),
        other => Err(format!("unknown runtime `{other}` (only tflm)")),
    }
}

/// `--accumulator`: only `int32`, TFLM's own. TinySeg's int16 accumulator
/// for TRANSPOSE_CONV was dropped with the executor: TFLM's TRANSPOSE_CONV
/// asks for an int32 scratch in `Prepare`, an int16 one would need a kernel
/// of memtrace's own in every firmware, and it is exact only where every
/// sum fits 16 bits (docs/tinyseg.md).
pub fn accumulator_value(text: &str) -> Result<String, String> {
    match text {
        "int32" => Ok(text.to_string()),
        "int16" => Err(
            "the int16 TRANSPOSE_CONV accumulator was dropped: TFLM's TRANSPOSE_CONV \
             keeps an int32 accumulator, and a narrower one would need a kernel of memtrace's own \
             in the firmware (docs/tinyseg.md, \"What was dropped\")"
                .into(),
        ),
        other => Err(format!("unknown accumulator `{other}` (only int32)")),
    }
}
