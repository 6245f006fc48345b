//! `regress --unit-tests` names the bug class it exists for: a CMSIS-NN
//! call whose scratch, sized by the library's own size function, is
//! smaller than its kernel's use. The finding is the call's — API
//! function, the kernel that overran, call site, shapes, the bytes the
//! size function asked for and the bytes the kernel used — and says which
//! build has it.
//!
//! CMSIS-NN v7.0.0's own unit tests reach neither known sizing defect
//! (docs/kernels.md): no grouped 1×1 convolution goes through the wrapper,
//! and the transpose convolutions with stride_w > stride_h have filters
//! whose rows cover the stride. So the program is `guests/grouped_1x1_conv.c`:
//! a grouped 1×1 convolution through the real `arm_convolve_wrapper_s8`,
//! its scratch a heap block of what `arm_convolve_wrapper_s8_get_buffer_size`
//! returns, built against v7.0.0 (which sizes it 0 B) and the development
//! head (which sizes it as the wrapper chooses).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::common::unit_tests::{compile, line_of};
use crate::common::{memtrace, path_str};

const SOURCE: &str = include_str!("guests/grouped_1x1_conv.c");

/// The grouped 1×1 convolution built against `release`.
fn built_against(release: &str) -> PathBuf {
    guest_built_against("grouped_1x1_conv", release)
}

/// The guest `guests/<name>.c` built against the CMSIS-NN checkout
/// `release` (`../shared/third_party/<release>`): its convolution and
/// support sources as the library's build lists them, in a folder of its
/// own holding only `<name>.elf`. Built once per test binary (the tests
/// build one at a time).
fn guest_built_against(name: &str, release: &str) -> PathBuf {
    static BUILDING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = BUILDING.lock().unwrap_or_else(|e| e.into_inner());
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let checkout = root.join("../shared/third_party").join(release);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("regress-scratch")
        .join(name)
        .join(release);
    let elf = dir.join(format!("{name}.elf"));
    if elf.exists() {
        return dir;
    }
    std::fs::create_dir_all(&dir).unwrap();
    let listed = Command::new("python3")
        .arg(root.join("harness-c/cmsis-nn/sources.py"))
        .arg(&checkout)
        .output()
        .expect("python3 runs");
    assert!(listed.status.success(), "sources.py failed for {release}");
    let sources: Vec<PathBuf> = String::from_utf8(listed.stdout)
        .unwrap()
        .split_whitespace()
        .filter(|s| s.starts_with("ConvolutionFunctions/") || s.starts_with("NNSupportFunctions/"))
        .map(|s| checkout.join("Source").join(s))
        .collect();
    let guest = root.join(format!("tests/hostile/guests/{name}.c"));
    let mut all: Vec<&Path> = vec![&guest];
    all.extend(sources.iter().map(PathBuf::as_path));
    let include = format!("-I{}", checkout.join("Include").display());
    let core = format!(
        "-I{}",
        root.join("../shared/third_party/tflm/third_party/cmsis/CMSIS/Core/Include")
            .display()
    );
    // Built beside the folder, then moved in: a half-built program is never
    // a suite.
    let tmp = dir.with_extension(format!("{}.elf", std::process::id()));
    compile(
        &all,
        &[],
        &[
            "-Ofast",
            "-ffunction-sections",
            "-fdata-sections",
            "-Wl,--gc-sections",
            "-w",
            &include,
            &core,
        ],
        &tmp,
    );
    std::fs::rename(&tmp, &elf).unwrap();
    dir
}

/// `regress --unit-tests OLD NEW --format json`: the report, its stdout and
/// stderr together, and the exit status.
fn regress(old: &Path, new: &Path) -> (Value, String, i32) {
    let out = memtrace([
        "regress",
        "--unit-tests",
        path_str(old),
        path_str(new),
        "--format",
        "json",
    ]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let start = text.find('{').expect("a JSON report");
    let end = text.rfind('}').unwrap() + 1;
    let report: Value = serde_json::from_str(&text[start..end]).unwrap();
    let words = format!("{text}{}", String::from_utf8_lossy(&out.stderr));
    (report, words, out.status.code().unwrap_or(-1))
}

/// The scratch the program asked for, as it prints it (`scratch N B`),
/// under `memtrace check` of the program alone.
fn printed_scratch(dir: &Path) -> u64 {
    printed_scratch_of(dir, "grouped_1x1_conv")
}

fn printed_scratch_of(dir: &Path, name: &str) -> u64 {
    let out = memtrace(["check", path_str(&dir.join(format!("{name}.elf")))]);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("scratch "))
        .expect("the program prints its scratch size");
    line.trim_end_matches(" B").parse().unwrap()
}

/// Bytes `arm_convolve_s8` (no MVE) reaches of its im2col buffer for this
/// convolution, counted by hand from its loop: each output pixel's column
/// of k = 1·1·2 int8 values is copied to byte 2a on (a = k rounded up to
/// 4), two pixels at a time, so four output pixels reach 2a + 2k.
const USED_BY_ARM_CONVOLVE_S8: u64 = 2 * 4 + 2 * 2;

fn the_overrun(report: &Value) -> &Value {
    let suite = &report["suites"][0];
    assert_eq!(suite["suite"], "grouped_1x1_conv");
    let overruns = suite["scratch_overruns"]
        .as_array()
        .expect("the suite lists its scratch overruns");
    assert_eq!(overruns.len(), 1, "one call overran: {overruns:?}");
    &overruns[0]
}

fn assert_names_the_call(overrun: &Value) {
    assert_eq!(overrun["function"], "arm_convolve_wrapper_s8");
    let line = line_of(SOURCE, "arm_convolve_wrapper_s8(&ctx");
    assert!(
        overrun["site"]
            .as_str()
            .unwrap()
            .ends_with(&format!("grouped_1x1_conv.c:{line})")),
        "{overrun}"
    );
    let shapes = overrun["shapes"].as_str().unwrap();
    for dims in [
        "input=1x4x4x4",
        "filter=2x1x1x2",
        "output=1x2x2x2",
        "stride=2x2",
    ] {
        assert!(shapes.contains(dims), "{dims} not in {shapes}");
    }
}

#[test]
fn a_release_whose_size_function_under_reports_fails_naming_kernel_shapes_and_bytes() {
    let (head, v7) = (built_against("cmsis-nn-main"), built_against("cmsis-nn"));
    let asked = printed_scratch(&v7);
    assert_eq!(asked, 0, "v7.0.0 sizes the grouped 1x1 convolution as 1x1");
    let (report, words, status) = regress(&head, &v7);
    assert_eq!(status, 1, "{words}");
    let overrun = the_overrun(&report);
    assert_names_the_call(overrun);
    assert!(overrun["old"].is_null(), "the head stays within: {overrun}");
    let new = &overrun["new"];
    assert_eq!(new["kernel"], "arm_convolve_s8");
    assert_eq!(new["asked_bytes"].as_u64(), Some(asked));
    assert_eq!(new["used_bytes"].as_u64(), Some(USED_BY_ARM_CONVOLVE_S8));
    assert!(
        words.contains("FAIL grouped_1x1_conv")
            && words.contains("scratch overrun in the new build")
            && words.contains("arm_convolve_s8 used 12 B"),
        "{words}"
    );
}

#[test]
fn the_release_that_fixed_the_sizing_is_named_and_not_failed() {
    let (v7, head) = (built_against("cmsis-nn"), built_against("cmsis-nn-main"));
    let asked_by_head = printed_scratch(&head);
    assert!(
        asked_by_head >= USED_BY_ARM_CONVOLVE_S8,
        "{asked_by_head} B"
    );
    let (report, words, status) = regress(&v7, &head);
    assert_eq!(status, 0, "{words}");
    let overrun = the_overrun(&report);
    assert_names_the_call(overrun);
    assert!(overrun["new"].is_null(), "{overrun}");
    assert_eq!(overrun["old"]["asked_bytes"].as_u64(), Some(0));
    assert_eq!(
        overrun["old"]["used_bytes"].as_u64(),
        Some(USED_BY_ARM_CONVOLVE_S8)
    );
    assert!(words.contains("scratch overrun fixed"), "{words}");
}

/// The scratch `arm_transpose_conv_s8` (no MVE) uses for
/// `guests/transpose_conv_1x3.c`, counted from its loop: two rolling rows
/// (`MAX(filter_h, stride_h)` = 2) of the input's reach across,
/// `(input_w − 1)·stride_w + MAX(filter_w, stride_w)` = 2·3 + 3 columns,
/// of `out_ch` = 2 int32 accumulators.
const USED_BY_ARM_TRANSPOSE_CONV_S8: u64 = 2 * (2 * 3 + 3) * 2 * 4;

/// A sizing defect both releases keep (the transpose convolution's rolling
/// buffer sized with the stride down where the kernel uses the stride
/// across) is no change between them: `regress --unit-tests` passes, and
/// still reports the call with both builds' figures, the bytes each size
/// function asked for (the programs' own print) and the bytes the kernel
/// reached.
#[test]
fn a_sizing_defect_both_releases_keep_is_reported_with_both_builds_figures() {
    let name = "transpose_conv_1x3";
    let (v7, head) = (
        guest_built_against(name, "cmsis-nn"),
        guest_built_against(name, "cmsis-nn-main"),
    );
    let asked = [
        printed_scratch_of(&v7, name),
        printed_scratch_of(&head, name),
    ];
    assert_eq!(asked[0], asked[1], "both size functions agree");
    assert!(asked[0] < USED_BY_ARM_TRANSPOSE_CONV_S8, "{asked:?}");
    let (report, words, status) = regress(&v7, &head);
    assert_eq!(status, 0, "{words}");
    let suite = &report["suites"][0];
    assert_eq!(suite["suite"], name);
    let overruns = suite["scratch_overruns"].as_array().unwrap();
    assert_eq!(overruns.len(), 1, "{overruns:?}");
    let overrun = &overruns[0];
    assert_eq!(overrun["function"], "arm_transpose_conv_wrapper_s8");
    let line = line_of(
        include_str!("guests/transpose_conv_1x3.c"),
        "arm_transpose_conv_wrapper_s8(",
    );
    assert!(
        overrun["site"]
            .as_str()
            .unwrap()
            .ends_with(&format!("{name}.c:{line})")),
        "{overrun}"
    );
    let shapes = overrun["shapes"].as_str().unwrap();
    for dims in ["input=1x3x3x2", "filter=2x2x1x2", "output=1x4x7x2"] {
        assert!(shapes.contains(dims), "{dims} not in {shapes}");
    }
    for build in ["old", "new"] {
        let u = &overrun[build];
        assert_eq!(u["kernel"], "arm_transpose_conv_s8", "{build}: {overrun}");
        assert_eq!(
            u["asked_bytes"].as_u64(),
            Some(asked[0]),
            "{build}: {overrun}"
        );
        assert_eq!(
            u["used_bytes"].as_u64(),
            Some(USED_BY_ARM_TRANSPOSE_CONV_S8),
            "{build}: {overrun}"
        );
    }
    let text = memtrace(["regress", "--unit-tests", path_str(&v7), path_str(&head)]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&text.stdout),
        String::from_utf8_lossy(&text.stderr)
    );
    assert!(
        text.contains("scratch overrun in both builds")
            && text.contains("arm_transpose_conv_s8 used 144 B"),
        "{text}"
    );
}
