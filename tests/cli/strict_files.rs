//! The files memtrace reads back — `verify --plan` placements and `regress`
//! baselines — are read strictly: an arena smaller than
//! the plan's tensors is an error naming the tensor, never silently
//! enlarged, and a key the format does not have (a misspelt `"arena_btes"`)
//! is an error naming the key, never ignored.

use crate::common;

use std::path::PathBuf;

use common::*;
use serde_json::Value;

fn scratch(name: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir =
        std::env::temp_dir().join(format!("memtrace-strict-{name}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `verify hello_world --plan TEXT` → (exit code, stdout, stderr).
fn verify_plan(text: &str) -> (Option<i32>, String, String) {
    let dir = scratch("plan");
    let path = dir.join("plan.json");
    std::fs::write(&path, text).unwrap();
    let model = tfmicro_model("hello_world");
    let out = memtrace([
        "verify",
        path_str(&model),
        "--plan",
        path_str(&path),
        "--format",
        "json",
    ]);
    std::fs::remove_dir_all(&dir).unwrap();
    (out.status.code(), stdout(&out), stderr(&out))
}

#[test]
fn a_plan_arena_smaller_than_its_tensors_is_an_error_naming_the_tensor() {
    // Where the graph output sits and how large it is, from an accepted plan.
    let (code, out, err) = verify_plan(r#"{"tensors": [{"name": "Identity", "offset": 0}]}"#);
    assert_eq!(code, Some(0), "{err}");
    let r: Value = serde_json::from_str(&out).unwrap();
    let placed = r["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "Identity")
        .unwrap()
        .clone();
    // Where the file put it, and where TFLM found it when it ran.
    assert_eq!(u(&placed["planned_offset"]), 0, "{r}");
    assert_eq!(u(&placed["tflm_offset"]), 0, "{r}");
    let size = u(&placed["bytes"]);
    let arena = u(&r["plan"]["planned_bytes"]);
    assert!(arena >= size, "{r}");

    for too_small in [0, 1, size - 1] {
        let (code, out, err) = verify_plan(&format!(
            r#"{{"tensors": [{{"name": "Identity", "offset": 0}}], "arena_bytes": {too_small}}}"#
        ));
        assert_eq!(code, Some(1), "arena_bytes {too_small}: {err}");
        assert!(out.is_empty(), "{out}");
        assert!(err.starts_with("error: "), "{err}");
        assert!(
            err.contains("arena_bytes") && err.contains(&format!("{too_small}")),
            "{err}"
        );
        // The tensor that does not fit is named: Identity, or another tensor
        // at its reference offset beyond the small arena.
        assert!(err.contains("tensor `"), "{err}");
    }
    // The arena the accepted plan ran with is accepted when given explicitly.
    let (code, out, err) = verify_plan(&format!(
        r#"{{"tensors": [{{"name": "Identity", "offset": 0}}], "arena_bytes": {arena}}}"#
    ));
    assert_eq!(code, Some(0), "{err}");
    let r: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(u(&r["plan"]["planned_bytes"]), arena);
}

#[test]
fn unknown_keys_in_a_plan_file_are_errors_naming_the_key() {
    for (text, key) in [
        (
            r#"{"tensors": [{"name": "Identity", "offset": 0}], "arena_btes": 64}"#,
            "arena_btes",
        ),
        (
            r#"{"tensors": [{"name": "Identity", "offest": 0, "offset": 0}]}"#,
            "offest",
        ),
    ] {
        let (code, _, err) = verify_plan(text);
        assert_eq!(code, Some(1), "{text}: {err}");
        assert!(err.starts_with("error: "), "{err}");
        assert!(err.contains(&format!("unknown field `{key}`")), "{err}");
    }
}

#[test]
fn unknown_keys_in_a_baseline_are_errors_naming_the_key() {
    let dir = scratch("baseline");
    let base = dir.join("base.json");
    let suite = suite("cortex-m4");
    let out = memtrace([
        "table",
        path_str(&suite),
        "--out",
        path_str(&base),
        "--no-builtin",
        "--grid",
        "op=relu,input=1x4x4x2",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let good: Value = serde_json::from_str(&std::fs::read_to_string(&base).unwrap()).unwrap();
    // The written baseline itself is accepted.
    let out = memtrace(["regress", path_str(&base), path_str(&suite)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    let mut top = good.clone();
    top["memtrace_verison"] = "0.1.0".into();
    let mut row = good.clone();
    row["rows"][0]["monotone_byte"] = 3.into();
    for (doc, key) in [(top, "memtrace_verison"), (row, "monotone_byte")] {
        let path = dir.join(format!("{key}.json"));
        std::fs::write(&path, serde_json::to_string(&doc).unwrap()).unwrap();
        let out = memtrace(["regress", path_str(&path), path_str(&suite)]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.starts_with("error: "), "{err}");
        assert!(err.contains(&format!("unknown field `{key}`")), "{err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
