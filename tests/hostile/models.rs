//! Models TFLM accepts, and what memtrace accepts of them: an offline plan
//! that covers every subgraph, malformed operator options refused before
//! anything runs (and one bounded instruction budget for every command),
//! model strings printed as text instead of obeyed by the terminal, and
//! every element type TFLM runs carried through `run`, `plan` and `verify`.
//!
//! The models are derived from the shared ones (or built) with the
//! schema's generated types (`memtrace_model::tflite::rewrite`), never by
//! patching bytes.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use memtrace_model::schema::tflite as fb;
use memtrace_model::tflite;
use memtrace_overlap::rng::Rng;
use serde_json::Value;

use crate::common;

/// A shared model's bytes (`../shared/models/NAME.tflite`).
fn shared(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/models")
        .join(format!("{name}.tflite"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The decoded model of `.tflite` bytes (to look at, not to run).
fn decoded(bytes: &[u8]) -> fb::Model {
    let mut out = None;
    tflite::rewrite(bytes, |m| out = Some(m.clone())).expect("a readable model");
    out.unwrap()
}

/// `bytes` with `edit` applied to the decoded model.
fn edited(bytes: &[u8], edit: impl FnOnce(&mut fb::Model)) -> Vec<u8> {
    tflite::rewrite(bytes, edit).expect("the model re-encodes")
}

/// Subgraph 0 of a decoded model.
fn main_graph(m: &mut fb::Model) -> &mut fb::SubGraph {
    &mut m.subgraphs.as_mut().unwrap()[0]
}

/// What one bounded run of the binary did.
struct Outcome {
    /// The exit code; `None` when a signal ended it or the time ran out.
    code: Option<i32>,
    timed_out: bool,
    stdout: String,
    stderr: String,
    seconds: f64,
}

impl Outcome {
    fn show(&self, args: &[String]) -> String {
        format!(
            "memtrace {args:?}: code {:?}, timed out {}, {:.1} s\nstdout:\n{}\nstderr:\n{}",
            self.code, self.timed_out, self.seconds, self.stdout, self.stderr
        )
    }
}

/// Runs `memtrace ARGS` in `dir` (also its `TMPDIR`), killed after `limit`,
/// without the host oracle.
fn bounded(dir: &Path, args: &[String], limit: Duration) -> Outcome {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_memtrace"));
    cmd.env_remove("MEMTRACE_TFLM_PYTHON");
    bounded_command(cmd, dir, args, limit)
}

/// [`bounded`] with the host oracle of `MEMTRACE_TFLM_PYTHON`, if set.
fn bounded_with_oracle(dir: &Path, args: &[String], limit: Duration) -> Outcome {
    bounded_command(
        Command::new(env!("CARGO_BIN_EXE_memtrace")),
        dir,
        args,
        limit,
    )
}

fn bounded_command(mut cmd: Command, dir: &Path, args: &[String], limit: Duration) -> Outcome {
    let started = Instant::now();
    let mut child = cmd
        .args(args)
        .current_dir(dir)
        .env("CI", "1")
        .env("TMPDIR", dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("memtrace starts");
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            String::from_utf8_lossy(&v).into_owned()
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let mut timed_out = false;
    let status = loop {
        if let Some(s) = child.try_wait().expect("waiting for memtrace") {
            break s;
        }
        if started.elapsed() > limit {
            timed_out = true;
            let _ = child.kill();
            break child.wait().expect("waiting for memtrace");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Outcome {
        code: if timed_out { None } else { status.code() },
        timed_out,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
        seconds: started.elapsed().as_secs_f64(),
    }
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn path_arg(p: &Path) -> String {
    p.display().to_string()
}

/// The oracle's Python, as `verify` finds it: `MEMTRACE_TFLM_PYTHON`.
fn oracle_python() -> Option<PathBuf> {
    std::env::var_os("MEMTRACE_TFLM_PYTHON").map(PathBuf::from)
}

/// Runs `model` once in PyPI `tflite-micro` (zero inputs): `Ok` or TFLM's
/// complaint.
fn pypi_tflm_runs(py: &Path, model: &Path) -> Result<(), String> {
    let script = "import sys\n\
        from tflite_micro.python.tflite_micro import runtime\n\
        i = runtime.Interpreter.from_file(sys.argv[1], arena_size=1 << 20)\n\
        i.invoke()\n";
    let out = Command::new(py)
        .arg("-I")
        .arg("-c")
        .arg(script)
        .arg(model)
        .output()
        .expect("the oracle's Python runs");
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

// ---------------------------------------------------------------------
// Every subgraph in an offline plan.

/// `bytes` with subgraph 0 copied `extra` times after it: subgraphs TFLM
/// allocates and prepares although no operator calls them.
fn with_extra_subgraphs(bytes: &[u8], extra: usize) -> Vec<u8> {
    edited(bytes, |m| {
        let subgraphs = m.subgraphs.as_mut().unwrap();
        for k in 0..extra {
            let mut copy = subgraphs[0].clone();
            copy.name = Some(format!("copy{k}"));
            subgraphs.push(copy);
        }
    })
}

/// Tensors per subgraph.
fn tensor_counts(bytes: &[u8]) -> Vec<usize> {
    decoded(bytes)
        .subgraphs
        .unwrap()
        .iter()
        .map(|g| g.tensors.as_ref().map_or(0, |t| t.len()))
        .collect()
}

#[test]
fn an_offline_plan_covers_every_subgraph_and_tflm_takes_it() {
    let dir = tempfile::tempdir().unwrap();
    let one = dir.path().join("one.tflite");
    let two = dir.path().join("two.tflite");
    let hello = shared("tflm_hello_world_int8");
    std::fs::write(&one, &hello).unwrap();
    std::fs::write(&two, with_extra_subgraphs(&hello, 1)).unwrap();
    let counts = tensor_counts(&std::fs::read(&two).unwrap());
    assert_eq!(counts.len(), 2);

    // The same plan of subgraph 0, from the model alone and from the model
    // with a second subgraph.
    let mut plans = Vec::new();
    for (model, out) in [(&one, "one-plan.tflite"), (&two, "two-plan.tflite")] {
        let out = dir.path().join(out);
        let a = args(&["plan", &path_arg(model), "--emit-offline"]);
        let a = [a, vec![path_arg(&out)]].concat();
        let o = bounded(dir.path(), &a, Duration::from_secs(120));
        assert_eq!(o.code, Some(0), "{}", o.show(&a));
        let offsets = tflite::read_offline(&std::fs::read(&out).unwrap())
            .unwrap()
            .expect("an OfflineMemoryAllocation");
        plans.push((out, offsets));
    }
    let (single, both) = (&plans[0].1, &plans[1].1);
    // TFLM counts one offset per tensor of every subgraph, in order.
    assert_eq!(both.len(), counts.iter().sum::<usize>());
    assert_eq!(&both[..counts[0]], &single[..]);
    assert!(
        both[counts[0]..].iter().all(|&o| o == -1),
        "the second subgraph's tensors are left to TFLM: {both:?}"
    );
    assert!(single.iter().any(|&o| o >= 0), "subgraph 0 is planned");

    // PyPI tflite-micro runs the emitted file (it refused it before:
    // "Nbr of offline buffer offsets ... not equal nbr tensors").
    if let Some(py) = oracle_python() {
        pypi_tflm_runs(&py, &plans[1].0).unwrap_or_else(|e| panic!("PyPI TFLM: {e}"));
    }

    // `verify` proves the plan of the two-subgraph model on real TFLM.
    let a = args(&["verify", &path_arg(&two), "--format", "json", "--no-cache"]);
    let o = bounded(dir.path(), &a, Duration::from_secs(180));
    assert_eq!(o.code, Some(0), "{}", o.show(&a));
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["bit_exact"], true, "{v}");
    assert_eq!(v["clobbers"].as_array().map(Vec::len), Some(0), "{v}");
}

#[test]
fn the_written_offsets_are_checked_against_subgraph_0_only() {
    // In-process: the offsets given must match subgraph 0's tensors, the
    // others' are written as -1 whatever their number.
    let hello = shared("tflm_hello_world_int8");
    let three = with_extra_subgraphs(&hello, 2);
    let counts = tensor_counts(&three);
    let offsets: Vec<i64> = (0..counts[0] as i64).map(|i| i * 16).collect();
    let r = tflite::emit_offline(&three, &offsets).unwrap();
    let back = tflite::read_offline(&r.bytes).unwrap().unwrap();
    assert_eq!(back.len(), counts.iter().sum::<usize>());
    assert_eq!(&back[..offsets.len()], &offsets[..]);
    assert!(back[offsets.len()..].iter().all(|&o| o == -1));
    // One offset too few or too many is still an error.
    assert!(tflite::emit_offline(&three, &offsets[1..]).is_err());
    let mut long = offsets.clone();
    long.push(0);
    assert!(tflite::emit_offline(&three, &long).is_err());
}

// ---------------------------------------------------------------------
// Malformed operator options, and the instruction budget.

/// Index of the first operator of subgraph 0 whose builtin is `op`.
fn first_op(m: &fb::Model, op: fb::BuiltinOperator) -> usize {
    let codes = m.operator_codes.as_ref().unwrap();
    m.subgraphs.as_ref().unwrap()[0]
        .operators
        .as_ref()
        .unwrap()
        .iter()
        .position(|o| {
            // TFLM's GetBuiltinCode: old files set only the deprecated byte.
            let c = &codes[o.opcode_index as usize];
            (c.builtin_code as i32).max(i32::from(c.deprecated_builtin_code)) == op as i32
        })
        .unwrap_or_else(|| panic!("no {op:?} operator"))
}

/// `bytes` with the depthwise options of operator `at` changed by `edit`.
fn with_depthwise(
    bytes: &[u8],
    at: usize,
    edit: impl FnOnce(&mut fb::DepthwiseConv2DOptions),
) -> Vec<u8> {
    edited(bytes, |m| {
        let op = &mut main_graph(m).operators.as_mut().unwrap()[at];
        match op.builtin_options.as_mut() {
            Some(fb::BuiltinOptions::DepthwiseConv2DOptions(o)) => edit(o),
            other => panic!("operator {at} has options {other:?}"),
        }
    })
}

/// `bytes` with the conv options of operator `at` changed by `edit`.
fn with_conv(bytes: &[u8], at: usize, edit: impl FnOnce(&mut fb::Conv2DOptions)) -> Vec<u8> {
    edited(bytes, |m| {
        let op = &mut main_graph(m).operators.as_mut().unwrap()[at];
        match op.builtin_options.as_mut() {
            Some(fb::BuiltinOptions::Conv2DOptions(o)) => edit(o),
            other => panic!("operator {at} has options {other:?}"),
        }
    })
}

/// Input channels of depthwise operator `at` (the last dimension of its
/// first input).
fn depthwise_channels(bytes: &[u8], at: usize) -> i32 {
    let m = decoded(bytes);
    let g = &m.subgraphs.as_ref().unwrap()[0];
    let input = g.operators.as_ref().unwrap()[at].inputs.as_ref().unwrap()[0];
    *g.tensors.as_ref().unwrap()[input as usize]
        .shape
        .as_ref()
        .unwrap()
        .last()
        .unwrap()
}

/// The commands a model goes through on real TFLM with CMSIS-NN kernels.
fn tflm_commands(model: &Path) -> Vec<Vec<String>> {
    let m = path_arg(model);
    vec![
        args(&["run", &m, "--kernels", "cmsis-nn"]),
        args(&["plan", &m, "--kernels", "cmsis-nn", "--no-cache"]),
        args(&[
            "verify",
            &m,
            "--kernels",
            "cmsis-nn",
            "--no-oracle",
            "--no-cache",
        ]),
    ]
}

#[test]
fn malformed_operator_options_are_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let kws = shared("mlperf_tiny_kws_ds_cnn_int8");
    let m = decoded(&kws);
    let dw = first_op(&m, fb::BuiltinOperator::DepthwiseConv2d);
    let conv = first_op(&m, fb::BuiltinOperator::Conv2d);
    let channels = depthwise_channels(&kws, dw);
    let cases = [
        (
            "depth_multiplier 0",
            with_depthwise(&kws, dw, |o| o.depth_multiplier = 0),
            format!("operator {dw} (DEPTHWISE_CONV_2D): depth_multiplier is 0"),
        ),
        (
            "depth_multiplier 2 on a filter of C channels",
            with_depthwise(&kws, dw, |o| o.depth_multiplier = 2),
            format!("operator {dw} (DEPTHWISE_CONV_2D): depth_multiplier 2 with"),
        ),
        (
            "dilation -1",
            with_depthwise(&kws, dw, |o| o.dilation_w_factor = -1),
            format!("operator {dw} (DEPTHWISE_CONV_2D): dilation_w_factor is -1"),
        ),
        (
            "stride 0",
            with_conv(&kws, conv, |o| o.stride_h = 0),
            format!("operator {conv} (CONV_2D): stride_h is 0"),
        ),
    ];
    for (what, bytes, expected) in cases {
        let model = dir.path().join("bad.tflite");
        std::fs::write(&model, &bytes).unwrap();
        let multiplier_2 = format!(
            "depth_multiplier 2 with {channels} input channels makes {} output channels, \
             but the filter has {channels}",
            2 * channels
        );
        for a in tflm_commands(&model) {
            // Before the check, `run` ran 2·10^10 instructions (~40 s) and
            // `verify` 2·10^11 per run on depth_multiplier 0.
            let o = bounded(dir.path(), &a, Duration::from_secs(30));
            assert_eq!(o.code, Some(1), "{what}: {}", o.show(&a));
            assert!(
                o.stderr.contains(&expected),
                "{what}: expected `{expected}`\n{}",
                o.show(&a)
            );
            // Every command reads the model once, the graph as TFLM sees it
            // first: `plan` says what `run` and `verify` say.
            if what.starts_with("depth_multiplier 2") {
                assert!(o.stderr.contains(multiplier_2.as_str()), "{}", o.show(&a));
            }
            assert!(
                o.seconds < 10.0,
                "{what}: refused only after {:.1} s",
                o.seconds
            );
        }
    }
}

/// The `--max-instructions` default a command's `--help` states.
fn default_budget(command: &str) -> u64 {
    let o = common::memtrace([command, "--help"]);
    let help = common::stdout(&o);
    let at = help
        .find("--max-instructions")
        .unwrap_or_else(|| panic!("{command} --help has no --max-instructions"));
    let rest = &help[at..];
    let start = rest.find("[default: ").expect("a default") + "[default: ".len();
    let end = start + rest[start..].find(']').unwrap();
    rest[start..end].parse().unwrap()
}

#[test]
fn run_verify_and_cold_share_one_budget_and_a_guest_that_never_ends_stops_at_it() {
    let budgets: Vec<u64> = ["run", "verify", "cold"]
        .iter()
        .map(|c| default_budget(c))
        .collect();
    assert!(
        budgets.iter().all(|&b| b == budgets[0]),
        "run, verify and cold budgets differ: {budgets:?}"
    );
    // What the budget costs in seconds is `memtrace bench`'s to measure
    // (its overhead ratios); here: a guest that never ends stops at the
    // budget given, with the open layer, its line and how to raise it.
    let spin = common::guest("cortex-m4", "spin");
    let o = common::memtrace(["run", &path_arg(&spin), "--max-instructions", "100000000"]);
    assert_eq!(o.status.code(), Some(1), "{}", common::stderr(&o));
    let err = common::stderr(&o);
    for part in [
        "instruction budget of 100000000 exceeded in layer `spin`",
        "guests/spin.c:",
        "raise it with --max-instructions",
    ] {
        assert!(err.contains(part), "{part:?} missing from: {err}");
    }
}

// ---------------------------------------------------------------------
// Model strings on the terminal.

/// Control characters a name may hide: a colour, a carriage return that
/// overwrites the line, a right-to-left override.
const HOSTILE_NAME: &str = "\x1b[31m\r\u{202e}";

/// `bytes` with every tensor of subgraph 0 renamed `t<i>` + [`HOSTILE_NAME`].
fn with_hostile_names(bytes: &[u8]) -> Vec<u8> {
    edited(bytes, |m| {
        for (i, t) in main_graph(m)
            .tensors
            .as_mut()
            .unwrap()
            .iter_mut()
            .enumerate()
        {
            t.name = Some(format!("t{i}{HOSTILE_NAME}"));
        }
    })
}

/// No raw control character (other than newline) in what a command printed.
fn assert_no_raw_controls(o: &Outcome, a: &[String]) {
    for (stream, text) in [("stdout", &o.stdout), ("stderr", &o.stderr)] {
        let raw = text
            .chars()
            .find(|&c| (c.is_control() && c != '\n') || c == '\u{202e}');
        assert!(raw.is_none(), "{stream} holds a raw {raw:?}\n{}", o.show(a));
    }
}

#[test]
fn terminal_safe_shows_controls_and_keeps_plain_text() {
    use memtrace_driver::support::text::terminal_safe;
    assert_eq!(
        terminal_safe("a\x1b[31mred\rb\u{202e}c\u{7f}\u{9b}"),
        "a\\x1b[31mred\\rb\\u{202e}c\\x7f\\u{9b}"
    );
    let plain = "tensor `conv/1`\tμ 12 B\nnext line";
    assert!(matches!(
        terminal_safe(plain),
        std::borrow::Cow::Borrowed(t) if t == plain
    ));
}

#[test]
fn model_strings_are_printed_escaped_in_reports_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("names.tflite");
    std::fs::write(&model, with_hostile_names(&shared("tflm_hello_world_int8"))).unwrap();
    let m = path_arg(&model);
    let escaped = "\\x1b[31m\\r\\u{202e}";
    // Reports that print tensor names: run's layers and buffers, and the
    // same through a failing command's error.
    let a = args(&["run", &m]);
    let o = bounded(dir.path(), &a, Duration::from_secs(60));
    assert_eq!(o.code, Some(0), "{}", o.show(&a));
    assert_no_raw_controls(&o, &a);
    assert!(o.stdout.contains(&format!("t0{escaped}")), "{}", o.show(&a));
    for a in [
        args(&["plan", &m, "--no-cache"]),
        args(&["verify", &m, "--no-oracle", "--no-cache"]),
    ] {
        let o = bounded(dir.path(), &a, Duration::from_secs(60));
        assert_eq!(o.code, Some(0), "{}", o.show(&a));
        assert_no_raw_controls(&o, &a);
    }

    // An error that quotes a tensor's name: its input is a string tensor.
    let strings = edited(&std::fs::read(&model).unwrap(), |m| {
        let g = main_graph(m);
        let input = g.inputs.as_ref().unwrap()[0] as usize;
        g.tensors.as_mut().unwrap()[input].type_ = fb::TensorType::String;
    });
    std::fs::write(&model, strings).unwrap();
    let a = args(&["run", &m]);
    let o = bounded(dir.path(), &a, Duration::from_secs(60));
    assert_eq!(o.code, Some(1), "{}", o.show(&a));
    assert!(o.stderr.contains(escaped), "{}", o.show(&a));
    assert_no_raw_controls(&o, &a);
}

// ---------------------------------------------------------------------
// Every element type TFLM runs.

/// A tensor of subgraph 0 without data (buffer 0, TFLite's empty one).
fn activation(name: &str, type_: fb::TensorType, shape: &[i32]) -> fb::Tensor {
    fb::Tensor {
        name: Some(name.into()),
        type_,
        shape: Some(shape.to_vec()),
        buffer: 0,
        ..Default::default()
    }
}

/// An operator code of a builtin below 127 (both code fields set, as
/// converters write them).
fn builtin_code(op: fb::BuiltinOperator) -> fb::OperatorCode {
    fb::OperatorCode {
        deprecated_builtin_code: op as i8,
        builtin_code: op,
        version: 1,
        ..Default::default()
    }
}

/// A model of CASTs: a UINT32 input of `n` elements, through each type of
/// `via` in turn, back to a UINT32 output.
fn cast_chain(n: i32, via: &[fb::TensorType]) -> Vec<u8> {
    let mut types = vec![fb::TensorType::Uint32];
    types.extend_from_slice(via);
    types.push(fb::TensorType::Uint32);
    let tensors: Vec<fb::Tensor> = types
        .iter()
        .enumerate()
        .map(|(i, &t)| activation(&format!("x{i}"), t, &[1, n]))
        .collect();
    let operators: Vec<fb::Operator> = (0..types.len() - 1)
        .map(|i| fb::Operator {
            opcode_index: 0,
            inputs: Some(vec![i as i32]),
            outputs: Some(vec![i as i32 + 1]),
            ..Default::default()
        })
        .collect();
    let model = fb::Model {
        version: 3,
        operator_codes: Some(vec![builtin_code(fb::BuiltinOperator::Cast)]),
        subgraphs: Some(vec![fb::SubGraph {
            inputs: Some(vec![0]),
            outputs: Some(vec![types.len() as i32 - 1]),
            tensors: Some(tensors),
            operators: Some(operators),
            name: Some("main".into()),
        }]),
        buffers: Some(vec![fb::Buffer::default()]),
        description: Some("casts".into()),
        ..Default::default()
    };
    tflite::encode(&model)
}

/// Every number stored under `key` anywhere in `v`.
fn collect_numbers(v: &Value, key: &str, out: &mut Vec<u64>) {
    match v {
        Value::Object(map) => {
            for (k, x) in map {
                match x.as_u64() {
                    Some(n) if k == key => out.push(n),
                    _ => collect_numbers(x, key, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|x| collect_numbers(x, key, out)),
        _ => {}
    }
}

#[test]
fn uint32_tensors_run_plan_and_verify_on_real_tflm() {
    let dir = tempfile::tempdir().unwrap();
    let n = 64;
    let model = dir.path().join("casts.tflite");
    std::fs::write(&model, cast_chain(n, &[fb::TensorType::Int16])).unwrap();
    let m = path_arg(&model);

    let a = args(&["run", &m, "--format", "json"]);
    let o = bounded(dir.path(), &a, Duration::from_secs(60));
    assert_eq!(o.code, Some(0), "{}", o.show(&a));

    // Any plan keeps a CAST's input and output apart: 256 B of UINT32 and
    // 128 B of INT16 are live together.
    let a = args(&["plan", &m, "--format", "json", "--no-cache"]);
    let o = bounded(dir.path(), &a, Duration::from_secs(60));
    assert_eq!(o.code, Some(0), "{}", o.show(&a));
    let plan: Value = serde_json::from_str(&o.stdout).unwrap();
    let mut peaks = Vec::new();
    collect_numbers(&plan, "peak_bytes", &mut peaks);
    let live_together = (n as u64) * 4 + (n as u64) * 2;
    assert!(!peaks.is_empty(), "{plan}");
    assert!(
        peaks.iter().all(|&p| p >= live_together),
        "{peaks:?} {plan}"
    );

    // Values below 2^15 come back unchanged through INT16: the output is
    // the input, which the test chose.
    let values: Vec<u8> = (0..n as u32)
        .flat_map(|i| (i * 509 % 32768).to_le_bytes())
        .collect();
    let input = dir.path().join("in.bin");
    std::fs::write(&input, &values).unwrap();
    let mut a = args(&[
        "verify",
        &m,
        "--input",
        &path_arg(&input),
        "--format",
        "json",
    ]);
    a.push("--no-cache".into());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_memtrace"));
    cmd.args(&a).current_dir(dir.path()).env("CI", "1");
    let out = cmd.output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", common::stderr(&out)));
    assert!(out.status.success(), "{v}\n{}", common::stderr(&out));
    let hex: String = values.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(v["output_hex"], hex, "{v}");
    assert_eq!(v["bit_exact"], true, "{v}");
    if oracle_python().is_some() {
        assert_eq!(v["oracle"]["bit_exact"], true, "{v}");
    }
}

#[test]
fn every_element_type_tflm_sizes_is_read_with_tflm_s_size() {
    // TFLM's TfLiteTypeSizeOf (memory_helpers.cc), as the arena holds them.
    use fb::TensorType as T;
    let sizes = [
        (T::Float16, 2),
        (T::Float32, 4),
        (T::Float64, 8),
        (T::Int16, 2),
        (T::Int32, 4),
        (T::Uint32, 4),
        (T::Uint8, 1),
        (T::Uint16, 2),
        (T::Int8, 1),
        (T::Int64, 8),
        (T::Uint64, 8),
        (T::Bool, 1),
        (T::Resource, 4),
        (T::Complex64, 8),
        (T::Complex128, 16),
        (T::Int4, 1),
    ];
    let n = 12u64;
    for (ty, size) in sizes {
        let bytes = cast_chain(n as i32, &[ty]);
        let g = memtrace_model::graph::read_graph(&bytes).unwrap();
        assert_eq!(g.tensors[1].bytes, Some(n * size), "{ty:?}");
        let m = tflite::import_for_tflm("casts", &bytes).unwrap_or_else(|e| panic!("{ty:?}: {e}"));
        assert_eq!(m.tensors[1].bytes, n * size, "{ty:?}");
    }
    // Types TFLM gives no size stay refused, by TFLite's name.
    for ty in [T::String, T::Variant] {
        let e = tflite::import_for_tflm("casts", &cast_chain(4, &[ty]))
            .unwrap_err()
            .to_string();
        let name = format!("{ty:?}").to_uppercase();
        assert!(
            e.contains(&format!("unsupported element type {name}")),
            "{e}"
        );
    }
}

// ---------------------------------------------------------------------
// The campaign: seeded mutants of each class above through the binary.

/// What the campaign counts.
#[derive(Default, Debug)]
struct Tally {
    cases: usize,
    accepted: usize,
    refused: usize,
    wrong_but_accepted: Vec<String>,
    aborts: Vec<String>,
    hangs: Vec<String>,
    leftovers: Vec<String>,
    raw_controls: Vec<String>,
}

impl Tally {
    /// Counts one bounded run; `wrong` says whether an accepted run was
    /// wrong (given the outcome).
    fn record(
        &mut self,
        what: &str,
        o: &Outcome,
        a: &[String],
        wrong: impl FnOnce(&Outcome) -> bool,
    ) {
        self.cases += 1;
        let label = format!("{what}: {}", o.show(a));
        match o.code {
            _ if o.timed_out => self.hangs.push(label),
            Some(0) => {
                self.accepted += 1;
                if wrong(o) {
                    self.wrong_but_accepted.push(label);
                }
            }
            Some(1) | Some(2) => self.refused += 1,
            _ => self.aborts.push(label),
        }
        let raw = |t: &str| {
            t.chars()
                .any(|c| (c.is_control() && c != '\n') || c == '\u{202e}')
        };
        if raw(&o.stdout) || raw(&o.stderr) {
            self.raw_controls.push(what.to_string());
        }
    }

    /// Files in `dir` other than `expected`: what a run left behind.
    fn check_leftovers(&mut self, what: &str, dir: &Path, expected: &[&Path]) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let p = entry.unwrap().path();
            if !expected.iter().any(|e| *e == p) {
                self.leftovers.push(format!("{what}: {}", p.display()));
            }
        }
    }
}

/// Kinds of operator options the option mutants change.
const OPTION_FIELDS: [&str; 6] = [
    "depth_multiplier",
    "stride_w",
    "stride_h",
    "dilation_w_factor",
    "dilation_h_factor",
    "conv_stride_w",
];

/// A mutant of `kws`: one option of its first depthwise or convolution set
/// to `value`; whether TFLM's kernels could run it.
fn option_mutant(kws: &[u8], field: &str, value: i32) -> (Vec<u8>, bool) {
    let m = decoded(kws);
    let dw = first_op(&m, fb::BuiltinOperator::DepthwiseConv2d);
    let conv = first_op(&m, fb::BuiltinOperator::Conv2d);
    let bytes = match field {
        "conv_stride_w" => with_conv(kws, conv, |o| o.stride_w = value),
        _ => with_depthwise(kws, dw, |o| match field {
            "depth_multiplier" => o.depth_multiplier = value,
            "stride_w" => o.stride_w = value,
            "stride_h" => o.stride_h = value,
            "dilation_w_factor" => o.dilation_w_factor = value,
            _ => o.dilation_h_factor = value,
        }),
    };
    // The filter has the input's channels: only a multiplier of 1 fits.
    let valid = value >= 1 && (field != "depth_multiplier" || value == 1);
    (bytes, valid)
}

/// The types a CAST reads and writes in TFLM.
const CAST_TYPES: [fb::TensorType; 5] = [
    fb::TensorType::Int8,
    fb::TensorType::Int16,
    fb::TensorType::Int32,
    fb::TensorType::Uint32,
    fb::TensorType::Float32,
];

#[test]
fn campaign_of_subgraph_option_name_and_type_mutants() {
    let mut rng = Rng::new(0x6d6f_6465_6c73);
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("m.tflite");
    let emitted = dir.path().join("planned.tflite");
    // --emit-offline writes the firmware header beside the model.
    let header = dir.path().join("planned.h");
    let limit = Duration::from_secs(90);
    let mut tally = Tally::default();
    let hello = shared("tflm_hello_world_int8");
    let kws = shared("mlperf_tiny_kws_ds_cnn_int8");

    // Extra subgraphs: the emitted plan must count every tensor, and verify
    // prove the plan of subgraph 0.
    for _ in 0..3 {
        let extra = rng.range(1, 3) as usize;
        let bytes = with_extra_subgraphs(&hello, extra);
        let total: usize = tensor_counts(&bytes).iter().sum();
        std::fs::write(&model, &bytes).unwrap();
        let a = args(&["plan", &path_arg(&model), "--no-cache", "--emit-offline"]);
        let a = [a, vec![path_arg(&emitted)]].concat();
        let o = bounded(dir.path(), &a, limit);
        tally.record(&format!("{extra} extra subgraphs, plan"), &o, &a, |_| {
            let back = std::fs::read(&emitted)
                .ok()
                .and_then(|b| tflite::read_offline(&b).ok().flatten());
            back.is_none_or(|offsets| offsets.len() != total)
        });
        tally.check_leftovers("plan", dir.path(), &[&model, &emitted, &header]);
        let _ = std::fs::remove_file(&emitted);
        let _ = std::fs::remove_file(&header);
        let a = args(&[
            "verify",
            &path_arg(&model),
            "--no-oracle",
            "--no-cache",
            "--format",
            "json",
        ]);
        let o = bounded(dir.path(), &a, limit);
        tally.record(&format!("{extra} extra subgraphs, verify"), &o, &a, |o| {
            serde_json::from_str::<Value>(&o.stdout).map_or(true, |v| {
                v["bit_exact"] != true || v["clobbers"] != Value::Array(vec![])
            })
        });
        tally.check_leftovers("verify", dir.path(), &[&model]);
    }

    // Operator options: a value TFLM's kernels cannot run is never accepted.
    for _ in 0..5 {
        let field = OPTION_FIELDS[rng.range(0, OPTION_FIELDS.len() as u32 - 1) as usize];
        let value = rng.int(-2, 2) as i32;
        let (bytes, valid) = option_mutant(&kws, field, value);
        std::fs::write(&model, &bytes).unwrap();
        let command = if rng.chance(50) { "run" } else { "verify" };
        let mut a = args(&[command, &path_arg(&model), "--kernels", "cmsis-nn"]);
        if command == "verify" {
            a.extend(args(&["--no-oracle", "--no-cache"]));
        }
        let o = bounded(dir.path(), &a, limit);
        tally.record(&format!("{field} = {value}"), &o, &a, |_| !valid);
        tally.check_leftovers(field, dir.path(), &[&model]);
    }

    // Names with control characters, in tensors and a custom operator code.
    let controls = ['\x1b', '\r', '\x07', '\x08', '\u{9b}', '\u{202e}', '\x00'];
    for k in 0..3 {
        let c = controls[rng.range(0, controls.len() as u32 - 1) as usize];
        let custom = k == 2;
        let bytes = edited(&hello, |m| {
            for t in main_graph(m).tensors.as_mut().unwrap() {
                t.name = Some(format!("n{c}[2J{c}"));
            }
            if custom {
                let code = &mut m.operator_codes.as_mut().unwrap()[0];
                code.builtin_code = fb::BuiltinOperator::Custom;
                code.deprecated_builtin_code = fb::BuiltinOperator::Custom as i8;
                code.custom_code = Some(format!("op{c}]0;title{c}"));
            }
        });
        std::fs::write(&model, &bytes).unwrap();
        let a = args(&["run", &path_arg(&model)]);
        let o = bounded(dir.path(), &a, limit);
        tally.record(&format!("names with {c:?}"), &o, &a, |_| custom);
        tally.check_leftovers("names", dir.path(), &[&model]);
    }

    // Element types: a CAST chain through random TFLM types, against the
    // host oracle when there is one.
    for _ in 0..3 {
        let via: Vec<fb::TensorType> = (0..rng.range(1, 2))
            .map(|_| CAST_TYPES[rng.range(0, CAST_TYPES.len() as u32 - 1) as usize])
            .collect();
        std::fs::write(&model, cast_chain(rng.range(1, 40) as i32, &via)).unwrap();
        let mut a = args(&[
            "verify",
            &path_arg(&model),
            "--no-cache",
            "--format",
            "json",
        ]);
        a.push("--seed".into());
        a.push(rng.range(1, 1000).to_string());
        let o = bounded_with_oracle(dir.path(), &a, limit);
        tally.record(&format!("casts via {via:?}"), &o, &a, |o| {
            serde_json::from_str::<Value>(&o.stdout).map_or(true, |v| {
                v["bit_exact"] != true
                    || (oracle_python().is_some() && v["oracle"]["bit_exact"] != true)
            })
        });
        tally.check_leftovers("casts", dir.path(), &[&model]);
    }

    eprintln!(
        "models campaign: {} cases, {} accepted, {} refused; {} wrong-but-accepted, {} aborts, \
         {} hangs, {} leftovers, {} with raw control characters",
        tally.cases,
        tally.accepted,
        tally.refused,
        tally.wrong_but_accepted.len(),
        tally.aborts.len(),
        tally.hangs.len(),
        tally.leftovers.len(),
        tally.raw_controls.len()
    );
    assert!(
        tally.wrong_but_accepted.is_empty(),
        "{:#?}",
        tally.wrong_but_accepted
    );
    assert!(tally.aborts.is_empty(), "{:#?}", tally.aborts);
    assert!(tally.hangs.is_empty(), "{:#?}", tally.hangs);
    assert!(tally.leftovers.is_empty(), "{:#?}", tally.leftovers);
    assert!(tally.raw_controls.is_empty(), "{:#?}", tally.raw_controls);
    assert!(tally.accepted > 0 && tally.refused > 0, "{tally:?}");
}
