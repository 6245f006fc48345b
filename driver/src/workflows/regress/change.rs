//! What changed in one layer between a baseline and a new build, each change
//! named with its direction, and which changes can break a user.

use serde::Serialize;

use crate::workflows::baseline::BaselineRow;
use crate::workflows::sweep::{Row, RowContract, ScratchRecord};

/// The contract rule of a scratch buffer used below its declared size.
const SCRATCH_UNUSED: &str = "scratch_unused";

/// The change of a layer's outputs between the baseline and the new build,
/// when both digested them.
pub(crate) fn output_change(old: &BaselineRow, new: &Row) -> Option<Change> {
    let (before, after) = (old.output_digest.as_ref()?, new.output_digest.as_ref()?);
    (before != after).then(|| Change::Output {
        old: before.clone(),
        new: after.clone(),
        exact: matches!(new.dtype.as_str(), "int8" | "int16"),
    })
}

/// One change of a layer's memory behaviour or cost.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Change {
    /// A traced O_s value changed: `value` names it (`monotone`, `exact`,
    /// `reverse monotone`, `reverse exact`, `input2 monotone`, `input2
    /// exact`).
    Overlap {
        /// Which O_s.
        value: &'static str,
        /// Bytes in the baseline.
        old: u64,
        /// Bytes in the new build.
        new: u64,
    },
    /// A rule of the memory contract that held in the baseline is broken.
    NewViolation {
        /// The rule's JSON name.
        rule: String,
        /// Its first violation in the new build.
        first: String,
    },
    /// A rule broken in the baseline holds in the new build.
    ViolationGone {
        /// The rule's JSON name.
        rule: String,
    },
    /// A scratch buffer's declared or used size changed (0 where the
    /// buffer does not exist).
    Scratch {
        /// Buffer name.
        buffer: String,
        /// Declared bytes, baseline → new.
        declared: (u64, u64),
        /// Used bytes, baseline → new.
        used: (u64, u64),
    },
    /// The instruction count changed by more than the threshold.
    Instructions {
        /// Baseline count.
        old: u64,
        /// New count.
        new: u64,
        /// (new − old) / old, percent.
        percent: f64,
    },
    /// Another kernel function ran the layer.
    Kernel {
        /// `` `function` (library) `` in the baseline.
        before: String,
        /// The same in the new build.
        after: String,
    },
    /// What the layer's outputs held when it ended differs: the same
    /// inputs, weights and shapes give other output bytes.
    Output {
        /// FNV-1a digest of the outputs in the baseline.
        old: String,
        /// The same in the new build.
        new: String,
        /// The layer computes in integers (`int8`, `int16`), where a kernel
        /// library is meant to be bit-exact: the difference breaks.
        exact: bool,
    },
    /// The suite's own check failed: the layer's outputs differ from what
    /// TFLM's reference kernel computes on the same inputs, weights and
    /// shapes (the suite runs it after the layer's window, for every layer
    /// a CMSIS-NN kernel ran; CMSIS-NN is meant to be bit-exact with it).
    Reference {
        /// The suite's words: how many bytes differ, of how many, the first.
        detail: String,
    },
    /// The layer's spec text changed (a built-in layer redefined).
    Spec {
        /// The new spec.
        new: String,
    },
}

impl Change {
    /// Whether a plan or a deployment that relied on the baseline can break:
    /// a smaller O_s, a newly broken contract rule, or a scratch buffer the
    /// kernel uses beyond its declared size. A scratch buffer newly left
    /// partly unused (`scratch_unused`) wastes memory but breaks nothing.
    pub fn breaks(&self) -> bool {
        match self {
            Change::Overlap { old, new, .. } => new < old,
            Change::NewViolation { rule, .. } => rule != SCRATCH_UNUSED,
            Change::Scratch { declared, used, .. } => used.1 > declared.1,
            Change::Output { exact, .. } => *exact,
            Change::Reference { .. } => true,
            _ => false,
        }
    }

    /// Whether the change concerns the layer's outputs.
    pub(crate) fn is_output(&self) -> bool {
        matches!(self, Change::Output { .. } | Change::Reference { .. })
    }

    /// Whether the change concerns the memory contract (rules and scratch).
    pub(crate) fn is_contract(&self) -> bool {
        matches!(
            self,
            Change::NewViolation { .. } | Change::ViolationGone { .. } | Change::Scratch { .. }
        )
    }

    /// The change in one line, with its direction.
    pub fn describe(&self) -> String {
        match self {
            Change::Overlap { value, old, new } => format!(
                "{value} O_s {old} → {new} B ({:+}, {})",
                *new as i64 - *old as i64,
                if new < old { "shrank" } else { "grew" }
            ),
            Change::NewViolation { rule, first } => {
                format!("memory contract: new violation of {rule}: {first}")
            }
            Change::ViolationGone { rule } => {
                format!("memory contract: {rule} no longer violated")
            }
            Change::Scratch {
                buffer,
                declared,
                used,
            } => {
                let verdict = if used.1 > declared.1 {
                    format!("declared {} B less than used", used.1 - declared.1)
                } else if declared.1 < declared.0 {
                    "declared smaller, still enough".to_owned()
                } else if declared.1 > declared.0 {
                    "declared larger".to_owned()
                } else {
                    "use changed".to_owned()
                };
                format!(
                    "scratch `{buffer}`: declared {} → {} B, used {} → {} B ({verdict})",
                    declared.0, declared.1, used.0, used.1
                )
            }
            Change::Instructions { old, new, percent } => format!(
                "instructions {old} → {new} ({percent:+.1} %, speed {})",
                if new > old { "regression" } else { "gain" }
            ),
            Change::Kernel { before, after } => format!("kernel {before} → {after}"),
            Change::Output { old, new, exact } => format!(
                "output differs from the baseline's (digest {old} → {new}){}",
                if *exact {
                    ": an integer kernel meant to be bit-exact computes other bytes"
                } else {
                    ": floating-point rounding may move between builds"
                }
            ),
            Change::Reference { detail } => detail.clone(),
            Change::Spec { new } => format!("the layer's spec changed to `{new}`"),
        }
    }
}

/// The O_s values of a baseline row and of a new row, by name.
fn overlap_values(old: &BaselineRow, new: &Row) -> [(&'static str, Option<u64>, Option<u64>); 8] {
    let input2 = new.input2.as_ref();
    [
        ("monotone", old.monotone_bytes, new.monotone_bytes),
        ("exact", old.exact_bytes, new.exact_bytes),
        (
            "reverse monotone",
            old.reverse_monotone_bytes,
            new.reverse_monotone_bytes,
        ),
        (
            "reverse exact",
            old.reverse_exact_bytes,
            new.reverse_exact_bytes,
        ),
        (
            "input2 monotone",
            old.input2_monotone_bytes,
            input2.map(|i| i.monotone_bytes),
        ),
        (
            "input2 exact",
            old.input2_exact_bytes,
            input2.map(|i| i.exact_bytes),
        ),
        (
            "input2 reverse monotone",
            old.input2_reverse_monotone_bytes,
            input2.map(|i| i.reverse_monotone_bytes),
        ),
        (
            "input2 reverse exact",
            old.input2_reverse_exact_bytes,
            input2.map(|i| i.reverse_exact_bytes),
        ),
    ]
}

/// Every O_s value present in both that differs.
pub(crate) fn overlap_changes(old: &BaselineRow, new: &Row) -> Vec<Change> {
    overlap_values(old, new)
        .into_iter()
        .filter_map(|(value, old, new)| match (old, new) {
            (Some(old), Some(new)) if old != new => Some(Change::Overlap { value, old, new }),
            _ => None,
        })
        .collect()
}

fn scratch_of<'a>(c: &'a RowContract, name: &str) -> Option<&'a ScratchRecord> {
    c.scratch.iter().find(|s| s.buffer == name)
}

/// Broken rules and scratch use that differ between two contracts.
pub(crate) fn contract_changes(old: &RowContract, new: &RowContract) -> Vec<Change> {
    let broken = |c: &RowContract, rule: &str| c.broken.iter().any(|b| b.rule == rule);
    let mut changes: Vec<Change> = new
        .broken
        .iter()
        .filter(|b| !broken(old, &b.rule))
        .map(|b| Change::NewViolation {
            rule: b.rule.clone(),
            first: b.first.clone(),
        })
        .collect();
    changes.extend(
        old.broken
            .iter()
            .filter(|b| !broken(new, &b.rule))
            .map(|b| Change::ViolationGone {
                rule: b.rule.clone(),
            }),
    );
    let mut names: Vec<&str> = new.scratch.iter().map(|s| s.buffer.as_str()).collect();
    names.extend(old.scratch.iter().map(|s| s.buffer.as_str()));
    names.sort_unstable();
    names.dedup();
    for name in names {
        let size = |c: &RowContract| {
            scratch_of(c, name).map_or((0, 0), |s| (s.declared_bytes, s.used_bytes))
        };
        let (before, after) = (size(old), size(new));
        if before != after {
            changes.push(Change::Scratch {
                buffer: name.to_owned(),
                declared: (before.0, after.0),
                used: (before.1, after.1),
            });
        }
    }
    changes
}

/// The instruction-count change, when it is beyond `threshold_percent`.
pub(crate) fn instruction_change(old: u64, new: u64, threshold_percent: f64) -> Option<Change> {
    if old == 0 || old == new {
        return None;
    }
    let percent = (new as f64 - old as f64) / old as f64 * 100.0;
    (percent.abs() > threshold_percent).then_some(Change::Instructions { old, new, percent })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workflows::sweep::BrokenRule;

    fn contract(broken: &[&str], scratch: Option<(u64, u64)>) -> RowContract {
        RowContract {
            ok: broken.is_empty(),
            broken: broken
                .iter()
                .map(|r| BrokenRule {
                    rule: (*r).to_owned(),
                    violations: 1,
                    first: format!("first {r}"),
                })
                .collect(),
            scratch: scratch
                .map(|(declared_bytes, used_bytes)| ScratchRecord {
                    buffer: "s".into(),
                    declared_bytes,
                    used_bytes,
                })
                .into_iter()
                .collect(),
        }
    }

    #[test]
    fn a_newly_broken_rule_breaks_and_a_fixed_one_does_not() {
        let c = contract_changes(
            &contract(&["scratch_unused"], None),
            &contract(&["stray_write"], None),
        );
        assert_eq!(c.len(), 2);
        assert!(c[0].breaks());
        assert_eq!(
            c[0].describe(),
            "memory contract: new violation of stray_write: first stray_write"
        );
        assert!(!c[1].breaks());
        assert_eq!(
            c[1].describe(),
            "memory contract: scratch_unused no longer violated"
        );
        // A scratch buffer newly left partly unused wastes, never breaks.
        let c = contract_changes(&contract(&[], None), &contract(&["scratch_unused"], None));
        assert!(!c[0].breaks());
        // Same rules broken: no change at all.
        let same = contract(&["scratch_unused"], Some((64, 48)));
        assert!(contract_changes(&same, &same).is_empty());
    }

    #[test]
    fn scratch_declared_below_its_use_breaks() {
        let c = contract_changes(
            &contract(&[], Some((256, 256))),
            &contract(&[], Some((240, 256))),
        );
        assert_eq!(c.len(), 1);
        assert!(c[0].breaks());
        assert!(
            c[0].describe().contains("declared 16 B less than used"),
            "{}",
            c[0].describe()
        );
        // Declared smaller but enough: a change, not a break.
        let c = contract_changes(
            &contract(&[], Some((256, 200))),
            &contract(&[], Some((240, 200))),
        );
        assert!(!c[0].breaks());
        assert!(c[0]
            .describe()
            .ends_with("(declared smaller, still enough)"));
        // A scratch buffer a release no longer asks for.
        let c = contract_changes(&contract(&[], Some((64, 64))), &contract(&[], None));
        assert_eq!(
            c[0],
            Change::Scratch {
                buffer: "s".into(),
                declared: (64, 0),
                used: (64, 0)
            }
        );
    }

    #[test]
    fn instruction_changes_count_only_beyond_the_threshold() {
        assert_eq!(instruction_change(1000, 1019, 2.0), None);
        let slower = instruction_change(1000, 1100, 2.0).unwrap();
        assert!(slower.describe().contains("+10.0 %, speed regression"));
        assert!(!slower.breaks());
        let faster = instruction_change(1000, 500, 2.0).unwrap();
        assert!(faster.describe().contains("-50.0 %, speed gain"));
        assert_eq!(instruction_change(0, 5, 2.0), None);
    }
}
