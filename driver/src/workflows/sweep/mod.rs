//! Sweeping layer configurations (behind `validate`, `table`, `regress`,
//! `plan --overlap traced` and the ladder): choose configurations, trace each
//! through the compiled kernel via the job mailbox on all cores, and turn
//! every traced layer into a [`Row`] with its four O_s values and its
//! cross-checks.
//!
//! Each worker thread owns its own Unicorn (a `Unicorn` is not `Send`; it is
//! created inside `memtrace_tracer::trace`) and shares the parsed [`ElfImage`].
//!
//! The configurations come from `configs` ([`ConfigSelection`], drawn one at
//! a time as a [`SpecStream`]); each traced layer becomes a [`Row`] in `row`,
//! and `summary` counts a sweep's rows ([`Summary`]). The sweep itself, the
//! workers and the trace of one job, is here ([`Sweep`]).

mod configs;
mod row;
mod summary;

pub use configs::{ConfigSelection, SpecStream};
pub use row::{BrokenRule, InputOverlap, Row, RowContract, ScratchRecord, Verdict};
pub(crate) use summary::summarise;
pub use summary::{start, Summary};

use std::sync::Mutex;

use memtrace_abi::{Analysis, LayerSpec};
use memtrace_analyzer::contract::ContractCheck;
use memtrace_analyzer::layer_stats::LayerStats;
use memtrace_analyzer::pc_counts::PcCounts;
use memtrace_analyzer::report::LayerReport;
use memtrace_tracer::{AccessPath, ElfImage, Job, TraceOptions};

use crate::bail;
use crate::support::attribution::KernelResolver;
use crate::support::common::progress_bar;
use crate::support::error::{Context, Result};

/// How much of a layer's memory behaviour a sweep records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Depth {
    /// O_s on the fast (MMIO) access path: `validate`, `plan --overlap
    /// traced`, the ladder. An unaligned multi-byte load from a traced
    /// buffer is seen there as the aligned words around it, so a CMSIS-NN
    /// layer's O_s can come out a few bytes small (safe, not exact).
    Overlap,
    /// The library's whole memory behaviour, exactly: O_s on the hook path
    /// (every access as the instruction made it) and the memory contract
    /// with stray writes watched. `table` and `regress`, whose values are
    /// compared between builds, so an artefact of the access path would be
    /// a false change.
    Baseline,
}

impl Depth {
    fn access(self) -> AccessPath {
        match self {
            Depth::Overlap => AccessPath::Mmio,
            Depth::Baseline => AccessPath::Hooks,
        }
    }
}

/// Traces with the O_s analyses (and at [`Depth::Baseline`] the memory
/// contract), without a spinner: the exit code, the guest's reason for it,
/// and the layers.
fn trace_suite_run(
    sweep: &Sweep<'_>,
    job: Option<Job>,
    kernels: &KernelResolver<'_>,
) -> Result<(i32, Option<String>, Vec<LayerReport>)> {
    let mut stats = LayerStats::default();
    let mut pcs = PcCounts::default();
    let mut contract = ContractCheck::default();
    let baseline = sweep.depth == Depth::Baseline;
    let options = TraceOptions {
        job,
        max_instructions: sweep.max_instructions,
        access: sweep.depth.access(),
        stray_writes: baseline,
        ..TraceOptions::default()
    };
    let mut analyses: Vec<&mut (dyn Analysis + Send)> = vec![&mut stats, &mut pcs];
    if baseline {
        analyses.push(&mut contract);
    }
    let summary = memtrace_tracer::trace(sweep.image, options, &mut analyses)?;
    kernels.attribute(&mut stats.layers, &pcs);
    crate::support::violations::locate(sweep.image, &mut contract.layers);
    for c in contract.layers {
        if let Some(layer) = stats.layers.iter_mut().find(|l| l.index == c.index) {
            layer.contract = Some(c);
        }
    }
    Ok((summary.exit_code, summary.exit_reason, stats.layers))
}

/// The suite's exit status when a library kernel's output differs from
/// TFLM's reference kernel's on the same inputs (docs/protocol.md).
const EXIT_MISMATCH: i32 = 5;

/// Traces `spec` as a job; the job's single layer (with the suite's words
/// when its output differs from the reference kernel's) or an error text.
fn trace_job(
    sweep: &Sweep<'_>,
    spec: &LayerSpec,
    kernels: &KernelResolver<'_>,
) -> Result<(LayerReport, Option<String>), String> {
    let job = Job {
        spec: spec.clone(),
        seed: sweep.seed,
    };
    match trace_suite_run(sweep, Some(job), kernels) {
        Ok((0, _, mut layers)) if layers.len() == 1 => Ok((layers.remove(0), None)),
        Ok((EXIT_MISMATCH, Some(reason), mut layers)) if layers.len() == 1 => {
            Ok((layers.remove(0), Some(reason)))
        }
        Ok((0, _, layers)) => Err(format!("the guest ran {} layers for one job", layers.len())),
        Ok((2, None, _)) => Err("the guest rejected the configuration (exit 2)".into()),
        Ok((code, reason, _)) => Err(format!(
            "the guest {}",
            crate::support::common::exit_text(code, reason.as_deref(), "")
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// Fails early when `image` has no job mailbox (it is not a kernel suite).
pub(crate) fn require_job_mailbox(image: &ElfImage) -> Result<()> {
    if image.symbol(memtrace_abi::symbols::JOB).is_none() {
        bail!(
            "{} has no `memtrace_job` mailbox, so layer configurations cannot be sent to it (build harness-c's suite.elf, or see docs/protocol.md)",
            image.path.display()
        );
    }
    Ok(())
}

/// One sweep's fixed settings: the kernel binary, how deeply each layer is
/// traced, and on how many workers.
pub struct Sweep<'a> {
    /// The kernel binary.
    pub image: &'a ElfImage,
    /// What each trace records.
    pub depth: Depth,
    /// Seed of the guest's data generator for job rows.
    pub seed: u32,
    /// Worker threads.
    pub threads: usize,
    /// Stop a guest that runs longer than this many instructions.
    pub max_instructions: u64,
}

impl<'a> Sweep<'a> {
    /// A sweep of `image` at `depth` with the seed, workers and instruction
    /// budget of `configs`.
    pub(crate) fn configured(image: &'a ElfImage, depth: Depth, configs: &ConfigSelection) -> Self {
        Sweep {
            image,
            depth,
            seed: configs.seed as u32,
            threads: configs.threads(),
            max_instructions: configs.max_instructions,
        }
    }

    /// Traces the ELF's built-in layers (no job) and returns one row each.
    pub fn builtin(&self) -> Result<Vec<Row>> {
        let image = self.image;
        let (code, reason, layers) = trace_suite_run(self, None, &KernelResolver::new(image))
            .with_context(|| format!("tracing {}", image.path.display()))?;
        if code != 0 {
            bail!(
                "{} {} running its built-in layers",
                image.path.display(),
                crate::support::common::exit_text(code, reason.as_deref(), "")
            );
        }
        let arch = image.arch.name();
        Ok(layers
            .iter()
            .map(|l| Row::from_layer(l.name.clone(), "builtin", arch, l))
            .collect())
    }

    /// Traces every spec as a job. Rows come back in the order of `specs`,
    /// named by `names`.
    pub fn specs(&self, specs: &[LayerSpec], names: &[String]) -> Vec<Row> {
        let stream = specs.iter().cloned().map(Ok);
        let name_of = |i: usize| names[i].clone();
        // The items are all `Ok`, so the stream cannot fail.
        self.trace(stream, specs.len(), &name_of)
            .unwrap_or_default()
    }

    /// Traces a [`SpecStream`], drawing each configuration only when a
    /// worker is free; rows are named `config I` and come back in stream
    /// order. Memory grows with the rows traced, never with the
    /// configurations still to come.
    pub fn stream(&self, stream: SpecStream) -> Result<Vec<Row>> {
        let count = stream.len();
        self.trace(stream, count, &|i| format!("config {}", i + 1))
    }

    /// Traces `count` specs drawn from `specs` on the workers; the first
    /// spec the stream fails to give ends the sweep with its error.
    fn trace(
        &self,
        specs: impl Iterator<Item = Result<LayerSpec>> + Send,
        count: usize,
        name_of: &(dyn Fn(usize) -> String + Sync),
    ) -> Result<Vec<Row>> {
        let arch = self.image.arch.name();
        let kernels = KernelResolver::new(self.image);
        let source = Mutex::new(specs.enumerate());
        let failure: Mutex<Option<crate::support::error::Error>> = Mutex::new(None);
        let rows: Mutex<Vec<(usize, Row)>> = Mutex::new(Vec::new());
        let bar = progress_bar(count as u64, "configs");
        let draw = || -> Option<(usize, LayerSpec)> {
            let mut source = source.lock().ok()?;
            match source.next()? {
                (i, Ok(spec)) => Some((i, spec)),
                (_, Err(e)) => {
                    if let Ok(mut f) = failure.lock() {
                        f.get_or_insert(e);
                    }
                    None
                }
            }
        };
        std::thread::scope(|scope| {
            for _ in 0..self.threads.min(count.max(1)) {
                scope.spawn(|| {
                    while let Some((i, spec)) = draw() {
                        let name = name_of(i);
                        let row = match trace_job(self, &spec, &kernels) {
                            Ok((layer, None)) => Row::from_layer(name, "job", arch, &layer),
                            Ok((layer, Some(why))) => {
                                Row::from_layer(name, "job", arch, &layer).mismatched(why)
                            }
                            Err(e) => Row::failed(name, &spec, arch, e),
                        };
                        if let Ok(mut r) = rows.lock() {
                            r.push((i, row));
                        }
                        if let Some(bar) = &bar {
                            bar.inc(1);
                        }
                    }
                });
            }
        });
        if let Some(bar) = bar {
            bar.finish_and_clear();
        }
        if let Some(e) = failure.into_inner().ok().flatten() {
            return Err(e);
        }
        let mut rows = rows.into_inner().unwrap_or_default();
        rows.sort_unstable_by_key(|&(i, _)| i);
        Ok(rows.into_iter().map(|(_, row)| row).collect())
    }
}

/// Default names of swept configurations.
pub(crate) fn config_names(count: usize) -> Vec<String> {
    (1..=count).map(|i| format!("config {i}")).collect()
}
