//! Planner tests: Table III, the real models, reordering, exact vs heuristics.

use super::*;
use crate::model::tests::{real_model, REAL_MODELS};
use crate::model::zoo;

fn analytic(model: &Model) -> Overlaps {
    Overlaps::compute(model, &OverlapMethod::Analytic)
}

fn opts() -> PlanOptions {
    PlanOptions::default()
}

#[test]
fn print_table_three() {
    for name in zoo::names() {
        let m = zoo::build(name).unwrap();
        let c = report::compare_all(&m, &analytic(&m), &opts()).unwrap();
        eprintln!("{}", c.to_table());
    }
}

#[test]
fn print_real_models() {
    for name in REAL_MODELS {
        let m = real_model(name);
        let c = report::compare_all(&m, &analytic(&m), &opts()).unwrap();
        eprintln!("{}", c.to_table());
    }
}
