//! One baseline row against the new build ([`RowChange`]): its traced O_s,
//! kernel, memory contract and instruction count, old and new, and every
//! change between them.

use super::change;
use super::{Change, RowChange, Status, Values};
use crate::support::attribution::kernel_text;
use crate::workflows::baseline::BaselineRow;
use crate::workflows::sweep::Row;

fn known(text: String) -> Option<String> {
    (text != "-").then_some(text)
}

fn delta(new: Option<u64>, old: Option<u64>) -> Option<i64> {
    Some(new? as i64 - old? as i64)
}

fn values(old: &BaselineRow) -> Values {
    Values {
        exact_bytes: old.exact_bytes,
        monotone_bytes: old.monotone_bytes,
        input2_exact_bytes: old.input2_exact_bytes,
        input2_monotone_bytes: old.input2_monotone_bytes,
        instructions: old.instructions,
    }
}

/// The analytic bound exceeds the traced monotone value.
fn analytic_above(analytic: Option<u64>, monotone: Option<u64>) -> bool {
    matches!((analytic, monotone), (Some(a), Some(m)) if a > m)
}

/// `old` against its row in the new build (`None`: the new build does not
/// run it); instruction counts that moved more than `threshold` percent are
/// changes too.
pub(super) fn compare(old: &BaselineRow, new: Option<&Row>, threshold: f64) -> RowChange {
    let mut c = RowChange {
        name: old.name.clone(),
        source: old.source.clone(),
        op: old.op.clone(),
        spec: old.spec.clone(),
        status: Status::Same,
        fails: false,
        changes: Vec::new(),
        old: values(old),
        new: None,
        monotone_delta: None,
        exact_delta: None,
        analytic_now_unsafe: false,
        note: None,
        kernel_before: known(kernel_text(old.library.as_deref(), old.kernel.as_deref())),
        kernel_after: None,
    };
    let Some(new) = new else {
        c.status = Status::Missing;
        c.fails = true;
        c.note = Some("the new binary does not run this layer".into());
        return c;
    };
    if let Some(e) = new.error.as_ref().filter(|_| !new.unlike_reference) {
        c.status = Status::Error;
        c.fails = true;
        c.note = Some(e.clone());
        return c;
    }
    c.kernel_after = known(kernel_text(new.library.as_deref(), new.kernel.as_deref()));
    let input2 = new.input2.as_ref();
    c.new = Some(Values {
        exact_bytes: new.exact_bytes,
        monotone_bytes: new.monotone_bytes,
        input2_exact_bytes: input2.map(|i| i.exact_bytes),
        input2_monotone_bytes: input2.map(|i| i.monotone_bytes),
        instructions: Some(new.instructions),
    });
    c.monotone_delta = delta(new.monotone_bytes, old.monotone_bytes);
    c.exact_delta = delta(new.exact_bytes, old.exact_bytes);
    let overlap = change::overlap_changes(old, new);
    c.status = if overlap.iter().any(Change::breaks) {
        Status::Shrank
    } else if overlap.is_empty() {
        Status::Same
    } else {
        Status::Grew
    };
    c.changes = overlap;
    if new.spec != old.spec {
        c.changes.push(Change::Spec {
            new: new.spec.clone(),
        });
    }
    if let (Some(before), Some(after)) = (&c.kernel_before, &c.kernel_after) {
        if before != after {
            c.changes.push(Change::Kernel {
                before: before.clone(),
                after: after.clone(),
            });
        }
    }
    if let (Some(before), Some(after)) = (&old.contract, &new.contract) {
        c.changes.extend(change::contract_changes(before, after));
    }
    c.changes.extend(change::output_change(old, new));
    if new.unlike_reference {
        c.changes.push(Change::Reference {
            detail: new.error.clone().unwrap_or_default(),
        });
    }
    if let Some(before) = old.instructions {
        c.changes.extend(change::instruction_change(
            before,
            new.instructions,
            threshold,
        ));
    }
    c.fails = c.changes.iter().any(Change::breaks);
    c.analytic_now_unsafe = analytic_above(new.analytic_bytes, new.monotone_bytes)
        && !analytic_above(old.analytic_bytes, old.monotone_bytes);
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workflows::regress::{counts, DEFAULT_INSTRUCTION_THRESHOLD};
    use crate::workflows::sweep::Verdict;

    fn compare_(old: &BaselineRow, new: Option<&Row>) -> RowChange {
        compare(old, new, DEFAULT_INSTRUCTION_THRESHOLD)
    }

    fn kernel_change(c: &RowChange) -> Option<String> {
        c.changes
            .iter()
            .find(|c| matches!(c, Change::Kernel { .. }))
            .map(Change::describe)
    }

    fn old(monotone: u64, exact: u64) -> BaselineRow {
        BaselineRow {
            name: "dw1".into(),
            source: "builtin".into(),
            op: "depthwise_conv2d".into(),
            dtype: "int8".into(),
            arch: "cortex-m4".into(),
            spec: "op=depthwise_conv2d".into(),
            exact_bytes: Some(exact),
            monotone_bytes: Some(monotone),
            reverse_exact_bytes: None,
            reverse_monotone_bytes: None,
            algorithmic_bytes: None,
            analytic_bytes: None,
            library: Some("TFLM reference".into()),
            kernel: Some("tflite::reference_integer_ops::DepthwiseConvPerChannel".into()),
            input2_exact_bytes: None,
            input2_monotone_bytes: None,
            input2_reverse_exact_bytes: None,
            input2_reverse_monotone_bytes: None,
            instructions: Some(1),
            contract: None,
            output_digest: None,
        }
    }

    fn new(monotone: u64, exact: u64, error: Option<&str>) -> Row {
        Row {
            name: "dw1".into(),
            source: "builtin",
            op: "depthwise_conv2d".into(),
            dtype: "int8".into(),
            arch: "cortex-m4".into(),
            spec: "op=depthwise_conv2d".into(),
            short: String::new(),
            instructions: 1,
            events: 1,
            input_bytes: Some(100),
            output_bytes: Some(100),
            exact_bytes: Some(exact),
            monotone_bytes: Some(monotone),
            reverse_exact_bytes: None,
            reverse_monotone_bytes: None,
            algorithmic_bytes: None,
            analytic_bytes: Some(monotone + 1),
            analytic_printed_bytes: None,
            analytic_error_percent: None,
            flags: Vec::new(),
            printed_above_traced: false,
            verdict: Verdict::Ok,
            error: error.map(str::to_owned),
            library: Some("CMSIS-NN".into()),
            kernel: Some("arm_depthwise_conv_3x3_s8".into()),
            input2: None,
            contract: None,
            output_digest: None,
            unlike_reference: false,
        }
    }

    #[test]
    fn a_second_input_whose_o_s_shrinks_fails_like_the_first() {
        // A concatenation whose first input keeps its O_s while the second's
        // drops from its whole size (40 B, the reference kernel) to one
        // chunk (2 B, CMSIS-NN's per-input copies).
        let mut before = old(60, 60);
        before.input2_monotone_bytes = Some(40);
        before.input2_exact_bytes = Some(40);
        let mut after = new(60, 60, None);
        after.input2 = Some(crate::workflows::sweep::InputOverlap {
            input_bytes: 40,
            exact_bytes: 2,
            monotone_bytes: 2,
            reverse_exact_bytes: 0,
            reverse_monotone_bytes: 0,
            algorithmic_bytes: Some(40),
            analytic_bytes: Some(40),
            flags: Vec::new(),
        });
        let c = compare_(&before, Some(&after));
        assert_eq!(c.status, Status::Shrank);
        assert_eq!((c.monotone_delta, c.exact_delta), (Some(0), Some(0)));
        assert_eq!(
            c.changes[..2],
            [
                Change::Overlap {
                    value: "input2 monotone",
                    old: 40,
                    new: 2
                },
                Change::Overlap {
                    value: "input2 exact",
                    old: 40,
                    new: 2
                },
            ]
        );
        assert!(c.fails);
        // Unchanged second input: the row is the same.
        after.input2.as_mut().unwrap().monotone_bytes = 40;
        after.input2.as_mut().unwrap().exact_bytes = 40;
        assert_eq!(compare_(&before, Some(&after)).status, Status::Same);
    }

    #[test]
    fn a_smaller_monotone_or_exact_value_is_a_shrink_and_fails() {
        let c = compare_(&old(64, 80), Some(&new(48, 80, None)));
        assert_eq!(c.status, Status::Shrank);
        assert_eq!(c.monotone_delta, Some(-16));
        assert!(c.fails);
        // Exact alone shrinking is a shrink too.
        assert_eq!(
            compare_(&old(64, 80), Some(&new(64, 72, None))).status,
            Status::Shrank
        );
    }

    #[test]
    fn growth_and_equality_pass() {
        let grew = compare_(&old(64, 80), Some(&new(96, 80, None)));
        assert_eq!((grew.status, grew.monotone_delta), (Status::Grew, Some(32)));
        assert!(!grew.fails);
        let same = compare_(&old(64, 80), Some(&new(64, 80, None)));
        assert_eq!(same.status, Status::Same);
    }

    #[test]
    fn missing_and_untraceable_rows_fail_with_a_note() {
        let missing = compare_(&old(64, 80), None);
        assert_eq!(missing.status, Status::Missing);
        assert!(missing.note.is_some() && missing.fails);
        let failed = compare_(&old(64, 80), Some(&new(0, 0, Some("exit 2"))));
        assert_eq!(failed.status, Status::Error);
        assert_eq!(failed.note.as_deref(), Some("exit 2"));
    }

    #[test]
    fn a_row_that_ran_another_kernel_names_both() {
        let c = compare_(&old(64, 80), Some(&new(48, 80, None)));
        assert_eq!(
            kernel_change(&c).as_deref(),
            Some("kernel `tflite::reference_integer_ops::DepthwiseConvPerChannel` (TFLM reference) → `arm_depthwise_conv_3x3_s8` (CMSIS-NN)")
        );
        // A baseline from before kernel attribution has no `kernel_before`.
        let mut legacy = old(64, 80);
        (legacy.library, legacy.kernel) = (None, None);
        let c = compare_(&legacy, Some(&new(64, 80, None)));
        assert_eq!(
            (c.kernel_before.as_deref(), kernel_change(&c)),
            (None, None)
        );
    }

    #[test]
    fn a_baseline_without_kernel_fields_still_loads() {
        let row: BaselineRow = serde_json::from_str(
            r#"{"name":"dw1","source":"builtin","op":"depthwise_conv2d","dtype":"int8","arch":"cortex-m4","spec":"x","exact_bytes":1,"monotone_bytes":1,"algorithmic_bytes":null,"analytic_bytes":null}"#,
        )
        .unwrap();
        assert_eq!((row.library, row.kernel), (None, None));
    }

    #[test]
    fn an_analytic_bound_newly_above_the_trace_is_flagged_once() {
        // `new` puts the analytic value one byte above the traced monotone.
        assert!(compare_(&old(64, 80), Some(&new(64, 80, None))).analytic_now_unsafe);
        // Above it in the baseline already: not a change, not flagged.
        let mut before = old(64, 80);
        before.analytic_bytes = Some(65);
        assert!(!compare_(&before, Some(&new(64, 80, None))).analytic_now_unsafe);
    }

    #[test]
    fn a_new_contract_violation_fails_a_row_whose_o_s_is_unchanged() {
        use crate::workflows::sweep::{BrokenRule, RowContract};
        let clean = RowContract {
            ok: true,
            broken: Vec::new(),
            scratch: Vec::new(),
        };
        let mut before = old(64, 80);
        before.contract = Some(clean.clone());
        let mut after = new(64, 80, None);
        after.contract = Some(RowContract {
            ok: false,
            broken: vec![BrokenRule {
                rule: "stray_write".into(),
                violations: 1,
                first: "4 B store at 0x20001000".into(),
            }],
            scratch: Vec::new(),
        });
        let c = compare_(&before, Some(&after));
        assert_eq!(c.status, Status::Same);
        assert!(c.fails);
        assert_eq!(counts(std::slice::from_ref(&c)).contract_broken, 1);
        // A baseline without a contract compares none.
        before.contract = None;
        assert!(!compare_(&before, Some(&after)).fails);
    }

    #[test]
    fn other_output_bytes_fail_an_integer_layer_and_are_reported_for_a_float_one() {
        let outputs = |c: &RowChange| -> Vec<Change> {
            c.changes
                .iter()
                .filter(|c| matches!(c, Change::Output { .. }))
                .cloned()
                .collect()
        };
        let (mut before, mut after) = (old(64, 80), new(64, 80, None));
        before.output_digest = Some("00000000000000aa".into());
        after.output_digest = Some("00000000000000aa".into());
        let same = compare_(&before, Some(&after));
        assert!(outputs(&same).is_empty());
        after.output_digest = Some("00000000000000bb".into());
        for (dtype, exact) in [("int8", true), ("int16", true), ("f32", false)] {
            after.dtype = dtype.into();
            let c = compare_(&before, Some(&after));
            assert_eq!(c.fails, same.fails || exact, "{dtype}");
            assert_eq!(c.status, same.status, "O_s unchanged: {dtype}");
            assert!(
                matches!(&outputs(&c)[..], [Change::Output { old, new, exact: e }]
                    if old.ends_with("aa") && new.ends_with("bb") && *e == exact),
                "{dtype}: {:?}",
                c.changes
            );
        }
        // A baseline written before outputs were digested compares none.
        before.output_digest = None;
        assert!(outputs(&compare_(&before, Some(&after))).is_empty());
    }

    #[test]
    fn an_output_unlike_the_reference_kernels_fails_a_traced_row_and_keeps_its_o_s() {
        let why = "the library kernel's output differs from the TFLM reference kernel's on the \
                   same inputs: 3 of 120 bytes differ, the first at byte 0";
        let mut after = new(64, 80, Some(why));
        after.unlike_reference = true;
        let c = compare_(&old(64, 80), Some(&after));
        assert!(c.fails);
        // Traced: its O_s is compared as ever, not an ERROR row.
        assert_eq!(c.status, Status::Same);
        assert_eq!(c.new.as_ref().and_then(|v| v.monotone_bytes), Some(64));
        let reference: Vec<&Change> = c
            .changes
            .iter()
            .filter(|c| matches!(c, Change::Reference { .. }))
            .collect();
        assert_eq!(reference, [&Change::Reference { detail: why.into() }]);
        // A CMSIS-NN kernel ran it, so the suite checked it.
        let n = counts(std::slice::from_ref(&c));
        assert_eq!(
            (n.errors, n.differ_from_reference, n.reference_checked),
            (0, 1, 1)
        );
        // Any other error still makes the row an ERROR without values.
        let failed = compare_(&old(64, 80), Some(&new(64, 80, Some("the guest faulted"))));
        assert_eq!(failed.status, Status::Error);
    }

    #[test]
    fn instruction_changes_are_reported_and_never_fail() {
        let mut after = new(64, 80, None);
        after.instructions = 2;
        let c = compare_(&old(64, 80), Some(&after));
        assert_eq!(
            c.changes.last(),
            Some(&Change::Instructions {
                old: 1,
                new: 2,
                percent: 100.0
            })
        );
        assert!(!c.fails);
        assert_eq!(counts(std::slice::from_ref(&c)).slower, 1);
    }
}
