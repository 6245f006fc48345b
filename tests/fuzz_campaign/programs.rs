//! `memtrace check` on hostile runs of one program: `harness-c/unit-tests/
//! extra/memtrace_fuzz.c`, whose command line is a list of steps (heap
//! calls, accesses, semihosting calls, CMSIS-NN calls, recursion, endless
//! loops, jumps into data). The campaign draws the steps and keeps a model
//! of the program's heap beside them, so it knows independently of
//! memtrace whether a run has a defect:
//!
//! - a run without one must be reported clean (exit 0, no finding, no lost
//!   block): no false alarm;
//! - a run with one must never be reported clean: no wrong-but-OK;
//! - every run ends within the time limit, without a panic, with a report
//!   whose JSON parses and whose text holds no raw control character.

use std::path::{Path, PathBuf};
use std::time::Instant;

use memtrace_driver::workflows::check::{check, CheckOptions, CheckReport, Operators, ReportEnd};
use memtrace_overlap::rng::Rng;

use crate::fixtures::{keep, kept};
use crate::tally::{in_process, Tally};
use crate::{scaled, seed};

/// The program, built by `make -C harness-c/unit-tests` (its `extra/`).
fn program() -> PathBuf {
    let elf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("harness-c/build/cortex-m4/unit-tests/extra/memtrace_fuzz.elf");
    assert!(
        elf.exists(),
        "{} is missing: build it with `make -C harness-c/unit-tests`",
        elf.display()
    );
    elf
}

/// Slots the program keeps pointers in (`SLOTS` in memtrace_fuzz.c).
const SLOTS: u32 = 8;

/// Bytes of the features file a `SYS_READ` can fill (`SHFB\x03`).
const FEATURES: u32 = 5;

/// What the heap model knows of a slot.
#[derive(Clone, Debug)]
enum Slot {
    /// Holds no pointer (NULL).
    Empty,
    /// A live block of this many bytes; which of them were written.
    Live { written: Vec<bool> },
    /// Freed, and nothing was allocated since (so the address was not
    /// handed out again).
    Freed,
    /// The model cannot tell (freed, then something else allocated).
    Unknown,
}

/// The model of the program's heap while steps are drawn.
struct Heap {
    slots: Vec<Slot>,
}

impl Heap {
    fn new() -> Heap {
        Heap {
            slots: vec![Slot::Empty; SLOTS as usize],
        }
    }

    /// An allocation anywhere: a freed block's address may be reused.
    fn allocated(&mut self) {
        for s in &mut self.slots {
            if matches!(s, Slot::Freed) {
                *s = Slot::Unknown;
            }
        }
    }

    fn live(&self) -> Vec<u32> {
        self.indices(|s| matches!(s, Slot::Live { .. }))
    }

    fn freed(&self) -> Vec<u32> {
        self.indices(|s| matches!(s, Slot::Freed))
    }

    /// Slots a new block may go to without losing a live one.
    fn free_slots(&self) -> Vec<u32> {
        self.indices(|s| matches!(s, Slot::Empty | Slot::Freed | Slot::Unknown))
    }

    fn indices(&self, f: impl Fn(&Slot) -> bool) -> Vec<u32> {
        (0..SLOTS).filter(|&i| f(&self.slots[i as usize])).collect()
    }

    fn size(&self, s: u32) -> u32 {
        match &self.slots[s as usize] {
            Slot::Live { written } => written.len() as u32,
            _ => 0,
        }
    }

    /// A written run of bytes of a live slot, if it has one.
    fn written_range(&self, rng: &mut Rng, s: u32) -> Option<(u32, u32)> {
        let Slot::Live { written } = &self.slots[s as usize] else {
            return None;
        };
        let starts: Vec<usize> = (0..written.len()).filter(|&i| written[i]).collect();
        let start = *starts.get(between(rng, 0, starts.len().max(1) as u32) as usize)?;
        let mut end = start;
        while end < written.len() && written[end] && end - start < 64 {
            end += 1;
        }
        let len = between(rng, 1, (end - start) as u32 + 1);
        Some((start as u32, len))
    }

    fn write(&mut self, s: u32, offset: u32, len: u32) {
        if let Slot::Live { written } = &mut self.slots[s as usize] {
            for b in written.iter_mut().skip(offset as usize).take(len as usize) {
                *b = true;
            }
        }
    }
}

/// A drawn run: its command line and whether it has a defect.
#[derive(Clone, Debug)]
struct Run {
    args: Vec<String>,
    /// The defect it ends with (what it is, in words), or none.
    defect: Option<&'static str>,
}

/// Uniform in `lo..hi`.
fn between(rng: &mut Rng, lo: u32, hi: u32) -> u32 {
    rng.range(lo, hi - 1)
}

fn pick(rng: &mut Rng, items: &[u32]) -> Option<u32> {
    (!items.is_empty()).then(|| items[between(rng, 0, items.len() as u32) as usize])
}

/// One step of a run without a defect; false when none applies.
fn clean_step(rng: &mut Rng, heap: &mut Heap, args: &mut Vec<String>) -> bool {
    let mut push = |parts: &[String]| args.extend(parts.iter().cloned());
    match between(rng, 0, 10) {
        0 | 1 => {
            let Some(s) = pick(rng, &heap.free_slots()) else {
                return false;
            };
            let n = between(rng, 1, 200);
            let zeroed = rng.chance(30);
            if zeroed {
                let m = between(rng, 1, 4);
                let n = n.div_ceil(m);
                push(&["c".into(), s.to_string(), n.to_string(), m.to_string()]);
                heap.allocated();
                heap.slots[s as usize] = Slot::Live {
                    written: vec![true; (n * m) as usize],
                };
            } else {
                push(&["m".into(), s.to_string(), n.to_string()]);
                heap.allocated();
                heap.slots[s as usize] = Slot::Live {
                    written: vec![false; n as usize],
                };
            }
        }
        2 => {
            let Some(s) = pick(rng, &heap.live()) else {
                return false;
            };
            let size = heap.size(s);
            let offset = between(rng, 0, size);
            let len = between(rng, 1, size - offset + 1);
            push(&[
                "w".into(),
                s.to_string(),
                offset.to_string(),
                len.to_string(),
            ]);
            heap.write(s, offset, len);
        }
        3 => {
            let Some(s) = pick(rng, &heap.live()) else {
                return false;
            };
            let Some((offset, len)) = heap.written_range(rng, s) else {
                return false;
            };
            let step = if rng.chance(50) { "l" } else { "W" };
            if step == "l" {
                push(&[
                    "l".into(),
                    s.to_string(),
                    offset.to_string(),
                    len.to_string(),
                ]);
                // printf's first call allocates stdio's buffer.
                heap.allocated();
            } else if offset == 0 {
                push(&["W".into(), s.to_string(), len.to_string()]);
            } else {
                return false;
            }
        }
        4 => {
            let Some(s) = pick(rng, &heap.live()) else {
                return false;
            };
            push(&["f".into(), s.to_string()]);
            heap.slots[s as usize] = Slot::Freed;
        }
        5 => {
            let Some(s) = pick(rng, &heap.live()) else {
                return false;
            };
            let n = between(rng, 1, 300);
            push(&["r".into(), s.to_string(), n.to_string()]);
            heap.allocated();
            if let Slot::Live { written } = &mut heap.slots[s as usize] {
                written.resize(n as usize, false);
            }
        }
        6 => {
            let Some(s) = pick(rng, &heap.live()) else {
                return false;
            };
            let len = between(rng, 1, heap.size(s).min(FEATURES) + 1);
            push(&["R".into(), s.to_string(), len.to_string()]);
            heap.write(s, 0, len);
        }
        7 => {
            let n = *[1u32, 3, 40, 1000]
                .as_slice()
                .get(between(rng, 0, 4) as usize)
                .unwrap_or(&1);
            push(&[if rng.chance(50) { "o" } else { "O" }.into(), n.to_string()]);
        }
        8 => {
            let len = between(rng, 1, 65);
            push(&[
                if rng.chance(50) { "p" } else { "q" }.into(),
                len.to_string(),
            ]);
        }
        _ => {
            push(&["d".into(), between(rng, 0, 200).to_string()]);
            heap.allocated();
        }
    }
    true
}

/// The defect a run ends with: its steps, and what it is; `None` when the
/// heap model has nothing it applies to.
fn defect_step(rng: &mut Rng, heap: &mut Heap) -> Option<(Vec<String>, &'static str)> {
    let s = |v: u32| v.to_string();
    let live = heap.live();
    let freed = heap.freed();
    Some(match between(rng, 0, 13) {
        0 => {
            let slot = pick(rng, &live)?;
            let size = heap.size(slot);
            let past = between(rng, 1, 5);
            let offset = between(rng, size.saturating_sub(8), size + 1);
            let len = size + past - offset;
            (
                vec!["w".into(), s(slot), s(offset), s(len)],
                "a write past a block's end",
            )
        }
        1 => {
            let slot = pick(rng, &live)?;
            heap.write(slot, 0, heap.size(slot));
            let size = heap.size(slot);
            let past = between(rng, 1, 5);
            (
                vec![
                    "w".into(),
                    s(slot),
                    s(0),
                    s(size),
                    "l".into(),
                    s(slot),
                    s(size),
                    s(past),
                ],
                "a read past a block's end",
            )
        }
        2 => {
            let slot = pick(rng, &live)?;
            let Slot::Live { written } = &heap.slots[slot as usize] else {
                return None;
            };
            let unwritten = written.iter().position(|w| !w)? as u32;
            (
                vec!["l".into(), s(slot), s(unwritten), s(1)],
                "a read of a byte never written",
            )
        }
        3 => {
            let slot = pick(rng, &freed)?;
            (vec!["w".into(), s(slot), s(0), s(1)], "a write after free")
        }
        4 => {
            let slot = pick(rng, &freed)?;
            (vec!["f".into(), s(slot)], "a double free")
        }
        5 => {
            let slot = pick(rng, &heap.free_slots())?;
            // n × m wraps 32 bits to a block of at most 128 KiB.
            let m = 1u32 << between(rng, 12, 17);
            let n = (1u64 << 32).div_ceil(m as u64) as u32 + between(rng, 0, 3);
            (
                vec![
                    "c".into(),
                    s(slot),
                    s(n),
                    s(m),
                    "w".into(),
                    s(slot),
                    s(0),
                    s(1 << 12),
                ],
                "calloc's product wraps 32 bits",
            )
        }
        6 => {
            let slot = pick(rng, &freed)?;
            (
                vec!["W".into(), s(slot), s(1)],
                "a host read of freed memory",
            )
        }
        7 => {
            let slot = pick(rng, &freed)?;
            (
                vec!["R".into(), s(slot), s(FEATURES)],
                "a host write into freed memory",
            )
        }
        8 => (
            vec!["C".into(), s(between(rng, 1, FEATURES + 1))],
            "a host write into code",
        ),
        9 => (vec!["x".into()], "an endless loop"),
        10 => (
            vec!["d".into(), s(between(rng, 100_000, 4_000_000))],
            "a stack overflow",
        ),
        11 => {
            let slot = pick(rng, &live)?;
            (vec!["j".into(), s(slot)], "a jump into the heap")
        }
        _ => (
            vec![
                "p".into(),
                format!("{:#x}", 0xffff_ffffu32 - between(rng, 0, 16)),
            ],
            "a CMSIS-NN copy of nearly 4 GiB",
        ),
    })
}

/// Draws a run: clean steps, and half the time one defect at the end.
fn draw(rng: &mut Rng) -> Run {
    let mut heap = Heap::new();
    let mut args = Vec::new();
    for _ in 0..between(rng, 0, 9) {
        clean_step(rng, &mut heap, &mut args);
    }
    let mut defect = None;
    if rng.chance(50) {
        if let Some((steps, what)) = defect_step(rng, &mut heap) {
            args.extend(steps);
            defect = Some(what);
        }
    }
    Run { args, defect }
}

/// Whether `report` says the run was clean: exit 0, no error.
fn clean(report: &CheckReport) -> bool {
    matches!(report.end, ReportEnd::Exit { code: 0 }) && report.errors() == 0
}

/// A raw control or bidi character a terminal would act on.
fn raw_control(text: &str) -> Option<char> {
    text.chars().find(|&c| {
        (c.is_control() && c != '\n' && c != '\t')
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    })
}

/// Checks one run; `Err` is a clean refusal, a broken rule is returned in
/// `violation`.
fn judge(run: &Run, elf: &Path, violation: &mut Option<String>) -> Result<(), String> {
    let options = CheckOptions {
        program: elf.to_path_buf(),
        args: run.args.clone(),
        max_instructions: 10_000_000_000,
        // A 1 MiB heap: a copy of nearly 4 GiB runs through the heap until
        // it faults past it, which under memcheck takes seconds per 16 MiB.
        heap_bytes: 1 << 20,
        stack_bytes: 1 << 20,
        memcheck: true,
        echo: false,
        suppressions: Default::default(),
        calls: true,
        operators: Operators::Found,
    };
    let report = match check(&options) {
        Ok(r) => r,
        Err(e) => {
            // Refused before or while running: never for a run the program
            // takes as it is (its command line fits newlib's 255 bytes).
            if run.defect.is_none() {
                *violation = Some(format!("refused a clean run: {e}"));
            }
            return Err(e.to_string());
        }
    };
    if serde_json::from_str::<serde_json::Value>(&report.json()).is_err() {
        *violation = Some("its JSON does not parse".into());
    } else if let Some(c) = raw_control(&report.text()) {
        *violation = Some(format!("its text holds a raw {:?}", c));
    } else {
        match (run.defect, clean(&report)) {
            (Some(what), true) => *violation = Some(format!("{what} reported clean")),
            (None, false) => {
                *violation = Some(format!(
                    "a clean run reported {} error(s), end {:?}: {:?}",
                    report.errors(),
                    report.end,
                    report
                        .findings
                        .iter()
                        .map(|f| &f.message)
                        .collect::<Vec<_>>()
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

#[test]
pub(crate) fn fuzz_check_on_hostile_program_runs() {
    let started = Instant::now();
    let elf = program();
    let mut t = Tally::default();
    let mut runs: Vec<Run> = kept("programs", "txt")
        .iter()
        .map(|b| {
            let text = String::from_utf8_lossy(b);
            let mut lines = text.lines();
            let defect = match lines.next().unwrap_or("") {
                "clean" => None,
                _ => Some("a kept defect"),
            };
            let args = lines
                .next()
                .unwrap_or("")
                .split(' ')
                .map(String::from)
                .collect();
            Run { args, defect }
        })
        .collect();
    t.replayed = runs.len();
    let mut rng = seed(11);
    for _ in 0..scaled(120) {
        runs.push(draw(&mut rng));
    }
    let mut defects = 0;
    for run in &runs {
        let mut violation = None;
        let line = run.args.join(" ");
        let ok = in_process(&mut t, &line, || judge(run, &elf, &mut violation));
        defects += run.defect.is_some() as usize;
        if let Some(v) = &violation {
            t.oracle_violations += 1;
            t.failures.push(format!("`{line}`: {v}"));
        }
        if !ok || violation.is_some() {
            let kind = if run.defect.is_some() {
                "defect"
            } else {
                "clean"
            };
            keep("programs", "txt", format!("{kind}\n{line}\n").as_bytes());
        }
    }
    t.must_refuse = defects;
    t.finish("programs", started);
}
