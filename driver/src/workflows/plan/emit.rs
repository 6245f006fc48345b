//! The best plan made deployable ([`Deployable`]): written into a copy of
//! the model as `OfflineMemoryAllocation`, the arena TFLM needs for it
//! measured, and the model and its header written (`--emit-offline`).

use std::path::Path;

use memtrace_model::planner::report::Comparison;
use memtrace_model::source::ModelFile;
use memtrace_model::{tflite, Model};

use super::PlanRequest;
use crate::bail;
use crate::runtime::plan_file::PlanProvenance;
use crate::support::error::{Context, Result};
use crate::workflows::deploy::{Budget, MeasuredPlan};

/// The best plan written into the model, and the arena TFLM needs for it.
pub(super) struct Deployable {
    pub(super) measured: MeasuredPlan,
    /// The `.tflite` with the plan as `OfflineMemoryAllocation`, when
    /// measured.
    emitted: Option<tflite::EmitReport>,
}

/// The best plan's offsets of the file's own `file_tensors` tensors in a
/// copy of the model (the scratch tensors added after them are TFLM's to
/// place: it plans scratch buffers online around the offline ones), and the
/// arena TFLM needs for that copy, measured on the runner of `req.kernels`
/// (the largest over the cores the plan is for).
/// `None` for a zoo model without `--emit-offline` or `--fits` (it has no
/// `.tflite` of its own) or when no plan applies. Without a runner the
/// measurement is a note, unless the header or the budget needs it.
pub(super) fn deployable(
    req: &PlanRequest,
    file: &ModelFile,
    model: &Model,
    file_tensors: usize,
    comparison: &Comparison,
    provenance: &PlanProvenance,
) -> Result<Option<Deployable>> {
    let Some(plan) = comparison.best_plan() else {
        return Ok(None);
    };
    if file.source.is_zoo() {
        return Ok(None);
    }
    let needed = req.emit_offline.is_some() || req.fits.is_some();
    let measured = |arena, not_measured| MeasuredPlan {
        planner: plan.planner.name().into(),
        overlap: plan.overlap.clone(),
        planned_bytes: plan.peak_bytes.unwrap_or(0),
        arena,
        not_measured,
    };
    let mut offsets = plan.offline_offsets(model);
    offsets.truncate(file_tensors);
    // The plan's provenance goes beside it, as the `memtrace_plan` entry.
    let note = PlanProvenance {
        planner: Some(plan.planner.name().to_string()),
        ..provenance.clone()
    }
    .to_metadata()?;
    let emitted = file.with_offline(&offsets, Some(&note));
    let emitted = match emitted {
        Ok(e) => e,
        Err(e) if !needed => {
            return Ok(Some(Deployable {
                measured: measured(None, Some(e.to_string())),
                emitted: None,
            }))
        }
        Err(e) => return Err(e.into()),
    };
    // A model TFLM refuses still gets its plan written (without a header);
    // only the budget cannot do without the number.
    // The inputs `plan`'s traced run used (seed 1); the plan changes no
    // graph input.
    let arena = crate::runtime::seeded_inputs(&file.graph, 1).and_then(|inputs| {
        super::targets::largest_arena(
            &emitted.bytes,
            &inputs,
            req.kernels,
            &req.targets(),
            &req.cache,
        )
    });
    let (arena, not_measured) = match arena {
        Ok(a) => (Some(a), None),
        Err(e) if req.fits.is_none() => (None, Some(e.to_string())),
        Err(e) => {
            return Err(e).with_context(|| {
                "measuring the arena to allocate on real TFLM (docs/deploy.md)".to_string()
            })
        }
    };
    Ok(Some(Deployable {
        measured: measured(arena, not_measured),
        emitted: Some(emitted),
    }))
}

/// Writes the deployable model and its header (unless it misses the
/// `--fits` budget); the line saying what was written.
pub(super) fn emit(
    req: &PlanRequest,
    d: &Deployable,
    budget: Option<Budget>,
    dest: &Path,
) -> Result<String> {
    let m = &d.measured;
    let Some(emitted) = &d.emitted else {
        bail!("no plan to emit");
    };
    let Some(arena) = &m.arena else {
        memtrace_io::output::write_atomically(dest, |w| {
            std::io::Write::write_all(w, &emitted.bytes)
                .map_err(|e| memtrace_io::output::write_error(dest, e))
        })?;
        return Ok(format!(
            "wrote {} ({} planner, head {} B) with OfflineMemoryAllocation in buffer {}; \
             no header: the arena to allocate was not measured: {}",
            dest.display(),
            m.planner,
            m.planned_bytes,
            emitted.buffer_index,
            m.not_measured.as_deref().unwrap_or("unknown reason")
        ));
    };
    if let Some(b) = budget.filter(|b| !b.fits()) {
        return Ok(format!(
            "did not write {}: the arena to allocate ({} B) misses the --fits budget by {} B",
            dest.display(),
            arena.bytes,
            b.arena_bytes - b.budget_bytes
        ));
    }
    let header = crate::workflows::deploy::write_measured_plan(
        dest,
        &emitted.bytes,
        m,
        arena,
        "plan --emit-offline",
        &req.model.to_string(),
        false,
    )?;
    Ok(format!(
        "wrote {} and {} ({} planner, head {} B; arena to allocate {} B on TFLM {} kernels, {}) \
         with OfflineMemoryAllocation in buffer {}",
        dest.display(),
        header.display(),
        m.planner,
        m.planned_bytes,
        arena.bytes,
        arena.kernels,
        arena.target,
        emitted.buffer_index
    ))
}
