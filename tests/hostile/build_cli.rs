//! The build, the command line and the trace cache: memtrace touches only
//! what it owns, never waits on a FIFO, runs the guests of its own tree, a
//! build told a wrong source tree fails, and options that would be ignored
//! are refused.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use super::ended::{run_for, Ended};
use crate::common::{self, path_str, stderr, stdout};

/// The repository (the source tree the tested binary was built from).
fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `memtrace ARGS` with the trace cache in `cache`, bounded by `limit`.
fn memtrace_with_cache(cache: &Path, args: &[&str], limit: Duration) -> Ended {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_memtrace"));
    cmd.args(args).env("MEMTRACE_CACHE_DIR", cache);
    run_for(cmd, limit)
}

/// The output of a command that must have ended by itself.
fn exited(ended: Ended, what: &str) -> Output {
    match ended {
        Ended::Exited(out) => out,
        Ended::Killed { signal, hung } => {
            panic!("{what}: killed (signal {signal:?}, hung: {hung})")
        }
    }
}

/// Asserts a usage error: exit 2, nothing on stdout, `error:` naming every
/// needle.
fn assert_usage_error(out: &Output, needles: &[&str]) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(out.stdout.is_empty(), "{}", stdout(out));
    assert!(err.starts_with("error: "), "{err}");
    for n in needles {
        assert!(err.contains(n), "`{n}` not in: {err}");
    }
}

/// Makes a FIFO at `path`.
fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success(), "mkfifo {}", path.display());
}

/// The file names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Whether `name` is a trace cache entry's: `trace-` and 64 hex digits.
fn is_entry(name: &str) -> bool {
    name.strip_prefix("trace-")
        .and_then(|n| n.strip_suffix(".json"))
        .is_some_and(|k| k.len() == 64 && k.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// A private (0700) cache folder inside `dir`.
fn private_cache(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let cache = dir.join("cache");
    std::fs::create_dir(&cache).unwrap();
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o700)).unwrap();
    cache
}

/// The smallest shared model (hello_world: three FULLY_CONNECTED, 0.3 s
/// to verify).
fn small_model() -> String {
    path_str(&repo().join("../shared/models/tflm_hello_world_int8.tflite")).to_owned()
}

/// A run that fills the trace cache quickly: TFLM's own plan of the small
/// model (without the host oracle), as JSON.
fn cached_run(cache: &Path, limit: Duration) -> Ended {
    let model = small_model();
    let args = ["verify", &model, "--no-oracle", "--format", "json"];
    memtrace_with_cache(cache, &args, limit)
}

/// Sets `path`'s modification time to `secs` after the epoch.
fn age(path: &Path, secs: u64) {
    let f = std::fs::File::options().append(true).open(path).unwrap();
    f.set_modified(std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
        .unwrap();
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn the_cache_trim_deletes_only_its_own_entries_and_follows_no_link() {
    let dir = tempfile::tempdir().unwrap();
    let cache = private_cache(dir.path());
    // Over the 256 MiB bound, in sparse files: a user's file, an old entry
    // of the cache's own naming, and a link of that naming into a folder of
    // the user's.
    let big = 300u64 << 20;
    let config = cache.join("config.json");
    std::fs::File::create(&config)
        .unwrap()
        .set_len(big)
        .unwrap();
    age(&config, 1_000);
    let own = cache.join(format!("trace-{}.json", "0".repeat(64)));
    std::fs::File::create(&own).unwrap().set_len(big).unwrap();
    age(&own, 2_000);
    let elsewhere = dir.path().join("home");
    std::fs::create_dir(&elsewhere).unwrap();
    let victim = elsewhere.join("notes.json");
    std::fs::File::create(&victim)
        .unwrap()
        .set_len(big)
        .unwrap();
    age(&victim, 500);
    let link = cache.join(format!("trace-{}.json", "1".repeat(64)));
    std::os::unix::fs::symlink(&victim, &link).unwrap();

    let out = exited(cached_run(&cache, Duration::from_secs(120)), "verify");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        config.exists(),
        "the trim deleted a file memtrace did not create"
    );
    assert_eq!(std::fs::metadata(&config).unwrap().len(), big);
    assert!(victim.exists(), "the trim deleted through a link");
    assert!(
        std::fs::symlink_metadata(&link).is_ok(),
        "the trim removed a link it did not make"
    );
    // The trim still works on what is the cache's: the old entry went, the
    // new one stays.
    assert!(!own.exists(), "the least recently used entry was kept");
    let entries: Vec<String> = names(&cache)
        .into_iter()
        .filter(|n| is_entry(n) && !n.contains(&"1".repeat(64)))
        .collect();
    assert!(!entries.is_empty(), "no entry written: {:?}", names(&cache));
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn a_cache_folder_others_may_write_to_is_not_used() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("shared-cache");
    std::fs::create_dir(&cache).unwrap();
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
    let user = cache.join("config.json");
    std::fs::write(&user, b"{}").unwrap();
    let out = exited(cached_run(&cache, Duration::from_secs(120)), "verify");
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("trace cache") && err.contains("others may write"),
        "{err}"
    );
    assert_eq!(names(&cache), ["config.json"], "the cache was used");
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn a_fifo_at_a_cache_entry_is_a_miss_not_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    let cache = private_cache(dir.path());
    let first = exited(cached_run(&cache, Duration::from_secs(120)), "first verify");
    assert!(first.status.success(), "{}", stderr(&first));
    let entries: Vec<String> = names(&cache).into_iter().filter(|n| is_entry(n)).collect();
    assert!(!entries.is_empty(), "{:?}", names(&cache));
    for e in &entries {
        let p = cache.join(e);
        std::fs::remove_file(&p).unwrap();
        mkfifo(&p);
    }
    let second = exited(
        cached_run(&cache, Duration::from_secs(60)),
        "verify with FIFOs in the cache",
    );
    assert!(second.status.success(), "{}", stderr(&second));
    let a: serde_json::Value = serde_json::from_slice(&first.stdout).unwrap();
    let b: serde_json::Value = serde_json::from_slice(&second.stdout).unwrap();
    assert_eq!(a["output_digest"], b["output_digest"]);
    assert_ne!(b["reference"]["cached"], true, "a FIFO was read as a hit");
    // The entry written over the FIFO is a hit the next time.
    let third = exited(cached_run(&cache, Duration::from_secs(60)), "third verify");
    let c: serde_json::Value = serde_json::from_slice(&third.stdout).unwrap();
    assert_eq!(c["reference"]["cached"], true, "{c}");
    assert_eq!(a["output_digest"], c["output_digest"]);
}

#[test]
fn fifos_given_as_files_are_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    mkfifo(&fifo);
    let f = path_str(&fifo);
    let plan = dir.path().join("p.json");
    std::fs::write(&plan, r#"{"tensors": []}"#).unwrap();
    let p = path_str(&plan);
    for args in [
        vec!["run", f],
        vec!["plan", f],
        vec!["verify", f, "--no-oracle"],
        vec!["verify", "zoo:sakr_cifar10", "--no-oracle", "--plan", f],
        vec!["verify", "zoo:sakr_cifar10", "--no-oracle", "--input", f],
        vec!["verify", "zoo:sakr_cifar10", "--no-oracle", "--runner", f],
        vec![
            "verify",
            "zoo:sakr_cifar10",
            "--no-oracle",
            "--plan",
            p,
            "--runner",
            f,
        ],
    ] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_memtrace"));
        cmd.args(&args)
            .env("MEMTRACE_CACHE_DIR", dir.path().join("c"));
        let out = exited(run_for(cmd, Duration::from_secs(60)), &args.join(" "));
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("FIFO") && err.contains(f), "{args:?}: {err}");
    }
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn guests_come_from_the_source_tree_not_the_working_directory_and_are_named() {
    let dir = tempfile::tempdir().unwrap();
    // A planted guest folder where memtrace runs.
    let planted = dir.path().join("harness-c/build/cortex-m4");
    std::fs::create_dir_all(&planted).unwrap();
    for name in ["tflm-runner.elf", "tflm-runner-cmsis.elf"] {
        std::fs::write(planted.join(name), b"\x7fELF planted").unwrap();
    }
    let model = small_model();
    let out = Command::new(env!("CARGO_BIN_EXE_memtrace"))
        .args(["verify", &model, "--no-oracle", "--no-cache"])
        .args(["--format", "json"])
        .current_dir(dir.path())
        .env("MEMTRACE_CACHE_DIR", dir.path().join("cache"))
        .env("CI", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let runner = Path::new(
        report["runner"]
            .as_str()
            .expect("the report names the runner"),
    );
    let expected = common::guest("cortex-m4", "tflm-runner");
    assert_eq!(
        runner.canonicalize().unwrap(),
        expected.canonicalize().unwrap()
    );
    // The text report names it too.
    let out = Command::new(env!("CARGO_BIN_EXE_memtrace"))
        .args(["verify", &model, "--no-oracle"])
        .current_dir(dir.path())
        .env("MEMTRACE_CACHE_DIR", dir.path().join("cache"))
        .env("CI", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains(&format!("runner: {}", runner.display())),
        "{text}"
    );
}

/// `make -C harness-c ARGS` into a build folder of its own; its output.
fn make_harness_into(build: &Path, args: &[String]) -> Output {
    Command::new("make")
        .arg("-C")
        .arg(repo().join("harness-c"))
        .arg(format!("BUILD={}", build.display()))
        .args(args)
        .output()
        .expect("make runs")
}

#[test]
fn an_explicit_source_tree_that_is_not_one_fails_the_build() {
    let dir = tempfile::tempdir().unwrap();
    let build = dir.path().join("build");
    let missing = dir.path().join("nowhere");
    for var in ["CMSIS_NN_DIR", "TFLM_TREE", "TFLM_DIR"] {
        let out = make_harness_into(
            &build,
            &[format!("{var}={}", missing.display()), "rt".into()],
        );
        let text = format!("{}{}", stdout(&out), stderr(&out));
        assert!(!out.status.success(), "{var}: make succeeded:\n{text}");
        assert!(
            text.contains(var) && text.contains(path_str(&missing)),
            "{var}: {text}"
        );
    }
    assert!(!build.join("cortex-m4").exists(), "something was built");
}

/// Copies the CMSIS-NN checkout beside the repository to `to`, its
/// `<stdint.h>` includes in `arm_nn_compiler.h` and `arm_nn_math_types.h`
/// removed: a release whose headers get `uint8_t` from `arm_acle.h` on Arm
/// and from nowhere on a host.
fn release_relying_on_arm_acle(to: &Path) -> PathBuf {
    let from = repo().join("../shared/third_party/cmsis-nn");
    let status = Command::new("cp")
        .args(["-r", "--no-preserve=mode"])
        .arg(&from)
        .arg(to)
        .status()
        .unwrap();
    assert!(status.success());
    for header in [
        "Include/Internal/arm_nn_compiler.h",
        "Include/arm_nn_math_types.h",
    ] {
        let path = to.join(header);
        let text = std::fs::read_to_string(&path).unwrap();
        let edited = text.replace("#include <stdint.h>", "/* stdint.h: from arm_acle.h */");
        assert_ne!(text, edited, "{header} includes <stdint.h>");
        std::fs::write(&path, edited).unwrap();
    }
    to.to_path_buf()
}

#[test]
fn a_release_whose_headers_need_arm_acle_for_stdint_builds_for_x86_64() {
    let dir = tempfile::tempdir().unwrap();
    let release = release_relying_on_arm_acle(&dir.path().join("cmsis-nn-quirk"));
    let build = dir.path().join("build");
    let cmsis = format!("CMSIS_NN_DIR={}", release.display());
    // The key folder of this checkout, as the Makefile names it.
    let printed = make_harness_into(
        &build,
        &[
            cmsis.clone(),
            "--eval=memtrace-print-key: ; @echo cmsis-nn-$(CMSIS_NN_KEY)".into(),
            "memtrace-print-key".into(),
        ],
    );
    let text = stdout(&printed);
    let key = text
        .lines()
        .find(|l| l.starts_with("cmsis-nn-"))
        .unwrap_or_else(|| panic!("no key in: {text}{}", stderr(&printed)));
    let lib = build.join("x86_64").join(key);
    // Feature detection, and a library source that includes
    // arm_nnsupportfunctions.h (and so arm_nn_compiler.h) first.
    let goals = [
        lib.join("cmsis_nn_features.h"),
        lib.join("obj/NNSupportFunctions/arm_q7_to_q15_with_offset.o"),
        lib.join("obj/ConvolutionFunctions/arm_convolve_s8.o"),
    ];
    let mut args = vec![cmsis];
    args.extend(goals.iter().map(|g| g.display().to_string()));
    let out = make_harness_into(&build, &args);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    for g in &goals {
        assert!(g.exists(), "{} not built", g.display());
    }
}

#[test]
fn the_documented_commands_match_make_when_shared_is_reached_through_a_link() {
    let dir = tempfile::tempdir().unwrap();
    let shared = repo().join("../shared").canonicalize().unwrap();
    // A clone beside a `shared` that is a symbolic link.
    std::os::unix::fs::symlink(&shared, dir.path().join("shared")).unwrap();
    let clone = dir.path().join("clone");
    std::fs::create_dir(&clone).unwrap();
    let status = Command::new("cp")
        .args(["-r", "--no-preserve=mode"])
        .arg(repo().join("harness-c"))
        .arg(&clone)
        .status()
        .unwrap();
    assert!(status.success());
    let _ = std::fs::remove_dir_all(clone.join("harness-c/build"));
    let out = Command::new("make")
        .arg("-C")
        .arg(clone.join("harness-c"))
        .args(["-n", "-B", "build/cortex-m4/user-network.o"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let made = stdout(&out);
    let line = made
        .lines()
        .find(|l| l.contains("-c examples/user_network.c"))
        .unwrap_or_else(|| panic!("no compile line in: {made}"));
    let cmsis = shared.join("third_party/cmsis-nn");
    // make names the checkout through the link, not by its real path.
    assert!(!line.contains(path_str(&cmsis)), "{line}");
    let written: Vec<String> = line
        .split(' ')
        .map(|w| common::cmsis_written_as_the_doc(w, &cmsis))
        .collect();
    let docs = std::fs::read_to_string(repo().join("docs/protocol.md")).unwrap();
    assert!(
        docs.lines().any(|l| l == written.join(" ")),
        "docs/protocol.md does not show: {}",
        written.join(" ")
    );
}

#[test]
fn make_test_runs_every_test_binary_and_still_fails() {
    let out = Command::new("make")
        .arg("-C")
        .arg(repo())
        .args(["-n", "-o", "build", "-o", "oracle", "test"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let made = stdout(&out);
    let line = made
        .lines()
        .find(|l| l.contains(" test --release"))
        .unwrap_or_else(|| panic!("no cargo test in: {made}"));
    assert!(line.contains("--no-fail-fast"), "{line}");
    // A failing command still fails make (no `|| true`, no `-` prefix).
    assert!(
        !line.contains("||") && !line.trim_start().starts_with('-'),
        "{line}"
    );
}

#[test]
fn two_outputs_to_one_file_are_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let suite = common::suite("cortex-m4");
    let same = dir.path().join("same.png");
    let plain = path_str(&same);
    let dotted = format!("{}/./same.png", dir.path().display());
    for (plot, events) in [(plain, plain), (plain, dotted.as_str())] {
        let out = common::memtrace([
            "run",
            path_str(&suite),
            "--layer",
            "conv1",
            "--plot",
            plot,
            "--events",
            events,
        ]);
        assert_usage_error(&out, &["--plot", "--events", "same.png"]);
    }
    assert!(names(dir.path()).is_empty(), "{:?}", names(dir.path()));
}

#[test]
fn model_options_on_a_kernel_binary_are_errors_naming_them() {
    let suite = common::suite("cortex-m4");
    for (option, value) in [
        ("--kernels", "cmsis-nn"),
        ("--input", "/nonexistent"),
        ("--runner", "/nonexistent"),
        ("--arena-bytes", "4096"),
    ] {
        let out = common::memtrace(["run", path_str(&suite), "--layer", "conv1", option, value]);
        assert_usage_error(&out, &[option, "kernel binary"]);
    }
    let out = common::memtrace(["run", path_str(&suite), "--no-overlay"]);
    assert_usage_error(&out, &["--no-overlay", "--plot"]);
}

#[test]
fn verify_and_plan_options_without_effect_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("p.json");
    std::fs::write(&plan, r#"{"tensors": []}"#).unwrap();
    let model = "zoo:sakr_cifar10";
    let out = common::memtrace([
        "verify",
        model,
        "--plan",
        path_str(&plan),
        "--overlap-from",
        "cmsis-nn",
    ]);
    assert_usage_error(&out, &["--overlap-from", "--plan"]);
    let out = common::memtrace(["verify", model, "--allow-foreign-plan"]);
    assert_usage_error(&out, &["--allow-foreign-plan", "--plan"]);
    // The int16 TRANSPOSE_CONV accumulator went with memtrace's executor:
    // asking for it is a usage error that says why, not an unknown value.
    for cmd in ["plan", "verify"] {
        let out = common::memtrace([cmd, model, "--accumulator", "int16"]);
        assert_usage_error(
            &out,
            &[
                "--accumulator",
                "int16",
                "dropped",
                "TFLM's TRANSPOSE_CONV",
                "int32",
            ],
        );
    }
}

/// The graph input bytes of `model`, from verify's own error for an input
/// of the wrong size.
fn graph_input_bytes(model: &str, dir: &Path) -> usize {
    let empty = dir.join("empty.bin");
    std::fs::write(&empty, []).unwrap();
    let out = common::memtrace(["verify", model, "--no-oracle", "--input", path_str(&empty)]);
    let err = stderr(&out);
    err.split("need ")
        .nth(1)
        .and_then(|t| t.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no input size in: {err}"))
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn verify_names_the_input_file_not_the_seed_it_did_not_use() {
    let dir = tempfile::tempdir().unwrap();
    let model = small_model();
    let m = model.as_str();
    let size = graph_input_bytes(m, dir.path());
    let input = dir.path().join("in.bin");
    assert!(size > 0);
    std::fs::write(
        &input,
        (0..size).map(|i| (i * 7 + 3) as u8).collect::<Vec<_>>(),
    )
    .unwrap();
    let i = path_str(&input);
    let out = common::memtrace(["verify", m, "--no-oracle", "--seed", "9", "--input", i]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let head = text.lines().next().unwrap();
    assert!(head.contains(&format!("input {i}")), "{head}");
    assert!(!head.contains("seed 9"), "{head}");
    let out = common::memtrace([
        "verify",
        m,
        "--no-oracle",
        "--seed",
        "9",
        "--input",
        i,
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["input"], i);
}

/// A tiny deterministic generator (xorshift64*), so a campaign's cases are
/// the same on every run of one seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[(self.next() % items.len() as u64) as usize]
    }
}

/// What was planted in the cache folder before a campaign case.
#[derive(Clone, Copy, Debug)]
enum CacheFault {
    /// A user's own files.
    UserFiles,
    /// A link of the cache's naming to a file outside.
    LinkOut,
    /// A FIFO of the cache's naming.
    Fifo,
    /// The folder writable by everyone.
    WorldWritable,
}

#[test]
fn campaign_hostile_files_options_and_cache_states() {
    use std::os::unix::fs::PermissionsExt;
    let seed = 0x5eed_0b11_dc11_u64;
    let mut rng = Rng(seed);
    let suite = common::suite("cortex-m4");
    let s = path_str(&suite);
    let work = tempfile::tempdir().unwrap();
    let fifo = work.path().join("fifo");
    mkfifo(&fifo);
    let f = path_str(&fifo);
    let outside = work.path().join("outside.json");
    std::fs::write(&outside, b"keep").unwrap();
    // Argument sets: each must end at once with 0, 1 or 2, never a signal,
    // a panic (101) or a hang.
    let small = small_model();
    let m = small.as_str();
    let cases: Vec<Vec<String>> = [
        vec!["verify", m, "--no-oracle"],
        vec!["verify", m, "--no-oracle", "--seed", "3"],
        vec!["run", f],
        vec!["run", s, "--layer", "conv1", "--events", f, "--plot", f],
        vec!["run", s, "--no-overlay"],
        vec!["run", s, "--target", "x86-64"],
        vec!["run", s, "--input", f],
        vec!["plan", f],
        vec!["plan", "zoo:sakr_cifar10", "--accumulator", "int16"],
        vec!["verify", "zoo:sakr_cifar10", "--runtime", "executor"],
        vec!["verify", "zoo:sakr_cifar10", "--no-oracle", "--plan", f],
        vec!["verify", "zoo:sakr_cifar10", "--no-oracle", "--input", f],
        vec!["verify", "zoo:sakr_cifar10", "--allow-foreign-plan"],
        vec![
            "verify",
            "zoo:sakr_cifar10",
            "--plan",
            f,
            "--overlap-from",
            "tflm",
        ],
        vec!["validate", f],
    ]
    .iter()
    .map(|v| v.iter().map(|a| a.to_string()).collect())
    .collect();
    let faults = [
        CacheFault::UserFiles,
        CacheFault::LinkOut,
        CacheFault::Fifo,
        CacheFault::WorldWritable,
    ];
    let (mut ok, mut failed, mut usage, mut aborts, mut hangs, mut touched) = (0, 0, 0, 0, 0, 0);
    for round in 0..16 {
        let args = rng.pick(&cases).clone();
        let fault = *rng.pick(&faults);
        let cache = work.path().join(format!("cache-{round}"));
        std::fs::create_dir(&cache).unwrap();
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o700)).unwrap();
        let planted = cache.join(format!("trace-{:064x}.json", rng.next()));
        match fault {
            CacheFault::UserFiles => std::fs::write(cache.join("config.json"), b"{}").unwrap(),
            CacheFault::LinkOut => std::os::unix::fs::symlink(&outside, &planted).unwrap(),
            CacheFault::Fifo => mkfifo(&planted),
            CacheFault::WorldWritable => {
                std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap()
            }
        }
        let before = names(&cache);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        match memtrace_with_cache(&cache, &args, Duration::from_secs(60)) {
            Ended::Exited(out) => match out.status.code() {
                Some(0) => ok += 1,
                Some(1) => failed += 1,
                Some(2) => usage += 1,
                code => panic!("{args:?} ({fault:?}): exit {code:?}: {}", stderr(&out)),
            },
            Ended::Killed { hung: true, .. } => hangs += 1,
            Ended::Killed { .. } => aborts += 1,
        }
        // Nothing planted went, nothing but cache entries came.
        let after = names(&cache);
        let lost = before.iter().filter(|n| !after.contains(n)).count();
        let foreign = after
            .iter()
            .filter(|n| !before.contains(n) && !is_entry(n))
            .count();
        if lost + foreign > 0 || std::fs::read(&outside).unwrap() != b"keep" {
            touched += 1;
        }
    }
    eprintln!(
        "campaign seed {seed:#x}: {ok} ok, {failed} refused (1), {usage} usage (2), \
         {aborts} aborts, {hangs} hangs, {touched} touched"
    );
    assert_eq!((aborts, hangs, touched), (0, 0, 0));
    assert!(failed + usage > 0, "no case was refused");
}

/// A "compiler" that writes its `-o` file in two halves, 0.4 s apart: a
/// reader that sees the first half alone has seen a half-written object.
fn slow_compiler(dir: &Path) -> PathBuf {
    let cc = dir.join("slow-cc.sh");
    std::fs::write(
        &cc,
        "while [ $# -gt 1 ]; do [ \"$1\" = -o ] && out=$2; shift; done\n\
         printf 'first-half,' > \"$out\"; sleep 0.4; printf 'second-half\\n' >> \"$out\"\n",
    )
    .unwrap();
    cc
}

/// `harness-c/tflm/atomic.sh cc OBJ sh CC -c x.cc`, in a process group of
/// its own (as make's recipe and its compiler are).
fn atomic_compile(obj: &Path, cc: &Path) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    Command::new("sh")
        .arg(repo().join("harness-c/tflm/atomic.sh"))
        .args(["cc", path_str(obj), "sh", path_str(cc), "-c", "x.cc"])
        .process_group(0)
        .spawn()
        .expect("sh runs")
}

#[test]
fn cache_objects_are_written_whole_by_concurrent_builds_and_a_stopped_one_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cc = slow_compiler(dir.path());
    let obj = dir.path().join("depthwise_conv.o");
    // Two builds of one cache entry compile the same object at once (two
    // clones, two terminals): a reader (ar) sees no object or a whole one.
    let mut builds = [atomic_compile(&obj, &cc), atomic_compile(&obj, &cc)];
    let whole = "first-half,second-half\n";
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_millis(1200) {
        if let Ok(text) = std::fs::read_to_string(&obj) {
            assert_eq!(text, whole, "a reader saw a half-written object");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    for b in &mut builds {
        assert!(b.wait().unwrap().success());
    }
    assert_eq!(std::fs::read_to_string(&obj).unwrap(), whole);
    // A build stopped by a signal (Ctrl-C, a killed make) leaves neither the
    // object nor its temporary file.
    let stopped = dir.path().join("conv.o");
    let mut build = atomic_compile(&stopped, &cc);
    std::thread::sleep(Duration::from_millis(150));
    let group = format!("-{}", build.id());
    let sent = Command::new("kill")
        .args(["-TERM", "--", &group])
        .status()
        .unwrap();
    assert!(sent.success(), "kill -TERM -- {group}");
    assert!(!build.wait().unwrap().success());
    std::thread::sleep(Duration::from_millis(600));
    let left: Vec<String> = names(dir.path())
        .into_iter()
        .filter(|n| n != "slow-cc.sh" && n != "depthwise_conv.o")
        .collect();
    assert!(left.is_empty(), "a stopped build left {left:?}");
}
