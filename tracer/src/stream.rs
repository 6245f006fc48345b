//! A traced run with its analyses: the emulator on the calling thread, the
//! analyses on a second one, connected by bounded crossbeam channels of event
//! batches (batch vectors travel back for reuse, so steady-state tracing does
//! not allocate). Callers pass analyses and get the run's summary back; no
//! channel or thread is theirs to set up.
//!
//! With [`ClockMode::Parallel`] the run is two runs of the same guest on two
//! threads: one counts instructions (the block hook), the other does not,
//! and each layer's events are recorded by whichever of them reaches it
//! first (`split`). Both run every instruction; the events, the larger cost
//! on models whose kernels load a byte per multiply, spread over both
//! cores. The guest is deterministic, so both open the same layers in the
//! same order; the analyses see each layer once, in program order, with
//! the counting run's instructions, and the summary has its total.

use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};
use memtrace_abi::{Analysis, Event, LayerInfo, Message};

use crate::elf::ElfImage;
use crate::error::TraceError;
use crate::session::{run, AccessPath, ClockMode, EventSink, RunSummary, StopSwitch, TraceOptions};
use crate::split::{Claim, LayerShare, Side};

/// Batches in flight between the emulator and the analyses.
const CHANNEL_BATCHES: usize = 64;

/// Runs `image` to its exit, feeding every message to `analyses` (in program
/// order, on a second thread), and returns the run's summary.
pub fn trace(
    image: &ElfImage,
    mut options: TraceOptions<'_>,
    analyses: &mut [&mut (dyn Analysis + Send)],
) -> Result<RunSummary, TraceError> {
    if options.clock == ClockMode::Parallel && options.engine == crate::engine::Engine::Unicorn {
        let timed = options.stray_writes || analyses.iter().any(|a| a.reads_event_times());
        if !timed {
            return trace_split(image, options, analyses);
        }
        options.clock = ClockMode::Auto;
    }
    let (sink, stream) = channel(None);
    std::thread::scope(|scope| {
        let consumer = scope.spawn(move || consume(stream, analyses));
        let summary = match options.engine.clone() {
            crate::engine::Engine::Unicorn => run(image, options, sink, None),
            crate::engine::Engine::Qemu(config) => crate::qemu::run(image, &config, options, sink),
        };
        consumer.join().map_err(|_| TraceError::AnalysisPanicked)?;
        summary
    })
}

/// [`ClockMode::Parallel`]: the recording run on this thread, the counting
/// run (with the budget and the progress) on a second one, the analyses on
/// a third; each layer's events are recorded by whichever run reaches it
/// first ([`LayerShare`]).
fn trace_split(
    image: &ElfImage,
    mut options: TraceOptions<'_>,
    analyses: &mut [&mut (dyn Analysis + Send)],
) -> Result<RunSummary, TraceError> {
    let counting = TraceOptions {
        job: options.job.clone(),
        layers: options.layers.clone(),
        max_instructions: options.max_instructions,
        batch_size: options.batch_size,
        clock: ClockMode::Auto,
        access: AccessPath::Mmio,
        progress: options.progress.take(),
        preload: options.preload.clone(),
        untraced_roles: options.untraced_roles.clone(),
        written_whole_roles: options.written_whole_roles.clone(),
        ..TraceOptions::default()
    };
    let share = Arc::new(LayerShare::default());
    let (recording_sink, recording_stream) = channel(Some(Claim {
        share: Arc::clone(&share),
        side: Side::Recording,
    }));
    let (counting_sink, counting_stream) = channel(Some(Claim {
        share: Arc::clone(&share),
        side: Side::Counting,
    }));
    let (recording_switch, counting_switch) = (StopSwitch::default(), StopSwitch::default());
    std::thread::scope(|scope| {
        let share = &share;
        let consumer =
            scope.spawn(move || consume_split(recording_stream, counting_stream, share, analyses));
        let counting = scope.spawn(|| {
            yield_to_recording();
            run_beside(
                image,
                counting,
                counting_sink,
                &counting_switch,
                &recording_switch,
            )
        });
        let recorded = run_beside(
            image,
            options,
            recording_sink,
            &recording_switch,
            &counting_switch,
        );
        let count = counting
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        let consumed = consumer.join().map_err(|_| TraceError::AnalysisPanicked)?;
        // A run that was stopped because its partner failed ends with an
        // error that says only that: the partner's error is the one to give.
        let summary = match (recorded, count) {
            (Beside::Done(recorded), Beside::Done(count)) => same_run(recorded, count)?,
            (Beside::Failed(e), _) | (_, Beside::Failed(e)) => return Err(e),
            (Beside::Stopped(e), _) | (_, Beside::Stopped(e)) => return Err(e),
        };
        consumed?;
        Ok(summary)
    })
}

/// A run's sink and the analyses' end of it: its messages, and the empty
/// batch vectors going back.
fn channel(claim: Option<Claim>) -> (EventSink, Stream) {
    let (messages, received) = crossbeam_channel::bounded(CHANNEL_BATCHES);
    let (recycle, recycled) = crossbeam_channel::bounded(CHANNEL_BATCHES);
    let sink = EventSink {
        messages,
        recycled,
        claim,
    };
    (sink, Stream { received, recycle })
}

/// The analyses' end of one run's messages.
struct Stream {
    received: Receiver<Message>,
    recycle: Sender<Vec<Event>>,
}

impl Stream {
    /// The next layer the run opens; `None` once it has ended.
    fn next_layer(&self) -> Option<LayerInfo> {
        self.received.iter().find_map(|m| match m {
            Message::LayerBegin(layer) => Some(layer),
            _ => None,
        })
    }

    /// Feeds the rest of the open layer to `analyses` (or, without
    /// analyses, drops it); its instructions, `None` when the run ended
    /// inside it.
    fn finish_layer(&self, mut analyses: Option<&mut [&mut (dyn Analysis + Send)]>) -> Option<u64> {
        for message in &self.received {
            if let Message::LayerEnd { instructions } = message {
                return Some(instructions);
            }
            match analyses.as_deref_mut() {
                Some(analyses) => self.feed(message, analyses),
                None => self.give_back(message),
            }
        }
        None
    }

    /// Hands one message to every analysis, and an emptied batch vector
    /// back.
    fn feed(&self, message: Message, analyses: &mut [&mut (dyn Analysis + Send)]) {
        match &message {
            Message::LayerBegin(layer) => analyses.iter_mut().for_each(|a| a.layer_begin(layer)),
            Message::BufferDeclared(b) => analyses.iter_mut().for_each(|a| a.buffer(b)),
            Message::Events(batch) => analyses.iter_mut().for_each(|a| a.events(batch)),
            Message::StrayWrite(w) => analyses.iter_mut().for_each(|a| a.stray_write(w)),
            Message::LayerOutput(d) => analyses.iter_mut().for_each(|a| a.layer_output(d)),
            Message::LayerEnd { instructions } => {
                analyses.iter_mut().for_each(|a| a.layer_end(*instructions))
            }
            Message::Exit { .. } => {}
        }
        self.give_back(message);
    }

    /// Returns a batch's vector for reuse (other messages are dropped).
    fn give_back(&self, message: Message) {
        if let Message::Events(mut batch) = message {
            batch.clear();
            // The run may have finished; a lost vector is fine.
            let _ = self.recycle.try_send(batch);
        }
    }
}

/// How one of the two runs of [`ClockMode::Parallel`] ended.
enum Beside {
    Done(RunSummary),
    /// It failed on its own.
    Failed(TraceError),
    /// It was stopped because its partner failed.
    Stopped(TraceError),
}

/// Runs one of the two runs of [`ClockMode::Parallel`], stopped by `own`;
/// a failure of its own stops its `partner`.
fn run_beside(
    image: &ElfImage,
    options: TraceOptions<'_>,
    sink: EventSink,
    own: &StopSwitch,
    partner: &StopSwitch,
) -> Beside {
    match run(image, options, sink, Some(own)) {
        Ok(summary) => Beside::Done(summary),
        Err(e) if own.requested() => Beside::Stopped(e),
        Err(e) => {
            partner.stop();
            Beside::Failed(e)
        }
    }
}

/// Lowers the priority of the calling thread (the counting run's) by
/// [`COUNTING_NICE`]: three threads share two cores, and the run without a
/// clock is the faster of the two, so the analyses should take their time
/// from the counting run; the layer share then gives the run without a
/// clock more of the layers. On Linux a thread's nice value is its own
/// (`nice` changes the calling thread only) and ends with it.
fn yield_to_recording() {
    #[cfg(target_os = "linux")]
    // SAFETY: `nice` only raises this thread's nice value; a failure leaves
    // the priority as it was, which is harmless.
    unsafe {
        libc::nice(COUNTING_NICE);
    }
}

/// How much the counting run's nice value is raised: mildly, so that on a
/// machine busy with other work it is not starved (the recording run waits
/// for it at the end).
const COUNTING_NICE: std::ffi::c_int = 3;

/// The recording run's summary with the counting run's instructions, after
/// checking that both ran the same program.
fn same_run(recorded: RunSummary, count: RunSummary) -> Result<RunSummary, TraceError> {
    if recorded.layers != count.layers || recorded.exit_code != count.exit_code {
        return Err(TraceError::PassesDiffer(format!(
            "one opened {} layers and exited with {}, the other {} layers and {}",
            recorded.layers.len(),
            recorded.exit_code,
            count.layers.len(),
            count.exit_code
        )));
    }
    Ok(RunSummary {
        instructions: count.instructions,
        idle_dispatches: recorded.idle_dispatches + count.idle_dispatches,
        runs: 2,
        ..recorded
    })
}

/// Drains `stream` until the tracer hangs up, feeding every analysis and
/// handing emptied batch vectors back.
fn consume(stream: Stream, analyses: &mut [&mut (dyn Analysis + Send)]) {
    for message in &stream.received {
        stream.feed(message, analyses);
    }
}

/// Feeds the two runs of a split trace to `analyses`, layer by layer in
/// program order: each layer's buffers and events from the run that
/// recorded it, its instructions from the counting run. Both streams are
/// drained to their ends, so neither run loses its channel before it is
/// done or stopped (and its own error is the one reported).
fn consume_split(
    recording: Stream,
    counting: Stream,
    share: &LayerShare,
    analyses: &mut [&mut (dyn Analysis + Send)],
) -> Result<(), TraceError> {
    let mut result = Ok(());
    while let (Some(layer), Some(counted)) = (recording.next_layer(), counting.next_layer()) {
        if layer.name != counted.name || layer.index != counted.index {
            result = Err(TraceError::PassesDiffer(format!(
                "layer {} `{}` in one was layer {} `{}` in the other",
                layer.index, layer.name, counted.index, counted.name
            )));
            break;
        }
        analyses.iter_mut().for_each(|a| a.layer_begin(&layer));
        let (recording_end, counting_end) = match share.recorder(layer.index) {
            Some(Side::Counting) => {
                let counted = counting.finish_layer(Some(&mut *analyses));
                (recording.finish_layer(None), counted)
            }
            _ => {
                let recorded = recording.finish_layer(Some(&mut *analyses));
                (recorded, counting.finish_layer(None))
            }
        };
        // None: a run ended inside the layer, and says why.
        let (Some(_), Some(instructions)) = (recording_end, counting_end) else {
            break;
        };
        analyses.iter_mut().for_each(|a| a.layer_end(instructions));
    }
    for stream in [&recording, &counting] {
        stream.received.iter().for_each(|m| stream.give_back(m));
    }
    result
}

#[cfg(test)]
mod split_tests {
    use super::*;
    use memtrace_abi::{AccessKind, Buffer, Role};

    /// Everything the analyses receive, in order.
    #[derive(Default)]
    struct Log(Vec<String>);

    impl Analysis for Log {
        fn layer_begin(&mut self, layer: &LayerInfo) {
            self.0.push(format!("begin {}", layer.name));
        }
        fn buffer(&mut self, buffer: &Buffer) {
            self.0.push(format!("buffer {}", buffer.name));
        }
        fn events(&mut self, events: &[Event]) {
            self.0
                .extend(events.iter().map(|e| format!("event {}", e.offset)));
        }
        fn layer_end(&mut self, instructions: u64) {
            self.0.push(format!("end {instructions}"));
        }
    }

    fn begin(index: usize, name: &str) -> Message {
        Message::LayerBegin(LayerInfo {
            index,
            name: name.into(),
            op: "add".into(),
            params: String::new(),
            spec: None,
        })
    }

    fn buffer(name: &str) -> Message {
        Message::BufferDeclared(Buffer {
            id: 0,
            role: Role::Output,
            name: name.into(),
            base: 0x100,
            size: 16,
            elem_size: 1,
        })
    }

    fn event(offset: u32) -> Message {
        Message::Events(vec![Event {
            t: 0,
            seq: 0,
            pc: 0,
            buffer: 0,
            offset,
            size: 1,
            kind: AccessKind::Store,
        }])
    }

    fn end(instructions: u64) -> Message {
        Message::LayerEnd { instructions }
    }

    /// The analyses' log of two runs that sent `recording` and `counting`,
    /// with `recorders` the run that took each layer.
    fn merged(
        recording: Vec<Message>,
        counting: Vec<Message>,
        recorders: &[Side],
    ) -> (Result<(), TraceError>, Vec<String>) {
        let share = LayerShare::default();
        for (index, &side) in recorders.iter().enumerate() {
            share.claim(index, side);
        }
        let stream = |messages: Vec<Message>| {
            let (sink, stream) = channel(None);
            for m in messages {
                sink.messages.send(m).unwrap();
            }
            stream
        };
        let mut log = Log::default();
        let result = consume_split(stream(recording), stream(counting), &share, &mut [&mut log]);
        (result, log.0)
    }

    #[test]
    fn each_layer_comes_from_its_recorder_with_the_counting_runs_instructions() {
        // The recording run has no clock: its layer ends say 0.
        let recording = vec![
            begin(0, "a"),
            buffer("a.out"),
            event(1),
            event(2),
            end(0),
            begin(1, "b"),
            end(0),
        ];
        let counting = vec![
            begin(0, "a"),
            end(70),
            begin(1, "b"),
            buffer("b.out"),
            event(3),
            end(90),
        ];
        let (result, log) = merged(recording, counting, &[Side::Recording, Side::Counting]);
        result.unwrap();
        let expected = [
            "begin a",
            "buffer a.out",
            "event 1",
            "event 2",
            "end 70",
            "begin b",
            "buffer b.out",
            "event 3",
            "end 90",
        ];
        assert_eq!(log, expected);
    }

    #[test]
    fn runs_that_open_different_layers_are_an_error() {
        let recording = vec![begin(0, "a"), end(0), begin(1, "b"), event(1), end(0)];
        let counting = vec![begin(0, "a"), end(5), begin(1, "c"), end(7)];
        let (result, log) = merged(recording, counting, &[Side::Recording, Side::Recording]);
        assert!(
            matches!(result, Err(TraceError::PassesDiffer(_))),
            "{result:?}"
        );
        assert_eq!(log, ["begin a", "end 5"]);
    }

    #[test]
    fn a_run_that_ends_inside_a_layer_ends_the_analyses_there() {
        // The counting run failed (its channel closed) inside layer `b`.
        let recording = vec![begin(0, "a"), end(0), begin(1, "b"), event(4), end(0)];
        let counting = vec![begin(0, "a"), end(5), begin(1, "b")];
        let (result, log) = merged(recording, counting, &[Side::Counting, Side::Recording]);
        result.unwrap();
        assert_eq!(log, ["begin a", "end 5", "begin b", "event 4"]);
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::{yield_to_recording, COUNTING_NICE};

    fn own_nice() -> i32 {
        // SAFETY: reads the calling thread's nice value (`who` 0 is the
        // calling thread on Linux).
        unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }
    }

    #[test]
    fn the_counting_thread_alone_yields_to_the_recording_one() {
        let caller = own_nice();
        let (before, after) = std::thread::spawn(|| {
            let before = own_nice();
            yield_to_recording();
            (before, own_nice())
        })
        .join()
        .unwrap();
        assert_eq!(after, (before + COUNTING_NICE).min(19));
        assert_eq!(own_nice(), caller, "the calling thread keeps its priority");
    }
}
