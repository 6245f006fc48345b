//! Checks of a placement before anything is sized from it.

use super::error::{LowerError, LowerSubject};
use crate::Model;

/// Largest arena a program can describe: the executor's program format
/// holds arena sizes and offsets as 32-bit signed words.
const MAX_ARENA_BYTES: u64 = i32::MAX as u64;

/// Checks a placement before anything is sized from it: the arena fits the
/// program format (`MAX_ARENA_BYTES`), and every placed tensor's
/// `offset + bytes` is computed without overflow and lies inside the arena.
/// Errors name the tensor.
pub fn check_placement(
    model: &Model,
    offsets: &[Option<u64>],
    arena_bytes: u64,
) -> Result<(), LowerError> {
    let placement = |reason: String| LowerError {
        op: 0,
        kind: LowerSubject::Placement,
        reason,
    };
    if arena_bytes > MAX_ARENA_BYTES {
        // Name the tensor when one alone is too large: the model is the
        // culprit, not the plan.
        let names = model.tensor_names();
        let too_large = offsets
            .iter()
            .zip(&model.tensors)
            .zip(&names)
            .find(|((o, t), _)| o.is_some() && t.bytes > MAX_ARENA_BYTES);
        if let Some(((_, t), name)) = too_large {
            return Err(placement(format!(
                "tensor `{name}` needs {} bytes, more than the executor's arena limit of \
                 {MAX_ARENA_BYTES} bytes",
                t.bytes
            )));
        }
        return Err(placement(format!(
            "an arena of {arena_bytes} bytes is larger than the executor's limit of {MAX_ARENA_BYTES} bytes"
        )));
    }
    if offsets.len() > model.tensors.len() {
        return Err(placement(format!(
            "{} offsets for a model of {} tensors",
            offsets.len(),
            model.tensors.len()
        )));
    }
    let names = model.tensor_names();
    for (t, offset) in offsets.iter().enumerate() {
        let Some(offset) = *offset else { continue };
        let bytes = model.tensors[t].bytes;
        match offset.checked_add(bytes) {
            Some(end) if end <= arena_bytes => {}
            _ => {
                return Err(placement(format!(
                    "tensor `{}` at arena offset {offset} + {bytes} bytes does not fit the arena of {arena_bytes} bytes",
                    names[t]
                )))
            }
        }
    }
    Ok(())
}

/// Checks that no operator has two of its arena buffers overlapping, except
/// an input with the output (what DMO does, and the only overlap the guest
/// protocol allows between the buffers of one layer, docs/protocol.md §3):
/// a scratch buffer over an input, or two inputs over each other, is a plan
/// error naming both tensors, found here before anything runs.
pub(super) fn check_operator_buffers(
    model: &Model,
    offsets: &[Option<u64>],
) -> Result<(), LowerError> {
    let names = model.tensor_names();
    let placed = |t: usize| -> Option<(u64, u64)> {
        let o = offsets.get(t).copied().flatten()?;
        let bytes = model.tensors.get(t)?.bytes;
        (bytes > 0).then(|| (o, o.saturating_add(bytes)))
    };
    for (oi, op) in model.ops.iter().enumerate() {
        // (tensor, is the output, what it is to the operator)
        let mut buffers: Vec<(usize, bool, &str)> = Vec::new();
        for &t in &op.inputs {
            buffers.push((t, false, "input"));
        }
        for &t in &op.outputs {
            buffers.push((t, true, "output"));
        }
        if let Some(t) = op.scratch {
            buffers.push((t, false, "scratch buffer"));
        }
        buffers.dedup_by_key(|b| b.0);
        for (i, &(a, a_out, a_what)) in buffers.iter().enumerate() {
            for &(b, b_out, b_what) in &buffers[i + 1..] {
                let lone_output = a_out != b_out && (a_what == "input" || b_what == "input");
                if a == b || lone_output {
                    continue;
                }
                let (Some((a0, a1)), Some((b0, b1))) = (placed(a), placed(b)) else {
                    continue;
                };
                if a0 < b1 && b0 < a1 {
                    return Err(LowerError {
                        op: oi,
                        kind: LowerSubject::Placement,
                        reason: format!(
                            "the plan overlaps two buffers of operator {oi} ({} `{}`): {a_what} \
                             `{}` at [{a0}, {a1}) and {b_what} `{}` at [{b0}, {b1}); only an \
                             input may overlap its operator's output",
                            op.kind.tflite_name(),
                            op.outputs.first().map_or("", |&t| names[t].as_str()),
                            names[a],
                            names[b],
                        ),
                    });
                }
            }
        }
    }
    Ok(())
}
