//! The campaign's seeds: harness ELFs, `.tflite` models (the tfmicro
//! crate's and zoo exports), canonical and hand-written spec texts.

use crate::common;
use memtrace_abi::spec::{Dtype, OpKind};
use memtrace_model::export::{materialize, to_tflite};
use memtrace_model::zoo;
use memtrace_overlap::configs::try_random_configs;

/// Named binary seeds: the harness ELFs.
pub(crate) fn elf_seeds() -> Vec<(String, Vec<u8>)> {
    let mut v = Vec::new();
    for target in ["cortex-m4", "x86_64"] {
        for name in ["suite", "suite-cmsis", "bad-protocol"] {
            let path = common::guest(target, name);
            v.push((
                format!("elf:{target}/{name}.elf"),
                std::fs::read(path).unwrap(),
            ));
        }
    }
    v
}

/// ELF header, program headers and section headers: where sizes live.
pub(crate) fn elf_hot(b: &[u8]) -> Vec<(usize, usize)> {
    let rd = |at: usize, n: usize| {
        (0..n).rev().fold(0usize, |v, i| {
            (v << 8) | *b.get(at + i).unwrap_or(&0) as usize
        })
    };
    let (ph, phe, phn, sh, she, shn) = if b.get(4) == Some(&2) {
        (
            rd(0x20, 8),
            rd(0x36, 2),
            rd(0x38, 2),
            rd(0x28, 8),
            rd(0x3a, 2),
            rd(0x3c, 2),
        )
    } else {
        (
            rd(0x1c, 4),
            rd(0x2a, 2),
            rd(0x2c, 2),
            rd(0x20, 4),
            rd(0x2e, 2),
            rd(0x30, 2),
        )
    };
    vec![(0, 64), (ph, ph + phe * phn), (sh, sh + she * shn)]
}

/// Named `.tflite` seeds: tfmicro's small models and zoo exports.
pub(crate) fn tflite_seeds() -> Vec<(String, Vec<u8>)> {
    let mut v = Vec::new();
    for name in ["hello_world", "micro_speech", "magic_wand"] {
        v.push((
            format!("tflite:{name}"),
            std::fs::read(common::tfmicro_model(name)).unwrap(),
        ));
    }
    let sakr = materialize(&zoo::build("sakr_cifar10").unwrap(), 1);
    v.push(("tflite:zoo:sakr_cifar10".into(), to_tflite(&sakr).unwrap()));
    v
}

pub(crate) fn seed_bytes<'a>(seeds: &'a [(String, Vec<u8>)], name: &str) -> Option<&'a [u8]> {
    seeds
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, b)| b.as_slice())
}

/// Canonical and hand-written spec texts.
pub(crate) fn spec_seeds() -> Vec<String> {
    let mut v: Vec<String> = vec![
        common::TABLE_ONE.into(),
        "op=conv2d,dtype=int8,input=1x9x7x3,filter=5x3x3x3,stride=2x1,padding=valid,activation=relu6"
            .into(),
        "op=depthwise_conv2d,input=1x5x5x2,filter=1x3x3x4".into(),
        "op=max_pool,input=1x8x8x4,filter=3x3".into(),
        "op=matmul,dtype=f32,input=16x12,filter=12x16".into(),
        "op=fully_connected,input=1x1x3x32,filter=10x32".into(),
        "op=relu,dtype=f32,input=1x16x16x8".into(),
        "op=add,input=2x3x4x5,activation=relu".into(),
    ];
    for op in OpKind::SUITE {
        for dtype in [Dtype::Float32, Dtype::Int8] {
            if let Ok(c) = try_random_configs(op, dtype, 2, 5, 3_000_000) {
                v.extend(c.iter().map(|s| s.to_string()));
            }
        }
    }
    v
}
