//! Cold ranges of a model (`memtrace cold`): TinySeg's graph-level analysis
//! next to byte-level cold ranges measured from one run of real TFLM.
//!
//! The run is the model on the TFLM runner of `--kernels` and `--target`,
//! one layer per operator, in the arena TFLM's own greedy planner lays out
//! (an offline plan the model carries is taken out: TinySeg starts from
//! that arena). Every tensor's offset, the scratch buffers' included, is
//! the one the runner reports, so the picture shows the placement that ran.
//! TFLM's plan overlaps no input with its operator's output, and accesses
//! are attributed by the buffer they go through (its id in its window), so
//! tensors that share bytes at other times never mix.

use std::path::{Path, PathBuf};
use std::time::Instant;

use memtrace_abi::runner::{Placement, TflmResult, BUFFER_ID_OUTPUTS};
use memtrace_analyzer::cold::{tensor_colds, BufferTensors, ByteCold, ColdReport};
use memtrace_model::graph::TfliteGraph;
use memtrace_model::planner::{PlacedTensor, Plan};
use memtrace_model::source::ModelSource;
use memtrace_model::Model;
use memtrace_tracer::Arch;

use crate::bail;
use crate::runtime::kernels::Kernels;
use crate::runtime::{model_runner, open_model, run_inputs, scratch_needs, ModelRun, ScratchWatch};
use crate::support::common::{access_path, check_output};
use crate::support::error::{Context, Result};
use crate::support::outcome::{Answer, Format, Outcome};

/// What to analyse, and how.
#[derive(Debug, Clone)]
pub struct ColdOptions {
    /// The model: a `.tflite` file or a zoo model.
    pub model: ModelSource,
    /// Seed of the generated input (and of zoo weights).
    pub seed: u64,
    /// Raw bytes of the graph inputs, concatenated in order.
    pub input: Option<PathBuf>,
    /// Architecture of the runner.
    pub target: Arch,
    /// Kernel library of the runner.
    pub kernels: Kernels,
    /// The TFLM runner ELF (default: the harness build).
    pub runner: Option<PathBuf>,
    /// Fig. 12-style picture of the cold ranges.
    pub plot: Option<PathBuf>,
    /// The picture's time axis in instructions instead of operator positions.
    pub plot_instructions: bool,
    /// The report file (checked before the run).
    pub out: Option<PathBuf>,
    /// Observe accesses with memory hooks: each access's own instruction
    /// instead of its block's.
    pub exact_time: bool,
    /// Instruction budget of the run.
    pub max_instructions: u64,
}

/// Runs the model once on TFLM under its own greedy plan and reports every
/// arena tensor's cold ranges at graph and byte level (and draws them).
pub fn cold(req: &ColdOptions) -> Result<ColdReport> {
    let started = Instant::now();
    let inputs: Vec<&Path> = req.model.path().into_iter().collect();
    for out in req.plot.iter().chain(&req.out) {
        check_output(out, &inputs)?;
    }
    if let Some(p) = &req.plot {
        memtrace_analyzer::plot::is_svg(p)?;
    }
    let file = open_model(&req.model, req.seed)?;
    // TFLM's own greedy plan: not an offline plan the model carries.
    let bytes = file.without_offline();
    let graph = &file.graph;
    let model = file
        .imported()
        .with_context(|| format!("loading {}", req.model))?;
    let inputs = run_inputs(req.input.as_deref(), req.seed, graph)?;
    let (path, image) = model_runner(req.target, req.kernels, req.runner.as_deref(), graph)?;
    // TFLM runs subgraph 0's operators in the model's order.
    let order: Vec<usize> = (0..model.ops.len()).collect();
    let mut bytes_cold = ByteCold::new(&model, &order, buffer_tensors(graph, &order));
    let run = ModelRun {
        // Declared as `memtrace run` declares them, although byte level
        // ignores them: each declaration is guest code inside its window,
        // so both count the same instructions per operator.
        weights: true,
        // Scratch is placed, not analysed.
        scratch: ScratchWatch::Untraced,
        // Event times come from the run's own clock.
        split: false,
        ..ModelRun::whole(&image, bytes, &inputs, req.max_instructions)
    };
    let outcome = run
        .trace(
            access_path(req.exact_time),
            None,
            false,
            &mut [&mut bytes_cold],
        )
        .with_context(|| format!("running {} on {}", req.model, path.display()))?;
    let result = &outcome.result;
    if result.ops as usize != model.ops.len() {
        bail!(
            "{}: TFLM ran {} operators, the model has {}",
            req.model,
            result.ops,
            model.ops.len()
        );
    }
    let traced = traced_placement(&model, result)?;
    let mut run = bytes_cold.finish();
    let mut problems = traced.problems;
    problems.append(&mut run.problems);
    let offsets = traced.plan.offsets(&traced.model);
    let report = ColdReport {
        model: model.name.clone(),
        target: req.target,
        kernels: req.kernels,
        seed: req.seed,
        planner: traced.plan.planner,
        arena_bytes: result.head_bytes,
        access_path: outcome.summary.access,
        instructions: run.windows.last().map_or(0, |w| w.end),
        tensors: tensor_colds(&traced.model, &order, &offsets, &run),
        windows: run.windows,
        // TFLM's own plan shares no bytes between live tensors.
        clobbers: Vec::new(),
        problems,
        seconds: started.elapsed().as_secs_f64(),
    };
    if let Some(path) = &req.plot {
        memtrace_analyzer::cold::plot::render(
            &report,
            &traced.model,
            &traced.plan,
            req.plot_instructions,
            path,
        )?;
    }
    Ok(report)
}

/// Which tensor each buffer of each window is, by the runner's buffer ids:
/// input k of an operator is id k, output j is id 32 + j, and a
/// `load_input` window's tensor is id 32 (docs/protocol.md).
pub(crate) fn buffer_tensors(graph: &TfliteGraph, order: &[usize]) -> BufferTensors {
    let index = |t: i32| usize::try_from(t).ok();
    let ops = order
        .iter()
        .map(|&op| {
            let op = &graph.ops[op];
            let inputs = (0u32..).zip(&op.inputs);
            let outputs = (BUFFER_ID_OUTPUTS..).zip(&op.outputs);
            inputs
                .chain(outputs)
                .filter_map(|(id, &t)| Some((id, index(t)?)))
                .collect()
        })
        .collect();
    let inputs = graph
        .inputs
        .iter()
        .map(|&t| vec![(BUFFER_ID_OUTPUTS, t)])
        .collect();
    BufferTensors { ops, inputs }
}

/// TFLM's placement as a plan over the model with TFLM's scratch buffers
/// as tensors, and what in it the model cannot explain.
struct TracedPlacement {
    model: Model,
    plan: Plan,
    problems: Vec<String>,
}

/// TFLM's arena alignment: every buffer of its head starts on it and is
/// reserved rounded up to it.
const TFLM_ALIGNMENT: u64 = 16;

/// Where TFLM put every arena tensor of `model` and every scratch buffer,
/// from the start of its head, with the lifetimes memtrace's model of
/// TFLM's greedy planner gives them (which only draws them: every offset
/// is TFLM's). An operator's scratch buffers are its scratch tensor
/// ([`Model::with_scratch`]) when TFLM put them side by side, one tensor
/// each otherwise.
fn traced_placement(model: &Model, result: &TflmResult) -> Result<TracedPlacement> {
    let mut model = model.with_scratch(&scratch_needs(result, model.ops.len()));
    let mut problems = Vec::new();
    let mut plan = Plan::tflm_greedy(&model)?;
    let names = model.tensor_names();
    let scratch_of: Vec<Option<usize>> = model.ops.iter().map(|o| o.scratch).collect();
    let mut extra = Vec::new();
    plan.tensors.retain_mut(|p| {
        if let Some(op) = scratch_of.iter().position(|&s| s == Some(p.tensor)) {
            let buffers = scratch_buffers(result, op);
            let Some(first) = buffers.first() else {
                return false;
            };
            p.offset = first.0;
            if !side_by_side(&buffers) {
                p.size = first.1;
                for &(offset, size) in &buffers[1..] {
                    extra.push((p.clone(), offset, size));
                }
            }
            return true;
        }
        match head_offset(result, p.tensor) {
            Some(o) => {
                p.offset = o;
                true
            }
            None => {
                problems.push(format!(
                    "TFLM placed tensor `{}` outside its arena's head",
                    names[p.tensor]
                ));
                false
            }
        }
    });
    for (like, offset, size) in extra {
        let mut tensor = model.tensors[like.tensor].clone();
        tensor.name = format!("{}@{offset}", tensor.name);
        tensor.shape = vec![size as u32];
        tensor.bytes = size;
        model.tensors.push(tensor);
        plan.tensors.push(PlacedTensor {
            tensor: model.tensors.len() - 1,
            name: model.tensors[model.tensors.len() - 1].name.clone(),
            offset,
            size,
            ..like
        });
    }
    plan.tensors.sort_by_key(|p| p.offset);
    plan.peak_bytes = Some(result.head_bytes);
    plan.gap_bytes = Some(result.head_bytes.saturating_sub(plan.lower_bound_bytes));
    plan.overlaps_used.clear();
    plan.note = Some("TFLM's own greedy plan, as the runner reported it".into());
    Ok(TracedPlacement {
        model,
        plan,
        problems,
    })
}

/// Operator `op`'s scratch buffers in TFLM's head: offset and reserved
/// bytes, by offset.
fn scratch_buffers(result: &TflmResult, op: usize) -> Vec<(u64, u64)> {
    let mut buffers: Vec<(u64, u64)> = result
        .scratch
        .iter()
        .filter(|s| s.op as usize == op)
        .filter_map(|s| {
            let offset = s.offset.checked_sub(result.head_offset)?;
            Some((offset, s.bytes.next_multiple_of(TFLM_ALIGNMENT)))
        })
        .collect();
    buffers.sort_unstable();
    buffers
}

/// Whether each buffer starts where the one before ends: one scratch
/// tensor of their total bytes is then exactly where they are.
fn side_by_side(buffers: &[(u64, u64)]) -> bool {
    buffers.windows(2).all(|w| w[0].0 + w[0].1 == w[1].0)
}

/// Where TFLM put tensor `t`, from the start of its head (`None` outside
/// the head).
fn head_offset(r: &TflmResult, t: usize) -> Option<u64> {
    match r.tensors.get(t).map(|p| p.placement) {
        Some(Placement::Arena { offset }) => offset
            .checked_sub(r.head_offset)
            .filter(|&o| o < r.head_bytes.max(1)),
        _ => None,
    }
}

impl Answer for ColdReport {
    /// Exit status 1 when a tensor's cold range fails its cross-check.
    fn answer(&self, format: Format) -> Result<Outcome> {
        let report = match format {
            Format::Json => self.to_json()?,
            Format::Csv => self.to_csv()?,
            _ => self.to_text(),
        };
        Ok(Outcome {
            report,
            status: Outcome::status_of(self.ok()),
            ..Outcome::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use memtrace_abi::runner::{ScratchPlace, TensorPlace};
    use memtrace_model::zoo::GraphBuilder;
    use memtrace_model::{Activation, Dtype};

    const HEAD: u64 = 4096;

    fn in_arena(offset: u64, bytes: u64) -> TensorPlace {
        TensorPlace {
            placement: Placement::Arena {
                offset: HEAD + offset,
            },
            bytes,
        }
    }

    /// x → a → b (1×1 convolutions, 4×4×4 int8): TFLM's answer puts the
    /// activations at `at` (x, a, b), gives operator 0 two scratch
    /// buffers side by side and operator 1 two apart.
    fn answer(at: [u64; 3]) -> (Model, TflmResult, [usize; 3]) {
        let mut g = GraphBuilder::new("m", Dtype::Int8);
        let x = g.input("x", &[1, 4, 4, 4]);
        let a = g.conv2d("a", x, 4, 1, 1, Activation::None);
        let b = g.conv2d("b", a, 4, 1, 1, Activation::None);
        let model = g.finish(&[b]);
        let mut tensors = vec![
            TensorPlace {
                placement: Placement::Model { offset: 0 },
                bytes: 0,
            };
            model.tensors.len()
        ];
        for (t, o) in [x, a, b].into_iter().zip(at) {
            tensors[t] = in_arena(o, 64);
        }
        let scratch = |op: u32, offset: u64, bytes: u64| ScratchPlace {
            op,
            offset: HEAD + offset,
            bytes,
        };
        let result = TflmResult {
            stage: memtrace_abi::runner::TFLM_STAGE_INVOKED,
            arena_used_bytes: 1000,
            head_bytes: 512,
            tail_bytes: 100,
            head_offset: HEAD,
            ops: 2,
            inputs: 1,
            outputs: 1,
            output_bytes: Vec::new(),
            tensors,
            // Operator 0: 20 bytes (reserved 32) then 10 (16) right after;
            // operator 1: 16 bytes at 256 and 16 at 384.
            scratch: vec![
                scratch(0, 192, 20),
                scratch(0, 224, 10),
                scratch(1, 384, 16),
                scratch(1, 256, 16),
            ],
            digests: Vec::new(),
            dump: Vec::new(),
        };
        (model, result, [x, a, b])
    }

    #[test]
    fn every_offset_is_the_one_tflm_reported_scratch_included() {
        // Not where memtrace's greedy model of TFLM would put them.
        let (model, result, [x, a, b]) = answer([128, 0, 64]);
        let traced = traced_placement(&model, &result).unwrap();
        assert!(traced.problems.is_empty(), "{:?}", traced.problems);
        let offsets = traced.plan.offsets(&traced.model);
        assert_eq!(
            [offsets[x], offsets[a], offsets[b]],
            [Some(128), Some(0), Some(64)]
        );
        let boxes = |op: usize| -> Vec<(u64, u64)> {
            let scratch = traced.model.ops[op].scratch.unwrap();
            let owner = &traced.model.tensors[scratch].name;
            traced
                .plan
                .tensors
                .iter()
                .filter(|p| {
                    traced.model.tensors[p.tensor]
                        .name
                        .starts_with(owner.as_str())
                })
                .map(|p| (p.offset, p.size))
                .collect()
        };
        assert_eq!(boxes(0), vec![(192, 48)], "one tensor of 32 + 16 bytes");
        assert_eq!(boxes(1), vec![(256, 16), (384, 16)], "one box per buffer");
        assert_eq!(traced.plan.peak_bytes, Some(512));
    }

    #[test]
    fn a_tensor_outside_the_head_is_a_problem_not_a_box() {
        let (model, result, [_, a, _]) = answer([128, 600, 64]);
        let traced = traced_placement(&model, &result).unwrap();
        assert_eq!(traced.problems.len(), 1, "{:?}", traced.problems);
        assert!(traced.problems[0].contains("`a`"), "{:?}", traced.problems);
        assert_eq!(traced.plan.offsets(&traced.model)[a], None);
    }

    #[test]
    fn scratch_buffers_are_one_tensor_only_side_by_side() {
        assert!(side_by_side(&[(0, 16), (16, 32), (48, 16)]));
        assert!(!side_by_side(&[(0, 16), (32, 16)]));
        assert!(side_by_side(&[(64, 16)]));
    }
}
