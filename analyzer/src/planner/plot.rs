//! Arena pictures like the DMO paper's Fig. 1 / Fig. 9: x = arena offset,
//! y = execution step (downwards), one rectangle per tensor spanning its
//! lifetime. Tensors live at a step where the arena reaches its peak are
//! drawn in blue (the peak-defining buffers), the others in grey; the part of
//! an input that a DMO overlap lets share its output's bytes is red.

use std::path::Path;

use crate::error::{Error, Result};
use plotters::coord::Shift;
use plotters::prelude::*;

use super::{Comparison, Plan, PlanStatus};
use crate::model::Model;
use crate::plot::{font, render_picture, Picture};

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
    render_picture(path, size, &PlanPanels { model, plans })
}

/// Plans drawn next to each other, each on its own scale.
struct PlanPanels<'a> {
    model: &'a Model,
    plans: Vec<&'a Plan>,
}

impl Picture for PlanPanels<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        draw(self.model, &self.plans, root)
    }
}

fn draw<DB: DrawingBackend>(
    model: &Model,
    plans: &[&Plan],
    root: &DrawingArea<DB, Shift>,
) -> Result<()> {
    root.fill(&WHITE)
        .map_err(|e| Error::Drawing(e.to_string()))?;
    // Each panel on its own scale: a linear plan would squash the others.
    for (plan, area) in plans.iter().zip(root.split_evenly((1, plans.len()))) {
        let x_max = plan.peak_bytes.unwrap_or(1).max(1);
        draw_plan(model, plan, x_max, &area)?;
    }
    Ok(())
}

fn draw_plan<DB: DrawingBackend>(
    model: &Model,
    plan: &Plan,
    x_max: u64,
    area: &DrawingArea<DB, Shift>,
) -> Result<()> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| Error::Drawing(e.to_string());
    let family = font();
    let steps = plan.order.len().max(1) as f64;
    let peak = plan.peak_bytes.unwrap_or(0);
    let caption = format!(
        "{} ({}): {:.1} KiB, bound {:.1} KiB",
        plan.planner,
        plan.overlap,
        peak as f64 / 1024.0,
        plan.lower_bound_bytes as f64 / 1024.0
    );
    let x_max_k = x_max as f64 / 1024.0;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, (family, 16))
        .margin(10)
        .x_label_area_size(36)
        .y_label_area_size(44)
        .build_cartesian_2d(0f64..x_max_k * 1.04, steps..0f64)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc("arena offset (KiB)")
        .y_desc("execution step")
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
                (k(t.offset), t.first_op as f64 + 0.08),
                (k(t.offset + data), t.last_op as f64 + 0.92),
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
                (k(t.offset), t.first_op as f64 + 0.08),
                (k(t.offset + data), t.last_op as f64 + 0.92),
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
                [(k(lo), s + 0.08), (k(hi), s + 0.92)],
                OVERLAP.mix(0.8).filled(),
            )
        })
    });
    chart.draw_series(overlap_rects).map_err(err)?;
    // Peak line.
    chart
        .draw_series(std::iter::once(PathElement::new(
            vec![(k(peak), 0.0), (k(peak), steps)],
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
            Text::new(
                t.name.clone(),
                (k(t.offset) + x_max_k * 0.01, t.first_op as f64 + 0.15),
                (family, 10).into_font().color(&BLACK),
            )
        });
    chart.draw_series(labels).map_err(err)?;
    Ok(())
}
