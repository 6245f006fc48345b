//! O_s traced through a compiled kernel suite (`plan --suite`): each
//! distinct layer configuration of the model once ([`traced`]).

use std::collections::HashMap;
use std::path::Path;

use memtrace_abi::LayerSpec;
use memtrace_model::planner::overlap::TracedOverlaps;
use memtrace_model::Model;
use memtrace_tracer::ElfImage;

use crate::bail;
use crate::runtime::trace_cache::TraceCache;
use crate::support::common::threads;
use crate::support::error::Result;
use crate::workflows::sweep::{Depth, Sweep};

/// Traces each distinct layer configuration of the model through the
/// compiled kernel suite and keeps its monotone O_s; a configuration
/// traced before through the same suite comes from `cache`.
pub fn traced(model: &Model, suite: &Path, cache: &TraceCache) -> Result<TracedOverlaps> {
    let image = ElfImage::load(suite)?;
    let key = |spec: &LayerSpec| {
        TraceCache::key(
            "suite-monotone-os-v1",
            &[&image.bytes, spec.to_string().as_bytes()],
        )
    };
    let mut by_spec = HashMap::new();
    let mut specs: Vec<LayerSpec> = Vec::new();
    for op in 0..model.ops.len() {
        let Some(spec) = model.layer_spec(op) else {
            continue;
        };
        if by_spec.contains_key(&spec.to_string()) || specs.contains(&spec) {
            continue;
        }
        match cache.get::<u64>(&key(&spec)) {
            Some(bytes) => {
                by_spec.insert(spec.to_string(), bytes);
            }
            None => specs.push(spec),
        }
    }
    let names: Vec<String> = (0..specs.len()).map(|i| format!("layer {i}")).collect();
    let rows = Sweep {
        image: &image,
        depth: Depth::Overlap,
        seed: 1,
        threads: threads(None),
        max_instructions: 20_000_000_000,
    }
    .specs(&specs, &names);
    for (spec, row) in specs.iter().zip(rows) {
        let Some(bytes) = row.monotone_bytes else {
            bail!(
                "tracing {spec} through {} failed: {}",
                suite.display(),
                row.error.unwrap_or_else(|| "no O_s".into())
            );
        };
        cache.put(&key(spec), &bytes);
        by_spec.insert(spec.to_string(), bytes);
    }
    Ok(TracedOverlaps {
        by_op: HashMap::new(),
        by_spec,
    })
}
