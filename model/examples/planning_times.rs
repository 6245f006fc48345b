//! How long each heuristic planner takes (every planner but `exact`, whose
//! budget is a time limit), validation included, with analytic O_s:
//! on each model given (a `.tflite` file or `zoo:NAME`; by default the
//! `tfmicro` crate's person_detection_grayscale, located with `cargo
//! metadata` on `harness-c/tfmicro-locator/Cargo.toml` as the tests do) and
//! on a synthetic graph of 2000 operators ([`zoo::synthetic_graph`]).
//!
//! ```text
//! cargo run --release -p memtrace-model --example planning_times [-- MODEL...]
//! ```

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use memtrace_model::planner::{self, OverlapMethod, Overlaps, PlanOptions, PlannerKind};
use memtrace_model::{source, zoo, Model};

/// `examples/models/person_detection_grayscale.tflite` of the tfmicro crate.
fn person_detection() -> PathBuf {
    let manifest = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../harness-c/tfmicro-locator/Cargo.toml"
    );
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = [true, false]
        .into_iter()
        .find_map(|offline| {
            let mut cmd = Command::new(&cargo);
            cmd.args([
                "metadata",
                "--format-version",
                "1",
                "--manifest-path",
                manifest,
            ]);
            if offline {
                cmd.arg("--offline");
            }
            cmd.output().ok().filter(|o| o.status.success())
        })
        .expect("cargo metadata on tfmicro-locator");
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("cargo metadata JSON");
    let tfmicro = meta["packages"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["name"] == "tfmicro"))
        .and_then(|p| p["manifest_path"].as_str())
        .expect("tfmicro in cargo metadata");
    PathBuf::from(tfmicro)
        .parent()
        .expect("a manifest's folder")
        .join("examples/models/person_detection_grayscale.tflite")
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let names = if args.is_empty() {
        vec![person_detection().display().to_string()]
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
