//! Layer configurations for sweeps (`memtrace validate`, `memtrace table`):
//! seeded random configurations of one op, a brace-expanded grid, and a
//! rough instruction-count model that keeps every random configuration small.
//!
//! Random configurations vary everything the O_s depends on — batch, odd and
//! non-square spatial shapes, channel counts, window shapes, strides and
//! dilations per axis (no dilation for pools: TFLM pools have none), `same`
//! and `valid` padding, depth multipliers, fully connected batch/units/depth
//! and matmul M/K/N, transpose conv output shapes across their consistent
//! range and input depths on both sides of CMSIS-NN's reverse-convolution
//! threshold (16), concatenation axes and extents, pad amounts per
//! dimension — and the activation, which must not matter. The `i`-th
//! configuration of a (seed, op, dtype) stream does not depend on how many
//! are drawn, so `--configs 10` is a prefix of `--configs 200`.

use memtrace_abi::spec::{
    Activation, Dtype, LayerSpec, LayerSpecBuilder, OpKind, Padding, SpecError,
};

/// Default cap on [`estimated_instructions`] of a random configuration.
pub const DEFAULT_BUDGET: u64 = 3_000_000;

use crate::rng::Rng;

/// A spatial extent: mostly small, sometimes 1, sometimes larger.
fn extent(rng: &mut Rng, max: u32) -> u32 {
    match rng.range(0, 9) {
        0 => rng.range(1, 3),
        1..=6 => rng.range(3, 12.min(max)),
        _ => rng.range(8.min(max), max),
    }
}

fn stride(rng: &mut Rng) -> u32 {
    rng.weighted(&[(55, 1), (35, 2), (10, 3)])
}

fn activation(rng: &mut Rng) -> Activation {
    rng.weighted(&[
        (50, Activation::None),
        (25, Activation::Relu),
        (25, Activation::Relu6),
    ])
}

/// Rough Cortex-M4 instruction count of the suite running `spec` (data
/// generation included), used only to keep random configurations small.
pub fn estimated_instructions(spec: &LayerSpec) -> u64 {
    let p = |s: &[u32]| s.iter().map(|&d| d as u64).product::<u64>();
    let out = p(&spec.output);
    let input = p(&spec.input);
    let filter = p(&spec.filter);
    let input2 = spec.input2.map_or(0, |s| p(&s));
    let fill = 15 * (input + input2 + out + filter) + 5_000;
    let window = spec.filter[1] as u64 * spec.filter[2] as u64;
    let work = match spec.op {
        OpKind::TransposeConv => out * 80 + input * window * spec.output[3] as u64 * 45,
        OpKind::Concatenation => out * 12,
        OpKind::Pad => out * 25,
        OpKind::Conv2d => out * (60 + 45 * window * spec.input[3] as u64),
        OpKind::DepthwiseConv2d => out * (60 + 45 * window),
        OpKind::MaxPool | OpKind::AveragePool => out * (60 + 30 * window),
        OpKind::FullyConnected => out * (60 + 35 * spec.filter[3] as u64),
        OpKind::Add | OpKind::Relu => out * 40,
        OpKind::Matmul => out * (20 + 35 * spec.input[3] as u64),
        // A LayerSpec holds kernel-suite ops only; costed as element-wise.
        _ => out * 40,
    };
    fill + work
}

/// Most draws [`random_config`] makes for one configuration before it gives
/// up. The default budget needs a handful; a budget below the cheapest
/// configuration of the op can never be met.
pub(crate) const MAX_DRAWS: u32 = 100_000;

/// No random configuration fitted the instruction budget.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "no random {} {} configuration fits --budget {budget} estimated instructions after {draws} draws{}; raise --budget",
    op.name(),
    dtype.spec_name(),
    cheapest.map(|c| format!(" (the cheapest drawn needs {c})")).unwrap_or_default()
)]
pub struct BudgetError {
    /// The operator drawn.
    pub op: OpKind,
    /// Its element type.
    pub dtype: Dtype,
    /// The `--budget`, in estimated instructions.
    pub budget: u64,
    /// Draws made before giving up.
    pub draws: u32,
    /// The smallest [`estimated_instructions`] among the draws.
    pub cheapest: Option<u64>,
}

/// One random configuration of `op` whose [`estimated_instructions`] is at
/// most `budget`, in at most [`MAX_DRAWS`] draws.
pub(crate) fn random_config(
    rng: &mut Rng,
    op: OpKind,
    dtype: Dtype,
    budget: u64,
) -> Result<LayerSpec, BudgetError> {
    let mut cheapest: Option<u64> = None;
    for _ in 0..MAX_DRAWS {
        if let Ok(spec) = draw(rng, op, dtype) {
            let cost = estimated_instructions(&spec);
            if cost <= budget {
                return Ok(spec);
            }
            cheapest = Some(cheapest.map_or(cost, |c| c.min(cost)));
        }
    }
    Err(BudgetError {
        op,
        dtype,
        budget,
        draws: MAX_DRAWS,
        cheapest,
    })
}

fn draw(rng: &mut Rng, op: OpKind, dtype: Dtype) -> Result<LayerSpec, SpecError> {
    let n = if rng.chance(12) { 2 } else { 1 };
    let padding = if rng.chance(50) {
        Padding::Same
    } else {
        Padding::Valid
    };
    let act = activation(rng);
    let windowed = |rng: &mut Rng, c: u32, dilate: bool| {
        let (h, w) = (extent(rng, 32), extent(rng, 32));
        let mut b = LayerSpecBuilder::new(op, dtype, [n, h, w, c])
            .stride(stride(rng), stride(rng))
            .padding(padding)
            .activation(act);
        if dilate && rng.chance(25) {
            b = b.dilation(rng.range(1, 3), rng.range(1, 3));
        }
        b
    };
    let b = match op {
        OpKind::Conv2d => {
            let c = rng.weighted(&[(30, 1), (50, 3), (20, 8)]);
            let c = rng.range(1, c);
            windowed(rng, c, true).filter([rng.range(1, 8), rng.range(1, 5), rng.range(1, 5), c])
        }
        OpKind::DepthwiseConv2d => {
            let c = rng.range(1, 12);
            let m = rng.weighted(&[(60, 1), (30, 2), (10, 3)]);
            windowed(rng, c, true).depth_multiplier(m).filter([
                1,
                rng.range(1, 5),
                rng.range(1, 5),
                c * m,
            ])
        }
        OpKind::MaxPool | OpKind::AveragePool => {
            let c = rng.range(1, 16);
            windowed(rng, c, false).filter([1, rng.range(1, 4), rng.range(1, 4), 1])
        }
        OpKind::FullyConnected => {
            let depth = rng.weighted(&[(20, 4), (50, 32), (30, 96)]);
            let depth = rng.range(1, depth);
            let units = rng.range(1, 40);
            // batches = N·H·W: mostly one row, sometimes a 4-D input
            let input = if rng.chance(25) {
                [rng.range(1, 2), rng.range(1, 2), rng.range(1, 3), depth]
            } else {
                [1, 1, rng.range(1, 6), depth]
            };
            LayerSpecBuilder::new(op, dtype, input)
                .filter([1, 1, units, depth])
                .activation(act)
        }
        OpKind::Add | OpKind::Relu => {
            let shape = [n, extent(rng, 20), extent(rng, 20), rng.range(1, 12)];
            let b = LayerSpecBuilder::new(op, dtype, shape);
            if op == OpKind::Add {
                b.activation(act)
            } else {
                b
            }
        }
        OpKind::Matmul => {
            let (m, k, nn) = (rng.range(1, 16), rng.range(1, 16), rng.range(1, 16));
            LayerSpecBuilder::new(op, dtype, [1, 1, m, k]).filter([1, 1, k, nn])
        }
        OpKind::TransposeConv => draw_transpose_conv(rng, dtype, n, padding),
        OpKind::Concatenation => {
            let shape = [n, extent(rng, 16), extent(rng, 16), rng.range(1, 12)];
            let axis = rng.range(0, 3);
            let mut in2 = shape;
            in2[axis as usize] = match axis {
                0 => rng.range(1, 2),
                3 => rng.range(1, 12),
                _ => extent(rng, 16),
            };
            LayerSpecBuilder::new(op, dtype, shape).concat(in2, axis)
        }
        OpKind::Pad => {
            let shape = [n, extent(rng, 16), extent(rng, 16), rng.range(1, 8)];
            let mut amount = |most: u32, chance: u32| {
                if rng.chance(chance) {
                    rng.range(0, most)
                } else {
                    0
                }
            };
            let before = [amount(1, 10), amount(3, 80), amount(3, 80), amount(2, 20)];
            let after = [amount(1, 10), amount(3, 80), amount(3, 80), amount(2, 20)];
            LayerSpecBuilder::new(op, dtype, shape).paddings(before, after)
        }
        // Not a kernel-suite op: the builder says so.
        _ => LayerSpecBuilder::new(op, dtype, [n, 1, 1, 1]),
    };
    b.build()
}

/// A random transpose conv: small spatial input, input depths below and
/// above CMSIS-NN's reverse-convolution threshold (more than 16 channels
/// with strides of at most 2 take its other path), and sometimes an
/// explicit output anywhere in the range that maps back to the input.
fn draw_transpose_conv(rng: &mut Rng, dtype: Dtype, n: u32, padding: Padding) -> LayerSpecBuilder {
    let c = if rng.chance(25) {
        rng.range(17, 24)
    } else {
        rng.range(1, 8)
    };
    let (h, w) = (extent(rng, 10), extent(rng, 10));
    let (kh, kw) = (rng.range(1, 4), rng.range(1, 4));
    let (sh, sw) = (stride(rng), stride(rng));
    let oc = rng.range(1, 8);
    let mut b = LayerSpecBuilder::new(OpKind::TransposeConv, dtype, [n, h, w, c])
        .filter([oc, kh, kw, c])
        .stride(sh, sw)
        .padding(padding);
    if rng.chance(30) {
        // Every output size a conv2d of this window maps back to the input.
        let mut pick = |size: u32, k: u32, s: u32| match padding {
            Padding::Same => rng.range((size - 1) * s + 1, size * s),
            Padding::Valid => rng.range((size - 1) * s + k, (size - 1) * s + k + s - 1),
        };
        let (oh, ow) = (pick(h, kh, sh), pick(w, kw, sw));
        b = b.output([n, oh, ow, oc]);
    }
    b
}

/// The random configurations of the (seed, op, dtype) stream, drawn one at
/// a time as they are asked for (take as many as needed: the stream never
/// ends by itself). It yields `Err` once, and then ends, when a configuration
/// cannot be found within the budget (`random_config`).
#[derive(Clone, Debug)]
pub struct RandomConfigs {
    rng: Rng,
    op: OpKind,
    dtype: Dtype,
    budget: u64,
    failed: bool,
}

impl Iterator for RandomConfigs {
    type Item = Result<LayerSpec, BudgetError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let next = random_config(&mut self.rng, self.op, self.dtype, self.budget);
        self.failed = next.is_err();
        Some(next)
    }
}

/// The lazy stream of random configurations of `op` and `dtype` for `seed`
/// (see [`RandomConfigs`]); its first `count` items are
/// [`try_random_configs`]`(op, dtype, count, seed, budget)`.
pub fn random_config_iter(op: OpKind, dtype: Dtype, seed: u64, budget: u64) -> RandomConfigs {
    let stream = seed
        ^ ((op.job_code().unwrap_or(0) as u64) << 40)
        ^ ((dtype.job_code().unwrap_or(0) as u64) << 48)
        ^ 0x6D65_6D74_7261_6365; // "memtrace"
    RandomConfigs {
        rng: Rng::new(stream),
        op,
        dtype,
        budget,
        failed: false,
    }
}

/// The `count` first random configurations of the (seed, op, dtype) stream,
/// or the error of the first one that does not fit `budget`.
pub fn try_random_configs(
    op: OpKind,
    dtype: Dtype,
    count: usize,
    seed: u64,
    budget: u64,
) -> Result<Vec<LayerSpec>, BudgetError> {
    random_config_iter(op, dtype, seed, budget)
        .take(count)
        .collect()
}

/// A configuration source that cannot be understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// Expands `{a,b,c}` alternatives and `{lo..hi}` integer ranges (inclusive),
/// left to right, into every combination: `input=1x{8,9}x{4..5}x3` gives four
/// texts. Text without braces is returned as is.
pub fn expand_grid(text: &str) -> Result<Vec<String>, ConfigError> {
    expand(text).map_err(ConfigError)
}

fn expand(text: &str) -> Result<Vec<String>, String> {
    let Some(open) = text.find('{') else {
        if text.contains('}') {
            return Err(format!("`{text}`: `}}` without `{{`"));
        }
        return Ok(vec![text.to_owned()]);
    };
    let close = text[open..]
        .find('}')
        .map(|c| open + c)
        .ok_or_else(|| format!("`{text}`: `{{` without `}}`"))?;
    let inner = &text[open + 1..close];
    if inner.contains('{') {
        return Err(format!("`{text}`: nested braces are not supported"));
    }
    let choices: Vec<String> = match inner.split_once("..") {
        Some((lo, hi)) if !inner.contains(',') => {
            let lo: u64 = lo
                .trim()
                .parse()
                .map_err(|_| format!("`{{{inner}}}`: not an integer range"))?;
            let hi: u64 = hi
                .trim()
                .parse()
                .map_err(|_| format!("`{{{inner}}}`: not an integer range"))?;
            if lo > hi || hi - lo > 10_000 {
                return Err(format!("`{{{inner}}}`: empty or huge range"));
            }
            (lo..=hi).map(|v| v.to_string()).collect()
        }
        _ => inner.split(',').map(|s| s.trim().to_owned()).collect(),
    };
    let rest = expand(&text[close + 1..])?;
    // Counted before anything is built: three 10 000-wide ranges are 10^12.
    if choices.len().saturating_mul(rest.len()) > MAX_GRID_CONFIGS {
        return Err(format!(
            "`{text}` expands to more than 100 000 configurations"
        ));
    }
    let mut out = Vec::with_capacity(choices.len() * rest.len());
    for c in &choices {
        for r in &rest {
            out.push(format!("{}{c}{r}", &text[..open]));
        }
    }
    Ok(out)
}

/// Most configurations one grid (a `--grid` or a line of a configs file)
/// may expand to.
pub(crate) const MAX_GRID_CONFIGS: usize = 100_000;

/// Most configurations a whole configs file (all its lines and grids
/// together) may give: each is held in memory until traced.
pub const MAX_LISTED_CONFIGS: usize = 250_000;

/// Specs of a configs file: one spec per line (grids allowed), `#` comments
/// and blank lines ignored. Errors name the line.
pub fn parse_configs_file(text: &str) -> Result<Vec<LayerSpec>, ConfigError> {
    parse_lines(text).map_err(ConfigError)
}

fn parse_lines(text: &str) -> Result<Vec<LayerSpec>, String> {
    let mut specs = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let texts = expand(line).map_err(|e| format!("line {}: {e}", i + 1))?;
        if specs.len() + texts.len() > MAX_LISTED_CONFIGS {
            return Err(format!(
                "line {}: the file expands to more than {MAX_LISTED_CONFIGS} configurations in \
                 all (split it, or sweep random configurations with --op and --configs)",
                i + 1
            ));
        }
        for t in texts {
            specs.push(LayerSpec::parse(&t).map_err(|e| format!("line {}: `{t}`: {e}", i + 1))?);
        }
    }
    Ok(specs)
}

/// A compact one-line description for tables, e.g.
/// `conv2d int8 1x9x7x3 f5x3x3x3 s2x1 d1x1 valid`.
pub fn short_text(spec: &LayerSpec) -> String {
    let shape = |s: &[u32; 4]| s.map(|d| d.to_string()).join("x");
    let mut t = format!(
        "{} {} {}",
        spec.op.name(),
        spec.dtype.spec_name(),
        shape(&spec.input)
    );
    match spec.op {
        OpKind::Conv2d | OpKind::DepthwiseConv2d | OpKind::MaxPool | OpKind::AveragePool => {
            let f = if matches!(spec.op, OpKind::MaxPool | OpKind::AveragePool) {
                format!("{}x{}", spec.filter[1], spec.filter[2])
            } else {
                shape(&spec.filter)
            };
            t += &format!(
                " f{f} s{}x{} d{}x{} {}",
                spec.stride.0,
                spec.stride.1,
                spec.dilation.0,
                spec.dilation.1,
                match spec.padding {
                    Padding::Same => "same",
                    Padding::Valid => "valid",
                }
            );
            if spec.depth_multiplier != 1 {
                t += &format!(" m{}", spec.depth_multiplier);
            }
        }
        OpKind::FullyConnected | OpKind::Matmul => t += &format!(" f{}", shape(&spec.filter)),
        OpKind::TransposeConv => {
            t += &format!(
                " f{} s{}x{} {} o{}x{}",
                shape(&spec.filter),
                spec.stride.0,
                spec.stride.1,
                match spec.padding {
                    Padding::Same => "same",
                    Padding::Valid => "valid",
                },
                spec.output[1],
                spec.output[2]
            );
        }
        OpKind::Concatenation => {
            if let (Some(in2), Some(axis)) = (spec.input2, spec.axis) {
                t += &format!(" + {} axis {axis}", shape(&in2));
            }
        }
        OpKind::Pad => {
            if let Some(p) = spec.paddings {
                t += &format!(" pad {} {}", shape(&p.before), shape(&p.after));
            }
        }
        OpKind::Add | OpKind::Relu => {}
        // A LayerSpec holds kernel-suite ops only.
        _ => {}
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `count` first random configurations of the (seed, op, dtype)
    /// stream; panics when no configuration fits `budget`.
    fn random_configs(
        op: OpKind,
        dtype: Dtype,
        count: usize,
        seed: u64,
        budget: u64,
    ) -> Vec<LayerSpec> {
        try_random_configs(op, dtype, count, seed, budget).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn random_configs_are_valid_small_and_prefix_stable() {
        for op in OpKind::SUITE {
            for dtype in [Dtype::Float32, Dtype::Int8] {
                let a = random_configs(op, dtype, 300, 7, DEFAULT_BUDGET);
                let b = random_configs(op, dtype, 20, 7, DEFAULT_BUDGET);
                assert_eq!(&a[..20], &b[..]);
                assert!(a.iter().all(|s| s.op == op && s.dtype == dtype));
                assert!(a
                    .iter()
                    .all(|s| estimated_instructions(s) <= DEFAULT_BUDGET));
                assert!(a
                    .iter()
                    .all(|s| LayerSpec::parse(&s.to_string()).as_ref() == Ok(s)));
                let distinct: std::collections::HashSet<_> = a.iter().collect();
                assert!(distinct.len() > 150, "{op:?} {dtype:?}: {}", distinct.len());
                if matches!(
                    op,
                    OpKind::Conv2d
                        | OpKind::DepthwiseConv2d
                        | OpKind::MaxPool
                        | OpKind::AveragePool
                ) {
                    assert!(a.iter().any(|s| s.stride.0 != s.stride.1));
                    assert!(a.iter().any(|s| s.input[1] != s.input[2]));
                    assert!(a.iter().any(|s| s.padding == Padding::Valid));
                    assert!(a.iter().any(|s| s.input[0] == 2));
                    let dilated = a.iter().any(|s| s.dilation != (1, 1));
                    assert_eq!(dilated, op != OpKind::MaxPool && op != OpKind::AveragePool);
                }
                if op == OpKind::DepthwiseConv2d {
                    assert!(a.iter().any(|s| s.depth_multiplier > 1));
                }
            }
        }
        assert_ne!(
            random_configs(OpKind::Conv2d, Dtype::Float32, 5, 1, DEFAULT_BUDGET),
            random_configs(OpKind::Conv2d, Dtype::Float32, 5, 2, DEFAULT_BUDGET)
        );
    }

    /// The eager generator as it was before the draws were bounded and the
    /// stream made lazy (kept verbatim, loop and all, as the reference).
    fn old_random_configs(
        op: OpKind,
        dtype: Dtype,
        count: usize,
        seed: u64,
        budget: u64,
    ) -> Vec<LayerSpec> {
        fn old_random_config(rng: &mut Rng, op: OpKind, dtype: Dtype, budget: u64) -> LayerSpec {
            loop {
                if let Ok(spec) = draw(rng, op, dtype) {
                    if estimated_instructions(&spec) <= budget {
                        return spec;
                    }
                }
            }
        }
        let stream = seed
            ^ ((op.job_code().unwrap_or(0) as u64) << 40)
            ^ ((dtype.job_code().unwrap_or(0) as u64) << 48)
            ^ 0x6D65_6D74_7261_6365; // "memtrace"
        let mut rng = Rng::new(stream);
        (0..count)
            .map(|_| old_random_config(&mut rng, op, dtype, budget))
            .collect()
    }

    #[test]
    fn the_lazy_stream_gives_the_old_configurations_in_the_old_order() {
        for op in OpKind::SUITE {
            for dtype in [Dtype::Float32, Dtype::Int8] {
                for (seed, budget) in [(1, DEFAULT_BUDGET), (7, DEFAULT_BUDGET), (99, 200_000)] {
                    let old = old_random_configs(op, dtype, 200, seed, budget);
                    let lazy: Vec<LayerSpec> = random_config_iter(op, dtype, seed, budget)
                        .take(200)
                        .collect::<Result<_, _>>()
                        .unwrap();
                    assert_eq!(lazy, old, "{op:?} {dtype:?} seed {seed}");
                    assert_eq!(
                        try_random_configs(op, dtype, 200, seed, budget).unwrap(),
                        old
                    );
                    assert_eq!(random_configs(op, dtype, 200, seed, budget), old);
                }
            }
        }
        // Lazy: the stream holds one generator state, however far it goes.
        assert!(std::mem::size_of::<RandomConfigs>() <= 64);
        let mut it = random_config_iter(OpKind::Relu, Dtype::Float32, 3, DEFAULT_BUDGET);
        let far = it.nth(4_999).unwrap().unwrap();
        let eager = old_random_configs(OpKind::Relu, Dtype::Float32, 5_000, 3, DEFAULT_BUDGET);
        assert_eq!(far, eager[4_999]);
    }

    #[test]
    fn a_budget_no_configuration_fits_is_an_error_not_a_hang() {
        // The cheapest configuration of any op (all extents 1) costs more
        // than 5000 estimated instructions: nothing can fit 5000.
        let one = |op: OpKind| {
            let b = LayerSpecBuilder::new(op, Dtype::Float32, [1, 1, 1, 1]);
            match op {
                OpKind::Add | OpKind::Relu => b,
                OpKind::Concatenation => b.concat([1, 1, 1, 1], 3),
                OpKind::Pad => b.paddings([0; 4], [0; 4]),
                _ => b.filter([1, 1, 1, 1]),
            }
            .build()
            .unwrap()
        };
        for op in OpKind::SUITE {
            let floor = estimated_instructions(&one(op));
            assert!(floor > 5_000, "{op:?}: {floor}");
            let started = std::time::Instant::now();
            let e = try_random_configs(op, Dtype::Int8, 3, 1, 5_000).unwrap_err();
            assert!(
                started.elapsed().as_secs() < 10,
                "{op:?}: {:?}",
                started.elapsed()
            );
            assert_eq!((e.op, e.budget, e.draws), (op, 5_000, MAX_DRAWS));
            assert!(e.cheapest.unwrap() >= floor, "{op:?}: {e}");
            let text = e.to_string();
            assert!(
                text.contains(op.name()) && text.contains("--budget 5000"),
                "{text}"
            );
            // The stream reports it once, then ends.
            let mut it = random_config_iter(op, Dtype::Int8, 1, 5_000);
            assert!(matches!(it.next(), Some(Err(_))));
            assert!(it.next().is_none());
        }
        // Just above the floor is feasible, and every config found is cheap.
        let relu_floor = estimated_instructions(&one(OpKind::Relu));
        let cheap = try_random_configs(OpKind::Relu, Dtype::Float32, 3, 1, relu_floor * 4).unwrap();
        assert!(cheap
            .iter()
            .all(|s| estimated_instructions(s) <= relu_floor * 4));
    }

    #[test]
    fn grids_expand_left_to_right() {
        assert_eq!(
            expand_grid("a{1,2}b{3..4}").unwrap(),
            vec!["a1b3", "a1b4", "a2b3", "a2b4"]
        );
        assert_eq!(expand_grid("plain").unwrap(), vec!["plain"]);
        assert!(expand_grid("a{1,2").is_err());
        assert!(expand_grid("a{x..2}").is_err());
        let specs = parse_configs_file(
            "# comment\nop=relu,input=1x{2,3}x4x1\n\nop=max_pool,input=1x8x8x2,filter=2x2 # trailing\n",
        )
        .unwrap();
        assert_eq!(specs.len(), 3);
        let e = parse_configs_file("op=relu,input=1x2\nop=conv9,input=1").unwrap_err();
        assert!(e.0.starts_with("line 2:"), "{e}");
    }

    #[test]
    fn short_text_names_the_geometry() {
        let s = LayerSpec::parse(
            "op=depthwise_conv2d,dtype=int8,input=1x9x7x3,filter=1x3x3x6,depth_multiplier=2,stride=2x1,padding=valid",
        )
        .unwrap();
        assert_eq!(
            short_text(&s),
            "depthwise_conv2d int8 1x9x7x3 f1x3x3x6 s2x1 d1x1 valid m2"
        );
    }
}
