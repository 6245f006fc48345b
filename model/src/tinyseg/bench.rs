//! Planning-time measurements of TinySeg for `memtrace bench --tinyseg`
//! (no `cargo bench` harness needed).

use std::time::Instant;

use serde::Serialize;

use super::{optimize, TinysegOptions};
use crate::planner::{Overlaps, PlanError};
use crate::Model;

/// Wall-clock time of one TinySeg optimisation.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TinysegTiming {
    /// Model name.
    pub model: String,
    /// The base planner.
    pub base: String,
    /// Fastest of the repetitions, in seconds (every transformation, every
    /// re-plan and its validation included).
    pub seconds: f64,
    /// Steps accepted (the untransformed model included).
    pub steps: usize,
    /// Peak before and after, in bytes.
    pub peaks: (u64, u64),
}

/// Times [`optimize()`] on `model` with `opts`, `repeat` times, keeping the
/// fastest.
pub fn time_tinyseg(
    model: &Model,
    overlaps: &Overlaps,
    opts: &TinysegOptions,
    repeat: u32,
) -> Result<TinysegTiming, PlanError> {
    let mut best = f64::INFINITY;
    let mut last = None;
    for _ in 0..repeat.max(1) {
        let start = Instant::now();
        let o = optimize(model, overlaps, opts)?;
        best = best.min(start.elapsed().as_secs_f64());
        last = Some(o);
    }
    let o = last.expect("at least one repetition");
    Ok(TinysegTiming {
        model: model.name.clone(),
        base: opts.base.name().into(),
        seconds: best,
        steps: o.steps.len(),
        peaks: (
            o.steps.first().map_or(0, |s| s.peak_bytes),
            o.steps.last().map_or(0, |s| s.peak_bytes),
        ),
    })
}
