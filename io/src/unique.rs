//! Names nobody can guess and files nobody else made: every file or folder
//! memtrace names itself (a temporary output, a writability probe, a private
//! working folder) gets an unpredictable name and is created exclusively
//! (`O_CREAT|O_EXCL|O_NOFOLLOW`), so that whatever sits at that name already
//! — a symbolic link planted there, a FIFO, someone's file — is never
//! followed, opened or truncated: the creation fails with `EEXIST` and a new
//! name is drawn.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::path::{Path, PathBuf};

/// How many names are tried before giving up: with 64 random bits a second
/// draw already never collides unless someone plants names faster than the
/// kernel's random source can be guessed.
pub(crate) const ATTEMPTS: u32 = 16;

/// 64 unpredictable bits as 16 hex digits: from the kernel's random source
/// (`/dev/urandom`), else from std's randomly seeded hasher over the time,
/// the process and a counter.
pub(crate) fn token() -> String {
    format!("{:016x}", random_u64())
}

fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    let from_kernel = File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if from_kernel.is_ok() {
        return u64::from_le_bytes(bytes);
    }
    fallback_u64()
}

/// std seeds each `RandomState` from the OS's random source: a hash keyed
/// with one is unpredictable even where `/dev/urandom` cannot be opened.
fn fallback_u64() -> u64 {
    use std::hash::{BuildHasher, Hash, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static DRAWS: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default()
        .hash(&mut h);
    std::process::id().hash(&mut h);
    DRAWS.fetch_add(1, Ordering::Relaxed).hash(&mut h);
    h.finish()
}

/// Creates `path` for writing only if nothing is there, not even a symbolic
/// link (dangling or not): `O_CREAT|O_EXCL|O_NOFOLLOW`, mode 0666 less the
/// umask, as `File::create` would.
pub(crate) fn create_new(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .mode(0o666)
        .open(path)
}

/// Creates a new file named by `name(token)` for a fresh token each try,
/// retrying on `EEXIST` up to [`ATTEMPTS`] times; the path and the open file.
pub(crate) fn create_unique(name: impl Fn(&str) -> PathBuf) -> std::io::Result<(PathBuf, File)> {
    let mut last = None;
    for _ in 0..ATTEMPTS {
        let path = name(&token());
        match create_new(&path) {
            Ok(file) => return Ok((path, file)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::ErrorKind::AlreadyExists.into()))
}

/// Creates a new folder (mode 0700) named by `name(token)`, as
/// [`create_unique`] does files (`mkdir` never follows a link either).
pub(crate) fn create_unique_dir(name: impl Fn(&str) -> PathBuf) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let mut last = None;
    for _ in 0..ATTEMPTS {
        let path = name(&token());
        match std::fs::DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => return Ok(path),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::ErrorKind::AlreadyExists.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_differ_and_are_hex() {
        let a = token();
        let b = token();
        assert_ne!(a, b);
        assert_eq!(a.len(), 16);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(fallback_u64(), fallback_u64());
    }

    #[test]
    fn nothing_that_exists_is_opened_not_even_a_dangling_link() {
        let dir = std::env::temp_dir().join(format!("memtrace-unique-{}", token()));
        std::fs::create_dir(&dir).unwrap();
        let canary = dir.join("canary");
        std::fs::write(&canary, b"keep").unwrap();
        let link = dir.join("link");
        std::os::unix::fs::symlink(&canary, &link).unwrap();
        let dangling = dir.join("dangling");
        std::os::unix::fs::symlink(dir.join("missing"), &dangling).unwrap();
        for path in [&canary, &link, &dangling] {
            let e = create_new(path).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists, "{path:?}");
        }
        assert!(!dir.join("missing").exists());
        assert_eq!(std::fs::read(&canary).unwrap(), b"keep");
        // Every name taken: a bounded number of tries, then EEXIST.
        let e = create_unique(|_| link.clone()).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists);
        let e = create_unique_dir(|_| link.clone()).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
