//! The model under verification ([`Subject`]): its `.tflite` bytes and
//! graph, the TFLM runner that runs it (checked to hold its tensors) and the
//! graph inputs of both runs.

use memtrace_model::graph::TfliteGraph;
use memtrace_model::planner::Plan;
use memtrace_model::source::ModelFile;
use memtrace_model::Model;
use memtrace_tracer::ElfImage;

use super::VerifyOptions;
use crate::bail;
use crate::runtime::model_runner;
use crate::runtime::oracle::{self};
use crate::runtime::plan_file::EmbeddedOrigin;
use crate::support::error::{Context, Result};

/// memtrace's `tflm-greedy` prediction of TFLM's head for `model`.
pub(super) fn greedy_prediction(model: &Model) -> Result<u64> {
    let plan = Plan::tflm_greedy(model)?;
    Ok(plan.arena_bytes(model))
}

/// What a TFLM verify runs: the model, read once, the inputs, and the
/// runner.
pub(super) struct Subject {
    /// The model: its bytes as given (with any `OfflineMemoryAllocation`
    /// it carried, which only the run that verifies that plan uses), its
    /// graph and memtrace's model of it.
    pub(super) file: ModelFile,
    /// memtrace's model of it.
    model: Model,
    /// Whose the offline plan the model carried is.
    pub(super) origin: Option<EmbeddedOrigin>,
    pub(super) inputs: Vec<u8>,
    pub(super) image: ElfImage,
    /// Bytes of the runner's arena: the bound of every size a plan or the
    /// model asks for.
    pub(super) arena_limit: u64,
}

impl Subject {
    pub(super) fn load(req: &VerifyOptions) -> Result<Subject> {
        if let Some(p) = &req.plot {
            let inputs: Vec<&std::path::Path> = req.model.path().into_iter().collect();
            crate::support::common::check_output(p, &inputs)?;
        }
        let file = crate::runtime::open_model(&req.model, req.seed)?;
        // TFLM's own plan is the reference: an offline plan the model
        // carries is taken out of every run but the one that verifies it.
        let origin = EmbeddedOrigin::of(&file);
        if file.graph.outputs.is_empty() {
            bail!(
                "{} has no graph outputs: there is nothing to compare",
                req.model
            );
        }
        let (path, image) =
            model_runner(req.target, req.kernels, req.runner.as_deref(), &file.graph)?;
        let arena_limit = crate::runtime::runner_arena_bytes(&image)?;
        let model = file
            .model()
            .with_context(|| format!("planning {}", req.model))?
            .clone();
        check_tensors_fit(&model, arena_limit, &path)?;
        let inputs = inputs_of(req, &file.graph)?;
        Ok(Subject {
            file,
            model,
            origin,
            inputs,
            image,
            arena_limit,
        })
    }

    /// The model without the offline plan it carried: what TFLM's own plan,
    /// the host oracle and every plan under test start from.
    pub(super) fn bytes(&self) -> &[u8] {
        self.file.without_offline()
    }

    /// The offsets of the offline plan the model carried, if any.
    pub(super) fn embedded(&self) -> Option<&Vec<i64>> {
        self.file.offline.as_ref()
    }

    /// Subgraph 0 as TFLM reads it.
    pub(super) fn graph(&self) -> &TfliteGraph {
        &self.file.graph
    }

    /// memtrace's model of the file.
    pub(super) fn model(&self) -> &Model {
        &self.model
    }
}

/// The graph outputs as the oracle compares them: name, element type,
/// bytes.
pub(super) fn output_layout(graph: &TfliteGraph) -> Vec<oracle::OutputLayout> {
    graph
        .outputs
        .iter()
        .map(|&t| oracle::OutputLayout {
            name: graph.tensor_name(t),
            dtype: graph.tensors[t].dtype,
            bytes: graph.tensors[t].bytes.unwrap_or(0),
        })
        .collect()
}

/// The graph inputs' bytes: `--input` (all inputs, concatenated) or seeded.
fn inputs_of(req: &VerifyOptions, graph: &TfliteGraph) -> Result<Vec<u8>> {
    crate::runtime::run_inputs(req.input.as_deref(), req.seed, graph)
}

/// Refuses a model with a tensor TFLM could never hold in the runner's
/// arena of `limit` bytes (checked before any size is taken from the
/// model): constants live in the model, everything else in the arena.
fn check_tensors_fit(model: &Model, limit: u64, runner: &std::path::Path) -> Result<()> {
    let names = model.tensor_names();
    for (t, tensor) in model.tensors.iter().enumerate() {
        if !tensor.is_constant && tensor.bytes > limit {
            bail!(
                "tensor `{}` needs {} bytes, more than the runner's arena of {limit} bytes ({})",
                names[t],
                tensor.bytes,
                runner.display()
            );
        }
    }
    Ok(())
}
