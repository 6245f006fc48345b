//! Sweeping layer configurations (behind `validate`, `table`, `regress`,
//! `plan --overlap traced` and the ladder): choose configurations, trace each
//! through the compiled kernel via the job mailbox on all cores, and turn
//! every traced layer into a [`Row`] with its four O_s values and its
//! cross-checks.
//!
//! Each worker thread owns its own Unicorn (a `Unicorn` is not `Send`; it is
//! created inside `memtrace_tracer::trace`) and shares the parsed [`ElfImage`].

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use memtrace_abi::spec::{Dtype, OpKind};
use memtrace_abi::{Analysis, LayerSpec};
use memtrace_analyzer::contract::{ContractCheck, ContractReport};
use memtrace_analyzer::layer_stats::LayerStats;
use memtrace_analyzer::pc_counts::PcCounts;
use memtrace_analyzer::report::LayerReport;
use memtrace_io::input::{read_text_limited, MAX_TEXT_FILE};
use memtrace_overlap::check::{analytic_error_percent, Flag};
use memtrace_overlap::configs::{
    expand_grid, parse_configs_file, random_config_iter, short_text, try_random_configs,
    RandomConfigs, MAX_LISTED_CONFIGS,
};
use memtrace_tracer::{AccessPath, ElfImage, Job, TraceOptions};
use serde::{Deserialize, Serialize};

use crate::attribution::{other_than_reference, KernelResolver};
use crate::common::progress_bar;
use crate::error::{Context, Result};
use crate::{bail, failed};

/// Which configurations to sweep (shared by `validate` and `table`).
#[derive(Debug, Clone)]
pub struct ConfigSelection {
    /// Operator(s) of the random configurations: a name, a comma list, or `all`.
    pub ops: Vec<String>,
    /// Element type of the random configurations: f32, int8 or all.
    pub dtype: String,
    /// Random configurations per (op, dtype).
    pub configs: usize,
    /// Seed of the configuration generator (also sent to the guest's data
    /// generator).
    pub seed: u64,
    /// A file of layer specs, one per line (`#` comments, `{a,b}` and
    /// `{lo..hi}` grids allowed).
    pub configs_file: Option<PathBuf>,
    /// A layer spec with `{a,b}` / `{lo..hi}` alternatives, expanded into every
    /// combination (repeatable), e.g.
    /// 'op=max_pool,input=1x{7,8}x{5..6}x3,filter=3x3,stride={1,2}'.
    pub grid: Vec<String>,
    /// Upper bound of the estimated instructions of a random configuration.
    pub budget: u64,
    /// Worker threads (default: all cores).
    pub jobs: Option<usize>,
    /// Stop a guest that runs longer than this many instructions.
    pub max_instructions: u64,
}

fn parse_ops(names: &[String]) -> Result<Vec<OpKind>> {
    let mut ops = Vec::new();
    for name in names {
        if name == "all" {
            ops.extend(OpKind::SUITE);
        } else {
            ops.push(name.parse::<OpKind>().map_err(|e| failed!("--op: {e}"))?);
        }
    }
    ops.dedup();
    Ok(ops)
}

fn parse_dtypes(name: &str) -> Result<Vec<Dtype>> {
    Ok(match name {
        "all" => vec![Dtype::Float32, Dtype::Int8],
        other => vec![other
            .parse::<Dtype>()
            .map_err(|e| failed!("--dtype: {e}"))?],
    })
}

impl ConfigSelection {
    /// Whether any configuration source was given.
    pub fn any(&self) -> bool {
        !self.ops.is_empty() || self.configs_file.is_some() || !self.grid.is_empty()
    }

    /// The configurations, in a fixed order: random ones per (op, dtype),
    /// then the configs file, then the grids.
    pub fn specs(&self) -> Result<Vec<LayerSpec>> {
        self.stream()?.collect()
    }

    /// The configurations of [`ConfigSelection::specs`], drawn only as they
    /// are consumed: `validate --configs 1000000` holds the configurations
    /// being traced, not a million of them. Every (op, dtype) stream's first
    /// configuration is drawn here, so a budget no configuration fits fails
    /// at once; one that fails later ends the stream with its error.
    pub fn stream(&self) -> Result<SpecStream> {
        let ops = parse_ops(&self.ops)?;
        let dtypes = parse_dtypes(&self.dtype)?;
        let mut listed = Vec::new();
        if let Some(path) = &self.configs_file {
            let text = read_text_limited(path, MAX_TEXT_FILE, "--configs-file")?;
            listed.extend(
                parse_configs_file(&text)
                    .map_err(|e| failed!("--configs-file {}: {e}", path.display()))?,
            );
        }
        for g in &self.grid {
            let texts = expand_grid(g).map_err(|e| failed!("--grid: {e}"))?;
            if listed.len() + texts.len() > MAX_LISTED_CONFIGS {
                bail!(
                    "--configs-file and --grid give more than {MAX_LISTED_CONFIGS} configurations \
                     in all"
                );
            }
            for text in texts {
                listed.push(LayerSpec::parse(&text).map_err(|e| failed!("--grid `{text}`: {e}"))?);
            }
        }
        let mut random: Vec<RandomConfigs> = Vec::new();
        if self.configs > 0 {
            for &op in &ops {
                for &dtype in &dtypes {
                    try_random_configs(op, dtype, 1, self.seed, self.budget)?;
                    random.push(random_config_iter(op, dtype, self.seed, self.budget));
                }
            }
        }
        let count = random
            .len()
            .saturating_mul(self.configs)
            .saturating_add(listed.len());
        let per_stream = self.configs;
        let specs = random
            .into_iter()
            .flat_map(move |stream| stream.take(per_stream))
            .map(|drawn| drawn.map_err(Into::into))
            .chain(listed.into_iter().map(Ok));
        Ok(SpecStream {
            count,
            specs: Box::new(specs),
        })
    }

    /// Worker threads: `jobs`, or all cores.
    pub fn threads(&self) -> usize {
        crate::common::threads(self.jobs)
    }
}

/// Layer configurations drawn one at a time ([`ConfigSelection::stream`]).
pub struct SpecStream {
    count: usize,
    specs: Box<dyn Iterator<Item = Result<LayerSpec>> + Send>,
}

impl SpecStream {
    /// How many configurations the stream yields (unless one fails).
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether the stream yields nothing.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

impl Iterator for SpecStream {
    type Item = Result<LayerSpec>;

    fn next(&mut self) -> Option<Self::Item> {
        self.specs.next()
    }
}

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
    /// The layer's memory contract ([`Depth::Baseline`] sweeps only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contract: Option<RowContract>,
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
    fn from_layer(name: String, source: &'static str, arch: &str, l: &LayerReport) -> Row {
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
        }
    }

    fn failed(name: String, spec: &LayerSpec, arch: &str, error: String) -> Row {
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
        }
    }
}

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
fn trace_layers(
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
    crate::contract::locate(sweep.image, &mut contract.layers);
    for c in contract.layers {
        if let Some(layer) = stats.layers.iter_mut().find(|l| l.index == c.index) {
            layer.contract = Some(c);
        }
    }
    Ok((summary.exit_code, summary.exit_reason, stats.layers))
}

/// Traces `spec` as a job; the job's single layer or an error text.
fn trace_job(
    sweep: &Sweep<'_>,
    spec: &LayerSpec,
    kernels: &KernelResolver<'_>,
) -> Result<LayerReport, String> {
    let job = Job {
        spec: spec.clone(),
        seed: sweep.seed,
    };
    match trace_layers(sweep, Some(job), kernels) {
        Ok((0, _, mut layers)) if layers.len() == 1 => Ok(layers.remove(0)),
        Ok((0, _, layers)) => Err(format!("the guest ran {} layers for one job", layers.len())),
        Ok((2, None, _)) => Err("the guest rejected the configuration (exit 2)".into()),
        Ok((code, reason, _)) => Err(format!(
            "the guest {}",
            crate::common::exit_text(code, reason.as_deref(), "")
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// Fails early when `image` has no job mailbox (it is not a kernel suite).
pub fn require_job_mailbox(image: &ElfImage) -> Result<()> {
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
    pub fn configured(image: &'a ElfImage, depth: Depth, configs: &ConfigSelection) -> Self {
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
        let (code, reason, layers) = trace_layers(self, None, &KernelResolver::new(image))
            .with_context(|| format!("tracing {}", image.path.display()))?;
        if code != 0 {
            bail!(
                "{} {} running its built-in layers",
                image.path.display(),
                crate::common::exit_text(code, reason.as_deref(), "")
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
        let failure: Mutex<Option<crate::error::Error>> = Mutex::new(None);
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
                            Ok(layer) => Row::from_layer(name, "job", arch, &layer),
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
pub fn config_names(count: usize) -> Vec<String> {
    (1..=count).map(|i| format!("config {i}")).collect()
}

/// Summary of a sweep.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Number of rows.
    pub configs: usize,
    /// Rows with at least one failed cross-check.
    pub violations: usize,
    /// Rows with an error.
    pub errors: usize,
    /// Rows flagged `UNSAFE` (analytic above traced monotone).
    pub unsafe_analytic: usize,
    /// Rows flagged `MISMATCH` (algorithmic differs from traced monotone).
    pub algorithmic_mismatch: usize,
    /// Rows flagged `EXACT_BELOW_MONOTONE`.
    pub exact_below_monotone: usize,
    /// Configs where the paper's printed equations exceed the traced value.
    pub printed_above_traced: usize,
    /// Largest `analytic_error_percent` over rows with a non-zero monotone O_s.
    pub max_analytic_error_percent: Option<f64>,
    /// Mean `analytic_error_percent` over rows with a non-zero monotone O_s.
    pub mean_analytic_error_percent: Option<f64>,
    /// Wall-clock seconds of the sweep.
    pub seconds: f64,
    /// Rows per wall-clock second.
    pub configs_per_second: f64,
    /// Worker threads used.
    pub threads: usize,
    /// Rows with a failed cross-check that ran some other kernel than the
    /// TFLM reference ones the algorithmic and analytic methods model.
    pub violations_on_other_kernels: usize,
}

/// Counts and error statistics of `rows`, swept in `elapsed` on `threads`.
pub fn summarise(rows: &[Row], elapsed: Duration, threads: usize) -> Summary {
    let count = |f: Flag| rows.iter().filter(|r| r.flags.contains(&f)).count();
    let errors: Vec<f64> = rows
        .iter()
        .filter(|r| r.monotone_bytes.is_some_and(|m| m > 0))
        .filter_map(|r| r.analytic_error_percent)
        .collect();
    let seconds = elapsed.as_secs_f64();
    Summary {
        configs: rows.len(),
        violations: rows.iter().filter(|r| !r.flags.is_empty()).count(),
        errors: rows.iter().filter(|r| r.error.is_some()).count(),
        unsafe_analytic: count(Flag::Unsafe),
        algorithmic_mismatch: count(Flag::Mismatch),
        exact_below_monotone: count(Flag::ExactBelowMonotone),
        printed_above_traced: rows.iter().filter(|r| r.printed_above_traced).count(),
        max_analytic_error_percent: errors.iter().copied().reduce(f64::max),
        mean_analytic_error_percent: (!errors.is_empty())
            .then(|| errors.iter().sum::<f64>() / errors.len() as f64),
        seconds,
        configs_per_second: if seconds > 0.0 {
            rows.len() as f64 / seconds
        } else {
            0.0
        },
        threads,
        violations_on_other_kernels: rows
            .iter()
            .filter(|r| {
                !r.flags.is_empty()
                    && other_than_reference(r.library.as_deref(), r.kernel.as_deref())
            })
            .count(),
    }
}

/// Starts a timer for [`summarise`].
pub fn start() -> Instant {
    Instant::now()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(monotone: Option<u64>, analytic: Option<u64>, flags: Vec<Flag>, error: bool) -> Row {
        Row {
            name: "config 1".into(),
            source: "job",
            op: "relu".into(),
            dtype: "f32".into(),
            arch: "cortex-m4".into(),
            spec: String::new(),
            short: String::new(),
            instructions: 10,
            events: 4,
            input_bytes: Some(400),
            output_bytes: Some(400),
            exact_bytes: monotone,
            monotone_bytes: monotone,
            reverse_exact_bytes: None,
            reverse_monotone_bytes: None,
            algorithmic_bytes: monotone,
            analytic_bytes: analytic,
            analytic_printed_bytes: None,
            analytic_error_percent: monotone.and_then(|m| analytic_error_percent(m, analytic)),
            verdict: if error {
                Verdict::Error
            } else if flags.is_empty() {
                Verdict::Ok
            } else {
                Verdict::Violation
            },
            flags,
            printed_above_traced: false,
            error: error.then(|| "rejected".to_owned()),
            library: None,
            kernel: None,
            input2: None,
            contract: None,
        }
    }

    #[test]
    fn the_summary_counts_each_verdict_and_averages_the_analytic_error() {
        let rows = [
            row(Some(400), Some(300), vec![], false),
            row(Some(200), Some(200), vec![], false),
            row(Some(100), Some(150), vec![Flag::Unsafe], false),
            row(None, None, vec![], true),
        ];
        let s = summarise(&rows, Duration::from_secs(2), 3);
        assert_eq!(
            (s.configs, s.violations, s.errors, s.unsafe_analytic),
            (4, 1, 1, 1)
        );
        // (400-300)/400 = 25 %, 0 %, (100-150)/100 = -50 %: computed by hand.
        assert_eq!(s.max_analytic_error_percent, Some(25.0));
        assert!((s.mean_analytic_error_percent.unwrap() - (-25.0 / 3.0)).abs() < 1e-9);
        assert_eq!(s.configs_per_second, 2.0);
    }

    #[test]
    fn configuration_sources_come_in_a_fixed_order() {
        let sel = ConfigSelection {
            ops: vec!["relu".into()],
            dtype: "all".into(),
            configs: 2,
            seed: 7,
            configs_file: None,
            grid: vec!["op=max_pool,input=1x{7,8}x5x3,filter=3x3,stride=1".into()],
            budget: memtrace_overlap::configs::DEFAULT_BUDGET,
            jobs: Some(1),
            max_instructions: 1,
        };
        let specs = sel.specs().unwrap();
        // 2 random relu per dtype (f32, int8), then the two grid points.
        assert_eq!(specs.len(), 6);
        assert!(specs[..4].iter().all(|s| s.op == OpKind::Relu));
        assert_eq!(specs[4].input[1], 7);
        assert_eq!(specs[5].input[1], 8);
        assert_eq!(
            specs,
            sel.specs().unwrap(),
            "the same seed gives the same configs"
        );
        let bad = ConfigSelection {
            ops: vec!["conv9".into()],
            ..sel
        };
        assert!(bad.specs().unwrap_err().to_string().starts_with("--op:"));
    }
}
