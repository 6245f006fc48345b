//! The unit-test programs `regress --unit-tests` reads: a folder's `*.elf`
//! entries (or one program), each said plainly when it is missing or is
//! not a program, and the report's path refused when it is, or would
//! become, one of them.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use memtrace_io::input::{file_kind, open_regular};
use memtrace_io::output::{ensure_distinct, output_target, OutputTarget};

use crate::bail;
use crate::support::error::Result;

/// Which build a folder holds, for messages.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Side {
    /// The tests built against the old release.
    Old,
    /// Against the new release.
    New,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Old => "old",
            Side::New => "new",
        }
    }
}

/// Whether a folder's entry is read as a unit-test program (`*.elf`).
fn named_like_a_program(path: &Path) -> bool {
    path.extension().is_some_and(|x| x == "elf")
}

/// The suite a program runs: its file name without `.elf`.
pub(crate) fn suite_name(program: &Path) -> String {
    program
        .file_stem()
        .map_or_else(String::new, |s| s.to_string_lossy().into_owned())
}

/// The programs of `path` by suite name: the folder's `*.elf` entries
/// that are not folders (a FIFO or a dangling link in a program's place
/// is kept, to be reported as that suite's), or the one program `path`
/// is.
pub(crate) fn programs(path: &Path, side: Side) -> Result<BTreeMap<String, PathBuf>> {
    let what = || {
        format!(
            "the unit-test programs built against the {} release: a folder of *.elf, or one program",
            side.name()
        )
    };
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Ok(to) = std::fs::read_link(path) {
                bail!(
                    "{} is a symbolic link to {}, which does not exist ({})",
                    path.display(),
                    to.display(),
                    what()
                );
            }
            bail!("the folder {} does not exist ({})", path.display(), what());
        }
        Err(e) => bail!("cannot read the folder {}: {e}", path.display()),
    };
    if meta.is_file() {
        if !has_elf_header(path) {
            bail!(
                "{} is a file but not a program (no ELF header), nor a folder ({})",
                path.display(),
                what()
            );
        }
        return Ok([(suite_name(path), path.to_path_buf())].into());
    }
    if !meta.is_dir() {
        bail!(
            "{} is {}, not a folder ({})",
            path.display(),
            file_kind(&meta.file_type()),
            what()
        );
    }
    let entries: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|e| crate::failed!("cannot read the folder {}: {e}", path.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    let found: BTreeMap<String, PathBuf> = entries
        .iter()
        .filter(|p| named_like_a_program(p) && !p.is_dir())
        .map(|p| (suite_name(p), p.clone()))
        .collect();
    if entries.is_empty() {
        bail!(
            "the folder {} is empty: no unit-test program (*.elf) to compare ({})",
            path.display(),
            what()
        );
    }
    if found.is_empty() {
        bail!(
            "the folder {} holds no unit-test program: none of its {} entries is a file named *.elf ({})",
            path.display(),
            entries.len(),
            what()
        );
    }
    Ok(found)
}

/// Whether the regular file `path` starts as an ELF file does.
fn has_elf_header(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    open_regular(path, true).is_ok_and(|mut f| f.read_exact(&mut magic).is_ok())
        && magic == *b"\x7fELF"
}

/// Why `program`, a folder's entry, cannot be run, if it cannot: it is no
/// regular file (a FIFO is never opened) or does not exist.
pub(crate) fn not_a_program(program: &Path) -> Option<String> {
    match std::fs::metadata(program) {
        Ok(meta) if meta.is_file() => None,
        Ok(meta) => Some(format!(
            "{} is {}, not a program",
            program.display(),
            file_kind(&meta.file_type())
        )),
        Err(e) => Some(match std::fs::read_link(program) {
            Ok(to) => format!(
                "{} is a symbolic link to {}, which does not exist",
                program.display(),
                to.display()
            ),
            Err(_) => format!("cannot read {}: {e}", program.display()),
        }),
    }
}

/// Refuses `out` for the report when it is one of the programs `old` and
/// `new` hold (or either of them), or would land in one of their folders
/// under a program's name, where the next comparison would read it as a
/// suite.
pub fn check_report_path(out: &Path, old: &Path, new: &Path) -> Result<()> {
    let mut inputs = vec![old.to_path_buf(), new.to_path_buf()];
    for (path, side) in [(old, Side::Old), (new, Side::New)] {
        inputs.extend(programs(path, side)?.into_values());
    }
    let inputs: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
    ensure_distinct(out, &inputs)?;
    let OutputTarget::Replace(lands) = output_target(out)? else {
        return Ok(());
    };
    if !named_like_a_program(&lands) {
        return Ok(());
    }
    let folder = match lands.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    for input in [old, new] {
        if input.is_dir() && memtrace_io::output::same_file(folder, input) {
            bail!(
                "refusing to write the report to {}: it would be a unit-test program of {} \
                 (every *.elf there is a suite the next comparison runs); name it otherwise or \
                 write it elsewhere",
                out.display(),
                input.display()
            );
        }
    }
    Ok(())
}
