//! Writing result files atomically: a reader never sees half a file, and a
//! failed or interrupted run leaves no file behind.
//!
//! Every output goes through [`write_atomically`] or [`render_atomically`].
//! What happens depends on what the path is ([`output_target`]):
//!
//! - a regular file, or no file yet: the data go to a temporary sibling
//!   (`.NAME.RANDOM.tmp.EXT`, 64 random bits) that is renamed over the path
//!   only on success. The sibling is created exclusively
//!   (`O_CREAT|O_EXCL|O_NOFOLLOW`): whatever already sits at a name memtrace
//!   chose — a symbolic link planted there, a FIFO, someone's file — is never
//!   followed, opened or truncated; another name is drawn. The temporary file
//!   is removed on every error, on a panic in the writer, and on every
//!   signal that would end the process (a handler removes every temporary
//!   file still registered, then lets the signal end the process as it would
//!   have; see `signal`);
//! - a FIFO or a character device (`/dev/null`, a terminal), or any path under
//!   `/dev/` or `/proc/` (`/dev/stdout`, `/proc/self/fd/1`, whatever they
//!   point to): opened and written through (appending; the process's own
//!   standard output and error are duplicated, so that a redirected file
//!   keeps one position), never replaced;
//! - a symbolic link to a regular file: the link's final target is written
//!   atomically as above, and the link stays a link; a dangling link is an
//!   error;
//! - a directory, block device or socket: an error naming what it is.
//!
//! [`ensure_distinct`] tells whether an output path is one of the inputs
//! (the same file by device and inode, or the same canonical path).

use std::fs::{File, OpenOptions};
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, Once};

use crate::unique;

/// Why an output was not written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The operating system refused an operation on the file.
    #[error("cannot {action} {path}: {source}")]
    Io {
        /// `create`, `write`, ...
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// An OS error without a path yet (a writer's `?`); the atomic writers
    /// turn it into [`WriteError::Io`] naming their file.
    #[error("{0}")]
    Os(#[from] std::io::Error),
    /// The path cannot be written (a directory, a socket, a dangling link,
    /// one of the inputs); the message says why.
    #[error("{0}")]
    Refused(String),
}

/// The error type of a writer passed to [`write_atomically`] or
/// [`render_atomically`]: it holds a [`WriteError`], and it may be a
/// path-less OS error, which the writers name after their file.
pub trait WriterError: From<WriteError> {
    /// The error as a path-less OS error, if it is one; otherwise itself.
    fn into_os(self) -> Result<std::io::Error, Self>;
}

impl WriterError for WriteError {
    fn into_os(self) -> Result<std::io::Error, Self> {
        match self {
            WriteError::Os(e) => Ok(e),
            other => Err(other),
        }
    }
}

/// Result of the output functions.
pub type Result<T, E = WriteError> = std::result::Result<T, E>;

/// The error of a failed write of `path`.
pub fn write_error(path: &Path, source: std::io::Error) -> WriteError {
    WriteError::Io {
        action: "write",
        path: path.to_owned(),
        source,
    }
}

/// A writer's path-less OS error, named after the file it was writing.
fn name_file<E: WriterError>(e: E, path: &Path) -> E {
    match e.into_os() {
        Ok(source) => E::from(write_error(path, source)),
        Err(other) => other,
    }
}

/// An OS error while doing `action` to `path`, as a [`WriteError`].
trait PathContext<T> {
    fn with_path(self, action: &'static str, path: &Path) -> Result<T>;
}

impl<T> PathContext<T> for std::io::Result<T> {
    fn with_path(self, action: &'static str, path: &Path) -> Result<T> {
        self.map_err(|source| WriteError::Io {
            action,
            path: path.to_owned(),
            source,
        })
    }
}

/// How an output path is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutputTarget {
    /// Written to a temporary sibling of this path, renamed over it on
    /// success (a regular file, a new file, or a symbolic link's target).
    Replace(PathBuf),
    /// Opened and written through: a FIFO, a character device, or a path
    /// under `/dev/` or `/proc/`.
    Stream(PathBuf),
}

/// What `kind` is, for error messages.
fn kind_name(kind: &std::fs::FileType) -> &'static str {
    crate::input::file_kind(kind)
}

fn is_streamable(kind: &std::fs::FileType) -> bool {
    use std::os::unix::fs::FileTypeExt;
    kind.is_fifo() || kind.is_char_device()
}

/// Paths the kernel makes up (`/dev/stdout`, `/proc/self/fd/1`): whatever
/// they resolve to belongs to someone else (the shell's redirection), so it
/// is written through, not replaced.
fn is_device_path(path: &Path) -> bool {
    path.starts_with("/dev") || path.starts_with("/proc")
}

/// Decides how `path` is written (see the module docs); errors for a
/// directory, block device, socket or dangling symbolic link.
pub fn output_target(path: &Path) -> Result<OutputTarget> {
    let refuse = |kind: &str| {
        WriteError::Refused(format!(
            "cannot write {}: it is {kind}; memtrace writes regular files, FIFOs and character devices",
            path.display()
        ))
    };
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(OutputTarget::Replace(path.to_path_buf()))
        }
        Err(e) => return Err(e).with_path("write", path),
    };
    let kind = meta.file_type();
    if kind.is_file() {
        return Ok(OutputTarget::Replace(path.to_path_buf()));
    }
    if !kind.is_symlink() {
        return if is_streamable(&kind) {
            Ok(OutputTarget::Stream(path.to_path_buf()))
        } else {
            Err(refuse(kind_name(&kind)))
        };
    }
    // A symbolic link: what it finally points to decides.
    let target = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let to = std::fs::read_link(path)
                .map(|t| t.display().to_string())
                .unwrap_or_else(|_| "?".into());
            return Err(WriteError::Refused(format!(
                "cannot write {}: it is a symbolic link to {to}, which does not exist",
                path.display()
            )));
        }
        Err(e) => return Err(e).with_path("write", path),
    };
    let tkind = target.file_type();
    if is_device_path(path) || is_streamable(&tkind) {
        if tkind.is_file() || is_streamable(&tkind) {
            return Ok(OutputTarget::Stream(path.to_path_buf()));
        }
        return Err(refuse(kind_name(&tkind)));
    }
    if tkind.is_file() {
        let real = std::fs::canonicalize(path).with_path("resolve", path)?;
        return Ok(OutputTarget::Replace(real));
    }
    Err(refuse(&format!("a symbolic link to {}", kind_name(&tkind))))
}

/// Writes `path` (see the module docs): through a temporary sibling renamed
/// into place only when `write` succeeds, or straight into a FIFO or
/// character device.
pub fn write_atomically<E: WriterError>(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> Result<(), E>,
) -> Result<(), E> {
    let finish = |out: BufWriter<File>| -> Result<File> {
        out.into_inner()
            .map_err(|e| e.into_error())
            .with_path("write", path)
    };
    match output_target(path)? {
        OutputTarget::Stream(dest) => {
            let mut out = BufWriter::new(open_stream(&dest)?);
            write(&mut out).map_err(|e| name_file(e, path))?;
            finish(out)?;
            Ok(())
        }
        OutputTarget::Replace(dest) => {
            let (tmp, file) = TempFile::create(&dest).with_path("create", path)?;
            let mut out = BufWriter::new(file);
            write(&mut out).map_err(|e| name_file(e, path))?;
            let file = finish(out)?;
            file.sync_all().ok();
            Ok(tmp.persist(&dest).with_path("write", path)?)
        }
    }
}

/// An output file written piece by piece (a table streamed while a trace
/// runs) and put in place only by [`AtomicFile::commit`], with the same
/// rules as [`write_atomically`]: a temporary sibling renamed over the path,
/// or a FIFO / character device written through. Dropped without a commit,
/// the temporary file is removed.
pub struct AtomicFile {
    path: PathBuf,
    file: File,
    tmp: Option<(TempFile, PathBuf)>,
}

impl AtomicFile {
    /// Opens the temporary file (or the stream) for `path`.
    pub fn create(path: &Path) -> Result<AtomicFile> {
        let (file, tmp) = match output_target(path)? {
            OutputTarget::Stream(dest) => (open_stream(&dest)?, None),
            OutputTarget::Replace(dest) => {
                let (tmp, file) = TempFile::create(&dest).with_path("create", path)?;
                (file, Some((tmp, dest)))
            }
        };
        Ok(AtomicFile {
            path: path.to_owned(),
            file,
            tmp,
        })
    }

    /// The path the file is for.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A second, unbuffered handle of the open file, for a writer that
    /// takes ownership of its output.
    pub fn handle(&self) -> Result<File> {
        self.file.try_clone().with_path("write", &self.path)
    }

    /// Puts the written file in place.
    pub fn commit(self) -> Result<()> {
        match self.tmp {
            None => Ok(()),
            Some((tmp, dest)) => {
                self.file.sync_all().ok();
                tmp.persist(&dest).with_path("write", &self.path)
            }
        }
    }
}

/// Renders through a temporary file (for writers that want a path, such as
/// plotters' backends), renamed into place only on success; for a FIFO or
/// character device the finished temporary file is copied into it. The
/// temporary file keeps the path's name and extension (image encoders
/// choose the format by it) and lies in a private folder (mode 0700,
/// `.NAME.RANDOM.tmp`) made for it beside the path, or in the system's
/// temporary directory for a stream: a renderer that opens its path with
/// `File::create` can only ever open memtrace's own file.
pub fn render_atomically<E: WriterError>(
    path: &Path,
    render: impl FnOnce(&Path) -> Result<(), E>,
) -> Result<(), E> {
    match output_target(path)? {
        OutputTarget::Replace(dest) => {
            let dir =
                TempFile::create_dir(&dest, &sibling_folder(&dest)).with_path("create", path)?;
            let inner = dir.path().join(file_name(&dest));
            render(&inner).map_err(|e| name_file(e, path))?;
            std::fs::rename(&inner, &dest).with_path("write", path)?;
            Ok(())
        }
        OutputTarget::Stream(dest) => {
            let dir =
                TempFile::create_dir(&dest, &std::env::temp_dir()).with_path("create", path)?;
            let inner = dir.path().join(file_name(&dest));
            render(&inner).map_err(|e| name_file(e, path))?;
            let mut from = File::open(&inner).with_path("read back", &inner)?;
            let mut to = open_stream(&dest)?;
            std::io::copy(&mut from, &mut to).with_path("write", path)?;
            Ok(())
        }
    }
}

/// Opens a FIFO, character device or `/dev/...` path for writing. The
/// process's own standard output and error (`/dev/stdout`, `/dev/fd/1`,
/// `/proc/self/fd/1`, and the same for 2) are duplicated rather than opened
/// again, so that what memtrace prints and the file share one position in a
/// redirected file.
fn open_stream(path: &Path) -> Result<File> {
    use std::io::Write;
    use std::os::fd::AsFd;
    let own = match path.to_str() {
        Some("/dev/stdout" | "/dev/fd/1" | "/proc/self/fd/1") => {
            let _ = std::io::stdout().flush();
            Some(std::io::stdout().as_fd().try_clone_to_owned())
        }
        Some("/dev/stderr" | "/dev/fd/2" | "/proc/self/fd/2") => {
            Some(std::io::stderr().as_fd().try_clone_to_owned())
        }
        _ => None,
    };
    if let Some(fd) = own {
        let fd = fd.with_path("write", path)?;
        return Ok(File::from(fd));
    }
    OpenOptions::new()
        .append(true)
        .open(path)
        .with_path("open for writing", path)
}

/// Fails when `output` is the same file as one of `inputs` (same device and
/// inode, following symbolic links, or the same canonical path), so that a
/// command never overwrites what it reads. Inputs that do not exist (or are
/// not files, such as `zoo:NAME`) are skipped; so is an output that does
/// not exist yet.
pub fn ensure_distinct(output: &Path, inputs: &[&Path]) -> Result<()> {
    for &input in inputs {
        if same_file(output, input) {
            return Err(WriteError::Refused(format!(
                "the output {} is the input {}: refusing to overwrite it",
                output.display(),
                input.display()
            )));
        }
    }
    Ok(())
}

/// Whether `a` and `b` name the same existing file (device and inode, or
/// canonical path).
pub fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    if let (Ok(ma), Ok(mb)) = (std::fs::metadata(a), std::fs::metadata(b)) {
        if ma.dev() == mb.dev() && ma.ino() == mb.ino() {
            return true;
        }
    }
    matches!(
        (std::fs::canonicalize(a), std::fs::canonicalize(b)),
        (Ok(ca), Ok(cb)) if ca == cb
    )
}

/// Creates and removes a file beside `path` as [`write_atomically`] would
/// (exclusively, under an unpredictable name): fails, before a long run,
/// when the folder the output goes to does not take new files. A FIFO or
/// character device takes no probe (its folder, `/dev`, need not be
/// writable).
pub fn probe_writable(path: &Path) -> Result<()> {
    match output_target(path)? {
        OutputTarget::Stream(_) => Ok(()),
        OutputTarget::Replace(dest) => {
            let (probe, _file) = TempFile::create(&dest).with_path("create", path)?;
            drop(probe);
            Ok(())
        }
    }
}

/// Temporary files and folders that exist right now, removed by the signal
/// handler. Only what memtrace created itself is ever registered.
static TEMPORARIES: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
static CLEANUP: Once = Once::new();

fn temporaries() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    TEMPORARIES.lock().unwrap_or_else(|e| e.into_inner())
}

/// Temporary files still registered (for tests of the clean-up).
pub fn registered_temporaries() -> Vec<PathBuf> {
    temporaries().clone()
}

/// Registers, once, the removal of every registered temporary file with
/// the signal handler ([`crate::signal`]).
fn remove_temporaries_on_signal() {
    CLEANUP.call_once(|| {
        crate::signal::on_signal(|| {
            for path in temporaries().drain(..) {
                remove_temporary(&path);
            }
        })
    });
}

/// Removes a temporary file, or a temporary folder with what is in it (never
/// following a link inside).
fn remove_temporary(path: &Path) {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => {
            let _ = std::fs::remove_dir_all(path);
        }
        _ => {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// A registered temporary file (or folder) memtrace created, removed when
/// dropped unless persisted.
struct TempFile {
    path: PathBuf,
    persisted: bool,
}

impl TempFile {
    /// Creates a new temporary sibling of `dest` (`.NAME.RANDOM.tmp.EXT`),
    /// exclusively, and registers it. The registry is held meanwhile, so a
    /// signal either finds it registered or finds it not yet made.
    fn create(dest: &Path) -> std::io::Result<(TempFile, File)> {
        remove_temporaries_on_signal();
        let mut registry = temporaries();
        let (path, file) = unique::create_unique(|token| temporary_sibling(dest, token))?;
        registry.push(path.clone());
        Ok((
            TempFile {
                path,
                persisted: false,
            },
            file,
        ))
    }

    /// Creates a new private folder for a temporary file of `dest` in
    /// `parent`, and registers it; removed with what is in it when dropped.
    fn create_dir(dest: &Path, parent: &Path) -> std::io::Result<TempFile> {
        remove_temporaries_on_signal();
        let mut registry = temporaries();
        let path = unique::create_unique_dir(|token| {
            parent.join(format!(
                ".{}.{token}.tmp",
                file_name(dest).to_string_lossy()
            ))
        })?;
        registry.push(path.clone());
        Ok(TempFile {
            path,
            persisted: false,
        })
    }

    fn path(&self) -> &Path {
        &self.path
    }

    /// Renames it over `dest`.
    fn persist(mut self, dest: &Path) -> std::io::Result<()> {
        std::fs::rename(&self.path, dest)?;
        self.persisted = true;
        Ok(())
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let mut registry = temporaries();
        if !self.persisted {
            remove_temporary(&self.path);
        }
        registry.retain(|p| p != &self.path);
    }
}

/// `path`'s file name (empty for none).
fn file_name(path: &Path) -> std::ffi::OsString {
    path.file_name().map(|n| n.to_owned()).unwrap_or_default()
}

/// The folder `path` goes in (`.` for a bare name).
fn sibling_folder(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// `.NAME.TOKEN.tmp.EXT` beside `path`.
fn temporary_sibling(path: &Path, token: &str) -> PathBuf {
    let name = file_name(path).to_string_lossy().into_owned();
    // Keep the real extension last: image encoders choose the format by it.
    let ext = path
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.{token}.tmp{ext}"))
}
