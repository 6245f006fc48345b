//! `ClockMode::Parallel`: two runs of the same guest side by side, one
//! counting instructions, each recording the events of the layers it
//! reaches first. What the analyses receive must be what one run with the
//! block clock gives them, but for the events' time and instruction, which
//! such a run does not have; and a guest that never ends, or faults, must
//! still be stopped and reported as in one run.

mod common;

use std::time::{Duration, Instant};

use common::{guest, MessageLog};
use memtrace_abi::{Analysis, Buffer, Event, LayerInfo, LayerSpec, Message};
use memtrace_tracer::{
    trace, AccessPath, ClockMode, ElfImage, Job, RunSummary, TraceError, TraceOptions,
};

/// A [`MessageLog`] that says it reads no event time, so a parallel clock
/// is taken.
#[derive(Default)]
struct OrderLog(MessageLog);

impl Analysis for OrderLog {
    fn layer_begin(&mut self, layer: &LayerInfo) {
        self.0.layer_begin(layer)
    }
    fn buffer(&mut self, buffer: &Buffer) {
        self.0.buffer(buffer)
    }
    fn events(&mut self, events: &[Event]) {
        self.0.events(events)
    }
    fn layer_end(&mut self, instructions: u64) {
        self.0.layer_end(instructions)
    }
    fn reads_event_times(&self) -> bool {
        false
    }
}

fn options(
    job: Option<&Job>,
    clock: ClockMode,
    readback: Vec<(u64, u64)>,
) -> TraceOptions<'static> {
    TraceOptions {
        job: job.cloned(),
        access: AccessPath::Mmio,
        clock,
        readback,
        ..TraceOptions::default()
    }
}

fn run(image: &ElfImage, options: TraceOptions<'_>) -> (RunSummary, Vec<Message>) {
    let mut log = OrderLog::default();
    let summary = trace(image, options, &mut [&mut log]).unwrap();
    (summary, log.0 .0)
}

/// Every event with its time and instruction cleared.
fn untimed(messages: &[Message]) -> Vec<Message> {
    messages
        .iter()
        .map(|m| match m {
            Message::Events(batch) => {
                Message::Events(batch.iter().map(|e| Event { t: 0, pc: 0, ..*e }).collect())
            }
            other => other.clone(),
        })
        .collect()
}

fn events(messages: &[Message]) -> impl Iterator<Item = &Event> {
    messages.iter().flat_map(|m| match m {
        Message::Events(batch) => batch.as_slice(),
        _ => &[],
    })
}

fn assert_same_as_one_timed_run(image: &ElfImage, job: Option<&Job>, what: &str) {
    let arena = image.symbol("memtrace_arena").unwrap().address;
    let readback = vec![(arena, 64 * 1024)];
    let (timed, timed_messages) = run(image, options(job, ClockMode::Auto, readback.clone()));
    let (split, split_messages) = run(image, options(job, ClockMode::Parallel, readback));
    assert!(events(&timed_messages).count() > 0, "{what}: no events");
    // Layer windows, buffers, per-layer instructions and the events in
    // order are those of the timed run.
    assert_eq!(untimed(&split_messages), untimed(&timed_messages), "{what}");
    assert_eq!(split.instructions, timed.instructions, "{what}");
    assert_eq!(split.layers, timed.layers, "{what}");
    assert_eq!(split.memory, timed.memory, "{what}: the guest's memory");
    // The events carry no time, whichever run recorded them.
    assert!(
        events(&split_messages).all(|e| e.t == 0 && e.pc == 0),
        "{what}"
    );
    assert!(events(&timed_messages).any(|e| e.t > 0), "{what}");
}

#[test]
fn a_parallel_clock_gives_the_analyses_what_one_timed_run_gives() {
    let job = Job {
        spec: LayerSpec::parse(
            "op=conv2d,dtype=int8,input=1x9x9x3,filter=4x3x3x3,stride=2,padding=same",
        )
        .unwrap(),
        seed: 5,
    };
    for target in ["cortex-m4", "x86_64"] {
        let image = ElfImage::load(&guest(target, "suite.elf")).unwrap();
        assert_same_as_one_timed_run(&image, Some(&job), &format!("{target} job"));
        // Several layers, pages served and given back per layer.
        assert_same_as_one_timed_run(&image, None, &format!("{target} built-in layers"));
    }
}

#[test]
fn an_analysis_that_reads_event_times_gets_a_timed_run() {
    let image = ElfImage::load(&guest("cortex-m4", "suite.elf")).unwrap();
    let mut log = MessageLog::default();
    trace(
        &image,
        options(None, ClockMode::Parallel, Vec::new()),
        &mut [&mut log],
    )
    .unwrap();
    assert!(events(&log.0).any(|e| e.t > 0 && e.pc > 0));
}

#[test]
fn a_guest_that_never_exits_is_stopped_by_the_counting_runs_budget() {
    for target in ["cortex-m4", "x86_64"] {
        let image = ElfImage::load(&guest(target, "spin.elf")).unwrap();
        let started = Instant::now();
        let err = trace(
            &image,
            TraceOptions {
                max_instructions: 300_000,
                ..options(None, ClockMode::Parallel, Vec::new())
            },
            &mut [],
        )
        .unwrap_err();
        let TraceError::BudgetExceeded { budget, context } = &err else {
            panic!("{target}: {err}");
        };
        assert_eq!(*budget, 300_000, "{target}");
        assert_eq!(context.layer.as_deref(), Some("spin"), "{target}");
        assert!(err.to_string().contains("spin.c:"), "{target}: {err}");
        // The recording run, which has no budget, was stopped too.
        assert!(started.elapsed() < Duration::from_secs(20), "{target}");
    }
}

#[test]
fn a_fault_is_reported_where_it_happened() {
    for target in ["cortex-m4", "x86_64"] {
        let image = ElfImage::load(&guest(target, "fault.elf")).unwrap();
        let one = trace(&image, options(None, ClockMode::Auto, Vec::new()), &mut []).unwrap_err();
        let split = trace(
            &image,
            options(None, ClockMode::Parallel, Vec::new()),
            &mut [],
        )
        .unwrap_err();
        assert!(
            matches!(split, TraceError::GuestFault { .. }),
            "{target}: {split}"
        );
        assert_eq!(split.to_string(), one.to_string(), "{target}");
    }
}

/// A selection of layers: the two runs share the selected ones (whose
/// indices in the run skip the others) and the analyses get what one timed
/// run gives them.
#[test]
fn a_selection_of_layers_is_traced_as_in_one_timed_run() {
    for target in ["cortex-m4", "x86_64"] {
        let image = ElfImage::load(&guest(target, "suite.elf")).unwrap();
        let selected = |clock| TraceOptions {
            layers: Some(vec!["dw1".to_string(), "conv3".to_string()]),
            ..options(None, clock, Vec::new())
        };
        let (timed, timed_messages) = run(&image, selected(ClockMode::Auto));
        let (split, split_messages) = run(&image, selected(ClockMode::Parallel));
        let begun: Vec<(usize, &str)> = split_messages
            .iter()
            .filter_map(|m| match m {
                Message::LayerBegin(l) => Some((l.index, l.name.as_str())),
                _ => None,
            })
            .collect();
        assert_eq!(begun, [(1, "dw1"), (4, "conv3")], "{target}");
        assert!(events(&split_messages).count() > 0, "{target}");
        assert_eq!(
            untimed(&split_messages),
            untimed(&timed_messages),
            "{target}"
        );
        assert_eq!(split.instructions, timed.instructions, "{target}");
        assert_eq!(split.layers, timed.layers, "{target}");
    }
}
