//! Helpers shared by the tracer's integration tests: the harness guests and
//! one traced run collected into messages.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use memtrace_abi::{Analysis, Buffer, Event, LayerInfo, Message, StrayWrite};
use memtrace_tracer::{trace, ElfImage, RunSummary, TraceOptions};

/// `harness-c/build/<target>/<name>`, built by `make -C harness-c`.
pub fn guest(target: &str, name: &str) -> PathBuf {
    let elf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../harness-c/build")
        .join(target)
        .join(name);
    assert!(elf.exists(), "build the guests first: make -C harness-c");
    elf
}

/// Every message an analysis receives, in order, batches as they came.
#[derive(Default)]
pub struct MessageLog(pub Vec<Message>);

impl Analysis for MessageLog {
    fn layer_begin(&mut self, layer: &LayerInfo) {
        self.0.push(Message::LayerBegin(layer.clone()));
    }
    fn buffer(&mut self, buffer: &Buffer) {
        self.0.push(Message::BufferDeclared(buffer.clone()));
    }
    fn events(&mut self, events: &[Event]) {
        self.0.push(Message::Events(events.to_vec()));
    }
    fn stray_write(&mut self, write: &StrayWrite) {
        self.0.push(Message::StrayWrite(write.clone()));
    }
    fn layer_end(&mut self, instructions: u64) {
        self.0.push(Message::LayerEnd { instructions });
    }
}

/// Traces `image` to its exit (code 0) and returns every message its
/// analyses received.
pub fn trace_messages(image: &ElfImage, options: TraceOptions<'_>) -> (RunSummary, Vec<Message>) {
    let mut log = MessageLog::default();
    let summary = trace(image, options, &mut [&mut log])
        .unwrap_or_else(|e| panic!("{}: {e}", image.path.display()));
    assert_eq!(summary.exit_code, 0, "{}", image.path.display());
    (summary, log.0)
}
