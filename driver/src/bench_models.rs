//! `memtrace bench --models`: whole models on real TFLM (Cortex-M4), on both
//! kernel builds, phase by phase, each traced phase against the same guest
//! program in Unicorn without hooks, both measured in this process.
//!
//! The phases are those of `memtrace verify` (without the trace cache):
//! the O_s trace (TFLM's own plan, one layer per operator: the reference
//! run), the run of memtrace's plan under the shadow map, and PyPI
//! `tflite-micro` on the host (the oracle, beside the plan run). A first row
//! times the O_s trace alone, fastest of `repeat`, with its event count; a
//! second the same run with no layer selected (the instruction clock's
//! block hook alone, no event: what the run that counts beside the one
//! that records costs, the floor of the first row); a
//! last line compares `verify`'s wall time with the sum of its phases,
//! which is larger when the phases share the two cores.

use std::io::Write;
use std::path::Path;

use memtrace_analyzer::layer_stats::LayerStats;
use memtrace_model::planner::PlannerKind;
use memtrace_tracer::baseline::{run_untraced, UntracedOptions};
use memtrace_tracer::{AccessPath, Arch};

use crate::bench::fastest;
use crate::error::Result;
use crate::kernels::Kernels;
use crate::kernels::Runtime;
use crate::provenance::OverlapChoice;
use crate::tflm::{load_runner, model_bytes, seeded_inputs, ModelRun};
use crate::trace_cache::TraceCache;
use crate::verify::tflm::{verify_tflm, TflmVerifyReport};
use crate::verify::VerifyOptions;

/// One row of the table.
struct Phase {
    name: &'static str,
    instructions: Option<u64>,
    events: Option<u64>,
    seconds: f64,
    /// The same guest program without hooks (none for host work).
    raw_seconds: Option<f64>,
}

/// `verify`'s phases, and its wall time against their sum (below it when
/// they share the two cores).
struct VerifyPhases {
    phases: Vec<Phase>,
    wall: f64,
    sum: f64,
}

/// Prints the per-phase table of every model in `models`.
pub fn bench_models(
    models: &[String],
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
        "{:<44} {:<9} {:<22} {:>13} {:>10} {:>9} {:>9} {:>7} {:>9}",
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
        let name = model.rsplit('/').next().unwrap_or(model);
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
                "{:<44} {:<9} verify wall {:.3} s = {:.2} x the sum of its phases ({:.3} s)",
                "",
                "",
                verify.wall,
                verify.wall / verify.sum.max(1e-9),
                verify.sum
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
        "{:<44} {:<9} {:<22} {:>13} {:>10} {:>9.3} {:>9} {:>7} {:>9}",
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
fn os_trace(model: &str, build_dir: &Path, kernels: Kernels, repeat: u32) -> Result<[Phase; 3]> {
    let bytes = model_bytes(model, 1)?;
    let graph = memtrace_model::graph::read_graph(&bytes)?;
    let inputs = seeded_inputs(&graph, 1)?;
    let image = load_runner(
        &build_dir.join("cortex-m4").join(kernels.runner_file()),
        kernels,
    )?;
    let run = ModelRun::whole(&image, &bytes, &inputs, 200_000_000_000).without_scratch();
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
    let untraced = |stock| {
        fastest(repeat, || {
            Ok(run_untraced(
                &image,
                UntracedOptions {
                    preload: &preload,
                    stock,
                    ..Default::default()
                },
            )?)
        })
    };
    let (raw, _) = untraced(false)?;
    let (stock, _) = untraced(true)?;
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
fn verify_phases(model: &str, kernels: Kernels, repeat: u32) -> Result<VerifyPhases> {
    let options = |baseline| VerifyOptions {
        model: model.to_string(),
        planner: PlannerKind::DmoHeap,
        overlap: OverlapChoice::Traced,
        plan: None,
        seed: 1,
        input: None,
        target: Arch::CortexM4,
        kernels,
        overlap_kernels: None,
        executor: None,
        plot: None,
        baseline,
        max_instructions: 200_000_000_000,
        spill: Default::default(),
        accumulator: Default::default(),
        runtime: Runtime::Tflm,
        allow_foreign_plan: false,
        cache: TraceCache::new(false),
    };
    let plain: Vec<TflmVerifyReport> = (0..repeat.max(1))
        .map(|_| verify_tflm(&options(false)))
        .collect::<Result<_>>()?;
    let timed: Vec<TflmVerifyReport> = (0..repeat.max(1))
        .map(|_| verify_tflm(&options(true)))
        .collect::<Result<_>>()?;
    let min = |values: &mut dyn Iterator<Item = f64>| values.fold(f64::INFINITY, f64::min);
    let least = |f: &dyn Fn(&TflmVerifyReport) -> Option<f64>, of: &[TflmVerifyReport]| {
        let m = min(&mut of.iter().filter_map(f));
        m.is_finite().then_some(m)
    };
    let first = &plain[0];
    let reference = least(&|r| Some(r.reference.seconds), &plain).unwrap_or_default();
    let planned = least(&|r| Some(r.plan.seconds), &plain).unwrap_or_default();
    let oracle = least(&|r| r.oracle.as_ref().map(|o| o.seconds), &plain);
    let wall = least(&|r| Some(r.seconds), &plain).unwrap_or_default();
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
    if let Some(oracle) = oracle {
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
        sum: reference + planned + oracle.unwrap_or(0.0),
    })
}
