//! What each O_s method costs on the Table I layer (MobileNet v2's second
//! depthwise convolution): the safe analytic value and the best of the safe
//! lines per call, Algorithm 2 per layer, and the minR / maxW curves of 1000
//! points per layer. `memtrace bench --ladder` measures the traced method
//! beside them.
//!
//! ```text
//! cargo run --release -p memtrace-overlap --example method_timing
//! ```

use std::hint::black_box;
use std::time::Instant;

use memtrace_abi::spec::LayerSpec;
use memtrace_overlap::algorithmic::{algorithmic_curves, algorithmic_overlap};
use memtrace_overlap::analytic::{analytic_overlap, analytic_overlap_best};

/// Table I: MobileNet v2 1.0 224's second depthwise convolution.
const TABLE_ONE: &str =
    "op=depthwise_conv2d,dtype=f32,input=1x112x112x96,filter=1x3x3x96,stride=2,padding=same";

fn main() {
    let s = LayerSpec::parse(TABLE_ONE).expect("a valid layer");
    let n = 200_000;
    let t0 = Instant::now();
    let mut acc = 0u64;
    for _ in 0..n {
        acc = acc.wrapping_add(analytic_overlap(black_box(&s)).expect("a modelled op"));
    }
    let per = t0.elapsed().as_nanos() as f64 / n as f64;
    let t0 = Instant::now();
    for _ in 0..n {
        acc = acc.wrapping_add(analytic_overlap_best(black_box(&s)).expect("a modelled op"));
    }
    let per_best = t0.elapsed().as_nanos() as f64 / n as f64;
    let reps = 50;
    let t0 = Instant::now();
    for _ in 0..reps {
        acc = acc.wrapping_add(algorithmic_overlap(black_box(&s)).expect("a modelled op"));
    }
    let ms = t0.elapsed().as_secs_f64() * 1e3 / reps as f64;
    let t0 = Instant::now();
    for _ in 0..reps {
        let c = algorithmic_curves(&s, 1000).expect("a modelled op");
        acc = acc.wrapping_add(c.overlap);
    }
    let ms_curves = t0.elapsed().as_secs_f64() * 1e3 / reps as f64;
    println!(
        "analytic {per:.0} ns/layer, analytic_best {per_best:.0} ns/layer, algorithmic {ms:.3} ms, curves(1000) {ms_curves:.3} ms on Table I ({acc})"
    );
}
