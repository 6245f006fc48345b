//! What `memtrace plan` found ([`PlanReport`]): the plans side by side or
//! TinySeg's ([`PlanOutcome`]), with the O_s provenance, the arena to
//! allocate and the budget, as a table or a JSON document.

use memtrace_analyzer::tinyseg::TinysegPlan;
use memtrace_model::planner::report::Comparison;

use crate::runtime::plan_file::PlanProvenance;
use crate::support::error::Result;
use crate::support::outcome::{Answer, Format, Outcome};
use crate::support::provenance::OverlapProvenance;
use crate::workflows::deploy::{Budget, MeasuredPlan};

/// What `memtrace plan` found, and for which library and O_s source.
#[derive(Debug)]
pub struct PlanReport {
    /// The plans.
    pub outcome: PlanOutcome,
    /// The library the plans are for and whose loop nests their O_s model.
    pub provenance: OverlapProvenance,
    /// What the user must know (a foreign O_s source); printed on stderr by
    /// the binary and recorded in the JSON as `warnings`.
    pub warnings: Vec<String>,
    /// With `emit_offline`: a line saying what was written.
    pub emitted: Option<String>,
    /// The O_s the plans with overlaps credited, per operator index (0
    /// where the source has none).
    pub op_overlap_bytes: Vec<u64>,
    /// The arena a firmware must allocate for the best plan (the one
    /// `--emit-offline` writes), measured on real TFLM, or why not.
    pub deploy: Option<MeasuredPlan>,
    /// `--fits`: the arena to allocate against the budget.
    pub budget: Option<Budget>,
    /// Model digest, kernels, target and TFLM build the plans are for
    /// (`verify --plan` checks them).
    pub plan_provenance: PlanProvenance,
}

impl PlanReport {
    /// Text table, then the arena to allocate and the budget.
    pub fn to_table(&self) -> String {
        let mut s = self.outcome.to_table();
        if let Some(d) = &self.deploy {
            s += &d.to_text();
        }
        if let Some(b) = &self.budget {
            s += &format!("{}\n", b.message());
        }
        s
    }

    /// Pretty JSON with a final newline: the outcome's document with
    /// `kernels` (the library the plans are for), `overlap_source`,
    /// `overlap_kernels` (whose loop nests the O_s model, `null` for none),
    /// `foreign_overlap`, `warnings` and `op_overlap_bytes` (the O_s per
    /// operator index) added.
    pub fn to_json(&self) -> Result<String> {
        let text = match &self.outcome {
            PlanOutcome::Comparison(c) => serde_json::to_string_pretty(&self.document(c))?,
            PlanOutcome::Tinyseg(t) => serde_json::to_string_pretty(&self.document(t.as_ref()))?,
        };
        Ok(text + "\n")
    }

    fn document<'a, T: serde::Serialize>(&'a self, outcome: &'a T) -> Document<'a, T> {
        let p = &self.provenance;
        Document {
            outcome,
            kernels: p.kernels.name(),
            overlap_source: p.source.name(),
            overlap_kernels: p.modelled.map(|k| k.name()),
            foreign_overlap: p.is_foreign(),
            warnings: &self.warnings,
            op_overlap_bytes: &self.op_overlap_bytes,
            arena_to_allocate: self.deploy.as_ref(),
            budget: self.budget.as_ref(),
            provenance: &self.plan_provenance,
        }
    }
}

/// The JSON document of a [`PlanReport`]: the outcome's fields, then the
/// provenance (serialised in this order).
#[derive(serde::Serialize)]
struct Document<'a, T: serde::Serialize> {
    #[serde(flatten)]
    outcome: &'a T,
    kernels: &'a str,
    overlap_source: &'a str,
    overlap_kernels: Option<&'a str>,
    foreign_overlap: bool,
    warnings: &'a [String],
    op_overlap_bytes: &'a [u64],
    arena_to_allocate: Option<&'a MeasuredPlan>,
    budget: Option<&'a Budget>,
    provenance: &'a PlanProvenance,
}

/// What `memtrace plan` found.
#[derive(Debug)]
pub enum PlanOutcome {
    /// The planners side by side.
    Comparison(Comparison),
    /// TinySeg's steps and final plan.
    Tinyseg(Box<TinysegPlan>),
}

impl Answer for PlanReport {
    /// Warnings and what was written first; after the report, the budget's
    /// verdict (the table states it too; a JSON reader gets it in `budget`,
    /// a person on stderr). Exit status 1 when the arena misses `--fits`.
    fn answer(&self, format: Format) -> Result<Outcome> {
        let mut notes: Vec<String> = self
            .warnings
            .iter()
            .map(|w| format!("WARNING: {w}"))
            .collect();
        notes.extend(self.emitted.clone());
        let report = match format {
            Format::Json => self.to_json()?,
            _ => self.to_table(),
        };
        let fits = self.budget.is_none_or(|b| b.fits());
        let verdict = self
            .budget
            .filter(|b| format == Format::Json || !b.fits())
            .map(|b| b.message())
            .into_iter()
            .collect();
        Ok(Outcome {
            notes,
            report,
            verdict,
            status: Outcome::status_of(fits),
        })
    }
}

impl PlanOutcome {
    /// Text table.
    pub fn to_table(&self) -> String {
        match self {
            PlanOutcome::Comparison(c) => c.to_table(),
            PlanOutcome::Tinyseg(t) => t.to_table(),
        }
    }
}
