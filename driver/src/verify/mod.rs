//! Whole-model verification (`memtrace verify`): a plan proven by running
//! the model under it on real TensorFlow Lite Micro ([`tflm`]; TinySeg's
//! transformed models in `tflm_tinyseg`). This module holds the request and
//! the placement files it may name instead of a planner.

pub mod tflm;
mod tflm_tinyseg;

use std::path::PathBuf;

use memtrace_model::planner::PlannerKind;
use memtrace_model::Model;
use memtrace_tracer::Arch;
use serde::Deserialize;

use crate::error::{Context, Result};
use crate::kernels::Kernels;
use crate::plan_file::{check_provenance, from_document, PlanPick};
use crate::provenance::OverlapChoice;
use crate::spill::SpillOptions;
use crate::trace_cache::TraceCache;
use crate::{bail, failed};

/// What to verify, and how.
#[derive(Debug, Clone)]
pub struct VerifyOptions {
    /// `MODEL.tflite` or `zoo:NAME`.
    pub model: String,
    /// Planner of the verified plan; `None`: the smallest plan of every
    /// planner ([`memtrace_model::planner::report::best`]), the one
    /// `plan --emit-offline` writes.
    pub planner: Option<PlannerKind>,
    /// O_s source of the plan.
    pub overlap: OverlapChoice,
    /// A placement file to verify instead of a planner's plan.
    pub plan: Option<PathBuf>,
    /// Seed of the generated input (and of zoo weights).
    pub seed: u64,
    /// Raw bytes of the graph inputs, concatenated in input order.
    pub input: Option<PathBuf>,
    /// Architecture of the runner.
    pub target: Arch,
    /// Kernel library of the runner.
    pub kernels: Kernels,
    /// Library whose traces give the plan's traced O_s (default: `kernels`).
    pub overlap_kernels: Option<Kernels>,
    /// The TFLM runner ELF (default: `harness-c/build/TARGET/` and the
    /// library's runner file).
    pub runner: Option<PathBuf>,
    /// Arena-wide trace picture of both runs.
    pub plot: Option<PathBuf>,
    /// Also time the plan's program without hooks.
    pub baseline: bool,
    /// Instruction budget of each run.
    pub max_instructions: u64,
    /// TinySeg's base planner and target (with `planner` = `tinyseg`).
    pub spill: SpillOptions,
    /// Check a `plan` file made for another kernel library than `kernels`
    /// (with a warning) instead of refusing it.
    pub allow_foreign_plan: bool,
    /// Runs kept from earlier verifies ([`crate::trace_cache::TraceCache`]).
    pub cache: TraceCache,
    /// Compare the outputs with the host oracle when one is installed
    /// (false: `--no-oracle`).
    pub oracle: bool,
    /// On real TFLM, verify the offline plan the model carries
    /// (`OfflineMemoryAllocation`) when it has one, instead of planning
    /// (the command line's choice when neither `--plan` nor `--planner`
    /// nor `--overlap` is given).
    pub embedded_plan: bool,
    /// Which plan of a `plan --format json` document with several `--plan`
    /// takes (`--planner` with `--plan`; default: the smallest, the one
    /// `--emit-offline` writes).
    pub pick: Option<PlanPick>,
}

impl VerifyOptions {
    /// The host oracle's Python when this verify compares with it.
    pub fn oracle_python(&self) -> Option<PathBuf> {
        self.oracle.then(crate::oracle::python).flatten()
    }
}

/// A `--plan` file. Unknown keys are errors that name them (a misspelt
/// `"arena_btes"` must not be ignored).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanFile {
    tensors: Vec<PlanFileTensor>,
    arena_bytes: Option<u64>,
    /// The kernel library the plan was made for (`tflm`, `cmsis-nn`).
    kernels: Option<String>,
    /// The O_s source the plan was made with (`traced`, `analytic`, ...).
    #[allow(dead_code)]
    overlap: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanFileTensor {
    name: String,
    offset: u64,
}

/// The tensor offsets and arena size a plan file's `text` gives `model`
/// (`{"tensors": [{"name", "offset"}], "arena_bytes"}`): listed tensors at
/// their offsets, the others at their `reference` offsets; the arena
/// `arena_bytes`, which every placed tensor must fit (an error names the
/// first that does not), or without it the end of the last tensor.
///
/// A tensor is named as reports name it; an unnamed tensor N is `tensorN`,
/// and the older spelling `tensor_N` is accepted too. A tensor listed twice
/// (under either spelling) is an error naming it: which offset was meant
/// cannot be told.
pub fn placement_from_plan(
    model: &Model,
    reference: &[Option<u64>],
    text: &str,
) -> Result<(Vec<Option<u64>>, u64)> {
    let names = model.tensor_names();
    let file: PlanFile = serde_json::from_str(text).map_err(|e| failed!("not a plan file: {e}"))?;
    let mut offsets = reference.to_vec();
    let mut listed = vec![false; names.len()];
    for t in &file.tensors {
        let i =
            plan_tensor_index(&names, &t.name).ok_or_else(|| failed!("no tensor `{}`", t.name))?;
        if std::mem::replace(&mut listed[i], true) {
            let spelling = if t.name == names[i] {
                String::new()
            } else {
                format!(" (the second time as `{}`)", t.name)
            };
            bail!(
                "tensor `{}` is listed twice in the plan{spelling}: give each tensor one offset",
                names[i]
            );
        }
        if offsets[i].is_none() {
            if model.tensors[i].is_variable {
                bail!(
                    "tensor `{}` is a variable tensor: it persists across runs outside the \
                     planned arena, so a plan cannot place it",
                    t.name
                );
            }
            bail!("tensor `{}` is not an arena tensor", t.name);
        }
        offsets[i] = Some(t.offset);
    }
    let mut end = 0u64;
    for (i, o) in offsets.iter().enumerate() {
        let Some(o) = *o else { continue };
        let bytes = model.tensors[i].bytes;
        let Some(e) = o.checked_add(bytes) else {
            bail!(
                "tensor `{}` at offset {o} + {bytes} bytes does not fit any arena",
                names[i]
            );
        };
        if let Some(arena) = file.arena_bytes.filter(|&a| e > a) {
            bail!(
                "tensor `{}` at offset {o} + {bytes} bytes ends at byte {e}, beyond the plan's \
                 \"arena_bytes\": {arena}",
                names[i]
            );
        }
        end = end.max(e);
    }
    Ok((offsets, file.arena_bytes.unwrap_or(end)))
}

/// A `--plan` file read for a run: the placement, and what the report says
/// about it.
pub(crate) struct PlanFileRead {
    /// Offsets by tensor index (unlisted tensors at the reference's).
    pub offsets: Vec<Option<u64>>,
    /// The plan's arena.
    pub arena: u64,
    /// Warnings (a plan for other kernels let through, another TFLM build).
    pub warnings: Vec<String>,
    /// With a `plan` document: which of its plans was taken, and why.
    pub taken: Option<(String, String)>,
}

/// Reads `--plan path` for `model` (unlisted tensors at `reference`): a
/// plain placement (`{"tensors", "arena_bytes", "kernels"}`) or the JSON
/// `memtrace plan --format json` writes, taken as is (one of its plans, see
/// [`crate::plan_file::from_document`]; its provenance must match the run's
/// model and target, its kernels the run's unless `--allow-foreign-plan`).
pub(crate) fn read_plan_file(
    path: &std::path::Path,
    model: &Model,
    reference: &[Option<u64>],
    req: &VerifyOptions,
) -> Result<PlanFileRead> {
    let text = memtrace_io::input::read_text_limited(
        path,
        memtrace_io::input::MAX_TEXT_FILE,
        "plan files",
    )?;
    let doc = from_document(&text, req.pick).with_context(|| path.display().to_string())?;
    let mut warnings = Vec::new();
    let (text, taken) = match doc {
        Some(d) => {
            if let Some(p) = &d.provenance {
                warnings.extend(
                    check_provenance(p, &req.model, req.target, req.kernels)
                        .with_context(|| path.display().to_string())?,
                );
            }
            (d.file.to_string(), Some((d.taken, d.why)))
        }
        None => (text, None),
    };
    warnings.extend(check_plan_kernels(path, &text, req)?);
    let (offsets, arena) =
        placement_from_plan(model, reference, &text).with_context(|| path.display().to_string())?;
    Ok(PlanFileRead {
        offsets,
        arena,
        warnings,
        taken,
    })
}

/// The index of the tensor a plan file calls `name`: the tensor so named,
/// or for `tensor_N` (the spelling older reports gave an unnamed tensor)
/// tensor N when it is unnamed (`tensorN`).
fn plan_tensor_index(names: &[String], name: &str) -> Option<usize> {
    if let Some(i) = names.iter().position(|n| n == name) {
        return Some(i);
    }
    let n: usize = name.strip_prefix("tensor_")?.parse().ok()?;
    (names.get(n)? == &format!("tensor{n}")).then_some(n)
}

/// The kernel library a plan file says it was made for (`"kernels"`), if it
/// says.
pub fn plan_kernels(text: &str) -> Result<Option<Kernels>> {
    let file: PlanFile = serde_json::from_str(text).map_err(|e| failed!("not a plan file: {e}"))?;
    file.kernels
        .map(|name| {
            Kernels::from_name(&name)
                .ok_or_else(|| failed!("unknown \"kernels\": \"{name}\" (known: tflm, cmsis-nn)"))
        })
        .transpose()
}

/// Checks the library a plan file (`text`, read from `path`) says it was
/// made for against the run's `--kernels`: an unknown name is an error; a
/// plan for another library is refused, or with `--allow-foreign-plan`
/// accepted with the warning returned (its overlaps were proven on the
/// other library's loop nests, not these).
pub fn check_plan_kernels(
    path: &std::path::Path,
    text: &str,
    req: &VerifyOptions,
) -> Result<Option<String>> {
    let Some(made_for) = plan_kernels(text).with_context(|| path.display().to_string())? else {
        return Ok(None);
    };
    if made_for == req.kernels {
        return Ok(None);
    }
    let what = format!(
        "{}: the plan was made for the {} kernels, not {} (--kernels): its overlaps may corrupt \
         data on {}",
        path.display(),
        made_for.name(),
        req.kernels.name(),
        req.kernels.name()
    );
    if !req.allow_foreign_plan {
        bail!(
            "{what}; pass --allow-foreign-plan to check it on {} anyway",
            req.kernels.name()
        );
    }
    Ok(Some(what))
}
