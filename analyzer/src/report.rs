//! What `memtrace run` reports per layer, in a stable JSON schema
//! (docs/user-guide.md). Later analyses add fields; existing names stay.

use memtrace_abi::{AccessPath, Arch, EngineKind, Kernels, LayerSpec, Role};
use serde::Serialize;

use memtrace_overlap::check::Flag;

use crate::contract::ContractReport;
pub use crate::kernel::KernelReport;

/// One buffer of a traced layer with its access counts.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct BufferReport {
    /// Buffer id declared by the guest.
    pub id: u32,
    /// Buffer name declared by the guest.
    pub name: String,
    /// Role of the buffer in the layer.
    pub role: Role,
    /// Size in bytes.
    pub size: u64,
    /// Element size in bytes.
    pub elem_size: u32,
    /// Number of load events (accesses after splitting).
    pub loads: u64,
    /// Number of store events (first writes of their bytes in the layer).
    pub stores: u64,
    /// Number of update events (rewrites of bytes already written in the layer).
    pub updates: u64,
}

/// O_s of one of a layer's inputs against its output.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct OverlapReport {
    /// Name of the input buffer (the first declared one, or the second for
    /// [`LayerReport::input2_overlap`]).
    pub input: String,
    /// Name of the first declared output buffer.
    pub output: String,
    /// Input size in bytes (IB).
    pub input_bytes: u64,
    /// Output size in bytes (OB).
    pub output_bytes: u64,
    /// Traced monotone O_s (the paper's minR/maxW), in bytes.
    pub monotone_bytes: u64,
    /// Traced exact O_s, in bytes.
    pub exact_bytes: u64,
    /// O_s with the input placed below the output (its end over the
    /// output's start): docs/overlap.md, "The reverse sweep".
    pub reverse_monotone_bytes: u64,
    /// Exact O_s of the reverse placement, in bytes.
    pub reverse_exact_bytes: u64,
    /// Monotone O_s as % of the output size (over 100 when the input is
    /// larger than the output: kept for JSON readers; the table shows
    /// `monotone_saving_percent`).
    pub monotone_percent: f64,
    /// Exact O_s as % of the output size (see `monotone_percent`).
    pub exact_percent: f64,
    /// The share of the input/output pair's memory (IB + OB) that placing
    /// them at the monotone O_s saves: at most 100.
    pub monotone_saving_percent: f64,
    /// The same share at the exact O_s.
    pub exact_saving_percent: f64,
    /// Algorithmic O_s (DMO §III-C) of the layer's spec; `null` without a spec
    /// whose buffers match the traced ones, or for an op without a method.
    pub algorithmic_bytes: Option<u64>,
    /// memtrace's safe analytic bound (DMO §III-D); `null` like the above.
    pub analytic_bytes: Option<u64>,
    /// The paper's equations exactly as printed (may exceed the traced value:
    /// docs/overlap.md); informational, never flagged.
    pub analytic_printed_bytes: Option<i64>,
    /// Failed cross-checks: `UNSAFE` (analytic > monotone), `MISMATCH`
    /// (algorithmic ≠ monotone), `EXACT_BELOW_MONOTONE`. Empty when all pass.
    pub flags: Vec<Flag>,
}

/// One traced layer.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LayerReport {
    /// Position of the layer in the run (0-based).
    pub index: usize,
    /// Layer name given by the guest.
    pub name: String,
    /// Operator text given by the guest.
    pub op: String,
    /// The guest's `key=value,...` parameter text.
    pub params: String,
    /// `params` understood as a kernel-suite layer, when it is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec: Option<LayerSpec>,
    /// Instructions retired inside the layer window.
    pub instructions: u64,
    /// Buffers declared in the layer, in declaration order.
    pub buffers: Vec<BufferReport>,
    /// Absent when the layer has no input or no output buffer.
    pub overlap: Option<OverlapReport>,
    /// O_s of the second declared input against the output (`add`,
    /// `concatenation`): O_s is a property of one input/output pair, and a
    /// concatenation's two differ (docs/overlap.md §6). Absent for layers
    /// with one input.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input2_overlap: Option<OverlapReport>,
    /// The kernel memory contract (`memtrace run`; absent elsewhere).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contract: Option<ContractReport>,
    /// Which kernel made the layer's buffer accesses: the `library`,
    /// `kernel` and `functions` fields (docs/kernels.md); absent when the
    /// run did not attribute them.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub attribution: Option<KernelReport>,
    /// FNV-1a (64-bit, hex) of what the output buffers held when the layer
    /// ended, in declaration order; absent when the tracer sent none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_digest: Option<String>,
}

impl LayerReport {
    /// The layer's name as tables print it
    /// ([`memtrace_abi::selection::display_name`]).
    pub fn table_name(&self) -> String {
        memtrace_abi::selection::display_name(self.index, &self.name, &self.op)
    }

    /// The O_s of each input against the output: the first input's, then
    /// the second's.
    pub fn overlaps(&self) -> impl Iterator<Item = &OverlapReport> {
        self.overlap.iter().chain(&self.input2_overlap)
    }
}

/// A whole `memtrace run`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RunReport {
    /// Path of the traced ELF file.
    pub elf: String,
    /// Guest architecture (`cortex-m4`, `x86-64`).
    pub arch: Arch,
    /// How buffer accesses were observed: `hooks` (exact `t`/`pc` per event)
    /// or `mmio` (counts and O_s only; see the user guide).
    pub access: AccessPath,
    /// The emulator that ran it (`unicorn`, `qemu`).
    pub engine: EngineKind,
    /// Exit code the guest passed to `memtrace_exit`.
    pub exit_code: i32,
    /// What the guest said of its exit (`memtrace_exit_reason`), if it did:
    /// the deploy firmware's "AllocateTensors() and Invoke() OK …".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_reason: Option<String>,
    /// Instructions retired by the whole run.
    pub instructions: u64,
    /// Traced layers, in run order.
    pub layers: Vec<LayerReport>,
    /// The model and TFLM's arena, when a `.tflite` ran on real TFLM.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tflm: Option<TflmRunInfo>,
}

/// A `.tflite` run on real TensorFlow Lite Micro (`memtrace run MODEL`).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct TflmRunInfo {
    /// The model file.
    pub model: String,
    /// TFLM's kernels (`tflm` reference or `cmsis-nn`).
    pub kernels: Kernels,
    /// Operators of the main subgraph.
    pub operators: usize,
    /// The arena TFLM was given.
    pub arena_bytes: u64,
    /// `MicroInterpreter::arena_used_bytes()`.
    pub arena_used_bytes: u64,
    /// The arena's head: tensors and scratch buffers TFLM planned.
    pub head_bytes: u64,
    /// The arena's tail: persistent buffers.
    pub tail_bytes: u64,
    /// Bytes of all graph outputs.
    pub output_bytes: u64,
    /// A digest of the outputs (as `verify`'s `output_digest`).
    pub output_digest: String,
    /// The offline plan the model carries (`OfflineMemoryAllocation`), and
    /// whose it is, in words; `None` when it carries none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedded_plan: Option<String>,
    /// That plan was made by memtrace for other kernels than these: the
    /// warning (also printed on stderr).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedded_plan_warning: Option<String>,
    /// The memory contract was checked in a second, red-zoned run: this
    /// many bytes left free before and after every buffer TFLM planned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub red_zone_bytes: Option<u32>,
    /// Every operator's scratch sized from its shapes against what it
    /// asked for ([`memtrace_model::scratch_sizing`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scratch_sizing: Option<memtrace_model::scratch_sizing::ScratchSizing>,
}

/// `part` as a percentage of `whole` (0 when `whole` is 0).
pub fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

/// The per-buffer table of a run, for printing.
pub fn buffers_frame(
    report: &RunReport,
) -> polars::prelude::PolarsResult<polars::prelude::DataFrame> {
    use polars::prelude::*;
    let rows: Vec<(&LayerReport, &BufferReport)> = report
        .layers
        .iter()
        .flat_map(|l| l.buffers.iter().map(move |b| (l, b)))
        .collect();
    df!(
        "layer" => rows.iter().map(|(l, _)| l.table_name()).collect::<Vec<_>>(),
        "op" => rows.iter().map(|(l, _)| l.op.as_str()).collect::<Vec<_>>(),
        "instructions" => rows.iter().map(|(l, _)| l.instructions).collect::<Vec<_>>(),
        "buffer" => rows.iter().map(|(_, b)| b.name.as_str()).collect::<Vec<_>>(),
        "role" => rows.iter().map(|(_, b)| b.role.name()).collect::<Vec<_>>(),
        "bytes" => rows.iter().map(|(_, b)| b.size).collect::<Vec<_>>(),
        "elem" => rows.iter().map(|(_, b)| b.elem_size).collect::<Vec<_>>(),
        "loads" => rows.iter().map(|(_, b)| b.loads).collect::<Vec<_>>(),
        "stores" => rows.iter().map(|(_, b)| b.stores).collect::<Vec<_>>(),
        "updates" => rows.iter().map(|(_, b)| b.updates).collect::<Vec<_>>(),
    )
}

/// The per-layer O_s table of a run, for printing.
pub fn overlap_frame(
    report: &RunReport,
) -> polars::prelude::PolarsResult<polars::prelude::DataFrame> {
    use polars::prelude::*;
    let rows: Vec<(&LayerReport, &OverlapReport)> = report
        .layers
        .iter()
        .flat_map(|l| l.overlaps().map(move |o| (l, o)))
        .collect();
    // A second input's row names its buffer: `concat (input2)`.
    let name = |l: &LayerReport, o: &OverlapReport| match &l.overlap {
        Some(first) if !std::ptr::eq(first, o) => format!("{} ({})", l.table_name(), o.input),
        _ => l.table_name(),
    };
    df!(
        "layer" => rows.iter().map(|(l, o)| name(l, o)).collect::<Vec<_>>(),
        "input B" => rows.iter().map(|(_, o)| o.input_bytes).collect::<Vec<_>>(),
        "output B" => rows.iter().map(|(_, o)| o.output_bytes).collect::<Vec<_>>(),
        "O_s monotone B" => rows.iter().map(|(_, o)| o.monotone_bytes).collect::<Vec<_>>(),
        "saves % of in+out" => rows.iter().map(|(_, o)| (o.monotone_saving_percent * 10.0).round() / 10.0).collect::<Vec<_>>(),
        "O_s exact B" => rows.iter().map(|(_, o)| o.exact_bytes).collect::<Vec<_>>(),
        "exact saves %" => rows.iter().map(|(_, o)| (o.exact_saving_percent * 10.0).round() / 10.0).collect::<Vec<_>>(),
        "algorithmic B" => rows.iter().map(|(_, o)| o.algorithmic_bytes).collect::<Vec<_>>(),
        "analytic B" => rows.iter().map(|(_, o)| o.analytic_bytes).collect::<Vec<_>>(),
        "reverse exact B" => rows.iter().map(|(_, o)| o.reverse_exact_bytes).collect::<Vec<_>>(),
        "check" => rows.iter().map(|(_, o)| flag_marker(&o.flags)).collect::<Vec<_>>(),
        "kernel (library)" => rows.iter().map(|(l, _)| l.attribution.as_ref().map(|a| format!("{} ({})", unqualified(&a.kernel), a.library))).collect::<Vec<_>>(),
    )
}

/// The contract table of a run: one row per layer that has a contract, with
/// `ok` or the broken rules, the first violation of each, and the scratch
/// use (`high-water/declared` bytes per scratch buffer).
pub fn contract_frame(
    report: &RunReport,
) -> polars::prelude::PolarsResult<polars::prelude::DataFrame> {
    use polars::prelude::*;
    let rows: Vec<(String, &ContractReport)> = report
        .layers
        .iter()
        .filter_map(|l| l.contract.as_ref().map(|c| (l.table_name(), c)))
        .collect();
    let verdict = |c: &ContractReport| {
        let broken: Vec<&str> = c.violated().map(|(name, _)| name).collect();
        match (broken.is_empty(), c.library_scratch) {
            (true, false) => "ok".to_owned(),
            (true, true) => "ok (library scratch padding)".to_owned(),
            (false, _) => format!("!! {}", broken.join(" ")),
        }
    };
    let first = |c: &ContractReport| {
        c.rules()
            .iter()
            .filter_map(|(name, r)| r.first.as_ref().map(|v| format!("{name}: {}", v.summary())))
            .collect::<Vec<_>>()
            .join("; ")
    };
    let scratch = |c: &ContractReport| {
        c.scratch
            .iter()
            .map(|s| format!("{}/{}", s.high_water_bytes, s.declared_bytes))
            .collect::<Vec<_>>()
            .join(" ")
    };
    df!(
        "layer" => rows.iter().map(|(l, _)| l.as_str()).collect::<Vec<_>>(),
        "contract" => rows.iter().map(|(_, c)| verdict(c)).collect::<Vec<_>>(),
        "scratch used/declared B" => rows.iter().map(|(_, c)| scratch(c)).collect::<Vec<_>>(),
        "first violation" => rows.iter().map(|(_, c)| first(c)).collect::<Vec<_>>(),
    )
}

/// A C++ name without its namespaces and classes, for narrow table columns:
/// `tflite::reference_ops::Pool<a::b>` → `Pool<a::b>`.
pub fn unqualified(name: &str) -> &str {
    let mut depth = 0i32;
    let mut start = 0;
    let bytes = name.as_bytes();
    for (i, &c) in bytes.iter().enumerate() {
        match c {
            b'<' | b'(' => depth += 1,
            b'>' | b')' => depth -= 1,
            b':' if depth == 0 && bytes.get(i + 1) == Some(&b':') => start = i + 2,
            _ => {}
        }
    }
    &name[start.min(name.len())..]
}

/// The marker column of the O_s table: `ok`, or the failed checks with `!!`.
pub fn flag_marker(flags: &[Flag]) -> String {
    if flags.is_empty() {
        "ok".to_owned()
    } else {
        format!(
            "!! {}",
            flags.iter().map(|f| f.name()).collect::<Vec<_>>().join(" ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::unqualified;

    #[test]
    fn unqualified_names_keep_template_arguments_whole() {
        for (name, short) in [
            ("arm_nn_mat_mult_nt_t_s8", "arm_nn_mat_mult_nt_t_s8"),
            (
                "tflite::reference_integer_ops::ConvPerChannel",
                "ConvPerChannel",
            ),
            ("tflite::reference_ops::Pool<a::b>", "Pool<a::b>"),
            (
                "(anonymous namespace)::relu<signed char>",
                "relu<signed char>",
            ),
            ("", ""),
        ] {
            assert_eq!(unqualified(name), short, "{name}");
        }
    }
}
