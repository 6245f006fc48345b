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
//!   else `~/.cache/memtrace/traces`. One JSON file per key, named
//!   `trace-<key>.json` (the key's 64 hex digits).
//! * **Owns what it touches**: it reads, refreshes and deletes only regular
//!   files of its own naming that belong to the user, never through a
//!   symbolic link, and never blocks on what sits at an entry's path (a FIFO
//!   is a miss). A cache folder that is not the user's or that others may
//!   write to is not used (with a warning): anyone who can write there could
//!   plant entries or links.
//! * **Concurrent writers**: an entry is written to a temporary file in the
//!   same folder and renamed over its name, so a reader sees a whole entry
//!   or none; two writers of one key write the same bytes.
//! * **Bounded**: after a write, the least recently used entries go until
//!   the folder holds at most [`MAX_BYTES`] (reads refresh an entry's time).
//! * A missing, unreadable or malformed entry is a miss; a cache that
//!   cannot be written is skipped. The cache never fails a run.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

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

    /// The entry file of `key`; none for what is not a key (keys are
    /// [`TraceCache::key`]'s hex digests, so a name can never leave the
    /// folder or collide with a file of another program).
    fn path(&self, key: &str) -> Option<PathBuf> {
        let dir = self.dir.as_ref()?;
        is_key(key).then(|| dir.join(entry_name(key)))
    }

    /// The cache folder, if it exists and is safe to use ([`safe_dir`]).
    fn usable_dir(&self) -> Option<&Path> {
        let dir = self.dir.as_deref()?;
        match safe_dir(dir) {
            Ok(()) => Some(dir),
            Err(why) => {
                warn_once(dir, &why);
                None
            }
        }
    }

    /// The record under `key`, if there is a readable one.
    pub fn get<T: DeserializeOwned>(&self, key: &str) -> Option<T> {
        let path = self.path(key)?;
        if !self.dir.as_deref()?.exists() {
            return None;
        }
        self.usable_dir()?;
        let file = open_entry(&path)?;
        let text =
            memtrace_io::input::read_open_limited(&path, file, MAX_BYTES, "cache entries").ok()?;
        let value = serde_json::from_slice(&text).ok()?;
        // Least recently *used*: a hit refreshes the entry (through a
        // handle checked as ours, never by path).
        if let Some(f) = open_entry(&path) {
            let _ = f.set_modified(SystemTime::now());
        }
        Some(value)
    }

    /// The record under `key`, or `compute`'s value, stored under `key`.
    pub fn fetch<T: Serialize + DeserializeOwned>(
        &self,
        key: &str,
        compute: impl FnOnce() -> crate::support::error::Result<T>,
    ) -> crate::support::error::Result<T> {
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
        if create_private_dir(dir).is_err() {
            return;
        }
        let Some(dir) = self.usable_dir() else {
            return;
        };
        let Ok(mut tmp) = tempfile::Builder::new()
            .prefix(".trace-")
            .suffix(".tmp")
            .tempfile_in(dir)
        else {
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

/// Prefix of every entry's file name.
const ENTRY_PREFIX: &str = "trace-";

/// The file name of `key`'s entry.
fn entry_name(key: &str) -> String {
    format!("{ENTRY_PREFIX}{key}.json")
}

/// Whether `text` is a key: 64 lowercase hex digits.
fn is_key(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Whether the file `name` is an entry of the cache's naming.
fn is_entry_name(name: &std::ffi::OsStr) -> bool {
    name.to_str()
        .and_then(|n| n.strip_prefix(ENTRY_PREFIX))
        .and_then(|n| n.strip_suffix(".json"))
        .is_some_and(is_key)
}

/// The effective user id of this process.
fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Whether `meta` (not followed through a link) is a regular file of this
/// user: the only kind of file the cache reads, refreshes or deletes.
fn is_own_regular_file(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    meta.file_type().is_file() && meta.uid() == euid()
}

/// Opens `path` if it is one of this user's regular files: not through a
/// link, never blocking (a FIFO there is a miss, not a hang).
fn open_entry(path: &Path) -> Option<std::fs::File> {
    let file = memtrace_io::input::open_regular(path, false).ok()?;
    is_own_regular_file(&file.metadata().ok()?).then_some(file)
}

/// Creates `dir` (and missing parents) readable and writable by the user
/// only.
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Why `dir` must not hold the cache, if it must not: it (or the link that
/// names it) belongs to another user, it is not a directory, or group or
/// others may write to it.
fn safe_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let link = std::fs::symlink_metadata(dir).map_err(|e| e.to_string())?;
    if link.file_type().is_symlink() && link.uid() != euid() {
        return Err(format!(
            "it is a symbolic link owned by user {}, not by you",
            link.uid()
        ));
    }
    let meta = std::fs::metadata(dir).map_err(|e| e.to_string())?;
    if !meta.is_dir() {
        return Err("it is not a directory".into());
    }
    if meta.uid() != euid() {
        return Err(format!("it belongs to user {}, not to you", meta.uid()));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "others may write to it (mode {:o}; chmod go-w it)",
            meta.mode() & 0o777
        ));
    }
    Ok(())
}

/// Says once per process that the cache folder `dir` is not used, and why.
fn warn_once(dir: &Path, why: &str) {
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        eprintln!("WARNING: trace cache {} not used: {why}", dir.display());
    });
}

/// Removes the least recently used entries of `dir` until it holds at most
/// `max` bytes. Only the cache's own entries count and go: regular files of
/// its naming that belong to the user (looked at without following links;
/// removing a name never touches what a link points to).
fn trim(dir: &Path, max: u64) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut files: Vec<(SystemTime, u64, PathBuf)> = entries
        .flatten()
        .filter(|e| is_entry_name(&e.file_name()))
        .filter_map(|e| {
            let m = std::fs::symlink_metadata(e.path()).ok()?;
            if !is_own_regular_file(&m) {
                return None;
            }
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
        let [k1, k2, k3] = ["k1", "k2", "k3"].map(|k| TraceCache::key(k, &[]));
        cache.put(&k1, &vec![1u64, 2, 3]);
        assert_eq!(cache.get::<Vec<u64>>(&k1), Some(vec![1, 2, 3]));
        assert_eq!(cache.get::<Vec<u64>>(&k2), None);
        std::fs::write(dir.path().join(entry_name(&k3)), b"{ not json").unwrap();
        assert_eq!(cache.get::<Vec<u64>>(&k3), None);
        assert_eq!(TraceCache::new(false).get::<Vec<u64>>(&k1), None);
        // What is not a key names no file.
        cache.put("../escape", &1u8);
        assert!(!dir.path().join("../escape.json").exists());
    }

    #[test]
    fn the_least_recently_used_entries_go_first() {
        let dir = tempfile::tempdir().unwrap();
        let cache = TraceCache::at(dir.path().to_path_buf());
        let old = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        let key = |k: &str| TraceCache::key(k, &[]);
        let file = |k: &str| dir.path().join(entry_name(&key(k)));
        for (i, k) in ["a", "b", "c"].iter().enumerate() {
            cache.put(&key(k), &vec![0u8; 100]);
            let f = std::fs::File::options().append(true).open(file(k)).unwrap();
            f.set_modified(old + std::time::Duration::from_secs(i as u64))
                .unwrap();
        }
        // Reading "a" makes it the most recently used.
        assert!(cache.get::<Vec<u8>>(&key("a")).is_some());
        let one = std::fs::metadata(file("a")).unwrap().len();
        // Files of other names are not the cache's: they neither count nor go.
        std::fs::write(dir.path().join("config.json"), vec![b' '; 4096]).unwrap();
        trim(dir.path(), 2 * one);
        let left = |k: &str| file(k).exists();
        assert!(left("a") && left("c") && !left("b"));
        assert!(dir.path().join("config.json").exists());
    }
}
