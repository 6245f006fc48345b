//! `verify --planner tinyseg` on real TFLM: TinySeg transforms the model
//! with TFLM's own scratch buffers as tensors (what TFLM's reference run
//! requested), the transformed model is written as a `.tflite` whose
//! TinySeg operators are the runner's custom operators
//! (`harness-c/tflm/storage_ops.cc`), and TFLM runs it under the base
//! planner's plan (as `OfflineMemoryAllocation`) with a second shadow map
//! over the runner's storage region.

use std::time::Instant;

use memtrace_model::export::to_tflite_indexed;
use memtrace_model::graph::{read_graph, TfliteGraph};
use memtrace_model::planner::{Overlaps, PlanOptions, TracedOverlaps};
use memtrace_model::source::ModelFile;
use memtrace_model::tinyseg::{optimize, Optimized, TinysegOptions};
use memtrace_model::{Model, OpKind};

use super::VerifyOptions;
use crate::bail;
use crate::support::error::{Context, Result};

/// The transformed model TFLM runs, and the plan under test.
pub(super) struct TinysegPlan {
    /// TinySeg's steps and the base planner's plan of the transformed model.
    pub optimized: Optimized,
    /// Seconds TinySeg took to plan.
    pub seconds: f64,
    /// The transformed `.tflite` (without a plan).
    pub bytes: Vec<u8>,
    /// Its graph.
    pub graph: TfliteGraph,
    /// The plan's offset of every tensor of the file (-1: TFLM places it).
    pub offsets: Vec<i64>,
    /// Per tensor of the file, its index in the untransformed model (the
    /// reference run's), if it is one of its tensors.
    pub original: Vec<Option<usize>>,
    /// The plan's arena.
    pub arena: u64,
    /// What TinySeg did not do on TFLM, and why.
    pub warnings: Vec<String>,
}

impl TinysegPlan {
    /// Refuses a plan of the transformed model larger than the runner's
    /// arena of `limit` bytes.
    pub(super) fn check_fits(&self, under_test: &super::UnderTest, limit: u64) -> Result<()> {
        if under_test.arena > limit {
            bail!(
                "{}: the plan's arena of {} bytes is larger than the runner's arena of {limit} bytes",
                under_test.label(),
                under_test.arena,
            );
        }
        Ok(())
    }
}

/// TinySeg's transformation of `file` (what the reference run ran), planned
/// with TFLM's `scratch` bytes per operator and the O_s `verify` plans with
/// (`traced` unless `--overlap` says otherwise).
pub(super) fn plan(
    req: &VerifyOptions,
    file: &ModelFile,
    scratch: &[u64],
    traced: &TracedOverlaps,
) -> Result<TinysegPlan> {
    // The transformed model is written with the weights.
    let model = file
        .imported()
        .with_context(|| format!("reading {}", req.model))?
        .into_owned();
    if let Some((i, _)) = model
        .ops
        .iter()
        .enumerate()
        .find(|(_, o)| o.kind == OpKind::Other)
    {
        bail!(
            "--planner tinyseg: operator {i} of {} is one memtrace does not model; TinySeg \
             rewrites the graph and needs every operator's shape rules",
            req.model
        );
    }
    // The transformed model keeps the model's tensors first, in order.
    let graph_tensors = model.tensors.len();
    let model = model.with_scratch(scratch);
    let overlaps = match req.overlap.method() {
        None => Overlaps::compute(&model, traced),
        Some(method) => Overlaps::compute(&model, &method),
    };
    let started = Instant::now();
    let (optimized, warnings) = transform(req, &model, &overlaps)?;
    let seconds = started.elapsed().as_secs_f64();
    let plan = &optimized.plan;
    let transformed = &optimized.graph.model;
    if plan.order.iter().enumerate().any(|(i, &op)| i != op) {
        bail!("TinySeg's plan reorders operators; TFLM runs them in the model's order");
    }
    let (file, index) = to_tflite_indexed(transformed)?;
    let graph = read_graph(&file).with_context(|| "reading the transformed model".to_string())?;
    let mut offsets = vec![-1i64; graph.tensors.len()];
    let mut original = vec![None; graph.tensors.len()];
    for (t, o) in plan.offline_offsets(transformed).into_iter().enumerate() {
        if let Some(i) = index[t] {
            offsets[i] = o;
            original[i] = (t < graph_tensors).then_some(t);
        }
    }
    Ok(TinysegPlan {
        arena: plan.arena_bytes(transformed),
        optimized,
        seconds,
        bytes: file,
        graph,
        offsets,
        original,
        warnings,
    })
}

/// TinySeg in the model's order, without int16 accumulators
/// ([`crate::support::spill::for_tflm`]).
fn transform(
    req: &VerifyOptions,
    model: &Model,
    overlaps: &Overlaps,
) -> Result<(Optimized, Vec<String>)> {
    let plan = PlanOptions {
        model_order_only: true,
        ..PlanOptions::default()
    };
    let (spill, warning) =
        crate::support::spill::for_tflm(model, overlaps, &req.spill, &plan, None)?;
    let optimized = optimize(
        model,
        overlaps,
        &TinysegOptions {
            base: spill.base,
            target_bytes: spill.target_bytes,
            narrow_scratch: spill.narrow_scratch,
            plan,
            ..TinysegOptions::default()
        },
    )?;
    Ok((optimized, warning.into_iter().collect()))
}

/// The reference run's layers that read their own output, named as the
/// transformed model's layers of the same operators (`INDEX:OP:OUTPUT`,
/// the index moved to the operator's place after TinySeg's insertions).
pub(super) fn readers_after(readers: &[String], optimized: &Optimized) -> Vec<String> {
    readers
        .iter()
        .filter_map(|name| {
            let (index, rest) = name.split_once(':')?;
            let index: usize = index.parse().ok()?;
            let now = optimized
                .graph
                .origin
                .iter()
                .position(|&o| o == Some(index))?;
            Some(format!("{now}:{rest}"))
        })
        .collect()
}
