//! Arena pictures like the DMO paper's Fig. 1 / Fig. 9: x = arena offset,
//! y = execution step (downwards), one rectangle per tensor spanning its
//! lifetime. Tensors live at a step where the arena reaches its peak are
//! drawn in blue (the peak-defining buffers), the others in grey; the part of
//! an input that a DMO overlap lets share its output's bytes is red.
//!
//! The same picture turned a quarter (x = execution step, y = arena offset:
//! TinySeg's Fig. 3b / Fig. 12) with [`Mark`]s over it — hatched or filled
//! regions of arena bytes over steps — is how `memtrace cold` shows cold
//! ranges ([`plot_marked`]).

use std::path::Path;

use crate::error::{Error, Result};
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::plot::{font, render_picture, Picture};
use memtrace_model::planner::{Comparison, Plan, PlanStatus};
use memtrace_model::Model;

/// How a plan picture lays out its axes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Axes {
    /// x = arena offset, y = execution step downwards (DMO's Fig. 1 / 9).
    OffsetByStep,
    /// x = execution step, y = arena offset upwards (TinySeg's Fig. 3b / 12).
    StepByOffset,
}

impl Axes {
    /// Chart coordinates of arena KiB `k` at step `s`.
    fn at(self, k: f64, s: f64) -> (f64, f64) {
        match self {
            Axes::OffsetByStep => (k, s),
            Axes::StepByOffset => (s, k),
        }
    }
}

/// How a [`Mark`] is drawn.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MarkStyle {
    /// Diagonal lines in this colour.
    Hatched(RGBColor),
    /// Filled with this colour, half transparent.
    Filled(RGBColor),
}

/// A region drawn over a plan: arena bytes `[lo, hi)` during steps
/// `[from, to)` (fractions allowed: step `s` is drawn from `s` to `s + 1`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Mark {
    /// First arena byte.
    pub lo: u64,
    /// One past the last arena byte.
    pub hi: u64,
    /// Start step.
    pub from: f64,
    /// End step.
    pub to: f64,
    /// Hatched or filled.
    pub style: MarkStyle,
}

/// What [`plot_marked`] draws besides the plan.
pub struct Marked<'a> {
    /// Regions over the plan.
    pub marks: &'a [Mark],
    /// Legend entries `(label, colour)` for the marks' colours.
    pub legend: &'a [(&'a str, RGBColor)],
    /// Axes layout.
    pub axes: Axes,
    /// Caption (the plan's planner and peak otherwise).
    pub caption: Option<String>,
    /// Time axis other than steps: the coordinate of every step boundary
    /// (`steps + 1` increasing values, e.g. instructions) and its label.
    pub time: Option<(&'a [f64], &'a str)>,
}

impl Marked<'_> {
    /// Coordinate of (fractional) step `s` on the time axis.
    fn time_of(&self, s: f64) -> f64 {
        let Some((bounds, _)) = self.time.filter(|(b, _)| b.len() >= 2) else {
            return s;
        };
        let i = (s.floor().max(0.0) as usize).min(bounds.len() - 2);
        bounds[i] + (s - i as f64) * (bounds[i + 1] - bounds[i])
    }
}

const GREY: RGBColor = RGBColor(170, 170, 170);
const PEAK: RGBColor = RGBColor(31, 119, 180);
const OVERLAP: RGBColor = RGBColor(214, 39, 40);

/// Indices (into `plan.tensors`) of tensors live at a step whose arena
/// extent equals the peak.
pub fn peak_defining(plan: &Plan) -> Vec<usize> {
    let Some(peak) = plan.peak_bytes else {
        return Vec::new();
    };
    let steps = plan.order.len().max(1);
    let mut extent = vec![0u64; steps];
    for t in &plan.tensors {
        for e in &mut extent[t.first_op..=t.last_op.min(steps - 1)] {
            *e = (*e).max(t.offset + t.size);
        }
    }
    let peak_steps: Vec<usize> = (0..steps).filter(|&s| extent[s] == peak).collect();
    (0..plan.tensors.len())
        .filter(|&i| {
            let t = &plan.tensors[i];
            peak_steps
                .iter()
                .any(|&s| t.first_op <= s && s <= t.last_op)
        })
        .collect()
}

/// Draws one plan to `path` (`.svg` or `.png`).
pub fn plot_plan(model: &Model, plan: &Plan, path: &Path) -> Result<()> {
    plot_plans(model, std::slice::from_ref(plan), path)
}

/// Draws every applicable plan of a comparison side by side.
pub fn plot_comparison(model: &Model, comparison: &Comparison, path: &Path) -> Result<()> {
    plot_plans(model, &comparison.plans, path)
}

/// Draws `plans` side by side (not-applicable plans are skipped).
pub fn plot_plans(model: &Model, plans: &[Plan], path: &Path) -> Result<()> {
    let plans: Vec<&Plan> = plans
        .iter()
        .filter(|p| p.status != PlanStatus::NotApplicable)
        .collect();
    if plans.is_empty() {
        return Err(Error::Invalid("no applicable plan to draw".into()));
    }
    let size = (560 * plans.len() as u32, 760u32);
    let plain = Marked {
        marks: &[],
        legend: &[],
        axes: Axes::OffsetByStep,
        caption: None,
        time: None,
    };
    render_picture(
        path,
        size,
        &PlanPanels {
            model,
            plans,
            marked: &plain,
        },
    )
}

/// Draws `plan` with `marked`'s regions over it to `path` (`.svg` or `.png`).
pub fn plot_marked(model: &Model, plan: &Plan, marked: &Marked<'_>, path: &Path) -> Result<()> {
    let size = match marked.axes {
        Axes::OffsetByStep => (700, 900),
        Axes::StepByOffset => (1200, 700),
    };
    render_picture(
        path,
        size,
        &PlanPanels {
            model,
            plans: vec![plan],
            marked,
        },
    )
}

/// Plans drawn next to each other, each on its own scale.
struct PlanPanels<'a> {
    model: &'a Model,
    plans: Vec<&'a Plan>,
    marked: &'a Marked<'a>,
}

impl Picture for PlanPanels<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        draw(self.model, &self.plans, self.marked, root)
    }
}

fn draw<DB: DrawingBackend>(
    model: &Model,
    plans: &[&Plan],
    marked: &Marked<'_>,
    root: &DrawingArea<DB, Shift>,
) -> Result<()> {
    root.fill(&WHITE)
        .map_err(|e| Error::Drawing(e.to_string()))?;
    // Each panel on its own scale: a linear plan would squash the others.
    for (plan, area) in plans.iter().zip(root.split_evenly((1, plans.len()))) {
        let x_max = plan.peak_bytes.unwrap_or(1).max(1);
        draw_plan(model, plan, x_max, marked, &area)?;
    }
    Ok(())
}

fn draw_plan<DB: DrawingBackend>(
    model: &Model,
    plan: &Plan,
    x_max: u64,
    marked: &Marked<'_>,
    area: &DrawingArea<DB, Shift>,
) -> Result<()> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| Error::Drawing(e.to_string());
    let family = font();
    let steps = plan.order.len().max(1) as f64;
    let peak = plan.peak_bytes.unwrap_or(0);
    let caption = marked.caption.clone().unwrap_or_else(|| {
        format!(
            "{} ({}): {:.1} KiB, bound {:.1} KiB",
            plan.planner,
            plan.overlap,
            peak as f64 / 1024.0,
            plan.lower_bound_bytes as f64 / 1024.0
        )
    });
    let x_max_k = x_max as f64 / 1024.0;
    let axes = marked.axes;
    let at = |k: f64, s: f64| axes.at(k, marked.time_of(s));
    let t_max = marked.time_of(steps);
    let builder = ChartBuilder::on(area)
        .caption(caption, (family, 16))
        .margin(10)
        .x_label_area_size(36)
        .y_label_area_size(52)
        .build_cartesian_2d(
            match axes {
                Axes::OffsetByStep => 0f64..x_max_k * 1.04,
                Axes::StepByOffset => 0f64..t_max,
            },
            match axes {
                Axes::OffsetByStep => t_max..0f64,
                Axes::StepByOffset => 0f64..x_max_k * 1.04,
            },
        );
    let mut chart = builder.map_err(err)?;
    let steps_desc = match axes {
        Axes::OffsetByStep => "execution step",
        Axes::StepByOffset => "execution step (operator position)",
    };
    let time_desc = marked.time.map_or(steps_desc, |(_, label)| label);
    let (x_desc, y_desc) = match axes {
        Axes::OffsetByStep => ("arena offset (KiB)", time_desc),
        Axes::StepByOffset => (time_desc, "arena offset (KiB)"),
    };
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .label_style((family, 12))
        .axis_desc_style((family, 13))
        .draw()
        .map_err(err)?;
    let peak_set = peak_defining(plan);
    let k = |b: u64| b as f64 / 1024.0;
    let rects = plan.tensors.iter().enumerate().map(|(i, t)| {
        let color = if peak_set.contains(&i) { PEAK } else { GREY };
        let data = model
            .tensors
            .get(t.tensor)
            .map_or(t.size, |m| m.bytes.max(1));
        Rectangle::new(
            [
                at(k(t.offset), t.first_op as f64 + 0.08),
                at(k(t.offset + data), t.last_op as f64 + 0.92),
            ],
            color.mix(0.55).filled(),
        )
    });
    chart.draw_series(rects).map_err(err)?;
    let outlines = plan.tensors.iter().map(|t| {
        let data = model
            .tensors
            .get(t.tensor)
            .map_or(t.size, |m| m.bytes.max(1));
        Rectangle::new(
            [
                at(k(t.offset), t.first_op as f64 + 0.08),
                at(k(t.offset + data), t.last_op as f64 + 0.92),
            ],
            BLACK.stroke_width(1),
        )
    });
    chart.draw_series(outlines).map_err(err)?;
    // DMO overlaps: the shared bytes during the operator's step.
    let by_tensor = |tensor: usize| plan.tensors.iter().find(|t| t.tensor == tensor);
    let overlap_rects = plan.overlaps_used.iter().filter_map(|u| {
        let (i, o) = (by_tensor(u.input)?, by_tensor(u.output)?);
        let in_end = i.offset + model.tensors.get(i.tensor)?.bytes;
        let out_end = o.offset + model.tensors.get(o.tensor)?.bytes;
        let (lo, hi) = (i.offset.max(o.offset), in_end.min(out_end));
        (hi > lo).then(|| {
            let s = o.first_op as f64;
            Rectangle::new(
                [at(k(lo), s + 0.08), at(k(hi), s + 0.92)],
                OVERLAP.mix(0.8).filled(),
            )
        })
    });
    chart.draw_series(overlap_rects).map_err(err)?;
    draw_marks(&mut chart, marked, area.dim_in_pixel())?;
    // Peak line.
    chart
        .draw_series(std::iter::once(PathElement::new(
            vec![at(k(peak), 0.0), at(k(peak), steps)],
            RED.stroke_width(1),
        )))
        .map_err(err)?;
    // Names of the wide tensors.
    let min_width = x_max as f64 * 0.12;
    let labels = plan
        .tensors
        .iter()
        .filter(|t| t.size as f64 >= min_width)
        .map(|t| {
            let at = match axes {
                Axes::OffsetByStep => at(k(t.offset) + x_max_k * 0.01, t.first_op as f64 + 0.15),
                Axes::StepByOffset => at(k(t.offset + t.size), t.first_op as f64 + 0.15),
            };
            Text::new(t.name.clone(), at, (family, 10).into_font().color(&BLACK))
        });
    chart.draw_series(labels).map_err(err)?;
    for &(label, colour) in marked.legend {
        chart
            .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())
            .map_err(err)?
            .label(label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], colour.filled()));
    }
    if !marked.legend.is_empty() {
        chart
            .configure_series_labels()
            .label_font((family, 12))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(err)?;
    }
    Ok(())
}

/// Pixels between two hatching lines.
const HATCH_SPACING: f64 = 7.0;

/// Draws `marked`'s regions; hatching runs at 45° on screen, whatever the
/// axes' scales (`pixels` approximates the plotting area).
fn draw_marks<DB: DrawingBackend>(
    chart: &mut ChartContext<
        '_,
        DB,
        Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    >,
    marked: &Marked<'_>,
    pixels: (u32, u32),
) -> Result<()> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| Error::Drawing(e.to_string());
    let (xr, yr) = (chart.x_range(), chart.y_range());
    // Chart units per pixel on each axis.
    let ux = (xr.end - xr.start).abs() / pixels.0.max(1) as f64;
    let uy = (yr.end - yr.start).abs() / pixels.1.max(1) as f64;
    let k = |b: u64| b as f64 / 1024.0;
    for m in marked.marks {
        let (a, b) = (
            marked.axes.at(k(m.lo), marked.time_of(m.from)),
            marked.axes.at(k(m.hi), marked.time_of(m.to)),
        );
        match m.style {
            MarkStyle::Filled(colour) => {
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [a, b],
                        colour.mix(0.6).filled(),
                    )))
                    .map_err(err)?;
            }
            MarkStyle::Hatched(colour) => {
                let lines = hatch(a, b, ux, uy)
                    .into_iter()
                    .map(|l| PathElement::new(vec![l.0, l.1], colour.stroke_width(1)));
                chart.draw_series(lines).map_err(err)?;
            }
        }
    }
    Ok(())
}

/// Diagonal segments filling the rectangle with corners `a` and `b`, one
/// every [`HATCH_SPACING`] pixels, given chart units per pixel `ux`, `uy`.
fn hatch(a: (f64, f64), b: (f64, f64), ux: f64, uy: f64) -> Vec<((f64, f64), (f64, f64))> {
    if ux <= 0.0 || uy <= 0.0 {
        return Vec::new();
    }
    // In pixels: u = x / ux, v = y / uy; lines u − v = c.
    let (u0, u1) = (a.0.min(b.0) / ux, a.0.max(b.0) / ux);
    let (v0, v1) = (a.1.min(b.1) / uy, a.1.max(b.1) / uy);
    let mut out = Vec::new();
    let first = ((u0 - v1) / HATCH_SPACING).ceil() as i64;
    let last = ((u1 - v0) / HATCH_SPACING).floor() as i64;
    for i in first..=last {
        let c = i as f64 * HATCH_SPACING;
        let (lo, hi) = (v0.max(u0 - c), v1.min(u1 - c));
        if lo < hi {
            out.push((((lo + c) * ux, lo * uy), ((hi + c) * ux, hi * uy)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use memtrace_model::planner::{report, OverlapMethod, Overlaps, PlanOptions};
    use memtrace_model::zoo;

    fn analytic(model: &Model) -> Overlaps {
        Overlaps::compute(model, &OverlapMethod::Analytic)
    }

    /// Every hatching segment lies inside its rectangle and runs at 45° in
    /// pixels; a 70 × 70 pixel square gets 2·70/7 − 1 = 19 lines.
    #[test]
    fn hatching_stays_inside_the_rectangle_at_45_degrees() {
        let (ux, uy) = (0.5, 2.0);
        let lines = hatch((0.0, 0.0), (35.0, 140.0), ux, uy);
        assert_eq!(lines.len(), 19);
        for ((x0, y0), (x1, y1)) in lines {
            for (x, y) in [(x0, y0), (x1, y1)] {
                assert!((-1e-9..=35.0 + 1e-9).contains(&x) && (-1e-9..=140.0 + 1e-9).contains(&y));
            }
            assert!(((x1 - x0) / ux - (y1 - y0) / uy).abs() < 1e-9);
        }
    }

    #[test]
    fn arena_plots_are_drawn() {
        let m = zoo::build("mobilenet_v1_0.25_128_int8").unwrap();
        let c = report::compare_all(&m, &analytic(&m), &PlanOptions::default()).unwrap();
        let dir = std::env::temp_dir().join(format!("memtrace-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let svg = dir.join("arena.svg");
        plot_plan(&m, c.plan("dmo-heap", "analytic").unwrap(), &svg).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.contains("<rect") && text.contains("conv_pw_1"));
        let png = dir.join("all.png");
        plot_comparison(&m, &c, &png).unwrap();
        assert!(std::fs::metadata(&png).unwrap().len() > 1000);
        assert!(plot_plan(&m, &c.plans[0], &dir.join("x.txt")).is_err());
        let peak = peak_defining(c.plan("dmo-heap", "none").unwrap());
        let names: Vec<&str> = peak
            .iter()
            .map(|&i| c.plan("dmo-heap", "none").unwrap().tensors[i].name.as_str())
            .collect();
        assert!(
            names.contains(&"conv_pw_1") && names.contains(&"conv_dw_1"),
            "{names:?}"
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}
