//! The memory contract as each access path sees it, before `memtrace run`
//! re-traces violating layers for exact PCs: the MMIO path finds the same
//! violations as the hook path — same rules, counts, buffers, offsets, sizes,
//! nearest buffers and scratch use — with the PC and time of the block that
//! made them, in the same function, and without the callers (its callbacks
//! see no registers to unwind).

use std::path::PathBuf;

use memtrace_analyzer::contract::{ContractCheck, ContractReport};
use memtrace_tracer::{trace, AccessPath, ElfImage, TraceOptions};

fn guest(target: &str, name: &str) -> PathBuf {
    let elf = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../harness-c/build")
        .join(target)
        .join(name);
    assert!(elf.exists(), "build the guests first: make -C harness-c");
    elf
}

fn contract(image: &ElfImage, access: AccessPath) -> Vec<ContractReport> {
    let mut check = ContractCheck::default();
    let summary = trace(
        image,
        TraceOptions {
            access,
            stray_writes: true,
            ..TraceOptions::default()
        },
        &mut [&mut check],
    )
    .unwrap();
    assert_eq!((summary.access, summary.exit_code), (access, 0));
    check.layers
}

/// The report without PCs, times and callers.
fn placeless(mut c: ContractReport) -> ContractReport {
    for v in c.violations_with_pc_mut() {
        v.pc = Some(0);
        v.t = Some(0);
        v.return_addresses.clear();
    }
    c
}

#[test]
fn both_access_paths_find_the_same_violations_in_the_same_functions() {
    for target in ["cortex-m4", "x86_64"] {
        let image = ElfImage::load(&guest(target, "contract.elf")).unwrap();
        let exact = contract(&image, AccessPath::Hooks);
        let fast = contract(&image, AccessPath::Mmio);
        assert_eq!(exact.len(), 6, "{target}");
        assert_eq!(
            exact.iter().filter(|c| !c.ok).count(),
            5,
            "{target}: five layers break a rule"
        );
        for (f, e) in fast.iter().zip(&exact) {
            for (fv, ev) in f.violations_with_pc().zip(e.violations_with_pc()) {
                let (fpc, epc) = (fv.pc.unwrap(), ev.pc.unwrap());
                assert!(fpc <= epc && fv.t <= ev.t, "{target}: {fv:?} vs {ev:?}");
                assert_eq!(
                    image.function_at(fpc),
                    image.function_at(epc),
                    "{target}: block and instruction in one function"
                );
            }
            assert_eq!(placeless(f.clone()), placeless(e.clone()), "{target}");
        }
    }
}
