//! The TFLM runner guest: where it is ([`runner_path`]), loaded and checked
//! ([`load_runner`], [`target_runner`]), its regions and the code of TFLM's
//! runtime in it ([`runtime_code`]).

use std::path::{Path, PathBuf};

use memtrace_abi::runner::symbols;
use memtrace_model::graph::TfliteGraph;
use memtrace_tracer::{Arch, ElfImage};

use super::region;
use super::runner_build::{runner_for_model, OpsNeeded};
use crate::bail;
use crate::runtime::kernels::{check_built_with, harness_guest, Kernels};
use crate::support::error::Result;

/// The runner guest of `kernels` for `arch`, or the one the user named
/// (with `option`, which a missing harness build's error suggests). With
/// the operators a model `need`s, a source tree's runner that lacks them
/// is built first (`runtime::runner_build`).
pub(crate) fn runner_path(
    arch: Arch,
    kernels: Kernels,
    explicit: Option<&Path>,
    option: &str,
    need: Option<&OpsNeeded>,
) -> Result<PathBuf> {
    if kernels == Kernels::CmsisNn && !arch.has_cmsis_nn() {
        bail!(
            "--kernels cmsis-nn is not available on {arch}: CMSIS-NN is Arm's kernel library for \
             Cortex-M cores, and {arch} plans are made with TFLM's reference kernels \
             (--kernels tflm)"
        );
    }
    if let (None, Some(need)) = (explicit, need) {
        if let Some(path) = runner_for_model(arch, kernels, need)? {
            return Ok(path);
        }
    }
    match explicit {
        Some(p) => Ok(p.to_path_buf()),
        None => harness_guest(arch, kernels.runner_file(), option),
    }
}

/// The runner of `kernels` for `target` (or the one named with `option`;
/// built first for a model that `need`s operators it lacks), loaded and checked: a runner built with `kernels`, for `target`.
pub(crate) fn target_runner(
    target: Arch,
    kernels: Kernels,
    explicit: Option<&Path>,
    option: &str,
    need: Option<&OpsNeeded>,
) -> Result<(PathBuf, ElfImage)> {
    let path = runner_path(target, kernels, explicit, option, need)?;
    let image = load_runner(&path, kernels)?;
    if image.arch != target {
        bail!(
            "{} is a {} runner but --target is {}",
            path.display(),
            image.arch.name(),
            target.name()
        );
    }
    Ok((path, image))
}

/// The runner a model's command runs `graph` on: [`target_runner`] with
/// `--runner` (`explicit`), built first in a source tree for the model's
/// operators.
pub(crate) fn model_runner(
    target: Arch,
    kernels: Kernels,
    explicit: Option<&Path>,
    graph: &TfliteGraph,
) -> Result<(PathBuf, ElfImage)> {
    let need = OpsNeeded::of(graph);
    target_runner(target, kernels, explicit, "--runner", Some(&need))
}

/// Loads a runner guest and checks that it is one, built with `kernels`
/// (a report would otherwise name a library whose code never ran).
pub(crate) fn load_runner(path: &Path, kernels: Kernels) -> Result<ElfImage> {
    let image = ElfImage::load(path)?;
    if image.symbol(symbols::JOB).is_none() {
        bail!(
            "{} is no TFLM runner (it has no `{}`): pass a harness-c/build/*/tflm-runner*.elf",
            path.display(),
            symbols::JOB
        );
    }
    check_built_with(&image, kernels, "runner", kernels.runner_file())?;
    Ok(image)
}

/// The operators a runner built for some only registers (its
/// `memtrace_runner_ops`, the Add* names of TFLM's op resolver), or `None`
/// for a runner of every operator TFLM has.
pub(crate) fn runner_ops(image: &ElfImage) -> Option<Vec<String>> {
    let at = image.symbol("memtrace_runner_ops")?.address;
    let seg = image
        .segments
        .iter()
        .find(|s| (s.address..s.address + s.data.len() as u64).contains(&at))?;
    let bytes = &seg.data[(at - seg.address) as usize..];
    let text = &bytes[..bytes.iter().position(|&b| b == 0)?];
    let names = String::from_utf8_lossy(text);
    Some(
        names
            .split_whitespace()
            .map(|n| n.strip_prefix("Add").unwrap_or(n).to_owned())
            .collect(),
    )
}

/// What to add to TFLM's failure in `image` when the runner registers
/// only some operators: which, and how to build it with all of them.
pub(crate) fn narrowed_runner_note(image: &ElfImage) -> Option<String> {
    let ops = runner_ops(image)?;
    Some(format!(
        "; {} registers only {} (built with TFLM_OPS, as `make test`'s per-core runners are): \
         build it with every operator with `make -C harness-c {}` (TFLM_OPS=all)",
        image.path.display(),
        ops.join(", "),
        image.arch.name()
    ))
}

/// TFLM's runtime classes (mangled name components) whose code runs inside
/// an operator's window around the kernel: the interpreter loop and the
/// allocator resetting its temporary allocations after each operator.
const RUNTIME_CLASSES: [&str; 5] = [
    "26SingleArenaBufferAllocator",
    "14MicroAllocator",
    "21MicroInterpreterGraph",
    "23MicroInterpreterContext",
    "16MicroInterpreter",
];

/// Code ranges of TFLM's runtime in a runner: their writes inside a window
/// are the runtime's bookkeeping, not the kernel's
/// ([`memtrace_analyzer::contract::ContractCheck::with_runtime_code`]).
pub(crate) fn runtime_code(image: &ElfImage) -> Vec<(u64, u64)> {
    image
        .functions()
        .filter(|(_, _, name)| {
            name.starts_with("_ZN6tflite") && RUNTIME_CLASSES.iter().any(|c| name.contains(c))
        })
        .map(|(at, size, _)| (at, at + size.max(1)))
        .collect()
}

/// The runner's storage region of TinySeg's spilled tensors
/// (`memtrace_storage`..`memtrace_storage_end`): its guest address and
/// bytes.
pub(crate) fn runner_storage(image: &ElfImage) -> Result<(u64, u64)> {
    let r = region(
        image,
        memtrace_abi::symbols::STORAGE,
        memtrace_abi::symbols::STORAGE_END,
    )?;
    Ok((r.at, r.len))
}

/// Bytes of the runner's arena region (`memtrace_arena`..`memtrace_arena_end`):
/// the most TFLM can be given, so the bound for every size taken from a
/// model or a plan before anything is allocated for it.
pub(crate) fn runner_arena_bytes(image: &ElfImage) -> Result<u64> {
    Ok(region(image, symbols::ARENA, symbols::ARENA_END)?.len)
}
