//! Comparing a verified run's outputs (docs/verify.md, `memtrace verify`):
//! with the reference run's ([`mismatched_bytes`], [`digest`]) and with real
//! TFLM on the host, PyPI `tflite-micro` ([`OracleComparison`]: bytes for
//! integer outputs, ulps for floats).
//!
//! This module knows nothing of the emulator: the driver runs both.

use memtrace_abi::Dtype;
use serde::Serialize;

/// Emulated outputs against PyPI `tflite-micro` (real TFLM on the host).
#[derive(Debug, Clone, Serialize)]
pub struct OracleComparison {
    /// The Python that ran it.
    pub python: String,
    /// The `tflite-micro` package version.
    pub version: String,
    /// Why the host TFLM could not run the model, if it could not.
    pub error: Option<String>,
    /// Output bytes that differ (a length difference counts).
    pub mismatched_bytes: u64,
    /// The outputs are equal byte for byte.
    pub bit_exact: bool,
    /// The outputs agree: bit-exact, or every difference is in a float
    /// output and within [`FLOAT_ULP_TOLERANCE`] (or the host could not run
    /// the model: `error`). Anything else fails the verification.
    pub agrees: bool,
    /// The tolerance float outputs were compared with, in ULPs.
    pub float_ulp_tolerance: u64,
    /// Every graph output that differs, and by how much.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub differences: Vec<OutputDifference>,
    /// Wall-clock seconds of the host run (`memtrace bench --models`; not
    /// reported: not deterministic).
    #[serde(skip)]
    pub seconds: f64,
}

/// How far a float output of memtrace's run may be from the host oracle's
/// and still agree, in units in the last place (ULPs) of its type.
///
/// Not zero, because the emulated TFLM and PyPI's are the same C++ built for
/// different machines: transcendental functions (`expf` in SOFTMAX and
/// LOGISTIC, `tanhf`) come from different C libraries (newlib on the
/// Cortex-M4, the runner's own or musl's on x86-64, glibc on the host),
/// which may round one argument differently by an ULP, and one compiler may
/// fuse a multiply and an add that the other rounds twice. An ULP in one
/// element grows by a few through the operators after it (a softmax's sum
/// and division). Four ULPs of float32 is a relative difference of 4.8e-7:
/// far below any quantisation step a wrong integer result moves a
/// dequantised output by, and above the rounding noise measured: on the
/// float models `hello_world` and `magic_wand`, 0 ULPs on real TFLM on
/// both targets; a softmax computed in another order differs by 1 ULP.
///
/// An element also agrees when it is within that many ULPs *of its output's
/// largest magnitude* (what the host gave): a value that is the small
/// remainder of a cancellation may differ in relative terms while its
/// absolute error is rounding noise of the operands.
pub const FLOAT_ULP_TOLERANCE: u64 = 4;

/// One graph output as the comparison cuts the output image: its name,
/// element type (`None`: a type memtrace does not model, compared byte for
/// byte) and bytes.
#[derive(Debug, Clone)]
pub struct OutputLayout {
    /// The output tensor's name.
    pub name: String,
    /// Its element type.
    pub dtype: Option<Dtype>,
    /// Its bytes.
    pub bytes: u64,
}

/// One graph output that differs between memtrace's run and the oracle's.
#[derive(Debug, Clone, Serialize)]
pub struct OutputDifference {
    /// The output tensor (`all outputs` when the images could not be cut
    /// into outputs: their lengths differ from the graph's).
    pub output: String,
    /// Its element type (`bytes` when compared byte for byte).
    pub dtype: String,
    /// Bytes that differ.
    pub mismatched_bytes: u64,
    /// Float outputs: the largest distance of an element in ULPs
    /// (`u64::MAX` for a NaN or infinity against anything else).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_ulps: Option<u64>,
    /// The first element that differs: its index, memtrace's value and the
    /// host's.
    pub first: ElementDifference,
    /// Every element within [`FLOAT_ULP_TOLERANCE`] (never for an exact
    /// type).
    pub within_tolerance: bool,
}

/// One element that differs.
#[derive(Debug, Clone, Serialize)]
pub struct ElementDifference {
    /// Element index within the output (byte index when compared byte for
    /// byte).
    pub index: u64,
    /// memtrace's value.
    pub memtrace: String,
    /// The host oracle's value.
    pub host: String,
}

impl OracleComparison {
    /// The comparison of memtrace's `emulated` output image with the host
    /// oracle's `host` one (all graph outputs concatenated, in `layout`'s
    /// order).
    pub fn of_outputs(
        python: String,
        version: String,
        layout: &[OutputLayout],
        host: &[u8],
        emulated: &[u8],
    ) -> OracleComparison {
        let mismatched = mismatched_bytes(host, emulated);
        let differences = output_differences(layout, host, emulated);
        OracleComparison {
            python,
            version,
            error: None,
            mismatched_bytes: mismatched,
            bit_exact: mismatched == 0,
            agrees: mismatched == 0 || differences.iter().all(|d| d.within_tolerance),
            float_ulp_tolerance: FLOAT_ULP_TOLERANCE,
            differences,
            seconds: 0.0,
        }
    }

    /// The host TFLM could not run the model: `reason` says why. No
    /// disagreement (a model the host refuses, the report says why).
    pub fn not_run(python: String, reason: String) -> OracleComparison {
        OracleComparison {
            python,
            version: String::new(),
            error: Some(reason),
            mismatched_bytes: 0,
            bit_exact: false,
            agrees: true,
            float_ulp_tolerance: FLOAT_ULP_TOLERANCE,
            differences: Vec::new(),
            seconds: 0.0,
        }
    }

    /// The host ran the model and agrees, or could not run it (a model the
    /// host TFLM refuses is no disagreement: the report says why it did not
    /// run). Float outputs agree within [`FLOAT_ULP_TOLERANCE`]; every other
    /// output must be bit-exact.
    pub fn agrees(&self) -> bool {
        self.agrees
    }

    /// One line for the text reports, and one per output that differs.
    pub fn to_text(&self) -> String {
        let Some(e) = &self.error else {
            let verdict = match (self.bit_exact, self.agrees) {
                (true, _) => "bit-exact".to_string(),
                (false, true) => format!("equal within {} ULPs", self.float_ulp_tolerance),
                (false, false) => "DIFFERENT".to_string(),
            };
            let mut s = format!(
                "host oracle (PyPI tflite-micro {}): {verdict} ({} B differ)\n",
                self.version, self.mismatched_bytes
            );
            for d in &self.differences {
                s += &d.to_text(self.float_ulp_tolerance);
            }
            return s;
        };
        format!("host oracle (PyPI tflite-micro): not run: {e}\n")
    }
}

impl OutputDifference {
    /// One indented line: which output, how far, the first element.
    fn to_text(&self, tolerance: u64) -> String {
        let ulps = match self.max_ulps {
            Some(u64::MAX) => ", a NaN or infinity against another value".to_string(),
            Some(u) => format!(", up to {u} ULPs (tolerance {tolerance})"),
            None => String::new(),
        };
        format!(
            "  output `{}` ({}): {} B differ{ulps}; element {}: memtrace {}, host {}\n",
            self.output,
            self.dtype,
            self.mismatched_bytes,
            self.first.index,
            self.first.memtrace,
            self.first.host
        )
    }
}

/// The outputs of `layout` that differ between `host` and `emulated`. When
/// the images are not as long as the layout says, the whole image is one
/// byte-for-byte difference.
fn output_differences(
    layout: &[OutputLayout],
    host: &[u8],
    emulated: &[u8],
) -> Vec<OutputDifference> {
    if host == emulated {
        return Vec::new();
    }
    let total: u64 = layout.iter().map(|o| o.bytes).sum();
    if host.len() as u64 != total || emulated.len() as u64 != total {
        return vec![bytes_difference("all outputs", host, emulated)];
    }
    let mut at = 0usize;
    let mut differences = Vec::new();
    for o in layout {
        let (a, b) = (
            &emulated[at..at + o.bytes as usize],
            &host[at..at + o.bytes as usize],
        );
        at += o.bytes as usize;
        if a == b {
            continue;
        }
        differences.push(match o.dtype.and_then(FloatKind::of) {
            Some(kind) if o.bytes % kind.bytes() == 0 => float_difference(&o.name, kind, b, a),
            _ => bytes_difference(&o.name, b, a),
        });
    }
    differences
}

/// An output compared byte for byte (integers, booleans, unknown types).
fn bytes_difference(name: &str, host: &[u8], emulated: &[u8]) -> OutputDifference {
    let first = host
        .iter()
        .zip(emulated)
        .position(|(x, y)| x != y)
        .unwrap_or(host.len().min(emulated.len()));
    let show = |v: &[u8]| {
        v.get(first)
            .map_or("none".to_string(), |b| format!("0x{b:02x}"))
    };
    OutputDifference {
        output: name.to_string(),
        dtype: "bytes".into(),
        mismatched_bytes: mismatched_bytes(host, emulated),
        max_ulps: None,
        first: ElementDifference {
            index: first as u64,
            memtrace: show(emulated),
            host: show(host),
        },
        within_tolerance: false,
    }
}

/// The float types compared in ULPs.
#[derive(Clone, Copy)]
enum FloatKind {
    F32,
    F16,
}

impl FloatKind {
    fn of(dtype: Dtype) -> Option<FloatKind> {
        match dtype {
            Dtype::Float32 => Some(FloatKind::F32),
            Dtype::Float16 => Some(FloatKind::F16),
            _ => None,
        }
    }

    fn bytes(self) -> u64 {
        match self {
            FloatKind::F32 => 4,
            FloatKind::F16 => 2,
        }
    }

    fn name(self) -> &'static str {
        match self {
            FloatKind::F32 => "float32",
            FloatKind::F16 => "float16",
        }
    }

    /// The little-endian element at `i` as an `f64` (exact for both types).
    fn value(self, data: &[u8], i: usize) -> f64 {
        match self {
            FloatKind::F32 => f32::from_le_bytes(data[4 * i..4 * i + 4].try_into().unwrap()) as f64,
            FloatKind::F16 => f16_value(u16::from_le_bytes(
                data[2 * i..2 * i + 2].try_into().unwrap(),
            )),
        }
    }

    /// The element's bits, and the type's sign bit and exponent field.
    fn bits(self, data: &[u8], i: usize) -> (u64, u64, u64) {
        match self {
            FloatKind::F32 => (
                u32::from_le_bytes(data[4 * i..4 * i + 4].try_into().unwrap()) as u64,
                1 << 31,
                0xff << 23,
            ),
            FloatKind::F16 => (
                u16::from_le_bytes(data[2 * i..2 * i + 2].try_into().unwrap()) as u64,
                1 << 15,
                0x1f << 10,
            ),
        }
    }

    /// One ULP at magnitude `x` (the spacing of the type's values there).
    fn ulp_at(self, x: f64) -> f64 {
        let (mantissa_bits, min_exponent) = match self {
            FloatKind::F32 => (23, -126),
            FloatKind::F16 => (10, -14),
        };
        let exponent = if x == 0.0 || !x.is_finite() {
            min_exponent
        } else {
            (x.abs().log2().floor() as i32).max(min_exponent)
        };
        2f64.powi(exponent - mantissa_bits)
    }
}

/// An IEEE half-precision value.
fn f16_value(h: u16) -> f64 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exponent = ((h >> 10) & 0x1f) as i32;
    let mantissa = (h & 0x3ff) as f64;
    sign * match exponent {
        0 => mantissa * 2f64.powi(-24),
        0x1f if mantissa == 0.0 => f64::INFINITY,
        0x1f => f64::NAN,
        e => (1.0 + mantissa / 1024.0) * 2f64.powi(e - 15),
    }
}

/// Distance in ULPs between two elements given as bits: the number of
/// representable values between them (+0 and -0 are one value). A NaN or an
/// infinity agrees only with the same (any NaN with any NaN); otherwise the
/// distance is `u64::MAX`.
fn ulp_distance(a: u64, b: u64, sign: u64, exponent: u64) -> u64 {
    let special = |x: u64| x & exponent == exponent;
    let nan = |x: u64| special(x) && x & !(sign | exponent) != 0;
    if special(a) || special(b) {
        return if a == b || (nan(a) && nan(b)) {
            0
        } else {
            u64::MAX
        };
    }
    // Sign and magnitude to one ordered line of integers.
    let ordered = |x: u64| -> i128 {
        let magnitude = (x & !sign) as i128;
        if x & sign != 0 {
            -magnitude
        } else {
            magnitude
        }
    };
    (ordered(a) - ordered(b)).unsigned_abs() as u64
}

/// A float output compared element by element in ULPs.
fn float_difference(name: &str, kind: FloatKind, host: &[u8], emulated: &[u8]) -> OutputDifference {
    let n = host.len() / kind.bytes() as usize;
    let largest = (0..n)
        .map(|i| kind.value(host, i).abs())
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let absolute = FLOAT_ULP_TOLERANCE as f64 * kind.ulp_at(largest);
    let mut max_ulps = 0u64;
    let mut within = true;
    let mut first = None;
    for i in 0..n {
        let ((a, sign, exponent), (b, _, _)) = (kind.bits(host, i), kind.bits(emulated, i));
        if a == b {
            continue;
        }
        first.get_or_insert(i);
        let d = ulp_distance(a, b, sign, exponent);
        max_ulps = max_ulps.max(d);
        let close = d <= FLOAT_ULP_TOLERANCE
            || (d != u64::MAX && (kind.value(host, i) - kind.value(emulated, i)).abs() <= absolute);
        within &= close;
    }
    let first = first.unwrap_or(0);
    OutputDifference {
        output: name.to_string(),
        dtype: kind.name().into(),
        mismatched_bytes: mismatched_bytes(host, emulated),
        max_ulps: Some(max_ulps),
        first: ElementDifference {
            index: first as u64,
            memtrace: format!("{:e}", kind.value(emulated, first)),
            host: format!("{:e}", kind.value(host, first)),
        },
        within_tolerance: within,
    }
}

/// Bytes that differ between two output images (a length difference
/// counts).
pub fn mismatched_bytes(a: &[u8], b: &[u8]) -> u64 {
    a.iter().zip(b).filter(|(x, y)| x != y).count() as u64
        + (a.len() as i64 - b.len() as i64).unsigned_abs()
}

/// FNV-1a 64 of `bytes`, as 16 hex digits.
pub fn digest(bytes: &[u8]) -> String {
    memtrace_abi::event::OutputDigest::of(bytes).hex()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn layout(dtype: Dtype, bytes: usize) -> Vec<OutputLayout> {
        vec![OutputLayout {
            name: "y".into(),
            dtype: Some(dtype),
            bytes: bytes as u64,
        }]
    }

    fn compare(l: &[OutputLayout], host: &[u8], emulated: &[u8]) -> OracleComparison {
        OracleComparison::of_outputs("py".into(), "v".into(), l, host, emulated)
    }

    /// The float `steps` representable values above `x` (positive `x`).
    fn above(x: f32, steps: u32) -> f32 {
        f32::from_bits(x.to_bits() + steps)
    }

    #[test]
    fn ulp_distance_counts_representable_values_between() {
        let d = |a: f32, b: f32| {
            ulp_distance(a.to_bits() as u64, b.to_bits() as u64, 1 << 31, 0xff << 23)
        };
        assert_eq!(d(1.0, 1.0), 0);
        assert_eq!(d(0.0, -0.0), 0);
        assert_eq!(d(1.0, above(1.0, 3)), 3);
        // The smallest subnormals either side of zero: two steps apart.
        assert_eq!(d(f32::from_bits(1), -f32::from_bits(1)), 2);
        assert_eq!(d(f32::NAN, f32::NAN), 0);
        assert_eq!(d(f32::NAN, 1.0), u64::MAX);
        assert_eq!(d(f32::INFINITY, f32::MAX), u64::MAX);
        assert_eq!(d(f32::INFINITY, f32::INFINITY), 0);
    }

    #[test]
    fn float_outputs_agree_within_the_tolerance_and_not_beyond() {
        let host = f32s(&[0.25, 0.5, 0.125]);
        let l = layout(Dtype::Float32, host.len());
        let near = f32s(&[0.25, above(0.5, FLOAT_ULP_TOLERANCE as u32), 0.125]);
        let c = compare(&l, &host, &near);
        assert!(!c.bit_exact && c.agrees(), "{c:?}");
        let far = f32s(&[0.25, above(0.5, FLOAT_ULP_TOLERANCE as u32 + 1), 0.125]);
        let c = compare(&l, &host, &far);
        assert!(!c.agrees(), "{c:?}");
        assert_eq!(c.differences[0].max_ulps, Some(FLOAT_ULP_TOLERANCE + 1));
        assert_eq!(c.differences[0].first.index, 1);
        // The softmax: another class wins.
        let c = compare(
            &l,
            &f32s(&[0.934, 0.05, 0.016]),
            &f32s(&[0.742, 0.2, 0.058]),
        );
        assert!(
            !c.agrees() && c.to_text().contains("DIFFERENT"),
            "{}",
            c.to_text()
        );
    }

    #[test]
    fn a_cancellation_remainder_is_judged_at_its_outputs_scale() {
        // 1e-9 beside 1.0: a few ULPs of 1.0 apart, though many of 1e-9.
        let host = f32s(&[1.0, 1e-9]);
        let l = layout(Dtype::Float32, host.len());
        let c = compare(&l, &host, &f32s(&[1.0, 2e-8]));
        assert!(c.agrees(), "{c:?}");
        let c = compare(&l, &host, &f32s(&[1.0, 1e-5]));
        assert!(!c.agrees(), "{c:?}");
    }

    #[test]
    fn integer_outputs_must_be_bit_exact_beside_float_ones() {
        let mut host = f32s(&[1.0]);
        host.extend([5u8, 6]);
        let mut emulated = f32s(&[above(1.0, 1)]);
        emulated.extend([5u8, 7]);
        let l = vec![
            OutputLayout {
                name: "f".into(),
                dtype: Some(Dtype::Float32),
                bytes: 4,
            },
            OutputLayout {
                name: "q".into(),
                dtype: Some(Dtype::Int8),
                bytes: 2,
            },
        ];
        let c = compare(&l, &host, &emulated);
        assert!(!c.agrees(), "{c:?}");
        let q = c.differences.iter().find(|d| d.output == "q").unwrap();
        assert_eq!((q.first.index, q.mismatched_bytes), (1, 1));
        // A length that differs from the layout is a disagreement.
        let c = compare(&l, &host, &host[..5]);
        assert!(!c.agrees() && c.differences[0].output == "all outputs");
    }

    #[test]
    fn float16_is_compared_in_its_own_ulps() {
        // 1.0 and the next two half-precision values.
        let host = 0x3c00u16.to_le_bytes().to_vec();
        let l = layout(Dtype::Float16, 2);
        assert!(compare(&l, &host, &0x3c02u16.to_le_bytes()).agrees());
        let c = compare(&l, &host, &0x3c10u16.to_le_bytes());
        assert!(!c.agrees());
        assert_eq!(c.differences[0].max_ulps, Some(16));
        assert_eq!(c.differences[0].first.host, "1e0");
    }
}
