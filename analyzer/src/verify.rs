//! The reports of plan verification (docs/verify.md, `memtrace verify`): a
//! model is lowered to the guest executor's program (`memtrace_model::lower`)
//! with its tensors at a plan's offsets, run in the emulator, and checked
//! byte by byte by the arena shadow map ([`crate::shadow`]); its outputs are
//! compared with an un-overlapped run.
//!
//! This module knows nothing of the emulator: the driver runs the tracer and
//! feeds the [`ShadowMap`](crate::shadow::ShadowMap) analysis.

use memtrace_abi::{Arch, Kernels};
use serde::Serialize;

use crate::shadow::Clobber;

/// One run of the model under a placement.
#[derive(Clone, Debug, Serialize)]
pub struct PlanRunReport {
    /// Planner name (`file` for a plan read from a file).
    pub planner: String,
    /// O_s source the plan used (the file's path for a plan read from a file).
    pub overlap: String,
    /// Arena size in bytes.
    pub arena_bytes: u64,
    /// Guest instructions of the whole run.
    pub instructions: u64,
    /// Wall-clock seconds of the traced run (emulator, shadow map, plot).
    pub seconds: f64,
    /// The same program in Unicorn without hooks (`--baseline`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub untraced_seconds: Option<f64>,
    /// Reads of clobbered bytes found in this run.
    pub clobbers: Vec<Clobber>,
    /// Placed tensors: name, offset, size.
    pub tensors: Vec<PlacedTensorReport>,
    /// DMO overlaps the plan used.
    pub overlaps_used: Vec<UsedOverlapReport>,
    /// Taken from the trace cache: `seconds` is the time the run took when
    /// it was traced.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub cached: bool,
}

/// One placed tensor of a run.
#[derive(Clone, Debug, Serialize)]
pub struct PlacedTensorReport {
    /// Index in `Model::tensors`.
    pub tensor: usize,
    /// Unique tensor name (as the executor's buffers are named).
    pub name: String,
    /// Byte offset from the start of the arena.
    pub offset: u64,
    /// Size of the tensor's data in bytes.
    pub size: u64,
}

/// One DMO overlap a plan used, by tensor names.
#[derive(Clone, Debug, Serialize)]
pub struct UsedOverlapReport {
    /// The operator, named after its output tensor.
    pub op: String,
    /// Name of the input tensor.
    pub input: String,
    /// Name of the output tensor.
    pub output: String,
    /// Bytes by which the input's start overlaps the output's end.
    pub bytes: u64,
    /// The O_s that allowed it, in bytes.
    pub safe_bytes: u64,
}

/// Traced O_s of one operator (from the reference run).
#[derive(Clone, Debug, Serialize)]
pub struct OpOverlapReport {
    /// The operator, named after its output tensor.
    pub op: String,
    /// Operator index in the model.
    pub index: usize,
    /// Name of the operator's first input tensor.
    pub input: String,
    /// Name of the operator's output tensor.
    pub output: String,
    /// Input size in bytes.
    pub input_bytes: u64,
    /// Output size in bytes.
    pub output_bytes: u64,
    /// Traced monotone O_s in bytes; `None` when the layer lacked an input or output.
    pub monotone_bytes: Option<u64>,
    /// Traced exact O_s in bytes; `None` when the layer lacked an input or output.
    pub exact_bytes: Option<u64>,
    /// The input placed below the output instead (docs/overlap.md).
    pub reverse_exact_bytes: Option<u64>,
}

/// Emulated outputs against PyPI `tflite-micro` (real TFLM on the host).
#[derive(Debug, Clone, Serialize)]
pub struct OracleComparison {
    /// The Python that ran it.
    pub python: String,
    /// The `tflite-micro` package version.
    pub version: String,
    /// Why the host TFLM could not run the model, if it could not.
    pub error: Option<String>,
    /// Output bytes that differ (a length difference counts).
    pub mismatched_bytes: u64,
    /// The outputs are equal byte for byte.
    pub bit_exact: bool,
    /// The model has float outputs: the host's libm (glibc) and the guest's
    /// (newlib, musl) may round transcendental functions differently in the
    /// last bit, so a difference is reported but fails nothing (real TFLM in
    /// the emulator, `--runtime tflm`, is the exact reference there).
    pub float_outputs: bool,
    /// Wall-clock seconds of the host run (`memtrace bench --models`; not
    /// reported: not deterministic).
    #[serde(skip)]
    pub seconds: f64,
}

impl OracleComparison {
    /// The host ran the model and agrees (a model the host TFLM refuses is
    /// no disagreement: the report says why it did not run; float outputs
    /// may differ in the last bit through libm).
    pub fn agrees(&self) -> bool {
        self.error.is_some() || self.bit_exact || self.float_outputs
    }

    /// One line for the text reports.
    pub fn to_text(&self) -> String {
        match &self.error {
            Some(e) => format!("host oracle (PyPI tflite-micro): not run: {e}\n"),
            None => format!(
                "host oracle (PyPI tflite-micro {}): {} ({} B differ)\n",
                self.version,
                if self.bit_exact {
                    "bit-exact"
                } else {
                    "DIFFERENT"
                },
                self.mismatched_bytes
            ),
        }
    }
}

/// What `memtrace verify` prints.
#[derive(Clone, Debug, Serialize)]
pub struct VerifyReport {
    /// Model name.
    pub model: String,
    /// Always `executor`: the runtime the plan was proven on (memtrace's
    /// own executor; real TFLM reports `tflm`).
    pub runtime: &'static str,
    /// Guest architecture of the executor (`cortex-m4`, `x86-64`).
    pub target: Arch,
    /// Seed of the generated weights and input data.
    pub seed: u64,
    /// Kernel library of the executor both runs used (`tflm`, `cmsis-nn`).
    pub kernels: Kernels,
    /// The executor guest ELF both runs used.
    pub executor: String,
    /// Kernel library whose traces gave the plan's traced O_s.
    pub overlap_kernels: Kernels,
    /// The run under TFLM's greedy plan without overlaps.
    pub reference: PlanRunReport,
    /// The run under the plan being verified.
    pub plan: PlanRunReport,
    /// Clobbers of the plan run (the reference run's are in `reference`).
    pub clobbers: Vec<Clobber>,
    /// Whether the plan run's outputs equal the reference run's, byte for byte.
    pub bit_exact: bool,
    /// Output bytes that differ from the reference run.
    pub mismatched_bytes: u64,
    /// Size in bytes of the reference run's outputs (all graph outputs).
    pub output_bytes: u64,
    /// FNV-1a of the reference run's output bytes, and how many distinct
    /// byte values they hold (a degenerate output would have very few).
    pub output_digest: String,
    /// Number of distinct byte values in the reference run's outputs.
    pub output_distinct_bytes: usize,
    /// The reference run's output bytes (all graph outputs, concatenated),
    /// hex-encoded, for comparison with other interpreters.
    pub output_hex: String,
    /// With a library other than TFLM's reference kernels: the same model
    /// (un-overlapped) run with the reference kernels, compared byte for byte
    /// with this library's reference run.
    pub reference_kernels: Option<KernelsComparison>,
    /// The same model and input in PyPI `tflite-micro` on the host, when it
    /// is installed: an output that differs from real TFLM fails the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oracle: Option<OracleComparison>,
    /// Traced O_s of every operator from the reference run of
    /// `overlap_kernels`, in execution order.
    pub traced_overlaps: Vec<OpOverlapReport>,
    /// Wall-clock seconds of both runs together.
    pub seconds: f64,
    /// With `--planner tinyseg`: the transformation's steps and costs (the
    /// plan run ran the transformed model).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tinyseg: Option<crate::tinyseg::SpillReport>,
    /// What the user must know about the plan under test (an O_s source or
    /// a plan file made for another kernel library); also printed on stderr.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// Outputs of one kernel library against TFLM's reference kernels.
#[derive(Clone, Debug, Serialize)]
pub struct KernelsComparison {
    /// The library compared against (`tflm`).
    pub against: Kernels,
    /// Output bytes that differ.
    pub mismatched_bytes: u64,
    /// No byte differs.
    pub bit_exact: bool,
    /// FNV-1a of the reference kernels' outputs.
    pub output_digest: String,
}

/// Bytes that differ between two output images (a length difference
/// counts).
pub fn mismatched_bytes(a: &[u8], b: &[u8]) -> u64 {
    a.iter().zip(b).filter(|(x, y)| x != y).count() as u64
        + (a.len() as i64 - b.len() as i64).unsigned_abs()
}

/// FNV-1a 64 of `bytes`, as 16 hex digits.
pub fn digest(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

impl VerifyReport {
    /// Passed: no clobber in either run, outputs bit-exact (and equal to
    /// the reference kernels' when another library ran).
    pub fn ok(&self) -> bool {
        self.clobbers.is_empty()
            && self.reference.clobbers.is_empty()
            && self.bit_exact
            && self.reference_kernels.as_ref().is_none_or(|k| k.bit_exact)
            && self.oracle.as_ref().is_none_or(|o| o.agrees())
            && self
                .tinyseg
                .as_ref()
                .is_none_or(|t| t.storage_clobbers.is_empty())
    }

    /// Human-readable summary.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        s.push_str(&format!(
            "model   {}  (memtrace's executor, target {}, seed {})\nexecutor: {}\n",
            self.model, self.target, self.seed, self.executor
        ));
        if self.kernels != Kernels::Tflm || self.overlap_kernels != self.kernels {
            s.push_str(&format!(
                "kernels {} (traced O_s from {})\n",
                self.kernels, self.overlap_kernels
            ));
        }
        s.push_str(
            "| run       | planner     | overlap     | arena bytes | instructions | clobbers |\n",
        );
        s.push_str(
            "|-----------|-------------|-------------|-------------|--------------|----------|\n",
        );
        for (what, r) in [("reference", &self.reference), ("plan", &self.plan)] {
            s.push_str(&format!(
                "| {:<9} | {:<11} | {:<11} | {:>11} | {:>12} | {:>8} |\n",
                what,
                r.planner,
                r.overlap,
                r.arena_bytes,
                r.instructions,
                r.clobbers.len()
            ));
        }
        let saving = if self.reference.arena_bytes > 0 {
            100.0 * (self.reference.arena_bytes as f64 - self.plan.arena_bytes as f64)
                / self.reference.arena_bytes as f64
        } else {
            0.0
        };
        if self.reference.cached {
            s.push_str(
                "reference: the greedy run from the trace cache (--no-cache runs it again)\n",
            );
        }
        for (what, r) in [("reference", &self.reference), ("plan", &self.plan)] {
            if let Some(u) = r.untraced_seconds {
                s.push_str(&format!(
                    "time    {what}: traced {:.2} s, untraced {:.3} s, slowdown {:.1}x\n",
                    r.seconds,
                    u,
                    r.seconds / u.max(1e-9)
                ));
            }
        }
        s.push_str(&format!(
            "saving  {:.1} % of the reference arena; {} DMO overlaps used\n",
            saving,
            self.plan.overlaps_used.len()
        ));
        for c in self.reference.clobbers.iter().chain(&self.clobbers) {
            let by = c
                .overwritten_by
                .as_ref()
                .map(|w| format!("{} (writing {})", w.op, w.tensor))
                .unwrap_or_else(|| "never written".into());
            s.push_str(&format!(
                "CLOBBER op {} read tensor {} at byte {} ({} bytes), overwritten by {}\n",
                c.op, c.tensor, c.offset, c.bytes, by
            ));
        }
        s.push_str(&format!(
            "outputs {} ({} of {} bytes differ; digest {}, {} distinct byte values)\n",
            if self.bit_exact {
                "bit-exact"
            } else {
                "MISMATCH"
            },
            self.mismatched_bytes,
            self.output_bytes,
            self.output_digest,
            self.output_distinct_bytes
        ));
        if let Some(k) = &self.reference_kernels {
            s.push_str(&format!(
                "library {} vs {} kernels: {} ({} bytes differ; their digest {})\n",
                self.kernels,
                k.against,
                if k.bit_exact { "bit-exact" } else { "MISMATCH" },
                k.mismatched_bytes,
                k.output_digest
            ));
        }
        if let Some(o) = &self.oracle {
            s.push_str(&o.to_text());
        }
        if let Some(t) = &self.tinyseg {
            s.push_str(&t.to_text());
            for c in &t.storage_clobbers {
                s.push_str(&format!(
                    "STORAGE CLOBBER op {} read tensor {} at byte {} ({} bytes)\n",
                    c.op, c.tensor, c.offset, c.bytes
                ));
            }
        }
        s.push_str(&format!(
            "result  {}  ({:.2} s)\n",
            if self.ok() { "OK" } else { "FAILED" },
            self.seconds
        ));
        s
    }
}
