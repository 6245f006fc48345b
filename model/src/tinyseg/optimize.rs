//! TinySeg's optimisation loop (Algorithms 1 and 3): plan, pick a victim
//! among the tensors live at the peak — the one with the longest cold range
//! — spill it (partially when it is larger than the saving still needed),
//! fuse its fetch into the following operator when that lowers the peak, and
//! plan again; until the target peak is reached or no step helps.
//!
//! The base planner first plans the untransformed model as usual (so
//! `dmo-heap` picks its best serialisation); that order is then kept, and
//! every later plan uses the model's order only
//! ([`PlanOptions::model_order_only`]), because any other order would move
//! the spills and fetches away from the cold ranges they were inserted for.
//! Where the paper stops as soon as its one victim does not lower the peak,
//! memtrace tries the next candidates (by cold-range length) first.

use serde::Serialize;

use super::transform::{
    fuse_next, narrow_scratch, spill, tail_rows, Fusion, Graph, NarrowScratch, SpillEdit,
};
use crate::cold::{graph_cold_ranges, GraphColdRange};
use crate::planner::{self, Overlaps, Plan, PlanError, PlanOptions, PlannerKind};
use crate::Model;

/// How to run TinySeg.
#[derive(Clone, Debug)]
pub struct TinysegOptions {
    /// The planner that places the tensors after every step.
    pub base: PlannerKind,
    /// Stop once the peak is at most this (the paper's `M*`); also sizes
    /// partial spills. `None`: as low as the steps go.
    pub target_bytes: Option<u64>,
    /// Options of the base planner.
    pub plan: PlanOptions,
    /// At most this many accepted spills.
    pub max_spills: usize,
    /// Victims tried per round before giving up.
    pub max_victims: usize,
    /// First narrow int32 accumulator scratch tensors to int16 (the paper's
    /// first step), when that lowers the peak.
    pub narrow_scratch: NarrowScratch,
}

impl Default for TinysegOptions {
    fn default() -> Self {
        TinysegOptions {
            base: PlannerKind::TflmGreedy,
            target_bytes: None,
            plan: PlanOptions::default(),
            max_spills: 16,
            max_victims: 8,
            narrow_scratch: NarrowScratch::Exact,
        }
    }
}

/// What one step of the transformation did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum StepAction {
    /// The base planner's plan of the untransformed model (`original`).
    #[serde(rename = "original")]
    Original,
    /// TFLM's int8 TRANSPOSE_CONV scratch narrowed to int16 (`scratch int16`).
    #[serde(rename = "scratch int16")]
    ScratchInt16,
    /// A whole tensor sent to storage (`spill`).
    #[serde(rename = "spill")]
    Spill,
    /// The tail of a tensor sent to storage (`partial spill`).
    #[serde(rename = "partial spill")]
    PartialSpill,
    /// A fetch fused with its concatenation (`fetch+concat`).
    #[serde(rename = "fetch+concat")]
    FetchConcat,
    /// A fetch fused with its convolution (`fetch+conv2d`).
    #[serde(rename = "fetch+conv2d")]
    FetchConv2d,
}

impl StepAction {
    /// The name in reports (the serde name).
    pub fn name(self) -> &'static str {
        match self {
            StepAction::Original => "original",
            StepAction::ScratchInt16 => "scratch int16",
            StepAction::Spill => "spill",
            StepAction::PartialSpill => "partial spill",
            StepAction::FetchConcat => "fetch+concat",
            StepAction::FetchConv2d => "fetch+conv2d",
        }
    }
}

impl std::fmt::Display for StepAction {
    /// The [`StepAction::name`], padded as the format asks (tables align it).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}

impl From<Fusion> for StepAction {
    fn from(f: Fusion) -> Self {
        match f {
            Fusion::Concat => StepAction::FetchConcat,
            Fusion::Conv2d => StepAction::FetchConv2d,
        }
    }
}

/// One step of the transformation and the plan after it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Step {
    /// What the step did.
    pub action: StepAction,
    /// What changed in the graph.
    pub change: String,
    /// Arena peak of the base planner's plan after the step.
    pub peak_bytes: u64,
    /// Lower bound of the plan's order after the step (max live bytes).
    pub lower_bound_bytes: u64,
    /// Operators after the step.
    pub ops: usize,
    /// The spilled tensor (spill steps).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tensor: Option<String>,
    /// The storage tensor the step writes (spill steps).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stored: Option<String>,
    /// The victim's cold range, operator positions before the step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cold_range: Option<(usize, usize)>,
    /// Bytes the step sends to storage (and fetches back).
    pub spilled_bytes: u64,
    /// The same bytes in TinySeg's compressed form, measured on the data of
    /// a real run (filled in by `memtrace verify`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compressed_bytes: Option<u64>,
}

/// The transformed model, its plan and how it got there.
#[derive(Clone, Debug)]
pub struct Optimized {
    /// The base planner.
    pub base: PlannerKind,
    /// The transformed model (operators in execution order) and the origin
    /// of each operator.
    pub graph: Graph,
    /// The base planner's plan of the transformed model.
    pub plan: Plan,
    /// O_s of the transformed model's operators (carried over by origin).
    pub overlaps: Overlaps,
    /// Every accepted step, the untransformed model first.
    pub steps: Vec<Step>,
    /// The graph and plan after each step (as `steps`), for checks.
    pub history: Vec<(Graph, Plan)>,
}

impl Optimized {
    /// Total bytes sent to storage (each also fetched back once).
    pub fn spilled_bytes(&self) -> u64 {
        self.steps.iter().map(|s| s.spilled_bytes).sum()
    }
}

/// O_s of `graph`'s operators: each original operator keeps its O_s (its
/// access pattern is the same whichever tensor it now reads), the inserted
/// and fused ones get none.
pub fn carried_overlaps(graph: &Graph, overlaps: &Overlaps) -> Overlaps {
    Overlaps {
        method: overlaps.method.clone(),
        per_op: graph
            .origin
            .iter()
            .zip(&graph.model.ops)
            .map(|(o, op)| match o {
                Some(o) if !op.kind.is_tinyseg() => overlaps.get(*o),
                _ => 0,
            })
            .collect(),
    }
}

struct Planned {
    graph: Graph,
    plan: Plan,
}

impl Planned {
    fn peak(&self) -> u64 {
        self.plan.peak_bytes.unwrap_or(u64::MAX)
    }
}

fn plan_graph(
    graph: Graph,
    overlaps: &Overlaps,
    opts: &TinysegOptions,
) -> Result<Planned, PlanError> {
    let fixed = PlanOptions {
        model_order_only: true,
        ..opts.plan.clone()
    };
    let carried = carried_overlaps(&graph, overlaps);
    let plan = planner::run(&graph.model, opts.base, &carried, &fixed)?;
    if plan.peak_bytes.is_none() {
        return Err(PlanError::Model(format!(
            "base planner {} does not apply: {}",
            opts.base,
            plan.note.unwrap_or_default()
        )));
    }
    Ok(Planned { graph, plan })
}

/// Steps (positions of the plan's order) at which the arena is used up to
/// the peak: those where a live tensor ends at the peak.
pub fn peak_steps(plan: &Plan) -> Vec<usize> {
    let Some(peak) = plan.peak_bytes else {
        return Vec::new();
    };
    let mut steps: Vec<usize> = plan
        .tensors
        .iter()
        .filter(|t| t.offset + t.size == peak)
        .flat_map(|t| t.first_op..=t.last_op)
        .collect();
    steps.sort_unstable();
    steps.dedup();
    steps
}

/// Algorithm 3's candidates: tensors whose cold range spans a peak step
/// strictly inside it (so spilling frees their bytes there), longest cold
/// range first, then larger first.
pub fn victims(model: &Model, plan: &Plan) -> Vec<GraphColdRange> {
    let peaks = peak_steps(plan);
    let mut out: Vec<GraphColdRange> = graph_cold_ranges(model, &plan.order)
        .into_iter()
        .filter(|r| r.idle_ops() > 0 && !model.outputs.contains(&r.tensor))
        .filter(|r| peaks.iter().any(|&s| r.start < s && s < r.end))
        .collect();
    out.sort_by_key(|r| {
        (
            std::cmp::Reverse(r.span()),
            std::cmp::Reverse(r.bytes),
            r.tensor,
        )
    });
    out
}

fn op_name(model: &Model, op: usize) -> String {
    model.ops[op]
        .outputs
        .first()
        .map(|&t| format!("`{}`", model.tensors[t].name))
        .unwrap_or_else(|| format!("op {op}"))
}

fn step(planned: &Planned, action: StepAction, change: String) -> Step {
    Step {
        action,
        change,
        peak_bytes: planned.peak(),
        lower_bound_bytes: planned.plan.lower_bound_bytes,
        ops: planned.graph.model.ops.len(),
        tensor: None,
        stored: None,
        cold_range: None,
        spilled_bytes: 0,
        compressed_bytes: None,
    }
}

fn spill_step(before: &Model, after: &Planned, r: &GraphColdRange, edit: &SpillEdit) -> Step {
    let m = &after.graph.model;
    let name = &before.tensors[r.tensor].name;
    let (action, what) = if edit.kept_bytes > 0 {
        (
            StepAction::PartialSpill,
            format!(
                "SPILL_KEEP keeps {} B, SPILL sends the last {} B",
                edit.kept_bytes, edit.spilled_bytes
            ),
        )
    } else {
        (
            StepAction::Spill,
            format!("SPILL sends {} B", edit.spilled_bytes),
        )
    };
    let fetch = m.ops[edit.fetch_op].kind.tflite_name();
    Step {
        tensor: Some(name.clone()),
        stored: Some(m.tensors[edit.stored].name.clone()),
        cold_range: Some((r.start, r.end)),
        spilled_bytes: edit.spilled_bytes,
        ..step(
            after,
            action,
            format!(
                "`{name}` idle for {} ops: {what} after {}, {fetch} before {}",
                r.idle_ops(),
                op_name(before, r.start),
                op_name(before, r.end)
            ),
        )
    }
}

/// Spills `r` and fuses its fetch as far as it goes; every stage planned.
fn try_victim(
    cur: &Planned,
    r: &GraphColdRange,
    overlaps: &Overlaps,
    opts: &TinysegOptions,
) -> Result<Vec<(Planned, Step)>, PlanError> {
    let model = &cur.graph.model;
    let t = &model.tensors[r.tensor];
    let needed = opts.target_bytes.map(|m| cur.peak().saturating_sub(m));
    let tail = needed
        .filter(|&n| n < t.bytes)
        .and_then(|n| tail_rows(t, n));
    let Ok((g, edit)) = spill(&cur.graph, r, tail) else {
        return Ok(Vec::new());
    };
    let spilled = plan_graph(g, overlaps, opts)?;
    let s = spill_step(model, &spilled, r, &edit);
    let mut stages = vec![(spilled, s)];
    let mut at = edit.fetch_op;
    while let Some((g, fused_at, fusion)) = fuse_next(&stages[stages.len() - 1].0.graph, at) {
        let prev = &stages[stages.len() - 1].0.graph.model;
        let change = format!(
            "{} and {} become {}",
            prev.ops[at].kind.tflite_name(),
            prev.ops[at + 1].kind.tflite_name(),
            g.model.ops[fused_at].kind.tflite_name()
        );
        let planned = plan_graph(g, overlaps, opts)?;
        let st = step(&planned, fusion.into(), change);
        stages.push((planned, st));
        at = fused_at;
    }
    Ok(stages)
}

/// Runs TinySeg on `model` (O_s per operator in `overlaps`) with `opts`.
pub fn optimize(
    model: &Model,
    overlaps: &Overlaps,
    opts: &TinysegOptions,
) -> Result<Optimized, PlanError> {
    if opts.base == PlannerKind::Tinyseg {
        return Err(PlanError::Model(
            "tinyseg needs another planner as its base".into(),
        ));
    }
    let first = planner::run(model, opts.base, overlaps, &opts.plan)?;
    if first.peak_bytes.is_none() {
        return Err(PlanError::Model(format!(
            "base planner {} does not apply: {}",
            opts.base,
            first.note.unwrap_or_default()
        )));
    }
    let graph = Graph::in_order(model, &first.order);
    let base_overlaps = overlaps.clone();
    let mut cur = plan_graph(graph, &base_overlaps, opts)?;
    let mut steps = vec![step(
        &cur,
        StepAction::Original,
        format!("{} in {} order", opts.base, first.order_name),
    )];
    let mut history = vec![(cur.graph.clone(), cur.plan.clone())];
    if let Some((g, changed)) = narrow_scratch(&cur.graph, opts.narrow_scratch) {
        let narrowed = plan_graph(g, &base_overlaps, opts)?;
        // Half the scratch never raises the peak a planner can reach.
        if narrowed.peak() <= cur.peak() {
            let names: Vec<String> = changed
                .iter()
                .map(|&i| op_name(&narrowed.graph.model, i))
                .collect();
            let change = format!("int32 → int16 accumulator scratch of {}", names.join(", "));
            steps.push(step(&narrowed, StepAction::ScratchInt16, change));
            history.push((narrowed.graph.clone(), narrowed.plan.clone()));
            cur = narrowed;
        }
    }
    let mut spills = 0;
    while spills < opts.max_spills && opts.target_bytes.is_none_or(|m| cur.peak() > m) {
        let mut accepted = None;
        for r in victims(&cur.graph.model, &cur.plan)
            .iter()
            .take(opts.max_victims)
        {
            let stages = try_victim(&cur, r, &base_overlaps, opts)?;
            // The prefix reaching the lowest peak: fusions only when they
            // lower it.
            // On equal peaks, a lower lower bound (room for a better
            // placement) wins, then fewer operators.
            let best = (0..stages.len()).min_by_key(|&k| {
                let p = &stages[k].0;
                (p.peak(), p.plan.lower_bound_bytes, k)
            });
            if let Some(k) = best.filter(|&k| stages[k].0.peak() < cur.peak()) {
                let mut stages = stages;
                stages.truncate(k + 1);
                accepted = Some(stages);
                break;
            }
        }
        let Some(stages) = accepted else { break };
        for (planned, s) in stages {
            steps.push(s);
            history.push((planned.graph.clone(), planned.plan.clone()));
            cur = planned;
        }
        spills += 1;
    }
    let overlaps = carried_overlaps(&cur.graph, &base_overlaps);
    Ok(Optimized {
        base: opts.base,
        graph: cur.graph,
        plan: cur.plan,
        overlaps,
        steps,
        history,
    })
}
