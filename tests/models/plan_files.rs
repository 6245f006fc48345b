//! Plan files that round-trip and plans that say whose they are: what
//! `memtrace plan --format json` writes, `verify --plan` takes as is; its
//! provenance (model digest, kernels, target) is checked
//! against the run; `plan --emit-offline` writes a `memtrace_plan` metadata
//! entry that `run` and `verify` read to say whose an embedded
//! `OfflineMemoryAllocation` is.

use crate::common;
use common::shared_model;

use std::path::PathBuf;

use common::{json, memtrace, stderr, stdout};
use memtrace_model::tflite;
use serde_json::Value;

const ZOO: &str = "zoo:mobilenet_v1_0.25_128_int8";

/// A scratch directory, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("memtrace-plan-files-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn path(&self, name: &str) -> String {
        self.0.join(name).display().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// FNV-1a 64, written here independently of memtrace's digest.
fn fnv1a(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// `memtrace ARGS`, asserting success, and its stdout as JSON.
fn ok_json(args: &[&str]) -> Value {
    let out = memtrace(args);
    assert!(
        out.status.success(),
        "memtrace {args:?}: {}{}",
        stdout(&out),
        stderr(&out)
    );
    json(&out)
}

/// `plan MODEL --kernels K --format json ARGS` written to `file`.
fn plan_document(dir: &Scratch, model: &str, kernels: &str, args: &[&str], file: &str) -> Value {
    let mut all = vec!["plan", model, "--kernels", kernels, "--format", "json"];
    all.extend_from_slice(args);
    let doc = ok_json(&all);
    std::fs::write(dir.path(file), doc.to_string()).unwrap();
    doc
}

/// The plan of a `plan` document `verify --plan` takes without
/// `--planner`: the smallest (the first of equals, as `--emit-offline`).
fn smallest(doc: &Value) -> &Value {
    doc["plans"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["peak_bytes"].is_u64())
        .min_by_key(|p| p["peak_bytes"].as_u64())
        .unwrap()
}

/// `verify MODEL --plan FILE --kernels K --format json`.
fn verify_plan(model: &str, plan: &str, kernels: &str, extra: &[&str]) -> Value {
    let mut all = vec![
        "verify",
        model,
        "--plan",
        plan,
        "--kernels",
        kernels,
        "--no-oracle",
        "--format",
        "json",
    ];
    all.extend_from_slice(extra);
    ok_json(&all)
}

/// A model's tensors placed by `plan` (name → offset), graph tensors only.
fn offsets_of(plan: &Value) -> Vec<(String, u64)> {
    plan["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| !t["name"].as_str().unwrap().ends_with("/scratch"))
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_string(),
                t["offset"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Every tensor the verified placement put: on TFLM from the report's
/// `tensors` rows, each at the document plan's offset.
fn assert_tflm_placed_as(report: &Value, plan: &Value) {
    let rows = report["tensors"].as_array().unwrap();
    let expected = offsets_of(plan);
    assert!(!expected.is_empty());
    for (name, offset) in &expected {
        let row = rows
            .iter()
            .find(|r| r["name"] == name.as_str())
            .unwrap_or_else(|| panic!("no row `{name}` in {report}"));
        assert_eq!(row["planned_offset"].as_u64(), Some(*offset), "{row}");
        assert_eq!(row["tflm_offset"].as_u64(), Some(*offset), "{row}");
    }
}

/// No clobbered read and outputs bit-exact.
fn assert_clean(v: &Value) {
    assert_eq!(v["clobbers"], serde_json::json!([]), "{v}");
    assert_eq!(v["bit_exact"], true, "{v}");
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn a_plan_document_round_trips() {
    let dir = Scratch::new("round-trip");
    let kws = shared_model("mlperf_tiny_kws_ds_cnn_int8.tflite");
    for model in [ZOO, kws.as_str()] {
        for kernels in ["tflm", "cmsis-nn"] {
            {
                // Every planner (the default), then one.
                let all = plan_document(&dir, model, kernels, &[], "all.json");
                let one = plan_document(&dir, model, kernels, &["--planner", "exact"], "one.json");
                let p = &all["provenance"];
                assert_eq!(p["kernels"], kernels);
                assert_eq!(p["target"], "cortex-m4");
                assert_eq!(p["runtime"], "tflm");
                {
                    let what = format!("{model} {kernels}");
                    let v = verify_plan(model, &dir.path("all.json"), kernels, &[]);
                    assert_clean(&v);
                    let taken = smallest(&all);
                    assert_tflm_placed_as(&v, taken);
                    let note = v["plan_taken"].as_str().unwrap();
                    assert!(
                        note.contains(taken["planner"].as_str().unwrap())
                            && note.contains("smallest"),
                        "{what}: {note}"
                    );
                    assert_eq!(v["plan"]["planned_bytes"], taken["peak_bytes"], "{what}");
                    let v = verify_plan(model, &dir.path("one.json"), kernels, &[]);
                    assert_clean(&v);
                    assert_tflm_placed_as(&v, &one["plans"][0]);
                    assert!(v["plan_taken"].as_str().unwrap().contains("its only plan"));
                }
            }
        }
    }
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn planner_picks_one_plan_of_a_document() {
    let dir = Scratch::new("pick");
    let doc = plan_document(&dir, ZOO, "tflm", &[], "all.json");
    let file = dir.path("all.json");
    for planner in ["linear", "tflm-greedy", "exact"] {
        let v = verify_plan(ZOO, &file, "tflm", &["--planner", planner]);
        assert_clean(&v);
        let row = doc["plans"]
            .as_array()
            .unwrap()
            .iter()
            .rev()
            .find(|p| p["planner"] == planner)
            .unwrap();
        assert_tflm_placed_as(&v, row);
        assert!(v["plan_taken"].as_str().unwrap().contains(planner), "{v}");
    }
    // dmo-heap has a row with and one without overlaps: --overlap none
    // takes the one without.
    let v = verify_plan(
        ZOO,
        &file,
        "tflm",
        &["--planner", "dmo-heap", "--overlap", "none"],
    );
    assert!(v["plan_taken"]
        .as_str()
        .unwrap()
        .contains("dmo-heap (none O_s)"));
    // A plain placement has nothing to pick.
    std::fs::write(dir.path("plain.json"), r#"{"tensors": []}"#).unwrap();
    let out = memtrace([
        "verify",
        ZOO,
        "--plan",
        &dir.path("plain.json"),
        "--planner",
        "exact",
        "--no-oracle",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("single placement"),
        "{}",
        stderr(&out)
    );
}

/// `zoo export ZOO OUT` (seed 1, as `plan` reads the zoo model).
fn export_zoo(out: &str) {
    let r = memtrace(["zoo", "export", ZOO, out]);
    assert!(r.status.success(), "{}", stderr(&r));
}

/// `verify MODEL --plan FILE ARGS`: exit 1, nothing on stdout, and the
/// error (returned).
fn refused(model: &str, plan: &str, args: &[&str]) -> String {
    let mut all = vec!["verify", model, "--plan", plan, "--no-oracle"];
    all.extend_from_slice(args);
    let out = memtrace(&all);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(err.starts_with("error: "), "{err}");
    err
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn a_plan_of_another_model_kernels_or_target_is_refused_naming_both() {
    let dir = Scratch::new("refused");
    let exported = dir.path("mobilenet.tflite");
    export_zoo(&exported);
    let doc = plan_document(&dir, ZOO, "cmsis-nn", &[], "plan.json");
    let file = dir.path("plan.json");
    // The digest the plan carries is the exported model's bytes' FNV-1a.
    let ours = fnv1a(&std::fs::read(&exported).unwrap());
    assert_eq!(doc["provenance"]["model_digest"], ours.as_str());
    // Another model.
    let hello = shared_model("tflm_hello_world_int8.tflite");
    let theirs = fnv1a(&std::fs::read(&hello).unwrap());
    let err = refused(&hello, &file, &["--kernels", "cmsis-nn"]);
    assert!(err.contains(&ours) && err.contains(&theirs), "{err}");
    assert!(err.contains("another model"), "{err}");
    // Other kernels.
    let err = refused(ZOO, &file, &["--kernels", "tflm"]);
    assert!(
        err.contains("cmsis-nn") && err.contains("not tflm"),
        "{err}"
    );
    assert!(err.contains("--allow-foreign-plan"), "{err}");
    // Another target: the same plan, said to be made for x86-64.
    let mut other_target = doc.clone();
    other_target["provenance"]["target"] = "x86-64".into();
    let elsewhere = dir.path("x86-plan.json");
    std::fs::write(&elsewhere, other_target.to_string()).unwrap();
    let err = refused(ZOO, &elsewhere, &["--kernels", "cmsis-nn"]);
    assert!(err.contains("cortex-m4") && err.contains("x86-64"), "{err}");
    // The exported file is the same model as the zoo's: taken.
    let v = verify_plan(&exported, &file, "cmsis-nn", &[]);
    assert_clean(&v);
}

/// `plan MODEL --kernels tflm --emit-offline OUT`.
fn emit_reference_plan(dir: &Scratch, model: &str, out: &str) -> String {
    let dest = dir.path(out);
    let r = memtrace(["plan", model, "--kernels", "tflm", "--emit-offline", &dest]);
    assert!(r.status.success(), "{}", stderr(&r));
    dest
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn an_embedded_plan_says_whose_it_is() {
    let dir = Scratch::new("embedded");
    let plain = dir.path("mobilenet.tflite");
    export_zoo(&plain);
    let embedded = emit_reference_plan(&dir, &plain, "embedded.tflite");
    let bytes = std::fs::read(&embedded).unwrap();
    // The metadata names memtrace's plan and the model it was made from.
    let note = tflite::read_metadata(&bytes, tflite::PLAN_METADATA)
        .unwrap()
        .expect("a memtrace_plan entry");
    let note: Value = serde_json::from_slice(&note).unwrap();
    assert_eq!(note["kernels"], "tflm");
    assert_eq!(note["target"], "cortex-m4");
    assert_eq!(note["overlap_source"], "traced");
    assert!(note["planner"].is_string(), "{note}");
    // The TFLM build is the reference runner's bytes' digest.
    let runner = common::guest("cortex-m4", "tflm-runner");
    assert_eq!(
        note["tflm_build"],
        fnv1a(&std::fs::read(&runner).unwrap()).as_str(),
        "{}",
        runner.display()
    );
    assert_eq!(
        note["model_digest"],
        fnv1a(&std::fs::read(&plain).unwrap()).as_str()
    );

    // run on the kernels it was made for: no warning.
    let r = memtrace(["run", &embedded, "--kernels", "tflm", "--format", "json"]);
    assert!(r.status.success(), "{}", stderr(&r));
    assert!(
        !stderr(&r).contains("embedded offline plan"),
        "{}",
        stderr(&r)
    );
    let v = json(&r);
    assert!(v["tflm"]["embedded_plan"]
        .as_str()
        .unwrap()
        .starts_with("memtrace's plan"));
    assert!(v["tflm"].get("embedded_plan_warning").is_none(), "{v}");

    // run on CMSIS-NN: a loud warning naming both libraries and what to do.
    let r = memtrace([
        "run",
        &embedded,
        "--kernels",
        "cmsis-nn",
        "--format",
        "json",
    ]);
    assert!(r.status.success(), "{}", stderr(&r));
    let err = stderr(&r);
    let first = err.lines().next().unwrap_or_default();
    for needle in [
        "WARNING: the model's embedded offline plan",
        "for the tflm kernels",
        "on the cmsis-nn kernels",
        "--kernels cmsis-nn --emit-offline",
        "memtrace verify",
    ] {
        assert!(first.contains(needle), "`{needle}` not in {first}");
    }
    let v = json(&r);
    assert!(
        v["tflm"]["embedded_plan_warning"]
            .as_str()
            .unwrap()
            .contains("cmsis-nn"),
        "{v}"
    );

    // verify on CMSIS-NN: the embedded plan, with its provenance, is the
    // culprit.
    let r = memtrace(["verify", &embedded, "--kernels", "cmsis-nn", "--no-oracle"]);
    assert_eq!(r.status.code(), Some(1), "{}{}", stdout(&r), stderr(&r));
    let out = stdout(&r);
    let culprit = out
        .lines()
        .find(|l| l.starts_with("culprit: "))
        .unwrap_or_else(|| panic!("no culprit in {out}"));
    for needle in [
        "embedded offline plan",
        "memtrace's plan",
        "kernels tflm",
        "unsafe on the cmsis-nn kernels",
        "operator `2:CONV_2D:conv_pw_1` reads `conv_dw_1`",
    ] {
        assert!(culprit.contains(needle), "`{needle}` not in {culprit}");
    }
    assert!(!out.contains("no plan can be proven against this run"));
    let err = stderr(&r);
    assert!(
        err.contains("WARNING: the model's embedded offline plan")
            && err.contains("This verify checks it on cmsis-nn"),
        "{err}"
    );

    // The same offsets without memtrace's note: unknown origin.
    let stripped = tflite::strip_metadata(&bytes, tflite::PLAN_METADATA)
        .unwrap()
        .expect("stripped");
    assert!(tflite::read_offline(&stripped).unwrap().is_some());
    let foreign = dir.path("foreign.tflite");
    std::fs::write(&foreign, &stripped).unwrap();
    let v = ok_json(&["run", &foreign, "--kernels", "cmsis-nn", "--format", "json"]);
    assert!(v["tflm"]["embedded_plan"]
        .as_str()
        .unwrap()
        .contains("unknown origin"));
    let r = memtrace([
        "verify",
        &foreign,
        "--kernels",
        "cmsis-nn",
        "--no-oracle",
        "--format",
        "json",
    ]);
    let v = json(&r);
    assert_eq!(v["embedded_plan_origin"]["origin"], "unknown", "{v}");
    let r = memtrace(["verify", &foreign, "--kernels", "cmsis-nn", "--no-oracle"]);
    let culprit = stdout(&r);
    assert!(
        culprit.contains("culprit: ") && culprit.contains("unknown origin"),
        "{culprit}"
    );
    // Nothing to warn about kernels: nobody said which it was made for.
    assert!(!stderr(&r).contains("made by memtrace"), "{}", stderr(&r));
}
