//! How long each heuristic planner takes (every planner but `exact`, whose
//! budget is a time limit), validation included, with analytic O_s:
//! on each model given (a `.tflite` file or `zoo:NAME`; by default TFLM's
//! person-detection model of `../shared/models`) and
//! on a synthetic graph of 2000 operators ([`zoo::synthetic_graph`]).
//!
//! ```text
//! cargo run --release -p memtrace-model --example planning_times [-- MODEL...]
//! ```

use std::time::Instant;

use memtrace_model::planner::{self, OverlapMethod, Overlaps, PlanOptions, PlannerKind};
use memtrace_model::{source, zoo, Model};

/// TFLM's person-detection model in `../shared/models` (beside the repository).
fn person_detect() -> String {
    concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/models/tflm_person_detect.tflite"
    )
    .to_string()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let names = if args.is_empty() {
        vec![person_detect()]
    } else {
        args
    };
    let mut models: Vec<Model> = names
        .iter()
        .map(|n| source::load(n).unwrap_or_else(|e| panic!("{n}: {e}")))
        .collect();
    models.push(zoo::synthetic_graph(2000));
    let opts = PlanOptions::default();
    for m in &models {
        let t0 = Instant::now();
        let ov = Overlaps::compute(m, &OverlapMethod::Analytic);
        println!(
            "{}: {} ops, analytic O_s in {:.3} s",
            m.name,
            m.ops.len(),
            t0.elapsed().as_secs_f64()
        );
        for p in PlannerKind::ALL
            .into_iter()
            .filter(|&p| p != PlannerKind::Exact)
        {
            let start = Instant::now();
            let plan = planner::run(m, p, &ov, &opts).unwrap_or_else(|e| panic!("{}: {e}", m.name));
            let seconds = start.elapsed().as_secs_f64();
            println!(
                "  {:<12} {:>8.4} s  peak {:?} {}",
                p.name(),
                seconds,
                plan.peak_bytes,
                plan.status
            );
        }
    }
}
