//! A traced run with its analyses: the emulator on the calling thread, the
//! analyses on a second one, connected by bounded crossbeam channels of event
//! batches (batch vectors travel back for reuse, so steady-state tracing does
//! not allocate). Callers pass analyses and get the run's summary back; no
//! channel or thread is theirs to set up.
//!
//! With [`ClockMode::Parallel`] the run is two runs of the same guest on two
//! threads: one records the events and counts nothing, the other counts
//! instructions (the block hook) and records nothing. Each costs about
//! what one of the two costs alone, so on two cores the pair ends sooner
//! than one run doing both. The guest is deterministic, so both open the
//! same layers in the same order; every layer end the analyses see carries
//! the counting run's instructions, and the summary its total.

use crossbeam_channel::{Receiver, Sender};
use memtrace_abi::{Analysis, Event, Message, Role};

use crate::elf::ElfImage;
use crate::error::TraceError;
use crate::session::{run, AccessPath, ClockMode, EventSink, RunSummary, StopSwitch, TraceOptions};

/// Batches in flight between the emulator and the analyses.
const CHANNEL_BATCHES: usize = 64;

/// Runs `image` to its exit, feeding every message to `analyses` (in program
/// order, on a second thread), and returns the run's summary.
pub fn trace(
    image: &ElfImage,
    mut options: TraceOptions<'_>,
    analyses: &mut [&mut (dyn Analysis + Send)],
) -> Result<RunSummary, TraceError> {
    if options.clock == ClockMode::Parallel {
        let timed = options.stray_writes || analyses.iter().any(|a| a.reads_event_times());
        if !timed {
            return trace_counted_beside(image, options, analyses);
        }
        options.clock = ClockMode::Auto;
    }
    let (messages, received) = crossbeam_channel::bounded(CHANNEL_BATCHES);
    let (recycle, recycled) = crossbeam_channel::bounded(CHANNEL_BATCHES);
    std::thread::scope(|scope| {
        let consumer = scope.spawn(move || consume(received, recycle, None, analyses));
        let summary = run(image, options, EventSink { messages, recycled }, None);
        consumer
            .join()
            .map_err(|_| TraceError::AnalysisPanicked)??;
        summary
    })
}

/// [`ClockMode::Parallel`]: the events' run on this thread, the counting
/// run (with the budget and the progress) on a second one, the analyses on
/// a third.
fn trace_counted_beside(
    image: &ElfImage,
    mut options: TraceOptions<'_>,
    analyses: &mut [&mut (dyn Analysis + Send)],
) -> Result<RunSummary, TraceError> {
    let counting = TraceOptions {
        job: options.job.clone(),
        layers: options.layers.clone(),
        max_instructions: options.max_instructions,
        clock: ClockMode::Auto,
        // The port page alone is MMIO, and no buffer is served.
        access: AccessPath::Mmio,
        progress: options.progress.take(),
        preload: options.preload.clone(),
        untraced_roles: Role::ALL.to_vec(),
        ..TraceOptions::default()
    };
    let (messages, received) = crossbeam_channel::bounded(CHANNEL_BATCHES);
    let (recycle, recycled) = crossbeam_channel::bounded(CHANNEL_BATCHES);
    // Few messages (two per layer): the counting run never waits on them.
    let (counts, counted) = crossbeam_channel::unbounded();
    let (recording_switch, counting_switch) = (StopSwitch::default(), StopSwitch::default());
    std::thread::scope(|scope| {
        // Borrowed, so the counting run can still send after the consumer
        // has finished.
        let counted = &counted;
        let consumer = scope.spawn(move || consume(received, recycle, Some(counted), analyses));
        let counting = scope.spawn(|| {
            yield_to_recording();
            let (_, no_batches) = crossbeam_channel::bounded(1);
            let sink = EventSink {
                messages: counts,
                recycled: no_batches,
            };
            run_beside(image, counting, sink, &counting_switch, &recording_switch)
        });
        let sink = EventSink { messages, recycled };
        let recorded = run_beside(image, options, sink, &recording_switch, &counting_switch);
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
/// [`COUNTING_NICE`]: three threads share two cores, and the recording run,
/// which pays for every event, is the one the pair waits for; the counting
/// run has time to spare and should take the core the analyses leave. On
/// Linux a thread's nice value is its own (`nice` changes the calling thread
/// only) and ends with it.
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
        ..recorded
    })
}

/// Drains `messages` until the tracer hangs up, feeding every analysis and
/// handing emptied batch vectors back; each layer end takes its
/// instructions from the next layer end of `counted` when there is one.
fn consume(
    messages: Receiver<Message>,
    recycle: Sender<Vec<Event>>,
    counted: Option<&Receiver<Message>>,
    analyses: &mut [&mut (dyn Analysis + Send)],
) -> Result<(), TraceError> {
    let mut open = String::new();
    for message in messages {
        match message {
            Message::LayerBegin(layer) => {
                open.clone_from(&layer.name);
                analyses.iter_mut().for_each(|a| a.layer_begin(&layer))
            }
            Message::BufferDeclared(b) => analyses.iter_mut().for_each(|a| a.buffer(&b)),
            Message::Events(mut batch) => {
                analyses.iter_mut().for_each(|a| a.events(&batch));
                batch.clear();
                // The tracer may have finished; a lost vector is fine.
                let _ = recycle.try_send(batch);
            }
            Message::StrayWrite(w) => analyses.iter_mut().for_each(|a| a.stray_write(&w)),
            Message::LayerEnd { mut instructions } => {
                if let Some(counted) = counted {
                    // None: the counting run failed, and says why.
                    if let Some(n) = counted_layer(counted, &open)? {
                        instructions = n;
                    }
                }
                analyses.iter_mut().for_each(|a| a.layer_end(instructions))
            }
            Message::Exit { .. } => {}
        }
    }
    Ok(())
}

/// The instructions of layer `name` from the counting run: its next layer,
/// which must have the same name. `None` when that run has ended.
fn counted_layer(counted: &Receiver<Message>, name: &str) -> Result<Option<u64>, TraceError> {
    let mut begun = None;
    for message in counted {
        match message {
            Message::LayerBegin(layer) => begun = Some(layer.name),
            Message::LayerEnd { instructions } => {
                return match begun {
                    Some(b) if b == name => Ok(Some(instructions)),
                    b => Err(TraceError::PassesDiffer(format!(
                        "layer `{name}` in one was `{}` in the other",
                        b.unwrap_or_default()
                    ))),
                };
            }
            _ => {}
        }
    }
    Ok(None)
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
