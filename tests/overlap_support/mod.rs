//! Helpers shared by the O_s integration tests (`overlap_*`, `validate_*`,
//! `regress_*`): run the real `memtrace` binary on the real kernel-suite ELFs.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

pub const TABLE_ONE: &str =
    "op=depthwise_conv2d,dtype=f32,input=1x112x112x96,filter=1x3x3x96,stride=2,padding=same";

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `harness-c/build/<arch>/<name>`, or a panic that says how to build it.
pub fn elf(arch: &str, name: &str) -> PathBuf {
    let path = root().join("harness-c/build").join(arch).join(name);
    assert!(
        path.is_file(),
        "{} is missing: build the guests first with `make -C harness-c` (the top-level `make test` does)",
        path.display()
    );
    path
}

pub fn suite(arch: &str) -> PathBuf {
    elf(arch, "suite.elf")
}

pub fn modified(arch: &str) -> PathBuf {
    elf(arch, "suite-modified.elf")
}

pub fn memtrace<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    Command::new(env!("CARGO_BIN_EXE_memtrace"))
        .args(args)
        .env("CI", "1")
        .output()
        .expect("cannot start the memtrace binary")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "memtrace did not print JSON ({e}); status {:?}\nstdout:\n{}\nstderr:\n{}",
            o.status,
            stdout(o),
            stderr(o)
        )
    })
}

pub fn u(v: &Value) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("expected an unsigned integer, got {v}"))
}

pub fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// `memtrace run ELF --job SPEC --format json` -> the single layer's JSON.
pub fn run_job(elf: &Path, spec: &str) -> Value {
    let o = memtrace(["run", path_str(elf), "--job", spec, "--format", "json"]);
    assert!(o.status.success(), "run --job {spec}: {}", stderr(&o));
    let mut v = json(&o);
    let layers = v["layers"].as_array_mut().expect("layers");
    assert_eq!(layers.len(), 1);
    layers.remove(0)
}
