//! JSON stays JSON: a report in `--format json` (on stdout or in an
//! `--out` file) parses, with serde and with Python's `json`, to the very
//! strings a model, a path or a guest put in it, whatever they hold — C0
//! and C1 controls, DEL, bidirectional marks, overrides and isolates; the
//! characters a terminal would act on are written as JSON `\u` escapes.
//! Text reports still show them escaped. Bytes that are not UTF-8 (a path,
//! a guest's output) come out as U+FFFD.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use memtrace_model::tflite;
use memtrace_overlap::rng::Rng;
use serde_json::Value;

use crate::common::unit_tests::compile;

/// A run of the binary is killed (and counted as a hang) after this.
const LIMIT: Duration = Duration::from_secs(90);

/// One character of each class a terminal acts on, and the two JSON
/// escapes itself: C0 (NUL, ESC, CR, tab, newline), DEL, C1 (NEL, CSI),
/// bidi marks, embeddings, overrides and isolates; `"` and `\`.
const EVERY_CLASS: &str = "\u{0}\u{1b}[2J\r\t\n\u{7f}\u{85}\u{9b}\u{200e}\u{200f}\u{202a}\
                           \u{202b}\u{202c}\u{202d}\u{202e}\u{2066}\u{2067}\u{2068}\u{2069}\
                           \"\\μ\u{1f600}\u{2028}\u{feff}";

/// The classes the campaign draws from (each a range of code points).
const CLASSES: [(u32, u32); 9] = [
    (0x00, 0x1f),       // C0
    (0x7f, 0x7f),       // DEL
    (0x80, 0x9f),       // C1
    (0x200e, 0x200f),   // bidi marks
    (0x202a, 0x202e),   // embeddings and overrides
    (0x2066, 0x2069),   // isolates
    (0x20, 0x7e),       // printable ASCII (quotes and backslashes among them)
    (0xa0, 0x2fff),     // the rest of the BMP's scripts and symbols
    (0x1f300, 0x1f64f), // beyond the BMP
];

/// A character a terminal would act on rather than show (newline and tab
/// excepted: text reports are made of lines).
fn acts_on_terminal(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// A string of `len` characters, each from a class drawn at random.
fn random_string(rng: &mut Rng, len: u32) -> String {
    (0..len)
        .map(|_| {
            let (lo, hi) = CLASSES[rng.range(0, CLASSES.len() as u32 - 1) as usize];
            char::from_u32(rng.range(lo, hi)).unwrap_or('?')
        })
        .collect()
}

/// How one bounded run of the binary ended.
struct Ran {
    code: Option<i32>,
    signal: Option<i32>,
    hung: bool,
    stdout: Vec<u8>,
    stderr: String,
}

impl Ran {
    fn show(&self, args: &[&OsStr]) -> String {
        format!(
            "memtrace {args:?}: exit {:?}, signal {:?}, hung {}\nstdout:\n{}\nstderr:\n{}",
            self.code,
            self.signal,
            self.hung,
            String::from_utf8_lossy(&self.stdout),
            self.stderr
        )
    }
}

/// `memtrace ARGS` in `dir` (its `TMPDIR` `dir/tmp`, its trace cache
/// `dir/cache`), without the host oracle, killed after [`LIMIT`].
fn memtrace(dir: &Path, args: &[&OsStr]) -> Ran {
    std::fs::create_dir_all(dir.join("tmp")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_memtrace"))
        .args(args)
        .current_dir(dir)
        .env("CI", "1")
        .env("TMPDIR", dir.join("tmp"))
        .env("MEMTRACE_CACHE_DIR", dir.join("cache"))
        .env_remove("MEMTRACE_TFLM_PYTHON")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("memtrace starts");
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let started = Instant::now();
    let (status, hung) = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break (s, false);
        }
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            break (child.wait().unwrap(), true);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ran {
        code: status.code(),
        signal: status.signal(),
        hung,
        stdout: out.join().unwrap(),
        stderr: String::from_utf8_lossy(&err.join().unwrap()).into_owned(),
    }
}

/// `text` parsed as JSON by serde and by Python's `json` module, which
/// must agree: the value.
fn parsed_by_both(text: &[u8], what: &str) -> Value {
    let text = std::str::from_utf8(text).unwrap_or_else(|e| panic!("{what}: not UTF-8: {e}"));
    let value: Value = serde_json::from_str(text)
        .unwrap_or_else(|e| panic!("{what}: serde_json: not JSON ({e}):\n{text}"));
    let mut python = Command::new("python3")
        .args([
            "-c",
            "import json, sys; print(json.dumps(json.loads(sys.stdin.read())))",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    python
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let done = python.wait_with_output().unwrap();
    assert!(
        done.status.success(),
        "{what}: Python's json.loads refused it: {}",
        String::from_utf8_lossy(&done.stderr)
    );
    let again: Value = serde_json::from_slice(&done.stdout).unwrap();
    assert_eq!(again, value, "{what}: Python read another value");
    value
}

/// No character a terminal acts on, raw, in `text` (JSON included: there
/// they are escapes).
fn assert_printable(text: &str, what: &str) {
    if let Some(c) = text.chars().find(|&c| acts_on_terminal(c)) {
        panic!("{what} holds a raw {c:?}:\n{text}");
    }
}

/// Every string of a JSON value.
fn strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|v| strings(v, out)),
        Value::Object(o) => o.iter().for_each(|(k, v)| {
            out.push(k.clone());
            strings(v, out)
        }),
        _ => {}
    }
}

/// A shared model's bytes (`../shared/models/NAME.tflite`).
fn shared(name: &str) -> Vec<u8> {
    std::fs::read(crate::common::shared_model(&format!("{name}.tflite"))).unwrap()
}

/// `bytes` with tensor `i` of subgraph 0 named `name(i)`.
fn renamed(bytes: &[u8], name: impl Fn(usize) -> String) -> Vec<u8> {
    tflite::rewrite(bytes, |m| {
        let g = &mut m.subgraphs.as_mut().unwrap()[0];
        for (i, t) in g.tensors.as_mut().unwrap().iter_mut().enumerate() {
            t.name = Some(name(i));
        }
    })
    .expect("the model re-encodes")
}

/// A semihosted program that prints [`GUEST_BYTES`] to stdout and stderr,
/// then its arguments one a line; exit 3 with arguments.
fn hostile_printer(dir: &Path) -> PathBuf {
    let c = dir.join("printer.c");
    std::fs::write(
        &c,
        r#"#include <stdio.h>
static const char hostile[] =
    "c0:\x01\x1b[31m\r del:\x7f c1:\xc2\x85\xc2\x9b bidi:\xe2\x80\xae\xe2\x81\xa6 bad:\xff\xfe\xc2 end\n";
int main(int argc, char **argv) {
  fputs(hostile, stdout);
  fputs(hostile, stderr);
  for (int i = 1; i < argc; i++) printf("%s\n", argv[i]);
  return argc > 1 ? 3 : 0;
}
"#,
    )
    .unwrap();
    let elf = dir.join("printer.elf");
    compile(&[&c], &[], &["-O1"], &elf);
    elf
}

/// What [`hostile_printer`] prints, byte for byte (not all UTF-8).
const GUEST_BYTES: &[u8] =
    b"c0:\x01\x1b[31m\r del:\x7f c1:\xc2\x85\xc2\x9b bidi:\xe2\x80\xae\xe2\x81\xa6 bad:\xff\xfe\xc2 end\n";

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn json_reports_keep_tensor_names_of_every_unicode_class() {
    let dir = tempfile::tempdir().unwrap();
    let name = |i: usize| format!("t{i}{EVERY_CLASS}");
    let bytes = renamed(&shared("tflm_hello_world_int8"), name);
    let count = tflite::import_for_tflm("m", &bytes).unwrap().tensors.len();
    let model = dir.path().join("names.tflite");
    std::fs::write(&model, &bytes).unwrap();
    let m = model.as_os_str();
    let out = dir.path().join("cold.json");
    let csv = dir.path().join("cold.csv");
    for args in [
        vec![os("run"), m, os("--format"), os("json")],
        vec![os("plan"), m, os("--format"), os("json")],
        vec![
            os("verify"),
            m,
            os("--no-oracle"),
            os("--format"),
            os("json"),
        ],
        vec![os("cold"), m, os("--format"), os("json")],
        vec![
            os("cold"),
            m,
            os("--format"),
            os("json"),
            os("--out"),
            out.as_os_str(),
        ],
    ] {
        let ran = memtrace(dir.path(), &args);
        assert_eq!(ran.code, Some(0), "{}", ran.show(&args));
        let text = if args.contains(&os("--out")) {
            assert!(ran.stdout.is_empty(), "{}", ran.show(&args));
            std::fs::read(&out).unwrap()
        } else {
            ran.stdout.clone()
        };
        assert_printable(std::str::from_utf8(&text).unwrap(), "the JSON");
        assert_printable(&ran.stderr, "stderr");
        let report = parsed_by_both(&text, &format!("{args:?}"));
        // Every tensor name in the report is one the model holds, whole.
        let mut all = Vec::new();
        strings(&report, &mut all);
        let names: Vec<&String> = all.iter().filter(|s| s.contains(EVERY_CLASS)).collect();
        // `run` names its buffers as the runner guest declares them over
        // the port, which ends a name at its first control byte; the
        // commands that read the model's names on the host keep them whole.
        if args[0] != os("run") {
            assert!(!names.is_empty(), "no tensor name in {args:?}: {report}");
        }
        for n in &names {
            assert!(
                (0..count).any(|i| n.contains(&name(i))),
                "{args:?}: `{n:?}` is no tensor's name"
            );
        }
    }
    // The same names in a text report and in CSV written to a file: the
    // table shows them escaped; CSV is data, the names as they are.
    let args = [os("verify"), m, os("--no-oracle")];
    let ran = memtrace(dir.path(), &args);
    assert_eq!(ran.code, Some(0), "{}", ran.show(&args));
    let text = String::from_utf8(ran.stdout.clone()).unwrap();
    assert_printable(&text, "the text report");
    let args = [
        os("cold"),
        m,
        os("--format"),
        os("csv"),
        os("--out"),
        csv.as_os_str(),
    ];
    let ran = memtrace(dir.path(), &args);
    assert_eq!(ran.code, Some(0), "{}", ran.show(&args));
    let rows = std::fs::read_to_string(&csv).unwrap();
    assert!(
        rows.contains("\u{202e}\u{2066}") && !rows.contains("\\u{202e}"),
        "{rows}"
    );
}

#[test]
fn a_program_path_and_a_guests_output_of_every_class_are_json_in_check() {
    let dir = tempfile::tempdir().unwrap();
    let printer = hostile_printer(dir.path());
    // A folder whose name holds every class (NUL and `/` cannot be in a
    // file name), and a file name that is not UTF-8.
    let hostile_dir = dir.path().join(EVERY_CLASS.replace(['\0', '/'], "_"));
    std::fs::create_dir(&hostile_dir).unwrap();
    let named = hostile_dir.join("p.elf");
    std::fs::copy(&printer, &named).unwrap();
    let not_utf8 = dir.path().join(OsStr::from_bytes(b"p\xff\xfe.elf"));
    std::fs::copy(&printer, &not_utf8).unwrap();
    let lossy = String::from_utf8_lossy(GUEST_BYTES).into_owned();
    for (program, shown) in [
        (&named, named.to_str().unwrap().to_owned()),
        (&not_utf8, not_utf8.to_string_lossy().into_owned()),
    ] {
        let args = [os("check"), os("--format"), os("json"), program.as_os_str()];
        let ran = memtrace(dir.path(), &args);
        assert_eq!(ran.code, Some(0), "{}", ran.show(&args));
        assert_printable(std::str::from_utf8(&ran.stdout).unwrap(), "check's JSON");
        let report = parsed_by_both(&ran.stdout, "check's JSON");
        assert_eq!(report["program"], shown.as_str());
        assert_eq!(report["stdout"], lossy.as_str());
        assert_eq!(report["stderr"], lossy.as_str());
    }
    assert!(lossy.contains('\u{fffd}') && lossy.contains('\u{202e}'));
    // A missing program named with every class: the error, on stderr, is
    // text, and escaped.
    let missing = hostile_dir.join("missing.elf");
    let args = [os("check"), os("--format"), os("json"), missing.as_os_str()];
    let ran = memtrace(dir.path(), &args);
    assert_eq!(ran.code, Some(1), "{}", ran.show(&args));
    assert!(ran.stdout.is_empty(), "{}", ran.show(&args));
    assert_printable(&ran.stderr, "the error");
    assert!(ran.stderr.contains("\\u{202e}"), "{}", ran.stderr);
}

/// The campaign's inputs: models whose tensor names, and paths whose
/// names, are random strings of every class; a guest printing its random
/// arguments.
struct Inputs {
    model: PathBuf,
    printer: PathBuf,
}

/// One case of the campaign: the arguments, and where its JSON is (stdout,
/// or the `--out` file), or that it is a text report.
enum Report {
    Json,
    JsonFile(PathBuf),
    CsvFile(PathBuf),
    Text,
}

fn campaign_case(rng: &mut Rng, inputs: &Inputs, out: &Path) -> (Vec<std::ffi::OsString>, Report) {
    let m = inputs.model.as_os_str().to_owned();
    let p = inputs.printer.as_os_str().to_owned();
    let s = |t: &str| std::ffi::OsString::from(t);
    // Arguments of the guest: semihosting splits its command line at
    // spaces, and a C string ends at NUL.
    let guest_args: Vec<std::ffi::OsString> = (0..rng.range(1, 3))
        .map(|_| {
            let len = rng.range(1, 12);
            let a = random_string(rng, len).replace(['\0', ' ', '\t', '\n', '\r'], "_");
            s(&a)
        })
        .collect();
    match rng.range(0, 7) {
        0 => (vec![s("run"), m, s("--format"), s("json")], Report::Json),
        1 => (vec![s("plan"), m, s("--format"), s("json")], Report::Json),
        2 => (
            vec![s("verify"), m, s("--no-oracle"), s("--format"), s("json")],
            Report::Json,
        ),
        3 => (
            vec![
                s("cold"),
                m,
                s("--format"),
                s("json"),
                s("--out"),
                out.into(),
            ],
            Report::JsonFile(out.to_owned()),
        ),
        4 => {
            let csv = out.with_extension("csv");
            (
                vec![
                    s("cold"),
                    m,
                    s("--format"),
                    s("csv"),
                    s("--out"),
                    csv.clone().into(),
                ],
                Report::CsvFile(csv),
            )
        }
        5 => {
            let mut a = vec![s("check"), s("--format"), s("json"), p, s("--")];
            a.extend(guest_args);
            (a, Report::Json)
        }
        6 => (vec![s("run"), m], Report::Text),
        _ => (vec![s("plan"), m], Report::Text),
    }
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn campaign_json_with_every_unicode_class() {
    let seed = 0x5eed_0150_u64;
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let printer = hostile_printer(dir.path());
    let base = shared("tflm_hello_world_int8");
    let (mut json, mut text, mut failed, mut panics, mut signals, mut hangs, mut leftovers) =
        (0, 0, 0, 0, 0, 0, 0);
    for round in 0..6 {
        // A model of random names, at a path of a random name.
        let names: Vec<String> = (0..32)
            .map(|i| format!("{i}:{}", random_string(&mut rng, 6)))
            .collect();
        let folder = dir.path().join(format!(
            "{round}{}",
            random_string(&mut rng, 5).replace(['\0', '/'], "_")
        ));
        std::fs::create_dir(&folder).unwrap();
        let model = folder.join("m.tflite");
        std::fs::write(&model, renamed(&base, |i| names[i % names.len()].clone())).unwrap();
        let inputs = Inputs {
            model,
            printer: printer.clone(),
        };
        for case in 0..4 {
            let out = folder.join(format!("out{case}.json"));
            let (args, report) = campaign_case(&mut rng, &inputs, &out);
            let args: Vec<&OsStr> = args.iter().map(|a| a.as_os_str()).collect();
            let ran = memtrace(dir.path(), &args);
            match (ran.code, ran.signal, ran.hung) {
                (_, _, true) => hangs += 1,
                (Some(101), _, _) => panics += 1,
                (None, _, _) => signals += 1,
                (Some(0 | 3), _, _) => {}
                (Some(_), _, _) => failed += 1,
            }
            assert_printable(&ran.stderr, &ran.show(&args));
            let stdout = String::from_utf8_lossy(&ran.stdout);
            match report {
                Report::Json => {
                    parsed_by_both(&ran.stdout, &ran.show(&args));
                    assert_printable(&stdout, &ran.show(&args));
                    json += 1;
                }
                Report::JsonFile(path) => {
                    let written = std::fs::read(&path).unwrap();
                    parsed_by_both(&written, &ran.show(&args));
                    assert_printable(&String::from_utf8_lossy(&written), "the --out JSON");
                    json += 1;
                }
                Report::CsvFile(path) => {
                    // Data, as it is: a header and a row per tensor.
                    let rows = std::fs::read_to_string(&path).unwrap();
                    assert!(rows.lines().count() > 1, "{rows}");
                    text += 1;
                }
                Report::Text => {
                    assert_printable(&stdout, &ran.show(&args));
                    text += 1;
                }
            }
            leftovers += std::fs::read_dir(dir.path().join("tmp")).unwrap().count();
        }
    }
    eprintln!(
        "JSON campaign seed {seed:#x}: {json} JSON reports parsed, {text} text and CSV, \
         {failed} refused, {panics} panics, {signals} signals, {hangs} hangs, {leftovers} leftovers"
    );
    assert_eq!((panics, signals, hangs, leftovers, failed), (0, 0, 0, 0, 0));
    assert!(json > 10, "too few JSON reports: {json}");
}

#[test]
fn bench_prints_a_model_named_with_every_class_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let stem = EVERY_CLASS.replace(['\0', '/', '\n'], "_");
    let model = dir.path().join(format!("{stem}.tflite"));
    std::fs::write(&model, shared("tflm_hello_world_int8")).unwrap();
    let args = [
        os("bench"),
        os("--tinyseg"),
        model.as_os_str(),
        os("--repeat"),
        os("1"),
    ];
    let ran = memtrace(dir.path(), &args);
    assert_eq!(ran.code, Some(0), "{}", ran.show(&args));
    let text = String::from_utf8(ran.stdout.clone()).unwrap();
    assert_printable(&text, "bench's report");
    assert!(
        text.contains("\\x1b[2J") && text.contains("\\u{202e}"),
        "{text}"
    );
}

#[test]
fn a_baseline_row_of_every_class_is_json_in_regress_and_escaped_in_markdown() {
    let dir = tempfile::tempdir().unwrap();
    // A guest of one small layer: its table takes a second.
    let suite = crate::common::guest("cortex-m4", "it-block");
    let table = dir.path().join("base.json");
    let args = [
        os("table"),
        suite.as_os_str(),
        os("--out"),
        table.as_os_str(),
    ];
    let ran = memtrace(dir.path(), &args);
    assert_eq!(ran.code, Some(0), "{}", ran.show(&args));
    // The row of a layer the binary does not run any more, named with
    // every class, and a kernel of such a name.
    let mut baseline = parsed_by_both(&std::fs::read(&table).unwrap(), "the baseline");
    let name = format!("gone{EVERY_CLASS}");
    baseline["rows"][0]["name"] = Value::from(name.as_str());
    baseline["rows"][0]["kernel"] = Value::from(EVERY_CLASS);
    std::fs::write(&table, baseline.to_string()).unwrap();
    let args = [
        os("regress"),
        table.as_os_str(),
        suite.as_os_str(),
        os("--format"),
        os("json"),
    ];
    let ran = memtrace(dir.path(), &args);
    assert_eq!(ran.code, Some(1), "{}", ran.show(&args));
    assert_printable(std::str::from_utf8(&ran.stdout).unwrap(), "regress's JSON");
    assert_printable(&ran.stderr, "regress's stderr");
    let report = parsed_by_both(&ran.stdout, "regress's JSON");
    let row = report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name.as_str())
        .unwrap_or_else(|| panic!("no row named {name:?}: {report}"));
    assert_eq!(row["status"], "missing", "{row}");
    assert!(
        row["kernel_before"].as_str().unwrap().contains(EVERY_CLASS),
        "{row}"
    );
    // The Markdown comment shows the same row escaped.
    let args = [os("regress"), table.as_os_str(), suite.as_os_str()];
    let ran = memtrace(dir.path(), &args);
    assert_eq!(ran.code, Some(1), "{}", ran.show(&args));
    let text = String::from_utf8(ran.stdout.clone()).unwrap();
    assert_printable(&text, "regress's Markdown");
    assert!(text.contains("gone\\x00\\x1b[2J"), "{text}");
}
