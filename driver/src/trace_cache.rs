//! Traced results kept on disk, like a compiler cache: a model traced once
//! for its O_s is not traced again while the guest ELF, the model and the
//! inputs stay byte-identical.
//!
//! * **Key**: SHA-256 over a record kind, this memtrace build (its
//!   executable's size and time: a rebuilt tracer traces again), the guest
//!   ELF's bytes and the bytes the run depends on (model, inputs), each
//!   length-prefixed. Any change to the runner build, the kernel library
//!   compiled into it or the model gives a new key; nothing is ever
//!   invalidated in place.
//! * **Where**: `$MEMTRACE_CACHE_DIR`, else `$XDG_CACHE_HOME/memtrace/traces`,
//!   else `~/.cache/memtrace/traces`. One JSON file per key.
//! * **Concurrent writers**: an entry is written to a temporary file in the
//!   same folder and renamed over its name, so a reader sees a whole entry
//!   or none; two writers of one key write the same bytes.
//! * **Bounded**: after a write, the least recently used entries go until
//!   the folder holds at most [`MAX_BYTES`] (reads refresh an entry's time).
//! * A missing, unreadable or malformed entry is a miss; a cache that
//!   cannot be written is skipped. The cache never fails a run.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use memtrace_model::Model;
use serde::de::DeserializeOwned;
use serde::Serialize;
use sha2::{Digest, Sha256};

/// Size bound of the cache folder.
pub const MAX_BYTES: u64 = 256 << 20;

/// The cache, or no cache (`--no-cache`, or no folder to put it in).
#[derive(Clone, Debug)]
pub struct TraceCache {
    dir: Option<PathBuf>,
}

impl TraceCache {
    /// The user's cache when `enabled`, else none.
    pub fn new(enabled: bool) -> TraceCache {
        TraceCache {
            dir: enabled.then(default_dir).flatten(),
        }
    }

    /// A cache in `dir`.
    pub fn at(dir: PathBuf) -> TraceCache {
        TraceCache { dir: Some(dir) }
    }

    /// The key of a record of `kind` computed from `parts`.
    pub fn key(kind: &str, parts: &[&[u8]]) -> String {
        let mut h = Sha256::new();
        let head = [kind.as_bytes(), this_build().as_bytes()];
        for part in head.into_iter().chain(parts.iter().copied()) {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part);
        }
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The bytes a model contributes to a key: its graph, shapes and
    /// quantisation, and every constant's data (which its serialised form
    /// leaves out, and on which outputs depend).
    pub fn model_part(model: &Model) -> Vec<u8> {
        let mut bytes = serde_json::to_vec(model).unwrap_or_default();
        for t in &model.tensors {
            let data = t.data.as_deref().unwrap_or_default();
            bytes.extend((data.len() as u64).to_le_bytes());
            bytes.extend(data);
        }
        bytes
    }

    fn path(&self, key: &str) -> Option<PathBuf> {
        Some(self.dir.as_ref()?.join(format!("{key}.json")))
    }

    /// The record under `key`, if there is a readable one.
    pub fn get<T: DeserializeOwned>(&self, key: &str) -> Option<T> {
        let path = self.path(key)?;
        let text = std::fs::read(&path).ok()?;
        let value = serde_json::from_slice(&text).ok()?;
        // Least recently *used*: a hit refreshes the entry.
        if let Ok(f) = std::fs::File::options().append(true).open(&path) {
            let _ = f.set_modified(SystemTime::now());
        }
        Some(value)
    }

    /// The record under `key`, or `compute`'s value, stored under `key`.
    pub fn fetch<T: Serialize + DeserializeOwned>(
        &self,
        key: &str,
        compute: impl FnOnce() -> crate::error::Result<T>,
    ) -> crate::error::Result<T> {
        if let Some(value) = self.get(key) {
            return Ok(value);
        }
        let value = compute()?;
        self.put(key, &value);
        Ok(value)
    }

    /// Stores `value` under `key` (best effort), then trims the folder.
    pub fn put<T: Serialize>(&self, key: &str, value: &T) {
        let (Some(dir), Some(path)) = (self.dir.as_ref(), self.path(key)) else {
            return;
        };
        let Ok(bytes) = serde_json::to_vec(value) else {
            return;
        };
        if std::fs::create_dir_all(dir).is_err() {
            return;
        }
        let Ok(mut tmp) = tempfile::NamedTempFile::new_in(dir) else {
            return;
        };
        if std::io::Write::write_all(&mut tmp, &bytes).is_err() || tmp.persist(&path).is_err() {
            return;
        }
        trim(dir, MAX_BYTES);
    }
}

/// This memtrace build: version, and the size and modification time of the
/// running executable (read once per process).
fn this_build() -> &'static str {
    static BUILD: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BUILD.get_or_init(read_build)
}

fn read_build() -> String {
    let exe = std::env::current_exe()
        .ok()
        .and_then(|p| std::fs::metadata(p).ok());
    let (len, time) = exe.map_or((0, 0), |m| {
        let t = m
            .modified()
            .ok()
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        (m.len(), t)
    });
    format!("{} {len} {time}", env!("CARGO_PKG_VERSION"))
}

fn default_dir() -> Option<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(dir) = var("MEMTRACE_CACHE_DIR") {
        return Some(PathBuf::from(dir));
    }
    let base = var("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("memtrace").join("traces"))
}

/// Removes the least recently used entries of `dir` until it holds at most
/// `max` bytes.
fn trim(dir: &Path, max: u64) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut files: Vec<(SystemTime, u64, PathBuf)> = entries
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            Some((m.modified().ok()?, m.len(), e.path()))
        })
        .collect();
    let mut total: u64 = files.iter().map(|f| f.1).sum();
    files.sort();
    for (_, len, path) in files {
        if total <= max {
            break;
        }
        if std::fs::remove_file(&path).is_ok() {
            total -= len;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_separate_their_parts() {
        // "ab" + "c" and "a" + "bc" are different inputs.
        let a = TraceCache::key("k", &[b"ab", b"c"]);
        let b = TraceCache::key("k", &[b"a", b"bc"]);
        assert_ne!(a, b);
        assert_ne!(a, TraceCache::key("other", &[b"ab", b"c"]));
        assert_eq!(a, TraceCache::key("k", &[b"ab", b"c"]));
        assert_eq!(a.len(), 64);
    }

    #[test]
    fn a_record_round_trips_and_a_bad_one_is_a_miss() {
        let dir = tempfile::tempdir().unwrap();
        let cache = TraceCache::at(dir.path().to_path_buf());
        cache.put("k1", &vec![1u64, 2, 3]);
        assert_eq!(cache.get::<Vec<u64>>("k1"), Some(vec![1, 2, 3]));
        assert_eq!(cache.get::<Vec<u64>>("k2"), None);
        std::fs::write(dir.path().join("k3.json"), b"{ not json").unwrap();
        assert_eq!(cache.get::<Vec<u64>>("k3"), None);
        assert_eq!(TraceCache::new(false).get::<Vec<u64>>("k1"), None);
    }

    #[test]
    fn the_least_recently_used_entries_go_first() {
        let dir = tempfile::tempdir().unwrap();
        let cache = TraceCache::at(dir.path().to_path_buf());
        let old = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        for (i, key) in ["a", "b", "c"].iter().enumerate() {
            cache.put(key, &vec![0u8; 100]);
            let f = std::fs::File::options()
                .append(true)
                .open(dir.path().join(format!("{key}.json")))
                .unwrap();
            f.set_modified(old + std::time::Duration::from_secs(i as u64))
                .unwrap();
        }
        // Reading "a" makes it the most recently used.
        assert!(cache.get::<Vec<u8>>("a").is_some());
        let one = std::fs::metadata(dir.path().join("a.json")).unwrap().len();
        trim(dir.path(), 2 * one);
        let left = |k: &str| dir.path().join(format!("{k}.json")).exists();
        assert!(left("a") && left("c") && !left("b"));
    }
}
