use memtrace_abi::program::Program;

use super::ops::{pad, transpose_conv_padding};
use super::quant::quantize_multiplier;
use super::*;
use crate::{Activation, Dtype, Model, OpKind};

#[test]
fn quantize_multiplier_matches_tflite_conventions() {
    assert_eq!(quantize_multiplier(0.5), (1 << 30, 0));
    assert_eq!(quantize_multiplier(0.25), (1 << 30, -1));
    assert_eq!(quantize_multiplier(1.0), (1 << 30, 1));
    let (q, s) = quantize_multiplier(0.0123);
    let back = q as f64 * 2f64.powi(s - 31);
    assert!((back - 0.0123).abs() < 1e-9, "{q} {s}");
    assert!(q >= 1 << 30);
}

#[test]
fn placements_beyond_any_arena_are_refused_naming_the_tensor() {
    let model = crate::zoo::build("mobilenet_v1_0.25_128_int8").unwrap();
    let arena = model.arena_tensors();
    let first = arena[0];
    let name = model.tensor_names()[first].clone();
    // A valid placement: every arena tensor side by side.
    let mut offsets = vec![None; model.tensors.len()];
    let mut end = 0u64;
    for &t in &arena {
        offsets[t] = Some(end);
        end += model.tensors[t].bytes;
    }
    let lower_with = |offsets: &[Option<u64>], arena_bytes: u64| {
        lower(
            &model,
            &LowerInput {
                order: &(0..model.ops.len()).collect::<Vec<_>>(),
                offsets,
                arena_bytes,
                seed: 1,
                input_data: None,
            },
        )
    };
    let program = lower_with(&offsets, end).unwrap();
    assert_eq!(program.arena_bytes, end);
    // An arena of u64::MAX bytes (the reported panic: capacity overflow).
    let e = lower_with(&offsets, u64::MAX).unwrap_err().to_string();
    assert!(
        e.contains(&u64::MAX.to_string()) && e.contains("limit"),
        "{e}"
    );
    // Offsets whose end wraps around, or lies beyond the arena.
    for bad in [u64::MAX, u64::MAX - 3, end] {
        let mut o = offsets.clone();
        o[first] = Some(bad);
        let e = lower_with(&o, end).unwrap_err().to_string();
        assert!(e.contains(&format!("`{name}`")), "{e}");
        assert!(e.contains(&bad.to_string()), "{e}");
    }
    // The last byte of the arena is still inside it.
    let mut o = offsets.clone();
    o[first] = Some(end - model.tensors[first].bytes);
    lower_with(&o, end).unwrap();
}

#[test]
fn transpose_conv_padding_is_tflm_s() {
    // TFLM: ComputePaddingHeightWidth(stride, 1, output extent, filter,
    // padding) with the forward window's output size; by hand:
    // total = (forward - 1) * stride + filter - output, padding total / 2.
    let tconv = |padding, k: u32, s: u32, input: u32, output: u32| {
        let mut g = crate::zoo::GraphBuilder::new("t", Dtype::Int8);
        let x = g.input("x", &[1, input, input, 4]);
        let y = g.transpose_conv("y", x, 8, k, s);
        let mut m = g.finish(&[y]);
        m.ops[0].options.padding = padding;
        m.tensors[y].shape = vec![1, output, output, 8];
        let t = &m.tensors;
        let op = &m.ops[0];
        transpose_conv_padding(op, &t[op.inputs[2]], &t[op.inputs[1]], &t[y]).unwrap()
    };
    use crate::Padding::{Same, Valid};
    // Tiny U-Net's 2x2 stride 2: forward 10, total (10-1)*2+2-20 = 0.
    assert_eq!(tconv(Valid, 2, 2, 10, 20), (0, 0, 2, 2));
    // 3x3 stride 2 SAME to 20: forward 10, total 1: padding 0.
    assert_eq!(tconv(Same, 3, 2, 10, 20), (0, 0, 3, 3));
    // 4x4 stride 2 SAME to 20: total 2: padding 1.
    assert_eq!(tconv(Same, 4, 2, 10, 20), (1, 1, 4, 4));
    // 3x3 stride 1 VALID to 12: forward 10, total 0.
    assert_eq!(tconv(Valid, 3, 1, 10, 12), (0, 0, 3, 3));
}

/// Tiny U-Net's int8 lowering at a side-by-side placement, with `edit`
/// applied to the model first.
fn lower_tiny_unet(edit: impl Fn(&mut Model)) -> Result<Program, LowerError> {
    let mut model = crate::zoo::build("tiny_unet_80x120_int8")
        .unwrap()
        .with_reference_scratch();
    edit(&mut model);
    let mut offsets = vec![None; model.tensors.len()];
    let mut end = 0u64;
    for t in model.arena_tensors() {
        offsets[t] = Some(end);
        end += model.tensors[t].bytes;
    }
    let order: Vec<usize> = (0..model.ops.len()).collect();
    lower(
        &model,
        &LowerInput {
            order: &order,
            offsets: &offsets,
            arena_bytes: end,
            seed: 1,
            input_data: None,
        },
    )
}

#[test]
fn tiny_unet_lowers_its_transpose_convs_and_concatenations() {
    let p = lower_tiny_unet(|_| {}).unwrap();
    let up = &p.ops[11];
    assert_eq!(up.kind, OpKind::TransposeConv);
    // The activation input (operand 2), not the output-shape operand.
    assert_eq!(p.tensors[up.inputs[0] as usize].dims, [1, 10, 15, 64]);
    assert_eq!(p.tensors[up.weights.unwrap() as usize].dims, [16, 2, 2, 64]);
    assert_eq!(
        p.tensors[up.scratch.unwrap() as usize].bytes(),
        20 * 30 * 16 * 4
    );
    assert_eq!(up.per_channel.len(), 16);
    assert_eq!((up.params.act_min, up.params.act_max), (-128, 127));
    assert_eq!(up.params.accumulator_bytes, 0);
    let cat = &p.ops[12];
    assert_eq!(cat.kind, OpKind::Concatenation);
    assert_eq!(cat.params.axis, 3);
    let dims: Vec<&[u32]> = cat
        .inputs
        .iter()
        .map(|&t| &p.tensors[t as usize].dims[..])
        .collect();
    assert_eq!(dims, [&[1, 20, 30, 32][..], &[1, 20, 30, 16][..]]);
    // TinySeg's int16 accumulator: the flag and half the scratch.
    let p16 = lower_tiny_unet(|m| {
        *m = m
            .with_transpose_conv_accumulator(crate::Accumulator::Int16)
            .with_reference_scratch()
    })
    .unwrap();
    assert_eq!(p16.ops[11].params.accumulator_bytes, 2);
    assert_eq!(
        p16.tensors[p16.ops[11].scratch.unwrap() as usize].bytes(),
        20 * 30 * 16 * 2
    );
}

#[test]
fn what_the_executor_cannot_run_is_refused_naming_the_operator() {
    let e = lower_tiny_unet(|m| m.ops[11].options.activation = Activation::Relu)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("operator 11 (TRANSPOSE_CONV)") && e.contains("Relu"),
        "{e}"
    );
    let e = lower_tiny_unet(|m| m.ops[12].options.activation = Activation::Relu)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("operator 12 (CONCATENATION)") && e.contains("activation"),
        "{e}"
    );
    let e = lower_tiny_unet(|m| m.ops[12].options.axis = Some(4))
        .unwrap_err()
        .to_string();
    assert!(e.contains("axis 4"), "{e}");
    // Float: tfmicro 0.1.0 has no freestanding float TRANSPOSE_CONV.
    let float = crate::zoo::build("tiny_unet_80x120").unwrap();
    let mut offsets = vec![None; float.tensors.len()];
    let mut end = 0u64;
    for t in float.arena_tensors() {
        offsets[t] = Some(end);
        end += float.tensors[t].bytes;
    }
    let order: Vec<usize> = (0..float.ops.len()).collect();
    let e = lower(
        &float,
        &LowerInput {
            order: &order,
            offsets: &offsets,
            arena_bytes: end,
            seed: 1,
            input_data: None,
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("operator 11 (TRANSPOSE_CONV)") && e.contains("float32"),
        "{e}"
    );
}

#[test]
fn same_padding_follows_tflite() {
    assert_eq!(pad(2, 1, 128, 3, 64), 0);
    assert_eq!(pad(1, 1, 64, 3, 64), 1);
    assert_eq!(pad(1, 1, 4, 4, 1), 0);
}
