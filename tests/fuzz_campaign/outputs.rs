//! The atomic writers (`memtrace_io::output`: every `--out`, `--events`,
//! `--plot`, `--emit-offline` goes through them) in hostile folders: before
//! each write the campaign plants, at the output's name and at the names a
//! writer might choose for its temporary file (the old predictable
//! `.NAME.PID.N.tmp.EXT` of this very process, the writability probe),
//! symbolic links to a file outside the folder, dangling links, links to
//! folders, folders and existing files. Whatever a write answers:
//!
//! - no file outside the folder changes, except the regular file a link
//!   named as the output itself points to (the user asked for that one), and
//!   that one only by being replaced with the complete output;
//! - every planted entry is still there, as it was;
//! - nothing is left behind: the folder holds what was planted and, after a
//!   success, the output;
//! - a success leaves exactly the data at the output, a failure leaves the
//!   output as it was.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::Instant;

use memtrace_io::output::{render_atomically, write_atomically, AtomicFile, WriteError};
use memtrace_overlap::rng::Rng;

use crate::tally::{in_process, Tally};
use crate::{scaled, seed};

/// Output names with and without extensions, hidden ones included.
const NAMES: [&str; 6] = [
    "out.json",
    "plot.png",
    "events.parquet",
    "model.h",
    ".hidden.txt",
    "noext",
];

/// What is planted at one name.
#[derive(Clone, Copy, Debug)]
enum Plant {
    /// A link to the file outside the folder.
    LinkOutside,
    /// A link to nothing.
    Dangling,
    /// A link to a folder.
    LinkToFolder,
    /// A folder.
    Folder,
    /// A regular file with old contents.
    Existing,
}

fn plant(rng: &mut Rng) -> Plant {
    rng.weighted(&[
        (4, Plant::LinkOutside),
        (1, Plant::Dangling),
        (1, Plant::LinkToFolder),
        (1, Plant::Folder),
        (2, Plant::Existing),
    ])
}

/// What a folder entry is, to compare before and after.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Entry {
    Link(PathBuf),
    Folder,
    File(Vec<u8>),
}

fn entries(dir: &Path) -> BTreeMap<String, Entry> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let entry = if meta.file_type().is_symlink() {
            Entry::Link(std::fs::read_link(&path).unwrap())
        } else if meta.is_dir() {
            Entry::Folder
        } else {
            Entry::File(std::fs::read(&path).unwrap_or_default())
        };
        out.insert(name, entry);
    }
    out
}

/// The names the `index`-th writer of `name` in this process would have
/// picked for its temporary file when the writers numbered them in order
/// (`.NAME.PID.N.tmp.EXT`), and the writability probe's.
fn predictable_names(name: &str, index: usize) -> Vec<String> {
    let pid = std::process::id();
    let ext = match name.rfind('.').filter(|&i| i > 0) {
        Some(i) => &name[i..],
        None => "",
    };
    let mut names: Vec<String> = (index.saturating_sub(2)..index + 6)
        .map(|n| format!(".{name}.{pid}.{n}.tmp{ext}"))
        .collect();
    names.push(format!(".memtrace-probe-{pid}"));
    names
}

/// Which writer a case uses.
#[derive(Clone, Copy, Debug)]
enum Writer {
    Whole,
    Streamed,
    Rendered,
}

fn write(writer: Writer, path: &Path, data: &[u8]) -> Result<(), WriteError> {
    match writer {
        Writer::Whole => write_atomically(path, |w| {
            w.write_all(data)?;
            Ok(())
        }),
        Writer::Streamed => {
            let file = AtomicFile::create(path)?;
            let mut handle = file.handle()?;
            handle.write_all(data)?;
            file.commit()
        }
        // As plotters and polars do: the renderer opens the path it is given.
        Writer::Rendered => render_atomically(path, |tmp| {
            std::fs::write(tmp, data)?;
            Ok(())
        }),
    }
}

/// One case in a fresh folder; a broken rule is returned in `violation`.
fn case(
    rng: &mut Rng,
    root: &Path,
    index: usize,
    violation: &mut Option<String>,
) -> Result<(), String> {
    let dir = root.join(format!("case{index}"));
    let outside = root.join(format!("outside{index}"));
    let named = root.join(format!("named{index}"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::create_dir_all(root.join("folder")).unwrap();
    std::fs::write(&outside, b"not memtrace's").unwrap();
    std::fs::write(&named, b"the user's link target").unwrap();
    let name = NAMES[rng.range(0, NAMES.len() as u32 - 1) as usize];
    let output = dir.join(name);
    let mut planted = Vec::new();
    if rng.chance(60) {
        planted.push((name.to_string(), plant(rng)));
    }
    for n in predictable_names(name, index) {
        if rng.chance(70) {
            planted.push((n, plant(rng)));
        }
    }
    for (n, p) in &planted {
        let at = dir.join(n);
        match p {
            // A link at the output itself points at the user's own file.
            Plant::LinkOutside if n == name => symlink(&named, &at).unwrap(),
            Plant::LinkOutside => symlink(&outside, &at).unwrap(),
            Plant::Dangling => symlink(root.join("nothing"), &at).unwrap(),
            Plant::LinkToFolder => symlink(root.join("folder"), &at).unwrap(),
            Plant::Folder => std::fs::create_dir(&at).unwrap(),
            Plant::Existing => std::fs::write(&at, b"old contents").unwrap(),
        }
    }
    let before = entries(&dir);
    let named_before = std::fs::read(&named).unwrap();
    let data: Vec<u8> = (0..rng.range(0, 5000)).map(|i| (i * 7) as u8).collect();
    let writer = rng.weighted(&[
        (1, Writer::Whole),
        (1, Writer::Streamed),
        (1, Writer::Rendered),
    ]);
    let result = write(writer, &output, &data);
    let after = entries(&dir);
    let mut broken = Vec::new();
    if std::fs::read(&outside).unwrap() != b"not memtrace's" {
        broken.push("a file outside the folder was written".to_string());
    }
    for (n, e) in &before {
        if n != name && after.get(n) != Some(e) {
            broken.push(format!("planted `{n}` changed"));
        }
    }
    for n in after.keys() {
        if !before.contains_key(n) && n != name {
            broken.push(format!("left `{n}` behind"));
        }
    }
    let named_after = std::fs::read(&named).unwrap();
    match &result {
        Ok(()) => {
            if std::fs::read(&output).ok().as_deref() != Some(&data[..]) {
                broken.push("a success without the data at the output".into());
            }
            if named_after != named_before && named_after != data {
                broken.push(
                    "the user's link target holds neither its old contents nor the output".into(),
                );
            }
        }
        Err(_) => {
            if after.get(name) != before.get(name) || named_after != named_before {
                broken.push("a failure changed the output".into());
            }
        }
    }
    if !broken.is_empty() {
        *violation = Some(format!(
            "{writer:?} to `{name}` with {planted:?}: {}",
            broken.join("; ")
        ));
    }
    std::fs::remove_dir_all(&dir).ok();
    result.map_err(|e| e.to_string())
}

#[test]
pub(crate) fn fuzz_atomic_writers_in_hostile_folders() {
    let started = Instant::now();
    let root = tempfile::tempdir().unwrap();
    let mut t = Tally::default();
    let mut rng = seed(12);
    for i in 0..scaled(400) {
        let mut violation = None;
        let mut case_rng = Rng::new(rng.next_u64());
        in_process(&mut t, "outputs", || {
            case(&mut case_rng, root.path(), i, &mut violation)
        });
        if let Some(v) = violation {
            t.oracle_violations += 1;
            t.failures.push(v);
        }
    }
    t.finish("outputs", started);
}
