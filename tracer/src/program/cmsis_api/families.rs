//! Each family's argument layout: which argument is which buffer, how
//! many bytes each has, and the call's shapes and layer text.

use memtrace_abi::Role;

use super::reader::*;
use super::{ApiFunction, Family};

pub(super) fn conv(r: &mut Reader<'_>, api: &ApiFunction, upscale: bool) -> Result<(), String> {
    r.layer.op = "conv2d";
    r.context(0)?;
    let params = r.structure(1, CONV_PARAMS_BYTES)?;
    let stride = r.tile(params, 2)?;
    let pad = r.tile(params, 4)?;
    let dilation = r.tile(params, 6)?;
    let input = r.dims(3, "nhwc")?;
    // Only the grouped kernels read the filter's channels; the others
    // take the input's.
    let grouped = matches!(api.name, "arm_convolve_s8" | "arm_convolve_wrapper_s8");
    let filter = r.dims(5, if grouped { "hwc" } else { "hw" })?;
    let out_at = if upscale { 10 } else { 9 };
    if upscale && r.arg(9) != 0 {
        r.structure(9, DIMS_BYTES)?;
    }
    let output = r.dims(out_at, "hwc")?;
    r.per_channel(2, output.c)?;
    let filter = Dims {
        n: output.c,
        c: if grouped { filter.c } else { input.c },
        ..filter
    };
    let output = Dims {
        n: input.n,
        ..output
    };
    r.buffer(
        Role::Input,
        "input",
        r.arg(4),
        input.bytes(api.input_elem),
        api.input_elem,
    );
    r.buffer(
        Role::Weights,
        "filter",
        r.arg(6),
        filter_bytes(api, filter.volume()),
        1,
    );
    r.bias(8, api.bias_elem, output.c)?;
    r.buffer(
        Role::Output,
        "output",
        r.arg(out_at + 1),
        output.bytes(api.output_elem),
        api.output_elem,
    );
    r.layer.shapes = format!(
        "input={},filter={},output={},stride={}x{},dilation={}x{},pad={}x{}",
        input.text(),
        filter.text(),
        output.text(),
        stride.0,
        stride.1,
        dilation.0,
        dilation.1,
        pad.0,
        pad.1
    );
    if let Some(dtype) = spec_dtype(api) {
        r.layer.spec = format!(
            "op=conv2d,dtype={dtype},{},padding={}",
            r.layer.shapes,
            padding_word(pad)
        );
    }
    Ok(())
}

pub(super) fn depthwise(r: &mut Reader<'_>, api: &ApiFunction) -> Result<(), String> {
    r.layer.op = "depthwise_conv2d";
    r.context(0)?;
    let params = r.structure(1, DW_CONV_PARAMS_BYTES)?;
    let multiplier = r.word(params, 2)? as u64;
    let stride = r.tile(params, 3)?;
    let pad = r.tile(params, 5)?;
    let dilation = r.tile(params, 7)?;
    let input = r.dims(3, "nhwc")?;
    let filter = r.dims(5, "hw")?;
    let output = r.dims(9, "hwc")?;
    r.per_channel(2, output.c)?;
    let filter = Dims {
        n: 1,
        c: output.c,
        ..filter
    };
    let output = Dims {
        n: input.n,
        ..output
    };
    r.buffer(
        Role::Input,
        "input",
        r.arg(4),
        input.bytes(api.input_elem),
        api.input_elem,
    );
    r.buffer(
        Role::Weights,
        "filter",
        r.arg(6),
        filter_bytes(api, filter.volume()),
        1,
    );
    r.bias(8, api.bias_elem, output.c)?;
    r.buffer(
        Role::Output,
        "output",
        r.arg(10),
        output.bytes(api.output_elem),
        api.output_elem,
    );
    r.layer.shapes = format!(
        "input={},filter={},output={},stride={}x{},dilation={}x{},pad={}x{},depth_multiplier={multiplier}",
        input.text(),
        filter.text(),
        output.text(),
        stride.0,
        stride.1,
        dilation.0,
        dilation.1,
        pad.0,
        pad.1
    );
    if let Some(dtype) = spec_dtype(api) {
        r.layer.spec = format!(
            "op=depthwise_conv2d,dtype={dtype},{},padding={}",
            r.layer.shapes,
            padding_word(pad)
        );
    }
    Ok(())
}

pub(super) fn fully_connected(
    r: &mut Reader<'_>,
    api: &ApiFunction,
    per_channel: bool,
) -> Result<(), String> {
    r.layer.op = "fully_connected";
    r.context(0)?;
    r.structure(1, FC_PARAMS_BYTES)?;
    let input = r.dims(3, "nhwc")?;
    let batches = input.n;
    let (filter_at, output_at) = (r.structure(5, DIMS_BYTES)?, r.structure(9, DIMS_BYTES)?);
    let depth = r.word(filter_at, 0)? as u64;
    let units = r.word(output_at, 3)? as u64;
    if depth == 0 || units == 0 || depth > MAX_DIM as u64 || units > MAX_DIM as u64 {
        return Err(format!(
            "filter_dims.n {depth} or output_dims.c {units} is not a shape"
        ));
    }
    if per_channel {
        r.per_channel(2, units)?;
    } else if api.name.contains("wrapper") {
        // `cmsis_nn_quant_params`: pointers, per channel or to one value.
        let at = r.structure(2, QUANT_BYTES)?;
        let channels = if r.word(at, 2)? != 0 { units } else { 1 };
        r.per_channel(2, channels)?;
    } else {
        r.structure(2, 8)?;
    }
    r.buffer(
        Role::Input,
        "input",
        r.arg(4),
        batches * depth * api.input_elem as u64,
        api.input_elem,
    );
    r.buffer(
        Role::Weights,
        "filter",
        r.arg(6),
        filter_bytes(api, depth * units),
        1,
    );
    r.bias(8, api.bias_elem, units)?;
    r.buffer(
        Role::Output,
        "output",
        r.arg(10),
        batches * units * api.output_elem as u64,
        api.output_elem,
    );
    r.layer.shapes = format!(
        "input=1x1x{batches}x{depth},filter=1x1x{units}x{depth},output=1x1x{batches}x{units}"
    );
    if let Some(dtype) = spec_dtype(api) {
        r.layer.spec = format!("op=fully_connected,dtype={dtype},{}", r.layer.shapes);
    }
    Ok(())
}

pub(super) fn pool(r: &mut Reader<'_>, api: &ApiFunction, average: bool) -> Result<(), String> {
    r.layer.op = if average { "average_pool" } else { "max_pool" };
    r.context(0)?;
    let params = r.structure(1, POOL_PARAMS_BYTES)?;
    let stride = r.tile(params, 0)?;
    let pad = r.tile(params, 2)?;
    let input = r.dims(2, "nhwc")?;
    let at = r.structure(4, DIMS_BYTES)?;
    let (kh, kw) = (r.word(at, 1)? as u64, r.word(at, 2)? as u64);
    let output = r.dims(5, "hw")?;
    let output = Dims {
        n: input.n,
        c: input.c,
        ..output
    };
    r.buffer(
        Role::Input,
        "input",
        r.arg(3),
        input.bytes(api.input_elem),
        api.input_elem,
    );
    r.buffer(
        Role::Output,
        "output",
        r.arg(6),
        output.bytes(api.output_elem),
        api.output_elem,
    );
    r.layer.shapes = format!(
        "input={},filter=1x{kh}x{kw}x1,output={},stride={}x{},dilation=1x1,pad={}x{}",
        input.text(),
        output.text(),
        stride.0,
        stride.1,
        pad.0,
        pad.1
    );
    if let Some(dtype) = spec_dtype(api) {
        r.layer.spec = format!(
            "op={},dtype={dtype},{},padding={}",
            r.layer.op,
            r.layer.shapes,
            padding_word(pad)
        );
    }
    Ok(())
}

pub(super) fn softmax(r: &mut Reader<'_>, api: &ApiFunction, lut: bool) -> Result<(), String> {
    r.layer.op = "softmax";
    let (rows, row) = (r.arg(1), r.arg(2));
    let elements = rows.saturating_mul(row);
    r.buffer(
        Role::Input,
        "input",
        r.arg(0),
        elements.saturating_mul(api.input_elem as u64),
        api.input_elem,
    );
    r.buffer(
        Role::Output,
        "output",
        r.arg(6),
        elements.saturating_mul(api.output_elem as u64),
        api.output_elem,
    );
    if lut {
        let at = r.structure(5, 8)?;
        let (exp, one) = (r.word(at, 0)? as u64, r.word(at, 1)? as u64);
        r.buffer(Role::Weights, "exp_lut", exp, 2 * SOFTMAX_LUT_ENTRIES, 2);
        r.buffer(
            Role::Weights,
            "one_by_one_lut",
            one,
            2 * SOFTMAX_LUT_ENTRIES,
            2,
        );
    }
    r.layer.shapes = format!("input=1x1x{rows}x{row},output=1x1x{rows}x{row}");
    Ok(())
}

pub(super) fn elementwise(r: &mut Reader<'_>, api: &ApiFunction) -> Result<(), String> {
    let (output, size) = match api.family {
        Family::Add => (9, 15),
        _ => (4, 10),
    };
    r.layer.op = if api.family == Family::Add {
        "add"
    } else {
        "mul"
    };
    let n = r.arg(size);
    let bytes = n * api.input_elem as u64;
    r.buffer(Role::Input, "input1", r.arg(0), bytes, api.input_elem);
    r.buffer(Role::Input, "input2", r.arg(1), bytes, api.input_elem);
    r.buffer(
        Role::Output,
        "output",
        r.arg(output),
        n * api.output_elem as u64,
        api.output_elem,
    );
    r.layer.shapes = format!("input=1x1x1x{n},output=1x1x1x{n}");
    if api.family == Family::Add {
        if let Some(dtype) = spec_dtype(api) {
            r.layer.spec = format!("op=add,dtype={dtype},{}", r.layer.shapes);
        }
    }
    Ok(())
}

pub(super) fn min_max(r: &mut Reader<'_>, api: &ApiFunction) -> Result<(), String> {
    r.layer.op = if api.name.contains("max") {
        "maximum"
    } else {
        "minimum"
    };
    r.context(0)?;
    let (a, b, o) = (r.dims(2, "nhwc")?, r.dims(4, "nhwc")?, r.dims(6, "nhwc")?);
    r.buffer(Role::Input, "input1", r.arg(1), a.volume(), 1);
    r.buffer(Role::Input, "input2", r.arg(3), b.volume(), 1);
    r.buffer(Role::Output, "output", r.arg(5), o.volume(), 1);
    r.layer.shapes = format!("input={},input2={},output={}", a.text(), b.text(), o.text());
    Ok(())
}

pub(super) fn pad(r: &mut Reader<'_>, _api: &ApiFunction) -> Result<(), String> {
    r.layer.op = "pad";
    let input = r.dims(3, "nhwc")?;
    let word = |r: &mut Reader<'_>, arg: usize| -> Result<[u64; 4], String> {
        let at = r.structure(arg, DIMS_BYTES)?;
        let mut out = [0; 4];
        for (i, v) in out.iter_mut().enumerate() {
            *v = r.word(at, i as u64)? as u64;
        }
        Ok(out)
    };
    let (before, after) = (word(r, 4)?, word(r, 5)?);
    let dims = [input.n, input.h, input.w, input.c];
    let out: Vec<u64> = (0..4).map(|i| dims[i] + before[i] + after[i]).collect();
    r.buffer(Role::Input, "input", r.arg(0), input.volume(), 1);
    r.buffer(Role::Output, "output", r.arg(1), product(&out), 1);
    r.layer.shapes = format!(
        "input={},output={}x{}x{}x{}",
        input.text(),
        out[0],
        out[1],
        out[2],
        out[3]
    );
    Ok(())
}

pub(super) fn vector_sum(
    r: &mut Reader<'_>,
    api: &ApiFunction,
    bias_arg: usize,
) -> Result<(), String> {
    r.layer.op = "vector_sum";
    let (cols, rows) = (r.arg(1), r.arg(2));
    r.buffer(Role::Weights, "weights", r.arg(3), cols * rows, 1);
    r.bias(bias_arg, api.bias_elem, rows)?;
    r.buffer(
        Role::Output,
        "sums",
        r.arg(0),
        rows * api.output_elem as u64,
        api.output_elem,
    );
    r.layer.shapes = format!("weights=1x1x{rows}x{cols},output=1x1x1x{rows}");
    Ok(())
}

pub(super) fn activation(r: &mut Reader<'_>, api: &ApiFunction) {
    r.layer.op = "activation";
    let n = r.arg(2);
    r.buffer(
        Role::Input,
        "input",
        r.arg(0),
        n * api.input_elem as u64,
        api.input_elem,
    );
    r.buffer(
        Role::Output,
        "output",
        r.arg(1),
        n * api.output_elem as u64,
        api.output_elem,
    );
    r.layer.shapes = format!("input=1x1x1x{n},output=1x1x1x{n}");
}
