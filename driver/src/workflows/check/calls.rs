//! CMSIS-NN API calls and TFLM operator invocations of an unmodified
//! program as layers (docs/check.md, "API calls as layers" and "TFLM
//! operators as layers"): the tracer declares each outermost call's or
//! invocation's buffers (`memtrace_tracer::program`), and the same analyses
//! as a marked program's layers get its messages — `LayerStats` for access
//! counts and O_s (with the host methods' O_s when a call is a
//! configuration the kernel suite knows), `ContractCheck` for the memory
//! contract. Here they are joined into one report per call (the operators'
//! are `operators.rs`'s).

use serde_json::{json, Value};

use memtrace_abi::{Analysis, Message};
use memtrace_analyzer::contract::{ContractCheck, ContractReport};
use memtrace_analyzer::layer_stats::LayerStats;
use memtrace_analyzer::report::LayerReport;
use memtrace_overlap::check::Flag;
use memtrace_tracer::program::{
    run_program_with, Finding, InnerCall, LayerTracing, ProgramOptions, ProgramRun, TracedCall,
};
use memtrace_tracer::ElfImage;

use crate::Result;

/// One API call: where it was made, its layer (counts, O_s, contract) and
/// its stray reads.
#[derive(Clone, Debug)]
pub struct CallReport {
    /// The call as the tracer saw it.
    pub call: TracedCall,
    /// Its layer; `None` when the call could not be one.
    pub layer: Option<LayerReport>,
}

impl CallReport {
    /// Whether the call broke its memory contract or read data outside
    /// its buffers.
    pub fn violates(&self) -> bool {
        self.call.stray_reads > 0
            || self
                .layer
                .as_ref()
                .and_then(|l| l.contract.as_ref())
                .is_some_and(|c| !c.ok)
    }

    /// The traced monotone O_s, in bytes.
    pub fn monotone_bytes(&self) -> Option<u64> {
        self.layer
            .as_ref()
            .and_then(|l| l.overlap.as_ref())
            .map(|o| o.monotone_bytes)
    }
}

/// Runs `image` with its API calls (`calls`) and TFLM operator
/// invocations (`operators`) traced: the run and every layer's report, in
/// layer order.
pub(super) fn run_traced(
    image: &ElfImage,
    options: &ProgramOptions,
    calls: bool,
    operators: bool,
) -> Result<(ProgramRun, Vec<LayerReport>)> {
    let mut stats = LayerStats::default();
    let mut contract = ContractCheck::default();
    let run = {
        let mut sink = |m: Message| deliver(&mut [&mut stats, &mut contract], &m);
        let tracing = LayerTracing {
            sink: &mut sink,
            calls,
            operators,
        };
        run_program_with(image, options, Some(tracing))?
    };
    let mut contracts = contract.layers;
    crate::support::violations::locate(image, &mut contracts);
    if let Some(m) = &run.memcheck {
        for c in &mut contracts {
            if let Some(v) = c.stray_write.first.as_mut() {
                v.region = heap_place(&m.findings, v.address, v.size);
            }
        }
    }
    let mut layers = stats.layers;
    for c in contracts {
        if let Some(l) = layers.iter_mut().find(|l| l.index == c.index) {
            l.contract = Some(library_contract(c));
        }
    }
    Ok((run, layers))
}

/// Where a stray write of `size` bytes at `address` lies in the heap, by
/// the block a memcheck finding overran there (or holds it): the
/// allocation it hit, which the nearest declared buffer need not be.
fn heap_place(findings: &[Finding], address: Option<u64>, size: u64) -> Option<String> {
    let a = address?;
    let hit = |f: &&Finding| {
        let b = f.block.as_ref()?;
        let outside = f.outside.is_some_and(|(lo, hi)| lo <= a && a < hi);
        let inside = b.address <= a && a < b.address + b.size;
        (outside || inside).then_some(())
    };
    let f = findings.iter().find(|f| hit(f).is_some())?;
    f.block.as_ref().map(|b| b.place_of(a, size))
}

/// One report per call of `run`, with its layer from `layers`.
pub(super) fn reports(run: &ProgramRun, layers: &[LayerReport]) -> Vec<CallReport> {
    run.calls
        .iter()
        .map(|call| CallReport {
            call: call.clone(),
            layer: call
                .index
                .and_then(|i| layers.iter().find(|l| l.index == i).cloned()),
        })
        .collect()
}

/// Every call runs CMSIS-NN, which sizes its own scratch: unused scratch
/// is its padding, information and no violation (as `memtrace run` says
/// it of TFLM's operators).
fn library_contract(mut c: ContractReport) -> ContractReport {
    c.excuse_library_scratch();
    c
}

/// One message to each analysis, as the tracer's stream hands them out.
fn deliver(analyses: &mut [&mut dyn Analysis], message: &Message) {
    for a in analyses.iter_mut() {
        match message {
            Message::LayerBegin(l) => a.layer_begin(l),
            Message::BufferDeclared(b) => a.buffer(b),
            Message::Events(e) => a.events(e),
            Message::StrayWrite(w) => a.stray_write(w),
            Message::LayerOutput(d) => a.layer_output(d),
            Message::LayerEnd { instructions } => a.layer_end(*instructions),
            Message::Exit { .. } => {}
        }
    }
}

/// `basic_arm_convolve_s8 (test_arm_convolve_s8.c:98)`.
/// One indented line per contract rule the layer broke, with its first
/// violation; the text reports of calls and operators share it.
pub(super) fn violation_lines(layer: &LayerReport) -> String {
    let Some(contract) = &layer.contract else {
        return String::new();
    };
    contract
        .violated()
        .filter_map(|(rule, report)| {
            let first = report.first.as_ref()?;
            Some(format!(
                "  {rule}: {} ({} violation(s))\n",
                first.describe(),
                report.violations
            ))
        })
        .collect()
}

/// `  inside: arm_elementwise_mul_s16 ×3, arm_nn_activation_s16 ×15`: the
/// API functions a layer's call or operator called, whose accesses are
/// its own; empty when it called none. Calls and operators share it.
pub(super) fn inner_calls_line(inner: &[InnerCall]) -> String {
    if inner.is_empty() {
        return String::new();
    }
    let calls: Vec<String> = inner
        .iter()
        .map(|c| format!("{} ×{}", c.function, c.calls))
        .collect();
    format!("  inside: {}\n", calls.join(", "))
}

/// The inner calls as JSON: `[{"function": …, "calls": n}]`.
pub(super) fn inner_calls_json(inner: &[InnerCall]) -> Value {
    Value::Array(
        inner
            .iter()
            .map(|c| json!({ "function": c.function, "calls": c.calls }))
            .collect(),
    )
}

fn site_text(c: &TracedCall) -> String {
    let s = &c.call_site;
    let name = s.function.as_deref().unwrap_or("?");
    match (&s.file, s.line) {
        (Some(f), Some(l)) => format!("{name} ({f}:{l})"),
        _ => format!("{name} ({:#x})", s.pc),
    }
}

/// The calls as text: one line each, then a line per contract violation.
pub(super) fn text(calls: &[CallReport]) -> String {
    let mut out = String::new();
    for r in calls {
        let c = &r.call;
        let Some(layer) = &r.layer else {
            out.push_str(&format!(
                "call: {} at {}: not traced, because {}\n",
                c.function,
                site_text(c),
                c.error.as_deref().unwrap_or("?")
            ));
            continue;
        };
        let os = match &layer.overlap {
            Some(o) => {
                let mut t = format!(
                    "O_s monotone {} B, exact {} B of {} B output",
                    o.monotone_bytes, o.exact_bytes, o.output_bytes
                );
                // The host methods model the reference kernels' loops:
                // CMSIS-NN's differ (docs/kernels.md, "Reference vs
                // CMSIS-NN O_s"), so a mismatch is expected, not flagged.
                if let Some(a) = o.algorithmic_bytes {
                    t.push_str(&format!(" (reference loops: {a} B)"));
                }
                for f in o.flags.iter().filter(|f| **f != Flag::Mismatch) {
                    t.push_str(&format!(" {}", f.name()));
                }
                t
            }
            None => "no O_s (no input/output pair)".to_owned(),
        };
        let verdict = match (&layer.contract, c.stray_reads) {
            (Some(k), 0) if k.ok => "contract ok".to_owned(),
            (Some(k), n) => {
                let mut broken: Vec<String> =
                    k.violated().map(|(name, _)| name.to_owned()).collect();
                if n > 0 {
                    broken.push("stray_read".to_owned());
                }
                format!("contract BROKEN: {}", broken.join(", "))
            }
            (None, _) => "no contract".to_owned(),
        };
        let unfinished = if c.unfinished { " (unfinished)" } else { "" };
        out.push_str(&format!(
            "call {}: {} at {}: {}: {} instructions, {os}, {verdict}{unfinished}\n",
            layer.index,
            c.function,
            site_text(c),
            c.shapes,
            layer.instructions
        ));
        out.push_str(&violation_lines(layer));
        out.push_str(&inner_calls_line(&c.inner_calls));
        for n in &c.notes {
            out.push_str(&format!("  note: {n}\n"));
        }
        if let Some(s) = &c.first_stray_read {
            out.push_str(&format!(
                "  stray_read: {} B load from {} at {} ({} stray read(s))\n",
                s.size,
                object_text(s.address, &s.object),
                s.at,
                c.stray_reads
            ));
        }
    }
    let traced = calls.iter().filter(|r| r.layer.is_some()).count();
    let broken = calls.iter().filter(|r| r.violates()).count();
    out.push_str(&format!(
        "calls: {} CMSIS-NN calls, {traced} traced as layers, {broken} breaking the memory contract\n",
        calls.len()
    ));
    out
}

fn object_text(address: u64, object: &Option<(String, u64)>) -> String {
    match object {
        Some((name, offset)) => format!("`{name}`+{offset} ({address:#x})"),
        None => format!("{address:#x}"),
    }
}

/// The calls as JSON: each with its call site, shapes, stray reads and its
/// layer (buffers, O_s, contract) as `memtrace run` reports a layer.
pub(super) fn json(calls: &[CallReport]) -> Value {
    Value::Array(
        calls
            .iter()
            .map(|r| {
                let c = &r.call;
                json!({
                    "index": c.index,
                    "function": c.function,
                    "call_site": {
                        "pc": c.call_site.pc,
                        "function": c.call_site.function,
                        "file": c.call_site.file,
                        "line": c.call_site.line,
                    },
                    "shapes": c.shapes,
                    "error": c.error,
                    "instructions": c.instructions,
                    "unfinished": c.unfinished,
                    "notes": c.notes,
                    "inner_calls": inner_calls_json(&c.inner_calls),
                    "violates": r.violates(),
                    "stray_reads": c.stray_reads,
                    "first_stray_read": c.first_stray_read.as_ref().map(|s| json!({
                        "pc": s.at.pc,
                        "function": s.at.function,
                        "file": s.at.file,
                        "line": s.at.line,
                        "address": s.address,
                        "size": s.size,
                        "object": s.object.as_ref().map(|o| &o.0),
                        "offset": s.object.as_ref().map(|o| o.1),
                    })),
                    "layer": r.layer.as_ref().and_then(|l| serde_json::to_value(l).ok()),
                })
            })
            .collect(),
    )
}
