//! Graph-level cold ranges: TinySeg's Algorithm 2 over an execution order.
//!
//! Positions are indices into the execution order (not operator indices), so
//! the same model in another order gets the cold ranges of that order. A
//! tensor is accessed by the operator that writes it and by every operator
//! that reads it; its longest cold range runs from one access to the next
//! with the largest distance between them (the first such gap on ties, as
//! Algorithm 2's strict comparison keeps).

use serde::Serialize;

use crate::Model;

/// One arena tensor's lifetime and longest cold range, in positions of the
/// execution order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GraphColdRange {
    /// Tensor index in the model.
    pub tensor: usize,
    /// Bytes of the tensor.
    pub bytes: u64,
    /// Position of the operator that writes it (0 for a graph input, which
    /// exists before the first operator).
    pub defined: usize,
    /// Position of the last operator that accesses it.
    pub last: usize,
    /// Position of the access that opens the longest cold range.
    pub start: usize,
    /// Position of the access that closes it (`start` when the tensor is
    /// never idle between two accesses).
    pub end: usize,
}

impl GraphColdRange {
    /// Algorithm 2's length of the cold range: `end − start`.
    pub fn span(&self) -> usize {
        self.end - self.start
    }

    /// Operators that run while the tensor waits: those strictly between
    /// `start` and `end`. A spill after `start` and a fetch before `end`
    /// free its bytes for exactly these operators.
    pub fn idle_ops(&self) -> usize {
        self.span().saturating_sub(1)
    }

    /// Bytes × idle operators: how much arena time the tensor holds idle.
    pub fn idle_cost(&self) -> u64 {
        self.bytes * self.idle_ops() as u64
    }
}

/// TinySeg's Algorithm 2: the longest cold range of every arena tensor that
/// `order` accesses, in tensor-index order. `order` lists operator indices
/// in execution order (e.g. `0..model.ops.len()`).
pub fn graph_cold_ranges(model: &Model, order: &[usize]) -> Vec<GraphColdRange> {
    let mut ranges: Vec<Option<GraphColdRange>> = vec![None; model.tensors.len()];
    let open = |tensor: usize, at: usize| GraphColdRange {
        tensor,
        bytes: model.tensors[tensor].bytes,
        defined: at,
        last: at,
        start: at,
        end: at,
    };
    for &t in &model.inputs {
        ranges[t] = Some(open(t, 0));
    }
    for (position, &op) in order.iter().enumerate() {
        let op = &model.ops[op];
        for &t in &op.outputs {
            ranges[t] = Some(open(t, position));
        }
        for &t in &op.inputs {
            if let Some(range) = ranges[t].as_mut() {
                if range.span() < position - range.last {
                    range.start = range.last;
                    range.end = position;
                }
                range.last = position;
            }
        }
    }
    ranges
        .into_iter()
        .flatten()
        .filter(|r| model.tensors[r.tensor].needs_arena())
        .collect()
}

/// Every position of `order` at which each tensor is accessed (written or
/// read), sorted, per tensor index; a graph input counts as written at 0.
/// The access list Algorithm 2 walks, built directly: a cold range is the
/// widest gap between two neighbours of it.
pub fn access_positions(model: &Model, order: &[usize]) -> Vec<Vec<usize>> {
    let mut at: Vec<Vec<usize>> = vec![Vec::new(); model.tensors.len()];
    for &t in &model.inputs {
        at[t].push(0);
    }
    for (position, &op) in order.iter().enumerate() {
        let op = &model.ops[op];
        for &t in op.outputs.iter().chain(&op.inputs) {
            if at[t].last() != Some(&position) {
                at[t].push(position);
            }
        }
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::order::{self, OrderKind};
    use crate::zoo::{self, GraphBuilder};
    use crate::{Activation, Dtype, OpKind, OpOptions};

    /// Every position at which `order` accesses tensor `t`, sorted.
    fn accesses(model: &Model, order: &[usize], t: usize) -> Vec<usize> {
        access_positions(model, order)[t].clone()
    }

    /// The widest gap between consecutive accesses, first on ties: the
    /// definition, computed from the access list instead of incrementally.
    fn widest_gap(at: &[usize]) -> (usize, usize) {
        let mut best = (at[0], at[0]);
        for w in at.windows(2) {
            if w[1] - w[0] > best.1 - best.0 {
                best = (w[0], w[1]);
            }
        }
        best
    }

    fn assert_matches_definition(model: &Model, order: &[usize]) {
        let ranges = graph_cold_ranges(model, order);
        assert!(!ranges.is_empty(), "{}: no ranges", model.name);
        for r in &ranges {
            let at = accesses(model, order, r.tensor);
            assert_eq!(
                (r.start, r.end),
                widest_gap(&at),
                "{} tensor {}",
                model.name,
                r.tensor
            );
            assert_eq!(r.defined, at[0], "{} tensor {}", model.name, r.tensor);
            assert_eq!(
                r.last,
                *at.last().unwrap(),
                "{} tensor {}",
                model.name,
                r.tensor
            );
        }
        let arena = model.tensors.iter().filter(|t| t.needs_arena()).count();
        assert_eq!(
            ranges.len(),
            arena,
            "{}: one range per arena tensor",
            model.name
        );
    }

    #[test]
    fn algorithm_2_finds_the_widest_gap_between_accesses() {
        for name in ["mobilenet_v2_0.35_96_int8", "liberis_fig1", "sakr_cifar10"] {
            let model = zoo::build(name).unwrap();
            let order: Vec<usize> = (0..model.ops.len()).collect();
            assert_matches_definition(&model, &order);
            let lazy = order::order(&model, OrderKind::Lazy);
            assert_matches_definition(&model, &lazy);
        }
    }

    /// A long skip connection: the first activation is read right away and
    /// again four operators later, so it idles for the three between.
    #[test]
    fn a_skip_connection_is_cold_between_its_two_readers() {
        let mut g = GraphBuilder::new("skip", Dtype::Int8);
        let x = g.input("input", &[1, 8, 8, 4]);
        let a = g.conv2d("a", x, 4, 3, 1, Activation::Relu);
        let mut y = g.conv2d("b", a, 4, 3, 1, Activation::Relu);
        for name in ["c", "d", "e"] {
            y = g.conv2d(name, y, 4, 3, 1, Activation::Relu);
        }
        let axis = OpOptions {
            axis: Some(3),
            ..OpOptions::default()
        };
        let cat = g.op(
            OpKind::Concatenation,
            vec![a, y],
            "cat",
            &[1, 8, 8, 8],
            axis,
        );
        let model = g.finish(&[cat]);
        let order: Vec<usize> = (0..model.ops.len()).collect();
        let skip = graph_cold_ranges(&model, &order)
            .into_iter()
            .find(|r| r.tensor == a)
            .unwrap();
        assert_eq!(
            (skip.defined, skip.start, skip.end, skip.last),
            (0, 1, 5, 5)
        );
        assert_eq!(skip.idle_ops(), 3);
        assert_eq!(skip.idle_cost(), 3 * 8 * 8 * 4);
    }
}
