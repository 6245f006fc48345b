//! The analyzer side of the event stream: receives tracer messages, fans
//! them out to the analyses that were asked for, and hands batch vectors
//! back to the tracer.

use crossbeam_channel::{Receiver, Sender};
use memtrace_tracer::{Buffer, Event, LayerInfo, Message};

/// Something that consumes a trace, layer by layer.
pub trait Analysis {
    fn layer_begin(&mut self, _layer: &LayerInfo) {}
    fn buffer(&mut self, _buffer: &Buffer) {}
    fn events(&mut self, _events: &[Event]) {}
    fn layer_end(&mut self, _instructions: u64) {}
}

/// Drains `messages` until the tracer hangs up, feeding every analysis.
pub fn consume(
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
            Message::LayerEnd { instructions } => {
                analyses.iter_mut().for_each(|a| a.layer_end(instructions))
            }
            Message::Exit { .. } => {}
        }
    }
}
