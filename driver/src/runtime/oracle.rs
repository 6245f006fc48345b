//! The host oracle: the same model and input in PyPI `tflite-micro` (the
//! real TensorFlow Lite Micro, built for the host, reference kernels), whose
//! outputs memtrace's emulated runs must equal: byte for byte, float outputs
//! within [`FLOAT_ULP_TOLERANCE`](memtrace_analyzer::verify::FLOAT_ULP_TOLERANCE).
//!
//! The Python is `MEMTRACE_TFLM_PYTHON`, or the virtual environment that
//! `make test` creates (`~/.cache/memtrace-venv`); without either, nothing
//! is compared and reports say so. It runs isolated (`-I`: no current
//! directory, script directory, user site-packages or `PYTHON*` variables on
//! its module path) in a private temporary directory that holds the model
//! and the input and output files, so nothing in the directory memtrace runs
//! from is imported, and an interrupted run leaves nothing behind
//! ([`memtrace_io::private_dir`]).

use std::path::{Path, PathBuf};
use std::process::Command;

use memtrace_io::private_dir::PrivateDir;

use crate::support::error::Result;
use crate::{bail, failed};

/// The script the oracle's Python runs: model, input file, output file,
/// number of inputs and outputs; prints the package version.
const SCRIPT: &str = r#"
import sys, importlib.metadata
import numpy as np
from tflite_micro.python.tflite_micro import runtime
model, inp, out, n_in, n_out = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
interp = runtime.Interpreter.from_file(model, arena_size=64 << 20)
data = open(inp, "rb").read()
at = 0
for i in range(n_in):
    d = interp.get_input_details(i)
    n = int(np.prod(d["shape"])) * np.dtype(d["dtype"]).itemsize
    interp.set_input(np.frombuffer(data[at:at + n], dtype=d["dtype"]).reshape(d["shape"]), i)
    at += n
if at != len(data):
    raise SystemExit("input bytes: %d given, the model takes %d" % (len(data), at))
interp.invoke()
with open(out, "wb") as f:
    for j in range(n_out):
        f.write(np.ascontiguousarray(interp.get_output(j)).tobytes())
print(importlib.metadata.version("tflite-micro"))
"#;

pub use memtrace_analyzer::verify::{OracleComparison, OutputLayout};

/// The oracle's Python, if one is configured or installed. A relative
/// `MEMTRACE_TFLM_PYTHON` with a directory part is taken from the current
/// directory now (the Python runs in another); one without is looked up on
/// `PATH`.
pub fn python() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("MEMTRACE_TFLM_PYTHON") {
        let p = PathBuf::from(p);
        if p.components().count() > 1 {
            // Not canonicalised: a virtual environment's python is a link
            // that must keep its own path.
            return Some(std::path::absolute(&p).unwrap_or(p));
        }
        return Some(p);
    }
    let venv = PathBuf::from(std::env::var_os("HOME")?).join(".cache/memtrace-venv/bin/python");
    venv.exists().then_some(venv)
}

/// Runs `model` on `inputs` (all graph inputs, concatenated) in the host
/// TFLM of Python `py` ([`python`]) and compares its outputs with `outputs`
/// (the graph outputs of `layout`, concatenated).
pub fn compare(
    py: &Path,
    model: &[u8],
    n_inputs: usize,
    layout: &[OutputLayout],
    inputs: &[u8],
    outputs: &[u8],
) -> Result<OracleComparison> {
    let dir = PrivateDir::new(".memtrace-oracle.")
        .map_err(|e| failed!("a temporary folder for the oracle: {e}"))?;
    let (m, i) = dir
        .write("model.tflite", model)
        .and_then(|m| Ok((m, dir.write("input.bin", inputs)?)))
        .map_err(|e| failed!("writing the oracle's inputs: {e}"))?;
    let o = dir.path().join("output.bin");
    let started = std::time::Instant::now();
    let out = dir
        .run(
            Command::new(py)
                .arg("-I")
                .arg("-c")
                .arg(SCRIPT)
                .args([&m, &i, &o])
                .arg(n_inputs.to_string())
                .arg(layout.len().to_string())
                // numpy's OpenBLAS would start a thread per core that spins
                // while idle, taking the core of the emulator run beside the
                // oracle.
                .env("OPENBLAS_NUM_THREADS", "1"),
        )
        .map_err(|e| failed!("running the oracle {}: {e}", py.display()))?;
    let python = py.display().to_string();
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(str::to_string)
            .unwrap_or_else(|| format!("the oracle's Python ended with {}", out.status));
        if last.contains("No module named") {
            // The user named this Python: theirs to fix. The default venv is
            // an optional oracle: a half-made one is not run, and says why.
            if std::env::var_os("MEMTRACE_TFLM_PYTHON").is_some() {
                bail!("{python} has no tflite-micro ({last}): `pip install tflite-micro` or unset MEMTRACE_TFLM_PYTHON");
            }
            return Ok(OracleComparison::not_run(
                python,
                format!("{last}: the oracle's virtual environment is incomplete (`make oracle` installs it again)"),
            ));
        }
        return Ok(OracleComparison {
            seconds: started.elapsed().as_secs_f64(),
            ..OracleComparison::not_run(python, last)
        });
    }
    let host = memtrace_io::input::read_limited(
        &o,
        (outputs.len() as u64).saturating_mul(2).max(1 << 20),
        "the oracle's outputs",
    )
    .map_err(|e| failed!("reading the oracle's outputs: {e}"))?;
    let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
    Ok(OracleComparison {
        seconds: started.elapsed().as_secs_f64(),
        ..OracleComparison::of_outputs(python, version, layout, &host, outputs)
    })
}
