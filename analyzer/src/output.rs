//! Writing result files atomically: a reader never sees half a file, and a
//! failed run leaves no file behind.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// Writes `path` through a temporary sibling that is renamed into place only
/// when `write` succeeds.
pub fn write_atomically(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> Result<()>,
) -> Result<()> {
    let tmp = temporary_sibling(path);
    let result = (|| {
        let file =
            File::create(&tmp).with_context(|| format!("cannot create {}", path.display()))?;
        let mut out = BufWriter::new(file);
        write(&mut out)?;
        let file = out
            .into_inner()
            .map_err(|e| e.into_error())
            .with_context(|| format!("cannot write {}", path.display()))?;
        file.sync_all().ok();
        std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
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
    let result = render(&tmp).and_then(|()| {
        std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
    });
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
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
