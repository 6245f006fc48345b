//! The classes with rules of their own: TinySeg's options without
//! `--planner tinyseg`, `--kernels`/`--runner`/`--runtime` combinations,
//! and every plan `plan --kernels K` prints, verified on K.

use memtrace_model::{tflite, zoo};
use memtrace_overlap::rng::Rng;
use serde_json::Value;

use crate::binary::{Expect, Job};
use crate::cases::{
    case_job, kept_cases, model_arg, model_order, pick, plan_report, shared_dir, Case, LIBRARIES,
    PROPERTY_MODELS, SMALL_MODELS,
};
use crate::mutate::NUMBERS;
use crate::oracle::{oracle_case, Oracle};
use crate::scaled;

/// TinySeg's options with and without `--planner tinyseg`: without it they
/// would do nothing, which is a usage error (exit 2).
pub(crate) fn tinyseg_case(rng: &mut Rng) -> Case {
    let verify = rng.chance(50);
    let small = SMALL_MODELS.map(model_arg);
    let model = if verify || rng.chance(50) {
        pick(rng, &small).clone()
    } else {
        pick(rng, &["zoo:sakr_cifar10", "zoo:tiny_unet_80x120_int8"]).to_string()
    };
    let planner = *pick(
        rng,
        &[
            Some("tinyseg"),
            Some("tinyseg"),
            Some("tinyseg"),
            None,
            Some("dmo-heap"),
            Some("tflm-greedy"),
            Some("exact"),
            Some("all"),
            Some("bogus"),
        ],
    );
    let mut args: Vec<String> = vec![if verify { "verify" } else { "plan" }.into(), model.clone()];
    // Tiny U-Net's trace on TFLM is taken from the cache, which
    // `class_jobs` fills before the campaign: traced afresh it would not
    // fit the time limit of one input.
    if verify {
        args.push("--no-oracle".into());
    }
    if let Some(p) = planner {
        args.extend(["--planner".into(), p.into()]);
    }
    let mut given = Vec::new();
    let mut opt = |args: &mut Vec<String>, name: &'static str, value: &str| {
        args.extend([name.to_string(), value.to_string()]);
        given.push(name);
    };
    if rng.chance(50) {
        let base = *pick(
            rng,
            &[
                "tflm-greedy",
                "dmo-heap",
                "reorder",
                "exact",
                "linear",
                "replacement",
                "tinyseg",
                "greedy",
                "",
            ],
        );
        opt(&mut args, "--base", base);
    }
    if rng.chance(50) {
        let v = if rng.chance(50) {
            pick(rng, &NUMBERS).to_string()
        } else {
            pick(rng, &["16", "1000", "20000", "30000", "33000", "1000000"]).to_string()
        };
        opt(&mut args, "--target-bytes", &v);
    }
    if rng.chance(40) {
        let v = *pick(rng, &["never", "exact", "always", "sometimes"]);
        opt(&mut args, "--scratch-int16", v);
    }
    if rng.chance(20) && small.contains(&model) {
        args.extend(["--kernels".into(), "cmsis-nn".into()]);
    }
    args.extend(["--format".into(), "json".into()]);
    let usage = (planner != Some("tinyseg") && !given.is_empty())
        .then(|| format!("{} without --planner tinyseg", given.join(", ")));
    Case {
        args,
        files: vec![],
        expect: Expect {
            usage_ok: true,
            usage,
            ..Expect::default()
        },
    }
}

/// `verify` with `--kernels`, `--runner`, `--runtime`, `--target`,
/// `--overlap-from`, `--overlap` combined: a TFLM runner built with another
/// library than `--kernels` is refused, `--overlap-from` with a method and
/// the retired `--runtime executor` are usage errors, and an accepted run's
/// report names the library whose code ran.
pub(crate) fn kernels_case(rng: &mut Rng) -> Case {
    let small = SMALL_MODELS.map(model_arg);
    let mut args = vec!["verify".to_string(), pick(rng, &small).clone()];
    let kernels = *pick(
        rng,
        &[
            None,
            Some("tflm"),
            Some("tflm"),
            Some("cmsis-nn"),
            Some("cmsis-nn"),
            Some("cmsis"),
        ],
    );
    let runtime = *pick(
        rng,
        &[
            None,
            None,
            None,
            Some("executor"),
            Some("tflm"),
            Some("tflm"),
        ],
    );
    let target = *pick(
        rng,
        &[None, None, None, None, Some("x86-64"), Some("cortex-m4")],
    );
    let runner = *pick(
        rng,
        &[
            None,
            None,
            None,
            Some("cortex-m4/tflm-runner.elf"),
            Some("cortex-m4/tflm-runner-cmsis.elf"),
            Some("cortex-m4/suite.elf"),
            Some("cortex-m4/suite-cmsis.elf"),
            Some("x86_64/tflm-runner.elf"),
            Some("x86_64/tflm-runner-cmsis.elf"),
            Some("cortex-m4/bad-protocol.elf"),
            Some("missing/tflm-runner.elf"),
        ],
    );
    let overlap_from = *pick(rng, &[None, None, None, Some("tflm"), Some("cmsis-nn")]);
    let overlap = *pick(
        rng,
        &[
            None,
            None,
            None,
            Some("traced"),
            Some("analytic"),
            Some("none"),
        ],
    );
    for (name, v) in [
        ("--kernels", kernels),
        ("--runtime", runtime),
        ("--target", target),
        ("--overlap-from", overlap_from),
        ("--overlap", overlap),
    ] {
        if let Some(v) = v {
            args.extend([name.into(), v.into()]);
        }
    }
    if let Some(e) = runner {
        args.extend(["--runner".into(), format!("$REPO/harness-c/build/{e}")]);
    }
    args.extend(["--format".into(), "json".into()]);
    let lib = kernels.unwrap_or("tflm");
    let mut expect = Expect {
        usage_ok: true,
        kernels: Some(lib.into()),
        ..Expect::default()
    };
    if let (Some(_), Some(m)) = (overlap_from, overlap.filter(|&m| m != "traced")) {
        expect.usage = Some(format!("--overlap-from with --overlap {m}"));
    }
    if runtime == Some("executor") {
        expect.usage = Some("--runtime executor (retired)".into());
    }
    if let Some(e) = runner {
        let built = if e.contains("cmsis") {
            "cmsis-nn"
        } else {
            "tflm"
        };
        if e.contains("tflm-runner") && built != lib && lib != "cmsis" {
            expect.refuse = Some(format!("{e} is built with {built}, the run is for {lib}"));
        }
    }
    Case {
        args,
        files: vec![],
        expect,
    }
}

/// Every plan `memtrace plan --kernels K` prints, verified on K: with its
/// placements (`--plan`, model order) or, for a plan in another order, by
/// its planner with the same O_s source.
pub(crate) fn own_library_cases(
    model: &str,
    kernels: &str,
    report: &Value,
    ops: usize,
) -> Vec<Case> {
    let mut seen = std::collections::HashSet::new();
    let mut cases = Vec::new();
    for p in report["plans"].as_array().unwrap() {
        let Some(arena) = p["peak_bytes"].as_u64() else {
            continue;
        };
        let planner = p["planner"].as_str().unwrap();
        let overlap = p["overlap"].as_str().unwrap();
        let mut args = vec![
            "verify".to_string(),
            "--no-oracle".into(),
            model_arg(model),
            "--kernels".into(),
            kernels.into(),
            "--format".into(),
            "json".into(),
        ];
        let mut files = Vec::new();
        if model_order(p, ops) {
            let tensors: Vec<Value> = p["tensors"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| serde_json::json!({"name": t["name"], "offset": t["offset"]}))
                .collect();
            let text = serde_json::json!({
                "tensors": tensors, "arena_bytes": arena, "kernels": kernels, "overlap": overlap,
            })
            .to_string();
            if !seen.insert(serde_json::to_string(&tensors).unwrap()) {
                continue;
            }
            files.push(("p.json".to_string(), text));
            args.extend(["--plan".into(), "p.json".into()]);
        } else {
            args.extend([
                "--planner".into(),
                planner.into(),
                "--overlap".into(),
                overlap.into(),
            ]);
        }
        cases.push(Case {
            args,
            files,
            expect: Expect {
                verifies: true,
                kernels: Some(kernels.into()),
                ..Expect::default()
            },
        });
    }
    cases
}

/// The jobs of the four classes: kept failures first, then new inputs.
pub(crate) fn class_jobs(rng: &mut Rng) -> (Vec<Job>, usize) {
    let mut jobs = Vec::new();
    for target in [
        "plan-oracle-bin",
        "tinyseg-bin",
        "kernels-bin",
        "own-library-bin",
    ] {
        jobs.extend(kept_cases(target));
    }
    let replayed = jobs.len();
    // Tiny U-Net's run on TFLM, traced once into the cache without a time
    // limit, so that the TinySeg cases' `plan`s of it read it back.
    plan_report("zoo:tiny_unet_80x120_int8", "tflm", &[]);
    let mut oracles = Vec::new();
    let mut own = Vec::new();
    for kernels in LIBRARIES {
        for model in SMALL_MODELS.iter().chain(&PROPERTY_MODELS) {
            let report = plan_report(model, kernels, &[]);
            let ops = if let Some(z) = model.strip_prefix("zoo:") {
                zoo::build(z).unwrap().ops.len()
            } else {
                tflite::import_file(&shared_dir().join(model))
                    .unwrap()
                    .ops
                    .len()
            };
            own.extend(own_library_cases(model, kernels, &report, ops));
            if SMALL_MODELS.contains(model) {
                oracles.push(Oracle::new(model, kernels, &report));
            }
        }
    }
    for i in 0..scaled(150) {
        let o = &oracles[i % oracles.len()];
        jobs.push(case_job("plan-oracle-bin", oracle_case(rng, o)));
    }
    for _ in 0..scaled(60) {
        jobs.push(case_job("tinyseg-bin", tinyseg_case(rng)));
    }
    for _ in 0..scaled(60) {
        jobs.push(case_job("kernels-bin", kernels_case(rng)));
    }
    // Every library against every runner build.
    for kernels in LIBRARIES {
        for built in LIBRARIES {
            let file = match built {
                "tflm" => "tflm-runner.elf",
                _ => "tflm-runner-cmsis.elf",
            };
            let mut expect = Expect {
                kernels: Some(kernels.into()),
                ..Expect::default()
            };
            if built != kernels {
                expect.refuse = Some(format!("{file} is built with {built}, not {kernels}"));
            }
            let case = Case {
                args: [
                    "verify",
                    &model_arg(SMALL_MODELS[2]),
                    "--kernels",
                    kernels,
                    "--runner",
                    &format!("$REPO/harness-c/build/cortex-m4/{file}"),
                    "--format",
                    "json",
                ]
                .map(String::from)
                .to_vec(),
                files: vec![],
                expect,
            };
            jobs.push(case_job("kernels-bin", case));
        }
    }
    // The slow property runs first, so the two workers end together.
    let mut property: Vec<Job> = own
        .into_iter()
        .map(|c| case_job("own-library-bin", c))
        .collect();
    property.append(&mut jobs);
    (property, replayed)
}
