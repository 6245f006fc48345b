//! A whole model to a program: the placement checked, constants
//! materialised, every operator lowered in execution order, the graph
//! inputs' data attached.

use memtrace_abi::program::Program;

use super::context::{LowerInput, Lowering};
use super::error::{LowerError, LowerSubject};
use super::ops::lower_op;
use super::placement::{check_operator_buffers, check_placement};
use super::synth::{materialize, synth_input};
use crate::Model;

/// Lowers `model` with tensors at `input.offsets` (after [`materialize`]).
/// The placement is checked first ([`check_placement`]).
pub fn lower(model: &Model, input: &LowerInput<'_>) -> Result<Program, LowerError> {
    check_placement(model, input.offsets, input.arena_bytes)?;
    check_operator_buffers(model, input.offsets)?;
    let materialized = materialize(model, input.seed);
    let mut cx = Lowering::new(&materialized, input.offsets, input.seed);
    let mut ops = Vec::new();
    for &oi in input.order {
        ops.push(lower_op(&mut cx, oi)?);
    }
    let inputs = graph_inputs(&mut cx, input.input_data)?;
    let outputs = materialized
        .outputs
        .iter()
        .filter_map(|&t| cx.map[t])
        .collect();
    Ok(Program {
        tensors: cx.tensors,
        ops,
        inputs,
        outputs,
        arena_bytes: input.arena_bytes,
        storage_bytes: cx.storage_bytes,
        query_scratch: false,
    })
}

/// The data of every graph input the program reads: the input file's bytes
/// for the first, seeded data for the rest.
fn graph_inputs(
    cx: &mut Lowering<'_>,
    input_data: Option<&[u8]>,
) -> Result<Vec<(u32, Vec<u8>)>, LowerError> {
    let model = cx.model;
    let mut inputs = Vec::new();
    for (k, &t) in model.inputs.iter().enumerate() {
        let Some(i) = cx.map[t] else { continue };
        let m = &model.tensors[t];
        let data = match input_data {
            Some(d) if k == 0 => {
                if d.len() as u64 != m.bytes {
                    return Err(LowerError {
                        op: 0,
                        kind: LowerSubject::Input,
                        reason: format!(
                            "the input file has {} bytes, graph input `{}` ({} {:?}) needs {}",
                            d.len(),
                            m.name,
                            m.dtype,
                            m.shape,
                            m.bytes
                        ),
                    });
                }
                d.to_vec()
            }
            _ => synth_input(&mut cx.rng, m),
        };
        inputs.push((i, data));
    }
    Ok(inputs)
}
