//! CMSIS-NN's unit tests for `memtrace check`: the built suites, C programs
//! compiled with semihosting, and copies of a suite with a bug planted.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use super::{json, memtrace, path_str};

/// The Cortex-M4 flags of the unit tests' build.
pub const ARCH: [&str; 4] = [
    "-mcpu=cortex-m4",
    "-mthumb",
    "-mfloat-abi=hard",
    "-mfpu=fpv4-sp-d16",
];

/// The built unit-test suites (`make -C harness-c/unit-tests`).
pub fn unit_tests() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("harness-c/build/cortex-m4/unit-tests");
    assert!(
        dir.join("test_arm_convolve_s8.elf").exists(),
        "{} is missing: build the unit tests first (`make -C harness-c/unit-tests`, or `make test`)",
        dir.display()
    );
    dir
}

/// CMSIS-NN's test cases (sources and test data).
pub fn tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/third_party/cmsis-nn-tests/UnitTest/TestCases")
}

/// Compiles `sources` (plus `extra` objects) with semihosting into `out`.
pub fn compile(sources: &[&Path], extra: &[PathBuf], flags: &[&str], out: &Path) {
    let status = Command::new("arm-none-eabi-gcc")
        .args(ARCH)
        .args(flags)
        .args(["-g", "--specs=rdimon.specs"])
        .args(sources)
        .args(extra)
        .args(["-lm", "-o"])
        .arg(out)
        .status()
        .expect("arm-none-eabi-gcc runs");
    assert!(status.success(), "compiling {sources:?} failed");
}

/// The 1-based line of `source` holding `needle` (the first).
pub fn line_of(source: &str, needle: &str) -> u64 {
    source
        .lines()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("`{needle}` not in the source")) as u64
        + 1
}

/// `memtrace check --format json` of `elf`: the report and the exit status.
pub fn check_json(elf: &Path, extra: &[&str]) -> (Value, i32) {
    let mut args = vec!["check", "--format", "json", path_str(elf)];
    args.extend_from_slice(extra);
    let out = memtrace(&args);
    (json(&out), out.status.code().unwrap_or(-1))
}

/// One copy of CMSIS-NN's convolve_s8 suite, its test source edited by
/// `plant`, built against the unit tests' runner, Unity and library.
pub fn planted_suite(dir: &Path, plant: impl Fn(&str) -> String) -> (PathBuf, String) {
    planted_copy(dir, "test_arm_convolve_s8", plant)
}

/// One copy of the unit-test suite `suite` (`test_arm_svdf_s8`), its test
/// source edited by `plant`, built against the unit tests' runner, Unity
/// and library.
pub fn planted_copy(dir: &Path, suite: &str, plant: impl Fn(&str) -> String) -> (PathBuf, String) {
    let cases = dir.join("TestCases");
    let copy = cases.join(suite);
    std::fs::create_dir_all(copy.join("Unity")).unwrap();
    let original = tests_dir().join(suite);
    // The test data and helpers are read where they are, never copied.
    for shared in ["TestData", "Utils"] {
        std::os::unix::fs::symlink(tests_dir().join(shared), cases.join(shared)).unwrap();
    }
    let unity_file = format!("Unity/unity_{suite}.c");
    std::fs::copy(original.join(&unity_file), copy.join(&unity_file)).unwrap();
    let test_file = format!("{suite}.c");
    let source = plant(&std::fs::read_to_string(original.join(&test_file)).unwrap());
    std::fs::write(copy.join(&test_file), &source).unwrap();
    let built = unit_tests();
    let cmsis =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/third_party/cmsis-nn/Include");
    let unity = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/third_party/unity/src");
    let elf = dir.join("planted.elf");
    let include = |p: &Path| format!("-I{}", p.display());
    compile(
        &[&copy.join(&unity_file)],
        &[
            built.join(format!("obj/{suite}_runner.o")),
            built.join("unity.o"),
            built.join("libcmsis-nn.a"),
        ],
        &["-O1", &include(&cmsis), &include(&unity)],
        &elf,
    );
    (elf, source)
}

/// `text` with its first `old` replaced by `new`.
pub fn replace_first(text: &str, old: &str, new: &str) -> String {
    assert!(text.contains(old), "`{old}` not in the test source");
    text.replacen(old, new, 1)
}

/// Every integer `#define` of the headers of the test data `data`
/// (`TestData/<data>/*.h`; `true` and `false` as 1 and 0).
pub fn defines(data: &str) -> HashMap<String, i64> {
    let dir = tests_dir().join("TestData").join(data);
    let mut out = HashMap::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for line in text.lines() {
            let w: Vec<&str> = line.split_whitespace().collect();
            if w.len() == 3 && w[0] == "#define" {
                let value = match w[2] {
                    "true" => Some(1),
                    "false" => Some(0),
                    v => v.parse().ok(),
                };
                if let Some(v) = value {
                    out.insert(w[1].to_owned(), v);
                }
            }
        }
    }
    assert!(!out.is_empty(), "no #define in {}", dir.display());
    out
}

/// `P_NAME` of the test data `p` (`svdf_int8` → `SVDF_INT8_NAME`).
pub fn define(d: &HashMap<String, i64>, data: &str, name: &str) -> u64 {
    let key = format!("{}_{name}", data.to_uppercase());
    *d.get(&key).unwrap_or_else(|| panic!("{key} not defined")) as u64
}
