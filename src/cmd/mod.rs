//! Subcommands: each parses its arguments into a driver options type, calls
//! one workflow and prints its report.

pub mod bench;
pub mod plan;
pub mod regress;
pub mod run;
pub mod sweep_args;
pub mod table;
pub mod validate;
pub mod verify;
pub mod zoo;

use std::path::Path;

/// Writes `text` to `out` atomically, or to stdout.
pub fn write_report(out: Option<&Path>, text: &str) -> anyhow::Result<()> {
    match out {
        Some(path) => memtrace_analyzer::output::write_atomically(path, |w| {
            std::io::Write::write_all(w, text.as_bytes())
                .map_err(|e| memtrace_analyzer::output::write_error(path, e))
        })?,
        None => print!("{text}"),
    }
    Ok(())
}
