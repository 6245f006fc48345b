//! `memtrace check` on TFLM's own micro_speech test, built unmodified
//! (`make -C harness-c tflm-apps`): the audio preprocessor model (TFLM's
//! signal operators) turns each 30 ms window of six WAV files into a
//! feature vector, and the micro_speech_quantized model classifies 49 of
//! them. Every operator the two interpreters invoke is a layer; its figures
//! are set against `memtrace run` of the same model on memtrace's own TFLM
//! runner, and the program's counts against what its sources and data say.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::check_tflm_app::{buffer_counts, buffer_sizes, check, overlap, same_arena, tflm_app};
use common::{json, memtrace, path_str, stderr, u};
use serde_json::Value;

/// TFLM's micro_speech example in the tests tree.
fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/third_party/tflm-tests/tensorflow/lite/micro/examples/micro_speech")
}

fn model(name: &str) -> PathBuf {
    example().join("models").join(format!("{name}.tflite"))
}

/// `constexpr … NAME = VALUE;` of one of the example's sources.
fn constant(file: &str, name: &str) -> u64 {
    let text = std::fs::read_to_string(example().join(file)).unwrap();
    text.lines()
        .find_map(|l| {
            let (left, right) = l.split_once('=')?;
            let value = right.split(';').next()?.trim();
            (left.split_whitespace().last() == Some(name))
                .then(|| value.parse().ok())
                .flatten()
        })
        .unwrap_or_else(|| panic!("no constant {name} in {file}"))
}

/// The samples of a WAV file of the test data: its `data` chunk's bytes
/// (16-bit samples), the RIFF chunks walked from the file itself.
fn wav_samples(name: &str) -> u64 {
    let bytes = std::fs::read(example().join("testdata").join(format!("{name}.wav"))).unwrap();
    assert_eq!(&bytes[..4], b"RIFF");
    let mut at = 12;
    while at + 8 <= bytes.len() {
        let size = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
        if &bytes[at..at + 4] == b"data" {
            return size as u64 / 2;
        }
        at += 8 + size + (size & 1);
    }
    panic!("{name}.wav has no data chunk")
}

/// How many windows `GenerateFeatures` makes of `samples`: one per
/// `kFeatureStrideMs` while a whole `kFeatureDurationMs` is left, at most
/// `kFeatureCount` (micro_model_settings.h).
fn windows(samples: u64) -> u64 {
    let settings = "micro_model_settings.h";
    let rate = constant(settings, "kAudioSampleFrequency");
    let window = constant(settings, "kFeatureDurationMs") * rate / 1000;
    let stride = constant(settings, "kFeatureStrideMs") * rate / 1000;
    let most = constant(settings, "kFeatureCount");
    if samples < window {
        return 0;
    }
    ((samples - window) / stride + 1).min(most)
}

/// The test's audio, in the order of its tests: the two feature tests
/// (preprocessor only), then the four that also classify.
const AUDIO: [(&str, bool); 6] = [
    ("no_30ms", false),
    ("yes_30ms", false),
    ("no_1000ms", true),
    ("yes_1000ms", true),
    ("silence_1000ms", true),
    ("noise_1000ms", true),
];

/// One run of an interpreter in the program: which model, and whether it
/// is the first of its interpreter (the preprocessor's state fresh).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Invocation {
    Preprocessor { audio: &'static str, first: bool },
    MicroSpeech { audio: &'static str },
}

/// The invocations the test makes, in order, from its audio.
fn expected_invocations() -> Vec<Invocation> {
    let mut out = Vec::new();
    for (audio, classify) in AUDIO {
        for w in 0..windows(wav_samples(audio)) {
            out.push(Invocation::Preprocessor {
                audio,
                first: w == 0,
            });
        }
        if classify {
            out.push(Invocation::MicroSpeech { audio });
        }
    }
    out
}

/// `check --operators` of the test program, once per test binary (25 s).
fn checked() -> &'static (Value, i32) {
    static REPORT: OnceLock<(Value, i32)> = OnceLock::new();
    REPORT.get_or_init(|| check(&tflm_app("micro_speech_test.elf"), &["--operators"]))
}

/// `memtrace run MODEL` on the runner with the test's arena size.
fn run(model: &Path, input: Option<&Path>) -> Value {
    let arena = constant("micro_speech_test.cc", "kArenaSize").to_string();
    let mut args = vec![
        "run",
        path_str(model),
        "--format",
        "json",
        "--arena-bytes",
        &arena,
    ];
    if let Some(i) = input {
        args.extend(["--input", path_str(i)]);
    }
    let out = memtrace(&args);
    assert!(out.status.code().is_some(), "{}", stderr(&out));
    json(&out)
}

/// The runner's operator windows (not its own input copy).
fn run_layers(run: &Value) -> Vec<&Value> {
    run["layers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["op"] != "load_input")
        .collect()
}

/// The operators of invocation `n` of the check report.
fn operators_of(report: &Value, n: usize) -> Vec<&Value> {
    report["tflm"]["operators"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| u(&o["invocation"]) as usize == n)
        .collect()
}

/// Everything a layer says of its memory: buffers by role and size, each
/// buffer's loads, stores and updates, the forward and reverse O_s.
type Figures = (
    Vec<(String, u64)>,
    Vec<(String, u64, u64, u64, u64)>,
    (Vec<u64>, Vec<u64>),
);

fn figures(layer: &Value) -> Figures {
    (buffer_sizes(layer), buffer_counts(layer), overlap(layer))
}

/// The `N` of each `<what> model arena size = N` line the program printed.
fn printed_arenas(stdout: &str, what: &str) -> Vec<u64> {
    let prefix = format!("{what} model arena size = ");
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok())
        .collect()
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn micro_speech_unmodified_passes_and_its_model_is_the_runners() {
    let (report, status) = checked();
    // The program's own verdict, reproduced.
    assert_eq!(*status, 0, "{report}");
    assert_eq!(report["exit_status"], 0);
    let stdout = report["stdout"].as_str().unwrap();
    assert!(stdout.contains("~~~ALL TESTS PASSED~~~"), "{stdout}");
    assert_eq!(report["memcheck"]["errors"], 0);
    let tflm = &report["tflm"];
    assert!(tflm["missing"].is_null(), "{tflm}");

    // Every invocation the test's audio makes, in order, and no other.
    let invocations = tflm["invocations"].as_array().unwrap();
    let expected = expected_invocations();
    assert_eq!(invocations.len(), expected.len());
    let micro = run(&model("micro_speech_quantized"), None);
    let pre = run(&model("audio_preprocessor_int8"), None);
    let theirs = run_layers(&micro);
    let printed = printed_arenas(stdout, "MicroSpeech");
    let mut classified = Vec::new();
    for (n, (inv, what)) in invocations.iter().zip(&expected).enumerate() {
        let runner = match what {
            Invocation::Preprocessor { .. } => &pre,
            Invocation::MicroSpeech { .. } => &micro,
        };
        assert_eq!(
            u(&inv["operators"]),
            u(&runner["tflm"]["operators"]),
            "invocation {n}: {what:?}"
        );
        same_arena(&inv["arena"], &runner["tflm"]);
        if let Invocation::MicroSpeech { .. } = what {
            classified.push(n);
        }
    }
    // TFLM's own `arena_used_bytes()` of each interpreter, as the program
    // printed it, is what memtrace read from its allocator.
    assert_eq!(printed.len(), classified.len());
    for (&n, &used) in classified.iter().zip(&printed) {
        assert_eq!(u(&invocations[n]["arena"]["arena_used_bytes"]), used);
    }
    let fresh: Vec<usize> = expected
        .iter()
        .enumerate()
        .filter(|(_, i)| matches!(i, Invocation::Preprocessor { first: true, .. }))
        .map(|(n, _)| n)
        .collect();
    let printed = printed_arenas(stdout, "AudioPreprocessor");
    assert_eq!(printed.len(), fresh.len());
    for (&n, &used) in fresh.iter().zip(&printed) {
        assert_eq!(u(&invocations[n]["arena"]["arena_used_bytes"]), used);
    }

    // The classifier on four recordings: its reference kernels touch
    // memory the same way whatever the features, so every invocation's
    // operators are alike and the runner's on its seeded input.
    for &n in &classified {
        let ops = operators_of(report, n);
        assert_eq!(ops.len(), theirs.len());
        for (op, their) in ops.iter().zip(&theirs) {
            assert_eq!(op["op"], their["op"], "invocation {n}");
            assert_eq!(op["violates"], false, "{op}");
            assert_eq!(
                figures(&op["layer"]),
                figures(their),
                "invocation {n}: {} vs the runner's",
                op["op"]
            );
        }
    }
    assert!(tflm["operators"]
        .as_array()
        .unwrap()
        .iter()
        .all(|o| o["violates"] == false));
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn the_preprocessors_first_window_is_the_runners_and_its_state_writes_are_its_own() {
    let (report, _) = checked();
    for (n, inv) in expected_invocations().iter().enumerate() {
        let Invocation::Preprocessor { audio, first: true } = inv else {
            continue;
        };
        // A fresh interpreter on the first 30 ms of the file: the runner's
        // one Invoke() on the same samples.
        let window = tflm_app("micro_speech").join(format!("{audio}_window.bin"));
        let runner = run(&model("audio_preprocessor_int8"), Some(&window));
        let theirs = run_layers(&runner);
        let ops = operators_of(report, n);
        assert_eq!(ops.len(), theirs.len());
        let mut state_writers = 0;
        for (op, their) in ops.iter().zip(&theirs) {
            let what = format!("{audio}: {}", op["op"]);
            assert_eq!(op["op"], their["op"], "{what}");
            assert_eq!(figures(&op["layer"]), figures(their), "{what}");
            // The signal kernels keep state in the op data they allocated
            // while initialised and prepared. The program's layer knows it
            // as theirs (check counts those stores); the runner declares it
            // as the operator's persistent memory: no stray write either.
            assert_eq!(op["violates"], false, "{what}");
            let stray = &their["contract"]["stray_write"];
            assert_eq!(stray["ok"], true, "{what}: {stray}");
            if u(&op["persistent"]["writes"]) > 0 {
                assert!(u(&op["persistent"]["bytes"]) > 0, "{what}");
                state_writers += 1;
            }
        }
        assert!(
            state_writers >= 3,
            "{audio}: the signal kernels write their state ({state_writers} operators)"
        );
    }
}

/// The `expected_feature` array of the test `TEST(MicroSpeechTest, NAME)`
/// in micro_speech_test.cc.
fn expected_feature(test: &str) -> Vec<i8> {
    let source = std::fs::read_to_string(example().join("micro_speech_test.cc")).unwrap();
    let body = &source[source
        .find(&format!("TEST(MicroSpeechTest, {test})"))
        .unwrap()..];
    let start = body.find('{').unwrap();
    let array = &body[body[start + 1..].find('{').unwrap() + start + 2..];
    array[..array.find('}').unwrap()]
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .collect()
}

/// The features of a WAV file by the host oracle (PyPI tflite-micro) and
/// scripts/micro_speech_features.py, written to `out`.
fn oracle_features(wav: &str, out: &Path) -> Vec<i8> {
    let python = std::env::var_os("MEMTRACE_TFLM_PYTHON").expect("MEMTRACE_TFLM_PYTHON");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/micro_speech_features.py");
    let status = std::process::Command::new(python)
        .arg(script)
        .arg(example())
        .arg(format!("{wav}.wav"))
        .arg(out)
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::read(out)
        .unwrap()
        .iter()
        .map(|&b| b as i8)
        .collect()
}

#[test]
#[cfg_attr(
    any(no_tflm, no_oracle),
    ignore = "needs the TFLM runners and MEMTRACE_TFLM_PYTHON (the tflite-micro oracle)"
)]
fn micro_speech_on_the_features_of_its_own_audio_is_the_runners() {
    let dir = tempfile::tempdir().unwrap();
    // The oracle's features are the test's own: its first feature vector
    // of each 30 ms recording is what the test expects.
    let size = constant("micro_model_settings.h", "kFeatureSize") as usize;
    for (wav, test) in [("no_30ms", "NoFeatureTest"), ("yes_30ms", "YesFeatureTest")] {
        let features = oracle_features(wav, &dir.path().join(format!("{wav}.bin")));
        assert_eq!(features[..size], expected_feature(test), "{wav}");
    }
    let (report, _) = checked();
    for (n, inv) in expected_invocations().iter().enumerate() {
        let Invocation::MicroSpeech { audio } = inv else {
            continue;
        };
        let input = dir.path().join(format!("{audio}.bin"));
        oracle_features(audio, &input);
        let runner = run(&model("micro_speech_quantized"), Some(&input));
        let ops = operators_of(report, n);
        let theirs = run_layers(&runner);
        assert_eq!(ops.len(), theirs.len());
        for (op, their) in ops.iter().zip(&theirs) {
            assert_eq!(
                figures(&op["layer"]),
                figures(their),
                "{audio}: {}",
                op["op"]
            );
        }
        same_arena(&report["tflm"]["invocations"][n]["arena"], &runner["tflm"]);
    }
}
