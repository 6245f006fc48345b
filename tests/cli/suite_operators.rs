//! Every operator of the kernel suite is taught at each step ARCHITECTURE.md
//! ("Adding an operator") lists for a suite operator: a step missed for a
//! new operator fails here, naming the operator and the step.

use crate::common;

use common::*;
use memtrace_abi::spec::{Dtype, LayerSpec, OpKind};
use memtrace_overlap::algorithmic::algorithmic_overlap;
use memtrace_overlap::analytic::analytic_overlap;
use memtrace_overlap::configs::{try_random_configs, DEFAULT_BUDGET};

#[test]
fn every_suite_operator_is_taught_at_every_step() {
    let suite = common::suite("cortex-m4");
    for op in OpKind::SUITE {
        // 1. The operator table: a job code, and a name that reads back.
        assert!(op.job_code().is_some(), "{op:?}: no job code in op.rs");
        assert_eq!(op.name().parse::<OpKind>().ok(), Some(op), "{op:?}");
        for dtype in [Dtype::Float32, Dtype::Int8] {
            // 7. Random configurations (configs.rs).
            let specs = try_random_configs(op, dtype, 2, 7, DEFAULT_BUDGET)
                .unwrap_or_else(|e| panic!("{op:?} {dtype}: configs.rs: {e}"));
            assert_eq!(specs.len(), 2, "{op:?} {dtype}: configs.rs gives none");
            for spec in &specs {
                // 5. Its fields: the canonical text parses back.
                let text = spec.to_string();
                assert_eq!(LayerSpec::parse(&text).as_ref(), Ok(spec), "{text}");
                // 7. Both O_s methods know it.
                let loop_nest = algorithmic_overlap(spec)
                    .unwrap_or_else(|| panic!("{text}: no loop nest in algorithmic.rs"));
                let closed_form = analytic_overlap(spec)
                    .unwrap_or_else(|| panic!("{text}: no closed form in analytic.rs"));
                assert!(closed_form <= loop_nest, "{text}");
                // 8. The suite runs it, prints the host's text for it, and
                // its trace gives the loop nest's O_s.
                let layer = run_job(&suite, &text);
                assert_eq!(layer["params"], text.as_str(), "{text}: spec_text.cc");
                assert_eq!(
                    u(&layer["overlap"]["monotone_bytes"]),
                    loop_nest,
                    "{text}: the suite's kernel walks another loop nest"
                );
            }
        }
    }
}
