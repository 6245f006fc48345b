//! One swept layer as the reports show it ([`Row`]): its O_s values, its
//! cross-checks and [`Verdict`], its second input's O_s ([`InputOverlap`])
//! and its memory contract as a baseline keeps it ([`RowContract`]).

use memtrace_abi::LayerSpec;
use memtrace_analyzer::contract::ContractReport;
use memtrace_analyzer::report::LayerReport;
use memtrace_overlap::check::{analytic_error_percent, Flag};
use memtrace_overlap::configs::short_text;
use serde::{Deserialize, Serialize};

/// What a swept configuration came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Verdict {
    /// Every O_s method passed its cross-checks.
    #[serde(rename = "ok")]
    Ok,
    /// Some method failed a cross-check (see [`Row::flags`]).
    #[serde(rename = "VIOLATION")]
    Violation,
    /// The configuration could not be traced (see [`Row::error`]).
    #[serde(rename = "ERROR")]
    Error,
}

impl Verdict {
    /// The verdict as the reports print it.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Violation => "VIOLATION",
            Verdict::Error => "ERROR",
        }
    }
}

/// One traced layer with its O_s values and checks.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// `config N` for a job, the layer name for a built-in layer.
    pub name: String,
    /// `job` (traced via the job mailbox) or `builtin` (a layer of the ELF).
    pub source: &'static str,
    /// Operator text of the layer.
    pub op: String,
    /// Element type of the layer (`f32`, `int8`; empty without a spec).
    pub dtype: String,
    /// Guest architecture (`cortex-m4`, `x86-64`).
    pub arch: String,
    /// Canonical spec text (or the guest's params of a layer without a spec).
    pub spec: String,
    /// Compact one-line description for tables (the params text without a spec).
    pub short: String,
    /// Instructions retired inside the layer window.
    pub instructions: u64,
    /// Events traced in the layer (loads, stores and updates of all its buffers).
    pub events: u64,
    /// Input size in bytes (IB).
    pub input_bytes: Option<u64>,
    /// Output size in bytes (OB).
    pub output_bytes: Option<u64>,
    /// Traced exact O_s, in bytes.
    pub exact_bytes: Option<u64>,
    /// Traced monotone O_s, in bytes.
    pub monotone_bytes: Option<u64>,
    /// Traced exact O_s with the input placed below the output (the
    /// reverse sweep, docs/overlap.md §10), in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reverse_exact_bytes: Option<u64>,
    /// Traced monotone O_s of the reverse sweep, in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reverse_monotone_bytes: Option<u64>,
    /// Algorithmic O_s of the spec, in bytes.
    pub algorithmic_bytes: Option<u64>,
    /// memtrace's safe analytic O_s bound, in bytes.
    pub analytic_bytes: Option<u64>,
    /// The paper's analytic equations exactly as printed, in bytes (unclamped, so signed).
    pub analytic_printed_bytes: Option<i64>,
    /// (monotone − analytic) / monotone, in percent.
    pub analytic_error_percent: Option<f64>,
    /// Failed cross-checks of the layer (empty when all pass).
    pub flags: Vec<Flag>,
    /// The paper's equations as printed exceed the traced monotone value (a
    /// documented paper finding; not a violation of memtrace's bound).
    pub printed_above_traced: bool,
    /// What the configuration came to.
    pub verdict: Verdict,
    /// Why the configuration could not be traced, or why it has no O_s.
    pub error: Option<String>,
    /// Kernel library of `kernel` (`CMSIS-NN`, `TFLM reference`, …;
    /// docs/kernels.md); `None` when the layer was not traced.
    pub library: Option<String>,
    /// The function that made most of the layer's buffer accesses.
    pub kernel: Option<String>,
    /// The second input's O_s against the output (`add`, `concatenation`);
    /// its failed checks are also in [`Row::flags`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input2: Option<InputOverlap>,
    /// The layer's memory contract
    /// ([`Depth::Baseline`](super::Depth::Baseline) sweeps only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contract: Option<RowContract>,
    /// FNV-1a (64-bit, hex) of the layer's outputs when it ended
    /// ([`LayerReport::output_digest`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_digest: Option<String>,
    /// The layer was traced, but its outputs differ from TFLM's reference
    /// kernel's on the same inputs (the suite checks every layer a library
    /// kernel runs): an error whose [`Row::error`] holds the suite's words,
    /// with the O_s values kept.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub unlike_reference: bool,
}

/// A layer's memory contract as a baseline keeps it: which rules broke and
/// how much of each declared scratch buffer the kernel used.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RowContract {
    /// Every rule held.
    pub ok: bool,
    /// The broken rules, in the contract's order (a) to (e).
    pub broken: Vec<BrokenRule>,
    /// Each declared scratch buffer.
    pub scratch: Vec<ScratchRecord>,
}

/// A broken rule of the memory contract.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct BrokenRule {
    /// The rule's JSON name (`stray_write`, `scratch_unused`, …).
    pub rule: String,
    /// Violating accesses.
    pub violations: u64,
    /// The first violation, described with its function and file:line.
    pub first: String,
}

/// Declared and used bytes of a scratch buffer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ScratchRecord {
    /// Buffer name.
    pub buffer: String,
    /// The size the library's size function declared.
    pub declared_bytes: u64,
    /// The bytes the kernel used (its high-water mark, or past the end).
    pub used_bytes: u64,
}

impl RowContract {
    fn of(c: &ContractReport) -> RowContract {
        RowContract {
            ok: c.ok,
            broken: c
                .rules()
                .into_iter()
                .filter(|(_, r)| !r.ok)
                .map(|(rule, r)| BrokenRule {
                    rule: rule.to_owned(),
                    violations: r.violations,
                    first: r.first.as_ref().map_or_else(String::new, |v| v.describe()),
                })
                .collect(),
            scratch: c
                .scratch
                .iter()
                .map(|s| ScratchRecord {
                    buffer: s.buffer.clone(),
                    declared_bytes: s.declared_bytes,
                    used_bytes: s.used_bytes(),
                })
                .collect(),
        }
    }
}

/// The O_s values and checks of a layer's second input.
#[derive(Debug, Clone, Serialize)]
pub struct InputOverlap {
    /// Its size in bytes.
    pub input_bytes: u64,
    /// Traced exact O_s, in bytes.
    pub exact_bytes: u64,
    /// Traced monotone O_s, in bytes.
    pub monotone_bytes: u64,
    /// Traced exact O_s of the reverse sweep, in bytes.
    pub reverse_exact_bytes: u64,
    /// Traced monotone O_s of the reverse sweep, in bytes.
    pub reverse_monotone_bytes: u64,
    /// Algorithmic O_s of the spec for this input, in bytes.
    pub algorithmic_bytes: Option<u64>,
    /// The closed-form O_s of the spec for this input, in bytes.
    pub analytic_bytes: Option<u64>,
    /// Its failed cross-checks.
    pub flags: Vec<Flag>,
}

impl InputOverlap {
    fn of(o: &memtrace_analyzer::report::OverlapReport) -> InputOverlap {
        InputOverlap {
            input_bytes: o.input_bytes,
            exact_bytes: o.exact_bytes,
            monotone_bytes: o.monotone_bytes,
            reverse_exact_bytes: o.reverse_exact_bytes,
            reverse_monotone_bytes: o.reverse_monotone_bytes,
            algorithmic_bytes: o.algorithmic_bytes,
            analytic_bytes: o.analytic_bytes,
            flags: o.flags.clone(),
        }
    }
}

impl Row {
    pub(super) fn from_layer(
        name: String,
        source: &'static str,
        arch: &str,
        l: &LayerReport,
    ) -> Row {
        let spec_text = l
            .spec
            .as_ref()
            .map_or_else(|| l.params.clone(), |s| s.to_string());
        let o = l.overlap.as_ref();
        let input2 = l.input2_overlap.as_ref().map(InputOverlap::of);
        // The row's flags: every input's, each named once.
        let mut flags = o.map(|o| o.flags.clone()).unwrap_or_default();
        for f in input2.iter().flat_map(|i| &i.flags) {
            if !flags.contains(f) {
                flags.push(*f);
            }
        }
        let monotone = o.map(|o| o.monotone_bytes);
        let printed_above = match (o.and_then(|o| o.analytic_printed_bytes), monotone) {
            (Some(p), Some(m)) => p > m as i64,
            _ => false,
        };
        Row {
            name,
            source,
            op: l.op.clone(),
            dtype: l
                .spec
                .as_ref()
                .map_or_else(String::new, |s| s.dtype.spec_name().to_owned()),
            arch: arch.to_owned(),
            short: l.spec.as_ref().map_or_else(|| l.params.clone(), short_text),
            spec: spec_text,
            instructions: l.instructions,
            events: l
                .buffers
                .iter()
                .map(|b| b.loads + b.stores + b.updates)
                .sum(),
            input_bytes: o.map(|o| o.input_bytes),
            output_bytes: o.map(|o| o.output_bytes),
            exact_bytes: o.map(|o| o.exact_bytes),
            monotone_bytes: monotone,
            reverse_exact_bytes: o.map(|o| o.reverse_exact_bytes),
            reverse_monotone_bytes: o.map(|o| o.reverse_monotone_bytes),
            algorithmic_bytes: o.and_then(|o| o.algorithmic_bytes),
            analytic_bytes: o.and_then(|o| o.analytic_bytes),
            analytic_printed_bytes: o.and_then(|o| o.analytic_printed_bytes),
            analytic_error_percent: o
                .and_then(|o| analytic_error_percent(o.monotone_bytes, o.analytic_bytes)),
            verdict: if flags.is_empty() {
                Verdict::Ok
            } else {
                Verdict::Violation
            },
            flags,
            printed_above_traced: printed_above,
            error: if o.is_none() {
                Some("the layer has no input/output buffer pair".into())
            } else {
                None
            },
            library: l.attribution.as_ref().map(|a| a.library.name().to_owned()),
            kernel: l.attribution.as_ref().map(|a| a.kernel.clone()),
            input2,
            contract: l.contract.as_ref().map(RowContract::of),
            output_digest: l.output_digest.clone(),
            unlike_reference: false,
        }
    }

    /// The row of a layer whose outputs differ from the reference kernel's:
    /// traced, but an error, with the suite's words.
    pub(super) fn mismatched(mut self, why: String) -> Row {
        self.verdict = Verdict::Error;
        self.error = Some(why);
        self.unlike_reference = true;
        self
    }

    pub(super) fn failed(name: String, spec: &LayerSpec, arch: &str, error: String) -> Row {
        Row {
            name,
            source: "job",
            op: spec.op.name().to_owned(),
            dtype: spec.dtype.spec_name().to_owned(),
            arch: arch.to_owned(),
            spec: spec.to_string(),
            short: short_text(spec),
            instructions: 0,
            events: 0,
            input_bytes: None,
            output_bytes: None,
            exact_bytes: None,
            monotone_bytes: None,
            reverse_exact_bytes: None,
            reverse_monotone_bytes: None,
            algorithmic_bytes: None,
            analytic_bytes: None,
            analytic_printed_bytes: None,
            analytic_error_percent: None,
            flags: Vec::new(),
            printed_above_traced: false,
            verdict: Verdict::Error,
            error: Some(error),
            library: None,
            kernel: None,
            input2: None,
            contract: None,
            output_digest: None,
            unlike_reference: false,
        }
    }
}
