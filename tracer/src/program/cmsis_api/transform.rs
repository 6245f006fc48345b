//! The families that rearrange or multiply whole tensors: transpose
//! convolution, batch matmul and transpose. Each buffer's extent is what
//! CMSIS-NN v7.0.0's kernel (`arm_transpose_conv_s8.c`,
//! `arm_transpose_conv_wrapper_s8.c`, `arm_batch_matmul_s{8,16}.c`,
//! `arm_transpose_s8.c`) reaches from the fields it reads, on a core
//! without Helium (MVE).

use memtrace_abi::Role;

use super::reader::*;
use super::ApiFunction;

/// `cmsis_nn_transpose_conv_params`: two offsets, then stride, padding,
/// padding offsets, dilation and activation of two words each (12 words).
const TRANSPOSE_CONV_PARAMS_BYTES: u64 = 48;
/// `cmsis_nn_bmm_params`: two `bool`s padded to a word, then
/// `cmsis_nn_fc_params` (5 words).
const BMM_PARAMS_BYTES: u64 = 24;
/// `cmsis_nn_transpose_params`: `num_dims`, `permutations`.
const TRANSPOSE_PARAMS_BYTES: u64 = 8;
/// The wrapper takes the reverse-convolution path for more input channels
/// than this (`REVERSE_TCOL_EFFICIENT_THRESHOLD`, arm_nnsupportfunctions.h).
const REVERSE_CONV_MIN_CHANNELS: u64 = 17;

/// The shapes a transpose convolution reads: input NHWC, filter `out_c ×
/// KH × KW × in_c`, output NHWC (its `n` the input's: the kernel loops
/// over the input's batches), stride and padding as `(h, w)`.
#[derive(Clone, Copy, Debug)]
struct TransposeConvShapes {
    input: Dims,
    filter: Dims,
    output: Dims,
    stride: Tile,
    pad: Tile,
}

/// Whether `arm_transpose_conv_wrapper_s8` takes the reverse-convolution
/// path (stride at most 2 both ways, more than 16 input channels): it
/// reverses the filter into `reverse_conv_ctx->buf` and runs
/// `arm_convolve_s8` on the input upscaled by the stride.
fn takes_reverse_path(s: &TransposeConvShapes) -> bool {
    s.stride.0 <= 2 && s.stride.1 <= 2 && s.input.c >= REVERSE_CONV_MIN_CHANNELS
}

/// Bytes of `arm_transpose_conv_s8`'s rolling int32 accumulator
/// (`ctx->buf`): `MAX(KH, stride_h)` rows of `((in_w − 1) · stride_w +
/// MAX(KW, stride_w)) · out_c` words. The kernel's own extent, not
/// `arm_transpose_conv_s8_get_buffer_size`'s, which takes `stride.h` for
/// `stride.w` (docs/kernels.md).
fn rolling_buffer_bytes(s: &TransposeConvShapes) -> u64 {
    let row = ((s.input.w - 1) * s.stride.1 + s.filter.w.max(s.stride.1)) * s.output.c;
    s.filter
        .h
        .max(s.stride.0)
        .saturating_mul(row)
        .saturating_mul(4)
}

/// Bytes of `arm_convolve_s8`'s im2col buffer on a core without MVE: two
/// int16 columns of `KH · KW · in_c` rounded up to a multiple of four.
fn im2col_bytes(s: &TransposeConvShapes) -> u64 {
    let columns = s.filter.h * s.filter.w * s.input.c;
    2 * columns.next_multiple_of(4) * 2
}

/// `(ctx, output_ctx, transpose_conv_params, quant, input_dims, input,
/// filter_dims, filter, bias_dims, bias, output_dims, output)`:
/// `arm_transpose_conv_s8`, and its `wrapper` (which may take the
/// reverse-convolution path instead).
///
/// The scratch is `ctx->buf` as the path taken uses it: the rolling
/// accumulator of `arm_transpose_conv_s8` or the im2col buffer of
/// `arm_convolve_s8`. `arm_transpose_conv_s8` never reads `output_ctx`;
/// the reverse path writes the reversed filter into its buffer, then
/// convolves with it.
pub(super) fn transpose_conv(
    r: &mut Reader<'_>,
    api: &ApiFunction,
    wrapper: bool,
) -> Result<(), String> {
    r.layer.op = "transpose_conv";
    let ctx = r.structure(0, CONTEXT_BYTES)?;
    let s = transpose_conv_shapes(r)?;
    let reverse = wrapper && takes_reverse_path(&s);
    let buf = r.word(ctx, 0)? as u64;
    r.layer.scratch.extend((buf != 0).then_some(buf));
    if reverse {
        r.buffer(Role::Scratch, "scratch", buf, im2col_bytes(&s), 1);
        let rc = r.structure(1, CONTEXT_BYTES)?;
        let reversed = r.word(rc, 0)? as u64;
        r.layer.scratch.extend((reversed != 0).then_some(reversed));
        r.buffer(
            Role::Scratch,
            "reversed_filter",
            reversed,
            s.filter.bytes(1),
            1,
        );
    } else {
        r.buffer(Role::Scratch, "scratch", buf, rolling_buffer_bytes(&s), 4);
    }
    r.per_channel(3, s.output.c)?;
    r.buffer(
        Role::Input,
        "input",
        r.arg(5),
        s.input.bytes(api.input_elem),
        api.input_elem,
    );
    r.buffer(Role::Weights, "filter", r.arg(7), s.filter.bytes(1), 1);
    r.bias(9, api.bias_elem, s.output.c)?;
    r.buffer(
        Role::Output,
        "output",
        r.arg(11),
        s.output.bytes(api.output_elem),
        api.output_elem,
    );
    r.layer.shapes = format!(
        "input={},filter={},output={},stride={}x{},pad={}x{},path={}",
        s.input.text(),
        s.filter.text(),
        s.output.text(),
        s.stride.0,
        s.stride.1,
        s.pad.0,
        s.pad.1,
        if reverse { "reverse_conv" } else { "rows" }
    );
    Ok(())
}

/// The shapes of a transpose convolution's arguments, its parameter,
/// quantisation and dims structures registered.
fn transpose_conv_shapes(r: &mut Reader<'_>) -> Result<TransposeConvShapes, String> {
    let params = r.structure(2, TRANSPOSE_CONV_PARAMS_BYTES)?;
    let stride = r.tile(params, 2)?;
    let pad = r.tile(params, 4)?;
    if !(1..=MAX_DIM as u64).contains(&stride.0) || !(1..=MAX_DIM as u64).contains(&stride.1) {
        return Err(format!("stride {}x{} is not a stride", stride.0, stride.1));
    }
    let input = r.dims(4, "nhwc")?;
    let filter = r.dims(6, "hw")?;
    let output = r.dims(10, "hwc")?;
    Ok(TransposeConvShapes {
        input,
        filter: Dims {
            n: output.c,
            c: input.c,
            ..filter
        },
        output: Dims {
            n: input.n,
            ..output
        },
        stride,
        pad,
    })
}

/// `(ctx, bmm_params, quant, lhs_dims, lhs, rhs_dims, rhs, output_dims,
/// output)`: for each of the output's `n × h` matrices, `lhs.w` rows of
/// `rhs.c` times the `rhs.w` rows of the transposed right-hand side.
///
/// An input whose `n` or `h` is 1 where the other's is not is broadcast
/// (the kernel steps back over it), so each input is its own `n · h · w ·
/// rhs.c` elements. Any other disagreement would make the kernel walk
/// past an input: refused. The context is read only on Helium (MVE)
/// builds, for the right-hand side's row sums.
pub(super) fn batch_matmul(r: &mut Reader<'_>, api: &ApiFunction) -> Result<(), String> {
    r.layer.op = "batch_matmul";
    r.structure(1, BMM_PARAMS_BYTES)?;
    r.structure(2, PER_TENSOR_QUANT_BYTES)?;
    let lhs = r.dims(3, "nhw")?;
    let rhs = r.dims(5, "nhwc")?;
    let out = r.dims(7, "nh")?;
    for (what, l, rr, o) in [("n", lhs.n, rhs.n, out.n), ("h", lhs.h, rhs.h, out.h)] {
        if !broadcasts(l, rr, o) {
            return Err(format!(
                "{what}: lhs {l}, rhs {rr} and output {o} do not broadcast"
            ));
        }
    }
    let elem = api.input_elem as u64;
    let cols = rhs.c;
    r.buffer(
        Role::Input,
        "lhs",
        r.arg(4),
        product(&[lhs.n, lhs.h, lhs.w, cols, elem]),
        api.input_elem,
    );
    r.buffer(
        Role::Input,
        "rhs",
        r.arg(6),
        product(&[rhs.n, rhs.h, rhs.w, rhs.c, elem]),
        api.input_elem,
    );
    r.buffer(
        Role::Output,
        "output",
        r.arg(8),
        product(&[out.n, out.h, lhs.w, rhs.w, api.output_elem as u64]),
        api.output_elem,
    );
    r.layer.shapes = format!(
        "lhs={}x{}x{}x{cols},rhs={},output={}x{}x{}x{}",
        lhs.n,
        lhs.h,
        lhs.w,
        rhs.text(),
        out.n,
        out.h,
        lhs.w,
        rhs.w
    );
    Ok(())
}

/// Whether the output's extent `o` along an axis is what the kernel's
/// broadcasting of `a` and `b` gives: the larger, the smaller 1 or equal.
fn broadcasts(a: u64, b: u64, o: u64) -> bool {
    (a == b || a == 1 || b == 1) && o == a.max(b)
}

/// `(input, output, input_dims, output_dims, transpose_params)`: the
/// kernel's extents by `num_dims`. One dimension is a copy of `n` bytes,
/// two an `n × h` matrix transposed; three and four (any other count is
/// taken as four, as the kernel does) move each input element to the sum
/// of its indices times the output strides of the permutation, so the
/// output reaches one past the largest such sum. A permutation entry past
/// the dimensions makes the kernel return an error without touching
/// memory: refused.
pub(super) fn transpose(r: &mut Reader<'_>, _api: &ApiFunction) -> Result<(), String> {
    r.layer.op = "transpose";
    let params = r.structure(4, TRANSPOSE_PARAMS_BYTES)?;
    let num_dims = r.word(params, 0)? as i32;
    let (input_elements, output_extent, text) = match num_dims {
        1 => {
            let n = r.dims(2, "n")?.n;
            (n, n, format!("{n}"))
        }
        2 => {
            let d = r.dims(2, "nh")?;
            (d.n * d.h, d.n * d.h, format!("{}x{}", d.n, d.h))
        }
        3 => {
            let d = r.dims(2, "nhw")?;
            let o = r.dims(3, "hw")?;
            let perm = permutation(r, params, 3)?;
            let mut strides = [0u64; 3];
            for (k, stride) in [o.h * o.w, o.w, 1].into_iter().enumerate() {
                strides[perm[k]] = stride;
            }
            let extent = reach(&[d.n, d.h, d.w], &strides);
            (d.n * d.h * d.w, extent, format!("{}x{}x{}", d.n, d.h, d.w))
        }
        _ => {
            let d = r.dims(2, "nhwc")?;
            let o = r.dims(3, "hwc")?;
            let perm = permutation(r, params, 4)?;
            let mut strides = [0u64; 4];
            for (k, stride) in [o.h * o.w * o.c, o.w * o.c, o.c, 1].into_iter().enumerate() {
                strides[perm[k]] = stride;
            }
            let extent = reach(&[d.n, d.h, d.w, d.c], &strides);
            (d.bytes(1), extent, d.text())
        }
    };
    r.buffer(Role::Input, "input", r.arg(0), input_elements, 1);
    r.buffer(Role::Output, "output", r.arg(1), output_extent, 1);
    r.layer.shapes = format!("input={text},output_bytes={output_extent},num_dims={num_dims}");
    Ok(())
}

/// The `count` entries of `transpose_params->permutations`, each an axis
/// below `count`, the array registered as a structure the call reads.
fn permutation(r: &mut Reader<'_>, params: u64, count: usize) -> Result<Vec<usize>, String> {
    let at = r.word(params, 1)? as u64;
    if at == 0 {
        return Err("transpose_params.permutations is NULL".into());
    }
    r.layer.structs.push((at, 4 * count as u64));
    (0..count as u64)
        .map(|k| {
            let axis = r.word(at, k)? as usize;
            if axis < count {
                Ok(axis)
            } else {
                Err(format!(
                    "permutation entry {k} is {axis}, past {count} dimensions"
                ))
            }
        })
        .collect()
}

/// One past the largest offset `Σ (extent_i − 1) · stride_i` an element of
/// a tensor with these extents is moved to.
fn reach(extents: &[u64], strides: &[u64]) -> u64 {
    extents
        .iter()
        .zip(strides)
        .map(|(e, s)| e.saturating_sub(1).saturating_mul(*s))
        .fold(1, u64::saturating_add)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transpose_reaches_the_output_volume_for_a_permutation() {
        // 2x3x4 to 4x2x3 (perm 2, 0, 1): strides of input axes 0,1,2 are
        // 3, 1, 6.
        assert_eq!(reach(&[2, 3, 4], &[3, 1, 6]), 24);
        // A repeated axis leaves one stride 0: the output is shorter.
        assert_eq!(reach(&[2, 3, 4], &[0, 1, 6]), 1 + 2 + 18);
    }

    #[test]
    fn a_volume_past_64_bits_saturates_and_a_small_one_is_exact() {
        let big = Dims {
            n: 1 << 16,
            h: 1 << 16,
            w: 1 << 16,
            c: 1 << 16,
        };
        assert_eq!(big.bytes(2), u64::MAX);
        let small = Dims {
            n: 2,
            h: 3,
            w: 4,
            c: 5,
        };
        assert_eq!(small.bytes(2), 2 * 3 * 4 * 5 * 2);
    }

    #[test]
    fn broadcasting_takes_one_or_equal_extents() {
        assert!(broadcasts(1, 3, 3));
        assert!(broadcasts(3, 3, 3));
        assert!(!broadcasts(2, 3, 3));
        assert!(!broadcasts(1, 3, 1));
    }

    #[test]
    fn the_rolling_buffer_takes_the_stride_along_w_where_the_getter_does_not() {
        let s = TransposeConvShapes {
            input: Dims {
                n: 1,
                h: 3,
                w: 3,
                c: 2,
            },
            filter: Dims {
                n: 2,
                h: 1,
                w: 1,
                c: 2,
            },
            output: Dims {
                n: 1,
                h: 3,
                w: 9,
                c: 2,
            },
            stride: (1, 3),
            pad: (0, 0),
        };
        // ((3 − 1) · 3 + 3) · 2 words, one row: 72 B (the getter's 56 B
        // is the case docs/kernels.md reports as overrun).
        assert_eq!(rolling_buffer_bytes(&s), 72);
        assert!(!takes_reverse_path(&s));
        assert_eq!(im2col_bytes(&s), 2 * 4 * 2);
    }
}
