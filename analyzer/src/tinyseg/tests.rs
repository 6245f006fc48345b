//! Unit tests of the TinySeg transformation loop on small hand-built graphs.

use super::*;
use crate::model::zoo::GraphBuilder;
use crate::model::{Activation, DataType, Model};
use crate::planner::{Overlaps, PlannerKind};

/// A long skip connection around wider layers: `a` (32×32×8) waits while
/// three 32×32×16 convolutions run, then an ADD with the narrowed result.
pub(crate) fn skip_model() -> Model {
    let mut g = GraphBuilder::new("skip_add", DataType::Int8);
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

#[test]
fn spilling_the_skip_tensor_lowers_the_greedy_peak() {
    let m = skip_model();
    let o = optimize(&m, &Overlaps::none(&m), &TinysegOptions::default()).unwrap();
    eprintln!("{}", report::steps_table(&o.steps));
    assert!(o.steps.len() >= 2);
    assert_eq!(o.steps[1].tensor.as_deref(), Some("a"));
    assert!(o.steps.last().unwrap().peak_bytes < o.steps[0].peak_bytes);
    let _ = PlannerKind::DmoHeap;
}

