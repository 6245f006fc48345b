//! Operator serialisation: the model's order, eager and lazy topological
//! orders, and the operator-reordering DP of Liberis & Lane (minimum peak of
//! live bytes over all execution orders).
//!
//! An order is a permutation of operator indices; position `s` in it is the
//! execution *step* of that operator.

use std::collections::{HashMap, VecDeque};

use super::Model;

/// How to serialise the operator graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OrderKind {
    /// The order stored in the model.
    Model,
    /// As soon as possible: an operator runs once its inputs exist, in the
    /// order they became ready (breadth-first Kahn).
    Eager,
    /// As late as possible: an operator runs just before the first operator
    /// that needs it (Kahn's algorithm on the reversed graph, reversed).
    Lazy,
}

/// The execution order a plan uses: named orders that coincide (written
/// `eager=lazy`), or the order of the reordering DP (`reordered`). Reports
/// write it by that name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanOrder {
    /// One sequence that each of these orders gives, in the order tried.
    Named(Vec<OrderKind>),
    /// The reordering DP's order.
    Reordered,
}

impl PlanOrder {
    /// The model's own order.
    pub fn model() -> Self {
        PlanOrder::Named(vec![OrderKind::Model])
    }

    /// `model`, `eager=lazy`, `reordered`, ...
    pub fn name(&self) -> String {
        match self {
            PlanOrder::Named(kinds) => kinds.iter().map(|k| k.name()).collect::<Vec<_>>().join("="),
            PlanOrder::Reordered => "reordered".into(),
        }
    }

    /// The order [`PlanOrder::name`] names.
    fn parse(name: &str) -> Option<Self> {
        if name == "reordered" {
            return Some(PlanOrder::Reordered);
        }
        let kinds = name
            .split('=')
            .map(|n| OrderKind::ALL.into_iter().find(|k| k.name() == n))
            .collect::<Option<Vec<_>>>()?;
        Some(PlanOrder::Named(kinds))
    }
}

impl std::fmt::Display for PlanOrder {
    /// The [`PlanOrder::name`], padded as the format asks.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(&self.name())
    }
}

impl serde::Serialize for PlanOrder {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.name())
    }
}

impl<'de> serde::Deserialize<'de> for PlanOrder {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        PlanOrder::parse(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown plan order `{name}`")))
    }
}

impl OrderKind {
    /// Every named order.
    pub const ALL: [OrderKind; 3] = [OrderKind::Model, OrderKind::Eager, OrderKind::Lazy];

    /// Name used on the command line and in reports (`model`, `eager`, `lazy`).
    pub fn name(self) -> &'static str {
        match self {
            OrderKind::Model => "model",
            OrderKind::Eager => "eager",
            OrderKind::Lazy => "lazy",
        }
    }
}

/// The operator order of `kind`.
pub fn order(model: &Model, kind: OrderKind) -> Vec<usize> {
    match kind {
        OrderKind::Model => (0..model.ops.len()).collect(),
        OrderKind::Eager => eager(model),
        OrderKind::Lazy => lazy(model),
    }
}

fn eager(model: &Model) -> Vec<usize> {
    let preds = model.predecessors();
    let succs = model.successors();
    let mut missing: Vec<usize> = preds.iter().map(Vec::len).collect();
    let mut queue: VecDeque<usize> = (0..model.ops.len()).filter(|&i| missing[i] == 0).collect();
    let mut out = Vec::with_capacity(model.ops.len());
    while let Some(op) = queue.pop_front() {
        out.push(op);
        for &s in &succs[op] {
            missing[s] -= 1;
            if missing[s] == 0 {
                queue.push_back(s);
            }
        }
    }
    out
}

fn lazy(model: &Model) -> Vec<usize> {
    let preds = model.predecessors();
    let succs = model.successors();
    let mut missing: Vec<usize> = succs.iter().map(Vec::len).collect();
    let mut queue: VecDeque<usize> = (0..model.ops.len())
        .rev()
        .filter(|&i| missing[i] == 0)
        .collect();
    let mut out = Vec::with_capacity(model.ops.len());
    while let Some(op) = queue.pop_front() {
        out.push(op);
        for &p in preds[op].iter().rev() {
            missing[p] -= 1;
            if missing[p] == 0 {
                queue.push_back(p);
            }
        }
    }
    out.reverse();
    out
}

/// Whether `order` runs every operator once, after all its predecessors.
pub fn is_valid_order(model: &Model, order: &[usize]) -> bool {
    if order.len() != model.ops.len() {
        return false;
    }
    let mut step = vec![usize::MAX; model.ops.len()];
    for (s, &op) in order.iter().enumerate() {
        if op >= step.len() || step[op] != usize::MAX {
            return false;
        }
        step[op] = s;
    }
    model
        .predecessors()
        .iter()
        .enumerate()
        .all(|(op, preds)| preds.iter().all(|&p| step[p] < step[op]))
}

/// Per-operator memory facts used by the working-set computations.
struct WorkingSetModel {
    preds: Vec<Vec<usize>>,
    /// Arena bytes of the outputs each op creates.
    out_bytes: Vec<u64>,
    /// (tensor bytes, consumer ops) of each arena input an op reads, by op.
    inputs: Vec<Vec<usize>>,
    /// Arena tensors: bytes, consumers, whether a graph output.
    tensor_bytes: Vec<u64>,
    tensor_consumers: Vec<Vec<usize>>,
    tensor_pinned: Vec<bool>,
    /// Outputs of each op that outlive it (read later or graph outputs).
    kept_outputs: Vec<Vec<usize>>,
    /// DMO credit ceiling of each op: min(O_s, first output bytes).
    credit: Vec<u64>,
    /// The inputs of each op whose death the credit may come from
    /// ([`super::Op::overlap_inputs`]).
    credit_inputs: Vec<Vec<usize>>,
    initial_live: u64,
}

impl WorkingSetModel {
    fn new(model: &Model, overlap: &dyn Fn(usize) -> u64) -> Self {
        let consumers = model.consumers();
        let n_t = model.tensors.len();
        let arena: Vec<bool> = model.tensors.iter().map(|t| t.needs_arena()).collect();
        let pinned: Vec<bool> = (0..n_t).map(|t| model.outputs.contains(&t)).collect();
        let mut out_bytes = vec![0; model.ops.len()];
        let mut inputs = vec![Vec::new(); model.ops.len()];
        let mut kept_outputs = vec![Vec::new(); model.ops.len()];
        let mut credit = vec![0; model.ops.len()];
        let mut credit_inputs = vec![Vec::new(); model.ops.len()];
        for (i, op) in model.ops.iter().enumerate() {
            credit_inputs[i] = op.overlap_inputs().to_vec();
            for &t in &op.outputs {
                if arena[t] {
                    out_bytes[i] += model.tensors[t].bytes;
                    if pinned[t] || !consumers[t].is_empty() {
                        kept_outputs[i].push(t);
                    }
                }
            }
            let mut ins: Vec<usize> = op.inputs.iter().copied().filter(|&t| arena[t]).collect();
            ins.sort_unstable();
            ins.dedup();
            inputs[i] = ins;
            if let Some(&o) = op.outputs.first() {
                if arena[o] {
                    credit[i] = overlap(i).min(model.tensors[o].bytes);
                }
            }
        }
        let initial_live = model
            .inputs
            .iter()
            .filter(|&&t| arena[t])
            .map(|&t| model.tensors[t].bytes)
            .sum();
        WorkingSetModel {
            preds: model.predecessors(),
            out_bytes,
            inputs,
            tensor_bytes: model.tensors.iter().map(|t| t.bytes).collect(),
            tensor_consumers: consumers,
            tensor_pinned: pinned,
            kept_outputs,
            credit,
            credit_inputs,
            initial_live,
        }
    }

    /// Bytes live while op `v` runs given the live bytes before it and a
    /// predicate telling whether an op has already run; also returns the live
    /// bytes after it.
    fn step(&self, live: u64, v: usize, done: &dyn Fn(usize) -> bool) -> (u64, u64) {
        let mut dying = 0;
        let mut dying_creditable = 0;
        for &t in &self.inputs[v] {
            let dies = !self.tensor_pinned[t]
                && self.tensor_consumers[t].iter().all(|&c| c == v || done(c));
            if dies {
                dying += self.tensor_bytes[t];
                if self.credit_inputs[v].contains(&t) {
                    dying_creditable += self.tensor_bytes[t];
                }
            }
        }
        let credit = self.credit[v].min(dying_creditable);
        let during = live + self.out_bytes[v] - credit;
        let kept: u64 = self.kept_outputs[v]
            .iter()
            .map(|&t| self.tensor_bytes[t])
            .sum();
        (during, live + kept - dying)
    }
}

/// Peak working set (sum of live arena bytes while an operator runs, minus
/// the DMO overlap `overlap(op)` where its input dies there) of `order`.
/// The tests compare orders with it.
#[cfg(test)]
pub(crate) fn working_set_peak(
    model: &Model,
    order: &[usize],
    overlap: &dyn Fn(usize) -> u64,
) -> u64 {
    let ws = WorkingSetModel::new(model, overlap);
    let mut done = vec![false; model.ops.len()];
    let mut live = ws.initial_live;
    let mut peak = live;
    for &v in order {
        let (during, after) = ws.step(live, v, &|c| done[c]);
        peak = peak.max(during);
        done[v] = true;
        live = after;
    }
    peak
}

/// Why the reordering DP gave up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReorderError {
    /// The DP visited more states than its limit allows.
    #[error(
        "operator reordering explored {limit} sets of executed operators without finishing \
         (the DP is exponential in the graph's width); raise the limit or use eager/lazy orders"
    )]
    TooManyStates {
        /// Maximum number of states (sets of executed operators) to visit.
        limit: usize,
    },
}

/// Result of the reordering DP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reordered {
    /// The best execution order: operator indices, one per step.
    pub order: Vec<usize>,
    /// Minimum over all execution orders of the peak working set.
    pub peak_working_set: u64,
    /// Sets of executed operators the DP visited.
    pub states: usize,
}

/// Liberis & Lane's dynamic programme: the execution order with the smallest
/// peak working set. States are sets of executed operators (the live tensors
/// depend only on that set, not on the order that produced it), visited by
/// size; each keeps the best peak reaching it and its predecessor. Exponential
/// in the graph's width, linear for chains: gives up after `max_states`.
pub fn reorder_dp(
    model: &Model,
    overlap: &dyn Fn(usize) -> u64,
    max_states: usize,
) -> Result<Reordered, ReorderError> {
    let n = model.ops.len();
    let ws = WorkingSetModel::new(model, overlap);
    let words = n.div_ceil(64).max(1);
    struct State {
        set: Box<[u64]>,
        live: u64,
        peak: u64,
        parent: usize,
        op: usize,
    }
    let contains = |set: &[u64], i: usize| set[i / 64] >> (i % 64) & 1 == 1;
    let mut states: Vec<State> = vec![State {
        set: vec![0u64; words].into_boxed_slice(),
        live: ws.initial_live,
        peak: ws.initial_live,
        parent: usize::MAX,
        op: usize::MAX,
    }];
    let mut layer: Vec<usize> = vec![0];
    for _ in 0..n {
        let mut index: HashMap<Box<[u64]>, usize> = HashMap::new();
        let mut next_layer = Vec::new();
        for &sid in &layer {
            let set = states[sid].set.clone();
            let (live, base_peak) = (states[sid].live, states[sid].peak);
            for v in 0..n {
                if contains(&set, v) || !ws.preds[v].iter().all(|&p| contains(&set, p)) {
                    continue;
                }
                let (during, after) = ws.step(live, v, &|c| contains(&set, c));
                let peak = base_peak.max(during);
                let mut new_set = set.clone();
                new_set[v / 64] |= 1 << (v % 64);
                match index.get(&new_set) {
                    Some(&existing) => {
                        if peak < states[existing].peak {
                            let s = &mut states[existing];
                            s.peak = peak;
                            s.parent = sid;
                            s.op = v;
                        }
                    }
                    None => {
                        if states.len() >= max_states {
                            return Err(ReorderError::TooManyStates { limit: max_states });
                        }
                        index.insert(new_set.clone(), states.len());
                        next_layer.push(states.len());
                        states.push(State {
                            set: new_set,
                            live: after,
                            peak,
                            parent: sid,
                            op: v,
                        });
                    }
                }
            }
        }
        layer = next_layer;
    }
    // One state remains: every operator executed.
    let last = match layer.first() {
        Some(&s) => s,
        None => 0,
    };
    let mut order = Vec::with_capacity(n);
    let mut s = last;
    while states[s].parent != usize::MAX {
        order.push(states[s].op);
        s = states[s].parent;
    }
    order.reverse();
    Ok(Reordered {
        order,
        peak_working_set: states[last].peak,
        states: states.len(),
    })
}
