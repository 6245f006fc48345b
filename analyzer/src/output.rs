//! Writing result files atomically: a reader never sees half a file, and a
//! failed run leaves no file behind.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Writes `path` through a temporary sibling that is renamed into place only
/// when `write` succeeds.
pub fn write_atomically(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> Result<()>,
) -> Result<()> {
    let tmp = temporary_sibling(path);
    let result = (|| {
        let file = File::create(&tmp).map_err(|source| Error::Io {
            action: "create",
            path: path.to_owned(),
            source,
        })?;
        let mut out = BufWriter::new(file);
        write(&mut out)?;
        let file = out
            .into_inner()
            .map_err(|e| write_error(path, e.into_error()))?;
        file.sync_all().ok();
        std::fs::rename(&tmp, path).map_err(|e| write_error(path, e))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Renders through a temporary file (for writers that want a path, such as
/// plotters' backends), renamed into place only on success.
pub fn render_atomically(path: &Path, render: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    let tmp = temporary_sibling(path);
    let result =
        render(&tmp).and_then(|()| std::fs::rename(&tmp, path).map_err(|e| write_error(path, e)));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// The error of a failed write of `path`.
pub fn write_error(path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        action: "write",
        path: path.to_owned(),
        source,
    }
}

fn temporary_sibling(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // Keep the real extension last: image encoders choose the format by it.
    let ext = path
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.{}.tmp{ext}", std::process::id()))
}
