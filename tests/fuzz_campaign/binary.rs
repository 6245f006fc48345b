//! One run of the real binary: its arguments, the rule its exit must keep
//! ([`Expect`]), and the check of that rule ([`run_job`]).

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::fixtures::keep;
use crate::tally::Tally;
use crate::BINARY_LIMIT;

/// One binary run: files to create in a fresh directory and the arguments.
pub(crate) struct Job {
    pub(crate) target: &'static str,
    /// (file name, bytes)
    pub(crate) files: Vec<(String, Vec<u8>)>,
    pub(crate) args: Vec<String>,
    /// What to keep under fixtures/fuzz/<target>/ if it fails.
    pub(crate) keep: (&'static str, Vec<u8>),
    /// What the run must do beyond exiting 0 or 1.
    pub(crate) expect: Expect,
}

/// The rule of an input's class, beyond "exit 0 or 1, in time, no file
/// left". The default is that rule alone.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Expect {
    /// Exit 2 (clap's usage error) is a clean outcome too.
    #[serde(default)]
    pub(crate) usage_ok: bool,
    /// Must exit 2, because of this (an option that would do nothing).
    #[serde(default)]
    pub(crate) usage: Option<String>,
    /// Must not exit 0, because of this (the live-overlap oracle's reason).
    #[serde(default)]
    pub(crate) refuse: Option<String>,
    /// Must exit 0 with a JSON report of no clobbers and bit-exact outputs.
    #[serde(default)]
    pub(crate) verifies: bool,
    /// On exit 0, the JSON report's `"kernels"` must be this library.
    #[serde(default)]
    pub(crate) kernels: Option<String>,
}

pub(crate) fn run_job(job: &Job, n: usize) -> Tally {
    let mut t = Tally {
        inputs: 1,
        ..Tally::default()
    };
    let dir = std::env::temp_dir().join(format!("memtrace-fuzz-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for (name, bytes) in &job.files {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_memtrace"))
        .args(&job.args)
        .current_dir(&dir)
        .env("CI", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("memtrace starts");
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let mut stdout = child.stdout.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = stdout.read_to_end(&mut b);
        b
    });
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if started.elapsed() > BINARY_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let err = reader.join().unwrap_or_default();
    let err: String = err.trim().chars().take(400).collect();
    let out = out_reader.join().unwrap_or_default();
    let what = format!("{} {:?}", job.target, job.args);
    let mut failed = true;
    let expect = &job.expect;
    if expect.refuse.is_some() {
        t.must_refuse += 1;
    }
    if expect.verifies {
        t.own_plans += 1;
    }
    match status {
        None => {
            t.timeouts += 1;
            t.failures
                .push(format!("{what}: still running after {BINARY_LIMIT:?}"));
        }
        Some(s) => match (s.code(), s.signal()) {
            (Some(0), _) => {
                t.accepted += 1;
                failed = false;
            }
            // An error, or a verdict (verify FAILED, regress SHRANK).
            (Some(1), _) => {
                t.clean_errors += 1;
                failed = false;
            }
            (Some(2), _) if expect.usage_ok || expect.usage.is_some() => {
                t.usage_errors += 1;
                failed = false;
            }
            (Some(101), _) => {
                t.panics += 1;
                t.failures.push(format!("{what}: panic: {err}"));
            }
            (Some(c), _) => {
                t.bad_exits += 1;
                t.failures.push(format!("{what}: exit {c}: {err}"));
            }
            (None, sig) => {
                t.signals += 1;
                t.failures.push(format!("{what}: signal {sig:?}: {err}"));
            }
        },
    }
    let code = status.and_then(|s| s.code());
    if let (Some(why), Some(c)) = (&expect.usage, code) {
        if c != 2 {
            t.oracle_violations += 1;
            t.failures.push(format!(
                "{what}: exit {c}, not a usage error ({why}): {err}"
            ));
            failed = true;
        }
    }
    if let (Some(why), Some(0)) = (&expect.refuse, code) {
        t.oracle_violations += 1;
        t.failures.push(format!("{what}: accepted, although {why}"));
        failed = true;
    }
    let report: Option<Value> = serde_json::from_slice(&out).ok();
    if let (Some(k), Some(0)) = (&expect.kernels, code) {
        let said = report.as_ref().map(|r| r["kernels"].clone());
        if said.as_ref().and_then(Value::as_str) != Some(k.as_str()) {
            t.oracle_violations += 1;
            t.failures.push(format!(
                "{what}: the report's \"kernels\" is {said:?}, the run was for {k}"
            ));
            failed = true;
        }
    }
    if expect.verifies {
        let clean = code == Some(0)
            && report.as_ref().is_some_and(|r| {
                r["clobbers"].as_array().is_some_and(Vec::is_empty)
                    && r["bit_exact"] == Value::Bool(true)
            });
        if !clean {
            t.own_clobbers += 1;
            let clobbers = report.as_ref().map(|r| r["clobbers"].to_string());
            let clobbers: String = clobbers.unwrap_or_default().chars().take(300).collect();
            t.failures.push(format!(
                "{what}: a plan for its own library does not verify clean \
                 (exit {code:?}, clobbers {clobbers}): {err}"
            ));
            failed = true;
        }
    }
    // Nothing but the inputs is left in the directory.
    let mut left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !job.files.iter().any(|(f, _)| f == n))
        .collect();
    left.sort();
    if !left.is_empty() {
        t.leftovers += 1;
        t.failures.push(format!("{what}: left {left:?}"));
        failed = true;
    }
    if failed {
        keep(job.target, job.keep.0, &job.keep.1);
    }
    let _ = std::fs::remove_dir_all(&dir);
    t
}

pub(crate) fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}
