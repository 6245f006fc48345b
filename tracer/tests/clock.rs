//! The exact instruction clock: block lengths + Thumb decoding must give the
//! same time for every event as counting each instruction with a code hook.

use std::path::Path;

use memtrace_tracer::{
    run, ClockMode, ElfImage, Event, EventSink, Job, LayerSpec, Message, TraceOptions,
};

fn trace(image: &ElfImage, job: &Job, clock: ClockMode) -> (Vec<Event>, Vec<u64>) {
    let (tx, rx) = crossbeam_channel::unbounded();
    let (_recycle_tx, recycle_rx) = crossbeam_channel::unbounded();
    let options = TraceOptions {
        job: Some(job.clone()),
        clock,
        ..TraceOptions::default()
    };
    let summary = run(
        image,
        options,
        EventSink {
            messages: tx,
            recycled: recycle_rx,
        },
    )
    .unwrap();
    assert_eq!(summary.exit_code, 0);
    let mut events = Vec::new();
    let mut instructions = vec![summary.instructions];
    for m in rx.try_iter() {
        match m {
            Message::Events(batch) => events.extend(batch),
            Message::LayerEnd { instructions: n } => instructions.push(n),
            _ => {}
        }
    }
    (events, instructions)
}

/// Unicorn's per-instruction hook is emitted after the IT-block condition
/// check, so it skips Thumb instructions whose condition failed; the block
/// clock counts them (they retire as no-ops on a Cortex-M4). So the two
/// clocks must agree on everything but `t`, and the block clock may only run
/// ahead, by a gap that never shrinks (skipped instructions accumulate).
#[test]
fn thumb_block_clock_agrees_with_per_instruction_hooks() {
    let elf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../harness-c/build/cortex-m4/suite.elf");
    assert!(elf.exists(), "build the guests first: make -C harness-c");
    let image = ElfImage::load(&elf).unwrap();
    for spec in [
        "op=depthwise_conv2d,dtype=int8,input=1x9x9x4,filter=1x3x3x4,stride=2,padding=same",
        "op=matmul,dtype=f32,input=4x3,filter=3x5",
        "op=max_pool,dtype=int8,input=1x8x8x3,filter=3x3,stride=2,padding=valid",
    ] {
        let job = Job {
            spec: LayerSpec::parse(spec).unwrap(),
            seed: 7,
        };
        let (fast, fast_n) = trace(&image, &job, ClockMode::Auto);
        let (slow, slow_n) = trace(&image, &job, ClockMode::PerInstruction);
        assert!(!fast.is_empty());
        assert_eq!(fast.len(), slow.len(), "{spec}");
        let mut gap = 0;
        for (f, s) in fast.iter().zip(&slow) {
            assert_eq!(Event { t: 0, ..*f }, Event { t: 0, ..*s }, "{spec}");
            assert!(f.t >= s.t + gap, "{spec}: gap shrank at {f:?} vs {s:?}");
            gap = f.t - s.t;
        }
        for (f, s) in fast_n.iter().zip(&slow_n) {
            assert!(
                f >= s,
                "{spec}: instruction counts {fast_n:?} vs {slow_n:?}"
            );
        }
    }
}

/// Where a layer window has no skipped IT-block instructions the two clocks
/// agree exactly: the f32 matmul's window (its guest's data generator, outside
/// the window, does skip some, so whole-program counts differ).
#[test]
fn thumb_block_clock_equals_instruction_count_without_it_blocks() {
    let elf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../harness-c/build/cortex-m4/suite.elf");
    let image = ElfImage::load(&elf).unwrap();
    let job = Job {
        spec: LayerSpec::parse("op=matmul,dtype=f32,input=4x3,filter=3x5").unwrap(),
        seed: 7,
    };
    let (fast, fast_n) = trace(&image, &job, ClockMode::Auto);
    let (slow, slow_n) = trace(&image, &job, ClockMode::PerInstruction);
    assert_eq!(fast_n[1], slow_n[1], "layer instructions");
    assert_eq!(fast, slow);
    assert!(
        fast_n[0] > slow_n[0],
        "the data generator has skipped IT instructions"
    );
}
