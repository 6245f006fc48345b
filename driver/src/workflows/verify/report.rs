//! What `memtrace verify` reports: both TFLM runs (TFLM's own plan and the
//! plan under test), the clobbers, the tensors' offsets and the traced O_s,
//! as a table or JSON ([`VerifyReport`]).

use memtrace_model::source::ModelSource;
use serde::Serialize;

use memtrace_abi::runner::{op_index, Placement, TflmResult, LOAD_INPUT};
use memtrace_abi::Runtime;
use memtrace_analyzer::report::LayerReport;
use memtrace_analyzer::shadow::Clobber;
use memtrace_analyzer::tinyseg::SpillReport;
use memtrace_model::graph::TfliteGraph;
use memtrace_tracer::Arch;

use crate::runtime::kernels::Kernels;
use crate::runtime::oracle::OracleComparison;
use crate::runtime::plan_file::EmbeddedOrigin;
use crate::support::error::Result;
use crate::support::outcome::{json_with_verdict, Answer, Format, Outcome};
use crate::workflows::deploy::{Budget, Deployed, MeasuredPlan};

/// One run of TFLM in a verification.
#[derive(Debug, Clone, Serialize)]
pub struct TflmRunReport {
    /// Who placed the tensors: `tflm` (TFLM's own greedy planner) or the
    /// memtrace planner whose plan TFLM honoured.
    pub planner: String,
    /// O_s source of the plan (`none` for TFLM's own).
    pub overlap: String,
    /// The arena memtrace's plan needs (for TFLM's own plan: memtrace's
    /// `tflm-greedy` prediction of it).
    pub planned_bytes: u64,
    /// `MicroInterpreter::arena_used_bytes()`.
    pub arena_used_bytes: u64,
    /// The head TFLM used: planned tensors and scratch buffers.
    pub head_bytes: u64,
    /// The tail TFLM used: persistent buffers.
    pub tail_bytes: u64,
    /// Clobbered reads found in this run.
    pub clobbers: usize,
    /// Guest instructions of the whole run.
    pub instructions: u64,
    /// Emulator runs its trace took: 2 when a second run counted the
    /// instructions on the other core, 1 for one timed run, 0 when it came
    /// from the trace cache.
    pub runs: u32,
    /// Wall-clock seconds of the traced run.
    pub seconds: f64,
    /// Wall-clock seconds of the same run in Unicorn without hooks
    /// (`--baseline`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub untraced_seconds: Option<f64>,
    /// Taken from the trace cache: `seconds` is the time the run took when
    /// it was traced.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub cached: bool,
}

/// An operator's O_s as traced on TFLM.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct TflmOpOverlap {
    /// Operator index in the model.
    pub index: usize,
    /// TFLM's operator name.
    pub op: String,
    /// Its first output tensor.
    pub output: String,
    /// The input whose O_s was traced (the first arena input).
    pub input: Option<String>,
    /// Monotone O_s in bytes (what the planner credits).
    pub monotone_bytes: Option<u64>,
    /// Exact O_s in bytes.
    pub exact_bytes: Option<u64>,
}

/// Where a tensor was planned and where TFLM put it in the plan run.
#[derive(Debug, Clone, Serialize)]
pub struct TensorPlacement {
    /// Tensor name.
    pub name: String,
    /// Its bytes.
    pub bytes: u64,
    /// Offset in memtrace's plan.
    pub planned_offset: Option<u64>,
    /// Offset from the arena head TFLM used in the plan run.
    pub tflm_offset: Option<u64>,
    /// Offset in TFLM's own plan (the reference run).
    pub reference_offset: Option<u64>,
}

/// What `verify` found.
#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
    /// The model.
    pub model: ModelSource,
    /// The runtime the plan was proven on.
    pub runtime: Runtime,
    /// Runner architecture.
    pub target: Arch,
    /// TFLM's kernels in both runs.
    pub kernels: Kernels,
    /// Kernels whose traces gave the plan's traced O_s.
    pub overlap_kernels: Kernels,
    /// Seed of the generated input (and of a zoo model's weights).
    pub seed: u64,
    /// The `--input` file the graph inputs came from instead of the seed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
    /// The TFLM runner guest that ran both plans.
    pub runner: String,
    /// TFLM's own plan.
    pub reference: TflmRunReport,
    /// memtrace's plan, run by TFLM as `OfflineMemoryAllocation`.
    pub plan: TflmRunReport,
    /// Clobbered reads of the plan run.
    pub clobbers: Vec<Clobber>,
    /// Reads, in the plan run, of input bytes the input's producer never
    /// wrote: no plan destroyed them (so they are no clobbers), but the
    /// reader's result depends on what an earlier tensor left there.
    pub unwritten_reads: Vec<Clobber>,
    /// The plan run's outputs equal the reference run's.
    pub bit_exact: bool,
    /// Output bytes that differ.
    pub mismatched_bytes: u64,
    /// Bytes of all graph outputs.
    pub output_bytes: u64,
    /// Digest of the reference run's outputs.
    pub output_digest: String,
    /// The reference run's outputs, hex.
    pub output_hex: String,
    /// The kernels' memory contract, checked in a red-zoned run of the
    /// model (TFLM's own plan with free bytes around every buffer).
    pub kernel_check: KernelCheck,
    /// Every operator's scratch sized from its shapes against what it asked
    /// TFLM for: a shortfall fails the verify, whatever TFLM's layout hid.
    pub scratch_sizing: memtrace_model::scratch_sizing::ScratchSizing,
    /// With CMSIS-NN's kernels: every operator's outputs against the same
    /// operators on TFLM's reference kernels in the emulator.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reference_kernels: Option<crate::runtime::OperatorComparison>,
    /// Why that comparison was not made, when it was not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reference_kernels_not_compared: Option<String>,
    /// The same model and input in PyPI `tflite-micro` on the host.
    pub oracle: Option<OracleComparison>,
    /// The oracle was not asked for (`--no-oracle`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub oracle_off: bool,
    /// Every operator's traced O_s.
    pub traced_overlaps: Vec<TflmOpOverlap>,
    /// Every arena tensor: planned offset and where TFLM put it.
    pub tensors: Vec<TensorPlacement>,
    /// Tensors the model's own `OfflineMemoryAllocation` placed, when it
    /// carried one: the reference run and the host oracle ran the model
    /// without it (TFLM's own plan).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedded_plan_tensors: Option<usize>,
    /// Whose that embedded plan is: memtrace's (with its provenance) or of
    /// unknown origin.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedded_plan_origin: Option<EmbeddedOrigin>,
    /// Which plan of a `plan --format json` document `--plan` took, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan_taken: Option<String>,
    /// Warnings (a plan file made for other kernels, `--allow-foreign-plan`).
    pub warnings: Vec<String>,
    /// Wall-clock seconds of the whole verification.
    pub seconds: f64,
    /// The arena a firmware must allocate for the plan under test, measured
    /// on this runner ([`crate::workflows::deploy`]).
    pub arena_to_allocate: MeasuredPlan,
    /// `--fits`: the arena to allocate against the budget, as `plan`'s JSON
    /// gives it (`null` without `--fits`).
    pub budget: Option<Budget>,
    /// TinySeg's steps and what the run says of them (`--planner tinyseg`):
    /// the plan run is of the transformed model, whose storage operators
    /// are the runner's custom operators.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tinyseg: Option<SpillReport>,
    /// The model as TFLM ran it under the plan under test (with the plan as
    /// `OfflineMemoryAllocation`): what `--emit-offline` writes once proven.
    #[serde(skip)]
    pub plan_model: Vec<u8>,
    /// What `--emit-offline` and `--fits` did with the proven plan.
    #[serde(skip)]
    pub deployed: Deployed,
}

/// The JSON document of a [`VerifyReport`]: its fields, `proven` (the
/// plan's proof alone), then `ok` (the verdict the exit status gives:
/// proven, and the `--fits` budget and `--emit-offline` met).
#[derive(Serialize)]
struct Document<'a> {
    #[serde(flatten)]
    report: &'a VerifyReport,
    proven: bool,
}

impl Answer for VerifyReport {
    /// Warnings first; after the report, what the deployment did. Exit
    /// status 1 when the plan is not proven, misses `--fits` or was not
    /// written; the JSON's `ok` says the same.
    fn answer(&self, format: Format) -> Result<Outcome> {
        let report = match format {
            Format::Json => json_with_verdict(
                &Document {
                    report: self,
                    proven: self.ok(),
                },
                self.passed(),
            )?,
            _ => self.to_text(),
        };
        Ok(Outcome {
            notes: self
                .warnings
                .iter()
                .map(|w| format!("WARNING: {w}"))
                .collect(),
            report,
            verdict: self.deployed.notes.clone(),
            status: Outcome::status_of(self.passed()),
        })
    }
}

/// What the red-zoned run of the model said of its kernels.
#[derive(Debug, Clone, Serialize, Default)]
pub struct KernelCheck {
    /// Bytes left free before and after every buffer TFLM planned.
    pub red_zone_bytes: u32,
    /// Instructions the red-zoned run took.
    pub instructions: u64,
    /// Wall-clock seconds of the red-zoned run (`memtrace bench --models`;
    /// not reported: not deterministic).
    #[serde(skip)]
    pub seconds: f64,
    /// Each broken rule of each operator, e.g. "operator
    /// `0:CONV_2D:conv`: stray_write: 4 B store to …, 16 B past the end of
    /// `scratch0`, at … (in all …)"; empty when every kernel kept to its
    /// buffers.
    pub findings: Vec<String>,
}

impl KernelCheck {
    /// The findings of a red-zoned run.
    pub(crate) fn of(check: &crate::runtime::RedZoneCheck, seconds: f64) -> KernelCheck {
        // Scratch a kernel asked for and left unused harms nothing (kernel
        // libraries pad their sizes): the check is of memory used unasked.
        let findings = check
            .broken()
            .flat_map(|(layer, c)| {
                crate::support::violations::broken_rules(c, &["scratch_unused"])
                    .into_iter()
                    .map(move |rule| format!("operator `{layer}`: {rule}"))
            })
            .collect();
        KernelCheck {
            red_zone_bytes: check.zone_bytes,
            instructions: check.instructions,
            seconds,
            findings,
        }
    }

    fn to_text(&self) -> String {
        if self.findings.is_empty() {
            return format!(
                "kernels: every operator kept to its buffers (red-zoned run, {} B free around \
                 each buffer TFLM plans)\n",
                self.red_zone_bytes
            );
        }
        let mut s = format!(
            "kernels: {} finding(s) in the red-zoned run ({} B free around each buffer TFLM \
             plans): a kernel used memory it did not ask for\n",
            self.findings.len(),
            self.red_zone_bytes
        );
        for f in &self.findings {
            s += &format!("  {f}\n");
        }
        s
    }
}

impl VerifyReport {
    /// Clean (no clobber, no kernel finding), bit-exact, and equal to the
    /// host oracle if it ran.
    pub fn ok(&self) -> bool {
        self.kernel_check.findings.is_empty()
            && self.scratch_sizing.shortfalls().next().is_none()
            && self.clobbers.is_empty()
            && self
                .tinyseg
                .as_ref()
                .is_none_or(|t| t.storage_clobbers.is_empty())
            && self.bit_exact
            && self.oracle.as_ref().is_none_or(|o| o.agrees())
            && self
                .reference_kernels
                .as_ref()
                .is_none_or(|c| c.first_difference.is_none())
    }

    /// What, besides the two runs of the emulated TFLM, checked the
    /// outputs: none when neither the host oracle nor the reference kernels
    /// ran the model.
    fn independent_checks(&self) -> Vec<&'static str> {
        let mut checks = Vec::new();
        if self.oracle.as_ref().is_some_and(|o| o.error.is_none()) {
            checks.push("the host oracle");
        }
        if self.reference_kernels.is_some() {
            checks.push("the reference kernels");
        }
        checks
    }

    /// Proven ([`VerifyReport::ok`]), and what `--fits` and
    /// `--emit-offline` asked for met: the verdict of the exit status.
    pub fn passed(&self) -> bool {
        self.ok() && self.deployed.ok
    }

    /// Where the inputs came from: the `--input` file, or the seed (a zoo
    /// model's weights come from the seed either way).
    fn data_source(&self) -> String {
        match (&self.input, self.model.is_zoo()) {
            (Some(file), true) => format!("weights from seed {}, input {file}", self.seed),
            (Some(file), false) => format!("input {file}"),
            (None, _) => format!("seed {}", self.seed),
        }
    }

    /// The human-readable report.
    /// The two runs side by side: TFLM's own plan and the plan under test.
    fn runs_table(&self) -> String {
        let mut s = format!(
            "{:<28} {:>12} {:>12} {:>10} {:>10} {:>9} {:>14}\n",
            "run", "planned B", "TFLM used B", "head B", "tail B", "clobbers", "instructions"
        );
        for r in [&self.reference, &self.plan] {
            s += &format!(
                "{:<28} {:>12} {:>12} {:>10} {:>10} {:>9} {:>14}\n",
                format!("{} ({})", r.planner, r.overlap),
                r.planned_bytes,
                r.arena_used_bytes,
                r.head_bytes,
                r.tail_bytes,
                r.clobbers,
                r.instructions
            );
        }
        s
    }

    /// Every clobber and unwritten read of the plan run, and the culprit
    /// when the plan was the model's own.
    fn clobbers_text(&self) -> String {
        let mut s = String::new();
        for c in &self.clobbers {
            s += &format!("CLOBBER: {}\n", c.describe());
        }
        s += &unwritten_text(&self.unwritten_reads);
        if let (Some(c), true) = (self.clobbers.first(), self.plan.planner == EMBEDDED) {
            s += &format!(
                "culprit: the model's embedded offline plan (OfflineMemoryAllocation{}) is \
                 unsafe on the {} kernels: operator `{}` reads `{}` after its bytes were \
                 overwritten\n",
                self.embedded_plan_origin
                    .as_ref()
                    .map(|o| format!(", {}", o.describe()))
                    .unwrap_or_default(),
                self.kernels,
                c.op,
                c.tensor
            );
        }
        s
    }

    /// The kernels' checks and the host oracle's.
    fn checks_text(&self) -> String {
        let mut s = self.kernel_check.to_text();
        s += &self.scratch_sizing.to_text();
        match (
            &self.reference_kernels,
            &self.reference_kernels_not_compared,
        ) {
            (Some(c), _) => s += &c.to_text(self.kernels.name(), Kernels::Tflm.name()),
            (None, Some(why)) => {
                s += &format!("operators: not compared with the reference kernels: {why}\n")
            }
            (None, None) => {}
        }
        match &self.oracle {
            Some(o) => s += &o.to_text(),
            None if self.oracle_off => s += "host oracle: not run (--no-oracle)\n",
            None => {
                s +=
                    "host oracle: not run (no Python with tflite-micro; set MEMTRACE_TFLM_PYTHON)\n"
            }
        }
        s
    }

    pub(crate) fn to_text(&self) -> String {
        let mut s = format!(
            "{} on real TFLM ({} kernels, {}), {}\nrunner: {}\n",
            self.model,
            self.kernels,
            self.target,
            self.data_source(),
            self.runner
        );
        s += &self.runs_table();
        if let Some(n) = self.embedded_plan_tensors {
            s += &format!(
                "model: carries an embedded offline plan (OfflineMemoryAllocation, {n} tensors \
                 placed){}; the reference run and the host oracle ran it without, with TFLM's own \
                 plan\n",
                self.embedded_plan_origin
                    .as_ref()
                    .map(|o| format!(", {}", o.describe()))
                    .unwrap_or_default()
            );
        }
        if let Some(taken) = &self.plan_taken {
            s += &format!("plan file: {taken}\n");
        }
        if self.reference.cached {
            s += "reference: TFLM's own plan from the trace cache (--no-cache runs it again)\n";
        }
        for r in [&self.reference, &self.plan] {
            if let Some(u) = r.untraced_seconds {
                s += &format!(
                    "time    {}: traced {:.2} s, untraced {:.3} s, slowdown {:.1}x\n",
                    r.planner,
                    r.seconds,
                    u,
                    r.seconds / u.max(1e-9)
                );
            }
        }
        s += &self.clobbers_text();
        s += &format!(
            "outputs: {} B, {} (plan vs TFLM's own plan: {} B differ)\n",
            self.output_bytes,
            if self.bit_exact {
                "bit-exact"
            } else {
                "DIFFERENT"
            },
            self.mismatched_bytes
        );
        if let Some(t) = &self.tinyseg {
            s += &t.to_text();
        }
        s += &self.checks_text();
        s += &self.arena_to_allocate.to_text();
        s += &format!(
            "result: {}\n",
            match (self.ok(), self.deployed.ok) {
                (true, true) if self.independent_checks().is_empty() => {
                    "OK, but no independent check of the outputs ran (no host oracle; the \
                     reference kernels are compared with CMSIS-NN's only): the plan is proven \
                     against TFLM's own plan on the same kernels"
                }
                (true, true) => "OK",
                (true, false) => "FAILED: the plan is proven, but the deployment failed (below)",
                (false, _) => "FAILED",
            }
        );
        s
    }
}

/// Every tensor memtrace planned or TFLM placed: its planned offset and
/// where TFLM put it in both runs.
///
/// `original` maps a tensor of `graph` to the reference run's model when
/// the plan run ran another one (TinySeg's transformation).
pub(super) fn tensor_placements(
    graph: &TfliteGraph,
    offsets: &[i64],
    original: Option<&[Option<usize>]>,
    reference: &TflmResult,
    planned: &TflmResult,
) -> Vec<TensorPlacement> {
    let in_reference = |t: usize| match original {
        Some(map) => map
            .get(t)
            .copied()
            .flatten()
            .and_then(|r| head_offset(reference, r)),
        None => head_offset(reference, t),
    };
    (0..graph.tensors.len())
        .filter(|&t| offsets[t] >= 0 || in_reference(t).is_some())
        .map(|t| TensorPlacement {
            name: graph.tensor_name(t),
            bytes: graph.tensors[t].bytes.unwrap_or(0),
            planned_offset: u64::try_from(offsets[t]).ok(),
            tflm_offset: head_offset(planned, t),
            reference_offset: in_reference(t),
        })
        .collect()
}

/// Where TFLM put tensor `t`, from the start of its head (`None` outside
/// the arena).
pub(super) fn head_offset(r: &TflmResult, t: usize) -> Option<u64> {
    match r.tensors.get(t).map(|p| p.placement) {
        Some(Placement::Arena { offset }) => offset.checked_sub(r.head_offset),
        _ => None,
    }
}

/// The traced O_s of every operator, for the report.
pub(super) fn op_overlaps(graph: &TfliteGraph, layers: &[LayerReport]) -> Vec<TflmOpOverlap> {
    layers
        .iter()
        .filter(|l| l.name != LOAD_INPUT)
        .filter_map(|l| {
            let index = op_index(&l.params)?;
            let op = graph.ops.get(index)?;
            Some(TflmOpOverlap {
                index,
                op: op.name.clone(),
                output: op
                    .outputs
                    .first()
                    .map(|&t| graph.tensor_name(t as usize))
                    .unwrap_or_default(),
                input: l.overlap.as_ref().map(|o| o.input.clone()),
                monotone_bytes: l.overlap.as_ref().map(|o| o.monotone_bytes),
                exact_bytes: l.overlap.as_ref().map(|o| o.exact_bytes),
            })
        })
        .collect()
}

/// Planner name of the offline plan a model carried, as the report shows it.
pub(super) const EMBEDDED: &str = "embedded";

/// The note on reads of bytes their producer never wrote: how many, and
/// the first, in the words a clobber is described in.
fn unwritten_text(reads: &[Clobber]) -> String {
    let Some(first) = reads.first() else {
        return String::new();
    };
    format!(
        "note: {} read(s) of input bytes their producer never wrote (first: {}): no plan \
         destroyed them, but the reader's result depends on what was there before \
         (a kernel that writes part of its output)\n",
        reads.len(),
        first.describe_unwritten()
    )
}
