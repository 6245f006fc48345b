//! The trace cache: a second `plan` of the same model traces nothing it
//! traced before, and what it reads back is what a fresh trace gives.
//! `--no-cache` traces again. A damaged entry is a miss, never an error.

use crate::common;
use common::shared_model;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::{path_str, stderr, suite};

fn plan_with_cache(cache: &Path, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_memtrace"))
        .arg("plan")
        .args(args)
        .args(["--overlap", "traced", "--format", "json"])
        .env("CI", "1")
        .env("MEMTRACE_CACHE_DIR", cache)
        .output()
        .expect("memtrace runs")
}

fn plan_json(cache: &Path, args: &[&str]) -> String {
    let out = plan_with_cache(cache, args);
    assert!(out.status.success(), "plan {args:?}: {}", stderr(&out));
    String::from_utf8(out.stdout).unwrap()
}

fn entries(cache: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(cache)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// Every entry rewritten by `f` (the JSON text of the record).
fn rewrite_entries(cache: &Path, f: impl Fn(&str) -> String) {
    for p in entries(cache) {
        let text = std::fs::read_to_string(&p).unwrap();
        std::fs::write(&p, f(&text)).unwrap();
    }
}

fn cached_equals_fresh(args: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path();
    let fresh = plan_json(cache, &[args, &["--no-cache"]].concat());
    assert!(entries(cache).is_empty(), "--no-cache writes no entry");
    let first = plan_json(cache, args);
    let written = entries(cache);
    assert!(!written.is_empty(), "the first plan fills the cache");
    let second = plan_json(cache, args);
    assert_eq!(first, fresh, "{args:?}: a filling run plans as a fresh one");
    assert_eq!(second, fresh, "{args:?}: cached O_s equal a fresh trace");
    assert_eq!(
        entries(cache),
        written,
        "the second plan traced nothing new"
    );

    // The second plan really reads the cache: entries whose O_s were all
    // set to zero give a plan without overlaps ...
    rewrite_entries(cache, zero_overlaps);
    let zeroed = plan_json(cache, args);
    assert_ne!(zeroed, fresh, "{args:?}: the cache was not read");
    // ... while --no-cache traces again.
    assert_eq!(plan_json(cache, &[args, &["--no-cache"]].concat()), fresh);

    // The zeroed plan also filled entries of its own (the arena to allocate
    // of the other plan it chose): only the plan's own are damaged below.
    for p in entries(cache) {
        if !written.contains(&p) {
            std::fs::remove_file(p).unwrap();
        }
    }
    // Damaged entries are misses: traced again, and written back whole.
    rewrite_entries(cache, |_| "{ truncated".into());
    assert_eq!(plan_json(cache, args), fresh, "{args:?}");
    for p in entries(cache) {
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(serde_json::from_str::<serde_json::Value>(&text).is_ok());
    }
}

/// A record's O_s set to zero: a bare number (one layer configuration),
/// every value of the `by_op` and `by_spec` maps, and every `*_bytes` of the
/// per-operator report.
fn zero_overlaps(text: &str) -> String {
    let mut v: serde_json::Value = serde_json::from_str(text).unwrap();
    fn walk(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(o) if o.contains_key("by_op") => {
                for map in ["by_op", "by_spec"] {
                    if let Some(m) = o[map].as_object_mut() {
                        m.values_mut().for_each(|b| *b = 0.into());
                    }
                }
            }
            serde_json::Value::Object(o) if o.contains_key("monotone_bytes") => {
                for k in ["monotone_bytes", "exact_bytes"] {
                    if o[k].is_u64() {
                        o[k] = 0.into();
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(walk),
            // Scratch sizes and the runner's answer are not O_s.
            serde_json::Value::Object(o) => o
                .iter_mut()
                .filter(|(k, _)| !matches!(k.as_str(), "scratch" | "result"))
                .for_each(|(_, v)| walk(v)),
            _ => {}
        }
    }
    if v.is_u64() {
        return "0".into();
    }
    walk(&mut v);
    v.to_string()
}

#[test]
fn layer_configurations_traced_through_a_suite_are_cached() {
    let model = shared_model("mlperf_tiny_kws_ds_cnn_int8.tflite");
    let s = suite("cortex-m4");
    cached_equals_fresh(&[&model, "--suite", path_str(&s)]);
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn a_model_traced_on_real_tflm_is_cached() {
    // `plan`'s default O_s: the model's own run on TFLM.
    let model = shared_model("mlperf_tiny_kws_ds_cnn_int8.tflite");
    for kernels in ["tflm", "cmsis-nn"] {
        cached_equals_fresh(&[&model, "--kernels", kernels]);
    }
}

#[test]
fn a_cache_that_cannot_be_written_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let blocked = dir.path().join("file");
    std::fs::write(&blocked, b"not a folder").unwrap();
    let model = shared_model("mlperf_tiny_kws_ds_cnn_int8.tflite");
    let s = suite("cortex-m4");
    let args = [model.as_str(), "--suite", path_str(&s)];
    let out = plan_with_cache(&blocked, &args);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        plan_json(dir.path(), &[&args[..], &["--no-cache"]].concat())
    );
}

fn verify_json(cache: &Path, args: &[&str]) -> serde_json::Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_memtrace"))
        .arg("verify")
        .args(args)
        .args(["--format", "json"])
        .env("CI", "1")
        .env("MEMTRACE_CACHE_DIR", cache)
        .output()
        .expect("memtrace runs");
    assert!(out.status.success(), "verify {args:?}: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The monotone O_s a verify report's operators traced, summed.
fn traced_monotone_total(v: &serde_json::Value) -> u64 {
    v["traced_overlaps"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|o| o["monotone_bytes"].as_u64())
        .sum()
}

/// A verify report without its timings and cache marks (a run from the
/// cache took no emulator run: its `runs` is 0).
fn untimed(mut v: serde_json::Value) -> serde_json::Value {
    let o = v.as_object_mut().unwrap();
    o.remove("seconds");
    for run in ["reference", "plan"] {
        let r = o[run].as_object_mut().unwrap();
        r.remove("seconds");
        r.remove("cached");
        r.remove("runs");
    }
    v
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn a_second_verify_takes_tflms_own_plan_from_the_cache() {
    let model = shared_model("mlperf_tiny_kws_ds_cnn_int8.tflite");
    for kernels in ["tflm", "cmsis-nn"] {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path();
        let args = [model.as_str(), "--kernels", kernels];
        let fresh = verify_json(cache, &[&args[..], &["--no-cache"]].concat());
        assert!(entries(cache).is_empty(), "--no-cache writes no entry");
        let first = verify_json(cache, &args);
        assert_eq!(first["reference"].get("cached"), None, "{kernels}");
        let second = verify_json(cache, &args);
        assert_eq!(second["reference"]["cached"], true, "{kernels}");
        assert_eq!(untimed(first), untimed(fresh.clone()), "{kernels}");
        assert_eq!(untimed(second), untimed(fresh.clone()), "{kernels}");
        // The plan under test is always run: its trace is the check. With
        // the cached O_s zeroed, verify reports and plans with zero O_s.
        rewrite_entries(cache, zero_overlaps);
        let zeroed = verify_json(cache, &args);
        assert!(traced_monotone_total(&fresh) > 0, "{kernels}");
        assert_eq!(
            traced_monotone_total(&zeroed),
            0,
            "{kernels}: the cached reference was not read"
        );
        assert!(
            zeroed["plan"]["planned_bytes"].as_u64() >= fresh["plan"]["planned_bytes"].as_u64()
        );
    }
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn a_second_verify_plans_by_the_cached_reference_run() {
    let model = shared_model("mlperf_tiny_kws_ds_cnn_int8.tflite");
    for kernels in ["tflm", "cmsis-nn"] {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path();
        let args = [
            model.as_str(),
            "--planner",
            "dmo-heap",
            "--kernels",
            kernels,
        ];
        let fresh = verify_json(cache, &[&args[..], &["--no-cache"]].concat());
        assert!(entries(cache).is_empty(), "--no-cache writes no entry");
        let first = verify_json(cache, &args);
        assert_eq!(first["reference"].get("cached"), None, "{kernels}");
        let written = entries(cache);
        assert!(
            !written.is_empty(),
            "{kernels}: the first verify fills the cache"
        );
        let second = verify_json(cache, &args);
        assert_eq!(second["reference"]["cached"], true, "{kernels}");
        assert_eq!(second["plan"].get("cached"), None, "the plan is always run");
        assert_eq!(entries(cache), written, "{kernels}: nothing traced again");
        assert_eq!(untimed(first), untimed(fresh.clone()), "{kernels}");
        assert_eq!(untimed(second), untimed(fresh.clone()), "{kernels}");
        // With the cached O_s zeroed, verify reports them and plans by them:
        // its dmo-heap plan is the one planned without O_s (--overlap none,
        // a run that reads no O_s at all).
        rewrite_entries(cache, zero_overlaps);
        let zeroed = verify_json(cache, &args);
        assert!(traced_monotone_total(&fresh) > 0, "{kernels}");
        assert_eq!(
            traced_monotone_total(&zeroed),
            0,
            "{kernels}: the cached run was not read"
        );
        let without = verify_json(
            cache,
            &[&args[..], &["--overlap", "none", "--no-cache"]].concat(),
        );
        let planned = |v: &serde_json::Value| v["plan"]["planned_bytes"].as_u64().unwrap();
        assert_eq!(
            planned(&zeroed),
            planned(&without),
            "{kernels}: the plan did not use the cached O_s"
        );
        // On TFLM's reference kernels the traced O_s shrink this plan, so
        // the equality above is not one of two plans that ignore O_s.
        if kernels == "tflm" {
            assert!(planned(&fresh) < planned(&without), "{fresh}");
        }
    }
}
