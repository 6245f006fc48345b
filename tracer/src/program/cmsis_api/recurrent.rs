//! The recurrent families, SVDF and LSTM: one call is a whole layer with
//! its state, and each buffer's extent is what CMSIS-NN v7.0.0's kernel
//! (`Source/SVDFunctions/`, `Source/LSTMFunctions/` and the
//! `arm_nn_lstm_*` support functions they call) reaches from the fields it
//! reads.

use memtrace_abi::Role;

use super::reader::*;
use super::ApiFunction;

/// The SVDF dimensions the kernel reads: `input_dims.n` (batches),
/// `input_dims.h` (input size), `weights_feature_dims.n` (feature
/// batches), `weights_time_dims.h` (time batches) and `rank`; the units are
/// `feature_batches / rank`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SvdfDims {
    batches: u64,
    input_size: u64,
    features: u64,
    time: u64,
    rank: u64,
    units: u64,
}

/// `arm_svdf_s8(ctx, input_ctx, output_ctx, params, in_quant, out_quant,
/// input_dims, input, state_dims, state, weights_feature_dims,
/// weights_feature, weights_time_dims, weights_time, bias_dims, bias,
/// output_dims, output)`, and `arm_svdf_state_s16_s8` without `ctx`
/// (`context`), its state and time weights of `state_elem` bytes.
///
/// `ctx->buf` holds the kernel sums only on Helium (MVE) builds, which no
/// core memtrace emulates; elsewhere the kernel reads the pointer and
/// nothing behind it, so the context is an argument structure, no buffer.
/// The state is read and written (shifted by one time step, then the new
/// column stored): a variable, declared `scratch` as TFLM's variable
/// tensors are.
pub(super) fn svdf(
    r: &mut Reader<'_>,
    api: &ApiFunction,
    context: bool,
    state_elem: u32,
) -> Result<(), String> {
    r.layer.op = "svdf";
    let first = usize::from(context);
    if context {
        r.structure(0, CONTEXT_BYTES)?;
    }
    let input_ctx = context_pointer(r, first)?;
    let output_ctx = context_pointer(r, first + 1)?;
    let d = svdf_dims(r, first)?;
    let word = 4;
    r.buffer(
        Role::Input,
        "input",
        r.arg(first + 6),
        d.batches * d.input_size * api.input_elem as u64,
        api.input_elem,
    );
    r.buffer(
        Role::Scratch,
        "state",
        r.arg(first + 8),
        d.batches * d.features * d.time * state_elem as u64,
        state_elem,
    );
    r.buffer(
        Role::Weights,
        "weights_feature",
        r.arg(first + 10),
        d.features * d.input_size,
        1,
    );
    r.buffer(
        Role::Weights,
        "weights_time",
        r.arg(first + 12),
        d.features * d.time * state_elem as u64,
        state_elem,
    );
    r.bias(first + 14, api.bias_elem, d.units)?;
    r.buffer(
        Role::Output,
        "output",
        r.arg(first + 16),
        d.batches * d.units * api.output_elem as u64,
        api.output_elem,
    );
    // The kernel's two int32 scratch rows: time weights × state per
    // feature, then per unit with the bias.
    r.buffer(
        Role::Scratch,
        "input_ctx",
        input_ctx,
        d.batches * d.features * word,
        word as u32,
    );
    r.buffer(
        Role::Scratch,
        "output_ctx",
        output_ctx,
        d.batches * d.units * word,
        word as u32,
    );
    r.layer.shapes = format!(
        "input={b}x{i},state={b}x{f}x{t},weights_feature={f}x{i},weights_time={f}x{t},output={b}x{u},rank={rank}",
        b = d.batches,
        i = d.input_size,
        f = d.features,
        t = d.time,
        u = d.units,
        rank = d.rank
    );
    Ok(())
}

/// `ctx->buf` of the `cmsis_nn_context` at argument `arg`.
fn context_pointer(r: &mut Reader<'_>, arg: usize) -> Result<u64, String> {
    let at = r.structure(arg, CONTEXT_BYTES)?;
    Ok(r.word(at, 0)? as u64)
}

/// The dimensions an SVDF call's arguments give (`first`: the index of
/// `input_ctx`), the argument structures it reads registered.
fn svdf_dims(r: &mut Reader<'_>, first: usize) -> Result<SvdfDims, String> {
    let params_layout = r.layouts.svdf_params;
    let params = r.structure(first + 2, params_layout.size)?;
    r.structure(first + 3, PER_TENSOR_QUANT_BYTES)?;
    r.structure(first + 4, PER_TENSOR_QUANT_BYTES)?;
    let input = r.dims(first + 5, "nh")?;
    let features = r.dims(first + 9, "n")?.n;
    let time = r.dims(first + 11, "h")?.h;
    // The kernel keeps `rank` in an int16_t and divides by it.
    let rank = r.word_at(params + params_layout.rank)? as i32 as i16;
    if rank <= 0 {
        return Err(format!(
            "svdf_params.rank is {rank} (the kernel divides by it)"
        ));
    }
    let units = features / rank as u64;
    if units == 0 {
        return Err(format!(
            "weights_feature_dims.n {features} / rank {rank} gives no unit"
        ));
    }
    Ok(SvdfDims {
        batches: input.n,
        input_size: input.h,
        features,
        time,
        rank: rank as u64,
        units,
    })
}

/// The LSTM dimensions `cmsis_nn_lstm_params` gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LstmDims {
    time_major: bool,
    batches: u64,
    time_steps: u64,
    input_size: u64,
    hidden_size: u64,
}

impl LstmDims {
    /// `input` or `output` (`size`: input or hidden) in memory order.
    fn text(&self, size: u64) -> String {
        if self.time_major {
            format!("{}x{}x{size}", self.time_steps, self.batches)
        } else {
            format!("{}x{}x{size}", self.batches, self.time_steps)
        }
    }
}

/// Each gate's four arrays, in `cmsis_nn_lstm_params`' order of the gates
/// (forget, input, cell, output): input weights, input effective bias,
/// hidden weights, hidden effective bias.
const GATE_BUFFERS: [[&str; 4]; 4] = [
    [
        "forget_gate.input_weights",
        "forget_gate.input_effective_bias",
        "forget_gate.hidden_weights",
        "forget_gate.hidden_effective_bias",
    ],
    [
        "input_gate.input_weights",
        "input_gate.input_effective_bias",
        "input_gate.hidden_weights",
        "input_gate.hidden_effective_bias",
    ],
    [
        "cell_gate.input_weights",
        "cell_gate.input_effective_bias",
        "cell_gate.hidden_weights",
        "cell_gate.hidden_effective_bias",
    ],
    [
        "output_gate.input_weights",
        "output_gate.input_effective_bias",
        "output_gate.hidden_weights",
        "output_gate.hidden_effective_bias",
    ],
];

/// Bytes of an element of the LSTM's gate outputs and cell state (int16).
const LSTM_STATE_ELEM: u32 = 2;

/// `arm_lstm_unidirectional_s8/_s16(input, output, params, buffers)`: the
/// input and output sequences, each gate's weights and effective biases
/// (`bias` is folded into them by the caller and never read), and the
/// context's three int16 scratch buffers of one time step each. The output
/// of a time step is read back as the next one's hidden state.
pub(super) fn lstm(r: &mut Reader<'_>, api: &ApiFunction) -> Result<(), String> {
    r.layer.op = "lstm";
    let params = r.structure(2, r.layouts.lstm_params.size)?;
    let d = lstm_dims(r, params)?;
    let sequence = d.batches * d.time_steps;
    r.buffer(
        Role::Input,
        "input",
        r.arg(0),
        sequence * d.input_size * api.input_elem as u64,
        api.input_elem,
    );
    r.buffer(
        Role::Output,
        "output",
        r.arg(1),
        sequence * d.hidden_size * api.output_elem as u64,
        api.output_elem,
    );
    for (names, &offset) in GATE_BUFFERS.iter().zip(&r.layouts.lstm_params.gates) {
        lstm_gate(r, api, params + offset, names, &d)?;
    }
    lstm_scratch(r, &d)?;
    r.layer.shapes = format!(
        "input={},output={},time_major={}",
        d.text(d.input_size),
        d.text(d.hidden_size),
        u8::from(d.time_major)
    );
    Ok(())
}

fn lstm_dims(r: &Reader<'_>, params: u64) -> Result<LstmDims, String> {
    let l = r.layouts.lstm_params;
    Ok(LstmDims {
        time_major: r.word_at(params + l.time_major)? != 0,
        batches: r.dimension(params + l.batch_size, "params->batch_size")?,
        time_steps: r.dimension(params + l.time_steps, "params->time_steps")?,
        input_size: r.dimension(params + l.input_size, "params->input_size")?,
        hidden_size: r.dimension(params + l.hidden_size, "params->hidden_size")?,
    })
}

/// One gate (at `gate` inside the parameters): its weights (int8, rows of
/// the hidden size) and effective biases (one per hidden unit).
fn lstm_gate(
    r: &mut Reader<'_>,
    api: &ApiFunction,
    gate: u64,
    names: &[&'static str; 4],
    d: &LstmDims,
) -> Result<(), String> {
    let g = r.layouts.lstm_gate;
    let h = d.hidden_size;
    let bias = api.bias_elem as u64;
    let arrays = [
        (g.input_weights, Role::Weights, h * d.input_size, 1),
        (g.input_effective_bias, Role::Bias, h * bias, api.bias_elem),
        (g.hidden_weights, Role::Weights, h * h, 1),
        (g.hidden_effective_bias, Role::Bias, h * bias, api.bias_elem),
    ];
    for (&name, (offset, role, size, elem)) in names.iter().zip(arrays) {
        let base = r.word_at(gate + offset)? as u64;
        r.buffer(role, name, base, size, elem);
    }
    Ok(())
}

/// The context's `temp1`, `temp2` and `cell_state`: one int16 value per
/// batch and hidden unit each.
fn lstm_scratch(r: &mut Reader<'_>, d: &LstmDims) -> Result<(), String> {
    let c = r.layouts.lstm_context;
    let context = r.structure(3, c.size)?;
    let size = d.batches * d.hidden_size * LSTM_STATE_ELEM as u64;
    for (name, offset) in [
        ("temp1", c.temp1),
        ("temp2", c.temp2),
        ("cell_state", c.cell_state),
    ] {
        let base = r.word_at(context + offset)? as u64;
        r.buffer(Role::Scratch, name, base, size, LSTM_STATE_ELEM);
    }
    Ok(())
}
