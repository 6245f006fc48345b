//! Every O_s reading of some well-known layers, one Markdown row per layer
//! and dtype: the layer, algorithmic (the monotone O_s of the reference loop
//! nest), the paper's equations as printed, the printed equations with
//! eq. 11's minimum in whole elements (the Table I / II reading), the safe
//! analytic value, the best of the safe lines, and the output size — all in
//! bytes (docs/overlap.md §7–8).
//!
//! ```text
//! cargo run --release -p memtrace-overlap --example analytic_readings
//! ```

use memtrace_abi::spec::LayerSpec;
use memtrace_overlap::algorithmic::algorithmic_overlap;
use memtrace_overlap::analytic::{
    analytic_overlap, analytic_overlap_as_printed, analytic_overlap_best,
    analytic_overlap_table_reading,
};

/// The layers, without their dtype (each is read as f32 and as int8).
const LAYERS: [&str; 12] = [
    "op=depthwise_conv2d,input=1x112x112x96,filter=1x3x3x96,stride=2,padding=same",
    "op=depthwise_conv2d,input=1x112x112x32,filter=1x3x3x32,stride=1,padding=same",
    "op=depthwise_conv2d,input=1x56x56x144,filter=1x3x3x144,stride=2,padding=same",
    "op=depthwise_conv2d,input=1x16x16x8,filter=1x3x3x16,depth_multiplier=2,stride=1,padding=same",
    "op=conv2d,input=1x224x224x3,filter=32x3x3x3,stride=2,padding=same",
    "op=conv2d,input=1x112x112x32,filter=64x1x1x32,stride=1,padding=same",
    "op=conv2d,input=1x56x56x144,filter=24x1x1x144,stride=1,padding=same",
    "op=conv2d,input=1x56x56x64,filter=128x1x1x64,stride=2,padding=same",
    "op=max_pool,input=1x112x112x64,filter=3x3,stride=2,padding=same",
    "op=max_pool,input=1x224x224x32,filter=3x3,stride=2,padding=same",
    "op=average_pool,input=1x7x7x1024,filter=7x7,stride=1,padding=valid",
    "op=fully_connected,input=1x1x1x1024,filter=1x1x1000x1024",
];

fn main() {
    for text in LAYERS {
        for dt in ["f32", "int8"] {
            let s = LayerSpec::parse(&format!("{text},dtype={dt}")).expect("a valid layer");
            println!(
                "| {s} | {} | {} | {} | {} | {} | {} |",
                algorithmic_overlap(&s).expect("a modelled op"),
                analytic_overlap_as_printed(&s).map_or("-".into(), |v| v.to_string()),
                analytic_overlap_table_reading(&s).map_or("-".into(), |v| v.to_string()),
                analytic_overlap(&s).expect("a modelled op"),
                analytic_overlap_best(&s).expect("a modelled op"),
                s.output_bytes()
            );
        }
    }
}
