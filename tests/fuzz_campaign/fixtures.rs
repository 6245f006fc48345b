//! Inputs that once failed, kept under `fixtures/fuzz/<target>/` and run
//! first.

use std::path::PathBuf;

use crate::mutate::Recipe;
use crate::{repo, MAX_FIXTURE};

pub(crate) fn fixture_dir(target: &str) -> PathBuf {
    repo().join("fixtures/fuzz").join(target)
}

pub(crate) fn fnv(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// Keeps a failing input (text or recipe) for the next runs.
pub(crate) fn keep(target: &str, ext: &str, content: &[u8]) {
    if content.len() > MAX_FIXTURE {
        return;
    }
    let dir = fixture_dir(target);
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(dir.join(format!("{}.{ext}", fnv(content))), content);
}

/// Kept inputs of `target` with extension `ext`, sorted by name.
pub(crate) fn kept(target: &str, ext: &str) -> Vec<Vec<u8>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(fixture_dir(target))
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == ext))
                .collect()
        })
        .unwrap_or_default();
    paths.sort();
    paths.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

pub(crate) fn kept_recipes(target: &str) -> Vec<Recipe> {
    kept(target, "json")
        .iter()
        .filter_map(|b| serde_json::from_slice(b).ok())
        .collect()
}
