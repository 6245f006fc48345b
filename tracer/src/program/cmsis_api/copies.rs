//! The families that copy or clamp bytes without arithmetic on shapes:
//! concatenation along one axis, reshape and the in-place ReLUs. Each
//! buffer's extent is what CMSIS-NN v7.0.0's kernel
//! (`arm_concatenation_s8_{w,x,y,z}.c`, `arm_reshape_s8.c`,
//! `arm_relu6_s8.c`, `arm_relu_q7.c`, `arm_relu_q15.c`) reaches from the
//! arguments it reads. Their dimensions are `uint16_t` arguments, read as
//! the kernel reads them: the low half-word of the argument's word.

use memtrace_abi::Role;

use super::reader::*;
use super::{ApiFunction, Axis};

/// A `uint16_t` argument as the kernel sees it.
fn half(r: &Reader<'_>, arg: usize) -> u64 {
    r.arg(arg) & 0xFFFF
}

/// `(x, y, z, w)` of a concatenation's input (arguments 1 to 4).
fn input_extents(r: &Reader<'_>) -> [u64; 4] {
    [half(r, 1), half(r, 2), half(r, 3), half(r, 4)]
}

/// Index of `axis` in `(x, y, z, w)`.
fn axis_index(axis: Axis) -> usize {
    match axis {
        Axis::X => 0,
        Axis::Y => 1,
        Axis::Z => 2,
        Axis::W => 3,
    }
}

/// The axis's letter, as in the function's name.
fn axis_letter(axis: Axis) -> char {
    ['x', 'y', 'z', 'w'][axis_index(axis)]
}

/// `arm_concatenation_s8_{x,y,z}(input, input_x, input_y, input_z,
/// input_w, output, output_<axis>, offset_<axis>)` and
/// `arm_concatenation_s8_w(input, x, y, z, w, output, offset_w)`: the
/// kernel copies the input block into the output at `offset` along the
/// axis, a strided part of it. The input is its `x·y·z·w` bytes; the
/// output is the whole output tensor, the input's extents with the axis's
/// replaced by `output_<axis>`. `arm_concatenation_s8_w` has no output
/// extent along W: its output is the tensor up to the end of the block it
/// writes, `(offset_w + input_w)·x·y·z` bytes (the whole tensor for the
/// last block).
pub(super) fn concatenation(r: &mut Reader<'_>, axis: Axis) {
    r.layer.op = "concatenation";
    let input = input_extents(r);
    let i = axis_index(axis);
    let (output_extent, offset) = match axis {
        Axis::W => (input[3].saturating_add(r.arg(6)), r.arg(6)),
        _ => (half(r, 6), r.arg(7)),
    };
    let mut output = input;
    output[i] = output_extent;
    let bytes = |e: &[u64; 4]| e.iter().fold(1u64, |p, &f| p.saturating_mul(f));
    r.buffer(Role::Input, "input", r.arg(0), bytes(&input), 1);
    r.buffer(Role::Output, "output", r.arg(5), bytes(&output), 1);
    let text = |e: &[u64; 4]| format!("{}x{}x{}x{}", e[3], e[1], e[0], e[2]);
    r.layer.shapes = format!(
        "input={},output={},axis={},offset={offset}",
        text(&input),
        text(&output),
        axis_letter(axis)
    );
}

/// `arm_reshape_s8(input, output, total_size)`: a copy of `total_size`
/// bytes.
pub(super) fn reshape(r: &mut Reader<'_>) {
    r.layer.op = "reshape";
    let n = r.arg(2);
    r.buffer(Role::Input, "input", r.arg(0), n, 1);
    r.buffer(Role::Output, "output", r.arg(1), n, 1);
    r.layer.shapes = format!("input=1x1x1x{n},output=1x1x1x{n}");
}

/// `arm_relu_q7`, `arm_relu6_s8`, `arm_relu_q15(data, size)`: the kernel
/// clamps `size` elements of `data` in place. Its one buffer is declared
/// twice, as the input and as the output over the same bytes — the DMO
/// placement at full overlap, which the protocol allows: the contract
/// exempts the input bytes the output shares from `input_write` and the
/// output bytes the input shares from `output_read_before_write`, and O_s
/// compares the kernel's reads of `data` with its writes (the whole
/// buffer when each element is read before it is written).
pub(super) fn relu(r: &mut Reader<'_>, api: &ApiFunction) {
    r.layer.op = if api.name.contains("relu6") {
        "relu6"
    } else {
        "relu"
    };
    let n = half(r, 1);
    let (data, elem) = (r.arg(0), api.input_elem);
    r.buffer(Role::Input, "input", data, n * elem as u64, elem);
    r.buffer(Role::Output, "output", data, n * elem as u64, elem);
    r.layer.shapes = format!("input=1x1x1x{n},output=1x1x1x{n},in_place=1");
}
