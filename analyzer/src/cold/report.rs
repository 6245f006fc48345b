//! What `memtrace cold` reports: per arena tensor, its graph-level cold
//! range (Algorithm 2) next to the byte-level classes a trace measured, as
//! a table, JSON or CSV.

use memtrace_abi::{AccessPath, Arch, Kernels};
use memtrace_model::planner::PlannerKind;
use serde::Serialize;

use super::bytes::{ByteClass, ByteColdRun, ByteGap, ByteRuns, OpWindow, LOAD_INPUT};
use crate::error::Result;
use crate::shadow::Clobber;
use memtrace_model::cold::{access_positions, graph_cold_ranges};
use memtrace_model::Model;

/// A tensor's graph-level cold range, from the graph alone.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GraphCold {
    /// Positions that access the tensor (its writer and readers).
    pub accesses: Vec<usize>,
    /// Position of its writer (0 for a graph input).
    pub defined: usize,
    /// Position of its last reader.
    pub last: usize,
    /// Access that opens the longest cold range.
    pub start: usize,
    /// Access that closes it.
    pub end: usize,
    /// `end − start` (Algorithm 2's length).
    pub span: usize,
    /// Operators strictly between `start` and `end`.
    pub idle_ops: usize,
    /// Bytes × idle operators.
    pub idle_cost: u64,
    /// Instructions of the run from the end of `start`'s window to the
    /// start of `end`'s: what the whole operators in between took.
    pub idle_instructions: u64,
}

/// A tensor's byte-level cold ranges, from the trace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ByteLevel {
    /// The most idle operators of any byte's longest gap.
    pub longest_idle_ops: usize,
    /// Σ over bytes of the idle operators of each byte's longest gap.
    pub idle_cost: u64,
    /// Bytes idle for more operators than the graph-level cold range: the
    /// candidates for a longer, partial spill.
    pub bytes_idle_longer: u64,
    /// Bytes grouped by the positions that access them.
    pub classes: Vec<ByteClass>,
}

/// One arena tensor at both levels.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TensorCold {
    /// Tensor index in the model.
    pub tensor: usize,
    /// Its (unique) name.
    pub name: String,
    /// Its bytes.
    pub bytes: u64,
    /// Its arena offset in the traced plan.
    pub offset: Option<u64>,
    /// Graph level.
    pub graph: GraphCold,
    /// Byte level (`None` when the trace never reached the tensor).
    pub byte_level: Option<ByteLevel>,
}

/// What `memtrace cold` prints.
#[derive(Clone, Debug, Serialize)]
pub struct ColdReport {
    /// Model name.
    pub model: String,
    /// Guest architecture of the TFLM runner.
    pub target: Arch,
    /// Kernel library of the TFLM runner.
    pub kernels: Kernels,
    /// Seed of the generated weights and input.
    pub seed: u64,
    /// Planner of the traced run's placement.
    pub planner: PlannerKind,
    /// Its arena bytes.
    pub arena_bytes: u64,
    /// How accesses were observed (`mmio`: instruction times of the access's
    /// block; `hooks`: of the access itself).
    pub access_path: AccessPath,
    /// Instructions inside the layer windows (the time axis of every
    /// instruction figure).
    pub instructions: u64,
    /// The layer windows of the run.
    pub windows: Vec<OpWindow>,
    /// Every arena tensor the operators access, by index.
    pub tensors: Vec<TensorCold>,
    /// Clobbers of the traced run (none for an un-overlapped plan).
    pub clobbers: Vec<Clobber>,
    /// Accesses the model cannot explain (none on a consistent run).
    pub problems: Vec<String>,
    /// Wall-clock seconds.
    pub seconds: f64,
}

/// Both levels of every arena tensor of `model` run in `order` with
/// tensors at `offsets`, the byte level from `run`.
pub fn tensor_colds(
    model: &Model,
    order: &[usize],
    offsets: &[Option<u64>],
    run: &ByteColdRun,
) -> Vec<TensorCold> {
    let names = model.tensor_names();
    let accesses = access_positions(model, order);
    let window = |p: usize| {
        run.windows
            .iter()
            .find(|w| w.position == p && w.op != LOAD_INPUT)
    };
    graph_cold_ranges(model, order)
        .into_iter()
        .map(|r| {
            let idle_instructions = match (window(r.start), window(r.end)) {
                (Some(a), Some(b)) if r.idle_ops() > 0 => b.start.saturating_sub(a.end),
                _ => 0,
            };
            let byte_level = run
                .tensors
                .iter()
                .find(|b| b.tensor == r.tensor)
                .map(|b| ByteLevel {
                    longest_idle_ops: b.longest_idle_ops(),
                    idle_cost: b.idle_cost(),
                    bytes_idle_longer: b.bytes_idle_longer_than(r.idle_ops()),
                    classes: b.classes.clone(),
                });
            TensorCold {
                tensor: r.tensor,
                name: names[r.tensor].clone(),
                bytes: r.bytes,
                offset: offsets.get(r.tensor).copied().flatten(),
                graph: GraphCold {
                    accesses: accesses[r.tensor].clone(),
                    defined: r.defined,
                    last: r.last,
                    start: r.start,
                    end: r.end,
                    span: r.span(),
                    idle_ops: r.idle_ops(),
                    idle_cost: r.idle_cost(),
                    idle_instructions,
                },
                byte_level,
            }
        })
        .collect()
}

/// `[o, o+len)`, with the stride and count of a progression.
fn runs_text(runs: &[ByteRuns], max: usize) -> String {
    let mut parts: Vec<String> = runs
        .iter()
        .take(max)
        .map(|r| {
            let one = format!("[{}, {})", r.offset, r.offset + r.len);
            if r.count == 1 {
                one
            } else {
                format!("{one} every {} ×{}", r.stride, r.count)
            }
        })
        .collect();
    if runs.len() > max {
        parts.push(format!("… ({} more)", runs.len() - max));
    }
    parts.join(", ")
}

fn positions_text(p: &[usize]) -> String {
    if p.is_empty() {
        return "never".into();
    }
    p.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

fn span_text(s: [u64; 2]) -> String {
    if s[0] == s[1] {
        s[0].to_string()
    } else {
        format!("{}–{}", s[0], s[1])
    }
}

/// One gap as text: positions, idle operators and instructions.
fn gap_text(g: &ByteGap) -> String {
    let to = g.to.map_or("end (dead)".to_string(), |t| t.to_string());
    let after = g.first_after.map_or("freed".to_string(), |a| {
        format!("first after {}", span_text(a))
    });
    format!(
        "{}→{to}: {} idle ops; last before {}, {after}; idle {} instructions",
        g.from,
        g.idle_ops,
        span_text(g.last_before),
        span_text(g.idle_instructions)
    )
}

impl TensorCold {
    /// The byte level differs from the graph level: some class is not
    /// accessed at every graph-level access.
    pub fn is_partial(&self) -> bool {
        self.byte_level
            .as_ref()
            .is_some_and(|b| b.classes.iter().any(|c| c.positions != self.graph.accesses))
    }
}

/// One CSV row: a tensor, one of its classes and one of that class's gaps
/// (with their indices).
type CsvRow<'a> = (
    &'a TensorCold,
    Option<(usize, &'a ByteClass)>,
    Option<(usize, &'a ByteGap)>,
);

impl ColdReport {
    /// Passed: no clobber, no access the model cannot explain.
    pub fn ok(&self) -> bool {
        self.clobbers.is_empty() && self.problems.is_empty()
    }

    /// The report as a table, with the partial classes under it.
    pub fn to_text(&self) -> String {
        let mut s = format!(
            "cold ranges  {}  (target {}, kernels {}, seed {}; {} plan, arena {} B; {} operators, \
             {} instructions in their windows; {} access path)\n",
            self.model,
            self.target,
            self.kernels,
            self.seed,
            self.planner,
            self.arena_bytes,
            self.windows.iter().filter(|w| w.op != LOAD_INPUT).count(),
            self.instructions,
            self.access_path
        );
        s.push_str(
            "graph level: TinySeg's Algorithm 2 over the execution order (positions); byte level: \
             from the trace, each byte's longest idle stretch\n\n",
        );
        s.push_str(
            "| tensor | bytes | offset | lifetime | cold range | idle ops | idle cost B·ops | idle instructions | byte classes | bytes idle longer | longest byte idle ops | byte idle cost B·ops |\n",
        );
        s.push_str("|---|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
        for t in &self.tensors {
            let g = &t.graph;
            let (classes, longer, longest, cost) = match &t.byte_level {
                Some(b) => (
                    b.classes.len().to_string(),
                    b.bytes_idle_longer.to_string(),
                    b.longest_idle_ops.to_string(),
                    b.idle_cost.to_string(),
                ),
                None => ("—".into(), "—".into(), "—".into(), "—".into()),
            };
            s.push_str(&format!(
                "| {} | {} | {} | {}..{} | {}..{} | {} | {} | {} | {} | {} | {} | {} |\n",
                t.name,
                t.bytes,
                t.offset.map_or("—".into(), |o| o.to_string()),
                g.defined,
                g.last,
                g.start,
                g.end,
                g.idle_ops,
                g.idle_cost,
                g.idle_instructions,
                classes,
                longer,
                longest,
                cost
            ));
        }
        let partial: Vec<&TensorCold> = self.tensors.iter().filter(|t| t.is_partial()).collect();
        if partial.is_empty() {
            s.push_str("\nevery byte of every tensor is accessed by every operator that accesses the tensor: byte level = graph level\n");
        } else {
            s.push_str("\nbytes not accessed by every operator that accesses their tensor:\n");
        }
        for t in partial {
            s.push_str(&format!(
                "  {} ({} B; accessed at {}; graph cold {}..{})\n",
                t.name,
                t.bytes,
                positions_text(&t.graph.accesses),
                t.graph.start,
                t.graph.end
            ));
            for c in t.byte_level.iter().flat_map(|b| &b.classes) {
                s.push_str(&format!(
                    "    {} B at {}; accessed at {}\n",
                    c.bytes,
                    runs_text(&c.runs, 3),
                    positions_text(&c.positions)
                ));
                if let Some(g) = c.longest.map(|i| &c.gaps[i]) {
                    s.push_str(&format!("      longest {}\n", gap_text(g)));
                }
            }
        }
        for c in &self.clobbers {
            s.push_str(&format!(
                "CLOBBER {} read {} bytes of {} from offset {}\n",
                c.op, c.bytes, c.tensor, c.offset
            ));
        }
        for p in &self.problems {
            s.push_str(&format!("PROBLEM {p}\n"));
        }
        s.push_str(&format!(
            "result  {}  ({:.2} s)\n",
            if self.ok() { "OK" } else { "FAILED" },
            self.seconds
        ));
        s
    }

    /// The report as pretty JSON.
    pub fn to_json(&self) -> Result<String> {
        Ok(
            serde_json::to_string_pretty(self).map_err(|e| crate::Error::Invalid(e.to_string()))?
                + "\n",
        )
    }

    /// One CSV row per tensor, class and gap (a class without gaps has one
    /// row with empty gap columns).
    pub fn to_csv(&self) -> Result<String> {
        use polars::prelude::*;
        let mut rows: Vec<CsvRow<'_>> = Vec::new();
        for t in &self.tensors {
            let classes: Vec<(usize, &ByteClass)> = t
                .byte_level
                .iter()
                .flat_map(|b| b.classes.iter().enumerate())
                .collect();
            if classes.is_empty() {
                rows.push((t, None, None));
            }
            for (ci, c) in classes {
                if c.gaps.is_empty() {
                    rows.push((t, Some((ci, c)), None));
                }
                for (gi, g) in c.gaps.iter().enumerate() {
                    rows.push((t, Some((ci, c)), Some((gi, g))));
                }
            }
        }
        let col_u =
            |f: &dyn Fn(&TensorCold) -> u64| rows.iter().map(|r| f(r.0)).collect::<Vec<_>>();
        let col_c = |f: &dyn Fn(&ByteClass) -> String| {
            rows.iter()
                .map(|r| r.1.map(|(_, c)| f(c)))
                .collect::<Vec<_>>()
        };
        let col_g = |f: &dyn Fn(&ByteGap) -> Option<u64>| {
            rows.iter()
                .map(|r| r.2.and_then(|(_, g)| f(g)))
                .collect::<Vec<_>>()
        };
        let mut df = df!(
            "tensor" => col_u(&|t| t.tensor as u64),
            "name" => rows.iter().map(|r| r.0.name.clone()).collect::<Vec<_>>(),
            "bytes" => col_u(&|t| t.bytes),
            "offset" => rows.iter().map(|r| r.0.offset).collect::<Vec<_>>(),
            "defined" => col_u(&|t| t.graph.defined as u64),
            "last" => col_u(&|t| t.graph.last as u64),
            "graph_start" => col_u(&|t| t.graph.start as u64),
            "graph_end" => col_u(&|t| t.graph.end as u64),
            "graph_idle_ops" => col_u(&|t| t.graph.idle_ops as u64),
            "graph_idle_cost" => col_u(&|t| t.graph.idle_cost),
            "graph_idle_instructions" => col_u(&|t| t.graph.idle_instructions),
            "class" => rows.iter().map(|r| r.1.map(|(i, _)| i as u64)).collect::<Vec<_>>(),
            "class_bytes" => rows.iter().map(|r| r.1.map(|(_, c)| c.bytes)).collect::<Vec<_>>(),
            "class_runs" => col_c(&|c| runs_text(&c.runs, usize::MAX)),
            "class_positions" => col_c(&|c| positions_text(&c.positions)),
            "gap" => rows.iter().map(|r| r.2.map(|(i, _)| i as u64)).collect::<Vec<_>>(),
            "longest" => rows.iter().map(|r| match (r.1, r.2) {
                (Some((_, c)), Some((gi, _))) => Some(c.longest == Some(gi)),
                _ => None,
            }).collect::<Vec<_>>(),
            "gap_from" => col_g(&|g| Some(g.from as u64)),
            "gap_to" => col_g(&|g| g.to.map(|t| t as u64)),
            "gap_span" => col_g(&|g| Some(g.span as u64)),
            "gap_idle_ops" => col_g(&|g| Some(g.idle_ops as u64)),
            "last_before_min" => col_g(&|g| Some(g.last_before[0])),
            "last_before_max" => col_g(&|g| Some(g.last_before[1])),
            "first_after_min" => col_g(&|g| g.first_after.map(|a| a[0])),
            "first_after_max" => col_g(&|g| g.first_after.map(|a| a[1])),
            "idle_instructions_min" => col_g(&|g| Some(g.idle_instructions[0])),
            "idle_instructions_max" => col_g(&|g| Some(g.idle_instructions[1])),
        )?;
        let mut out = Vec::new();
        CsvWriter::new(&mut out).finish(&mut df)?;
        String::from_utf8(out).map_err(|e| crate::Error::Invalid(format!("CSV is not UTF-8: {e}")))
    }
}
