//! What `memtrace run` says of its report: a warning per failed cross-check
//! and broken contract rule ([`warnings`]), and the buffer and O_s tables
//! ([`tables_text`]), and the exit status ([`RunAnswer`]).

use memtrace_abi::EngineKind;
use memtrace_analyzer::kernel::Library;
use memtrace_analyzer::report::{
    buffers_frame, contract_frame, overlap_frame, OverlapReport, RunReport,
};
use memtrace_overlap::check::{explain, explain_other_kernel, MethodValues};
use memtrace_tracer::AccessPath;

use crate::support::attribution::{kernel_of, kernel_text, other_than_reference};
use crate::support::common::configure_table_printing;
use crate::support::error::Result;
use crate::support::outcome::{Answer, Format, Outcome};
use crate::support::violations::broken_layers;

/// One warning per failed O_s cross-check of each layer, then one per
/// broken rule of the memory contract.
///
/// A layer that ran CMSIS-NN is expected to fail the cross-checks (the
/// algorithmic and analytic methods model the reference loop nests, and
/// docs/kernels.md says where the libraries differ): unless asked
/// for each (`explain_each`), those become one summary line that points to the
/// documentation, so that the warnings left are the ones to act on.
pub fn warnings(report: &RunReport, explain_each: bool) -> Vec<String> {
    // A plan made for other kernels is the loudest: it may corrupt data.
    let mut lines: Vec<String> = report
        .tflm
        .iter()
        .filter_map(|t| t.embedded_plan_warning.as_ref())
        .map(|w| format!("WARNING: {w}"))
        .collect();
    let mut expected = ExpectedDifferences::default();
    for layer in &report.layers {
        for (k, o) in layer.overlaps().enumerate() {
            let (library, kernel) = kernel_of(layer);
            let other = other_than_reference(library, kernel);
            // Only a known library's differences are documented as expected;
            // a kernel of the user's own that differs is what to look at.
            let documented = library == Some(Library::CmsisNn.name());
            if documented && !explain_each {
                expected.add(o, &kernel_text(library, kernel));
                continue;
            }
            let methods = MethodValues {
                algorithmic: o.algorithmic_bytes,
                analytic: o.analytic_bytes,
                analytic_printed: o.analytic_printed_bytes,
            };
            // A second input's warnings name it.
            let which = if k > 0 {
                format!(" input `{}`", o.input)
            } else {
                String::new()
            };
            for flag in &o.flags {
                let text = if other {
                    let kernel = kernel_text(library, kernel);
                    let text = explain_other_kernel(
                        *flag,
                        o.monotone_bytes,
                        o.exact_bytes,
                        &methods,
                        &kernel,
                    );
                    // The fast path's one inexactness is in exactly such
                    // kernels (docs/kernels.md, "Known issues").
                    if report.access == AccessPath::Mmio {
                        format!(
                            "{text}; traced on the fast access path, which sees an unaligned \
                             multi-byte load as the aligned words around it: `--exact-time` \
                             gives the exact value"
                        )
                    } else {
                        text
                    }
                } else {
                    explain(*flag, o.monotone_bytes, o.exact_bytes, &methods)
                };
                lines.push(format!(
                    "WARNING: layer `{}` ({}){which}: {text}",
                    layer.name, layer.params,
                ));
            }
        }
    }
    lines.extend(expected.summary());
    lines.extend(crate::support::violations::warnings(report));
    lines
}

/// The failed O_s cross-checks of layers that ran CMSIS-NN, counted for one
/// summary line.
#[derive(Default)]
struct ExpectedDifferences {
    checks: usize,
    layers: usize,
    kernels: Vec<String>,
}

impl ExpectedDifferences {
    fn add(&mut self, o: &OverlapReport, kernel: &str) {
        if o.flags.is_empty() {
            return;
        }
        self.checks += o.flags.len();
        self.layers += 1;
        if !self.kernels.iter().any(|k| k == kernel) {
            self.kernels.push(kernel.to_owned());
        }
    }

    fn summary(&self) -> Option<String> {
        if self.checks == 0 {
            return None;
        }
        const SHOWN: usize = 3;
        let mut kernels = self.kernels[..self.kernels.len().min(SHOWN)].join(", ");
        if self.kernels.len() > SHOWN {
            kernels += &format!(" and {} more", self.kernels.len() - SHOWN);
        }
        Some(format!(
            "note: {} O_s cross-check(s) of {} layer input(s) differ from the reference-kernel \
             models because those layers ran {kernels}: expected, and the traced O_s is the one \
             plans use (docs/kernels.md, \"Reference vs CMSIS-NN O_s\"); `--explain` lists each",
            self.checks, self.layers
        ))
    }
}

/// Layers with at least one failed cross-check.
pub(crate) fn flagged_layers(report: &RunReport) -> usize {
    report
        .layers
        .iter()
        .filter(|l| l.overlaps().any(|o| !o.flags.is_empty()))
        .count()
}

/// Every operator of a model run whose kernel uses more scratch than the
/// operator asked for, by its shapes: a finding whatever this run's layout
/// hid.
fn scratch_shortfalls(report: &RunReport) -> Vec<String> {
    report
        .tflm
        .as_ref()
        .and_then(|t| t.scratch_sizing.as_ref())
        .map(|s| s.findings())
        .unwrap_or_default()
}

/// The buffer and O_s tables of `memtrace run`.
pub(crate) fn tables_text(report: &RunReport) -> Result<String> {
    configure_table_printing();
    let what = match &report.tflm {
        Some(t) => format!(
            "{} on TFLM ({} kernels, {}; arena used {} B: head {} B, tail {} B)",
            t.model, t.kernels, report.elf, t.arena_used_bytes, t.head_bytes, t.tail_bytes
        ),
        None => report.elf.clone(),
    };
    if report.layers.is_empty() && report.tflm.is_none() {
        return Ok(no_layers_text(report));
    }
    // Whose offline plan TFLM ran, on a line of its own.
    let embedded = report
        .tflm
        .as_ref()
        .and_then(|t| t.embedded_plan.as_ref())
        .map(|o| format!("model: carries an embedded offline plan, {o}\n"))
        .unwrap_or_default();
    let zoned = match report.tflm.as_ref().and_then(|t| t.red_zone_bytes) {
        Some(z) => format!(
            " (checked in a red-zoned run: {z} B free before and after every buffer TFLM plans)"
        ),
        None => String::new(),
    };
    let sizing = report
        .tflm
        .as_ref()
        .and_then(|t| t.scratch_sizing.as_ref())
        .map(|s| s.to_text())
        .unwrap_or_default();
    Ok(format!(
        "{} ({}): {} layer(s) traced, {} instructions in total\n{embedded}{}\n{}\nmemory \
         contract{zoned}:\n{}\n{sizing}",
        what,
        on_engine(report),
        report.layers.len(),
        report.instructions,
        buffers_frame(report)?,
        overlap_frame(report)?,
        contract_frame(report)?
    ))
}

/// A program that declared no layer (a firmware built without memtrace's
/// layer protocol, e.g. the deploy example): how it ended, not empty tables.
fn no_layers_text(report: &RunReport) -> String {
    let reason = report
        .exit_reason
        .as_deref()
        .map(|r| format!(": {r}"))
        .unwrap_or_default();
    format!(
        "{} ({}): exited {} after {} instructions{reason}\n\
         no layer traced: the program declares none (memtrace's layer protocol, \
         docs/protocol.md); `memtrace check` traces an unmodified program's TFLM \
         operators and CMSIS-NN calls as layers\n",
        report.elf,
        on_engine(report),
        report.exit_code,
        report.instructions
    )
}

/// The core, and the engine when it is not Unicorn (`cortex-m55 on qemu`).
fn on_engine(report: &RunReport) -> String {
    match report.engine {
        EngineKind::Unicorn => report.arch.to_string(),
        engine => format!("{} on {engine}", report.arch),
    }
}

/// `memtrace run`'s answer: its report, with the strictness asked for.
pub struct RunAnswer<'a> {
    /// The traced run.
    pub report: &'a RunReport,
    /// A contract violation fails the run (`--strict`).
    pub strict: bool,
    /// A failed O_s cross-check fails the run (`--strict-os`).
    pub strict_os: bool,
    /// Explain each expected difference (`--explain`).
    pub explain: bool,
}

impl Answer for RunAnswer<'_> {
    fn answer(&self, format: Format) -> Result<Outcome> {
        let report = match format {
            Format::Json => serde_json::to_string_pretty(self.report)? + "\n",
            _ => tables_text(self.report)?,
        };
        let mut verdict = warnings(self.report, self.explain);
        let flagged = flagged_layers(self.report);
        let failed_os = flagged > 0 && self.strict_os;
        if failed_os {
            verdict.push(format!(
                "error: {flagged} layer(s) failed an O_s cross-check (--strict-os)"
            ));
        }
        let broken = broken_layers(self.report);
        let failed_contract = broken > 0 && self.strict;
        if failed_contract {
            verdict.push(format!(
                "error: {broken} layer(s) broke the memory contract (--strict)"
            ));
        }
        let short = scratch_shortfalls(self.report);
        let failed_scratch = !short.is_empty() && self.strict;
        let level = if self.strict { "error" } else { "WARNING" };
        verdict.extend(
            short
                .iter()
                .map(|f| format!("{level}: scratch sized from the shapes: {f}")),
        );
        Ok(Outcome {
            notes: Vec::new(),
            report,
            verdict,
            status: Outcome::status_of(!failed_os && !failed_contract && !failed_scratch),
        })
    }
}
