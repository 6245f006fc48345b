//! Helpers shared by the tracer's integration tests: the harness guests and
//! one traced run collected into messages.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use memtrace_tracer::{run, ElfImage, EventSink, Message, RunSummary, TraceOptions};

/// `harness-c/build/<target>/<name>`, built by `make -C harness-c`.
pub fn guest(target: &str, name: &str) -> PathBuf {
    let elf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../harness-c/build")
        .join(target)
        .join(name);
    assert!(elf.exists(), "build the guests first: make -C harness-c");
    elf
}

/// Traces `image` to its exit (code 0) and returns every message it sent.
pub fn trace_messages(image: &ElfImage, options: TraceOptions<'_>) -> (RunSummary, Vec<Message>) {
    let (tx, rx) = crossbeam_channel::unbounded();
    let (_recycle_tx, recycle_rx) = crossbeam_channel::unbounded();
    let sink = EventSink {
        messages: tx,
        recycled: recycle_rx,
    };
    let summary =
        run(image, options, sink).unwrap_or_else(|e| panic!("{}: {e}", image.path.display()));
    assert_eq!(summary.exit_code, 0, "{}", image.path.display());
    (summary, rx.try_iter().collect())
}
