//! Unit tests of TinySeg's graph edits on small hand-built graphs.

use super::transform::{fuse_next, spill, split_axis, tail_rows, Fusion, Graph};
use super::*;
use crate::cold::graph_cold_ranges;
use crate::planner::Overlaps;
use crate::zoo::GraphBuilder;
use crate::{Activation, Dtype, Model, OpKind};

/// A long skip connection around wider layers: `a` (32×32×8) waits while
/// three 32×32×16 convolutions run, then an ADD with the narrowed result.
fn skip_model() -> Model {
    let mut g = GraphBuilder::new("skip_add", Dtype::Int8);
    let x = g.input("input", &[1, 32, 32, 3]);
    let a = g.conv2d("a", x, 8, 3, 1, Activation::Relu);
    let mut y = g.conv2d("b", a, 16, 3, 1, Activation::Relu);
    y = g.conv2d("c", y, 16, 3, 1, Activation::Relu);
    y = g.conv2d("d", y, 16, 3, 1, Activation::Relu);
    y = g.conv2d("e", y, 8, 1, 1, Activation::None);
    let s = g.add("sum", a, y);
    let out = g.conv2d("head", s, 1, 1, 1, Activation::None);
    g.finish(&[out])
}

/// Index of the tensor called `name`.
fn tensor(m: &Model, name: &str) -> usize {
    m.tensors.iter().position(|t| t.name == name).unwrap()
}

fn graph(m: &Model) -> Graph {
    Graph::in_order(m, &(0..m.ops.len()).collect::<Vec<_>>())
}

#[test]
fn a_spill_goes_after_the_cold_range_start_and_the_fetch_before_its_end() {
    let m = skip_model();
    let a = tensor(&m, "a");
    let r = graph_cold_ranges(&m, &(0..m.ops.len()).collect::<Vec<_>>())
        .into_iter()
        .find(|r| r.tensor == a)
        .unwrap();
    assert_eq!((r.start, r.end), (1, 5));
    let (g, edit) = spill(&graph(&m), &r, None).unwrap();
    let kinds: Vec<OpKind> = g.model.ops.iter().map(|o| o.kind).collect();
    assert_eq!(kinds[2], OpKind::Spill);
    assert_eq!(kinds[6], OpKind::Fetch);
    assert_eq!(edit.fetch_op, 6);
    assert_eq!(g.origin[2], None);
    assert_eq!(g.origin[7], Some(5));
    // The ADD reads the fetched copy; `b` still reads `a`.
    assert!(g.model.ops[7].inputs.contains(&edit.fetched));
    assert!(g.model.ops[1].inputs.contains(&a));
    assert!(g.model.tensors[edit.stored].in_storage);
    assert!(!g.model.arena_tensors().contains(&edit.stored));
}

#[test]
fn a_partial_spill_sends_whole_rows_and_keeps_the_rest() {
    let m = skip_model();
    let a = tensor(&m, "a");
    let t = &m.tensors[a];
    assert_eq!(split_axis(t), Some((1, 32)));
    // A row is 32×8 bytes: 1000 needed bytes are 4 rows.
    assert_eq!(tail_rows(t, 1000), Some(4));
    assert_eq!(tail_rows(t, 8192), None);
    let order: Vec<usize> = (0..m.ops.len()).collect();
    let r = graph_cold_ranges(&m, &order)
        .into_iter()
        .find(|r| r.tensor == a)
        .unwrap();
    let (g, edit) = spill(&graph(&m), &r, Some(4)).unwrap();
    assert_eq!((edit.spilled_bytes, edit.kept_bytes), (4 * 256, 28 * 256));
    assert_eq!(g.model.ops[2].kind, OpKind::Spill);
    assert_eq!(g.model.ops[3].kind, OpKind::SpillKeep);
    assert_eq!(g.model.ops[edit.fetch_op].kind, OpKind::FetchConcat);
    assert_eq!(g.model.ops[edit.fetch_op].options.axis, Some(1));
}

#[test]
fn a_fetch_fuses_only_into_its_sole_next_reader() {
    let m = skip_model();
    let order: Vec<usize> = (0..m.ops.len()).collect();
    let a = tensor(&m, "a");
    let r = graph_cold_ranges(&m, &order)
        .into_iter()
        .find(|r| r.tensor == a)
        .unwrap();
    let (g, edit) = spill(&graph(&m), &r, None).unwrap();
    // The fetched `a` feeds an ADD: no fused form.
    assert!(fuse_next(&g, edit.fetch_op).is_none());
    // The same skip into a convolution instead fuses.
    let mut g2 = GraphBuilder::new("skip_conv", Dtype::Int8);
    let x = g2.input("input", &[1, 8, 8, 3]);
    let a = g2.conv2d("a", x, 4, 3, 1, Activation::Relu);
    let b = g2.conv2d("b", a, 4, 3, 1, Activation::Relu);
    let c = g2.conv2d("c", b, 4, 3, 1, Activation::Relu);
    let z = g2.conv2d("z", a, 4, 1, 1, Activation::None);
    let s = g2.add("s", c, z);
    let m2 = g2.finish(&[s]);
    let order: Vec<usize> = (0..m2.ops.len()).collect();
    let r = graph_cold_ranges(&m2, &order)
        .into_iter()
        .find(|r| r.tensor == a)
        .unwrap();
    let (g, edit) = spill(&graph(&m2), &r, None).unwrap();
    let (fused, at, how) = fuse_next(&g, edit.fetch_op).unwrap();
    assert_eq!(how, Fusion::Conv2d);
    assert_eq!(fused.model.ops[at].kind, OpKind::FetchConv2d);
    assert_eq!(fused.model.ops.len(), g.model.ops.len() - 1);
}

#[test]
fn spilling_the_skip_tensor_lowers_the_greedy_peak_by_its_size() {
    let m = skip_model();
    let o = optimize(&m, &Overlaps::none(&m), &TinysegOptions::default()).unwrap();
    assert_eq!(o.steps[1].tensor.as_deref(), Some("a"));
    // During c and d the arena held a (8192 B) and two 16384 B tensors.
    assert_eq!(o.steps[0].peak_bytes, 8192 + 2 * 16384);
    assert_eq!(o.steps[1].peak_bytes, 2 * 16384);
}
