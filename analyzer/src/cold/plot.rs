//! The TinySeg Fig. 12-style picture of `memtrace cold --plot`: the traced
//! plan's arena over time (x = operator position, y = arena offset), each
//! tensor a box over its lifetime at its offset (the planner picture turned
//! a quarter, [`crate::plot::plan`]), its graph-level cold range hatched,
//! and in red the bytes the trace shows idle while their tensor is not
//! (bytes some accessing operator never touches).

use std::path::Path;

use plotters::style::RGBColor;

use super::bytes::{ByteRuns, LOAD_INPUT};
use super::report::{ColdReport, TensorCold};
use crate::error::Result;
use crate::plot::plan::{plot_marked, Axes, Mark, MarkStyle, Marked};
use memtrace_model::planner::Plan;
use memtrace_model::Model;

const GRAPH_COLD: RGBColor = RGBColor(40, 40, 40);
const BYTE_COLD: RGBColor = RGBColor(214, 39, 40);

/// Byte runs drawn at most per picture; past it a class's runs are drawn
/// as the one range that spans them.
const MAX_RUNS: usize = 40_000;

/// Steps during which a tensor or some of its bytes are idle are drawn from
/// the step after the access that opens the gap to the one that closes it.
fn graph_marks(t: &TensorCold, offset: u64) -> Option<Mark> {
    let g = &t.graph;
    (g.idle_ops > 0).then(|| Mark {
        lo: offset,
        hi: offset + t.bytes,
        from: g.start as f64 + 1.0,
        to: g.end as f64,
        style: MarkStyle::Hatched(GRAPH_COLD),
    })
}

/// Every gap of every class whose accesses differ from its tensor's (bytes
/// some accessing operator skips): drawn under the hatching, the red that
/// shows outside it is idle time the graph level does not see.
fn byte_marks(t: &TensorCold, offset: u64, budget: &mut usize) -> Vec<Mark> {
    let Some(b) = &t.byte_level else {
        return Vec::new();
    };
    let mut marks = Vec::new();
    for c in b.classes.iter().filter(|c| c.positions != t.graph.accesses) {
        let runs: Vec<(u64, u64)> =
            if c.runs.iter().map(|r| r.count as usize).sum::<usize>() <= *budget {
                c.runs.iter().flat_map(expand).collect()
            } else {
                let lo = c.runs.iter().map(|r| r.offset).min().unwrap_or(0);
                let hi = c
                    .runs
                    .iter()
                    .map(|r| r.offset + (r.count - 1) * r.stride + r.len)
                    .max()
                    .unwrap_or(0);
                vec![(lo, hi)]
            };
        *budget = budget.saturating_sub(runs.len());
        for g in &c.gaps {
            // A dead tail ends with the tensor's box, inside its last step.
            let to = g.to.map_or(t.graph.last as f64 + 0.92, |p| p as f64);
            for &(lo, hi) in &runs {
                marks.push(Mark {
                    lo: offset + lo,
                    hi: offset + hi,
                    from: g.from as f64 + 1.0,
                    to,
                    style: MarkStyle::Filled(BYTE_COLD),
                });
            }
        }
    }
    marks
}

/// The runs of a progression, `[start, end)` each.
fn expand(r: &ByteRuns) -> impl Iterator<Item = (u64, u64)> + '_ {
    (0..r.count).map(move |k| {
        let start = r.offset + k * r.stride;
        (start, start + r.len)
    })
}

/// Millions of instructions at every step boundary of `report`'s run: the
/// start of the first window, then the end of each operator's window.
fn instruction_bounds(report: &ColdReport) -> Vec<f64> {
    let mut bounds = vec![0.0];
    bounds.extend(
        report
            .windows
            .iter()
            .filter(|w| w.op != LOAD_INPUT)
            .map(|w| w.end as f64 / 1e6),
    );
    bounds
}

/// Draws `report`'s cold ranges over `plan` (the traced placement) to
/// `path` (`.png` or `.svg`); the time axis in operator positions or, with
/// `instructions`, in the instructions the run took.
pub fn render(
    report: &ColdReport,
    model: &Model,
    plan: &Plan,
    instructions: bool,
    path: &Path,
) -> Result<()> {
    let mut marks = Vec::new();
    let mut budget = MAX_RUNS;
    for t in &report.tensors {
        if let Some(offset) = t.offset {
            marks.extend(byte_marks(t, offset, &mut budget));
        }
    }
    marks.extend(
        report
            .tensors
            .iter()
            .filter_map(|t| graph_marks(t, t.offset?)),
    );
    let legend = [
        ("cold range, graph level (Algorithm 2)", GRAPH_COLD),
        ("bytes idle longer than their tensor (trace)", BYTE_COLD),
    ];
    let bounds = instruction_bounds(report);
    let marked = Marked {
        marks: &marks,
        legend: &legend,
        axes: Axes::StepByOffset,
        caption: Some(format!(
            "{}: cold ranges over the {} plan ({:.1} KiB)",
            report.model,
            report.planner,
            report.arena_bytes as f64 / 1024.0
        )),
        time: (instructions && bounds.len() == plan.order.len() + 1).then_some((
            bounds.as_slice(),
            "instructions (millions; operator windows only)",
        )),
    };
    plot_marked(model, plan, &marked, path)
}
