//! Where a plan came from, and the plan files `verify --plan` reads.
//!
//! `memtrace plan --format json` writes a document with every plan of the
//! comparison and a `provenance` block; `plan --emit-offline` writes the
//! same provenance into the model as a `memtrace_plan` metadata entry. A
//! plan is only safe for the model, kernel library and target it was made
//! for, so `verify --plan` compares the provenance with its own run, and
//! `run`/`verify` say whose an embedded `OfflineMemoryAllocation` is.

use serde::{Deserialize, Serialize};

use memtrace_abi::Runtime;
use memtrace_analyzer::verify::digest;
use memtrace_model::planner::PlannerKind;
use memtrace_model::source::ModelFile;
use memtrace_tracer::Arch;

use super::kernels::{harness_guest, Kernels};
use crate::support::error::Result;
use crate::support::provenance::OverlapChoice;
use crate::{bail, failed};

/// Who made a plan, for what: recorded in `plan`'s JSON (`provenance`) and
/// in an emitted model's `memtrace_plan` metadata.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanProvenance {
    /// memtrace's version (`CARGO_PKG_VERSION`).
    pub memtrace_version: String,
    /// Digest ([`digest`]) of the `.tflite` bytes the plan was made from
    /// (before any emission; a zoo model's seed-1 export).
    pub model_digest: String,
    /// The kernel library the plan is for.
    pub kernels: String,
    /// The architecture the plan is for; a plan for several cores names
    /// them all, comma-separated (`cortex-m0,cortex-m4`).
    pub target: String,
    /// The runtime whose scratch buffers and order the plan assumes.
    pub runtime: Runtime,
    /// The TFLM build: digest of the TFLM runner ELF built with `kernels`
    /// (the TFLM tree pins no version string the runner could report), one
    /// per target, comma-separated; `None` when a runner is not built.
    pub tflm_build: Option<String>,
    /// The planner (in an emitted model; `plan`'s JSON names it per plan).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planner: Option<String>,
    /// The O_s source.
    pub overlap_source: String,
}

impl PlanProvenance {
    /// The provenance of a plan made now from `model` for `kernels` on
    /// `target`.
    pub fn new(
        model: &ModelFile,
        kernels: Kernels,
        target: Arch,
        runtime: Runtime,
        overlap: OverlapChoice,
    ) -> Result<PlanProvenance> {
        Ok(PlanProvenance {
            memtrace_version: env!("CARGO_PKG_VERSION").to_string(),
            model_digest: model_digest(model)?,
            kernels: kernels.name().to_string(),
            target: target.name().to_string(),
            runtime,
            tflm_build: tflm_build(target, kernels),
            planner: None,
            overlap_source: overlap.name().to_string(),
        })
    }

    /// The provenance of a plan made now for every core of `targets` (the
    /// first is the one it was measured on; see [`PlanProvenance::new`]).
    pub(crate) fn for_targets(
        model: &ModelFile,
        kernels: Kernels,
        targets: &[Arch],
        runtime: Runtime,
        overlap: OverlapChoice,
    ) -> Result<PlanProvenance> {
        let first = *targets
            .first()
            .ok_or_else(|| failed!("a plan needs a target"))?;
        let builds: Option<Vec<String>> = targets.iter().map(|&t| tflm_build(t, kernels)).collect();
        Ok(PlanProvenance {
            target: join_names(targets),
            tflm_build: builds.map(|b| b.join(",")),
            ..PlanProvenance::new(model, kernels, first, runtime, overlap)?
        })
    }

    /// The position of `target` among the cores the plan is for.
    fn target_index(&self, target: Arch) -> Option<usize> {
        self.target.split(',').position(|t| t == target.name())
    }

    /// One line for reports: `memtrace 0.1.0, planner exact (analytic O_s),
    /// kernels tflm, target cortex-m4, ...`.
    pub fn summary(&self) -> String {
        format!(
            "memtrace {}, planner {} ({} O_s), kernels {}, target {}, TFLM build {}, model {}",
            self.memtrace_version,
            self.planner.as_deref().unwrap_or("?"),
            self.overlap_source,
            self.kernels,
            self.target,
            self.tflm_build.as_deref().unwrap_or("none"),
            self.model_digest
        )
    }

    /// The `memtrace_plan` metadata text of this provenance.
    pub(crate) fn to_metadata(&self) -> Result<Vec<u8>> {
        Ok(serde_json::to_vec(self)?)
    }
}

/// Digest of the `.tflite` bytes of `model`: a file's bytes as they are, a
/// zoo model's export with seed-1 weights (the weights `plan` uses).
pub fn model_digest(model: &ModelFile) -> Result<String> {
    Ok(match model.source.is_zoo() && model.seed != 1 {
        true => digest(&model.source.bytes(1)?),
        false => digest(&model.given),
    })
}

/// Digest of the TFLM runner built with `kernels` for `target`, if built.
pub fn tflm_build(target: Arch, kernels: Kernels) -> Option<String> {
    let path = harness_guest(target, kernels.runner_file(), "").ok()?;
    std::fs::read(path).ok().map(|b| digest(&b))
}

/// Whose the `OfflineMemoryAllocation` a model carries is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "origin", rename_all = "snake_case")]
pub enum EmbeddedOrigin {
    /// Written by `memtrace plan --emit-offline`, with its provenance.
    Memtrace(PlanProvenance),
    /// No (readable) `memtrace_plan` entry: made by something else.
    Unknown,
}

impl EmbeddedOrigin {
    /// The origin of the offline plan `model` carries, if it carries one;
    /// an unreadable `memtrace_plan` entry is an unknown origin.
    pub fn of(model: &ModelFile) -> Option<EmbeddedOrigin> {
        model.offline.as_ref()?;
        Some(
            model
                .plan_note
                .as_ref()
                .and_then(|text| serde_json::from_slice(&text[..]).ok())
                .map_or(EmbeddedOrigin::Unknown, EmbeddedOrigin::Memtrace),
        )
    }

    /// Words for reports: `memtrace's plan (...)` or `of unknown origin`.
    pub fn describe(&self) -> String {
        match self {
            EmbeddedOrigin::Memtrace(p) => format!("memtrace's plan ({})", p.summary()),
            EmbeddedOrigin::Unknown => {
                "of unknown origin (no memtrace_plan metadata: not written by memtrace)".into()
            }
        }
    }

    /// The loud warning for running a model whose embedded plan was made
    /// by memtrace for other kernels than `kernels`, if it was: what is
    /// wrong, then `advice`.
    pub(crate) fn foreign_kernels_warning(&self, kernels: Kernels, advice: &str) -> Option<String> {
        let EmbeddedOrigin::Memtrace(p) = self else {
            return None;
        };
        (p.kernels != kernels.name()).then(|| {
            format!(
                "the model's embedded offline plan (OfflineMemoryAllocation) was made by memtrace \
                 for the {} kernels, but it runs on the {} kernels: its overlaps may corrupt data \
                 on {}. {advice}",
                p.kernels,
                kernels.name(),
                kernels.name()
            )
        })
    }

    /// What `run` advises about a plan made for other kernels.
    pub(crate) fn run_advice(kernels: Kernels) -> String {
        let k = kernels.name();
        format!(
            "Re-plan for them (`memtrace plan MODEL --kernels {k} --emit-offline OUT`) or check \
             it (`memtrace verify MODEL --kernels {k}`)"
        )
    }
}

/// Which plan of a `plan` document with several to take (`verify --plan
/// --planner P [--overlap O]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanPick {
    /// The planner.
    pub planner: PlannerKind,
    /// The O_s source: `none` picks the row without overlaps; any other
    /// (or none given) the row with them, when the planner has both.
    pub overlap: Option<OverlapChoice>,
}

/// A `plan --format json` document, as far as `verify --plan` reads it.
#[derive(Deserialize)]
struct Document {
    plans: Vec<DocumentPlan>,
    kernels: Option<String>,
    provenance: Option<PlanProvenance>,
}

#[derive(Deserialize)]
struct DocumentPlan {
    planner: String,
    overlap: String,
    peak_bytes: Option<u64>,
    tensors: Vec<DocumentTensor>,
}

#[derive(Deserialize)]
struct DocumentTensor {
    name: String,
    offset: u64,
}

/// A `plan` document turned into a plain plan file (`{"tensors",
/// "arena_bytes", "kernels"}`), the provenance it carries, and which of its
/// plans was taken. `None` when `text` is not a `plan` document (no
/// `"plans"`).
pub(crate) struct FromDocument {
    /// The plain plan file.
    pub file: serde_json::Value,
    /// The document's provenance.
    pub provenance: Option<PlanProvenance>,
    /// Which plan was taken (`exact (analytic O_s)`), for the report.
    pub taken: String,
    /// Why that one, for the report.
    pub why: String,
}

/// Reads `text` as a `plan` document, if it is one (see [`FromDocument`]).
/// One plan: that plan. Several: `pick`'s, or without one the plan
/// `--emit-offline` writes (the smallest arena).
pub(crate) fn from_document(text: &str, pick: Option<PlanPick>) -> Result<Option<FromDocument>> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| failed!("not a plan file: {e}"))?;
    if value.get("steps").is_some() && value.get("base").is_some() {
        bail!(
            "a TinySeg plan transforms the model (spill and fetch operators), so its placement \
             is not one of the model's own tensors: verify it with `memtrace verify MODEL \
             --planner tinyseg`"
        );
    }
    if value.get("plans").is_none() {
        if let Some(p) = pick {
            bail!(
                "--planner {} picks one plan of a `memtrace plan --format json` document; this \
                 file is a single placement",
                p.planner.name()
            );
        }
        return Ok(None);
    }
    let doc: Document =
        serde_json::from_value(value).map_err(|e| failed!("not a `plan` document: {e}"))?;
    check_consistent(&doc)?;
    let applicable: Vec<&DocumentPlan> = doc
        .plans
        .iter()
        .filter(|p| p.peak_bytes.is_some() && !p.tensors.is_empty())
        .collect();
    let (plan, why) = choose(&applicable, pick, doc.plans.len())?;
    let tensors: Vec<serde_json::Value> = plan
        .tensors
        .iter()
        .map(|t| serde_json::json!({"name": t.name, "offset": t.offset}))
        .collect();
    let kernels = doc
        .kernels
        .or_else(|| doc.provenance.as_ref().map(|p| p.kernels.clone()));
    Ok(Some(FromDocument {
        file: serde_json::json!({
            "tensors": tensors,
            "arena_bytes": plan.peak_bytes,
            "kernels": kernels,
        }),
        provenance: doc.provenance,
        taken: format!("{} ({} O_s)", plan.planner, plan.overlap),
        why,
    }))
}

/// Refuses a `plan` document that contradicts itself: a top-level
/// `"kernels"` other than its `"provenance.kernels"` (which library the
/// plan is for cannot be told), or a `"provenance.tflm_build"` that does
/// not name one build per core of `"provenance.target"` (which build a core
/// was planned with cannot be told).
fn check_consistent(doc: &Document) -> Result<()> {
    let Some(p) = &doc.provenance else {
        return Ok(());
    };
    if let Some(kernels) = doc.kernels.as_deref().filter(|&k| k != p.kernels) {
        bail!(
            "the `plan` document contradicts itself: \"kernels\" is \"{kernels}\" but              \"provenance.kernels\" is \"{}\" (re-plan rather than edit a plan document)",
            p.kernels
        );
    }
    if let Some(builds) = &p.tflm_build {
        let targets = p.target.split(',').count();
        let named = builds.split(',').filter(|b| !b.trim().is_empty()).count();
        if named != targets || builds.split(',').count() != targets {
            bail!(
                "the `plan` document's \"provenance.tflm_build\" names {named} TFLM build(s) for                  the {targets} target(s) of \"provenance.target\" (\"{}\"): it must name one                  build per target, comma-separated",
                p.target
            );
        }
    }
    Ok(())
}

/// The plan of `plans` to take, and why that one.
fn choose<'a>(
    plans: &[&'a DocumentPlan],
    pick: Option<PlanPick>,
    rows: usize,
) -> Result<(&'a DocumentPlan, String)> {
    let Some(pick) = pick else {
        let best = plans
            .iter()
            .min_by_key(|p| p.peak_bytes)
            .ok_or_else(|| failed!("the `plan` document has no applicable plan"))?;
        let why = if plans.len() == 1 {
            "its only plan".to_string()
        } else {
            format!(
                "the smallest of its {rows} plans, the one --emit-offline writes (--planner picks \
                 another)"
            )
        };
        return Ok((best, why));
    };
    let rows: Vec<&&DocumentPlan> = plans
        .iter()
        .filter(|p| p.planner == pick.planner.name())
        .collect();
    let without = pick.overlap == Some(OverlapChoice::None);
    let chosen = rows
        .iter()
        .find(|p| (p.overlap == "none") == without)
        .or(rows.first())
        .ok_or_else(|| {
            let known: Vec<String> = plans
                .iter()
                .map(|p| format!("{} ({} O_s)", p.planner, p.overlap))
                .collect();
            failed!(
                "the `plan` document has no applicable {} plan (it has: {})",
                pick.planner.name(),
                known.join(", ")
            )
        })?;
    Ok((chosen, "the one --planner names".to_string()))
}

/// Compares a plan's provenance with the run's: a plan made from another
/// model or for another target is refused, naming both; a plan made with
/// another TFLM build gives a warning (returned).
pub(crate) fn check_provenance(
    made: &PlanProvenance,
    model: &ModelFile,
    target: Arch,
    kernels: Kernels,
) -> Result<Vec<String>> {
    let digest = model_digest(model)?;
    if made.model_digest != digest {
        bail!(
            "the plan was made for another model: its model digest is {}, {}'s is {digest} \
             (re-plan with `memtrace plan {}`)",
            made.model_digest,
            model.source,
            model.source
        );
    }
    let Some(index) = made.target_index(target) else {
        bail!(
            "the plan was made for target {}, not {} (--target): its scratch buffers and O_s are \
             another target's kernels' (verify on {}, or plan with --target {},{})",
            made.target,
            target.name(),
            made.target,
            made.target,
            target.name()
        );
    };
    let mut warnings = Vec::new();
    let here = tflm_build(target, kernels);
    let made_here = made
        .tflm_build
        .as_deref()
        .and_then(|b| b.split(',').nth(index));
    if let (Some(a), Some(b)) = (made_here, &here) {
        if a != b && made.kernels == kernels.name() {
            warnings.push(format!(
                "the plan was made with another TFLM build (runner digest {a}, this one {b}): \
                 its scratch buffers may differ"
            ));
        }
    }
    Ok(warnings)
}

/// `cortex-m0,cortex-m4`: the names of `targets`, comma-separated.
fn join_names(targets: &[Arch]) -> String {
    targets
        .iter()
        .map(|t| t.name())
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A document with `exact` (analytic, 96 B), `dmo-heap` without
    /// overlaps (128 B) and with them (96 B), and a not-applicable row.
    const DOC: &str = r#"{"model": "m", "kernels": "tflm", "plans": [
        {"planner": "dmo-heap", "overlap": "none", "peak_bytes": 128,
         "tensors": [{"name": "a", "offset": 0}]},
        {"planner": "dmo-heap", "overlap": "analytic", "peak_bytes": 96,
         "tensors": [{"name": "a", "offset": 32}]},
        {"planner": "reorder", "overlap": "analytic", "peak_bytes": null, "tensors": []},
        {"planner": "exact", "overlap": "analytic", "peak_bytes": 96,
         "tensors": [{"name": "a", "offset": 64}]}]}"#;

    fn offset(d: &FromDocument) -> u64 {
        d.file["tensors"][0]["offset"].as_u64().unwrap()
    }

    #[test]
    fn the_smallest_plan_is_taken_first_of_equals_as_emit_offline() {
        let d = from_document(DOC, None).unwrap().unwrap();
        assert_eq!(d.taken, "dmo-heap (analytic O_s)");
        assert_eq!(offset(&d), 32);
        assert_eq!(d.file["arena_bytes"], 96);
        assert_eq!(d.file["kernels"], "tflm");
        assert!(d.why.contains("smallest of its 4 plans"), "{}", d.why);
    }

    #[test]
    fn planner_and_overlap_pick_a_row() {
        let pick = |planner, overlap| {
            from_document(DOC, Some(PlanPick { planner, overlap })).map(|d| d.unwrap())
        };
        assert_eq!(offset(&pick(PlannerKind::Exact, None).unwrap()), 64);
        assert_eq!(offset(&pick(PlannerKind::DmoHeap, None).unwrap()), 32);
        let none = pick(PlannerKind::DmoHeap, Some(OverlapChoice::None)).unwrap();
        assert_eq!(offset(&none), 0);
        let e = pick(PlannerKind::Reorder, None).err().unwrap().to_string();
        assert!(e.contains("no applicable reorder plan"), "{e}");
        assert!(e.contains("exact (analytic O_s)"), "{e}");
    }

    #[test]
    fn a_plain_placement_is_no_document_and_has_nothing_to_pick() {
        let plain = r#"{"tensors": []}"#;
        assert!(from_document(plain, None).unwrap().is_none());
        let pick = PlanPick {
            planner: PlannerKind::Exact,
            overlap: None,
        };
        let e = from_document(plain, Some(pick)).err().unwrap().to_string();
        assert!(
            e.contains("--planner exact") && e.contains("single placement"),
            "{e}"
        );
        let e = from_document("{", None).err().unwrap().to_string();
        assert!(e.starts_with("not a plan file"), "{e}");
    }

    /// [`DOC`] with a `provenance` block of `kernels`, `target` and
    /// `tflm_build`.
    fn with_provenance(kernels: &str, target: &str, tflm_build: Option<&str>) -> String {
        let mut doc: serde_json::Value = serde_json::from_str(DOC).unwrap();
        doc["provenance"] = serde_json::json!({
            "memtrace_version": "0", "model_digest": "d", "kernels": kernels,
            "target": target, "runtime": "tflm", "tflm_build": tflm_build,
            "overlap_source": "traced",
        });
        doc.to_string()
    }

    #[test]
    fn a_document_whose_kernels_disagree_with_its_provenance_is_refused_naming_both() {
        let e = from_document(&with_provenance("cmsis-nn", "cortex-m4", None), None)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("\"kernels\" is \"tflm\"")
                && e.contains("\"provenance.kernels\" is \"cmsis-nn\""),
            "{e}"
        );
        assert!(from_document(&with_provenance("tflm", "cortex-m4", None), None).is_ok());
    }

    #[test]
    fn a_document_must_name_one_tflm_build_per_target() {
        for (target, builds) in [
            ("cortex-m4", "a,b"),
            ("cortex-m0,cortex-m4", "a"),
            ("cortex-m0,cortex-m4", "a,"),
            ("cortex-m4", ""),
        ] {
            let e = from_document(&with_provenance("tflm", target, Some(builds)), None)
                .err()
                .unwrap_or_else(|| panic!("{target} with builds `{builds}` was taken"))
                .to_string();
            assert!(
                e.contains("\"provenance.tflm_build\"") && e.contains(&format!("\"{target}\"")),
                "{e}"
            );
        }
        for (target, builds) in [
            ("cortex-m4", Some("a")),
            ("cortex-m0,cortex-m4", Some("a,b")),
        ] {
            assert!(from_document(&with_provenance("tflm", target, builds), None).is_ok());
        }
        assert!(from_document(&with_provenance("tflm", "cortex-m4", None), None).is_ok());
    }
}
