//! What a sweep came to in numbers ([`Summary`]): rows per verdict and per
//! failed cross-check, the analytic bound's error, the sweep's speed.

use std::time::{Duration, Instant};

use memtrace_overlap::check::Flag;
use serde::Serialize;

use super::Row;
use crate::support::attribution::other_than_reference;

/// Summary of a sweep.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Number of rows.
    pub configs: usize,
    /// Rows with at least one failed cross-check.
    pub violations: usize,
    /// Rows with an error.
    pub errors: usize,
    /// Rows flagged `UNSAFE` (analytic above traced monotone).
    pub unsafe_analytic: usize,
    /// Rows flagged `MISMATCH` (algorithmic differs from traced monotone).
    pub algorithmic_mismatch: usize,
    /// Rows flagged `EXACT_BELOW_MONOTONE`.
    pub exact_below_monotone: usize,
    /// Configs where the paper's printed equations exceed the traced value.
    pub printed_above_traced: usize,
    /// Largest `analytic_error_percent` over rows with a non-zero monotone O_s.
    pub max_analytic_error_percent: Option<f64>,
    /// Mean `analytic_error_percent` over rows with a non-zero monotone O_s.
    pub mean_analytic_error_percent: Option<f64>,
    /// Wall-clock seconds of the sweep.
    pub seconds: f64,
    /// Rows per wall-clock second.
    pub configs_per_second: f64,
    /// Worker threads used.
    pub threads: usize,
    /// Rows with a failed cross-check that ran some other kernel than the
    /// TFLM reference ones the algorithmic and analytic methods model.
    pub violations_on_other_kernels: usize,
}

/// Counts and error statistics of `rows`, swept in `elapsed` on `threads`.
pub(crate) fn summarise(rows: &[Row], elapsed: Duration, threads: usize) -> Summary {
    let count = |f: Flag| rows.iter().filter(|r| r.flags.contains(&f)).count();
    let errors: Vec<f64> = rows
        .iter()
        .filter(|r| r.monotone_bytes.is_some_and(|m| m > 0))
        .filter_map(|r| r.analytic_error_percent)
        .collect();
    let seconds = elapsed.as_secs_f64();
    Summary {
        configs: rows.len(),
        violations: rows.iter().filter(|r| !r.flags.is_empty()).count(),
        errors: rows.iter().filter(|r| r.error.is_some()).count(),
        unsafe_analytic: count(Flag::Unsafe),
        algorithmic_mismatch: count(Flag::Mismatch),
        exact_below_monotone: count(Flag::ExactBelowMonotone),
        printed_above_traced: rows.iter().filter(|r| r.printed_above_traced).count(),
        max_analytic_error_percent: errors.iter().copied().reduce(f64::max),
        mean_analytic_error_percent: (!errors.is_empty())
            .then(|| errors.iter().sum::<f64>() / errors.len() as f64),
        seconds,
        configs_per_second: if seconds > 0.0 {
            rows.len() as f64 / seconds
        } else {
            0.0
        },
        threads,
        violations_on_other_kernels: rows
            .iter()
            .filter(|r| {
                !r.flags.is_empty()
                    && other_than_reference(r.library.as_deref(), r.kernel.as_deref())
            })
            .count(),
    }
}

/// Starts a timer for `summarise`.
pub fn start() -> Instant {
    Instant::now()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workflows::sweep::Verdict;
    use memtrace_overlap::check::analytic_error_percent;

    fn row(monotone: Option<u64>, analytic: Option<u64>, flags: Vec<Flag>, error: bool) -> Row {
        Row {
            name: "config 1".into(),
            source: "job",
            op: "relu".into(),
            dtype: "f32".into(),
            arch: "cortex-m4".into(),
            spec: String::new(),
            short: String::new(),
            instructions: 10,
            events: 4,
            input_bytes: Some(400),
            output_bytes: Some(400),
            exact_bytes: monotone,
            monotone_bytes: monotone,
            reverse_exact_bytes: None,
            reverse_monotone_bytes: None,
            algorithmic_bytes: monotone,
            analytic_bytes: analytic,
            analytic_printed_bytes: None,
            analytic_error_percent: monotone.and_then(|m| analytic_error_percent(m, analytic)),
            verdict: if error {
                Verdict::Error
            } else if flags.is_empty() {
                Verdict::Ok
            } else {
                Verdict::Violation
            },
            flags,
            printed_above_traced: false,
            error: error.then(|| "rejected".to_owned()),
            library: None,
            kernel: None,
            input2: None,
            contract: None,
            output_digest: None,
            unlike_reference: false,
        }
    }

    #[test]
    fn the_summary_counts_each_verdict_and_averages_the_analytic_error() {
        let rows = [
            row(Some(400), Some(300), vec![], false),
            row(Some(200), Some(200), vec![], false),
            row(Some(100), Some(150), vec![Flag::Unsafe], false),
            row(None, None, vec![], true),
        ];
        let s = summarise(&rows, Duration::from_secs(2), 3);
        assert_eq!(
            (s.configs, s.violations, s.errors, s.unsafe_analytic),
            (4, 1, 1, 1)
        );
        // (400-300)/400 = 25 %, 0 %, (100-150)/100 = -50 %: computed by hand.
        assert_eq!(s.max_analytic_error_percent, Some(25.0));
        assert!((s.mean_analytic_error_percent.unwrap() - (-25.0 / 3.0)).abs() < 1e-9);
        assert_eq!(s.configs_per_second, 2.0);
    }
}
