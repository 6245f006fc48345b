//! The workflows as a library, on the real guests (`make -C harness-c`):
//! what the commands print comes from these values, so they are checked here
//! against a second method each.

use std::path::PathBuf;

use memtrace_driver::workflows::baseline::{tabulate, TableOptions};
use memtrace_driver::workflows::regress::{
    regress, RegressOptions, Status, DEFAULT_INSTRUCTION_THRESHOLD,
};
use memtrace_driver::workflows::run::{run, RunOptions};
use memtrace_driver::workflows::sweep::ConfigSelection;
use memtrace_overlap::algorithmic::algorithmic_overlap;
use memtrace_overlap::configs::DEFAULT_BUDGET;

fn guest(name: &str) -> PathBuf {
    let elf = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../harness-c/build/cortex-m4")
        .join(name);
    assert!(elf.exists(), "build the guests first: make -C harness-c");
    elf
}

fn run_options(elf: PathBuf, exact_time: bool) -> RunOptions {
    RunOptions {
        elf,
        layers: vec!["conv2".into(), "dw1".into()],
        job: None,
        seed: 1,
        events: None,
        plot: None,
        no_overlay: false,
        max_instructions: 2_000_000_000,
        exact_time,
        model: Default::default(),
        engine: None,
    }
}

#[test]
fn run_reports_the_reference_kernels_algorithmic_overlap_on_both_access_paths() {
    let mmio = run(&run_options(guest("suite.elf"), false)).unwrap();
    let hooks = run(&run_options(guest("suite.elf"), true)).unwrap();
    assert_eq!((mmio.access.name(), hooks.access.name()), ("mmio", "hooks"));
    assert_eq!(mmio.layers.len(), 2);
    for (a, b) in mmio.layers.iter().zip(&hooks.layers) {
        let (oa, ob) = (a.overlap.as_ref().unwrap(), b.overlap.as_ref().unwrap());
        assert_eq!(
            (oa.monotone_bytes, oa.exact_bytes),
            (ob.monotone_bytes, ob.exact_bytes)
        );
        // Second method: Algorithm 2 on the layer's spec, no emulator.
        let spec = a.spec.as_ref().expect("built-in layers carry a spec");
        assert_eq!(
            algorithmic_overlap(spec),
            Some(oa.monotone_bytes),
            "{}",
            a.name
        );
    }
}

#[test]
fn a_baseline_regresses_clean_against_itself_and_fails_on_the_reordered_kernel() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("baseline.json");
    let table = tabulate(&TableOptions {
        elf: guest("suite.elf"),
        target: None,
        out: out.clone(),
        no_builtin: false,
        configs: ConfigSelection {
            ops: Vec::new(),
            dtype: "f32".into(),
            configs: 0,
            seed: 1,
            configs_file: None,
            grid: Vec::new(),
            budget: DEFAULT_BUDGET,
            jobs: Some(1),
            max_instructions: 2_000_000_000,
        },
    })
    .unwrap();
    assert!(out.exists());
    assert_eq!(table.baseline.rows.len(), table.rows.len());
    let options = |elf: &str| RegressOptions {
        baseline: out.clone(),
        elf: guest(elf),
        target: None,
        jobs: Some(1),
        max_instructions: 2_000_000_000,
        instruction_threshold: DEFAULT_INSTRUCTION_THRESHOLD,
    };
    let same = regress(&options("suite.elf")).unwrap();
    assert!(same.passed, "{}", same.to_markdown());
    assert!(same.rows.iter().all(|r| r.status == Status::Same));
    let modified = regress(&options("suite-modified.elf")).unwrap();
    assert!(!modified.passed);
    // Only the depthwise kernel differs in suite-modified.elf.
    let shrank: Vec<&str> = modified
        .rows
        .iter()
        .filter(|r| r.status == Status::Shrank)
        .map(|r| r.op.as_str())
        .collect();
    assert!(!shrank.is_empty() && shrank.iter().all(|op| *op == "depthwise_conv2d"));
    assert_eq!(modified.failure_lines().len(), shrank.len());
}
