//! Plan files and the arena on real TFLM: every size a model or a `--plan`
//! file states is checked against the runner's arena before anything is
//! allocated for it; plans of models with variable tensors verify; a plan's
//! `"kernels"` is checked; a model's embedded offline plan is verified
//! against TFLM's own plan, never against itself; unnamed tensors have one
//! name in reports and plans; a tensor listed twice is an error.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use memtrace_model::export::to_tflite;
use memtrace_model::{tflite, Dtype, Model, Tensor};
use memtrace_overlap::rng::Rng;
use serde_json::{json, Value};

/// The TFLM runner's arena: 40 MiB (`harness-c/rt/*/memtrace-tflm.ld`).
const RUNNER_ARENA: u64 = 40 << 20;
/// A run of the binary is killed (and counted as a hang) after this.
const LIMIT: Duration = Duration::from_secs(90);

/// A public model of `../shared/models/`.
fn shared_model(name: &str) -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/models")
        .join(name);
    assert!(p.exists(), "{} is missing", p.display());
    p
}

/// A scratch directory, removed when dropped; `tmp/` inside it is the
/// `TMPDIR` of every run (so leftovers are seen) and `cache/` the trace
/// cache.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!(
            "memtrace-hostile-plans-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("tmp")).unwrap();
        std::fs::create_dir_all(dir.join("cache")).unwrap();
        Scratch(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    fn write(&self, name: &str, bytes: impl AsRef<[u8]>) -> String {
        let p = self.path(name);
        std::fs::write(&p, bytes).unwrap();
        p.display().to_string()
    }

    /// Files a run left in its `TMPDIR`.
    fn leftovers(&self) -> Vec<PathBuf> {
        std::fs::read_dir(self.0.join("tmp"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// How one run of the binary ended.
struct Run {
    /// Exit code (`None`: killed by a signal or by the time limit).
    code: Option<i32>,
    signal: Option<i32>,
    hung: bool,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}): exit {:?}\nstdout:\n{}\nstderr:\n{}",
                self.code, self.stdout, self.stderr
            )
        })
    }

    /// Exit 1, nothing on stdout and an `error:` holding every needle.
    fn assert_error(&self, needles: &[&str]) {
        assert_eq!(self.code, Some(1), "{}{}", self.stdout, self.stderr);
        assert!(self.stdout.is_empty(), "{}", self.stdout);
        assert!(self.stderr.starts_with("error: "), "{}", self.stderr);
        for n in needles {
            assert!(self.stderr.contains(n), "`{n}` not in: {}", self.stderr);
        }
    }

    /// Exit 0 with `result: OK` (or the JSON's equivalent).
    fn assert_ok(&self) -> Value {
        assert_eq!(self.code, Some(0), "{}{}", self.stdout, self.stderr);
        let v = self.json();
        assert!(v["clobbers"].as_array().unwrap().is_empty(), "{v}");
        assert_eq!(v["bit_exact"], true, "{v}");
        v
    }
}

/// `memtrace ARGS` with `TMPDIR` and the trace cache inside `dir`, killed
/// after [`LIMIT`].
fn memtrace(dir: &Scratch, args: &[&str]) -> Run {
    let out = dir.path("stdout");
    let err = dir.path("stderr");
    let mut child = Command::new(env!("CARGO_BIN_EXE_memtrace"))
        .args(args)
        .env("CI", "1")
        .env("TMPDIR", dir.path("tmp"))
        .env("MEMTRACE_CACHE_DIR", dir.path("cache"))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .expect("memtrace runs");
    let started = Instant::now();
    let (status, hung) = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break (Some(s), false);
        }
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            break (None, true);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let run = Run {
        code: status.and_then(|s| s.code()),
        signal: status.and_then(|s| s.signal()),
        hung,
        stdout: std::fs::read_to_string(&out).unwrap_or_default(),
        stderr: std::fs::read_to_string(&err).unwrap_or_default(),
    };
    std::fs::remove_file(out).unwrap();
    std::fs::remove_file(err).unwrap();
    run
}

/// `verify MODEL --plan PLAN --format json ARGS` on real TFLM (no oracle:
/// these tests are about the plan, and the reference run is the check).
fn verify_plan(dir: &Scratch, model: &str, plan: &Value, args: &[&str]) -> Run {
    let plan = dir.write("plan.json", plan.to_string());
    let mut all = vec![
        "verify",
        model,
        "--plan",
        &plan,
        "--no-oracle",
        "--format",
        "json",
    ];
    all.extend_from_slice(args);
    memtrace(dir, &all)
}

fn hello_world() -> String {
    shared_model("tflm_hello_world_int8.tflite")
        .display()
        .to_string()
}

/// The imported model (names as every report gives them).
fn import(path: &str) -> Model {
    tflite::import_for_tflm("m", &std::fs::read(path).unwrap()).unwrap()
}

/// Tensors TFLM plans in its head: not constant, not variable.
fn planned(model: &Model) -> Vec<usize> {
    (0..model.tensors.len())
        .filter(|&t| !model.tensors[t].is_constant && !model.tensors[t].is_variable)
        .collect()
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn huge_plan_sizes_are_errors_naming_the_field_not_aborts() {
    let dir = Scratch::new("huge-plan");
    let model = hello_world();
    let m = import(&model);
    let first = m.tensors[planned(&m)[0]].name.clone();
    let cases = [
        (
            json!({"tensors": [], "arena_bytes": i32::MAX}),
            "arena_bytes",
        ),
        (
            json!({"tensors": [], "arena_bytes": 1u64 << 33}),
            "arena_bytes",
        ),
        (
            json!({"tensors": [], "arena_bytes": 1u64 << 40}),
            "arena_bytes",
        ),
        (
            json!({"tensors": [], "arena_bytes": u64::MAX}),
            "arena_bytes",
        ),
        (
            json!({"tensors": [{"name": first, "offset": 1u64 << 40}]}),
            first.as_str(),
        ),
        (
            json!({"tensors": [{"name": first, "offset": RUNNER_ARENA}], "arena_bytes": 1u64 << 33}),
            first.as_str(),
        ),
    ];
    for (plan, field) in &cases {
        let r = verify_plan(&dir, &model, plan, &[]);
        assert_eq!(r.signal, None, "{plan}: killed: {}", r.stderr);
        r.assert_error(&[field, &RUNNER_ARENA.to_string()]);
    }
    assert!(dir.leftovers().is_empty(), "{:?}", dir.leftovers());
}

/// hello_world with an extra graph output of `shape`, written by its last
/// operator.
fn with_extra_output(name: &str, shape: Vec<u32>) -> Vec<u8> {
    let mut m = import(&hello_world());
    let bytes = shape.iter().map(|&d| d as u64).product();
    m.tensors.push(Tensor {
        name: name.into(),
        shape,
        dtype: Dtype::Int8,
        bytes,
        is_constant: false,
        is_variable: false,
        quantization: m.tensors[m.outputs[0]].quantization.clone(),
        data: None,
        in_storage: false,
    });
    let t = m.tensors.len() - 1;
    m.outputs.push(t);
    m.ops.last_mut().unwrap().outputs.push(t);
    to_tflite(&m).unwrap()
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn a_model_with_a_4_gib_output_is_an_error_naming_the_tensor_not_an_abort() {
    let dir = Scratch::new("huge-model");
    let model = dir.write(
        "huge.tflite",
        with_extra_output("huge_out", vec![65536, 65536]),
    );
    let r = memtrace(&dir, &["verify", &model, "--no-oracle"]);
    assert_eq!(r.signal, None, "killed: {}", r.stderr);
    r.assert_error(&["huge_out", "4294967296", &RUNNER_ARENA.to_string()]);
    // `plan` only computes (its 4 GiB arena is reported, not allocated);
    // `run` reports what TFLM did: on a 32-bit target its size_t byte count
    // of the tensor wraps to 0, so TFLM runs it. No abort either way.
    for args in [vec!["plan", model.as_str()], vec!["run", model.as_str()]] {
        let r = memtrace(&dir, &args);
        assert!(
            matches!(r.code, Some(0 | 1)),
            "{args:?}: {:?}: {}",
            r.signal,
            r.stderr
        );
    }
    assert!(dir.leftovers().is_empty(), "{:?}", dir.leftovers());
}

/// The `tensors` of one planner's plan in `plan --format json`, as a
/// `--plan` file.
fn plan_file_from_report(report: &Value, planner: &str, kernels: &str) -> Value {
    let plan = report["plans"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["planner"] == planner)
        .unwrap_or_else(|| panic!("no {planner} plan in {report}"));
    let tensors: Vec<Value> = plan["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| json!({"name": t["name"], "offset": t["offset"]}))
        .collect();
    json!({"tensors": tensors, "kernels": kernels})
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn plans_of_models_with_variable_tensors_verify() {
    let dir = Scratch::new("variable");
    for name in [
        "tflm_trained_lstm_int8.tflite",
        "tflm_keyword_scrambled_8bit.tflite",
    ] {
        let model = shared_model(name).display().to_string();
        let m = import(&model);
        assert!(m.tensors.iter().any(|t| t.is_variable), "{name}");
        // Empty: every tensor where TFLM's own plan put it.
        let empty = verify_plan(&dir, &model, &json!({"tensors": []}), &[]).assert_ok();
        // Reference offsets of the tensors TFLM plans, read from the
        // report; a variable tensor is never one of them.
        let placed: Vec<(String, u64)> = empty["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| {
                Some((
                    t["name"].as_str()?.to_string(),
                    t["planned_offset"].as_u64()?,
                ))
            })
            .collect();
        let names = m.tensor_names();
        for (n, _) in &placed {
            let t = names.iter().position(|x| x == n).unwrap();
            assert!(!m.tensors[t].is_variable, "{name}: variable `{n}` planned");
        }
        // Partial: one tensor listed at its own reference offset.
        let (n, o) = &placed[0];
        let partial = json!({"tensors": [{"name": n, "offset": o}]});
        verify_plan(&dir, &model, &partial, &[]).assert_ok();
        // What `plan` prints for it.
        let report = memtrace(&dir, &["plan", &model, "--format", "json"]);
        assert_eq!(report.code, Some(0), "{}", report.stderr);
        let printed = plan_file_from_report(&report.json(), "dmo-heap", "tflm");
        verify_plan(&dir, &model, &printed, &[]).assert_ok();
        // A variable tensor listed: refused, named.
        let var = names[m.tensors.iter().position(|t| t.is_variable).unwrap()].clone();
        let r = verify_plan(
            &dir,
            &model,
            &json!({"tensors": [{"name": var, "offset": 0}]}),
            &[],
        );
        r.assert_error(&[&var, "variable"]);
    }
    assert!(dir.leftovers().is_empty(), "{:?}", dir.leftovers());
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn a_plans_kernels_are_checked_on_real_tflm() {
    let dir = Scratch::new("kernels");
    let model = hello_world();
    let r = verify_plan(
        &dir,
        &model,
        &json!({"tensors": [], "kernels": "bogus"}),
        &[],
    );
    r.assert_error(&["bogus", "tflm, cmsis-nn"]);
    let foreign = json!({"tensors": [], "kernels": "cmsis-nn"});
    let r = verify_plan(&dir, &model, &foreign, &["--kernels", "tflm"]);
    r.assert_error(&["cmsis-nn", "not tflm", "--allow-foreign-plan"]);
    let r = verify_plan(&dir, &model, &foreign, &["--allow-foreign-plan"]);
    let v = r.assert_ok();
    assert!(r.stderr.contains("WARNING: "), "{}", r.stderr);
    assert!(
        v["warnings"][0].as_str().unwrap().contains("cmsis-nn"),
        "{v}"
    );
    // The plan's own library: no warning.
    let own = json!({"tensors": [], "kernels": "tflm"});
    let v = verify_plan(&dir, &model, &own, &[]).assert_ok();
    assert_eq!(v["warnings"], json!([]));
}

/// `plan MODEL --kernels tflm --emit-offline` into `dir`:
/// the model with a dmo-heap plan for the reference kernels embedded, and
/// that plan's offsets.
fn emit_offline(dir: &Scratch, model: &str, out: &str) -> (String, Vec<i64>) {
    let embedded = dir.path(out).display().to_string();
    let r = memtrace(
        dir,
        &[
            "plan",
            model,
            "--kernels",
            "tflm",
            "--emit-offline",
            &embedded,
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let offsets = tflite::read_offline(&std::fs::read(&embedded).unwrap())
        .unwrap()
        .expect("an embedded plan");
    (embedded, offsets)
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn an_embedded_offline_plan_is_verified_against_tflms_own_plan() {
    let dir = Scratch::new("embedded");
    let plain = hello_world();
    let (embedded, offsets) = emit_offline(&dir, &plain, "embedded.tflite");
    let verify = |model: &str| {
        memtrace(&dir, &["verify", model, "--no-oracle", "--format", "json"]).assert_ok()
    };
    let own = verify(&plain);
    assert!(own.get("embedded_plan_tensors").is_none(), "{own}");
    // The embedded plan is what is verified, against TFLM's own plan: the
    // reference row is the plain model's.
    let v = verify(&embedded);
    assert_eq!(v["reference"]["head_bytes"], own["reference"]["head_bytes"]);
    assert_eq!(v["reference"]["planner"], "tflm");
    assert_eq!(v["plan"]["planner"], "embedded");
    let placed = offsets.iter().filter(|&&o| o >= 0).count();
    assert_eq!(
        u64::try_from(placed).ok(),
        v["embedded_plan_tensors"].as_u64()
    );
    // Where TFLM put each tensor in the plan run is the embedded offset.
    for row in v["tensors"].as_array().unwrap() {
        if let Some(p) = row["planned_offset"].as_u64() {
            assert_eq!(row["tflm_offset"].as_u64(), Some(p), "{row}");
        }
    }
    // --planner replaces the embedded plan.
    let r = memtrace(
        &dir,
        &[
            "verify",
            &embedded,
            "--planner",
            "tflm-greedy",
            "--no-oracle",
            "--format",
            "json",
        ],
    );
    assert_eq!(r.json()["plan"]["planner"], "tflm-greedy");
    assert!(dir.leftovers().is_empty(), "{:?}", dir.leftovers());
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn an_unsafe_embedded_plan_is_named_the_culprit() {
    let dir = Scratch::new("embedded-unsafe");
    let zoo = "zoo:mobilenet_v1_0.25_128_int8";
    let plain = dir.path("plain.tflite").display().to_string();
    let r = memtrace(&dir, &["zoo", "export", zoo, &plain]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    // A plan certified on the reference kernels, embedded, run on
    // CMSIS-NN's kernels, whose pointwise convolutions allow less overlap.
    let (embedded, _) = emit_offline(&dir, &plain, "embedded.tflite");
    let r = memtrace(
        &dir,
        &["verify", &embedded, "--kernels", "cmsis-nn", "--no-oracle"],
    );
    assert_eq!(r.code, Some(1), "{}{}", r.stdout, r.stderr);
    assert!(
        !r.stderr.contains("no plan can be proven against this run"),
        "{}",
        r.stderr
    );
    for needle in [
        "model: carries an embedded offline plan",
        "culprit: the model's embedded offline plan",
        "operator `2:CONV_2D:conv_pw_1` reads `conv_dw_1`",
    ] {
        assert!(r.stdout.contains(needle), "`{needle}` not in {}", r.stdout);
    }
    // TFLM's own plan of the same model is clean: the reference row.
    let row = r
        .stdout
        .lines()
        .find(|l| l.starts_with("tflm (none)"))
        .unwrap();
    assert_eq!(row.split_whitespace().nth(6), Some("0"), "{row}");
    assert!(dir.leftovers().is_empty(), "{:?}", dir.leftovers());
}

/// hello_world with its first planned tensor's name taken away.
fn with_unnamed_tensor() -> (Vec<u8>, usize) {
    let mut m = import(&hello_world());
    let t = planned(&m)
        .into_iter()
        .find(|t| !m.inputs.contains(t) && !m.outputs.contains(t))
        .unwrap();
    m.tensors[t].name.clear();
    (to_tflite(&m).unwrap(), t)
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn an_unnamed_tensor_has_one_name_in_reports_and_plans() {
    let dir = Scratch::new("names");
    let (bytes, t) = with_unnamed_tensor();
    let model = dir.write("unnamed.tflite", bytes);
    let name = format!("tensor{t}");
    let v = verify_plan(&dir, &model, &json!({"tensors": []}), &[]).assert_ok();
    let row = v["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name.as_str())
        .unwrap_or_else(|| panic!("no `{name}` in {}", v["tensors"]));
    let offset = row["reference_offset"].as_u64().unwrap();
    // `plan` calls it the same.
    let r = memtrace(&dir, &["plan", &model, "--format", "json"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.stdout.contains(&format!("\"{name}\"")), "{}", r.stdout);
    // Both spellings are accepted in a plan, at its reference offset.
    for spelling in [name.clone(), format!("tensor_{t}")] {
        let plan = json!({"tensors": [{"name": spelling, "offset": offset}]});
        verify_plan(&dir, &model, &plan, &[]).assert_ok();
    }
    // Both at once name one tensor twice.
    let plan = json!({"tensors": [
        {"name": name, "offset": offset},
        {"name": format!("tensor_{t}"), "offset": offset},
    ]});
    verify_plan(&dir, &model, &plan, &[]).assert_error(&[&name, "listed twice"]);
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn a_tensor_listed_twice_in_a_plan_is_an_error_naming_it() {
    let dir = Scratch::new("twice");
    let model = hello_world();
    let m = import(&model);
    let name = m.tensors[planned(&m)[0]].name.clone();
    // Two offsets that would each be valid on their own.
    let plan = json!({"tensors": [
        {"name": name, "offset": 0},
        {"name": name, "offset": 64},
    ]});
    verify_plan(&dir, &model, &plan, &[]).assert_error(&[&format!("`{name}`"), "listed twice"]);
}

/// What the campaign knows of a mutant before running it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    /// Must be refused (exit 1): a size beyond the runner's arena, an
    /// unknown or foreign library, a tensor listed twice.
    Refused,
    /// May pass or fail; if it passes, its outputs must be the reference's.
    Either,
}

/// One seeded mutant plan of `m` (planned tensors `names` at the reference
/// `offsets`).
fn mutant(rng: &mut Rng, names: &[(String, u64)]) -> (Value, Expect) {
    let mut tensors: Vec<Value> = Vec::new();
    let mut expect = Expect::Either;
    for (n, o) in names {
        if rng.chance(30) {
            tensors.push(json!({"name": n, "offset": o}));
        }
    }
    let mut plan = json!({});
    match rng.range(0, 6) {
        0 => {
            plan["arena_bytes"] = json!(1u64 << rng.range(33, 63));
            expect = Expect::Refused;
        }
        1 => {
            let (n, _) = &names[rng.range(0, names.len() as u32 - 1) as usize];
            tensors.push(json!({"name": n, "offset": RUNNER_ARENA + rng.range(0, 4096) as u64}));
            expect = Expect::Refused;
        }
        2 => {
            let (n, o) = &names[rng.range(0, names.len() as u32 - 1) as usize];
            tensors.push(json!({"name": n, "offset": o}));
            tensors.push(json!({"name": n, "offset": o}));
            expect = Expect::Refused;
        }
        3 => {
            plan["kernels"] =
                json!(["bogus", "cmsis-nn", "CMSIS-NN", ""][rng.range(0, 3) as usize]);
            expect = Expect::Refused;
        }
        4 => {
            // Random offsets, small: may clobber, must never pass wrongly.
            for (n, _) in names {
                if rng.chance(50) {
                    tensors.push(json!({"name": n, "offset": rng.range(0, 64) * 16}));
                }
            }
        }
        _ => plan["kernels"] = json!("tflm"),
    }
    plan["tensors"] = Value::Array(tensors);
    (plan, expect)
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn campaign_of_mutant_plans_and_sizes() {
    let dir = Scratch::new("campaign");
    let mut tally = std::collections::BTreeMap::<&str, usize>::new();
    let mut failures = Vec::new();
    for model in [
        hello_world(),
        shared_model("tflm_trained_lstm_int8.tflite")
            .display()
            .to_string(),
    ] {
        let reference = verify_plan(&dir, &model, &json!({"tensors": []}), &[]).assert_ok();
        let names: Vec<(String, u64)> = reference["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| Some((t["name"].as_str()?.into(), t["reference_offset"].as_u64()?)))
            .collect();
        let mut rng = Rng::new(0x0070_6c61_6e73 ^ names.len() as u64);
        for i in 0..8 {
            let (plan, expect) = mutant(&mut rng, &names);
            let r = verify_plan(&dir, &model, &plan, &[]);
            let what = format!("{model} mutant {i}: {plan}");
            let outcome = match (r.code, r.hung) {
                (_, true) => "hang",
                (None, _) => "abort",
                (Some(0), _) if expect == Expect::Refused => "wrong-but-accepted",
                (Some(0), _) if r.json()["output_hex"] != reference["output_hex"] => {
                    "wrong-but-accepted"
                }
                (Some(0), _) => "accepted",
                (Some(1), _) if r.stderr.starts_with("error: ") || !r.stdout.is_empty() => {
                    "refused"
                }
                (Some(2), _) => "usage error",
                _ => "abort",
            };
            *tally.entry(outcome).or_default() += 1;
            if matches!(outcome, "hang" | "abort" | "wrong-but-accepted") {
                failures.push(format!("{outcome}: {what}: {:?} {}", r.signal, r.stderr));
            }
        }
        // Huge sizes from the model itself.
        let huge = dir.write(
            "huge.tflite",
            with_extra_output("big", vec![1 << rng.range(13, 16), 1 << 16]),
        );
        let r = memtrace(&dir, &["verify", &huge, "--no-oracle"]);
        let outcome = match (r.code, r.hung) {
            (_, true) => "hang",
            (Some(1), _) if r.stderr.contains("`big`") => "refused",
            (Some(0), _) => "wrong-but-accepted",
            _ => "abort",
        };
        *tally.entry(outcome).or_default() += 1;
        if outcome != "refused" {
            failures.push(format!(
                "{outcome}: huge output: {:?} {}",
                r.signal, r.stderr
            ));
        }
    }
    let leftovers = dir.leftovers();
    eprintln!("plans campaign: {tally:?}, {} leftovers", leftovers.len());
    assert!(failures.is_empty(), "{failures:#?}");
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn stripping_an_embedded_plan_leaves_the_model_tflm_plans_itself() {
    let original = std::fs::read(hello_world()).unwrap();
    assert_eq!(tflite::strip_offline(&original).unwrap(), None);
    let m = import(&hello_world());
    let offsets: Vec<i64> = (0..m.tensors.len() as i64).map(|i| i * 16).collect();
    let planned = tflite::emit_offline(&original, &offsets).unwrap().bytes;
    assert_eq!(tflite::read_offline(&planned).unwrap(), Some(offsets));
    let stripped = tflite::strip_offline(&planned).unwrap().expect("stripped");
    assert_eq!(tflite::read_offline(&stripped).unwrap(), None);
    // The same graph, constants included.
    let back = tflite::import_bytes("m", &stripped).unwrap();
    assert_eq!(back.tensors.len(), m.tensors.len());
    for (a, b) in back.tensors.iter().zip(&m.tensors) {
        assert_eq!((&a.name, &a.shape, &a.data), (&b.name, &b.shape, &b.data));
    }
}

/// `plan MODEL --format json`: the document `verify --plan` reads.
fn plan_document(dir: &Scratch, model: &str) -> Value {
    let run = memtrace(dir, &["plan", model, "--format", "json"]);
    assert_eq!(run.code, Some(0), "{}{}", run.stdout, run.stderr);
    run.json()
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn a_plan_document_that_contradicts_itself_is_refused_naming_the_fields() {
    let dir = Scratch::new("contradicts");
    let model = hello_world();
    let doc = plan_document(&dir, &model);
    assert_eq!(doc["kernels"], doc["provenance"]["kernels"], "{doc}");
    let builds = doc["provenance"]["tflm_build"]
        .as_str()
        .expect("a TFLM build");
    assert_eq!(builds.split(',').count(), 1, "{builds}");
    // As written, it verifies.
    verify_plan(&dir, &model, &doc, &[]).assert_ok();

    // `kernels` says one library, the provenance another.
    let mut edited = doc.clone();
    edited["kernels"] = json!("cmsis-nn");
    let run = verify_plan(&dir, &model, &edited, &["--allow-foreign-plan"]);
    run.assert_error(&["\"kernels\"", "\"provenance.kernels\"", "cmsis-nn", "tflm"]);

    // Two builds for one target, none, or one for two targets.
    let two_targets = format!("{},x86-64", doc["provenance"]["target"].as_str().unwrap());
    for (target, tflm_build) in [
        (None, format!("{builds},{builds}")),
        (None, String::new()),
        (Some(two_targets.as_str()), builds.to_owned()),
    ] {
        let mut edited = doc.clone();
        edited["provenance"]["tflm_build"] = json!(tflm_build);
        if let Some(t) = target {
            edited["provenance"]["target"] = json!(t);
        }
        let run = verify_plan(&dir, &model, &edited, &[]);
        run.assert_error(&["\"provenance.tflm_build\"", "\"provenance.target\""]);
    }
    assert!(dir.leftovers().is_empty(), "{:?}", dir.leftovers());
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn a_verify_that_misses_its_budget_says_so_in_its_json() {
    let dir = Scratch::new("budget");
    let model = hello_world();
    let missed = memtrace(
        &dir,
        &[
            "verify",
            &model,
            "--no-oracle",
            "--fits",
            "100",
            "--format",
            "json",
        ],
    );
    assert_eq!(missed.code, Some(1), "{}", missed.stderr);
    let report = missed.json();
    // Proven, yet not OK: the verdict is the exit status's.
    assert_eq!(report["proven"], true, "{report}");
    assert_eq!(report["ok"], false, "{report}");
    let arena = report["arena_to_allocate"]["arena"]["bytes"]
        .as_u64()
        .unwrap();
    assert_eq!(report["budget"]["budget_bytes"], 100, "{report}");
    assert_eq!(report["budget"]["arena_bytes"], arena, "{report}");
    assert!(
        missed
            .stderr
            .contains(&format!("exceeds the 100 B budget by {} B", arena - 100)),
        "{}",
        missed.stderr
    );
    // `plan` measures the same plan's arena on its own, with the same budget.
    let planned = memtrace(&dir, &["plan", &model, "--fits", "100", "--format", "json"]);
    assert_eq!(planned.code, Some(1), "{}", planned.stderr);
    assert_eq!(planned.json()["budget"], report["budget"]);

    let met = memtrace(
        &dir,
        &[
            "verify",
            &model,
            "--no-oracle",
            "--fits",
            "1M",
            "--format",
            "json",
        ],
    );
    let report = met.assert_ok();
    assert_eq!(
        (&report["ok"], &report["proven"]),
        (&json!(true), &json!(true))
    );
    assert_eq!(report["budget"]["budget_bytes"], 1 << 20, "{report}");
    let without = verify_plan_free(&dir, &model);
    assert!(without["budget"].is_null(), "{without}");
    assert_eq!(without["ok"], true);
}

/// `verify MODEL --no-oracle --format json`, which must pass: its report.
fn verify_plan_free(dir: &Scratch, model: &str) -> Value {
    memtrace(dir, &["verify", model, "--no-oracle", "--format", "json"]).assert_ok()
}
