//! `memtrace bench --models`: whole models on real TFLM (Cortex-M4), on both
//! kernel builds, phase by phase, each traced phase against the same guest
//! program in Unicorn without hooks, both measured in this process.
//!
//! The phases are those of `memtrace verify` (without the trace cache):
//! the O_s trace (TFLM's own plan, one layer per operator: the reference
//! run), the run of memtrace's plan under the shadow map, and PyPI
//! `tflite-micro` on the host (the oracle, beside the plan run), and the
//! plan run once more in `verify --no-oracle`, with nothing beside it, and
//! the kernels' checks (the red-zoned run; on CMSIS-NN, every operator
//! against the reference kernels). A first row
//! times the O_s trace alone, fastest of `repeat`, with its event count; a
//! second the same run with no layer selected (the instruction clock's
//! block hook alone, no event: what the run that counts beside the one
//! that records costs, the floor of the first row); a
//! last line compares `verify`'s wall time with the CPU time of all its
//! runs (every emulator thread of this process and the oracle's Python
//! process, from `getrusage`): a phase may itself be two runs at once (the
//! recording run and the counting run of `ClockMode::Parallel`), so the
//! CPU time, not the sum of the phases' wall times, is the sum of its runs.

use memtrace_model::source::ModelSource;
use std::io::Write;
use std::path::Path;

use memtrace_analyzer::layer_stats::LayerStats;
use memtrace_tracer::baseline::UntracedOptions;
use memtrace_tracer::{AccessPath, Arch};

use crate::runtime::kernels::Kernels;
use crate::runtime::trace_cache::TraceCache;
use crate::runtime::{load_runner, open_model, seeded_inputs, ModelRun};
use crate::support::error::Result;
use crate::support::provenance::OverlapChoice;
use crate::workflows::bench::{fastest, untraced_baselines};
use crate::workflows::verify::VerifyOptions;
use crate::workflows::verify::{verify, VerifyReport};

/// One row of the table.
struct Phase {
    name: &'static str,
    instructions: Option<u64>,
    events: Option<u64>,
    seconds: f64,
    /// The same guest program without hooks (none for host work).
    raw_seconds: Option<f64>,
}

/// `verify`'s phases, and its wall time against their sum and against the
/// CPU time of its runs (both below it when they share the two cores).
struct VerifyPhases {
    phases: Vec<Phase>,
    wall: f64,
    sum: f64,
    /// CPU seconds of the verify whose wall time is `wall`.
    cpu: f64,
}

/// Prints the per-phase table of every model in `models`.
pub fn bench_models(
    models: &[ModelSource],
    build_dir: &Path,
    repeat: u32,
    out: &mut impl Write,
) -> Result<()> {
    writeln!(
        out,
        "memtrace bench --models — whole models on real TFLM (Cortex-M4), fastest of {repeat}"
    )?;
    writeln!(
        out,
        "{:<44} {:<9} {:<26} {:>13} {:>10} {:>9} {:>9} {:>7} {:>9}",
        "model",
        "kernels",
        "phase",
        "instructions",
        "events",
        "traced s",
        "raw s",
        "ratio",
        "M instr/s"
    )?;
    for model in models {
        let name = &model.short();
        for kernels in [Kernels::Tflm, Kernels::CmsisNn] {
            for p in os_trace(model, build_dir, kernels, repeat)? {
                write_row(out, name, kernels, &p)?;
            }
            let verify = verify_phases(model, kernels, repeat)?;
            for p in &verify.phases {
                write_row(out, name, kernels, p)?;
            }
            writeln!(
                out,
                "{:<44} {:<9} verify wall {:.3} s = {:.2} x the sum of its phases ({:.3} s) \
                 = {:.2} x the CPU time of its runs ({:.3} s: {:.2} cores busy)",
                "",
                "",
                verify.wall,
                verify.wall / verify.sum.max(1e-9),
                verify.sum,
                verify.wall / verify.cpu.max(1e-9),
                verify.cpu,
                verify.cpu / verify.wall.max(1e-9)
            )?;
        }
    }
    Ok(())
}

fn write_row(out: &mut impl Write, model: &str, kernels: Kernels, p: &Phase) -> Result<()> {
    let show = |v: Option<u64>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
    let (raw, ratio) = match p.raw_seconds {
        Some(r) => (
            format!("{r:.3}"),
            format!("{:.2}x", p.seconds / r.max(1e-9)),
        ),
        None => ("-".into(), "-".into()),
    };
    let rate = p.instructions.map_or_else(
        || "-".to_string(),
        |i| format!("{:.0}", i as f64 / p.seconds.max(1e-9) / 1e6),
    );
    writeln!(
        out,
        "{:<44} {:<9} {:<26} {:>13} {:>10} {:>9.3} {:>9} {:>7} {:>9}",
        model,
        kernels.name(),
        p.name,
        show(p.instructions),
        show(p.events),
        p.seconds,
        raw,
        ratio,
        rate
    )?;
    Ok(())
}

/// The O_s trace alone (what `plan --runtime tflm` runs), fastest of
/// `repeat`, against the same run without hooks, fastest of `repeat`; and
/// the same traced run with no layer selected, which shows what the
/// instruction clock (a block hook) costs by itself, before any event; and
/// the O_s trace against the run in Unicorn as it comes (its own TLB, which
/// sends every store through its slow path: `UntracedOptions::stock`).
fn os_trace(
    model: &ModelSource,
    build_dir: &Path,
    kernels: Kernels,
    repeat: u32,
) -> Result<[Phase; 3]> {
    let file = open_model(model, 1)?;
    let bytes = &file.given;
    let inputs = seeded_inputs(&file.graph, 1)?;
    let image = load_runner(
        &build_dir.join("cortex-m4").join(kernels.runner_file()),
        kernels,
    )?;
    let run = ModelRun::whole(
        &image,
        bytes,
        &inputs,
        crate::support::common::MAX_INSTRUCTIONS,
    )
    .without_scratch();
    let traced_run = |layers: Option<Vec<String>>| {
        let mut stats = LayerStats::default();
        let o = run.trace(AccessPath::Mmio, layers, false, &mut [&mut stats])?;
        let events: u64 = stats
            .layers
            .iter()
            .flat_map(|l| &l.buffers)
            .map(|b| b.loads + b.stores + b.updates)
            .sum();
        Ok((o.summary.instructions, events))
    };
    let (traced, (instructions, events)) = fastest(repeat, || traced_run(None))?;
    let (clock, _) = fastest(repeat, || traced_run(Some(Vec::new())))?;
    let preload = run.preload()?;
    let base = untraced_baselines(
        &image,
        UntracedOptions {
            preload: &preload,
            ..Default::default()
        },
        repeat,
    )?;
    let (raw, stock) = (base.raw, base.stock);
    Ok([
        Phase {
            name: "O_s trace",
            instructions: Some(instructions),
            events: Some(events),
            seconds: traced.as_secs_f64(),
            raw_seconds: Some(raw.as_secs_f64()),
        },
        Phase {
            name: "  clock alone",
            instructions: Some(instructions),
            events: Some(0),
            seconds: clock.as_secs_f64(),
            raw_seconds: Some(raw.as_secs_f64()),
        },
        Phase {
            name: "  vs stock unicorn",
            instructions: Some(instructions),
            events: Some(events),
            seconds: traced.as_secs_f64(),
            raw_seconds: Some(stock.as_secs_f64()),
        },
    ])
}

/// `verify`'s phases, each the fastest of `repeat` verifies without the
/// trace cache: traced seconds and the wall time from verifies as a user
/// runs them, the runs without hooks from as many verifies with
/// `--baseline` (which time them just before each traced run).
fn verify_phases(model: &ModelSource, kernels: Kernels, repeat: u32) -> Result<VerifyPhases> {
    let options = |baseline, oracle| VerifyOptions {
        model: model.clone(),
        planner: None,
        overlap: OverlapChoice::Traced,
        plan: None,
        seed: 1,
        input: None,
        target: Arch::CortexM4,
        kernels,
        overlap_kernels: None,
        runner: None,
        plot: None,
        baseline,
        max_instructions: crate::support::common::MAX_INSTRUCTIONS,
        spill: Default::default(),
        allow_foreign_plan: false,
        deploy: Default::default(),
        cache: TraceCache::new(false),
        oracle,
        embedded_plan: false,
        pick: None,
    };
    let plain: Vec<(VerifyReport, f64)> = (0..repeat.max(1))
        .map(|_| {
            let before = cpu_seconds();
            let report = verify(&options(false, true))?;
            Ok((report, cpu_seconds() - before))
        })
        .collect::<Result<_>>()?;
    let fastest = plain
        .iter()
        .min_by(|a, b| a.0.seconds.total_cmp(&b.0.seconds))
        .expect("at least one verify");
    let (wall, cpu) = (fastest.0.seconds, fastest.1);
    let plain: Vec<VerifyReport> = plain.into_iter().map(|(r, _)| r).collect();
    let timed: Vec<VerifyReport> = (0..repeat.max(1))
        .map(|_| verify(&options(true, true)))
        .collect::<Result<_>>()?;
    let min = |values: &mut dyn Iterator<Item = f64>| values.fold(f64::INFINITY, f64::min);
    let least = |f: &dyn Fn(&VerifyReport) -> Option<f64>, of: &[VerifyReport]| {
        let m = min(&mut of.iter().filter_map(f));
        m.is_finite().then_some(m)
    };
    let first = &plain[0];
    let reference = least(&|r| Some(r.reference.seconds), &plain).unwrap_or_default();
    let planned = least(&|r| Some(r.plan.seconds), &plain).unwrap_or_default();
    let oracle = least(&|r| r.oracle.as_ref().map(|o| o.seconds), &plain);
    let mut phases = vec![
        Phase {
            name: "verify: reference run",
            instructions: Some(first.reference.instructions),
            events: None,
            seconds: reference,
            raw_seconds: least(&|r| r.reference.untraced_seconds, &timed),
        },
        Phase {
            name: "verify: plan + shadow",
            instructions: Some(first.plan.instructions),
            events: None,
            seconds: planned,
            raw_seconds: least(&|r| r.plan.untraced_seconds, &timed),
        },
    ];
    // The kernels' checks: the red-zoned run, and (CMSIS-NN) every
    // operator against the reference kernels, two untraced runs; both
    // against the reference run's program without hooks.
    let zoned = least(&|r| Some(r.kernel_check.seconds), &plain).unwrap_or_default();
    phases.push(Phase {
        name: "verify: red-zoned run",
        instructions: Some(first.kernel_check.instructions),
        events: None,
        seconds: zoned,
        raw_seconds: least(&|r| r.reference.untraced_seconds, &timed),
    });
    let compared = least(&|r| r.reference_kernels.as_ref().map(|c| c.seconds), &plain);
    if let (Some(c), Some(seconds)) = (&first.reference_kernels, compared) {
        phases.push(Phase {
            name: "verify: vs reference kernels",
            instructions: Some(c.instructions),
            events: None,
            seconds,
            raw_seconds: None,
        });
    }
    if let Some(oracle) = oracle {
        // The plan run again with no oracle beside it: what its tracing
        // costs on a machine that runs nothing else.
        let alone: Vec<VerifyReport> = (0..repeat.max(1))
            .map(|_| verify(&options(false, false)))
            .collect::<Result<_>>()?;
        phases.push(Phase {
            name: "verify --no-oracle: plan",
            instructions: Some(alone[0].plan.instructions),
            events: None,
            seconds: least(&|r| Some(r.plan.seconds), &alone).unwrap_or_default(),
            raw_seconds: least(&|r| r.plan.untraced_seconds, &timed),
        });
        phases.push(Phase {
            name: "verify: host oracle",
            instructions: None,
            events: None,
            seconds: oracle,
            raw_seconds: None,
        });
    }
    Ok(VerifyPhases {
        phases,
        wall,
        sum: reference + planned + zoned + compared.unwrap_or(0.0) + oracle.unwrap_or(0.0),
        cpu,
    })
}

/// User and system CPU seconds of this process (all its threads) and of
/// its waited-for children (the host oracle) so far.
fn cpu_seconds() -> f64 {
    let of = |who| {
        // SAFETY: `getrusage` fills the zeroed struct it is given.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(who, &mut usage) } != 0 {
            return 0.0;
        }
        let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
        seconds(usage.ru_utime) + seconds(usage.ru_stime)
    };
    of(libc::RUSAGE_SELF) + of(libc::RUSAGE_CHILDREN)
}

#[cfg(test)]
mod tests {
    use super::cpu_seconds;

    /// CPU seconds of the calling thread alone.
    fn thread_seconds() -> f64 {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: fills `t`.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
        t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
    }

    #[test]
    fn cpu_time_counts_every_thread() {
        // Each thread works until its own clock says 150 ms, however the
        // cores are shared.
        let spin = || {
            let mut n = 0u64;
            while thread_seconds() < 0.15 {
                n = std::hint::black_box(n + 1);
            }
        };
        let before = cpu_seconds();
        std::thread::scope(|s| {
            s.spawn(spin);
            s.spawn(spin);
        });
        let used = cpu_seconds() - before;
        assert!(
            (0.29..1.0).contains(&used),
            "{used} s of CPU for two threads of 0.15 s"
        );
    }
}
