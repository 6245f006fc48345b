//! The plan under test: a planner's plan, a `--plan` file (a plain
//! placement or a `plan --format json` document, its provenance checked
//! against the run), the offline plan the model carries, or TinySeg's
//! transformed model.

use memtrace_abi::runner::TflmResult;
use memtrace_model::planner::{self, Overlaps, PlanOptions};
use memtrace_model::source::ModelFile;
use memtrace_model::Model;

use super::report::{head_offset, EMBEDDED};
use super::VerifyOptions;
use crate::runtime::kernels::Kernels;
use crate::runtime::plan_file::{check_provenance, from_document};
use crate::support::error::{Context, Result};
use crate::{bail, failed};
use serde::Deserialize;

/// The placement under test: offline offsets of every tensor (-1 for TFLM
/// to place), the arena it needs, and who made it.
pub(super) struct UnderTest {
    pub(super) offsets: Vec<i64>,
    pub(super) arena: u64,
    pub(super) planner: String,
    pub(super) overlap: String,
}

impl UnderTest {
    /// What an error calls this plan: the file it came from, or its planner.
    pub(super) fn label(&self) -> String {
        match self.planner.as_str() {
            "file" => self.overlap.clone(),
            EMBEDDED => "the model's embedded offline plan".into(),
            p => format!("the {p} plan"),
        }
    }
}

/// `--plan FILE`: the listed tensors at their offsets, every other arena
/// tensor where TFLM's own plan put it; with the warnings to give: the plan
/// was made for other kernels (`--allow-foreign-plan`), or it moves a
/// scratch tensor (index `graph_tensors` on), which TFLM places itself.
pub(super) fn plan_from_file(
    req: &VerifyOptions,
    file: &ModelFile,
    path: &std::path::Path,
    model: &Model,
    reference: &[Option<u64>],
    graph_tensors: usize,
) -> Result<(UnderTest, Vec<String>, Option<String>)> {
    let read = read_plan_file(path, file, model, reference, req)?;
    let (offsets, arena) = (read.offsets, read.arena);
    let mut warnings = read.warnings;
    let names = model.tensor_names();
    // A `plan` document's scratch offsets are memtrace's model of TFLM's,
    // not a user's choice: TFLM placing them itself is no news.
    let scratch_from = match read.taken {
        Some(_) => offsets.len(),
        None => graph_tensors,
    };
    for t in scratch_from..offsets.len().min(reference.len()) {
        if let (Some(o), Some(r)) = (offsets[t], reference[t]) {
            if o != r {
                warnings.push(format!(
                    "{}: scratch tensor `{}` at offset {o} is not given to TFLM, which places \
                     scratch buffers itself (at {r} in its own plan); the shadow map checks \
                     where it put it",
                    path.display(),
                    names[t]
                ));
            }
        }
    }
    let under_test = UnderTest {
        offsets: offsets.iter().map(|o| o.map_or(-1, |v| v as i64)).collect(),
        arena,
        planner: "file".into(),
        // Names the file, and which plan of a `plan` document was taken.
        overlap: match &read.taken {
            Some((taken, _)) => format!("{}: {taken}", path.display()),
            None => path.display().to_string(),
        },
    };
    let taken = read
        .taken
        .map(|(taken, why)| format!("{}: took {taken}, {why}", path.display()));
    Ok((under_test, warnings, taken))
}

/// Where TFLM's own plan put each tensor memtrace plans (`None` for the
/// others): the offsets a plan file's unlisted tensors keep. A variable
/// tensor lives in TFLM's persistent tail, not its head; giving it its
/// reference address as a head offset would ask TFLM for a head reaching
/// into the tail, so it stays TFLM's to place.
pub(super) fn planned_reference_offsets(model: &Model, reference: &TflmResult) -> Vec<Option<u64>> {
    let mut offsets: Vec<Option<u64>> = (0..model.tensors.len())
        .map(|t| {
            let tensor = &model.tensors[t];
            let planned = !tensor.is_constant && !tensor.is_variable && !tensor.in_storage;
            head_offset(reference, t)
                .filter(|&o| planned && o.saturating_add(tensor.bytes) <= reference.head_bytes)
        })
        .collect();
    // A scratch tensor stands for its operator's scratch buffers: where
    // TFLM put the first of them.
    for (op, o) in model.ops.iter().enumerate() {
        let Some(t) = o.scratch else { continue };
        offsets[t] = reference
            .scratch
            .iter()
            .filter(|s| s.op as usize == op)
            .filter_map(|s| s.offset.checked_sub(reference.head_offset))
            .min();
    }
    offsets
}

/// TinySeg's plan of its transformed model, as the plan under test.
pub(super) fn tinyseg_under_test(
    req: &VerifyOptions,
    tinyseg: Option<&super::tinyseg::TinysegPlan>,
) -> Result<UnderTest> {
    let t = tinyseg.ok_or_else(|| failed!("no TinySeg plan"))?;
    Ok(UnderTest {
        offsets: t.offsets.clone(),
        arena: t.arena,
        planner: format!("tinyseg+{}", req.spill.base.name()),
        overlap: t.optimized.plan.overlap.clone(),
    })
}

/// The offline plan the model carried (its `OfflineMemoryAllocation`), as
/// the plan under test: `offsets` has one entry per tensor of the model's
/// graph (the scratch tensors after them stay TFLM's to place).
pub(super) fn embedded_plan(model: &Model, offsets: &[i64]) -> Result<UnderTest> {
    if offsets.len() > model.tensors.len() {
        bail!(
            "the model's OfflineMemoryAllocation has {} offsets, its graph {} tensors",
            offsets.len(),
            model.tensors.len()
        );
    }
    let arena = offsets
        .iter()
        .zip(&model.tensors)
        .filter_map(|(&o, t)| u64::try_from(o).ok().map(|o| o.saturating_add(t.bytes)))
        .max()
        .unwrap_or(0);
    Ok(UnderTest {
        offsets: offsets.to_vec(),
        arena,
        planner: EMBEDDED.into(),
        overlap: "OfflineMemoryAllocation".into(),
    })
}

/// The planner's placement, in the model's operator order (TFLM's).
pub(super) fn plan_from_planner(
    req: &VerifyOptions,
    model: &Model,
    traced: &memtrace_model::planner::TracedOverlaps,
) -> Result<UnderTest> {
    let overlaps = match req.overlap.method() {
        None => Overlaps::compute(model, traced),
        Some(method) => Overlaps::compute(model, &method),
    };
    let options = PlanOptions {
        model_order_only: true,
        ..PlanOptions::default()
    };
    let plan = match req.planner {
        Some(kind) => planner::run(model, kind, &overlaps, &options)?,
        None => planner::report::best(model, &overlaps, &options)?
            .ok_or_else(|| failed!("no planner applies to this model"))?,
    };
    let name = plan.planner.name();
    if plan.tensors.is_empty() {
        bail!(
            "planner {name} does not apply to this model: {}",
            plan.note.clone().unwrap_or_default()
        );
    }
    if plan.order.iter().enumerate().any(|(i, &op)| i != op) {
        bail!(
            "planner {name} reorders operators; TFLM runs them in the model's order, so its plan \
             cannot be given to TFLM"
        );
    }
    Ok(UnderTest {
        offsets: plan.offline_offsets(model),
        arena: plan.arena_bytes(model),
        planner: name.into(),
        overlap: plan.overlap.clone(),
    })
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
/// cannot be told. With `other_cores_scratch` (a plan made for several
/// cores), an operator's scratch tensor (`…/scratch`) that `model` lacks is
/// passed over: that operator asks for scratch on another core, not on this
/// one.
pub fn placement_from_plan(
    model: &Model,
    reference: &[Option<u64>],
    text: &str,
    other_cores_scratch: bool,
) -> Result<(Vec<Option<u64>>, u64)> {
    let names = model.tensor_names();
    let file: PlanFile = serde_json::from_str(text).map_err(|e| failed!("not a plan file: {e}"))?;
    let mut offsets = reference.to_vec();
    let mut listed = vec![false; names.len()];
    for t in &file.tensors {
        let found = plan_tensor_index(&names, &t.name);
        if found.is_none() && other_cores_scratch && t.name.ends_with("/scratch") {
            continue;
        }
        let i = found.ok_or_else(|| failed!("no tensor `{}`", t.name))?;
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
/// [`crate::runtime::plan_file::from_document`]; its provenance must match the run's
/// model and target, its kernels the run's unless `--allow-foreign-plan`).
pub(crate) fn read_plan_file(
    path: &std::path::Path,
    file: &ModelFile,
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
    let several_cores = doc
        .as_ref()
        .and_then(|d| d.provenance.as_ref())
        .is_some_and(|p| p.target.contains(','));
    let (text, taken) = match doc {
        Some(d) => {
            if let Some(p) = &d.provenance {
                warnings.extend(
                    check_provenance(p, file, req.target, req.kernels)
                        .with_context(|| path.display().to_string())?,
                );
            }
            (d.file.to_string(), Some((d.taken, d.why)))
        }
        None => (text, None),
    };
    warnings.extend(check_plan_kernels(path, &text, req)?);
    let (offsets, arena) = placement_from_plan(model, reference, &text, several_cores)
        .with_context(|| path.display().to_string())?;
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
pub(crate) fn plan_kernels(text: &str) -> Result<Option<Kernels>> {
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
pub(crate) fn check_plan_kernels(
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
