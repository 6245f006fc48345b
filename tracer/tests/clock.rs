//! The exact instruction clock: block lengths + per-block decoding (Thumb-2,
//! RISC-V, x86-64) must give the same time for every event as counting each
//! instruction with a code hook, except where Unicorn's code hook does not
//! count retired instructions (failed IT-block instructions, `rep` passes).

mod common;

use std::cell::RefCell;
use std::rc::Rc;

use common::{guest, trace_messages};

use memtrace_abi::{Event, LayerSpec, Message};
use memtrace_tracer::clock::BlockClock;
use memtrace_tracer::{ClockMode, ElfImage, Job, TraceOptions};
use unicorn_engine::{Arch as UcArch, Mode, Prot, RegisterX86, Unicorn};

/// The layer specs both architectures are checked on.
const SPECS: [&str; 3] = [
    "op=depthwise_conv2d,dtype=int8,input=1x9x9x4,filter=1x3x3x4,stride=2,padding=same",
    "op=matmul,dtype=f32,input=4x3,filter=3x5",
    "op=max_pool,dtype=int8,input=1x8x8x3,filter=3x3,stride=2,padding=valid",
];

fn trace(image: &ElfImage, job: Option<&Job>, clock: ClockMode) -> (Vec<Event>, Vec<u64>) {
    let options = TraceOptions {
        job: job.cloned(),
        clock,
        ..TraceOptions::default()
    };
    let (summary, messages) = trace_messages(image, options);
    let mut events = Vec::new();
    let mut instructions = vec![summary.instructions];
    for m in messages {
        match m {
            Message::Events(batch) => events.extend(batch),
            Message::LayerEnd { instructions: n } => instructions.push(n),
            _ => {}
        }
    }
    (events, instructions)
}

/// A job traced with the block clock and with the per-instruction hook:
/// (events, [program, layer] instruction counts) each, same number of events.
type Traced = (Vec<Event>, Vec<u64>);
fn both_clocks(image: &ElfImage, spec: &str) -> (Traced, Traced) {
    let job = Job {
        spec: LayerSpec::parse(spec).unwrap(),
        seed: 7,
    };
    let fast = trace(image, Some(&job), ClockMode::Auto);
    let slow = trace(image, Some(&job), ClockMode::PerInstruction);
    assert!(!fast.0.is_empty(), "{spec}");
    assert_eq!(fast.0.len(), slow.0.len(), "{spec}");
    (fast, slow)
}

/// Unicorn's per-instruction hook is emitted after the IT-block condition
/// check, so it skips Thumb instructions whose condition failed; the block
/// clock counts them (they retire as no-ops on a Cortex-M4). So the two
/// clocks must agree on everything but `t`, and the block clock may only run
/// ahead, by a gap that never shrinks (skipped instructions accumulate).
#[test]
fn thumb_block_clock_agrees_with_per_instruction_hooks() {
    let image = ElfImage::load(&guest("cortex-m4", "suite.elf")).unwrap();
    for spec in SPECS {
        let ((fast, fast_n), (slow, slow_n)) = both_clocks(&image, spec);
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
    let image = ElfImage::load(&guest("cortex-m4", "suite.elf")).unwrap();
    let job = Job {
        spec: LayerSpec::parse("op=matmul,dtype=f32,input=4x3,filter=3x5").unwrap(),
        seed: 7,
    };
    let (fast, fast_n) = trace(&image, Some(&job), ClockMode::Auto);
    let (slow, slow_n) = trace(&image, Some(&job), ClockMode::PerInstruction);
    assert_eq!(fast_n[1], slow_n[1], "layer instructions");
    assert_eq!(fast, slow);
    assert!(
        fast_n[0] > slow_n[0],
        "the data generator has skipped IT instructions"
    );
}

/// What Unicorn reports for `mov rax,rcx; rep movsb; mov rax,rcx; nop` with
/// RCX = 3: the `rep movsb` ends the first block and is re-entered as a block
/// of its own once per pass (3 iterations, then a pass that finds RCX = 0), and
/// the code hook fires on every pass. Block sizes cover whole instructions.
/// The block clock, fed the same blocks, counts the `rep` once.
#[test]
fn unicorn_runs_rep_string_instructions_one_pass_per_block() {
    let code = [0x48, 0x89, 0xc8, 0xf3, 0xa4, 0x48, 0x89, 0xc8, 0x90];
    let mut uc = Unicorn::new(UcArch::X86, Mode::MODE_64).unwrap();
    uc.mem_map(0x1000, 0x1000, Prot::ALL).unwrap();
    uc.mem_map(0x10000, 0x10000, Prot::ALL).unwrap();
    uc.mem_write(0x1000, &code).unwrap();
    uc.reg_write(RegisterX86::RCX, 3).unwrap();
    uc.reg_write(RegisterX86::RSI, 0x10000).unwrap();
    uc.reg_write(RegisterX86::RDI, 0x18000).unwrap();
    let blocks = Rc::new(RefCell::new(Vec::new()));
    let passes = Rc::new(RefCell::new(Vec::new()));
    let b = blocks.clone();
    uc.add_block_hook(1, 0, move |_, address, size| {
        b.borrow_mut().push((address, size))
    })
    .unwrap();
    let p = passes.clone();
    uc.add_code_hook(1, 0, move |_, address, _| p.borrow_mut().push(address))
        .unwrap();
    uc.emu_start(0x1000, 0x1000 + code.len() as u64, 0, 0)
        .unwrap();
    let blocks = blocks.borrow();
    assert_eq!(
        *blocks,
        [
            (0x1000, 5),
            (0x1003, 2),
            (0x1003, 2),
            (0x1003, 2),
            (0x1005, 4)
        ]
    );
    assert_eq!(
        *passes.borrow(),
        [0x1000, 0x1003, 0x1003, 0x1003, 0x1003, 0x1005, 0x1008]
    );
    let mut clock = BlockClock::x86_64();
    for &(address, size) in blocks.iter() {
        let at = (address - 0x1000) as usize;
        clock.block_start(address, size, || code[at..at + size as usize].to_vec());
        if address == 0x1003 {
            assert_eq!(clock.now(0x1003), 1, "every pass is the same instruction");
        }
    }
    assert_eq!(
        clock.now(0x1008),
        3,
        "mov, rep movsb, mov: the nop is the 4th"
    );
}

/// No `rep` string instruction runs inside the suite's layer windows, so there
/// the two clocks agree exactly. The suite's `main` zeroes a local with
/// `rep stosd` before any layer, which the code hook counts once per pass: the
/// whole-program counts differ by those extra passes, the same for every job.
#[test]
fn x86_64_block_clock_agrees_with_per_instruction_hooks() {
    let image = ElfImage::load(&guest("x86_64", "suite.elf")).unwrap();
    let mut outside = Vec::new();
    for spec in SPECS {
        let ((fast, fast_n), (slow, slow_n)) = both_clocks(&image, spec);
        let first = fast.iter().zip(&slow).position(|(f, s)| f != s);
        assert_eq!(first, None, "{spec}: first differing event");
        assert_eq!(fast_n.len(), slow_n.len(), "{spec}");
        assert_eq!(fast_n[1..], slow_n[1..], "{spec}: layer instructions");
        assert!(slow_n[0] >= fast_n[0], "{spec}: {fast_n:?} vs {slow_n:?}");
        outside.push(slow_n[0] - fast_n[0]);
    }
    assert!(
        outside.iter().all(|&d| d == outside[0]),
        "extra rep passes outside the layers: {outside:?}"
    );
}

/// `rep-string.elf` runs, inside its layer, `rep movsb` (40 iterations, count
/// runs out), `rep stosd` (6, count), `repne scasb` (stops on the 11th byte)
/// and `repe cmpsb` (40, count), then `rep movsb` with RCX = 0. The block
/// clock gives every access of one `rep` instruction the same time; the
/// code-hook count is ahead by the iteration index plus the extra passes of
/// the earlier `rep` instructions (a count that runs out costs one pass more
/// than its iterations, a condition that stops it does not).
#[test]
fn x86_64_rep_string_instruction_is_one_instruction() {
    let image = ElfImage::load(&guest("x86_64", "rep-string.elf")).unwrap();
    let (fast, fast_n) = trace(&image, None, ClockMode::Auto);
    let (slow, slow_n) = trace(&image, None, ClockMode::PerInstruction);
    // (events per iteration, iterations, extra passes) in program order.
    let reps: [(usize, u64, u64); 4] = [(2, 40, 40), (1, 6, 6), (1, 11, 10), (2, 40, 40)];
    let expected_events: usize = reps.iter().map(|&(e, n, _)| e * n as usize).sum();
    assert_eq!(fast.len(), expected_events);
    assert_eq!(slow.len(), expected_events);
    let mut at = 0;
    let mut ahead = 0;
    for (i, &(per_iteration, iterations, extra)) in reps.iter().enumerate() {
        let n = per_iteration * iterations as usize;
        let (f, s) = (&fast[at..at + n], &slow[at..at + n]);
        for (k, (f, s)) in f.iter().zip(s).enumerate() {
            assert_eq!(Event { t: 0, ..*f }, Event { t: 0, ..*s }, "rep {i}");
            assert_eq!(f.pc, fast[at].pc, "rep {i}: one instruction");
            assert_eq!(f.t, fast[at].t, "rep {i}: one time for all its accesses");
            let iteration = (k / per_iteration) as u64;
            assert_eq!(
                s.t - f.t,
                ahead + iteration,
                "rep {i}, access {k}: {f:?} vs {s:?}"
            );
            assert_eq!(f.offset as u64, iteration * f.size as u64, "rep {i}");
        }
        if i > 0 {
            assert!(fast[at].t > fast[at - 1].t, "rep {i} follows rep {}", i - 1);
        }
        at += n;
        ahead += extra;
    }
    // The guest has no other `rep` instruction, inside the layer or out.
    let extra: u64 = reps.iter().map(|r| r.2).sum();
    assert_eq!(slow_n[1] - fast_n[1], extra, "layer instructions");
    assert_eq!(slow_n[0] - fast_n[0], extra, "whole-program instructions");
}

/// RISC-V has neither IT blocks nor repeated instructions: the block clock
/// (instruction lengths from each first halfword, compressed or not) and the
/// per-instruction hook agree on every event and every count, the whole
/// program included. The guest comes from `make -C harness-c riscv32`
/// (`cores-tested`, which `make test` builds first).
#[test]
fn riscv_block_clock_equals_per_instruction_hooks() {
    let image = ElfImage::load(&guest("riscv32", "suite.elf")).unwrap();
    for spec in SPECS {
        let ((fast, fast_n), (slow, slow_n)) = both_clocks(&image, spec);
        assert_eq!(fast, slow, "{spec}");
        assert_eq!(fast_n, slow_n, "{spec}");
    }
}
