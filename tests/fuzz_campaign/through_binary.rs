//! The campaign through the binary: mutants of every input class, then the
//! classes with rules of their own.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use memtrace_model::planner::{self, Overlaps, PlanOptions, PlannerKind};
use memtrace_model::tflite;

use crate::binary::{args, run_job, Expect, Job};
use crate::classes::class_jobs;
use crate::common;
use crate::fixtures::{kept, kept_recipes};
use crate::mutate::{apply, mutate, mutate_json, mutate_spec, Recipe};
use crate::seeds::{elf_hot, elf_seeds, seed_bytes, spec_seeds, tflite_seeds};
use crate::tally::Tally;
use crate::{scaled, seed};

#[test]
pub(crate) fn fuzz_through_the_binary() {
    let started = Instant::now();
    let suite = common::guest("cortex-m4", "suite");
    let suite_s = suite.display().to_string();
    let elfs = elf_seeds();
    let models = tflite_seeds();
    let hello = std::fs::read(common::tfmicro_model("hello_world")).unwrap();
    let mut jobs: Vec<Job> = Vec::new();

    let elf_job = |r: &Recipe, base: &[u8]| Job {
        target: "elf-bin",
        files: vec![("k.elf".into(), apply(base, &r.edits))],
        // The suites run one small job layer; the others their own layers.
        args: if r.seed.contains("suite") {
            args(&[
                "run",
                "k.elf",
                "--job",
                "op=relu,input=1x4x4x2",
                "--max-instructions",
                "2000000",
            ])
        } else {
            args(&["run", "k.elf", "--max-instructions", "2000000"])
        },
        keep: ("json", serde_json::to_vec(r).unwrap()),
        expect: Expect::default(),
    };
    let model_job = |r: &Recipe, base: &[u8], verify: bool| Job {
        target: if verify { "verify-bin" } else { "plan-bin" },
        files: vec![("m.tflite".into(), apply(base, &r.edits))],
        args: if verify {
            args(&["verify", "m.tflite", "--max-instructions", "100000000"])
        } else {
            args(&["plan", "m.tflite"])
        },
        keep: ("json", serde_json::to_vec(r).unwrap()),
        expect: Expect::default(),
    };
    let spec_job = |text: &str| Job {
        target: "job-bin",
        files: vec![],
        args: vec![
            "run".into(),
            suite_s.clone(),
            "--job".into(),
            text.into(),
            "--max-instructions".into(),
            "5000000".into(),
        ],
        keep: ("txt", text.as_bytes().to_vec()),
        expect: Expect::default(),
    };
    let plan_job = |text: &str| Job {
        target: "plan-json-bin",
        files: vec![
            ("m.tflite".into(), hello.clone()),
            ("p.json".into(), text.as_bytes().to_vec()),
        ],
        args: args(&["verify", "m.tflite", "--plan", "p.json", "--no-oracle"]),
        keep: ("json", text.as_bytes().to_vec()),
        expect: Expect::default(),
    };
    let baseline_job = |text: &str| Job {
        target: "baseline-bin",
        files: vec![("b.json".into(), text.as_bytes().to_vec())],
        args: vec![
            "regress".into(),
            "b.json".into(),
            suite_s.clone(),
            "--max-instructions".into(),
            "5000000".into(),
            "--jobs".into(),
            "1".into(),
        ],
        keep: ("json", text.as_bytes().to_vec()),
        expect: Expect::default(),
    };

    // Kept failures first.
    let mut replayed = 0;
    for r in kept_recipes("elf-bin") {
        if let Some(b) = seed_bytes(&elfs, &r.seed) {
            jobs.push(elf_job(&r, b));
            replayed += 1;
        }
    }
    for (target, verify) in [("plan-bin", false), ("verify-bin", true)] {
        for r in kept_recipes(target) {
            if let Some(b) = seed_bytes(&models, &r.seed) {
                jobs.push(model_job(&r, b, verify));
                replayed += 1;
            }
        }
    }
    for b in kept("job-bin", "txt") {
        jobs.push(spec_job(&String::from_utf8_lossy(&b)));
        replayed += 1;
    }
    for b in kept("plan-json-bin", "json") {
        jobs.push(plan_job(&String::from_utf8_lossy(&b)));
        replayed += 1;
    }
    for b in kept("baseline-bin", "json") {
        jobs.push(baseline_job(&String::from_utf8_lossy(&b)));
        replayed += 1;
    }

    // Seeds written by memtrace itself: a plan of hello_world and a baseline.
    let hello_model = tflite::import_bytes("hello_world", &hello).unwrap();
    let greedy = planner::run(
        &hello_model,
        PlannerKind::TflmGreedy,
        &Overlaps::none(&hello_model),
        &PlanOptions::default(),
    )
    .unwrap();
    let names = hello_model.tensor_names();
    let plan_seed = serde_json::json!({
        "tensors": greedy.tensors.iter().map(|p| serde_json::json!({
            "name": names[p.tensor], "offset": p.offset})).collect::<Vec<_>>(),
        "arena_bytes": greedy.peak_bytes,
    })
    .to_string();
    let base_dir = std::env::temp_dir().join(format!("memtrace-fuzz-base-{}", std::process::id()));
    std::fs::create_dir_all(&base_dir).unwrap();
    let base_path = base_dir.join("base.json");
    let out = common::memtrace([
        "table",
        &suite_s,
        "--out",
        common::path_str(&base_path),
        "--no-builtin",
        "--grid",
        "op=relu,input=1x4x4x{2,3}",
        "--grid",
        "op=max_pool,input=1x6x6x2,filter=2x2,stride=2",
        "--grid",
        "op=depthwise_conv2d,input=1x5x5x2,filter=1x3x3x4",
    ]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let baseline_seed = std::fs::read_to_string(&base_path).unwrap();
    std::fs::remove_dir_all(&base_dir).unwrap();

    let mut rng = seed(5);
    for i in 0..scaled(90) {
        let (name, base) = &elfs[i % elfs.len()];
        let r = Recipe {
            seed: name.clone(),
            edits: mutate(&mut rng, base, &elf_hot(base)),
        };
        jobs.push(elf_job(&r, base));
    }
    for i in 0..scaled(70) {
        let (name, base) = &models[i % models.len()];
        let hot = [
            (0, 512.min(base.len())),
            (base.len().saturating_sub(2048), base.len()),
        ];
        let r = Recipe {
            seed: name.clone(),
            edits: mutate(&mut rng, base, &hot),
        };
        // hello_world and micro_speech run on TFLM (and the host oracle)
        // in about a second.
        let verify = i % 2 == 0 && (name.contains("hello") || name.contains("speech"));
        jobs.push(model_job(&r, base, verify));
    }
    let specs = spec_seeds();
    for i in 0..scaled(60) {
        let mut text = specs[i % specs.len()].clone();
        // (A command line cannot carry a NUL byte.)
        text = mutate_spec(&mut rng, &text).replace('\0', "");
        jobs.push(spec_job(&text));
    }
    for _ in 0..scaled(40) {
        jobs.push(plan_job(&mutate_json(&mut rng, &plan_seed)));
    }
    for _ in 0..scaled(40) {
        jobs.push(baseline_job(&mutate_json(&mut rng, &baseline_seed)));
    }
    // The classes with their own rules: plan files against the live-overlap oracle,
    // TinySeg options, libraries and runners, and every plan `plan` makes
    // for a library verified on it (slow ones first).
    let (mut more, more_replayed) = class_jobs(&mut seed(6));
    replayed += more_replayed;
    more.append(&mut jobs);
    let jobs = more;

    // Two workers (the machine has two cores).
    let next = Mutex::new(0usize);
    let total = Mutex::new(Tally::default());
    let by_target: Mutex<HashMap<&'static str, Tally>> = Mutex::new(HashMap::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let i = {
                    let mut n = next.lock().unwrap();
                    let i = *n;
                    *n += 1;
                    i
                };
                let Some(job) = jobs.get(i) else { break };
                let t = run_job(job, i);
                let mut bt = by_target.lock().unwrap();
                let e = bt.entry(job.target).or_default();
                e.merge(t.clone());
                drop(bt);
                total.lock().unwrap().merge(t);
            });
        }
    });
    let mut total = total.into_inner().unwrap();
    total.replayed = replayed;
    let mut targets: Vec<_> = by_target.into_inner().unwrap().into_iter().collect();
    targets.sort_by_key(|(target, _)| *target);
    for (target, t) in targets {
        let mut line = format!(
            "  {target}: {} runs, {} accepted, {} clean errors",
            t.inputs, t.accepted, t.clean_errors
        );
        if t.usage_errors > 0 || t.oracle_violations > 0 {
            line += &format!(", {} usage errors", t.usage_errors);
        }
        if t.must_refuse > 0 {
            line += &format!(", {} judged unsafe by the oracle", t.must_refuse);
        }
        if t.own_plans > 0 {
            line += &format!(
                ", {} of {} plans clobber on their own library",
                t.own_clobbers, t.own_plans
            );
        }
        if t.oracle_violations > 0 {
            line += &format!(", {} ORACLE VIOLATIONS", t.oracle_violations);
        }
        println!("{line}");
    }
    total.finish("binary", started);
}
