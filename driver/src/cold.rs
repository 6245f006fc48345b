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

use memtrace_abi::tflm::{Placement, TflmResult, BUFFER_ID_OUTPUTS};
use memtrace_analyzer::cold::{tensor_colds, BufferTensors, ByteCold, ColdReport};
use memtrace_model::graph::{read_graph, TfliteGraph};
use memtrace_model::planner::{PlacedTensor, Plan};
use memtrace_model::{tflite, Model};
use memtrace_tracer::Arch;

use crate::common::{access_path, check_output};
use crate::error::{Context, Result};
use crate::kernels::Kernels;
use crate::tflm::{
    input_bytes, load_runner, model_bytes, runner_path, scratch_needs, seeded_inputs, ModelRun,
    ScratchWatch,
};
use crate::bail;

/// What to analyse, and how.
#[derive(Debug, Clone)]
pub struct ColdOptions {
    /// `MODEL.tflite` or `zoo:NAME`.
    pub model: String,
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
    for out in req.plot.iter().chain(&req.out) {
        check_output(out, &[Path::new(&req.model)])?;
    }
    if let Some(p) = &req.plot {
        memtrace_analyzer::plot::is_svg(p)?;
    }
    let given = model_bytes(&req.model, req.seed)?;
    let bytes = tflite::strip_offline(&given)
        .with_context(|| format!("reading {}", req.model))?
        .unwrap_or(given);
    let graph = read_graph(&bytes).with_context(|| format!("reading {}", req.model))?;
    let model = tflite::import_for_tflm(&model_name(&req.model), &bytes)
        .with_context(|| format!("loading {}", req.model))?;
    let inputs = inputs_of(req, &graph)?;
    let path = runner_path(req.target, req.kernels, req.runner.as_deref(), "--runner")?;
    let image = load_runner(&path, req.kernels)?;
    if image.arch != req.target {
        bail!(
            "{} is a {} runner but --target is {}",
            path.display(),
            image.arch.name(),
            req.target.name()
        );
    }
    // TFLM runs subgraph 0's operators in the model's order.
    let order: Vec<usize> = (0..model.ops.len()).collect();
    let mut bytes_cold = ByteCold::new(&model, &order, buffer_tensors(&graph, &order));
    let run = ModelRun {
        // Byte level needs no weights; scratch is placed, not analysed.
        weights: false,
        scratch: ScratchWatch::Untraced,
        // Event times come from the run's own clock.
        split: false,
        ..ModelRun::whole(&image, &bytes, &inputs, req.max_instructions)
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

/// The model's name in the report: a zoo model's, or the file's stem.
fn model_name(arg: &str) -> String {
    match arg.strip_prefix("zoo:") {
        Some(zoo) => zoo.to_string(),
        None => Path::new(arg)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".into()),
    }
}

/// The graph inputs' bytes: `--input` (all inputs, concatenated) or seeded.
fn inputs_of(req: &ColdOptions, graph: &TfliteGraph) -> Result<Vec<u8>> {
    let Some(p) = &req.input else {
        return seeded_inputs(graph, req.seed);
    };
    let data =
        memtrace_io::input::read_limited(p, memtrace_io::input::MAX_INPUT_FILE, "--input files")?;
    let want = input_bytes(graph)?;
    if data.len() as u64 != want {
        bail!(
            "--input {} has {} bytes; the graph inputs of {} need {want}",
            p.display(),
            data.len(),
            req.model
        );
    }
    Ok(data)
}

/// Which tensor each buffer of each window is, by the runner's buffer ids:
/// input k of an operator is id k, output j is id 32 + j, and a
/// `load_input` window's tensor is id 32 (docs/protocol.md).
pub fn buffer_tensors(graph: &TfliteGraph, order: &[usize]) -> BufferTensors {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_buffers_are_one_tensor_only_side_by_side() {
        assert!(side_by_side(&[(0, 16), (16, 32), (48, 16)]));
        assert!(!side_by_side(&[(0, 16), (32, 16)]));
        assert!(side_by_side(&[(64, 16)]));
    }

    #[test]
    fn zoo_and_file_models_are_named_by_what_the_user_gave() {
        assert_eq!(model_name("zoo:sakr_cifar10"), "sakr_cifar10");
        assert_eq!(model_name("/a/b/magic_wand.tflite"), "magic_wand");
    }
}
