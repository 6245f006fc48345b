//! The guest prints each layer's parameters itself (`harness-c/suite/spec_text.cc`)
//! and the host prints the same layer with `LayerSpec`'s `Display`: the two
//! texts must be identical, byte for byte, or reports, baselines and plan
//! look-ups that key on the text would silently miss. Checked on every op ×
//! dtype of the kernel suite, with every optional field exercised somewhere.

mod common;

use common::{guest, trace_messages};
use memtrace_abi::{LayerSpec, Message};
use memtrace_tracer::{ElfImage, Job, TraceOptions};

/// Layers whose texts cover every field the canonical form can print.
const SPECS: &[&str] = &[
    "op=conv2d,dtype=f32,input=1x9x7x3,filter=4x3x3x3,stride=2,padding=same",
    "op=conv2d,dtype=int8,input=1x8x8x4,filter=2x3x3x4,stride=1x2,dilation=2,padding=valid,activation=relu6",
    "op=depthwise_conv2d,dtype=int8,input=1x10x10x2,filter=1x3x3x4,depth_multiplier=2,stride=2,padding=same",
    "op=depthwise_conv2d,dtype=f32,input=1x6x6x3,filter=1x3x3x3,padding=valid,activation=relu",
    "op=max_pool,dtype=f32,input=1x7x8x3,filter=3x3,stride=2,padding=valid",
    "op=average_pool,dtype=int8,input=1x8x8x5,filter=2x2,stride=2,padding=same",
    "op=fully_connected,dtype=int8,input=1x32,filter=10x32",
    "op=add,dtype=f32,input=1x4x4x3",
    "op=relu,dtype=int8,input=1x5x5x2",
    "op=matmul,dtype=f32,input=4x6,filter=6x3",
    "op=transpose_conv,dtype=int8,input=1x4x5x3,filter=2x3x3x3,stride=2,padding=same",
    "op=transpose_conv,dtype=f32,input=2x3x3x2,filter=3x2x2x2,output=2x7x7x3,stride=2x2,padding=valid",
    "op=concatenation,dtype=f32,input=1x3x4x2,input2=1x3x4x5,axis=3",
    "op=concatenation,dtype=int8,input=2x3x4x2,input2=1x3x4x2,axis=0",
    "op=pad,dtype=int8,input=1x4x4x3,pad_before=0x1x2x0,pad_after=0x2x1x1",
];

#[test]
fn the_guests_params_text_is_the_hosts_display_of_the_same_layer() {
    let image = ElfImage::load(&guest("cortex-m4", "suite.elf")).unwrap();
    for text in SPECS {
        let spec = LayerSpec::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        let options = TraceOptions {
            job: Some(Job {
                spec: spec.clone(),
                seed: 1,
            }),
            ..TraceOptions::default()
        };
        let (_, messages) = trace_messages(&image, options);
        let params: Vec<&str> = messages
            .iter()
            .filter_map(|m| match m {
                Message::LayerBegin(l) => Some(l.params.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(params, [spec.to_string().as_str()], "{text}");
    }
}
