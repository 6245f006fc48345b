//! A traced run with its analyses: the emulator on the calling thread, the
//! analyses on a second one, connected by bounded crossbeam channels of event
//! batches (batch vectors travel back for reuse, so steady-state tracing does
//! not allocate). Callers pass analyses and get the run's summary back; no
//! channel or thread is theirs to set up.

use crossbeam_channel::{Receiver, Sender};
use memtrace_abi::{Analysis, Event, Message};

use crate::elf::ElfImage;
use crate::error::TraceError;
use crate::session::{run, EventSink, RunSummary, TraceOptions};

/// Batches in flight between the emulator and the analyses.
const CHANNEL_BATCHES: usize = 64;

/// Runs `image` to its exit, feeding every message to `analyses` (in program
/// order, on a second thread), and returns the run's summary.
pub fn trace(
    image: &ElfImage,
    options: TraceOptions<'_>,
    analyses: &mut [&mut (dyn Analysis + Send)],
) -> Result<RunSummary, TraceError> {
    let (messages, received) = crossbeam_channel::bounded(CHANNEL_BATCHES);
    let (recycle, recycled) = crossbeam_channel::bounded(CHANNEL_BATCHES);
    std::thread::scope(|scope| {
        let consumer = scope.spawn(move || {
            let mut refs: Vec<&mut dyn Analysis> = analyses
                .iter_mut()
                .map(|a| &mut **a as &mut dyn Analysis)
                .collect();
            consume(received, recycle, &mut refs);
        });
        let summary = run(image, options, EventSink { messages, recycled });
        consumer.join().map_err(|_| TraceError::AnalysisPanicked)?;
        summary
    })
}

/// Drains `messages` until the tracer hangs up, feeding every analysis and
/// handing emptied batch vectors back.
fn consume(
    messages: Receiver<Message>,
    recycle: Sender<Vec<Event>>,
    analyses: &mut [&mut dyn Analysis],
) {
    for message in messages {
        match message {
            Message::LayerBegin(layer) => analyses.iter_mut().for_each(|a| a.layer_begin(&layer)),
            Message::BufferDeclared(b) => analyses.iter_mut().for_each(|a| a.buffer(&b)),
            Message::Events(mut batch) => {
                analyses.iter_mut().for_each(|a| a.events(&batch));
                batch.clear();
                // The tracer may have finished; a lost vector is fine.
                let _ = recycle.try_send(batch);
            }
            Message::StrayWrite(w) => analyses.iter_mut().for_each(|a| a.stray_write(&w)),
            Message::LayerEnd { instructions } => {
                analyses.iter_mut().for_each(|a| a.layer_end(instructions))
            }
            Message::Exit { .. } => {}
        }
    }
}
