//! TFLM operator invocations of an unmodified program as layers
//! (docs/check.md, "TFLM operators as layers"): each invocation the
//! interpreter's node loop makes is a layer (`memtrace_tracer::program`),
//! its messages analysed as a call's are (`calls.rs`); here each is joined
//! with its layer, and every run of the loop with TFLM's arena figures.

use serde_json::{json, Value};

use memtrace_analyzer::report::LayerReport;
use memtrace_overlap::check::Flag;
use memtrace_tracer::program::{ProgramRun, TflmArena, TflmInvocation, TracedOperator};
use memtrace_tracer::ElfImage;

use super::scratch::{size_models, ModelScratch};

/// One operator invocation and its layer.
#[derive(Clone, Debug)]
pub struct OperatorReport {
    /// The invocation as the tracer saw it.
    pub operator: TracedOperator,
    /// Its layer; `None` when it could not be one.
    pub layer: Option<LayerReport>,
}

impl OperatorReport {
    /// Whether the invocation broke its memory contract.
    pub fn violates(&self) -> bool {
        self.layer
            .as_ref()
            .and_then(|l| l.contract.as_ref())
            .is_some_and(|c| !c.ok)
    }
}

/// TFLM's interpreter in a checked run.
#[derive(Clone, Debug)]
pub struct TflmReport {
    /// Why no operator was traced; `None` when the interpreter was found.
    pub missing: Option<String>,
    /// Each run of the node loop (`MicroInterpreter::Invoke`) and the
    /// arena when it returned.
    pub invocations: Vec<TflmInvocation>,
    /// Each operator invocation, in order.
    pub operators: Vec<OperatorReport>,
    /// Each model the interpreter ran, its operators' scratch sized from
    /// their shapes (`scratch.rs`).
    pub scratch: Vec<ModelScratch>,
}

impl TflmReport {
    /// Invocations that broke their memory contract.
    pub fn broken(&self) -> usize {
        self.operators.iter().filter(|o| o.violates()).count()
    }

    /// Operators that asked for less scratch than their kernel uses.
    pub fn scratch_short(&self) -> usize {
        self.scratch.iter().map(ModelScratch::short).sum()
    }
}

/// The interpreter's report of `run`, with each operator's layer from
/// `layers`; `None` when operators were not traced.
pub(super) fn report(
    image: &ElfImage,
    run: &ProgramRun,
    layers: &[LayerReport],
) -> Option<TflmReport> {
    let tflm = run.tflm.as_ref()?;
    let runs: Vec<(i64, Option<u64>)> = tflm
        .invocations
        .iter()
        .map(|i| (i.subgraph, i.model))
        .collect();
    let scratch = size_models(image, &runs, &tflm.operators);
    let operators = tflm
        .operators
        .iter()
        .map(|op| OperatorReport {
            operator: op.clone(),
            layer: op
                .index
                .and_then(|i| layers.iter().find(|l| l.index == i).cloned()),
        })
        .collect();
    Some(TflmReport {
        missing: tflm.missing.clone(),
        invocations: tflm.invocations.clone(),
        operators,
        scratch,
    })
}

/// `arena 139264 B at 0x…: used 84480 B (head 82432 B, tail 2048 B)`.
fn arena_text(arena: &Result<TflmArena, String>) -> String {
    match arena {
        Ok(a) => format!(
            "arena {} B at {:#x}: used {} B (head {} B, tail {} B)",
            a.bytes,
            a.start,
            a.used_bytes(),
            a.head_bytes,
            a.tail_bytes
        ),
        Err(why) => format!("arena not read: {why}"),
    }
}

/// `O_s monotone 17 B, exact 17 B of 16 B output`.
fn overlap_text(layer: &LayerReport) -> String {
    let Some(o) = &layer.overlap else {
        return "no O_s (no input/output pair)".to_owned();
    };
    let mut t = format!(
        "O_s monotone {} B, exact {} B of {} B output",
        o.monotone_bytes, o.exact_bytes, o.output_bytes
    );
    for f in o.flags.iter().filter(|f| **f != Flag::Mismatch) {
        t.push_str(&format!(" {}", f.name()));
    }
    t
}

/// The interpreter as text: one line per operator, a line per broken rule,
/// one line per run of the node loop with the arena.
pub(super) fn text(report: &TflmReport) -> String {
    if let Some(why) = &report.missing {
        return format!("tflm: no operators traced: {why}\n");
    }
    let mut out = String::new();
    for (n, inv) in report.invocations.iter().enumerate() {
        for r in report
            .operators
            .iter()
            .filter(|r| r.operator.invocation == n)
        {
            out.push_str(&operator_text(r));
        }
        let unfinished = if inv.unfinished { " (unfinished)" } else { "" };
        out.push_str(&format!(
            "tflm: invoke {n} of subgraph {}: {} operators; {}{unfinished}\n",
            inv.subgraph,
            inv.operators,
            arena_text(&inv.arena)
        ));
    }
    for m in &report.scratch {
        out.push_str(&m.text());
    }
    out.push_str(&format!(
        "tflm: {} operator invocations in {} runs of the interpreter, {} breaking the memory contract\n",
        report.operators.len(),
        report.invocations.len(),
        report.broken()
    ));
    out
}

fn operator_text(r: &OperatorReport) -> String {
    let o = &r.operator;
    let Some(layer) = &r.layer else {
        return format!(
            "op (invoke {}, node {}): {}: not traced, because {}\n",
            o.invocation,
            o.node,
            o.op,
            o.error.as_deref().unwrap_or("?")
        );
    };
    let verdict = match &layer.contract {
        Some(k) if k.ok => "contract ok".to_owned(),
        Some(k) => {
            let broken: Vec<&str> = k.violated().map(|(name, _)| name).collect();
            format!("contract BROKEN: {}", broken.join(", "))
        }
        None => "no contract".to_owned(),
    };
    let unfinished = if o.unfinished { " (unfinished)" } else { "" };
    let mut out = format!(
        "op {} (invoke {}, node {}): {} in {}: {}: {} instructions, {}, {verdict}{unfinished}\n",
        layer.index,
        o.invocation,
        o.node,
        o.op,
        o.kernel.function.as_deref().unwrap_or("?"),
        o.shapes,
        layer.instructions,
        overlap_text(layer)
    );
    out.push_str(&super::calls::violation_lines(layer));
    out.push_str(&super::calls::inner_calls_line(&o.inner_calls));
    out.push_str(&persistent_line(o));
    for n in &o.notes {
        out.push_str(&format!("  note: {n}\n"));
    }
    out
}

/// `  persistent op data: 2 buffers (1052 B), 640 stores`: the state a
/// kernel kept in the op data it allocated for itself; empty when it wrote
/// none there.
fn persistent_line(o: &TracedOperator) -> String {
    if o.persistent_writes == 0 {
        return String::new();
    }
    let (buffers, bytes) = o.persistent;
    format!(
        "  persistent op data: {buffers} buffer(s) ({bytes} B), {} stores\n",
        o.persistent_writes
    )
}

fn arena_json(arena: &Result<TflmArena, String>) -> Value {
    match arena {
        Ok(a) => json!({
            "start": a.start,
            "arena_bytes": a.bytes,
            "arena_used_bytes": a.used_bytes(),
            "head_bytes": a.head_bytes,
            "tail_bytes": a.tail_bytes,
        }),
        Err(why) => json!({ "error": why }),
    }
}

/// The interpreter as JSON: `missing`, `invocations` (each with its
/// `arena`) and `operators` (each with its layer as `memtrace run` reports
/// one: `buffers`, `overlap`, `contract`).
pub(super) fn json(report: &TflmReport) -> Value {
    let invocations: Vec<Value> = report
        .invocations
        .iter()
        .map(|inv| {
            json!({
                "subgraph": inv.subgraph,
                "operators": inv.operators,
                "unfinished": inv.unfinished,
                "arena": arena_json(&inv.arena),
            })
        })
        .collect();
    let operators: Vec<Value> = report
        .operators
        .iter()
        .map(|r| {
            let o = &r.operator;
            json!({
                "index": o.index,
                "invocation": o.invocation,
                "node": o.node,
                "op": o.op,
                "builtin_code": o.builtin_code,
                "kernel": {
                    "pc": o.kernel.pc,
                    "function": o.kernel.function,
                    "file": o.kernel.file,
                    "line": o.kernel.line,
                },
                "shapes": o.shapes,
                "error": o.error,
                "instructions": o.instructions,
                "unfinished": o.unfinished,
                "notes": o.notes,
                "inner_calls": super::calls::inner_calls_json(&o.inner_calls),
                "persistent": {
                    "buffers": o.persistent.0,
                    "bytes": o.persistent.1,
                    "writes": o.persistent_writes,
                },
                "violates": r.violates(),
                "layer": r.layer.as_ref().and_then(|l| serde_json::to_value(l).ok()),
            })
        })
        .collect();
    json!({
        "missing": report.missing,
        "invocations": invocations,
        "operators": operators,
        "scratch_sizing": report.scratch.iter().map(ModelScratch::json).collect::<Vec<_>>(),
        "scratch_short": report.scratch_short(),
    })
}
