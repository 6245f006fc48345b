//! Model import and zoo tests. The real models come from the registry copy of
//! the `tfmicro` crate (located with `cargo metadata`, never copied here).

use std::path::PathBuf;
use std::process::Command;

use super::order::{self, OrderKind};
use super::shape::{broadcast, check_op_shapes};
use super::*;
use crate::source::ModelSource;
use memtrace_abi::out_size;

/// `examples/models/` of the tfmicro crate.
pub(crate) fn tfmicro_models() -> PathBuf {
    let manifest = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../harness-c/tfmicro-locator/Cargo.toml"
    );
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut out = None;
    for offline in [true, false] {
        let mut cmd = Command::new(&cargo);
        cmd.args([
            "metadata",
            "--format-version",
            "1",
            "--manifest-path",
            manifest,
        ]);
        if offline {
            cmd.arg("--offline");
        }
        if let Ok(o) = cmd.output() {
            if o.status.success() {
                out = Some(o.stdout);
                break;
            }
        }
    }
    let meta: serde_json::Value =
        serde_json::from_slice(&out.expect("cargo metadata on tfmicro-locator")).unwrap();
    let path = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "tfmicro")
        .and_then(|p| p["manifest_path"].as_str())
        .expect("tfmicro in cargo metadata");
    PathBuf::from(path)
        .parent()
        .unwrap()
        .join("examples/models")
}

pub(crate) const REAL_MODELS: [&str; 4] = [
    "person_detection_grayscale",
    "micro_speech",
    "magic_wand",
    "hello_world",
];

pub(crate) fn real_model(name: &str) -> Model {
    tflite::import_file(&tfmicro_models().join(format!("{name}.tflite")))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn the_four_real_models_import() {
    for name in REAL_MODELS {
        let m = real_model(name);
        m.validate().unwrap();
        assert!(!m.ops.is_empty(), "{name}");
        assert!(!m.inputs.is_empty() && !m.outputs.is_empty(), "{name}");
        let consts = m.tensors.iter().filter(|t| t.is_constant).count();
        assert!(consts > 0, "{name} has weights");
        for t in m.tensors.iter().filter(|t| t.is_constant) {
            assert_eq!(
                t.data.as_ref().map(|d| d.len() as u64),
                Some(t.bytes),
                "{name} {}",
                t.name
            );
        }
        let kinds: Vec<_> = m.ops.iter().map(|o| o.kind.tflite_name()).collect();
        eprintln!("{name}: {} ops {:?}", m.ops.len(), kinds);
    }
}

#[test]
fn person_detection_is_the_mobilenet_the_greedy_test_describes() {
    let m = real_model("person_detection_grayscale");
    // 29 operators: 1 + 29 = 30 buffers, as in TFLM's planner test.
    assert_eq!(m.ops.len(), 29);
    let dw = m
        .ops
        .iter()
        .filter(|o| o.kind == OpKind::DepthwiseConv2d)
        .count();
    assert_eq!(dw, 14);
    let first = &m.ops[0];
    assert_eq!(first.kind, OpKind::DepthwiseConv2d);
    assert_eq!(first.options.stride, (2, 2));
    assert_eq!(first.options.padding, Padding::Same);
    assert_eq!(m.tensors[first.outputs[0]].shape, vec![1, 48, 48, 8]);
    let input = &m.tensors[m.inputs[0]];
    assert_eq!(input.shape, vec![1, 96, 96, 1]);
    assert!(input.quantization.is_some());
    // Every conv / depthwise / pool / fc has a LayerSpec for the O_s methods.
    for (i, o) in m.ops.iter().enumerate() {
        if matches!(
            o.kind,
            OpKind::Conv2d | OpKind::DepthwiseConv2d | OpKind::AveragePool | OpKind::FullyConnected
        ) {
            assert!(m.layer_spec(i).is_some(), "op {i} {}", o.kind.tflite_name());
        }
    }
}

#[test]
fn truncated_and_corrupted_files_are_errors() {
    for name in REAL_MODELS {
        let bytes = std::fs::read(tfmicro_models().join(format!("{name}.tflite"))).unwrap();
        assert!(tflite::import_bytes(name, &bytes).is_ok());
        let n = bytes.len();
        // (The last bytes of a file may be alignment padding nothing refers to.)
        for cut in [0, 3, 8, 64, n / 3, n / 2, n * 9 / 10] {
            let r = tflite::import_bytes(name, &bytes[..cut]);
            assert!(r.is_err(), "{name} truncated to {cut} bytes");
        }
        // Corrupt bytes all over the file: an error or a still-valid model,
        // never a panic.
        let mut errors = 0;
        for pos in (0..n).step_by((n / 400).max(1)) {
            let mut b = bytes.clone();
            b[pos] ^= 0xA5;
            if let Err(e) = tflite::import_bytes(name, &b) {
                assert!(!e.to_string().is_empty());
                errors += 1;
            }
        }
        assert!(errors > 0, "{name}");
    }
    // Bytes that are no flatbuffer at all are said to be neither kind of
    // input, with the bytes they start with.
    let e = tflite::import_bytes("x", b"not a flatbuffer").unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("neither an ELF program nor a .tflite model") && text.contains("6e 6f 74"),
        "{e}"
    );
}

#[test]
fn unsupported_operators_are_named_with_their_index() {
    // Rewrite hello_world's operator code to GATHER through the generated
    // owned types, then import.
    use super::schema::tflite as fb;
    let bytes = std::fs::read(tfmicro_models().join("hello_world.tflite")).unwrap();
    let root = <fb::ModelRef as planus::ReadAsRoot>::read_as_root(&bytes[..]).unwrap();
    let mut owned = fb::Model::try_from(root).unwrap();
    let codes = owned.operator_codes.as_mut().unwrap();
    let used = owned.subgraphs.as_ref().unwrap()[0]
        .operators
        .as_ref()
        .unwrap()[0]
        .opcode_index as usize;
    codes[used].builtin_code = fb::BuiltinOperator::Gather;
    codes[used].deprecated_builtin_code = fb::BuiltinOperator::Gather as i32 as i8;
    let out = tflite::serialize_for_tests(&owned);
    let e = tflite::import_bytes("x", &out).unwrap_err().to_string();
    assert!(e.contains("GATHER"), "{e}");
    assert!(e.contains("operator 0"), "{e}");
}

#[test]
fn offline_plan_round_trips_through_the_flatbuffer() {
    let path = tfmicro_models().join("hello_world.tflite");
    let bytes = std::fs::read(&path).unwrap();
    let m = tflite::import_bytes("hello_world", &bytes).unwrap();
    let offsets: Vec<i64> = (0..m.tensors.len() as i64)
        .map(|i| if i % 2 == 0 { i * 16 } else { -1 })
        .collect();
    let r = tflite::emit_offline(&bytes, &offsets).unwrap();
    assert_eq!(
        tflite::read_offline(&r.bytes).unwrap(),
        Some(offsets.clone())
    );
    assert!(r.min_buffer_alignment >= 4);
    // The rest of the model is unchanged.
    let again = tflite::import_bytes("hello_world", &r.bytes).unwrap();
    assert_eq!(again, m);
    // Emitting twice replaces the entry.
    let r2 = tflite::emit_offline(&r.bytes, &vec![-1; offsets.len()]).unwrap();
    assert_eq!(
        tflite::read_offline(&r2.bytes).unwrap(),
        Some(vec![-1; offsets.len()])
    );
    assert_eq!(&r2.bytes[4..8], b"TFL3");
}

#[test]
fn a_plan_note_travels_with_its_offline_plan() {
    let bytes = std::fs::read(tfmicro_models().join("hello_world.tflite")).unwrap();
    let n = tflite::import_bytes("hello_world", &bytes)
        .unwrap()
        .tensors
        .len();
    let note = br#"{"kernels":"tflm"}"#;
    let r = tflite::emit_offline_noted(&bytes, &vec![-1; n], Some(note)).unwrap();
    let read = |b: &[u8]| tflite::read_metadata(b, tflite::PLAN_METADATA).unwrap();
    assert_eq!(read(&r.bytes).as_deref(), Some(&note[..]));
    // Emitting again without a note drops the old one: it described
    // another plan.
    let plain = tflite::emit_offline(&r.bytes, &vec![0; n]).unwrap();
    assert_eq!(read(&plain.bytes), None);
    // Stripping the offline plan strips its note; stripping only the note
    // keeps the plan.
    let stripped = tflite::strip_offline(&r.bytes).unwrap().unwrap();
    assert_eq!(read(&stripped), None);
    assert_eq!(tflite::read_offline(&stripped).unwrap(), None);
    let unnoted = tflite::strip_metadata(&r.bytes, tflite::PLAN_METADATA)
        .unwrap()
        .unwrap();
    assert_eq!(read(&unnoted), None);
    assert_eq!(tflite::read_offline(&unnoted).unwrap(), Some(vec![-1; n]));
    assert_eq!(
        tflite::strip_metadata(&unnoted, tflite::PLAN_METADATA).unwrap(),
        None
    );
}

fn bytes_of(m: &Model, name: &str) -> u64 {
    m.tensors.iter().find(|t| t.name == name).unwrap().bytes
}

#[test]
fn zoo_mobilenets_have_keras_shapes() {
    let m = zoo::build("mobilenet_v1_0.25_128_int8").unwrap();
    m.validate().unwrap();
    assert_eq!(bytes_of(&m, "conv1"), 32 * 1024);
    assert_eq!(bytes_of(&m, "conv_dw_1"), 32 * 1024);
    assert_eq!(bytes_of(&m, "conv_pw_1"), 64 * 1024);
    assert_eq!(m.tensors[m.outputs[0]].shape, vec![1, 1000]);
    assert_eq!(m.ops.len(), 1 + 26 + 4);
    for (i, o) in m.ops.iter().enumerate() {
        if matches!(o.kind, OpKind::Conv2d | OpKind::DepthwiseConv2d) {
            assert!(m.layer_spec(i).is_some(), "{i}");
        }
    }

    let v2 = zoo::build("mobilenet_v2_1.0_224").unwrap();
    v2.validate().unwrap();
    assert_eq!(bytes_of(&v2, "block_1_expand"), 112 * 112 * 96 * 4);
    assert_eq!(bytes_of(&v2, "block_1_depthwise"), 56 * 56 * 96 * 4);
    let adds = v2.ops.iter().filter(|o| o.kind == OpKind::Add).count();
    assert_eq!(adds, 10);
    assert!(v2.sequential_chain().is_err());
    let v2s = zoo::build("mobilenet_v2_0.35_224").unwrap();
    assert_eq!(bytes_of(&v2s, "Conv1"), 112 * 112 * 16 * 4);
    assert_eq!(bytes_of(&v2s, "expanded_conv_project"), 112 * 112 * 8 * 4);
    assert!(zoo::build("mobilenet_v3").is_err());
    assert!(zoo::build("mobilenet_v1_0.3_224").is_err());
}

#[test]
fn orders_are_topological_and_differ_on_branches() {
    let m = zoo::liberis_fig1();
    let model = order::order(&m, OrderKind::Model);
    let eager = order::order(&m, OrderKind::Eager);
    let lazy = order::order(&m, OrderKind::Lazy);
    for o in [&model, &eager, &lazy] {
        assert!(order::is_valid_order(&m, o));
    }
    assert_eq!(eager, vec![0, 1, 3, 2, 5, 4, 6]);
    assert!(!order::is_valid_order(&m, &[1, 0, 2, 3, 4, 5, 6]));
}

#[test]
fn reordering_dp_reproduces_liberis_and_lane_figure_1() {
    let m = zoo::liberis_fig1();
    let none = |_: usize| 0u64;
    let default = order::working_set_peak(&m, &order::order(&m, OrderKind::Model), &none);
    assert_eq!(default, 5216);
    let r = order::reorder_dp(&m, &none, 1000).unwrap();
    assert_eq!(r.peak_working_set, 4960);
    assert_eq!(order::working_set_peak(&m, &r.order, &none), 4960);
    assert_eq!(r.order, vec![0, 3, 5, 1, 2, 4, 6]);
    assert!(matches!(
        order::reorder_dp(&m, &none, 3),
        Err(order::ReorderError::TooManyStates { limit: 3 })
    ));
}

/// The model in `bytes` with tensor `tensor`'s shape replaced, re-serialised
/// through the generated owned types (a corrupted copy of a real file).
fn with_shape(bytes: &[u8], tensor: usize, shape: &[i32]) -> Vec<u8> {
    use super::schema::tflite as fb;
    let root = <fb::ModelRef as planus::ReadAsRoot>::read_as_root(bytes).unwrap();
    let mut owned = fb::Model::try_from(root).unwrap();
    let t = &mut owned.subgraphs.as_mut().unwrap()[0]
        .tensors
        .as_mut()
        .unwrap()[tensor];
    t.shape = Some(shape.to_vec());
    tflite::serialize_for_tests(&owned)
}

/// A real `.tflite`: one of the tfmicro crate's (a file source names its
/// stem there), or a zoo model exported.
fn real_tflite(source: &ModelSource) -> Vec<u8> {
    match source {
        ModelSource::Zoo(_) => source.bytes(1).unwrap(),
        ModelSource::File(stem) => {
            std::fs::read(tfmicro_models().join(stem).with_extension("tflite")).unwrap()
        }
    }
}

/// A zoo model, or a tfmicro model by its stem.
fn zoo(name: &str) -> ModelSource {
    ModelSource::Zoo(name.into())
}
fn tfm(stem: &str) -> ModelSource {
    ModelSource::File(stem.into())
}

#[test]
fn real_and_zoo_models_have_consistent_shapes() {
    for name in REAL_MODELS {
        real_model(name).check_shapes().unwrap();
    }
    // liberis_fig1 is the abstract graph of a planning paper (convolutions
    // with sizes but no filters): it is planned, never run or exported.
    for name in zoo::names().into_iter().filter(|&n| n != "liberis_fig1") {
        let m = zoo::build(name).unwrap();
        m.check_shapes()
            .unwrap_or_else(|e| panic!("zoo {name}: {e}"));
    }
    for source in ["mobilenet_v2_0.35_96_int8", "sakr_cifar10"].map(zoo) {
        tflite::import_bytes(&source.name(), &real_tflite(&source)).unwrap();
    }
}

#[test]
fn a_shape_inconsistent_with_its_operator_is_a_load_error_naming_it() {
    // (model, operator kind, how to corrupt the operator's output shape)
    type Corrupt = fn(&[u32]) -> Vec<i32>;
    let cases: [(ModelSource, OpKind, Corrupt); 11] = [
        (zoo("tiny_unet_80x120_int8"), OpKind::TransposeConv, |s| {
            vec![s[0] as i32, s[1] as i32 + 1, s[2] as i32, s[3] as i32]
        }),
        (zoo("tiny_unet_80x120_int8"), OpKind::Concatenation, |s| {
            vec![s[0] as i32, s[1] as i32, s[2] as i32, s[3] as i32 - 1]
        }),
        (
            tfm("person_detection_grayscale"),
            OpKind::DepthwiseConv2d,
            |s| vec![s[0] as i32, s[1] as i32 - 1, s[2] as i32, s[3] as i32],
        ),
        (tfm("person_detection_grayscale"), OpKind::Conv2d, |s| {
            vec![s[0] as i32, s[1] as i32, s[2] as i32, s[3] as i32 + 1]
        }),
        (
            tfm("person_detection_grayscale"),
            OpKind::AveragePool,
            |s| vec![s[0] as i32, s[1] as i32 + 1, s[2] as i32 + 1, s[3] as i32],
        ),
        (zoo("mobilenet_v1_0.25_128_int8"), OpKind::Reshape, |s| {
            s.iter().map(|&d| d as i32 * 2).collect()
        }),
        (tfm("hello_world"), OpKind::Quantize, |s| {
            s.iter().map(|&d| d as i32 + 1).collect()
        }),
        (tfm("hello_world"), OpKind::FullyConnected, |s| {
            s.iter().map(|&d| d as i32 + 1).collect()
        }),
        (tfm("magic_wand"), OpKind::MaxPool, |s| {
            vec![s[0] as i32, s[1] as i32 * 2, s[2] as i32, s[3] as i32]
        }),
        (zoo("mobilenet_v2_0.35_96_int8"), OpKind::Add, |s| {
            vec![s[0] as i32, s[1] as i32, s[2] as i32, s[3] as i32 * 2]
        }),
        (zoo("mobilenet_v1_0.25_128_int8"), OpKind::Softmax, |s| {
            s.iter().map(|&d| d as i32 + 1).collect()
        }),
    ];
    let dir = std::env::temp_dir().join(format!("memtrace-shapes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (source, kind, corrupt) in cases {
        let bytes = real_tflite(&source);
        let name = source.name();
        let model = tflite::import_bytes(&name, &bytes).unwrap();
        // The first operator of that kind, and its output tensor.
        let (op, o) = model
            .ops
            .iter()
            .enumerate()
            .find(|(_, o)| o.kind == kind)
            .unwrap_or_else(|| panic!("{name} has no {}", kind.tflite_name()));
        let out = o.outputs[0];
        let tensor_name = model.tensors[out].name.clone();
        let bad = corrupt(&model.tensors[out].shape);
        let copy = with_shape(&bytes, out, &bad);
        // Independently: the first operator that touches the tensor is the
        // one that writes it (every reader comes later).
        let first_user = model
            .ops
            .iter()
            .position(|o| o.inputs.contains(&out) || o.outputs.contains(&out))
            .unwrap();
        assert_eq!(first_user, op, "{name}");
        let e = tflite::import_bytes(&name, &copy).unwrap_err().to_string();
        assert!(
            e.contains(&format!("operator {op} ({})", kind.tflite_name())),
            "{name} {kind:?}: {e}"
        );
        assert!(
            e.contains(&format!("`{tensor_name}`")),
            "{name} {kind:?}: {e}"
        );
        // Through a file, as `memtrace verify/plan` load it.
        let path = dir.join(format!("{op}-{}.tflite", kind.tflite_name()));
        std::fs::write(&path, &copy).unwrap();
        let e2 = crate::source::load(path.to_str().unwrap())
            .unwrap_err()
            .to_string();
        assert_eq!(e2, e);
        // The same copy with the shape put back loads again.
        let fixed: Vec<i32> = model.tensors[out].shape.iter().map(|&d| d as i32).collect();
        tflite::import_bytes(&name, &with_shape(&bytes, out, &fixed)).unwrap();
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn shape_rules_follow_tflite() {
    assert_eq!(out_size(Padding::Same, 112, 3, 2, 1), Some(56));
    assert_eq!(out_size(Padding::Valid, 112, 3, 2, 1), Some(55));
    assert_eq!(out_size(Padding::Valid, 5, 3, 1, 2), Some(1));
    assert_eq!(out_size(Padding::Valid, 4, 3, 1, 2), None);
    assert_eq!(broadcast(&[1, 4, 4, 8], &[8]), Some(vec![1, 4, 4, 8]));
    assert_eq!(broadcast(&[2, 1], &[1, 3]), Some(vec![2, 3]));
    assert_eq!(broadcast(&[2, 4], &[3, 4]), None);
}

/// TinyUNet of coslab-kr/tinyseg `model/models/unet.py`, written down here
/// independently of the zoo builder: (input channels, channels) of every
/// `DoubleConv`, (input channels, `Up` channels) of every `Up`, and the
/// output convolution's input channels.
const UNET_DOUBLE_CONVS: [(u64, u64); 7] = [
    (3, 8),        // inc
    (8, 16),       // down1
    (16, 32),      // down2
    (32, 64),      // down3
    (32 + 16, 32), // up1: skip x3 (32) + transpose conv (32 / 2)
    (16 + 8, 16),  // up2: skip x2 (16) + 16 / 2
    (8 + 4, 8),    // up3: skip x1 (8) + 8 / 2
];
const UNET_UPS: [(u64, u64); 3] = [(64, 32), (32, 16), (16, 8)];
const UNET_OUT_IN: u64 = 8;

#[test]
fn tiny_unet_has_the_paper_s_109725_parameters() {
    // The paper's count (Keras `count_params`): 3x3 convolutions without
    // bias, one batch norm of 4·C (gamma, beta, mean, variance) shared by the
    // two convolutions of a DoubleConv, 2x2 transpose convolutions to C/2
    // with bias, and the 1x1 output convolution with bias.
    let double: u64 = UNET_DOUBLE_CONVS
        .iter()
        .map(|&(cin, c)| 9 * cin * c + 9 * c * c + 4 * c)
        .sum();
    let ups: u64 = UNET_UPS
        .iter()
        .map(|&(cin, c)| 2 * 2 * cin * (c / 2) + c / 2)
        .sum();
    let paper = double + ups + UNET_OUT_IN + 1;
    assert_eq!(paper, 109_725, "Table 2 of the TinySeg paper");

    // The model's constants: the same weights, but each convolution of a
    // DoubleConv carries the folded batch norm as a C-element bias (2·C per
    // DoubleConv instead of the 4·C batch-norm parameters). The transpose
    // convolutions' int32 output-shape operands are not parameters.
    let m = zoo::build("tiny_unet_80x120_int8").unwrap();
    let shape_operands: Vec<usize> = m
        .ops
        .iter()
        .filter(|o| o.kind == OpKind::TransposeConv)
        .map(|o| o.inputs[0])
        .collect();
    assert_eq!(shape_operands.len(), 3);
    let constants: u64 = m
        .tensors
        .iter()
        .enumerate()
        .filter(|(i, t)| t.is_constant && !shape_operands.contains(i))
        .map(|(_, t)| t.elements())
        .sum();
    let folded: u64 = UNET_DOUBLE_CONVS.iter().map(|&(_, c)| 2 * c).sum();
    assert_eq!(constants, paper - folded);
    assert_eq!(constants, 109_373);
}

#[test]
fn tiny_unet_has_table_2_s_shapes_and_unet_py_s_layer_order() {
    let m = zoo::build("tiny_unet_80x120_int8").unwrap();
    m.validate().unwrap();
    m.check_shapes().unwrap();
    assert_eq!(m.tensors[m.inputs[0]].shape, [1, 80, 120, 3]);
    assert_eq!(m.tensors[m.outputs[0]].shape, [1, 80, 120, 1]);
    let kinds: Vec<OpKind> = m.ops.iter().map(|o| o.kind).collect();
    use OpKind::{Concatenation as Cat, Conv2d as C, MaxPool as P, TransposeConv as T};
    assert_eq!(
        kinds,
        [C, C, P, C, C, P, C, C, P, C, C, T, Cat, C, C, T, Cat, C, C, T, Cat, C, C, C]
    );
    // Each concatenation reads the skip tensor first (unet.py's
    // `concat([x2, x1])`): the output of DoubleConv 3, 2, 1 (ops 7, 4, 1).
    let producers = m.producers();
    let cats: Vec<(Option<usize>, Option<usize>)> = m
        .ops
        .iter()
        .filter(|o| o.kind == Cat)
        .map(|o| (producers[o.inputs[0]], producers[o.inputs[1]]))
        .collect();
    assert_eq!(
        cats,
        [
            (Some(7), Some(11)),
            (Some(4), Some(15)),
            (Some(1), Some(19))
        ]
    );
    // Every convolution but the last fuses ReLU; the transpose convolutions
    // are VALID 2x2 stride 2.
    for (i, o) in m.ops.iter().enumerate() {
        match o.kind {
            C if i + 1 < m.ops.len() => assert_eq!(o.options.activation, Activation::Relu),
            C => assert_eq!(o.options.activation, Activation::None),
            T => {
                assert_eq!(
                    (o.options.stride, o.options.padding),
                    ((2, 2), Padding::Valid)
                );
                assert_eq!(m.tensors[o.inputs[1]].shape[1..3], [2, 2]);
            }
            _ => {}
        }
    }
}

#[test]
fn tiny_unet_scratch_is_tflm_s_int32_accumulator_and_int16_halves_it() {
    let m = zoo::build("tiny_unet_80x120_int8").unwrap();
    // TFLM's Prepare: output FlatSize() * sizeof(int32_t), outputs
    // 20x30x16, 40x60x8 and 80x120x4.
    let want = |bytes: u64| {
        let mut v = vec![0u64; 24];
        v[11] = 20 * 30 * 16 * bytes;
        v[15] = 40 * 60 * 8 * bytes;
        v[19] = 80 * 120 * 4 * bytes;
        v
    };
    assert_eq!(m.reference_scratch_needs(), want(4));
    // TinySeg's temporary tensor quantisation, as its transform narrows
    // each TRANSPOSE_CONV.
    let mut narrow = m.clone();
    for op in narrow
        .ops
        .iter_mut()
        .filter(|o| o.kind == OpKind::TransposeConv)
    {
        op.options.accumulator = Accumulator::Int16;
    }
    assert_eq!(narrow.reference_scratch_needs(), want(2));
    // Float transpose convolutions accumulate in their output: no scratch.
    let float = zoo::build("tiny_unet_80x120").unwrap();
    assert!(float.reference_scratch_needs().iter().all(|&b| b == 0));

    // TFLM's greedy arena: its peak is the last transpose convolution, where
    // x1 (80x120x8), the up3 input (40x60x16), the output (80x120x4) and the
    // scratch are live together.
    let at_up3 = |scratch: u64| 80 * 120 * 8 + 40 * 60 * 16 + 80 * 120 * 4 + scratch;
    for (model, bytes) in [(&m, 4), (&narrow, 2)] {
        let planned = model.with_reference_scratch();
        let plan = crate::planner::run(
            &planned,
            crate::planner::PlannerKind::TflmGreedy,
            &crate::planner::Overlaps::none(&planned),
            &crate::planner::PlanOptions::default(),
        )
        .unwrap();
        assert_eq!(plan.peak_bytes, Some(at_up3(80 * 120 * 4 * bytes)));
    }
    assert_eq!(at_up3(80 * 120 * 4 * 4), 307_200);
    assert_eq!(at_up3(80 * 120 * 4 * 2), 230_400);
}

#[test]
fn transpose_conv_operands_that_disagree_are_named() {
    let base = crate::export::materialize(&zoo::build("tiny_unet_80x120_int8").unwrap(), 1);
    let op = base
        .ops
        .iter()
        .position(|o| o.kind == OpKind::TransposeConv)
        .unwrap();
    // The operator's own check (the input is also the previous operator's
    // output, which the whole-model check would report first).
    let check = |m: &Model| check_op_shapes(m, &m.ops[op]).unwrap_err();
    base.check_shapes().unwrap();
    // The output-shape operand says something else than the output.
    let mut m = base.clone();
    let s = m.ops[op].inputs[0];
    m.tensors[s].data = Some(
        [1i32, 20, 31, 16]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
    );
    let e = m.check_shapes().unwrap_err().to_string();
    assert!(
        e.contains(&format!("operator {op} (TRANSPOSE_CONV)")) && e.contains("[1, 20, 31, 16]"),
        "{e}"
    );
    // Weights whose input channels are not the input's.
    let mut m = base.clone();
    let w = m.ops[op].inputs[1];
    m.tensors[w].shape = vec![16, 2, 2, 32];
    assert!(check(&m).contains("weights"), "{}", check(&m));
    // An input that a 2x2 stride-2 VALID window does not make of the output.
    let mut m = base.clone();
    let x = m.ops[op].inputs[2];
    m.tensors[x].shape = vec![1, 11, 15, 64];
    assert!(check(&m).contains("stride 2x2"), "{}", check(&m));
    // A bias per output channel.
    let mut m = base.clone();
    let b = m.ops[op].inputs[3];
    m.tensors[b].shape = vec![15];
    assert!(check(&m).contains("bias"), "{}", check(&m));
}

/// Concatenation, PAD and TRANSPOSE_CONV are kernel-suite layers: their specs
/// carry the NHWC axis (a negative axis of a lower rank moved by the
/// left-padding), PAD's constant paddings, and the transpose conv's given
/// output; what the suite cannot run has no spec.
#[test]
fn concatenation_pad_and_transpose_conv_have_kernel_suite_layers() {
    let mut g = zoo::GraphBuilder::new("ops", Dtype::Int8);
    let x = g.input("x", &[4, 5, 3]);
    let y = g.input("y", &[4, 5, 2]);
    let options = |axis| OpOptions {
        axis: Some(axis),
        ..OpOptions::default()
    };
    let c = g.op(
        OpKind::Concatenation,
        vec![x, y],
        "c",
        &[4, 5, 5],
        options(-1),
    );
    let p = g.tensor("d/paddings", &[3, 2], Dtype::Int32, true);
    let d = g.op(
        OpKind::Pad,
        vec![c, p],
        "d",
        &[5, 8, 5],
        OpOptions::default(),
    );
    let t = g.transpose_conv("t", d, 4, 2, 2);
    let mut m = g.finish(&[t]);
    // Paddings before/after of H, W, C.
    let words: [i32; 6] = [1, 0, 2, 1, 0, 0];
    m.tensors[p].data = Some(words.iter().flat_map(|v| v.to_le_bytes()).collect());
    let text = |op: usize| m.layer_spec(op).map(|s| s.to_string());
    assert_eq!(
        text(0).unwrap(),
        "op=concatenation,dtype=int8,input=1x4x5x3,input2=1x4x5x2,axis=3,output=1x4x5x5"
    );
    assert_eq!(
        text(1).unwrap(),
        "op=pad,dtype=int8,input=1x4x5x5,pad_before=0x1x2x0,pad_after=0x0x1x0,output=1x5x8x5"
    );
    assert_eq!(
        text(2).unwrap(),
        "op=transpose_conv,dtype=int8,input=1x5x8x5,filter=4x2x2x5,output=1x10x16x4,stride=2x2,padding=valid,pad=0x0"
    );
    // Paddings that are not constant, a concatenation of three inputs or
    // with a fused activation: no suite layer.
    let mut no_data = m.clone();
    no_data.tensors[p].data = None;
    assert!(no_data.layer_spec(1).is_none());
    let mut three = m.clone();
    three.ops[0].inputs.push(y);
    assert!(three.layer_spec(0).is_none());
    let mut fused = m.clone();
    fused.ops[0].options.activation = Activation::Relu;
    assert!(fused.layer_spec(0).is_none());
}

/// The vocabulary's TFLite builtin codes (`memtrace_abi::op`) are the
/// schema's: every code names, in the generated schema, the operator whose
/// TFLite name the vocabulary gives, and every kind of the schema that
/// memtrace models maps back to its kind.
#[test]
fn the_op_vocabulary_agrees_with_the_tflite_schema() {
    use crate::schema::tflite as fb;
    let mut modelled = 0;
    for kind in OpKind::ALL {
        let Some(code) = kind.builtin_code() else {
            continue;
        };
        let builtin = fb::BuiltinOperator::try_from(code).unwrap();
        // planus' variant names lose TFLite's underscores (RELU6 reads
        // back as RELU_6), so the names are compared without them.
        assert_eq!(
            tflite::builtin_name(&format!("{builtin:?}")).replace('_', ""),
            kind.tflite_name().replace('_', ""),
            "{kind:?}"
        );
        assert_eq!(OpKind::from_builtin_code(code), Some(kind));
        modelled += 1;
    }
    assert_eq!(modelled, 22);
}
