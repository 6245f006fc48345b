//! The TFLM runner a model needs, built on first use when memtrace runs
//! from its source tree: the runner of just the model's operators
//! (harness-c's `TFLM_OPS`: TFLM's runtime and those kernels, about a
//! quarter of TFLM to compile), widened when a later model needs more,
//! with a progress bar. TFLM's compiled objects are cached by content
//! outside the clone (harness-c/tflm/tflm.mk), so each kernel is compiled
//! once per core and kernel build. An installation's runners are prebuilt
//! with every operator and never built here.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use memtrace_model::graph::TfliteGraph;
use memtrace_tracer::Arch;

use super::kernels::{build_dir, installed_guests, Kernels};
use crate::support::common::progress_bar;
use crate::support::error::Result;
use crate::{bail, failed};

/// The operators a model needs its runner to register.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpsNeeded {
    /// Every operator TFLM has: a model with control flow runs subgraphs
    /// whose operators subgraph 0 does not list.
    All,
    /// These, as the model names them (`CONV_2D`, a custom code).
    Named(BTreeSet<String>),
}

impl OpsNeeded {
    /// What `graph`'s model needs: its operators but memtrace's own
    /// storage operators, which every runner has.
    pub fn of(graph: &TfliteGraph) -> OpsNeeded {
        if graph.subgraphs > 1 {
            return OpsNeeded::All;
        }
        OpsNeeded::Named(
            graph
                .ops
                .iter()
                .map(|op| op.name.clone())
                .filter(|name| !name.starts_with("MEMTRACE_"))
                .collect(),
        )
    }
}

/// What a runner in the source tree registers, by its `.ops` file (written
/// by harness-c beside it): `None` for every operator (also a runner built
/// before the file existed), else the Add* names.
fn registered(elf: &Path) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(elf.with_extension("ops")).ok()?;
    match text.trim() {
        "all" => None,
        names => Some(names.split_whitespace().map(str::to_owned).collect()),
    }
}

/// Whether a runner registering `have` (`None`: all) runs a model needing
/// `need`.
fn covers(have: Option<&[String]>, need: &OpsNeeded) -> bool {
    match (have, need) {
        (None, _) => true,
        (Some(_), OpsNeeded::All) => false,
        (Some(have), OpsNeeded::Named(want)) => {
            let have: BTreeSet<String> = have.iter().map(|n| squashed(n)).collect();
            want.iter().all(|w| have.contains(&squashed(w)))
        }
    }
}

/// An operator's name as its two spellings agree on it: `CONV_2D` and
/// `Conv2D` are both `conv2d`; custom codes lose the prefixes TFLM's
/// resolver gives them (`SignalEnergy` is added by `AddEnergy`).
fn squashed(name: &str) -> String {
    let s: String = name
        .chars()
        .filter(|&c| c != '_')
        .flat_map(char::to_lowercase)
        .collect();
    for prefix in ["signal", "tflite"] {
        if let Some(rest) = s.strip_prefix(prefix).filter(|r| !r.is_empty()) {
            return rest.to_owned();
        }
    }
    s
}

/// The source tree's `harness-c` folder when memtrace runs from one, not
/// from an installation.
fn harness_dir() -> Option<PathBuf> {
    if installed_guests().is_some() {
        return None;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()?
        .join("harness-c");
    dir.join("tflm/op-sources.sh").is_file().then_some(dir)
}

/// The runner of `kernels` for `arch` that runs a model needing `need`:
/// the source tree's when it registers those operators, else built (or
/// widened to them) there first. `None` outside a source tree.
pub(crate) fn runner_for_model(
    arch: Arch,
    kernels: Kernels,
    need: &OpsNeeded,
) -> Result<Option<PathBuf>> {
    let Some(harness) = harness_dir() else {
        return Ok(None);
    };
    let rel = Path::new("build")
        .join(build_dir(arch))
        .join(kernels.runner_file());
    let elf = harness.join(&rel);
    let current = |elf: &Path| elf.is_file() && covers(registered(elf).as_deref(), need);
    if current(&elf) {
        return Ok(Some(elf));
    }
    let dir = harness.join("build").join(build_dir(arch));
    std::fs::create_dir_all(&dir).map_err(|e| failed!("creating {}: {e}", dir.display()))?;
    // One build at a time per core: another memtrace may be building it.
    let lock_path = dir.join(".runner-build.lock");
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| failed!("opening {}: {e}", lock_path.display()))?;
    lock.lock()
        .map_err(|e| failed!("locking {}: {e}", lock_path.display()))?;
    if current(&elf) {
        return Ok(Some(elf));
    }
    let ops = ops_to_build(elf.is_file().then(|| registered(&elf)), need);
    build(&harness, &rel, &ops)?;
    if !current(&elf) {
        bail!(
            "{} was built for TFLM_OPS=\"{ops}\" but its {} does not list every operator \
             the model needs",
            elf.display(),
            elf.with_extension("ops").display()
        );
    }
    Ok(Some(elf))
}

/// `TFLM_OPS` for a runner that has `have` (`None`: no runner yet) and
/// must run a model needing `need`: the union, so no model that ran
/// before stops running.
fn ops_to_build(have: Option<Option<Vec<String>>>, need: &OpsNeeded) -> String {
    let OpsNeeded::Named(want) = need else {
        return "all".to_owned();
    };
    let mut ops: BTreeSet<String> = want.clone();
    if let Some(Some(have)) = have {
        ops.extend(have);
    }
    ops.into_iter().collect::<Vec<_>>().join(" ")
}

/// Runs harness-c's make for `rel` with `TFLM_OPS=ops`, a bar counting the
/// files compiled; its output goes to a log beside the runner.
fn build(harness: &Path, rel: &Path, ops: &str) -> Result<()> {
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
    let args = [
        format!("-j{jobs}"),
        format!("TFLM_OPS={ops}"),
        rel.display().to_string(),
    ];
    let make = |dry: bool| {
        let mut cmd = Command::new("make");
        cmd.arg("-C").arg(harness).arg("--no-print-directory");
        if dry {
            cmd.arg("-n");
        }
        cmd.args(&args);
        cmd
    };
    let dry = make(true)
        .output()
        .map_err(|e| failed!("running make in {}: {e}", harness.display()))?;
    if !dry.status.success() {
        bail!(
            "cannot build {} for its operators: {}",
            harness.join(rel).display(),
            String::from_utf8_lossy(&dry.stderr).trim()
        );
    }
    let steps = compile_lines(&String::from_utf8_lossy(&dry.stdout));
    eprintln!(
        "memtrace: building {} for TFLM_OPS=\"{ops}\" on first use: {steps} files to compile \
         (TFLM's are kept in its cache for every later build)",
        harness.join(rel).display()
    );
    let log_path = harness.join(rel).with_extension("build.log");
    let mut log =
        File::create(&log_path).map_err(|e| failed!("creating {}: {e}", log_path.display()))?;
    let errors = log
        .try_clone()
        .map_err(|e| failed!("{}: {e}", log_path.display()))?;
    let mut child = make(false)
        .stdout(Stdio::piped())
        .stderr(errors)
        .spawn()
        .map_err(|e| failed!("running make in {}: {e}", harness.display()))?;
    let bar = progress_bar(steps as u64, "files compiled");
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines().map_while(std::io::Result::ok) {
            let _ = writeln!(log, "{line}");
            if let (Some(bar), 1) = (&bar, compile_lines(&line)) {
                bar.inc(1);
            }
        }
    }
    let status = child.wait().map_err(|e| failed!("waiting for make: {e}"))?;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    if !status.success() {
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(8).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        bail!(
            "building {} failed ({status}); the end of {}:\n{}",
            harness.join(rel).display(),
            log_path.display(),
            tail.join("\n")
        );
    }
    Ok(())
}

/// How many of `text`'s command lines compile a file.
fn compile_lines(text: &str) -> usize {
    text.lines()
        .filter(|l| l.contains(" -c ") && !l.trim_start().starts_with('#'))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(ops: &[&str]) -> OpsNeeded {
        OpsNeeded::Named(ops.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn a_model_name_and_an_add_name_of_one_operator_agree() {
        let have: Vec<String> = [
            "Conv2D",
            "DepthwiseConv2D",
            "BatchMatMul",
            "Energy",
            "PadV2",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let need = named(&[
            "CONV_2D",
            "DEPTHWISE_CONV_2D",
            "BATCH_MATMUL",
            "SignalEnergy",
            "PADV2",
        ]);
        assert!(covers(Some(&have), &need));
        assert!(!covers(Some(&have), &named(&["CONV_2D", "ADD"])));
        assert!(
            covers(None, &named(&["ADD"])),
            "a runner of all runs anything"
        );
        assert!(!covers(Some(&have), &OpsNeeded::All));
    }

    #[test]
    fn a_widened_runner_keeps_what_it_had() {
        let had = Some(Some(vec!["Conv2D".to_owned(), "Reshape".to_owned()]));
        assert_eq!(
            ops_to_build(had, &named(&["ADD", "CONV_2D"])),
            "ADD CONV_2D Conv2D Reshape"
        );
        assert_eq!(ops_to_build(None, &named(&["ADD"])), "ADD");
        assert_eq!(ops_to_build(None, &OpsNeeded::All), "all");
    }

    #[test]
    fn compile_commands_are_counted_not_links() {
        let text = "sh tflm/atomic.sh cc out.o g++ -O2 -c a.cc\n\
                    g++ -c b.cc -o b.o\n\
                    g++ -nostdlib -o runner.elf a.o b.o\n";
        assert_eq!(compile_lines(text), 2);
    }
}
