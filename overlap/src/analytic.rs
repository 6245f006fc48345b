//! Analytic safe overlap O_s (DMO paper, Section III-D, equations 1–15).
//!
//! Closed-form lower bounds of the monotone O_s (see [`super::algorithmic`]),
//! in bytes, with `T_s` = the element size of the layer's dtype.
//!
//! Two readings of the paper's windowed-op equations are provided:
//!
//! * [`analytic_overlap_as_printed`] — equations 5–15 exactly as printed:
//!   padding from eqs. 5/6 (which can be negative for `valid` padding, where
//!   TFLite uses 0), the line `minR(i) >= a·i + b` from eqs. 7/8 (depthwise),
//!   12/13 (conv) or 14/15 (pools), combined by eq. 11 with `i_c` = the total
//!   number of steps, evaluated in exact rational arithmetic and rounded down to
//!   whole bytes. It reproduces Table I (1 193 376 B). It is **not** a safe bound
//!   for every configuration: the tests keep concrete counter-examples.
//! * [`analytic_overlap`] — the safe reading used by memtrace. It keeps the
//!   printed equations where they are valid, so it still gives 1 193 376 B for
//!   Table I, and corrects them where they are not: TFLite's padding (what the
//!   kernel uses), `b = min(b_printed, b_derived)` where `b_derived` is the
//!   largest intercept for which the line provably bounds every read of the
//!   TFLM loop nest, a batch term, and the cap `O_s <= IB`.
//!
//! [`analytic_overlap_best`] additionally tries lines of other slopes (each
//! provably valid) and keeps the best; it is exact on Table I.
//!
//! [`analytic_overlap_table_reading`] is the printed form with eq. 11's minimum
//! rounded down to whole elements before multiplying by `T_s`; it reproduces
//! both Table I and Table II row 2 (see `docs/overlap.md` §7–8).
//!
//! Element-wise ops (`relu`, `add`): O_s = OB. `fully_connected`: an exact
//! closed form derived here (`fully_connected_overlap`). `matmul`: 0.
//! `concatenation` (each input), `pad` and int8 `transpose_conv`: IB; float
//! `transpose_conv`: the offset of its first input read
//! (`transpose_conv_overlap`) — all exact, derived in docs/overlap.md §6.
//!
//! Two examples print what these readings give and cost:
//! `cargo run --release -p memtrace-overlap --example analytic_readings`
//! (every reading, with the algorithmic value, for well-known layers) and
//! `--example method_timing` (each method's time on the Table I layer).

use std::cmp::Ordering;
use std::fmt;
use std::ops::{Add, Div, Mul, Sub};

use memtrace_abi::spec::{LayerSpec, OpKind};

use super::algorithmic::Geometry;

/// An exact rational number `num / den` with `den > 0`, in lowest terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ratio {
    /// Numerator.
    pub num: i128,
    /// Denominator, always positive.
    pub den: i128,
}

fn gcd(mut a: i128, mut b: i128) -> i128 {
    a = a.abs();
    b = b.abs();
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl Ratio {
    /// `num / den`; panics on a zero denominator (callers never pass one).
    pub(crate) fn new(num: i128, den: i128) -> Ratio {
        assert!(den != 0, "zero denominator");
        let s = if den < 0 { -1 } else { 1 };
        let g = gcd(num, den).max(1);
        Ratio {
            num: s * num / g,
            den: s * den / g,
        }
    }
    /// The integer `v` as a ratio.
    pub(crate) fn int(v: i128) -> Ratio {
        Ratio { num: v, den: 1 }
    }
    /// Largest integer `<=` self.
    pub(crate) fn floor(self) -> i128 {
        self.num.div_euclid(self.den)
    }
    /// The value as an `f64` (rounded; for plots).
    pub fn to_f64(self) -> f64 {
        self.num as f64 / self.den as f64
    }
}

impl Add for Ratio {
    type Output = Ratio;
    fn add(self, o: Ratio) -> Ratio {
        Ratio::new(self.num * o.den + o.num * self.den, self.den * o.den)
    }
}
impl Sub for Ratio {
    type Output = Ratio;
    fn sub(self, o: Ratio) -> Ratio {
        Ratio::new(self.num * o.den - o.num * self.den, self.den * o.den)
    }
}
impl Mul for Ratio {
    type Output = Ratio;
    fn mul(self, o: Ratio) -> Ratio {
        Ratio::new(self.num * o.num, self.den * o.den)
    }
}
impl Div for Ratio {
    type Output = Ratio;
    /// Panics on division by zero (slopes are always positive here).
    fn div(self, o: Ratio) -> Ratio {
        Ratio::new(self.num * o.den, self.den * o.num)
    }
}

impl Ord for Ratio {
    fn cmp(&self, o: &Ratio) -> Ordering {
        (self.num * o.den).cmp(&(o.num * self.den))
    }
}
impl PartialOrd for Ratio {
    fn partial_cmp(&self, o: &Ratio) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl fmt::Display for Ratio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.den == 1 {
            write!(f, "{}", self.num)
        } else {
            write!(f, "{}/{}", self.num, self.den)
        }
    }
}

/// The linear read bound `minR(i) >= a·i + b` (in elements, `i` = step index).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Line {
    /// Slope, in input elements per step.
    pub a: Ratio,
    /// Intercept, in input elements.
    pub b: Ratio,
}

/// Eqs. (5)/(6): `P = floor((O·S − S + K·D − D − I + 1) / 2)` for one axis,
/// exactly as printed. For `same` padding this is TFLite's before-padding; for
/// `valid` padding with a remainder it is negative where TFLite uses 0.
pub(crate) fn eq5_6_padding(
    output: i64,
    stride: i64,
    kernel: i64,
    dilation: i64,
    input: i64,
) -> i64 {
    (output * stride - stride + kernel * dilation - dilation - input + 1).div_euclid(2)
}

/// Eqs. (7)/(8), reference depthwise convolution, as printed:
/// `a = S_h·I_w / (O_w·K_c)`, `b = (O_w·S_w − P_h·I_w − S_h·I_w − S_w − P_w + 1)·I_d`.
pub(crate) fn eq7_8_depthwise(g: &Geometry, ph: i64, pw: i64) -> Line {
    let a = Ratio::new((g.sh * g.iw) as i128, (g.ow * g.mult) as i128);
    let b = (g.ow * g.sw - ph * g.iw - g.sh * g.iw - g.sw - pw + 1) * g.id;
    Line {
        a,
        b: Ratio::int(b as i128),
    }
}

/// Eqs. (12)/(13), reference 2-D convolution, as printed:
/// `a = S_h·I_w·I_d / (O_w·O_d)`, `b = (O_w·S_w − P_h·I_w − S_h·I_w − S_w − P_w)·I_d + 1`.
pub(crate) fn eq12_13_conv(g: &Geometry, ph: i64, pw: i64) -> Line {
    let a = Ratio::new((g.sh * g.iw * g.id) as i128, (g.ow * g.od) as i128);
    let b = (g.ow * g.sw - ph * g.iw - g.sh * g.iw - g.sw - pw) * g.id + 1;
    Line {
        a,
        b: Ratio::int(b as i128),
    }
}

/// Eqs. (14)/(15), reference pooling (all types), as printed:
/// `a = S_h·I_w / O_w`, `b = (O_w·S_w − P_h·I_w − S_h·I_w − S_w − P_w)·I_d + 1`.
pub(crate) fn eq14_15_pool(g: &Geometry, ph: i64, pw: i64) -> Line {
    let a = Ratio::new((g.sh * g.iw) as i128, g.ow as i128);
    let b = (g.ow * g.sw - ph * g.iw - g.sh * g.iw - g.sw - pw) * g.id + 1;
    Line {
        a,
        b: Ratio::int(b as i128),
    }
}

/// The minimum of eq. (11): `min{ b/a, a·i_c + b − i_c }` (elements).
///
/// This is a lower bound of `min_{0 <= i <= i_c} (max(0, a·i + b) − i)` for any
/// `a > 0` and any sign of `b` (for `b <= 0` the two terms are the corners of
/// the truncated line, Fig. 7 cases A and B; for `b > 0` and `a >= 1`, `b/a <=
/// b`; for `b > 0` and `a < 1` the second term is the minimum).
pub(crate) fn eq11_min_term(line: &Line, ic: i128) -> Ratio {
    let t1 = line.b.div(line.a);
    let t2 = line.a.mul(Ratio::int(ic)).add(line.b).sub(Ratio::int(ic));
    t1.min(t2)
}

/// Eqs. (1)/(11): `O_s = OB_s + min{…}·T_s` (bytes, exact rational).
pub(crate) fn eq1_11_overlap(output_bytes: u64, elem_size: u64, min_term: Ratio) -> Ratio {
    Ratio::int(output_bytes as i128).add(min_term.mul(Ratio::int(elem_size as i128)))
}

/// Which printed equation set an op uses.
fn printed_line(op: OpKind, g: &Geometry, ph: i64, pw: i64) -> Option<Line> {
    match op {
        OpKind::DepthwiseConv2d => Some(eq7_8_depthwise(g, ph, pw)),
        OpKind::Conv2d => Some(eq12_13_conv(g, ph, pw)),
        OpKind::MaxPool | OpKind::AveragePool => Some(eq14_15_pool(g, ph, pw)),
        _ => None,
    }
}

/// Padding (P_h, P_w) of eqs. (5)/(6) as printed.
pub(crate) fn printed_padding(spec: &LayerSpec) -> (i64, i64) {
    let g = Geometry::of(spec);
    (
        eq5_6_padding(g.oh, g.sh, g.kh, g.dh, g.ih),
        eq5_6_padding(g.ow, g.sw, g.kw, g.dw, g.iw),
    )
}

fn printed_min_term(spec: &LayerSpec) -> Option<Ratio> {
    let g = Geometry::of(spec);
    let (ph, pw) = printed_padding(spec);
    let line = printed_line(spec.op, &g, ph, pw)?;
    // i_c: the total number of iterations (steps), batches included.
    let ic = (g.n * g.oh * g.ow * g.od) as i128;
    Some(eq11_min_term(&line, ic))
}

/// The paper's equations exactly as printed (see the module docs), rounded
/// down to whole bytes. Element-wise ops give OB and `matmul` 0 (Section III-A);
/// `fully_connected` has no printed equation (`None`).
pub fn analytic_overlap_as_printed(spec: &LayerSpec) -> Option<i64> {
    match spec.op {
        OpKind::Relu | OpKind::Add => Some(spec.output_bytes() as i64),
        OpKind::Matmul => Some(0),
        OpKind::FullyConnected => None,
        _ => {
            let term = printed_min_term(spec)?;
            Some(eq1_11_overlap(spec.output_bytes(), spec.dtype.size(), term).floor() as i64)
        }
    }
}

/// The printed equations with eq. (11)'s minimum rounded down to whole
/// elements (`floor(min{b/a, …})`) before multiplying by `T_s`: the reading that
/// reproduces both Table I and Table II row 2. Not a safe bound in general.
pub fn analytic_overlap_table_reading(spec: &LayerSpec) -> Option<i64> {
    match spec.op {
        OpKind::Conv2d | OpKind::DepthwiseConv2d | OpKind::MaxPool | OpKind::AveragePool => {
            let term = Ratio::int(printed_min_term(spec)?.floor());
            Some(eq1_11_overlap(spec.output_bytes(), spec.dtype.size(), term).floor() as i64)
        }
        _ => analytic_overlap_as_printed(spec),
    }
}

/// The largest intercept `b` such that `α·j + b` lower-bounds the minimum
/// input element read by every step `j` of one batch of the TFLM loop nest
/// (conv2d, depthwise_conv2d, pools), for any slope `α > 0`, with the kernel's
/// (TFLite) padding.
///
/// Step `j = (y·O_w + x)·Q + q` (`Q = O_d` steps per output pixel) reads its
/// first in-bounds tap at row `>= y·S_h − P_h` and column `>= x·S_w − P_w`, so
/// every read is at least
/// `L(j) = ((y·S_h − P_h)·I_w + x·S_w − P_w)·I_d + ch(q)`, with `ch(q)` = 0
/// (conv: in_channel 0 comes first), `q / K_c` (depthwise: channel `ic`),
/// `q` (pools). Then
///
/// ```text
/// L(j) − α·j = −P_h·I_w·I_d − P_w·I_d + y·(S_h·I_w·I_d − α·O_w·Q)
///              + x·(S_w·I_d − α·Q) + ch(q) − α·q
/// ```
///
/// is linear in `y`, in `x` and in each channel loop index, so its minimum is
/// at a corner of the loop ranges. With the paper's slope `α = a` (eqs. 7, 12,
/// 14) the `y` term vanishes (`a·O_w·Q = S_h·I_w·I_d`) and this is the intercept
/// of a line through the worst read of every output row.
pub(crate) fn derived_intercept(op: OpKind, g: &Geometry, alpha: Ratio) -> Option<Ratio> {
    let zero = Ratio::int(0);
    let r = |v: i64| Ratio::int(v as i128);
    let q = r(g.od);
    let y_term = r(g.sh * g.iw * g.id)
        .sub(alpha.mul(r(g.ow)).mul(q))
        .mul(r(g.oh - 1))
        .min(zero);
    let x_term = r(g.sw * g.id).sub(alpha.mul(q)).mul(r(g.ow - 1)).min(zero);
    let c_term = match op {
        // ch = 0, q in [0, O_d): minimum at q = O_d − 1
        OpKind::Conv2d => zero.sub(alpha.mul(r(g.od - 1))),
        // q = ic·K_c + m: ch − α·q = ic·(1 − α·K_c) − α·m
        OpKind::DepthwiseConv2d => {
            let m_part = zero.sub(alpha.mul(r(g.mult - 1)));
            let ic_part = Ratio::int(1)
                .sub(alpha.mul(r(g.mult)))
                .mul(r(g.id - 1))
                .min(zero);
            m_part.add(ic_part)
        }
        // ch = q: q·(1 − α)
        OpKind::MaxPool | OpKind::AveragePool => {
            Ratio::int(1).sub(alpha).mul(r(g.id - 1)).min(zero)
        }
        _ => return None,
    };
    let pad_term = r(-g.ph * g.iw * g.id - g.pw * g.id);
    Some(pad_term.add(y_term).add(x_term).add(c_term))
}

/// Intermediate values of a safe analytic bound of a windowed op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SafeDetail {
    /// The line used (elements): `minR(j) >= max(0, a·j + b)` for every step
    /// `j` of a batch.
    pub line: Line,
    /// Steps per batch; the last step of a batch is `ic − 1`.
    pub ic: i128,
    /// Eq. 11's minimum over `[0, ic − 1]` plus the batch term (elements).
    pub min_term: Ratio,
    /// The bound in bytes, rounded down and capped to `[0, IB]`.
    pub overlap: u64,
}

/// Turns a valid read line into a bound: eq. 11 over one batch's steps
/// `[0, i_c − 1]`, plus the batch term, then eq. 1 in bytes.
///
/// Batch `n` shifts reads by `n·I_h·I_w·I_d` and steps by `n·i_c`; with
/// `Δ = I_h·I_w·I_d − i_c` the worst batch adds `min(0, (N − 1)·Δ)`. The result
/// is rounded down to whole bytes and capped to `[0, IB]` (the last write
/// bounds the monotone O_s by IB).
fn bound_from_line(spec: &LayerSpec, g: &Geometry, line: Line) -> SafeDetail {
    let ic = (g.oh * g.ow * g.od) as i128;
    let delta = (g.ih * g.iw * g.id) as i128 - ic;
    let batch = ((g.n - 1) as i128 * delta).min(0);
    let min_term = eq11_min_term(&line, ic - 1).add(Ratio::int(batch));
    let bytes = eq1_11_overlap(spec.output_bytes(), spec.dtype.size(), min_term).floor();
    SafeDetail {
        line,
        ic,
        min_term,
        overlap: bytes.clamp(0, spec.input_bytes() as i128) as u64,
    }
}

/// The safe reading of the paper's bound for conv2d / depthwise_conv2d / pools:
/// the printed slope `a` (eqs. 7, 12, 14) and the intercept
/// `b = min(printed b, derived b)` — the printed eqs. 8/13/15 evaluated with
/// TFLite's padding, and `derived_intercept` at slope `a` — so that the line
/// is always valid and the printed intercept is kept wherever it is the more
/// conservative one (Table I is reproduced). Eq. 11 is evaluated over the
/// steps `[0, i_c − 1]` that exist, which makes up for the "+1" of eqs. 13/15
/// (`a·(i_c − 1) + b − (i_c − 1) = a·i_c + b − i_c + 1 − a`). `None` for other
/// ops.
pub fn windowed_safe_detail(spec: &LayerSpec) -> Option<SafeDetail> {
    let g = Geometry::of(spec);
    let printed = printed_line(spec.op, &g, g.ph, g.pw)?;
    let derived_b = derived_intercept(spec.op, &g, printed.a)?;
    let line = Line {
        a: printed.a,
        b: printed.b.min(derived_b),
    };
    Some(bound_from_line(spec, &g, line))
}

/// The best of several valid lines for conv2d / depthwise_conv2d / pools: the
/// paper's (see [`windowed_safe_detail`]) and lines of slope 1 (the slope of
/// `maxW`), `S_w·I_d / Q` (reads along a row) and `1 / K_c` (depthwise
/// channels), each with its [`derived_intercept`]. Every candidate is a valid
/// lower bound, so is their maximum. `None` for other ops.
pub(crate) fn windowed_best_detail(spec: &LayerSpec) -> Option<SafeDetail> {
    let g = Geometry::of(spec);
    let mut best = windowed_safe_detail(spec)?;
    let mut slopes = vec![
        Ratio::int(1),
        Ratio::new((g.sw * g.id) as i128, g.od as i128),
    ];
    if spec.op == OpKind::DepthwiseConv2d {
        slopes.push(Ratio::new(1, g.mult as i128));
    }
    for alpha in slopes {
        let b = derived_intercept(spec.op, &g, alpha)?;
        let d = bound_from_line(spec, &g, Line { a: alpha, b });
        if d.overlap > best.overlap {
            best = d;
        }
    }
    Some(best)
}

/// Exact monotone O_s of the TFLM reference `fully_connected` (bytes), for
/// `batches` rows of `depth` inputs and `units` outputs.
///
/// Step `j = b·U + c` reads `input[b·D ..]` (minimum `b·D`) after the writes
/// `0..j` (max end `j` elements), so its term is `B·U − (b·U + c) + b·D`,
/// smallest at `c = U − 1`: `t(b) = B·U + b·(D − U) − U + 1`. Step 0 follows no
/// write, so `b = 0` counts only when `U >= 2`. `t` is linear in `b`, so the
/// minimum is at an end of the valid range; the last write adds the term `IB`.
///
/// `O_s = T_s · min(B·D, t(b) for b in {0 if U >= 2, 1, B − 1 if B >= 2})`.
///
/// A simpler bound, `T_s·((B − 1)·min(D, U) + 1)`, is `t` minimised over all
/// `b` in `[0, B)` (the tests hold the two against each other).
pub(crate) fn fully_connected_overlap(batches: u64, units: u64, depth: u64, elem_size: u64) -> u64 {
    let (b, u, d) = (batches as i128, units as i128, depth as i128);
    let t = |k: i128| b * u + k * (d - u) - u + 1;
    let mut best = b * d;
    if u >= 2 {
        best = best.min(t(0));
    }
    if b >= 2 {
        best = best.min(t(1)).min(t(b - 1));
    }
    best.max(0) as u64 * elem_size
}

fn fc_dims(spec: &LayerSpec) -> (u64, u64, u64) {
    let batches = spec.output[..3].iter().map(|&d| d as u64).product();
    (batches, spec.output[3] as u64, spec.filter[3] as u64)
}

/// The safe analytic O_s in bytes, never above the monotone (algorithmic) value:
///
/// * conv2d / depthwise_conv2d / pools: the paper's eq. 11 with the printed
///   slope (eqs. 7/12/14) and intercept `min(printed b, derived b)`, over the
///   steps of one batch, plus a batch term, rounded down and capped to
///   `[0, IB]` ([`windowed_safe_detail`]); reproduces Table I;
/// * relu / add: OB (exact);
/// * fully_connected: `fully_connected_overlap` (exact);
/// * matmul: 0 (exact: the zeroing pass writes all of C before A is read).
pub fn analytic_overlap(spec: &LayerSpec) -> Option<u64> {
    match spec.op {
        OpKind::Conv2d | OpKind::DepthwiseConv2d | OpKind::MaxPool | OpKind::AveragePool => {
            windowed_safe_detail(spec).map(|d| d.overlap)
        }
        _ => non_windowed(spec),
    }
}

/// Like [`analytic_overlap`] but for windowed ops the best of several valid
/// lines (`windowed_best_detail`); never below [`analytic_overlap`], still
/// never above the monotone value. Gives the exact 1 204 224 B on Table I.
pub fn analytic_overlap_best(spec: &LayerSpec) -> Option<u64> {
    match spec.op {
        OpKind::Conv2d | OpKind::DepthwiseConv2d | OpKind::MaxPool | OpKind::AveragePool => {
            windowed_best_detail(spec).map(|d| d.overlap)
        }
        _ => non_windowed(spec),
    }
}

fn non_windowed(spec: &LayerSpec) -> Option<u64> {
    analytic_overlap_of_input(spec, 0)
}

/// The exact closed form of the O_s of activation input `input` (0, or 1 for
/// `add` and `concatenation`) for the ops that have one: relu / add (OB, for
/// either input of add), matmul (0), fully_connected
/// ([`fully_connected_overlap`]), concatenation ([`concatenation_overlap`]),
/// pad ([`pad_overlap`]), transpose_conv ([`transpose_conv_overlap`]).
/// `None` for the windowed ops (use [`analytic_overlap`]) and for an input
/// the op does not have.
pub(crate) fn analytic_overlap_of_input(spec: &LayerSpec, input: usize) -> Option<u64> {
    let ib = spec.input_bytes_of(input)?;
    match spec.op {
        OpKind::Relu | OpKind::Add => Some(spec.output_bytes().min(ib)),
        OpKind::Matmul => Some(0),
        OpKind::FullyConnected => {
            let (b, u, d) = fc_dims(spec);
            Some(fully_connected_overlap(b, u, d, spec.dtype.size()))
        }
        OpKind::Concatenation => Some(concatenation_overlap(ib)),
        OpKind::Pad => Some(pad_overlap(spec.input_bytes())),
        OpKind::TransposeConv => Some(transpose_conv_overlap(spec)),
        OpKind::Conv2d | OpKind::DepthwiseConv2d | OpKind::MaxPool | OpKind::AveragePool => None,
        // A LayerSpec holds kernel-suite ops only.
        _ => None,
    }
}

/// Exact monotone O_s of either input of the TFLM reference concatenation:
/// its whole size `IB_k`.
///
/// With `K` outer indices and chunks of `c_0`, `c_1` elements, input 0's
/// element `k·c_0 + j` is read right after output elements
/// `0 .. k(c_0 + c_1) + j` are written, a term of `OB − k·c_1 ≥ K·c_0 +
/// c_1`; input 1's element `k·c_1 + j` after `0 .. k(c_0 + c_1) + c_0 + j`,
/// a term of `OB − (k + 1)·c_0 ≥ K·c_1`. Neither is below the last write's
/// term `IB_k`.
pub(crate) fn concatenation_overlap(input_bytes: u64) -> u64 {
    input_bytes
}

/// Exact monotone O_s of the TFLM reference pad: IB. The read of input
/// element `i` at output element `j` follows the writes `0 .. j`, a term of
/// `N_out − (j − i)`; `j − i` is the number of padding elements before
/// `j`, at most `N_out − N_in` minus those after the last interior element,
/// so every term is at least `N_in`, the last write's.
pub(crate) fn pad_overlap(input_bytes: u64) -> u64 {
    input_bytes
}

/// Exact monotone O_s of the TFLM reference transpose conv.
///
/// int8: the kernel accumulates in its int32 scratch buffer and writes the
/// output only after its last input read: no read follows a write, so O_s
/// = IB. float: it zeroes the whole output first (`M = OB`), so every later
/// read `r` has the term `r`, and O_s is the byte offset of the first input
/// element read — the first input pixel, in row-major order, with a filter
/// tap inside the output, channel 0 — or IB when no input element reaches the
/// output. With TFLite's padding that pixel is `(0, 0)`: O_s = 0.
pub(crate) fn transpose_conv_overlap(spec: &LayerSpec) -> u64 {
    if spec.dtype == memtrace_abi::Dtype::Int8 {
        return spec.input_bytes();
    }
    let g = Geometry::of(spec);
    // First input index whose window origin i·s − p has a tap f in [0, k)
    // with 0 <= i·s − p + f < o.
    let first = |size: i64, k: i64, s: i64, p: i64, o: i64| {
        (0..size).find(|&i| {
            let origin = i * s - p;
            origin + k > 0 && origin < o
        })
    };
    match (
        first(g.ih, g.kh, g.sh, g.ph, g.oh),
        first(g.iw, g.kw, g.sw, g.pw, g.ow),
    ) {
        (Some(y), Some(x)) => ((y * g.iw + x) * g.id) as u64 * spec.dtype.size(),
        _ => spec.input_bytes(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithmic::tests::{random_spec, Rng};
    use crate::algorithmic::{algorithmic_overlap, algorithmic_overlap_of_input};
    use memtrace_abi::Dtype;

    fn spec(text: &str) -> LayerSpec {
        LayerSpec::parse(text).unwrap()
    }

    fn alg(s: &LayerSpec) -> u64 {
        algorithmic_overlap(s).unwrap()
    }

    /// The common slope `a` of eqs. (7), (12) and (14): the read offset advances
    /// `S_h·I_w·I_d` elements per output row, which takes `O_w·Q` steps, where `Q`
    /// is the number of steps per output pixel (`O_d`). For depthwise
    /// `Q = I_d·K_c` gives eq. 7 (`S_h·I_w / (O_w·K_c)`, `K_c` = depth multiplier),
    /// for conv `Q = O_d` gives eq. 12, for pools `Q = I_d` gives eq. 14.
    fn common_slope(g: &Geometry) -> Ratio {
        Ratio::new((g.sh * g.iw * g.id) as i128, (g.ow * g.od) as i128)
    }

    /// `T_s·min(B·D, (B − 1)·min(D, U) + 1)`: a lower bound of
    /// `fully_connected_overlap` (equal to it whenever `U >= 2`).
    fn fully_connected_simple_bound(batches: u64, units: u64, depth: u64, elem_size: u64) -> u64 {
        ((batches - 1) * depth.min(units) + 1).min(batches * depth) * elem_size
    }

    /// Table I: MobileNet v2 1.0 224's second depthwise convolution.
    fn table_one() -> LayerSpec {
        spec("op=depthwise_conv2d,dtype=f32,input=1x112x112x96,filter=1x3x3x96,stride=2,padding=same")
    }

    #[test]
    fn table_one_is_reproduced_by_the_printed_equations() {
        let s = table_one();
        let g = Geometry::of(&s);
        assert_eq!(printed_padding(&s), (0, 0));
        assert_eq!((g.ph, g.pw), (0, 0));
        let line = eq7_8_depthwise(&g, 0, 0);
        assert_eq!(line.a, Ratio::int(4));
        assert_eq!(line.b, Ratio::int(-10_848));
        assert_eq!(line.a, common_slope(&g));
        assert_eq!(eq11_min_term(&line, 301_056), Ratio::int(-2_712));
        assert_eq!(analytic_overlap_as_printed(&s), Some(1_193_376));
        assert_eq!(analytic_overlap_table_reading(&s), Some(1_193_376));
        assert_eq!(analytic_overlap(&s), Some(1_193_376));
        // "exact" of the paper = the monotone O_s of the reference kernel = OB
        assert_eq!(alg(&s), 1_204_224);
        assert_eq!(alg(&s) - 1_193_376, 10_848);
        // the best valid line is exact here
        assert_eq!(analytic_overlap_best(&s), Some(1_204_224));
        // eq. 8 drops the (a − 1) of the line through the row ends: the
        // largest valid intercept is b + a − 1 = −10 845.
        assert_eq!(
            derived_intercept(s.op, &g, line.a),
            Some(Ratio::int(-10_848 + 4 - 1))
        );
    }

    #[test]
    fn table_two_row_one_is_the_table_one_layer_of_mobilenet_v2() {
        // Row 1 is labelled "mobilenet v1 1.0 224" but its numbers are the
        // Table I layer, which Section III-E places in MobileNet v2, and its
        // error 0.18 % is 10 848 B over MobileNet v2's original peak 5 880 KB
        // (Table III), not over MobileNet v1's 4 704 KB (0.23 %).
        let err = 10_848.0 / (5_880.0 * 1024.0) * 100.0;
        assert!((err - 0.18_f64).abs() < 0.005, "{err}");
        let err_v1 = 10_848.0 / (4_704.0 * 1024.0) * 100.0;
        assert!((err_v1 - 0.18_f64).abs() > 0.04, "{err_v1}");
        assert_eq!(analytic_overlap(&table_one()), Some(1_193_376));
    }

    #[test]
    fn table_two_row_two_layer_search() {
        // Row 2 "mobilenet v2 1.0 224": exact 1 605 632, estimate 1 598 400,
        // error 0.15 % = 7 232 B over MobileNet v1's peak 4 704 KB, so the row
        // labels look swapped.
        let err = 7_232.0 / (4_704.0 * 1024.0) * 100.0;
        assert!((err - 0.15_f64).abs() < 0.005, "{err}");

        // The hinted layer, MobileNet v1/v2's first depthwise 112x112x32 s1:
        // the printed equations give 1 591 168, which is also its true
        // monotone O_s — neither table number.
        let dw1 = spec("op=depthwise_conv2d,dtype=f32,input=1x112x112x32,filter=1x3x3x32,stride=1,padding=same");
        assert_eq!(dw1.output_bytes(), 1_605_632);
        assert_eq!(alg(&dw1), 1_591_168);
        assert_eq!(analytic_overlap_as_printed(&dw1), Some(1_591_168));
        assert_eq!(analytic_overlap_table_reading(&dw1), Some(1_591_168));
        assert_eq!(analytic_overlap(&dw1), Some(1_591_168));

        // MobileNet v1's peak layer (pointwise 112x112x32 -> 64, IB = 1 605 632):
        // printed eqs. 12/13 give exactly its monotone O_s, IB − 124.
        let pw1 =
            spec("op=conv2d,dtype=f32,input=1x112x112x32,filter=64x1x1x32,stride=1,padding=same");
        assert_eq!(pw1.input_bytes(), 1_605_632);
        assert_eq!(alg(&pw1), 1_605_508);
        assert_eq!(analytic_overlap_as_printed(&pw1), Some(1_605_508));
        assert_eq!(analytic_overlap(&pw1), Some(1_605_508));

        // The only geometry found that reproduces both numbers: a 3x3 stride-2
        // SAME window op 224x224x32 -> 112x112x32 (the first conv's spatial
        // shape with the output depth 32) under the pooling equations 14/15,
        // with eq. 11's minimum rounded down to whole elements. Its monotone
        // O_s is OB = 1 605 632, the "exact" of the table.
        let pool =
            spec("op=max_pool,dtype=f32,input=1x224x224x32,filter=3x3,stride=2,padding=same");
        assert_eq!(alg(&pool), 1_605_632);
        assert_eq!(analytic_overlap_table_reading(&pool), Some(1_598_400));
        assert_eq!(analytic_overlap_as_printed(&pool), Some(1_598_401)); // −7231/4 elements
                                                                         // The same geometry under the depthwise eqs. 7/8 gives 1 598 432.
        let dw = spec("op=depthwise_conv2d,dtype=f32,input=1x224x224x32,filter=1x3x3x32,stride=2,padding=same");
        assert_eq!(alg(&dw), 1_605_632);
        assert_eq!(analytic_overlap_as_printed(&dw), Some(1_598_432));
        // The real first conv (224x224x3 -> 112x112x32) cannot have O_s
        // 1 605 632: O_s <= IB = 602 112. Eqs. 12/13 give its exact monotone value.
        let conv0 =
            spec("op=conv2d,dtype=f32,input=1x224x224x3,filter=32x3x3x3,stride=2,padding=same");
        assert_eq!(conv0.input_bytes(), 602_112);
        assert_eq!(alg(&conv0), 599_404);
        assert_eq!(analytic_overlap_as_printed(&conv0), Some(599_404));
    }

    #[test]
    fn element_wise_ops_are_the_output_size_and_matmul_zero() {
        for dtype in [Dtype::Float32, Dtype::Int8] {
            for op in ["relu", "add"] {
                let s = spec(&format!(
                    "op={op},dtype={},input=1x10x10x8",
                    dtype.spec_name()
                ));
                assert_eq!(analytic_overlap(&s), Some(s.output_bytes()));
                assert_eq!(
                    analytic_overlap_as_printed(&s),
                    Some(s.output_bytes() as i64)
                );
                assert_eq!(alg(&s), s.output_bytes());
            }
            let m = spec(&format!(
                "op=matmul,dtype={},input=1x1x9x7,filter=1x1x7x5",
                dtype.spec_name()
            ));
            assert_eq!(analytic_overlap(&m), Some(0));
            assert_eq!(analytic_overlap_as_printed(&m), Some(0));
            assert_eq!(alg(&m), 0);
        }
    }

    #[test]
    fn fully_connected_closed_form() {
        // U >= 2, D >= U: (B − 1)·U + 1 elements
        assert_eq!(fully_connected_overlap(4, 10, 64, 4), ((3 * 10 + 1) * 4));
        // D < U: (B − 1)·D + 1
        assert_eq!(fully_connected_overlap(4, 100, 8, 1), 3 * 8 + 1);
        // single batch, single unit: only the last write's IB term
        assert_eq!(fully_connected_overlap(1, 1, 16, 4), 64);
        assert_eq!(fully_connected_simple_bound(1, 1, 16, 4), 4);
        let s = spec("op=fully_connected,dtype=int8,input=1x1x4x64,filter=1x1x10x64");
        assert_eq!(analytic_overlap(&s), Some(alg(&s)));
        assert_eq!(analytic_overlap_as_printed(&s), None);
    }

    /// analytic <= algorithmic for >= 300 random configurations of every op and
    /// dtype; FC, relu, add, matmul, concatenation (both inputs), pad and
    /// transpose_conv are exact.
    #[test]
    fn analytic_never_exceeds_algorithmic_for_random_configs() {
        let mut rng = Rng::new(0x5EED_A001);
        for op in OpKind::SUITE {
            for dtype in [Dtype::Float32, Dtype::Int8] {
                let mut printed_violations = 0;
                for _ in 0..400 {
                    let s = random_spec(&mut rng, op, dtype);
                    let truth = alg(&s);
                    let safe = analytic_overlap(&s).unwrap();
                    let best = analytic_overlap_best(&s).unwrap();
                    assert!(safe <= truth, "VIOLATION {s}: analytic {safe} > {truth}");
                    assert!(best <= truth, "VIOLATION {s}: best {best} > {truth}");
                    assert!(best >= safe, "{s}");
                    match op {
                        OpKind::FullyConnected => {
                            assert_eq!(safe, truth, "{s}");
                            let (b, u, d) = fc_dims(&s);
                            assert!(fully_connected_simple_bound(b, u, d, s.dtype.size()) <= truth);
                        }
                        OpKind::Relu | OpKind::Add | OpKind::Matmul => {
                            assert_eq!(safe, truth, "{s}")
                        }
                        // The closed forms of docs/overlap.md §6, every input.
                        OpKind::Concatenation | OpKind::Pad | OpKind::TransposeConv => {
                            assert_eq!(safe, truth, "{s}");
                            for input in 1..op.inputs() {
                                let alg_k = algorithmic_overlap_of_input(&s, input);
                                assert_eq!(analytic_overlap_of_input(&s, input), alg_k, "{s}");
                            }
                        }
                        _ => {
                            let printed = analytic_overlap_as_printed(&s).unwrap();
                            if printed > truth as i64 {
                                printed_violations += 1;
                            }
                        }
                    }
                }
                println!(
                    "{op:?} {dtype:?}: printed form above algorithmic in {printed_violations}/400"
                );
                if matches!(op, OpKind::Conv2d | OpKind::DepthwiseConv2d) {
                    // documented below: the printed equations are not safe
                    assert!(printed_violations > 0, "{op:?} {dtype:?}");
                }
            }
        }
    }

    /// FINDING 1 — eqs. 5/6 give a negative padding when the window is smaller
    /// than the stride (e.g. a 1x1 stride-2 projection shortcut, as in ResNet),
    /// where TFLite and the kernel use 0. The negative P raises b and the
    /// printed bound exceeds the true O_s by 382 B on this realistic layer.
    #[test]
    fn finding_negative_printed_padding_makes_the_bound_unsafe() {
        let s =
            spec("op=conv2d,dtype=f32,input=1x56x56x64,filter=128x1x1x64,stride=2,padding=same");
        assert_eq!(printed_padding(&s), (-1, -1));
        assert_eq!(s.pad, (0, 0));
        let truth = alg(&s);
        assert_eq!(truth, 400_900);
        assert_eq!(analytic_overlap_as_printed(&s), Some(401_282));
        // With TFLite's padding the same printed eqs. 12/13 are safe.
        let g = Geometry::of(&s);
        let line = eq12_13_conv(&g, 0, 0);
        let ic = (g.oh * g.ow * g.od) as i128;
        let v = eq1_11_overlap(s.output_bytes(), 4, eq11_min_term(&line, ic)).floor();
        assert_eq!(v, 393_986);
        assert_eq!(analytic_overlap(&s), Some(393_986));
        assert!(analytic_overlap_best(&s).unwrap() <= truth);
    }

    /// FINDING 2 — the printed intercepts assume the worst read of a row is
    /// its last one. When reads move along a row faster than the line's slope
    /// (here S_w = 3 > S_h = 1, so a row step reads S_w·I_d = 9 elements ahead
    /// per O_d = 4 steps, 2.25 per step, against a = 7/4), the first pixel of
    /// a row lies below the line through the row ends.
    #[test]
    fn finding_row_slope_intercept_is_unsafe_when_columns_outrun_rows() {
        let s = spec("op=conv2d,dtype=f32,input=1x1x7x3,filter=4x2x1x3,stride=1x3,padding=same");
        assert_eq!(printed_padding(&s), (0, 0));
        assert_eq!(s.pad, (0, 0));
        assert_eq!(alg(&s), 36);
        assert_eq!(analytic_overlap_as_printed(&s), Some(43));
        assert!(analytic_overlap(&s).unwrap() <= 36);
        // the same with a depthwise depth multiplier
        let d = spec("op=depthwise_conv2d,dtype=f32,input=1x8x8x4,filter=1x1x1x8,depth_multiplier=2,stride=1x3,padding=same");
        assert_eq!(alg(&d), 752);
        assert_eq!(analytic_overlap_as_printed(&d), Some(768));
        assert!(analytic_overlap(&d).unwrap() <= 752);
    }

    /// FINDING 3 — with several batches the line keeps climbing at
    /// `S_h·I_w·I_d` per output row, but a batch's input has only `I_h` rows;
    /// when `S_h·O_h > I_h` (here 2·4 = 8 > 7) batch 1 starts below the line.
    #[test]
    fn finding_batches_break_the_printed_line() {
        let s = spec("op=conv2d,dtype=int8,input=2x7x1x2,filter=4x1x2x2,stride=2x1,padding=same");
        assert_eq!(printed_padding(&s), (0, 0));
        assert_eq!(alg(&s), 27);
        assert_eq!(analytic_overlap_as_printed(&s), Some(29));
        assert!(analytic_overlap(&s).unwrap() <= 27);
    }
}
