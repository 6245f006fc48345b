//! What a firmware needs from a plan: the arena it must give TFLM, measured
//! on real TFLM at the boundary ([`measure_arena`]), the C header it
//! includes ([`header_text`], [`write_deployment`]) and the budget check
//! (`--fits`, [`parse_size`], [`Budget`]).
//!
//! The arena to allocate is not the head plus the tail TFLM reports:
//! `arena_used_bytes()` leaves out the alignment its allocator loses at the
//! arena's end. It is found by running TFLM's own `AllocateTensors()` in the
//! emulator, with arenas around head + tail, until N fits and N − 1 does not;
//! then one full run (`Invoke()`) at N confirms it. Every probe runs the
//! model on the inputs of the run whose plan it measures: real TFLM may abort
//! on other data (a synthetic model's SOFTMAX does on all-zero inputs, in
//! PyPI's TFLM as in the runner). The runner's arena starts
//! 16-byte aligned (`memtrace_arena`), as the header's
//! `alignas(16) static uint8_t arena[kTensorArenaSize]` does.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use memtrace_abi::tflm::{self, symbols, TflmJob};
use memtrace_tracer::{Arch, ElfImage};

use crate::common::{check_output, run_without_hooks};
use crate::error::Result;
use crate::kernels::Kernels;
use crate::tflm::{load_runner, runner_path};
use crate::trace_cache::TraceCache;
use crate::{bail, failed};

/// Alignment the header's arena buffer has (`alignas(16)`), and the one the
/// runner's arena region starts at: the measured size holds for it.
pub const ARENA_ALIGNMENT: u64 = 16;

/// The smallest arena with which TFLM allocates and runs a model.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArenaToAllocate {
    /// The arena a firmware must give TFLM (`kTensorArenaSize`): TFLM's
    /// `AllocateTensors()` and `Invoke()` succeed with it, and
    /// `AllocateTensors()` fails with one byte less.
    pub bytes: u64,
    /// The arena buffer's alignment this holds for (a buffer declared
    /// `alignas(16)`).
    pub alignment: u64,
    /// `arena_used_bytes()` TFLM reported in that arena.
    pub arena_used_bytes: u64,
    /// TFLM's head (planned tensors and scratch buffers) in that arena.
    pub head_bytes: u64,
    /// TFLM's tail (persistent buffers) in that arena.
    pub tail_bytes: u64,
    /// Kernels of the TFLM build measured.
    pub kernels: Kernels,
    /// Target of the TFLM build measured.
    pub target: Arch,
    /// The TFLM runner measured (file name).
    pub runner: String,
    /// SHA-256 of the runner ELF (its first 16 hex digits): the TFLM build,
    /// kernels and compiler the size holds for.
    pub runner_sha256: String,
    /// TFLM runs it took (allocation probes and the confirming run).
    pub runs: u32,
}

impl ArenaToAllocate {
    /// One line for tables and messages: the size and what it holds for.
    pub fn describe(&self) -> String {
        format!(
            "arena to allocate: {} B (alignas({}) buffer; TFLM head {} + tail {} = {} B used; \
             measured on TFLM {} kernels, {}, {} sha256 {})",
            self.bytes,
            self.alignment,
            self.head_bytes,
            self.tail_bytes,
            self.arena_used_bytes,
            self.kernels,
            self.target,
            self.runner,
            self.runner_sha256
        )
    }
}

/// A plan and the arena TFLM needs for it, as plan and verify state them.
#[derive(Clone, Debug, Serialize)]
pub struct MeasuredPlan {
    /// The planner whose plan was measured.
    pub planner: String,
    /// Its O_s source.
    pub overlap: String,
    /// The planner's head: the arena its tensors span.
    pub planned_bytes: u64,
    /// The arena to allocate, measured on real TFLM.
    pub arena: Option<ArenaToAllocate>,
    /// Why it was not measured (no TFLM runner, or TFLM refused the model).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_measured: Option<String>,
}

impl MeasuredPlan {
    /// Lines for a text report.
    pub fn to_text(&self) -> String {
        let head = format!(
            "{} planner (O_s: {}): head {} B",
            self.planner, self.overlap, self.planned_bytes
        );
        match (&self.arena, &self.not_measured) {
            (Some(a), _) => format!("{head}; {}\n", a.describe()),
            (None, Some(why)) => format!("{head}; arena to allocate not measured: {why}\n"),
            (None, None) => format!("{head}\n"),
        }
    }
}

/// What one allocation probe found.
enum Probe {
    /// `AllocateTensors()` succeeded: TFLM's arena use.
    Fits { used: u64, head: u64, tail: u64 },
    /// `AllocateTensors()` failed: TFLM's own message.
    TooSmall(String),
}

/// Where the runner's mailbox, model region and arena are.
struct RunnerLayout {
    job_at: u64,
    model_at: u64,
    model_len: u64,
    io_at: u64,
    io_len: u64,
    arena_len: u64,
}

fn symbol_address(image: &ElfImage, name: &str) -> Result<u64> {
    image
        .symbol(name)
        .map(|s| s.address)
        .ok_or_else(|| failed!("{} lacks `{name}`: rebuild it", image.path.display()))
}

impl RunnerLayout {
    fn of(image: &ElfImage) -> Result<RunnerLayout> {
        let at = |name| symbol_address(image, name);
        let span = |start, end| -> Result<u64> {
            let (s, e) = (at(start)?, at(end)?);
            e.checked_sub(s)
                .ok_or_else(|| failed!("{}: `{end}` lies below `{start}`", image.path.display()))
        };
        Ok(RunnerLayout {
            job_at: at(symbols::JOB)?,
            model_at: at(symbols::MODEL)?,
            model_len: span(symbols::MODEL, symbols::MODEL_END)?,
            io_at: at(symbols::IO)?,
            io_len: span(symbols::IO, symbols::IO_END)?,
            arena_len: span(symbols::ARENA, symbols::ARENA_END)?,
        })
    }
}

/// Instruction budget of the confirming run of the whole model.
const RUN_INSTRUCTIONS: u64 = 200_000_000_000;

/// Runs TFLM on `model` with an arena of `arena` bytes, the whole model on
/// `inputs` (every graph input's bytes, in order); `allocate_only` asks only that `AllocateTensors()` fitted.
/// (The runner has no stop after `AllocateTensors()`: an early return there
/// made the CMSIS-NN runner's operator names read empty, a difference in
/// its compiled code not yet explained, so every probe runs the model.) Exit code 4 (`AllocateTensors()` failed) is [`Probe::TooSmall`];
/// any other failure is an error.
fn probe(
    image: &ElfImage,
    layout: &RunnerLayout,
    model: &[u8],
    inputs: &[u8],
    arena: u64,
    allocate_only: bool,
) -> Result<Probe> {
    let job = TflmJob {
        model_bytes: model.len() as u32,
        arena_bytes: arena as u32,
        input_bytes: inputs.len() as u32,
        layers: false,
        weights: false,
    };
    let words = job.bytes();
    let mailbox = tflm::MEMTRACE_TFLM_WORDS as u64 * 4;
    let run = run_without_hooks(
        image,
        &[
            (layout.job_at, words),
            (layout.model_at, model.to_vec()),
            (layout.io_at, inputs.to_vec()),
        ],
        &[(layout.job_at, mailbox)],
        RUN_INSTRUCTIONS,
    )?;
    let reason = run.exit_reason.clone().unwrap_or_default();
    match run.exit_code as u32 {
        tflm::TFLM_EXIT_OK => {}
        tflm::TFLM_EXIT_ALLOCATE => return Ok(Probe::TooSmall(reason)),
        code => bail!(
            "TFLM on {} exited with code {code} with an arena of {arena} B: {reason}",
            image.path.display()
        ),
    }
    let word = |i: usize| -> u64 {
        run.memory[0]
            .get(i * 4..i * 4 + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u64)
            .unwrap_or(0)
    };
    let stage = word(tflm::TFLM_STAGE) as u32;
    let wanted = if allocate_only {
        tflm::TFLM_STAGE_ALLOCATED
    } else {
        tflm::TFLM_STAGE_INVOKED
    };
    if stage < wanted {
        bail!("the TFLM runner exited at stage {stage}, not {wanted}");
    }
    Ok(Probe::Fits {
        used: word(tflm::TFLM_ARENA_USED),
        head: word(tflm::TFLM_HEAD_BYTES),
        tail: word(tflm::TFLM_TAIL_BYTES),
    })
}

/// The smallest arena (from `start`, a guess) with which `fits` holds, and
/// the largest without: doubling steps away from `start` until the answer
/// changes, then bisection. `fits` must be monotone (more arena never
/// hurts), and hold at `ceiling`.
fn boundary(start: u64, ceiling: u64, mut fits: impl FnMut(u64) -> Result<bool>) -> Result<u64> {
    let start = start.clamp(1, ceiling);
    let (mut bad, mut good) = if fits(start)? {
        let mut good = start;
        let mut step = 8;
        loop {
            let lower = good.saturating_sub(step);
            if lower == 0 {
                break (0, good);
            }
            if !fits(lower)? {
                break (lower, good);
            }
            good = lower;
            step *= 2;
        }
    } else {
        let mut bad = start;
        let mut step = 8;
        loop {
            let higher = (bad + step).min(ceiling);
            if fits(higher)? {
                break (bad, higher);
            }
            if higher == ceiling {
                bail!("TFLM does not fit the model even in the runner's whole arena");
            }
            bad = higher;
            step *= 2;
        }
    };
    while good - bad > 1 {
        let mid = bad + (good - bad) / 2;
        if fits(mid)? {
            good = mid;
        } else {
            bad = mid;
        }
    }
    Ok(good)
}

/// Measures the arena a firmware must allocate for `model` (a `.tflite`,
/// with or without `OfflineMemoryAllocation`) run on `inputs` (every graph
/// input's bytes, in order) on the `target` TFLM runner of `kernels` (or
/// `runner`), or takes it from `cache` when this runner measured these
/// bytes before.
pub fn measure_arena(
    model: &[u8],
    inputs: &[u8],
    kernels: Kernels,
    target: Arch,
    runner: Option<&Path>,
    cache: &TraceCache,
) -> Result<ArenaToAllocate> {
    let path = runner_path(target, kernels, runner, "--runner")?;
    measure_arena_on(&load_runner(&path, kernels)?, model, inputs, kernels, cache)
}

/// [`measure_arena`] on a runner already loaded.
pub fn measure_arena_on(
    image: &ElfImage,
    model: &[u8],
    inputs: &[u8],
    kernels: Kernels,
    cache: &TraceCache,
) -> Result<ArenaToAllocate> {
    let key = TraceCache::key(
        "deploy-arena-to-allocate-v2",
        &[&image.bytes, model, inputs],
    );
    cache.fetch(&key, || measure_uncached(image, model, inputs, kernels))
}

/// [`measure_arena`] without the cache.
fn measure_uncached(
    image: &ElfImage,
    model: &[u8],
    inputs: &[u8],
    kernels: Kernels,
) -> Result<ArenaToAllocate> {
    let layout = RunnerLayout::of(image)?;
    if model.len() as u64 > layout.model_len {
        bail!(
            "the model ({} B) does not fit the runner's model region ({} B)",
            model.len(),
            layout.model_len
        );
    }
    if inputs.len() as u64 > layout.io_len {
        bail!(
            "the inputs ({} B) do not fit the runner's input region ({} B)",
            inputs.len(),
            layout.io_len
        );
    }
    let ceiling = layout.arena_len.min(u32::MAX as u64);
    let mut runs = 0u32;
    let mut allocate = |arena: u64| {
        runs += 1;
        probe(image, &layout, model, inputs, arena, true)
    };
    // TFLM's own figure in the whole arena is where the search starts.
    let start = match allocate(ceiling)? {
        Probe::Fits { used, .. } => used,
        Probe::TooSmall(reason) => bail!(
            "TFLM cannot allocate this model even in the runner's {ceiling} B arena: {reason}"
        ),
    };
    let bytes = boundary(start, ceiling, |arena| {
        Ok(matches!(allocate(arena)?, Probe::Fits { .. }))
    })?;
    runs += 1;
    let Probe::Fits { used, head, tail } = probe(image, &layout, model, inputs, bytes, false)?
    else {
        bail!("TFLM allocated the model in {bytes} B but failed to run it there");
    };
    Ok(ArenaToAllocate {
        bytes,
        alignment: ARENA_ALIGNMENT,
        arena_used_bytes: used,
        head_bytes: head,
        tail_bytes: tail,
        kernels,
        target: image.arch,
        runner: image
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        runner_sha256: sha256_prefix(&image.bytes),
        runs,
    })
}

/// The first 16 hex digits of the SHA-256 of `bytes`.
pub fn sha256_prefix(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A size in bytes as `--fits` takes it: `131072`, `128K`, `0.5M` (K and M
/// are 1024 and 1024², case-insensitive, an optional trailing `B`).
pub fn parse_size(text: &str) -> std::result::Result<u64, String> {
    let t = text.trim();
    let t = t
        .strip_suffix(['B', 'b'])
        .filter(|s| !s.is_empty())
        .unwrap_or(t);
    let (number, unit) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&t[..i], c.to_ascii_uppercase()),
        _ => (t, ' '),
    };
    let scale: u64 = match unit {
        ' ' => 1,
        'K' => 1 << 10,
        'M' => 1 << 20,
        _ => {
            return Err(format!(
                "`{text}`: the unit must be K or M (or none: bytes)"
            ))
        }
    };
    let bad = || format!("`{text}` is not a size such as 131072, 128K or 0.5M");
    if number.is_empty() || !number.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(bad());
    }
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let whole: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| bad())?
    };
    // The fraction in exact integers: "0.5M" is 524288 B, "1.3K" is no
    // whole number of bytes.
    let digits = fraction.len() as u32;
    if digits > 12 {
        return Err(bad());
    }
    let denominator = 10u64.pow(digits);
    let numerator: u64 = if fraction.is_empty() {
        0
    } else {
        fraction.parse().map_err(|_| bad())?
    };
    let fraction_bytes = (numerator as u128) * scale as u128;
    if !fraction_bytes.is_multiple_of(denominator as u128) {
        return Err(format!("`{text}` is not a whole number of bytes"));
    }
    (whole as u128 * scale as u128 + fraction_bytes / denominator as u128)
        .try_into()
        .ok()
        .filter(|&b: &u64| b > 0)
        .ok_or_else(bad)
}

/// `--fits`: the arena to allocate against the firmware's budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Budget {
    /// The budget in bytes.
    pub budget_bytes: u64,
    /// The arena to allocate.
    pub arena_bytes: u64,
}

impl Budget {
    /// The arena fits the budget.
    pub fn fits(&self) -> bool {
        self.arena_bytes <= self.budget_bytes
    }

    /// What is left (fits) or missing (does not), in words.
    pub fn message(&self) -> String {
        if self.fits() {
            format!(
                "fits: the arena to allocate ({} B) leaves {} B of the {} B budget",
                self.arena_bytes,
                self.budget_bytes - self.arena_bytes,
                self.budget_bytes
            )
        } else {
            format!(
                "DOES NOT FIT: the arena to allocate ({} B) exceeds the {} B budget by {} B",
                self.arena_bytes,
                self.budget_bytes,
                self.arena_bytes - self.budget_bytes
            )
        }
    }
}

/// Who made a deployment's plan, for the header's provenance comment.
#[derive(Clone, Debug)]
pub struct Provenance<'a> {
    /// The command that wrote it (`plan`, `verify`).
    pub command: &'a str,
    /// The model the plan was made for, as the user named it.
    pub source: &'a str,
    /// The planner and O_s source (e.g. `exact (traced O_s)`).
    pub planner: &'a str,
    /// The planner's head (its peak) in bytes.
    pub planned_bytes: u64,
    /// The plan was proven on TFLM by `verify` (shadow map, outputs).
    pub proven: bool,
}

/// Writes `model` and its header for the measured plan `m` (the one
/// `command` planned or proved from `source`); the header's path.
pub fn write_measured_plan(
    dest: &Path,
    model: &[u8],
    m: &MeasuredPlan,
    arena: &ArenaToAllocate,
    command: &str,
    source: &str,
    proven: bool,
) -> Result<PathBuf> {
    let planner = format!("{} planner (O_s: {})", m.planner, m.overlap);
    write_deployment(
        dest,
        model,
        arena,
        &Provenance {
            command,
            source,
            planner: &planner,
            planned_bytes: m.planned_bytes,
            proven,
        },
    )
}

/// The header's path beside `model` (`OUT.tflite` → `OUT.h`).
pub fn header_path(model: &Path) -> PathBuf {
    model.with_extension("h")
}

/// The `MicroMutableOpResolver` method that registers TFLite builtin
/// `name` (`CONV_2D` → `AddConv2D`), `None` for a name that is no builtin
/// (a custom operator's code, TinySeg's `MEMTRACE_*` storage operators
/// included).
pub fn resolver_method(name: &str) -> Option<String> {
    if memtrace_model::OpKind::from_custom_code(name).is_some() {
        return None;
    }
    let builtin = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        && name.starts_with(|c: char| c.is_ascii_uppercase());
    if !builtin {
        return None;
    }
    // The four whose method TFLM spells otherwise than word by word.
    let irregular = [
        ("BATCH_MATMUL", "BatchMatMul"),
        ("CUMSUM", "CumSum"),
        ("PADV2", "PadV2"),
        ("UNIDIRECTIONAL_SEQUENCE_LSTM", "UnidirectionalSequenceLSTM"),
    ];
    if let Some((_, m)) = irregular.iter().find(|(n, _)| *n == name) {
        return Some(format!("Add{m}"));
    }
    let words: String = name
        .split('_')
        .map(|w| {
            let mut c = w.chars();
            match c.next() {
                Some(first) if first.is_ascii_digit() => w.to_string(),
                Some(first) => first.to_string() + &c.as_str().to_ascii_lowercase(),
                None => String::new(),
            }
        })
        .collect();
    Some(format!("Add{words}"))
}

/// The resolver lines of the header: an X-macro with one
/// `MicroMutableOpResolver` method per builtin operator of the model, and
/// their count; custom operators are named in a comment (the firmware
/// registers them itself).
fn resolver_lines(model: &[u8]) -> Result<String> {
    let graph = memtrace_model::graph::read_graph(model)?;
    let mut builtins: Vec<String> = Vec::new();
    let mut custom: Vec<&str> = Vec::new();
    for op in &graph.ops {
        match resolver_method(&op.name) {
            Some(m) if !builtins.contains(&m) => builtins.push(m),
            Some(_) => {}
            None if !custom.contains(&op.name.as_str()) => custom.push(&op.name),
            None => {}
        }
    }
    let mut s = String::from(
        "/* The operators of the model (subgraph 0), for\n \
         * tflite::MicroMutableOpResolver<kModelOpCount>: MEMTRACE_MODEL_OPS(OP) calls\n \
         * OP(method) for each, e.g. #define ADD_OP(m) resolver.m(); */\n",
    );
    if !custom.is_empty() {
        s += &format!(
            "/* Custom operators to register yourself (AddCustom): {} */\n",
            custom.join(", ")
        );
    }
    if custom
        .iter()
        .any(|c| memtrace_model::OpKind::from_custom_code(c).is_some())
    {
        s += "/* MEMTRACE_*: TinySeg's storage operators, whose kernels are\n \
              * harness-c/tflm/storage_ops.cc (mtflm::storage_op), with the\n \
              * memtrace_storage region of its custom options (docs/deploy.md). */\n";
    }
    s += "#define MEMTRACE_MODEL_OPS(OP)";
    for m in &builtins {
        s += &format!(" \\\n    OP({m})");
    }
    s += "\n";
    s += &format!(
        "enum {{ kModelOpCount = {} }};\n\n",
        builtins.len() + custom.len()
    );
    Ok(s)
}

/// The C header a firmware includes: `kTensorArenaSize`, the model bytes
/// (`kModel`, `kModelSize`) 16-byte aligned, the operators to register
/// (`MEMTRACE_MODEL_OPS`, `kModelOpCount`) and a comment saying where it all
/// comes from. Valid C (C11) and C++ (C++11).
pub fn header_text(model: &[u8], arena: &ArenaToAllocate, who: &Provenance<'_>) -> Result<String> {
    let resolver = resolver_lines(model)?;
    let mut s = String::with_capacity(model.len() * 6 + 4096);
    s += &format!(
        "/* Written by memtrace {} (`memtrace {}`); do not edit: run it again.\n",
        env!("CARGO_PKG_VERSION"),
        who.command
    );
    s += " *\n";
    s += &format!(
        " * model:    {} ({} B, sha256 {})\n",
        who.source,
        model.len(),
        sha256_prefix(model)
    );
    s += &format!(
        " * plan:     {}, head {} B, in the model as OfflineMemoryAllocation{}\n",
        who.planner,
        who.planned_bytes,
        if who.proven {
            "; proven by memtrace verify on real TFLM"
        } else {
            ""
        }
    );
    s += &format!(
        " * arena:    kTensorArenaSize = {} B, the smallest arena with which TFLM's\n \
         *           AllocateTensors() and Invoke() succeed (AllocateTensors() fails with\n \
         *           1 B less), measured in the emulator; TFLM reported head {} + tail {} =\n \
         *           {} B. It holds for a buffer aligned to {} bytes: declare\n \
         *           alignas({}) static uint8_t tensor_arena[kTensorArenaSize];\n",
        arena.bytes,
        arena.head_bytes,
        arena.tail_bytes,
        arena.arena_used_bytes,
        arena.alignment,
        arena.alignment
    );
    s += &format!(
        " * TFLM:     {} kernels, {}, the build of {} (sha256 {});\n \
         *           another TFLM version, kernel library or compiler may need another size.\n",
        arena.kernels, arena.target, arena.runner, arena.runner_sha256
    );
    s += " * Guide:    docs/deploy.md\n */\n";
    s += "#ifndef MEMTRACE_DEPLOY_MODEL_H\n#define MEMTRACE_DEPLOY_MODEL_H\n\n";
    s += "#include <stddef.h>\n\n";
    s += "#if defined(__cplusplus)\n#define MEMTRACE_ALIGN16 alignas(16)\n";
    s += &format!("constexpr size_t kTensorArenaSize = {};\n", arena.bytes);
    s += &format!("constexpr size_t kModelSize = {};\n", model.len());
    s += "#else\n#define MEMTRACE_ALIGN16 _Alignas(16)\n";
    s += &format!(
        "enum {{ kTensorArenaSize = {}, kModelSize = {} }};\n",
        arena.bytes,
        model.len()
    );
    s += "#endif\n\n";
    s += &resolver;
    s += "/* The .tflite with its plan, aligned as TFLM reads its flatbuffer. */\n";
    s += "MEMTRACE_ALIGN16 static const unsigned char kModel[] = {\n";
    for line in model.chunks(16) {
        s += "   ";
        for b in line {
            s += &format!(" 0x{b:02x},");
        }
        s += "\n";
    }
    s += "};\n\n#endif /* MEMTRACE_DEPLOY_MODEL_H */\n";
    Ok(s)
}

/// Writes the model with its plan to `dest` and its header beside it
/// ([`header_path`]), each atomically; both texts are complete before
/// either file is written. Returns the header's path.
pub fn write_deployment(
    dest: &Path,
    model: &[u8],
    arena: &ArenaToAllocate,
    who: &Provenance<'_>,
) -> Result<PathBuf> {
    use memtrace_io::output::{write_atomically, write_error};
    let header = header_path(dest);
    if header == dest {
        bail!(
            "{}: the model's file name must not end in .h (its header is written beside it)",
            dest.display()
        );
    }
    check_output(&header, &[dest, Path::new(who.source)])?;
    let text = header_text(model, arena, who)?;
    for (path, bytes) in [(dest, model), (header.as_path(), text.as_bytes())] {
        write_atomically(path, |w| {
            std::io::Write::write_all(w, bytes).map_err(|e| write_error(path, e))
        })?;
    }
    Ok(header)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_bytes_kib_and_mib() {
        assert_eq!(parse_size("131072"), Ok(131072));
        assert_eq!(parse_size("128K"), Ok(131072));
        assert_eq!(parse_size("128k"), Ok(131072));
        assert_eq!(parse_size("128KB"), Ok(131072));
        assert_eq!(parse_size("100B"), Ok(100));
        assert_eq!(parse_size("0.5M"), Ok(524288));
        assert_eq!(parse_size(".5M"), Ok(524288));
        assert_eq!(parse_size("1.25K"), Ok(1280));
        assert!(parse_size("1.3K").is_err());
        assert!(parse_size("12G").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("K").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("0").is_err());
        assert!(parse_size("1.2.3").is_err());
        assert!(parse_size("99999999999999999999M").is_err());
    }

    #[test]
    fn the_boundary_is_the_first_size_that_fits() {
        for need in [1u64, 7, 100, 82316, 1 << 20] {
            for start in [1u64, need - need / 2, need, need + 3, need * 3] {
                let mut calls = 0;
                let got = boundary(start, 1 << 26, |n| {
                    calls += 1;
                    Ok(n >= need)
                })
                .unwrap();
                assert_eq!(got, need, "start {start}");
                assert!(calls < 80, "{calls} probes");
            }
        }
        assert!(boundary(10, 100, |_| Ok(false)).is_err());
    }

    #[test]
    fn builtins_map_to_their_resolver_methods() {
        for (name, method) in [
            ("CONV_2D", "AddConv2D"),
            ("DEPTHWISE_CONV_2D", "AddDepthwiseConv2D"),
            ("FULLY_CONNECTED", "AddFullyConnected"),
            ("AVERAGE_POOL_2D", "AddAveragePool2D"),
            ("L2_NORMALIZATION", "AddL2Normalization"),
            ("SOFTMAX", "AddSoftmax"),
            ("PADV2", "AddPadV2"),
            (
                "UNIDIRECTIONAL_SEQUENCE_LSTM",
                "AddUnidirectionalSequenceLSTM",
            ),
        ] {
            assert_eq!(resolver_method(name).as_deref(), Some(method));
        }
        assert_eq!(resolver_method("TFLite_Detection_PostProcess"), None);
        assert_eq!(resolver_method(""), None);
    }

    #[test]
    fn the_budget_says_what_is_left_or_missing() {
        let fits = Budget {
            budget_bytes: 131072,
            arena_bytes: 82316,
        };
        assert!(fits.fits());
        assert!(fits.message().contains("leaves 48756 B"));
        let short = Budget {
            budget_bytes: 65536,
            arena_bytes: 82316,
        };
        assert!(!short.fits());
        assert!(short.message().contains("by 16780 B"));
    }
}
