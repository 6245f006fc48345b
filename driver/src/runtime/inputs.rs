//! What a run is given: the model, read once ([`open_model`]), and its
//! graph inputs, from a file or seeded ([`run_inputs`], [`seeded_inputs`]).

use std::path::Path;

use memtrace_model::graph::TfliteGraph;
use memtrace_model::source::{ModelFile, ModelSource};
use memtrace_model::synth::synth_values;
use memtrace_overlap::rng::Rng;

use crate::support::error::{Context, Result};
use crate::{bail, failed};

/// `source` read (a zoo model with weights from `seed`) and decoded once:
/// the one value of the model a command queries.
pub(crate) fn open_model(source: &ModelSource, seed: u64) -> Result<ModelFile> {
    let given = match source.path() {
        // The read's own error names the file and what went wrong.
        Some(path) => memtrace_io::input::read_limited(
            path,
            memtrace_io::input::MAX_TFLITE_FILE,
            ".tflite models",
        )?,
        None => source
            .bytes(seed)
            .with_context(|| format!("loading {source}"))?,
    };
    ModelFile::decode(source, seed, given).with_context(|| format!("reading {source}"))
}

/// The graph inputs of a run: the bytes of `input` (every graph input,
/// concatenated in order; its size must be theirs), or seeded data.
pub(crate) fn run_inputs(input: Option<&Path>, seed: u64, graph: &TfliteGraph) -> Result<Vec<u8>> {
    let Some(p) = input else {
        return seeded_inputs(graph, seed);
    };
    let data =
        memtrace_io::input::read_limited(p, memtrace_io::input::MAX_INPUT_FILE, "--input files")?;
    let want = input_bytes(graph)?;
    if data.len() as u64 != want {
        bail!(
            "--input {} has {} bytes; the graph inputs need {want}",
            p.display(),
            data.len()
        );
    }
    Ok(data)
}

/// Seeded bytes for every graph input, concatenated in order
/// ([`synth_values`], seeded per input).
pub(crate) fn seeded_inputs(graph: &TfliteGraph, seed: u64) -> Result<Vec<u8>> {
    // Sizes come from the model: bounded before anything is generated, by
    // the bound an `--input` file has.
    let total = input_bytes(graph)?;
    let limit = memtrace_io::input::MAX_INPUT_FILE;
    if total > limit {
        bail!("the graph inputs need {total} bytes, more than memtrace generates ({limit} bytes)");
    }
    let mut rng = Rng::new(seed ^ 0x5446_4C4D);
    let mut out = Vec::new();
    for &t in &graph.inputs {
        let tensor = &graph.tensors[t];
        let (Some(dtype), Some(bytes)) = (tensor.dtype, tensor.bytes) else {
            bail!(
                "graph input `{}` has type {} and shape {:?}: memtrace cannot generate its data \
                 (pass --input)",
                graph.tensor_name(t),
                tensor.type_name,
                tensor.shape
            );
        };
        let n = (bytes / dtype.size().max(1)) as usize;
        out.extend(synth_values(&mut rng, dtype, n));
    }
    Ok(out)
}

/// Bytes of all graph inputs together, or an error naming the input whose
/// size is unknown.
pub fn input_bytes(graph: &TfliteGraph) -> Result<u64> {
    graph.inputs.iter().try_fold(0u64, |acc, &t| {
        graph.tensors[t]
            .bytes
            .map(|b| acc.saturating_add(b))
            .ok_or_else(|| {
                failed!(
                    "graph input `{}` has no fixed size (shape {:?})",
                    graph.tensor_name(t),
                    graph.tensors[t].shape
                )
            })
    })
}
