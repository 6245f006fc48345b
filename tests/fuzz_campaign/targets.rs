//! The in-process targets (ELF loader, `.tflite` importer, spec parser, plan
//! files), each run on its seeds and their mutants.

use std::path::Path;
use std::time::Instant;

use memtrace_abi::spec::LayerSpec;
use memtrace_driver::workflows::verify::placement_from_plan;
use memtrace_model::planner::{self, Overlaps, PlanOptions, PlannerKind};
use memtrace_model::{tflite, Model};
use memtrace_overlap::configs::estimated_instructions;
use memtrace_tracer::ElfImage;

use crate::common;
use crate::fixtures::{keep, kept, kept_recipes};
use crate::mutate::{apply, mutate, mutate_json, mutate_spec, Recipe};
use crate::seeds::{elf_hot, elf_seeds, seed_bytes, spec_seeds, tflite_seeds};
use crate::tally::{in_process, Tally};
use crate::{scaled, seed};

pub(crate) fn elf_target(name: &str, bytes: Vec<u8>) -> Result<(), String> {
    let image = ElfImage::parse(Path::new(name), bytes.into()).map_err(|e| e.to_string())?;
    let _ = image.protocol_port();
    let _ = image.function_at(image.entry);
    let _ = image.is_loaded(image.entry, u64::MAX);
    let _ = image.is_executable(u64::MAX - 1, u64::MAX);
    for s in [
        "memtrace_port",
        "memtrace_job",
        "memtrace_arena",
        "memtrace_signal",
    ] {
        if let Some(sym) = image.symbol(s) {
            let _ = image.is_loaded(sym.address, sym.size);
            let _ = image.is_executable(sym.address, sym.size);
            let _ = image.function_at(sym.address);
        }
    }
    Ok(())
}

/// Import, then what `plan` and `verify` do with an imported model before
/// the emulator: validate, layer specs, two planners, the offline plan
/// written into the model.
pub(crate) fn tflite_target(bytes: &[u8]) -> Result<(), String> {
    let model = tflite::import_bytes("fuzz", bytes).map_err(|e| e.to_string())?;
    model.validate().map_err(|e| e.to_string())?;
    let _ = tflite::read_offline(bytes);
    for op in 0..model.ops.len() {
        if let Some(spec) = model.layer_spec(op) {
            assert_eq!(LayerSpec::parse(&spec.to_string()).as_ref(), Ok(&spec));
        }
    }
    let plan = planner::run(
        &model,
        PlannerKind::TflmGreedy,
        &Overlaps::none(&model),
        &PlanOptions::default(),
    )
    .map_err(|e| e.to_string())?;
    let _ = planner::run(
        &model,
        PlannerKind::DmoHeap,
        &Overlaps::none(&model),
        &PlanOptions::default(),
    );
    let mut offsets = vec![None; model.tensors.len()];
    for t in &plan.tensors {
        offsets[t.tensor] = Some(t.offset);
    }
    tflite::emit_offline(bytes, &offline_offsets(&offsets)).map_err(|e| e.to_string())?;
    Ok(())
}

/// Offsets as `OfflineMemoryAllocation` holds them (-1: TFLM places it).
pub(crate) fn offline_offsets(offsets: &[Option<u64>]) -> Vec<i64> {
    offsets
        .iter()
        .map(|o| o.and_then(|v| i64::try_from(v).ok()).unwrap_or(-1))
        .collect()
}

pub(crate) fn spec_target(text: &str) -> Result<(), String> {
    let spec = LayerSpec::parse(text).map_err(|e| e.to_string())?;
    let again = LayerSpec::parse(&spec.to_string()).map_err(|e| format!("round trip: {e}"))?;
    assert_eq!(
        again, spec,
        "canonical text of `{text}` parses back differently"
    );
    let _ = spec.job_words(1);
    let _ = estimated_instructions(&spec);
    let _ = (spec.input_bytes(), spec.output_bytes());
    Ok(())
}

/// What `verify --plan` does with a plan file, up to the emulator: names to
/// tensors, offsets over the reference placement, the arena, the offline
/// plan written into the model's bytes.
pub(crate) fn plan_target(
    bytes: &[u8],
    model: &Model,
    reference: &[Option<u64>],
    text: &str,
) -> Result<(), String> {
    let (offsets, _arena) =
        placement_from_plan(model, reference, text, false).map_err(|e| e.to_string())?;
    tflite::emit_offline(bytes, &offline_offsets(&offsets)).map_err(|e| e.to_string())?;
    Ok(())
}

#[test]
pub(crate) fn fuzz_elf_loader_in_process() {
    let started = Instant::now();
    let seeds = elf_seeds();
    let mut t = Tally::default();
    let run = |t: &mut Tally, r: &Recipe| {
        let Some(base) = seed_bytes(&seeds, &r.seed) else {
            return;
        };
        let bytes = apply(base, &r.edits);
        if !in_process(t, &r.seed, || elf_target(&r.seed, bytes)) {
            keep("elf", "json", &serde_json::to_vec(r).unwrap());
        }
    };
    for r in kept_recipes("elf") {
        t.replayed += 1;
        run(&mut t, &r);
    }
    let mut rng = seed(1);
    for i in 0..scaled(1200) {
        let (name, base) = &seeds[i % seeds.len()];
        let r = Recipe {
            seed: name.clone(),
            edits: mutate(&mut rng, base, &elf_hot(base)),
        };
        run(&mut t, &r);
    }
    // The unmutated seeds load.
    for (name, base) in &seeds {
        elf_target(name, base.clone()).unwrap();
    }
    t.finish("elf", started);
}

#[test]
pub(crate) fn fuzz_tflite_importer_in_process() {
    let started = Instant::now();
    let seeds = tflite_seeds();
    let mut t = Tally::default();
    let run = |t: &mut Tally, r: &Recipe| {
        let Some(base) = seed_bytes(&seeds, &r.seed) else {
            return;
        };
        let bytes = apply(base, &r.edits);
        if !in_process(t, &r.seed, || tflite_target(&bytes)) {
            keep("tflite", "json", &serde_json::to_vec(r).unwrap());
        }
    };
    for r in kept_recipes("tflite") {
        t.replayed += 1;
        run(&mut t, &r);
    }
    let mut rng = seed(2);
    for i in 0..scaled(1200) {
        let (name, base) = &seeds[i % seeds.len()];
        let hot = [
            (0, 512.min(base.len())),
            (base.len().saturating_sub(2048), base.len()),
        ];
        let r = Recipe {
            seed: name.clone(),
            edits: mutate(&mut rng, base, &hot),
        };
        run(&mut t, &r);
    }
    for (_, base) in &seeds {
        tflite_target(base).unwrap();
    }
    t.finish("tflite", started);
}

#[test]
pub(crate) fn fuzz_job_spec_parser_in_process() {
    let started = Instant::now();
    let seeds = spec_seeds();
    let mut t = Tally::default();
    let run = |t: &mut Tally, text: &str| {
        if !in_process(t, "spec", || spec_target(text)) {
            keep("spec", "txt", text.as_bytes());
        }
    };
    for b in kept("spec", "txt") {
        t.replayed += 1;
        run(&mut t, &String::from_utf8_lossy(&b));
    }
    let mut rng = seed(3);
    for i in 0..scaled(3000) {
        let mut text = seeds[i % seeds.len()].clone();
        for _ in 0..rng.range(1, 3) {
            text = mutate_spec(&mut rng, &text);
        }
        run(&mut t, &text);
    }
    for s in &seeds {
        spec_target(s).unwrap();
    }
    t.finish("spec", started);
}

#[test]
pub(crate) fn fuzz_plan_json_in_process() {
    let started = Instant::now();
    let bytes = std::fs::read(common::tfmicro_model("magic_wand")).unwrap();
    let model = tflite::import_bytes("magic_wand", &bytes).unwrap();
    let plan = planner::run(
        &model,
        PlannerKind::TflmGreedy,
        &Overlaps::none(&model),
        &PlanOptions::default(),
    )
    .unwrap();
    let names = model.tensor_names();
    let mut reference = vec![None; model.tensors.len()];
    for p in &plan.tensors {
        reference[p.tensor] = Some(p.offset);
    }
    let seed_plan = serde_json::json!({
        "tensors": plan.tensors.iter().map(|p| serde_json::json!({
            "name": names[p.tensor], "offset": p.offset})).collect::<Vec<_>>(),
        "arena_bytes": plan.peak_bytes,
    })
    .to_string();
    plan_target(&bytes, &model, &reference, &seed_plan).unwrap();
    let mut t = Tally::default();
    let run = |t: &mut Tally, text: &str| {
        if !in_process(t, "plan", || plan_target(&bytes, &model, &reference, text)) {
            keep("plan", "json", text.as_bytes());
        }
    };
    for b in kept("plan", "json") {
        t.replayed += 1;
        run(&mut t, &String::from_utf8_lossy(&b));
    }
    let mut rng = seed(4);
    for _ in 0..scaled(800) {
        let text = mutate_json(&mut rng, &seed_plan);
        run(&mut t, &text);
    }
    t.finish("plan", started);
}
