//! Scratch memory of a kernel library, asked of the library itself: the
//! executor runs a model program in query mode, where it runs nothing and
//! writes what each operator's `*_get_buffer_size` returns into the program
//! (`OPW_SCRATCH_BYTES`, docs/protocol.md §13). TFLM places these buffers in
//! the arena, so they become tensors of the plan ([`Model::with_scratch`]).

use memtrace_model::lower::{lower, LowerInput};
use memtrace_model::Model;
use memtrace_tracer::{AccessPath, ElfImage, TraceOptions};

use crate::bail;
use crate::error::Result;
use crate::failed;
use crate::placement::{arena_of, greedy, offsets_of};

/// Scratch bytes each operator of `model` (by model operator index) needs in
/// `executor`, asked with the model lowered at `offsets` in `order`.
pub fn scratch_needs(
    executor: &ElfImage,
    model: &Model,
    order: &[usize],
    offsets: &[Option<u64>],
    arena_bytes: u64,
    seed: u64,
) -> Result<Vec<u64>> {
    let mut program = lower(
        model,
        &LowerInput {
            order,
            offsets,
            arena_bytes,
            seed,
            input_data: None,
        },
    )?;
    program.query_scratch = true;
    let encoded = program.encode()?;
    let arena = executor
        .symbol("memtrace_arena")
        .ok_or_else(|| failed!("{} has no memtrace_arena symbol", executor.path.display()))?;
    let readback = (0..order.len())
        .map(|k| (arena.address + encoded.scratch_bytes_word(k), 4))
        .collect();
    let summary = memtrace_tracer::trace(
        executor,
        TraceOptions {
            preload: vec![(arena.address, encoded.bytes)],
            readback,
            access: AccessPath::Mmio,
            ..TraceOptions::default()
        },
        &mut [],
    )?;
    if summary.exit_code != 0 {
        bail!(
            "{} {} when asked for scratch sizes",
            executor.path.display(),
            crate::common::exit_text(summary.exit_code, summary.exit_reason.as_deref(), "")
        );
    }
    let mut needs = vec![0u64; model.ops.len()];
    for (&op, word) in order.iter().zip(&summary.memory) {
        let bytes: [u8; 4] = word
            .as_slice()
            .try_into()
            .map_err(|_| failed!("short read-back of a scratch word"))?;
        needs[op] = u32::from_le_bytes(bytes) as u64;
    }
    Ok(needs)
}

/// `model` with the scratch tensors `executor` needs, asked with the model
/// under TFLM's greedy plan (any fitting placement works for the query,
/// docs/protocol.md §13).
pub fn with_library_scratch(executor: &ElfImage, model: &Model, seed: u64) -> Result<Model> {
    let plain = greedy(model)?;
    let (offsets, arena) = (offsets_of(model, &plain), arena_of(&plain, model));
    let needs = scratch_needs(executor, model, &plain.order, &offsets, arena, seed)?;
    Ok(model.with_scratch(&needs))
}
