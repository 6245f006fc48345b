//! Pieces every workflow shares: a traced run with a spinner, output-path
//! checks, table printing settings, thread counts.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use memtrace_abi::Analysis;
use memtrace_io::output::{output_target, OutputTarget};
use memtrace_tracer::baseline::{run_untraced, UntracedOptions, UntracedRun};
use memtrace_tracer::{AccessPath, ElfImage, Progress, RunSummary, TraceOptions};

use crate::support::error::{Error, Result};

/// The instruction budget of one guest run unless `--max-instructions`
/// says otherwise, the same for every command: about 30 to 50 s of
/// emulation on one core (a runaway guest is stopped within about a
/// minute), far above every shared model's run (ResNet-8, the
/// longest, retires 8.3·10⁸ on TFLM's reference kernels). A larger model
/// (`zoo:mobilenet_v1_1.0_224_int8` on the reference kernels passes it)
/// needs `--max-instructions`, which the budget error names.
pub const MAX_INSTRUCTIONS: u64 = 20_000_000_000;

/// Traces `image` with `analyses`, showing a spinner on an interactive stderr.
pub(crate) fn trace_with(
    image: &ElfImage,
    mut options: TraceOptions<'_>,
    analyses: &mut [&mut (dyn Analysis + Send)],
) -> Result<RunSummary> {
    let bar = spinner();
    if let Some(bar) = bar.clone() {
        options.progress = Some(Box::new(move |p: Progress| {
            bar.set_message(format!(
                "{} M instructions, {} M events",
                p.instructions / 1_000_000,
                p.events / 1_000_000
            ));
        }));
    }
    let summary = memtrace_tracer::trace(image, options, analyses);
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    Ok(summary?)
}

/// Whether progress may be drawn: an interactive stderr, not CI.
pub(crate) fn interactive() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("CI").is_none()
}

/// A spinner on an interactive stderr; nothing in CI or when piped.
fn spinner() -> Option<ProgressBar> {
    if !interactive() {
        return None;
    }
    let bar = ProgressBar::new_spinner();
    bar.set_style(ProgressStyle::with_template("{spinner} tracing: {msg} [{elapsed}]").ok()?);
    bar.enable_steady_tick(Duration::from_millis(120));
    Some(bar)
}

/// A bar of `len` steps named `unit` on an interactive stderr.
pub(crate) fn progress_bar(len: u64, unit: &str) -> Option<ProgressBar> {
    if len < 2 || !interactive() {
        return None;
    }
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "{{bar:40}} {{pos}}/{{len}} {unit} [{{elapsed}} / ~{{eta}}]"
        ))
        .ok()?,
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    Some(bar)
}

/// Fails early, before a long trace, when `path` cannot be written or is one
/// of the `inputs` (the same file, whatever the spelling).
pub fn check_output(path: &Path, inputs: &[&Path]) -> Result<()> {
    memtrace_io::output::ensure_distinct(path, inputs)?;
    // FIFOs and devices are written through; their directory (`/dev`) need
    // not take a probe file.
    let dest = match output_target(path)? {
        OutputTarget::Stream(_) => return Ok(()),
        OutputTarget::Replace(dest) => dest,
    };
    check_writable(path, &dest)
}

/// Whether a file can be created where `path` goes (`dest`, its final
/// target): a probe made exclusively under an unpredictable name, as the
/// output's temporary file will be, then removed.
fn check_writable(path: &Path, dest: &Path) -> Result<()> {
    let dir = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    memtrace_io::output::probe_writable(dest).map_err(|e| {
        let source = match e {
            memtrace_io::WriteError::Io { source, .. } => source.to_string(),
            other => other.to_string(),
        };
        Error::Failed(format!(
            "cannot write {}: directory {} is not writable: {source}",
            path.display(),
            dir.display()
        ))
    })
}

/// Polars prints our tables; keep them complete and free of dtype noise.
pub(crate) fn configure_table_printing() {
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

/// Most worker threads `--jobs` may ask for: each worker is its own Unicorn
/// with its own translation buffer, and thousands of them exhaust memory
/// inside QEMU rather than in memtrace.
pub const MAX_JOBS: usize = 256;

/// `requested` worker threads, or all cores; from 1 to [`MAX_JOBS`].
pub fn threads(requested: Option<usize>) -> usize {
    requested
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .clamp(1, MAX_JOBS)
}

/// `-` for a missing value.
pub fn show<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// "exited with code N: why" — the guest's own reason when it gave one
/// (`memtrace_exit_reason`), otherwise `hint` (what the code usually means).
pub(crate) fn exit_text(code: i32, reason: Option<&str>, hint: &str) -> String {
    match reason {
        Some(reason) => format!("exited with code {code}: {reason}"),
        None if hint.is_empty() => format!("exited with code {code}"),
        None => format!("exited with code {code} ({hint})"),
    }
}

/// Instructions per second a run without hooks is assumed to reach at the
/// least when its instruction budget becomes a time limit (it has no
/// instruction clock): several times below the slowest rate measured here
/// (`memtrace bench --models`).
const UNTRACED_FLOOR_RATE: f64 = 25e6;

/// Runs `image` in Unicorn without hooks, `preload` written first and
/// `readback` read after the exit. The budget `max_instructions` becomes a
/// time limit: its time at 25 M instructions/s (`UNTRACED_FLOOR_RATE`), at
/// least 10 s. An exit
/// code other than 0 is the caller's to judge.
pub(crate) fn run_without_hooks(
    image: &ElfImage,
    preload: &[(u64, Vec<u8>)],
    readback: &[(u64, u64)],
    max_instructions: u64,
) -> Result<UntracedRun> {
    let seconds = (max_instructions as f64 / UNTRACED_FLOOR_RATE).clamp(10.0, 1e6);
    Ok(run_untraced(
        image,
        UntracedOptions {
            preload,
            readback,
            time_limit: Some(Duration::from_secs_f64(seconds)),
            ..Default::default()
        },
    )?)
}

/// The MMIO path unless some output needs each access's exact instruction.
pub fn access_path(exact_time: bool) -> AccessPath {
    if exact_time {
        AccessPath::Hooks
    } else {
        AccessPath::Mmio
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_writability_probe_follows_no_link_planted_at_its_old_name() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let canary = outside.path().join("canary");
        std::fs::write(&canary, b"not memtrace's").unwrap();
        // The name the probe had: `.memtrace-probe-<pid>`.
        let planted = dir
            .path()
            .join(format!(".memtrace-probe-{}", std::process::id()));
        std::os::unix::fs::symlink(&canary, &planted).unwrap();
        check_output(&dir.path().join("out.json"), &[]).unwrap();
        assert_eq!(std::fs::read(&canary).unwrap(), b"not memtrace's");
        assert!(std::fs::symlink_metadata(&planted)
            .unwrap()
            .file_type()
            .is_symlink());
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().collect();
        assert_eq!(names.len(), 1, "the probe stayed: {names:?}");
    }
}
