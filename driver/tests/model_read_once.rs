//! Every command reads its model once: the `.tflite` bytes a user gives are
//! decoded one time per command, and every workflow queries that one value
//! (graph, memtrace's model, the offline plan, who made it). Checked by
//! counting the decodes of each distinct content ([`DecodeLog`]) around the
//! workflows as the binary calls them, on a real model and on the copy
//! `plan --emit-offline` writes of it (which carries an offline plan, so
//! the stripped copy TFLM's own plan starts from is made too).
//!
//! One test in its own binary: the count is of the whole process.

use std::path::{Path, PathBuf};

use memtrace_driver::runtime::kernels::Kernels;
use memtrace_driver::runtime::trace_cache::TraceCache;
use memtrace_driver::support::provenance::OverlapChoice;
use memtrace_driver::workflows::cold::{cold, ColdOptions};
use memtrace_driver::workflows::plan::{plan, PlanRequest};
use memtrace_driver::workflows::run::{run, RunOptions};
use memtrace_driver::workflows::verify::{verify, VerifyOptions};
use memtrace_model::source::{DecodeLog, ModelSource};
use memtrace_tracer::Arch;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn hello_world() -> PathBuf {
    let path = repo().join("../shared/models/tflm_hello_world_int8.tflite");
    assert!(path.exists(), "{} is missing", path.display());
    let runner = repo().join("harness-c/build/cortex-m4/tflm-runner.elf");
    assert!(runner.exists(), "build the runners first: make build");
    path
}

fn plan_request(model: &Path, emit: Option<PathBuf>) -> PlanRequest {
    PlanRequest {
        model: ModelSource::File(model.to_owned()),
        planner: None,
        overlap: None,
        allow_foreign_overlap: false,
        kernels: Kernels::Tflm,
        target: Arch::CortexM4,
        more_targets: Vec::new(),
        suite: None,
        plot: None,
        emit_offline: emit,
        alignment: 16,
        spill: Default::default(),
        cache: TraceCache::new(false),
        fits: None,
    }
}

fn verify_options(model: &Path) -> VerifyOptions {
    VerifyOptions {
        model: ModelSource::File(model.to_owned()),
        planner: None,
        overlap: OverlapChoice::Traced,
        plan: None,
        seed: 1,
        input: None,
        target: Arch::CortexM4,
        kernels: Kernels::Tflm,
        overlap_kernels: None,
        runner: None,
        plot: None,
        baseline: false,
        max_instructions: 2_000_000_000,
        spill: Default::default(),
        allow_foreign_plan: false,
        deploy: Default::default(),
        cache: TraceCache::new(false),
        oracle: false,
        embedded_plan: true,
        pick: None,
    }
}

fn cold_options(model: &Path) -> ColdOptions {
    ColdOptions {
        model: ModelSource::File(model.to_owned()),
        seed: 1,
        input: None,
        target: Arch::CortexM4,
        kernels: Kernels::Tflm,
        runner: None,
        plot: None,
        plot_instructions: false,
        out: None,
        exact_time: false,
        max_instructions: 2_000_000_000,
    }
}

fn run_options(model: &Path) -> RunOptions {
    RunOptions {
        elf: model.to_owned(),
        layers: Vec::new(),
        job: None,
        seed: 1,
        events: None,
        plot: None,
        no_overlay: false,
        max_instructions: 2_000_000_000,
        exact_time: false,
        model: Default::default(),
        engine: None,
    }
}

/// How often `command` decoded `bytes`.
fn decodes(log: &DecodeLog, bytes: &[u8], command: impl FnOnce()) -> usize {
    let before = log.decodes_of(bytes);
    command();
    log.decodes_of(bytes) - before
}

#[test]
fn every_command_decodes_the_model_it_is_given_once() {
    let model = hello_world();
    let dir = tempfile::tempdir().unwrap();
    let planned = dir.path().join("hello_planned.tflite");
    let log = DecodeLog::start();
    let given = std::fs::read(&model).unwrap();

    // The log sees a decode: the count can fail.
    let seen = decodes(&log, &given, || {
        memtrace_model::graph::read_graph(&given).unwrap();
    });
    assert_eq!(seen, 1, "a read_graph is one decode");

    let n = decodes(&log, &given, || {
        plan(&plan_request(&model, Some(planned.clone()))).unwrap();
    });
    assert_eq!(n, 1, "plan --emit-offline");
    let with_plan = std::fs::read(&planned).unwrap();
    assert_ne!(with_plan, given, "the emitted copy carries the plan");
    assert!(memtrace_model::tflite::read_offline(&with_plan)
        .unwrap()
        .is_some());

    for model in [&model, &planned] {
        let bytes = std::fs::read(model).unwrap();
        let name = model.file_name().unwrap().to_string_lossy().into_owned();
        let n = decodes(&log, &bytes, || {
            let report = verify(&verify_options(model)).unwrap();
            assert!(report.ok(), "verify {name}");
        });
        assert_eq!(n, 1, "verify {name}");
        let n = decodes(&log, &bytes, || {
            cold(&cold_options(model)).unwrap();
        });
        assert_eq!(n, 1, "cold {name}");
        let n = decodes(&log, &bytes, || {
            let report = run(&run_options(model)).unwrap();
            assert!(!report.layers.is_empty(), "run {name}");
        });
        assert_eq!(n, 1, "run {name}");
    }
}
