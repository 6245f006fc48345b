//! The kernel memory contract of `memtrace run` (`memtrace_analyzer::contract`):
//! exact PCs, source lines and symbol names for its violations, its warnings
//! and `--strict`.
//!
//! On the MMIO access path a violation found in a buffer access (or in a
//! stray write next to a buffer) carries the address of its block, not of
//! the instruction. The layers with such a violation are traced once more on
//! the hook path, which gives every access its instruction; clean layers,
//! and runs without violations, cost nothing extra.

use memtrace_analyzer::contract::{CallSite, ContractCheck, ContractReport};
use memtrace_analyzer::report::{LayerReport, RunReport};
use memtrace_tracer::debuginfo::{short_path, DebugInfo, Frame};
use memtrace_tracer::{AccessPath, ElfImage, Engine, Job, TraceOptions};

use crate::support::common::trace_with;
use crate::support::error::{Context, Result};

/// What a re-trace needs to run the guest exactly as before.
pub(crate) struct Rerun<'a> {
    pub image: &'a ElfImage,
    pub job: Option<Job>,
    /// Bytes written into guest memory before the run (a model run's model,
    /// inputs and mailbox).
    pub preload: Vec<(u64, Vec<u8>)>,
    pub max_instructions: u64,
    /// Code of the runtime around the kernels (a TFLM runner's interpreter).
    pub runtime_code: Vec<(u64, u64)>,
    /// Names of all layers the guest opened, in order.
    pub layers: &'a [String],
    /// The engine the run used, which the re-trace uses too.
    pub engine: Engine,
}

/// Completes the contract reports of a run on `access`: exact PCs (re-tracing
/// the layers that need it), then function, file:line and symbol names.
pub(crate) fn finish(
    rerun: Rerun<'_>,
    access: AccessPath,
    mut contracts: Vec<ContractReport>,
) -> Result<Vec<ContractReport>> {
    let inexact: Vec<usize> = contracts
        .iter()
        .filter(|c| c.violations_with_pc().next().is_some())
        .map(|c| c.index)
        .collect();
    if access == AccessPath::Mmio && !inexact.is_empty() {
        for exact in retrace(&rerun, &inexact)? {
            if let Some(c) = contracts.iter_mut().find(|c| c.index == exact.index) {
                *c = exact;
            }
        }
    }
    locate(rerun.image, &mut contracts);
    Ok(contracts)
}

/// The contract of the layers at `indices`, traced on the hook path.
fn retrace(rerun: &Rerun<'_>, indices: &[usize]) -> Result<Vec<ContractReport>> {
    let mut names: Vec<String> = indices
        .iter()
        .filter_map(|&i| rerun.layers.get(i).cloned())
        .collect();
    names.dedup();
    let mut check = ContractCheck::with_runtime_code(rerun.runtime_code.clone());
    trace_with(
        rerun.image,
        TraceOptions {
            job: rerun.job.clone(),
            preload: rerun.preload.clone(),
            layers: Some(names),
            max_instructions: rerun.max_instructions,
            access: AccessPath::Hooks,
            stray_writes: rerun.engine == Engine::Unicorn,
            engine: rerun.engine.clone(),
            ..TraceOptions::default()
        },
        &mut [&mut check],
    )
    .with_context(|| "re-tracing the layers with contract violations for their exact PCs")?;
    Ok(check
        .layers
        .into_iter()
        .filter(|c| indices.contains(&c.index))
        .collect())
}

/// Fills in function and file:line of every violation's PC and of the calls
/// that led to it, and the symbol (and offset into it) that each stray write
/// hit.
pub(crate) fn locate(image: &ElfImage, contracts: &mut [ContractReport]) {
    let mut debug: Option<DebugInfo> = None;
    for c in contracts {
        if let Some(v) = c.stray_write.first.as_mut() {
            if let Some((name, offset)) = v.address.and_then(|a| image.object_at(a)) {
                v.buffer = Some(name.to_owned());
                v.offset = offset;
            }
        }
        for v in c.violations_with_pc_mut() {
            let debug = debug.get_or_insert_with(|| DebugInfo::load(image));
            let pc = v.pc.unwrap_or(0);
            let at = debug.locate(image, pc);
            v.function = at.function;
            v.file = at.file;
            v.line = at.line;
            v.callers = call_sites(debug, image, pc, &v.return_addresses);
        }
    }
}

/// The calls that led to `pc` (inlined functions, then the unwound
/// callers at their calls), with the full source paths that tell library
/// code from the program's.
fn call_sites(debug: &DebugInfo, image: &ElfImage, pc: u64, returns: &[u64]) -> Vec<CallSite> {
    let mut sites = Vec::new();
    let mut push = |frames: Vec<Frame>| {
        sites.extend(frames.into_iter().map(|f| CallSite {
            function: f.function,
            file: f.file.as_deref().map(short_path),
            line: f.line,
            path: f.file,
        }))
    };
    push(debug.frames(image, pc).into_iter().skip(1).collect());
    for &ra in returns {
        push(debug.frames(image, ra.saturating_sub(1)));
    }
    sites
}

/// Takes the unused scratch of the layers that ran a kernel library as that
/// library's own padding: information, not a violation (`--strict` passes
/// correct code on every kernel library). Needs the layers' attribution.
pub(crate) fn excuse_library_scratch(layers: &mut [LayerReport]) {
    for layer in layers {
        let library = layer.attribution.as_ref().map(|a| a.library);
        if let (Some(c), Some(library)) = (layer.contract.as_mut(), library) {
            if library.is_kernel_library() {
                c.excuse_library_scratch();
            }
        }
    }
}

/// One warning per broken rule of each layer; a note for unused scratch of
/// a kernel library's own sizing.
pub fn warnings(report: &RunReport) -> Vec<String> {
    let mut lines = Vec::new();
    for layer in &report.layers {
        let Some(c) = &layer.contract else { continue };
        if let (true, Some(v)) = (c.library_scratch, &c.scratch_unused.first) {
            lines.push(format!(
                "note: layer `{}`: scratch `{}` bytes {}..{} ({} B) never written: the kernel \
                 library's own padding of the size it asks for (information, not a violation)",
                layer.name,
                v.buffer.as_deref().unwrap_or("?"),
                v.offset,
                v.offset + v.size,
                v.size
            ));
        }
        lines.extend(
            broken_rules(c, &[])
                .into_iter()
                .map(|rule| format!("WARNING: layer `{}`: memory contract: {rule}", layer.name)),
        );
    }
    lines
}

/// Each broken rule of a layer's contract, e.g. "stray_write: 4 B store to
/// …, 4 B past the end of `scratch0`, at … memcpy (…), called from
/// `probe_invoke` (…) (4 violation(s); in all they reach 16 B past the end
/// of `scratch0`)"; the rules named in `skip` left out.
pub fn broken_rules(c: &ContractReport, skip: &[&str]) -> Vec<String> {
    let mut lines = Vec::new();
    for (rule, r) in c.violated().filter(|(rule, _)| !skip.contains(rule)) {
        if let Some(v) = &r.first {
            // Where all of a layer's stray writes reach, when the first
            // does not say it alone.
            let reach: Vec<String> = c
                .stray_reach
                .iter()
                .filter(|n| rule == "stray_write" && v.nearest.as_ref() != Some(*n))
                .map(|n| n.describe())
                .collect();
            let reach = if reach.is_empty() {
                String::new()
            } else {
                format!("; in all they reach {}", reach.join(" and "))
            };
            lines.push(format!(
                "{rule}: {} ({} violation(s){reach})",
                v.describe(),
                r.violations
            ));
        }
    }
    lines
}

/// Layers that break at least one rule of the memory contract.
pub(crate) fn broken_layers(report: &RunReport) -> usize {
    report
        .layers
        .iter()
        .filter(|l| l.contract.as_ref().is_some_and(|c| !c.ok))
        .count()
}
