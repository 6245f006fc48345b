//! Pieces shared by subcommands: tracing with the analyzer on a second
//! thread, output-path checks, progress and table printing.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use memtrace_analyzer::pipeline::{consume, Analysis};
use memtrace_tracer::{ElfImage, EventSink, Progress, RunSummary, TraceOptions};

/// Runs the tracer on this thread and `analyses` on another, connected by
/// bounded channels.
pub fn trace_with(
    image: &ElfImage,
    mut options: TraceOptions<'_>,
    analyses: &mut [&mut (dyn Analysis + Send)],
) -> Result<RunSummary> {
    let (tx, rx) = crossbeam_channel::bounded(64);
    let (recycle_tx, recycle_rx) = crossbeam_channel::bounded(64);
    let bar = progress_bar();
    if let Some(bar) = bar.clone() {
        options.progress = Some(Box::new(move |p: Progress| {
            bar.set_message(format!(
                "{} M instructions, {} M events",
                p.instructions / 1_000_000,
                p.events / 1_000_000
            ));
        }));
    }
    let summary = std::thread::scope(|scope| {
        let analyzer = scope.spawn(move || {
            let mut refs: Vec<&mut dyn Analysis> = analyses
                .iter_mut()
                .map(|a| &mut **a as &mut dyn Analysis)
                .collect();
            consume(rx, recycle_tx, &mut refs);
        });
        let sink = EventSink {
            messages: tx,
            recycled: recycle_rx,
        };
        let summary = memtrace_tracer::run(image, options, sink);
        analyzer
            .join()
            .map_err(|_| anyhow!("the analyzer thread panicked"))?;
        summary.map_err(anyhow::Error::from)
    });
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    summary
}

/// A spinner on an interactive stderr; nothing in CI or when piped.
fn progress_bar() -> Option<ProgressBar> {
    if !std::io::stderr().is_terminal() || std::env::var_os("CI").is_some() {
        return None;
    }
    let bar = ProgressBar::new_spinner();
    bar.set_style(ProgressStyle::with_template("{spinner} tracing: {msg} [{elapsed}]").ok()?);
    bar.enable_steady_tick(Duration::from_millis(120));
    Some(bar)
}

/// Fails early, before a long trace, when `path` cannot be written.
pub fn check_writable(path: &Path) -> Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let probe = dir.join(format!(".memtrace-probe-{}", std::process::id()));
    std::fs::File::create(&probe).with_context(|| {
        format!(
            "cannot write {}: directory {} is not writable",
            path.display(),
            dir.display()
        )
    })?;
    let _ = std::fs::remove_file(probe);
    Ok(())
}

/// Polars prints our tables; keep them complete and free of dtype noise.
pub fn configure_table_printing() {
    for (key, value) in [
        ("POLARS_FMT_TABLE_HIDE_DATAFRAME_SHAPE_INFORMATION", "1"),
        ("POLARS_FMT_TABLE_HIDE_COLUMN_DATA_TYPES", "1"),
        ("POLARS_FMT_TABLE_HIDE_COLUMN_SEPARATOR", "1"),
        ("POLARS_FMT_TABLE_FORMATTING", "ASCII_MARKDOWN"),
        ("POLARS_FMT_MAX_ROWS", "-1"),
        ("POLARS_FMT_MAX_COLS", "-1"),
        ("POLARS_FMT_STR_LEN", "80"),
        ("POLARS_TABLE_WIDTH", "220"),
    ] {
        if std::env::var_os(key).is_none() {
            std::env::set_var(key, value);
        }
    }
}
