//! A private working directory for a child process memtrace starts (the
//! host oracle's Python, Valgrind): created under the temporary directory,
//! readable by this user only, empty until the caller puts files there, and
//! removed with everything in it when dropped — and on SIGINT, SIGTERM or
//! SIGHUP, after the child running in it has been killed, by the handler
//! that also removes unfinished outputs ([`crate::output`]).
//!
//! Running the child there keeps whatever it looks up relative to its
//! working directory (Python's `sys.path`, a tool's `./.rc` file) away from
//! the directory the user happens to be in.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard, Once};

/// A registered directory and the child running in it, if one is.
struct Entry {
    path: PathBuf,
    child: Option<u32>,
}

/// Directories that exist right now, with their running children.
static DIRS: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

fn dirs() -> MutexGuard<'static, Vec<Entry>> {
    DIRS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Largest stdout or stderr of a child kept (the rest is dropped): the
/// callers read a version line or the last line of an error.
const MAX_CHILD_OUTPUT: u64 = 1 << 20;

/// A private temporary directory (see the module docs).
pub struct PrivateDir {
    path: PathBuf,
}

impl PrivateDir {
    /// Creates one under the temporary directory (`TMPDIR`), its name
    /// `prefix` and 16 random hex digits, mode 0700.
    pub fn new(prefix: &str) -> std::io::Result<PrivateDir> {
        // Registered before it exists: a signal in between removes nothing
        // or the empty directory, never leaves it.
        static CLEANUP: Once = Once::new();
        CLEANUP.call_once(|| crate::signal::on_signal(remove_all_on_signal));
        let mut registry = dirs();
        let dir = std::env::temp_dir();
        // An unpredictable name: nobody can plant it in advance (mkdir
        // never follows a link there, and fails on anything that exists).
        let path = crate::unique::create_unique_dir(|token| dir.join(format!("{prefix}{token}")))?;
        registry.push(Entry {
            path: path.clone(),
            child: None,
        });
        Ok(PrivateDir { path })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes a new file `name` here with `bytes` (never over one that
    /// exists, never through a link); its path.
    pub fn write(&self, name: &str, bytes: &[u8]) -> std::io::Result<PathBuf> {
        let path = self.path.join(name);
        std::io::Write::write_all(&mut crate::unique::create_new(&path)?, bytes)?;
        Ok(path)
    }

    /// Runs `command` to its end with this directory as its working
    /// directory, stdin empty, stdout and stderr kept in files here. A
    /// signal that ends memtrace meanwhile kills the child first.
    pub fn run(&self, command: &mut Command) -> std::io::Result<Output> {
        let (out_path, err_path) = (self.path.join(".stdout"), self.path.join(".stderr"));
        let mut child = {
            // The handler cannot run between the spawn and the registration.
            let mut registry = dirs();
            let child = command
                .current_dir(&self.path)
                .stdin(Stdio::null())
                .stdout(crate::unique::create_new(&out_path)?)
                .stderr(crate::unique::create_new(&err_path)?)
                .spawn()?;
            if let Some(e) = registry.iter_mut().find(|e| e.path == self.path) {
                e.child = Some(child.id());
            }
            child
        };
        // Waited for without reaping: until the registration is gone the
        // child's id cannot be another process's, so the handler never
        // kills a stranger.
        let exited = wait_without_reaping(child.id());
        if let Some(e) = dirs().iter_mut().find(|e| e.path == self.path) {
            e.child = None;
        }
        let status = child.wait()?;
        exited?;
        Ok(Output {
            status,
            stdout: read_bounded(&out_path)?,
            stderr: read_bounded(&err_path)?,
        })
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let mut registry = dirs();
        let _ = std::fs::remove_dir_all(&self.path);
        registry.retain(|e| e.path != self.path);
    }
}

/// Up to [`MAX_CHILD_OUTPUT`] bytes of a child's output file.
fn read_bounded(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut data = Vec::new();
    File::open(path)?
        .take(MAX_CHILD_OUTPUT)
        .read_to_end(&mut data)?;
    Ok(data)
}

/// Blocks until child `pid` has exited, leaving it to be reaped.
fn wait_without_reaping(pid: u32) -> std::io::Result<()> {
    loop {
        // SAFETY: waitid writes only into `info`, a zeroed siginfo_t.
        let r = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if r == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// The signal handler's part: kills every registered child, waits until it
/// has exited (it can write nothing more), and removes every registered
/// directory. Holds the registry to the end, so no new child starts.
fn remove_all_on_signal() {
    let registry = dirs();
    for e in registry.iter() {
        if let Some(pid) = e.child {
            // SAFETY: plain system calls on a child that is not reaped yet.
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGKILL);
            }
            let _ = wait_without_reaping(pid);
        }
        let _ = std::fs::remove_dir_all(&e.path);
    }
    // Left locked on purpose: the process ends right after.
    std::mem::forget(registry);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_child_runs_inside_and_the_directory_goes_with_its_guard() {
        let dir = PrivateDir::new(".memtrace-test.").unwrap();
        let path = dir.path().to_path_buf();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        std::fs::write(path.join("given"), "data").unwrap();
        let out = dir
            .run(Command::new("sh").args(["-c", "pwd; cat given; echo why >&2; exit 3"]))
            .unwrap();
        assert_eq!(out.status.code(), Some(3));
        let text = String::from_utf8(out.stdout).unwrap();
        let (cwd, given) = text.split_once('\n').unwrap();
        assert_eq!(
            std::fs::canonicalize(cwd).unwrap(),
            std::fs::canonicalize(&path).unwrap()
        );
        assert_eq!((given, out.stderr.as_slice()), ("data", &b"why\n"[..]));
        assert!(dirs().iter().any(|e| e.path == path && e.child.is_none()));
        drop(dir);
        assert!(!path.exists());
        assert!(!dirs().iter().any(|e| e.path == path));
    }
}
