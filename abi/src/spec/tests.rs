use super::*;

#[test]
fn table_one_layer_has_the_paper_output_shape() {
    let s = LayerSpec::parse(
        "op=depthwise_conv2d,dtype=f32,input=1x112x112x96,filter=1x3x3x96,stride=2,padding=same",
    )
    .unwrap();
    assert_eq!(s.output, [1, 56, 56, 96]);
    // (56-1)*2 + 3 - 112 = 1 -> before-padding 0
    assert_eq!(s.pad, (0, 0));
    assert_eq!(s.output_bytes(), 56 * 56 * 96 * 4);
}

#[test]
fn canonical_text_parses_back() {
    let s = LayerSpec::parse(
        "op=conv2d,dtype=int8,input=1x9x7x3,filter=5x3x3x3,stride=2x1,padding=valid,activation=relu6",
    )
    .unwrap();
    assert_eq!(LayerSpec::parse(&s.to_string()).unwrap(), s);
    assert_eq!(s.output, [1, 4, 5, 5]);
}

#[test]
fn same_padding_of_stride_one_3x3_is_one() {
    let s = LayerSpec::parse("op=max_pool,input=1x8x8x4,filter=3x3").unwrap();
    assert_eq!(s.pad, (1, 1));
    assert_eq!(s.output, [1, 8, 8, 4]);
}

#[test]
fn printed_pool_filters_with_one_row_parse_back() {
    let s = LayerSpec::parse("op=max_pool,input=1x10x7x6,filter=1x3,padding=same").unwrap();
    assert_eq!(s.filter, [1, 1, 3, 1]);
    assert_eq!(s.to_string().matches("filter=1x1x3x1").count(), 1);
    assert_eq!(LayerSpec::parse(&s.to_string()).unwrap(), s);
}

#[test]
fn depth_multiplier_is_inferred_from_the_depthwise_filter() {
    let s = LayerSpec::parse("op=depthwise_conv2d,input=1x5x5x2,filter=1x3x3x4").unwrap();
    assert_eq!(s.depth_multiplier, 2);
    assert_eq!(s.output, [1, 5, 5, 4]);
    // Independently: output channels = input channels × multiplier.
    assert_eq!(s.output[3], s.input[3] * s.depth_multiplier);
    for m in 1..=4 {
        let text = format!("op=depthwise_conv2d,input=1x6x6x3,filter=1x3x3x{}", 3 * m);
        let s = LayerSpec::parse(&text).unwrap();
        assert_eq!(s.depth_multiplier, m, "{text}");
        // An explicit agreeing value gives the same spec, and the
        // canonical text (which names it) parses back to it.
        let explicit = LayerSpec::parse(&format!("{text},depth_multiplier={m}")).unwrap();
        assert_eq!(explicit, s);
        assert_eq!(LayerSpec::parse(&s.to_string()).unwrap(), s);
    }
    let e = |t: &str| LayerSpec::parse(t).unwrap_err().to_string();
    let d = e("op=depthwise_conv2d,input=1x5x5x2,filter=1x3x3x4,depth_multiplier=1");
    assert!(
        d.contains("depth_multiplier=1 disagrees") && d.contains("2"),
        "{d}"
    );
    let d = e("op=depthwise_conv2d,input=1x5x5x2,filter=1x3x3x4,depth_multiplier=3");
    assert!(d.contains("disagrees"), "{d}");
    let d = e("op=depthwise_conv2d,input=1x5x5x2,filter=1x3x3x3");
    assert!(d.contains("not a multiple of the input depth 2"), "{d}");
    // Other ops are unaffected: depth_multiplier stays as given.
    let c = LayerSpec::parse("op=conv2d,input=1x5x5x2,filter=4x3x3x2").unwrap();
    assert_eq!(c.depth_multiplier, 1);
}

#[test]
fn sizes_that_overflow_are_errors_not_wrapped() {
    let e = |t: &str| LayerSpec::parse(t).unwrap_err().to_string();
    let big = u32::MAX;
    assert!(e(&format!("op=relu,input=1x{big}x2x1")).contains("above"));
    assert!(e("op=relu,input=65536x65536x65536x2").contains("elements"));
    assert!(e("op=fully_connected,input=2x65536x16384x1,filter=3x1").contains("rows"));
    assert!(e(&format!(
        "op=max_pool,input=1x8x8x1,filter=2x2,stride={big}"
    ))
    .contains("at most"));
    // Depthwise depth C·M past 2^32 does not wrap to a small match.
    let m = 1u64 << 31;
    let t = format!("op=depthwise_conv2d,input=1x4x4x2,filter=1x1x1x4,depth_multiplier={m}");
    assert!(e(&t).contains("disagrees"), "{}", e(&t));
    // Large but representable windows: 64-bit arithmetic, exact results.
    let s = LayerSpec::parse(&format!(
        "op=max_pool,input=1x{0}x1x1,filter=1x1,stride={0},padding=valid",
        MAX_DIM
    ))
    .unwrap();
    assert_eq!(s.output, [1, 1, 1, 1]);
}

#[test]
fn keys_the_op_does_not_have_are_errors() {
    // Found by the fuzz campaign: these parsed, but their canonical text
    // (which leaves the keys out) read back as a different spec.
    let e = |t: &str| LayerSpec::parse(t).unwrap_err().to_string();
    for text in [
        "op=add,stride= 7 ,input=1x19x19x8,output=1x19x19x8",
        "op=relu,input=1x4x4x2,padding=valid",
        "op=fully_connected,input=1x1x1x56,filter=40x56,stride=2",
        "op=matmul,input=8x4,filter=4x16,dilation=2",
    ] {
        assert!(e(text).contains("has no window"), "{text}: {}", e(text));
    }
    for text in [
        "op=conv2d,input=1x11x9x2,filter=3x2x2x2,depth_multiplier=3",
        "op=matmul,input=8x4,filter=4x16,depth_multiplier=2147483647",
        "op=max_pool,input=1x12x18x5,filter=3x3,depth_multiplier=2",
    ] {
        assert!(
            e(text).contains("depthwise_conv2d only"),
            "{text}: {}",
            e(text)
        );
    }
    // The neutral values may still be written out.
    let s = LayerSpec::parse("op=add,input=1x2x2x1,stride=1,depth_multiplier=1").unwrap();
    assert_eq!(LayerSpec::parse(&s.to_string()).unwrap(), s);
}

#[test]
fn a_key_given_twice_is_an_error() {
    let e = |t: &str| LayerSpec::parse(t).unwrap_err().to_string();
    for (text, key) in [
        ("op=relu,input=1x2x2x1,stride=1,stride=2", "stride"),
        ("op=relu,input=1x2x2x1,input=1x2x2x1", "input"),
        ("op=relu,op=relu,input=4", "op"),
        ("op=max_pool,input=1x4x4x1,filter=2x2,padding=same,padding=valid", "padding"),
        (
            "op=depthwise_conv2d,input=1x5x5x2,filter=1x3x3x4,depth_multiplier=2,depth_multiplier=2",
            "depth_multiplier",
        ),
    ] {
        let m = e(text);
        assert!(m.contains(&format!("key `{key}` is given more than once")), "{text}: {m}");
    }
    // Each key once is fine, in any order.
    LayerSpec::parse("stride=2,input=1x4x4x1,op=max_pool,filter=2x2").unwrap();
}

#[test]
fn the_new_ops_parse_print_and_derive_their_output() {
    let p = |t: &str| LayerSpec::parse(t).unwrap();
    // Transpose conv: TensorFlow's default output (in·s for same,
    // in·s + max(k − s, 0) for valid) and TFLite's padding from the
    // output back to the input.
    let t = p("op=transpose_conv,dtype=int8,input=1x4x5x3,filter=2x3x3x3,stride=2");
    assert_eq!(t.output, [1, 8, 10, 2]);
    assert_eq!(t.pad, (0, 0)); // ((8/2 − 1)·2 + 3 − 8) / 2 = 0
    let v = p("op=transpose_conv,input=1x4x5x3,filter=2x3x3x3,stride=2,padding=valid");
    assert_eq!(v.output, [1, 9, 11, 2]);
    let given =
        p("op=transpose_conv,input=1x4x4x3,filter=2x4x4x3,stride=2,padding=same,output=1x7x8x2");
    assert_eq!(given.output, [1, 7, 8, 2]);
    assert_eq!(given.pad, (1, 1)); // ((4 − 1)·2 + 4 − 7) / 2, ((4 − 1)·2 + 4 − 8) / 2
                                   // Concatenation: the axis extents add up; negative axes count from C.
    let c = p("op=concatenation,input=1x4x5x3,input2=1x4x5x2,axis=-1");
    assert_eq!((c.output, c.axis), ([1, 4, 5, 5], Some(3)));
    assert_eq!(c.input_bytes_of(1), Some(4 * 5 * 2 * 4));
    // Pad: missing outer dimensions are 0, a missing key all 0.
    let d = p("op=pad,dtype=int8,input=1x4x5x3,pad_before=1x2x0,pad_after=0x0x1x1");
    assert_eq!(d.paddings.unwrap().before, [0, 1, 2, 0]);
    assert_eq!(d.output, [1, 5, 8, 4]);
    assert_eq!(p("op=pad,input=1x2x2x1,pad_after=1").output, [1, 2, 2, 2]);
    for s in [t, v, given, c, d] {
        assert_eq!(LayerSpec::parse(&s.to_string()).unwrap(), s, "{s}");
    }
}

#[test]
fn the_new_ops_job_words_carry_every_field() {
    let c = LayerSpec::parse("op=concatenation,input=2x4x5x3,input2=1x4x5x3,axis=0").unwrap();
    let w = c.job_words(9);
    assert_eq!(w[JOB_OP], 10);
    assert_eq!(w[JOB_AXIS], 0);
    assert_eq!(&w[JOB_INPUT2..JOB_INPUT2 + 4], &[1, 4, 5, 3]);
    assert_eq!(&w[JOB_OUTPUT..JOB_OUTPUT + 4], &[3, 4, 5, 3]);
    let p = LayerSpec::parse("op=pad,input=1x4x5x3,pad_before=0x1x2x0,pad_after=0x3x4x5").unwrap();
    let w = p.job_words(9);
    assert_eq!((w[JOB_OP], w[JOB_SEED]), (11, 9));
    assert_eq!(&w[JOB_PAD_BEFORE..JOB_PAD_BEFORE + 4], &[0, 1, 2, 0]);
    assert_eq!(&w[JOB_PAD_AFTER..JOB_PAD_AFTER + 4], &[0, 3, 4, 5]);
}

#[test]
fn bad_new_op_specs_say_what_is_wrong() {
    let e = |t: &str| LayerSpec::parse(t).unwrap_err().to_string();
    for (text, want) in [
        (
            "op=concatenation,input=1x2x2x1,input2=1x3x2x1,axis=3",
            "does not match input 1x2x2x1 outside axis 3",
        ),
        (
            "op=concatenation,input=1x2x2x1,input2=1x2x2x1,axis=4",
            "not an NHWC axis",
        ),
        (
            "op=concatenation,input=1x2x2x1,axis=3",
            "needs input2=NxHxWxC and axis=A",
        ),
        (
            "op=concatenation,input=1x2x2x1,input2=1x2x2x0,axis=3",
            "zero dimension",
        ),
        (
            "op=concatenation,input=1x2x2x1,input2=1x2x2x1,axis=2,activation=relu",
            "no fused activation",
        ),
        (
            "op=pad,input=1x2x2x1,filter=1x1x1x1,pad_before=1",
            "takes no filter",
        ),
        ("op=pad,input=1x2x2x1", "needs paddings"),
        (
            "op=pad,input=1x2x2x1,pad_before=1x-1",
            "not a non-negative integer",
        ),
        (
            "op=pad,input=1x2x2x1,pad_before=1x1x1x1x1",
            "1 to 4 dimensions",
        ),
        (
            "op=pad,input=1x2x2x1,input2=1x2x2x1",
            "op pad has no input2 or axis",
        ),
        (
            "op=add,input=1x2x2x1,pad_after=1",
            "op add has no pad_before or pad_after",
        ),
        (
            "op=transpose_conv,input=1x4x4x2,filter=3x3x3x2,dilation=2",
            "has no dilation",
        ),
        (
            "op=transpose_conv,input=1x4x4x2,filter=3x3x3x3,stride=2",
            "does not match input depth 2",
        ),
        (
            "op=transpose_conv,input=1x4x4x2,stride=2",
            "needs a filter shape",
        ),
        (
            "op=transpose_conv,input=1x4x4x2,filter=3x3x3x2,stride=2,output=1x9x8x3",
            "maps output height 9 to 5, not to the input height 4",
        ),
        (
            "op=transpose_conv,input=1x4x4x2,filter=3x3x3x2,stride=2,output=1x8x8x4",
            "the filter's 3 output channels",
        ),
    ] {
        let m = e(text);
        assert!(m.contains(want), "{text}: {m}");
    }
    // Every op but transpose_conv derives its output: a wrong one is an
    // error, the right one is accepted.
    assert!(e("op=pad,input=1x2x2x1,pad_after=1,output=1x2x2x3")
        .contains("but the layer produces 1x2x2x2"));
    LayerSpec::parse("op=pad,input=1x2x2x1,pad_after=1,output=1x2x2x2").unwrap();
}

#[test]
fn bad_specs_say_what_is_wrong() {
    let e = |t: &str| LayerSpec::parse(t).unwrap_err().to_string();
    assert!(e("op=conv3d,input=1x2x2x1").contains("unknown op `conv3d`"));
    assert!(e("op=relu").contains("missing input"));
    assert!(e("op=conv2d,input=1x4x4x3,filter=8x3x3x2").contains("does not match"));
    assert!(e("op=relu,input=1x2x2x1,stride=0").contains("at least 1"));
    assert!(e("op=relu,input=1xAx2").contains("not a non-negative integer"));
    assert!(e("op=relu,input=4,colour=red").contains("unknown key"));
    assert!(e("op=conv2d,input=1x2x2x1,filter=1x5x5x1,padding=valid").contains("does not fit"));
}
