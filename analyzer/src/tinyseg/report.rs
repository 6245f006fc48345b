//! The per-step table of a TinySeg run.

use std::fmt::Write;

use super::Step;

/// Percent change from `from` to `to` (negative: lower).
pub fn change_percent(from: u64, to: u64) -> f64 {
    if from == 0 {
        return 0.0;
    }
    (to as f64 - from as f64) * 100.0 / from as f64
}

/// One row per step: action, peak, change against the first step's peak,
/// lower bound, bytes spilled (raw and compressed) and the graph change.
pub fn steps_table(steps: &[Step]) -> String {
    let first = steps.first().map_or(0, |s| s.peak_bytes);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>4}  {:<14} {:>12} {:>8} {:>12} {:>10} {:>10}  change",
        "step", "action", "peak B", "vs orig", "lower bd B", "spilled B", "compr. B"
    );
    for (i, s) in steps.iter().enumerate() {
        let compressed = s
            .compressed_bytes
            .map_or_else(|| "-".to_string(), |c| c.to_string());
        let spilled = if s.spilled_bytes > 0 {
            s.spilled_bytes.to_string()
        } else {
            "-".into()
        };
        let _ = writeln!(
            out,
            "{i:>4}  {:<14} {:>12} {:>+7.1}% {:>12} {:>10} {:>10}  {}",
            s.action,
            s.peak_bytes,
            change_percent(first, s.peak_bytes),
            s.lower_bound_bytes,
            spilled,
            compressed,
            s.change
        );
    }
    out
}
