//! The consumer side of the event stream: what an analysis receives.
//!
//! The tracer calls these methods, in program order, from the thread that
//! consumes its channel (`memtrace_tracer::trace`); analyses live in the
//! analyzer and the driver and never see the emulator.

use crate::event::{Buffer, Event, LayerInfo, OutputDigest, StrayWrite};

/// Something that consumes a trace, layer by layer.
pub trait Analysis {
    /// The guest opened a layer window.
    fn layer_begin(&mut self, _layer: &LayerInfo) {}
    /// The guest declared a buffer of the open layer.
    fn buffer(&mut self, _buffer: &Buffer) {}
    /// A batch of accesses of the open layer, in `seq` order.
    fn events(&mut self, _events: &[Event]) {}
    /// The open layer wrote outside its declared buffers and the stack
    /// (only when the trace watches for stray writes).
    fn stray_write(&mut self, _write: &StrayWrite) {}
    /// What the open layer's output buffers held when it ended.
    fn layer_output(&mut self, _output: &OutputDigest) {}
    /// The open layer ended after `instructions` retired instructions.
    fn layer_end(&mut self, _instructions: u64) {}
    /// Whether it reads an event's time (`t`) or instruction (`pc`). A run
    /// whose instructions are counted by a second run beside it
    /// (`ClockMode::Parallel`) has neither, and is made only when no
    /// analysis reads them.
    fn reads_event_times(&self) -> bool {
        true
    }
}
