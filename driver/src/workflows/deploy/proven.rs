//! `verify --emit-offline` and `--fits`: a proven plan written as the model
//! and header a firmware compiles, when it is proven and fits its budget.

use std::path::PathBuf;

use super::{write_measured_plan, Budget, MeasuredPlan};
use crate::support::error::Result;

/// What a verify is asked to deliver once its plan is proven.
#[derive(Clone, Debug, Default)]
pub struct Deployment {
    /// Write the proven model here, its header beside it (`--emit-offline`).
    pub dest: Option<PathBuf>,
    /// The firmware's arena budget in bytes (`--fits`).
    pub fits: Option<u64>,
}

/// What a [`Deployment`] did: lines for stderr, and whether it succeeded.
#[derive(Clone, Debug, Default)]
pub struct Deployed {
    /// What was checked and written, or why not.
    pub notes: Vec<String>,
    /// The budget is met and the files asked for were written.
    pub ok: bool,
    /// `--fits`: the arena to allocate against the budget (`None` without
    /// `--fits`, or when the arena was not measured).
    pub budget: Option<Budget>,
}

impl Deployment {
    /// Nothing was asked for.
    pub fn is_empty(&self) -> bool {
        self.dest.is_none() && self.fits.is_none()
    }

    /// Checks the budget against the measured arena and writes the proven
    /// model (`model_bytes`, as TFLM ran it under the plan of `source`) and
    /// its header; not when the proof failed (`proven` false) or the budget
    /// is missed.
    pub fn finish(
        &self,
        proven: bool,
        model_bytes: &[u8],
        measured: &MeasuredPlan,
        source: &str,
    ) -> Result<Deployed> {
        if self.is_empty() {
            return Ok(Deployed {
                ok: true,
                ..Deployed::default()
            });
        }
        let Some(arena) = &measured.arena else {
            let why = measured.not_measured.as_deref().unwrap_or("unknown reason");
            return Ok(Deployed {
                notes: vec![format!(
                    "error: the arena to allocate was not measured ({why}): nothing to check \
                     against --fits or to write"
                )],
                ..Deployed::default()
            });
        };
        let mut notes = Vec::new();
        let budget = self.fits.map(|budget_bytes| Budget {
            budget_bytes,
            arena_bytes: arena.bytes,
        });
        notes.extend(budget.map(|b| b.message()));
        let fits = budget.is_none_or(|b| b.fits());
        let Some(dest) = &self.dest else {
            return Ok(Deployed {
                notes,
                ok: fits,
                budget,
            });
        };
        let refusal = if !proven {
            Some("the plan was not proven")
        } else if !fits {
            Some("it misses the --fits budget")
        } else {
            None
        };
        if let Some(why) = refusal {
            notes.push(format!("did not write {}: {why}", dest.display()));
            return Ok(Deployed {
                notes,
                ok: false,
                budget,
            });
        }
        let header = write_measured_plan(
            dest,
            model_bytes,
            measured,
            arena,
            "verify --emit-offline",
            source,
            true,
        )?;
        notes.push(format!(
            "wrote {} and {} ({} planner, head {} B, proven on TFLM; arena to allocate {} B on \
             TFLM {} kernels, {})",
            dest.display(),
            header.display(),
            measured.planner,
            measured.planned_bytes,
            arena.bytes,
            arena.kernels,
            arena.target
        ));
        Ok(Deployed {
            notes,
            ok: true,
            budget,
        })
    }
}
