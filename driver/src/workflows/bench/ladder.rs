//! The O_s cost ladder (`memtrace bench --ladder`): the cost ladder of the three O_s methods (DMO
//! §III: bottom-up trace ≫ algorithmic ≫ analytic), measured in one run on
//! one layer (by default Table I's), plus the throughput of `validate`.

use std::hint::black_box;
use std::io::Write;
use std::time::Instant;

use memtrace_abi::spec::{Dtype, OpKind};
use memtrace_abi::LayerSpec;
use memtrace_overlap::algorithmic::algorithmic_overlap;
use memtrace_overlap::analytic::{analytic_overlap, analytic_overlap_as_printed};
use memtrace_overlap::configs::{try_random_configs, DEFAULT_BUDGET};
use memtrace_tracer::ElfImage;

use crate::support::common::show;
use crate::support::error::Result;
use crate::workflows::sweep::{config_names, Depth, Sweep};
use crate::{bail, failed};

/// The Table I layer: MobileNet v2's second depthwise convolution.
pub const TABLE_ONE: &str =
    "op=depthwise_conv2d,dtype=f32,input=1x112x112x96,filter=1x3x3x96,stride=2,padding=same";

/// Measures the ladder on `layer` and `validate`'s throughput with
/// `configs_per_op` random configurations per (op, dtype), on `elf`.
pub fn ladder(
    elf: &std::path::Path,
    layer: &str,
    configs_per_op: usize,
    out: &mut impl Write,
) -> Result<()> {
    let spec = LayerSpec::parse(layer).map_err(|e| failed!("bad --ladder-job: {e}"))?;
    let image = ElfImage::load(elf)?;
    writeln!(
        out,
        "memtrace bench --ladder — {} on {}",
        spec,
        image.arch.name()
    )?;

    let n = 1_000_000u32;
    let t0 = Instant::now();
    let mut acc = 0u64;
    for _ in 0..n {
        acc = acc.wrapping_add(analytic_overlap(black_box(&spec)).unwrap_or(0));
    }
    let analytic_ns = t0.elapsed().as_nanos() as f64 / n as f64;
    let t0 = Instant::now();
    for _ in 0..n {
        acc = acc.wrapping_add(analytic_overlap_as_printed(black_box(&spec)).unwrap_or(0) as u64);
    }
    let printed_ns = t0.elapsed().as_nanos() as f64 / n as f64;

    let reps = 20;
    let t0 = Instant::now();
    let mut algorithmic = None;
    for _ in 0..reps {
        algorithmic = algorithmic_overlap(black_box(&spec));
    }
    let algorithmic_ms = t0.elapsed().as_secs_f64() * 1e3 / reps as f64;

    let t0 = Instant::now();
    let rows = Sweep {
        image: &image,
        depth: Depth::Overlap,
        seed: 1,
        threads: 1,
        max_instructions: 20_000_000_000,
    }
    .specs(std::slice::from_ref(&spec), &config_names(1));
    let traced_s = t0.elapsed().as_secs_f64();
    let row = &rows[0];
    if let Some(e) = &row.error {
        bail!("tracing {spec}: {e}");
    }
    writeln!(out, "\n[ladder] one layer, O_s by each method")?;
    writeln!(
        out,
        "  analytic (safe reading)  {analytic_ns:>12.1} ns   O_s {} B",
        show(analytic_overlap(&spec))
    )?;
    writeln!(
        out,
        "  analytic (as printed)    {printed_ns:>12.1} ns   O_s {} B",
        analytic_overlap_as_printed(&spec).map_or_else(|| "-".into(), |v| v.to_string())
    )?;
    writeln!(
        out,
        "  algorithmic              {algorithmic_ms:>12.3} ms   O_s {} B",
        show(algorithmic)
    )?;
    writeln!(
        out,
        "  traced (bottom-up)       {traced_s:>12.3} s    monotone {} B, exact {} B; {} instructions, {} events",
        show(row.monotone_bytes),
        show(row.exact_bytes),
        row.instructions,
        row.events
    )?;
    writeln!(
        out,
        "  ratios                   algorithmic/analytic {:.0} x, traced/algorithmic {:.0} x",
        algorithmic_ms * 1e6 / analytic_ns,
        traced_s * 1e3 / algorithmic_ms
    )?;

    // validate throughput: random configurations of every op, f32 and int8
    let mut specs = Vec::new();
    for op in OpKind::SUITE {
        for dtype in [Dtype::Float32, Dtype::Int8] {
            specs.extend(try_random_configs(
                op,
                dtype,
                configs_per_op,
                1,
                DEFAULT_BUDGET,
            )?);
        }
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let t0 = Instant::now();
    let rows = Sweep {
        image: &image,
        depth: Depth::Overlap,
        seed: 1,
        threads,
        max_instructions: 2_000_000_000,
    }
    .specs(&specs, &config_names(specs.len()));
    let secs = t0.elapsed().as_secs_f64();
    let instructions: u64 = rows.iter().map(|r| r.instructions).sum();
    let bad = rows
        .iter()
        .filter(|r| !r.flags.is_empty() || r.error.is_some())
        .count();
    writeln!(
        out,
        "\n[validate] {} random configs (all ops, f32 + int8), {threads} threads",
        specs.len()
    )?;
    writeln!(
        out,
        "  {:.2} s, {:.1} configs/s, {:.1} M traced layer instructions/s, {bad} violations or errors ({acc:x})",
        secs,
        specs.len() as f64 / secs,
        instructions as f64 / secs / 1e6
    )?;
    Ok(())
}
