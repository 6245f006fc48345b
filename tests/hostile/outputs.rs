//! Output files (`--out`, `--events`, `--plot`, `--emit-offline` and its
//! header): memtrace follows no link and truncates nothing at the names it
//! chooses itself (temporary files, the writability probe), whatever was
//! planted there; every signal that ends it removes its temporary output;
//! a stream given to `--emit-offline` makes no sibling header under `/dev`;
//! and a hostile model path never changes what the generated header
//! compiles to.

use std::io::Write;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime};

use memtrace_overlap::rng::Rng;
use serde_json::Value;

use crate::common::{self, path_str};

/// A run of the binary is killed (and counted as a hang) after this.
const LIMIT: Duration = Duration::from_secs(90);

/// How one run of the binary ended.
#[derive(Debug)]
struct Ended {
    status: Option<ExitStatus>,
    hung: bool,
    stdout: Vec<u8>,
    stderr: String,
}

impl Ended {
    fn code(&self) -> Option<i32> {
        self.status.and_then(|s| s.code())
    }

    fn signal(&self) -> Option<i32> {
        self.status.and_then(|s| s.signal())
    }
}

/// `memtrace ARGS`, started behind a gate so that its process id is known
/// before it runs: `sh` waits on the FIFO `gate` and then becomes memtrace
/// (`exec` keeps the id). `before(pid)` runs with that id, then the gate
/// opens. Core dumps are off (several signals dump core by default).
fn gated_memtrace(
    scratch: &Path,
    args: &[String],
    before: impl FnOnce(u32),
    limit: Duration,
) -> Ended {
    static GATES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = GATES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let gate = scratch.join(format!("gate-{n}"));
    mkfifo(&gate);
    let (out, err) = (scratch.join("stdout"), scratch.join("stderr"));
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("ulimit -c 0; read _ < \"$0\"; exec \"$@\"")
        .arg(&gate)
        .arg(env!("CARGO_BIN_EXE_memtrace"))
        .args(args)
        .env("CI", "1")
        .env("MEMTRACE_CACHE_DIR", scratch.join("cache"))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .expect("sh starts");
    before(child.id());
    std::fs::OpenOptions::new()
        .write(true)
        .open(&gate)
        .and_then(|mut g| g.write_all(b"go\n"))
        .expect("the gate opens");
    let started = Instant::now();
    let (status, hung) = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break (Some(status), false);
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break (None, true);
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let _ = std::fs::remove_file(&gate);
    Ended {
        status,
        hung,
        stdout: std::fs::read(&out).unwrap_or_default(),
        stderr: String::from_utf8_lossy(&std::fs::read(&err).unwrap_or_default()).into_owned(),
    }
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success(), "mkfifo {}", path.display());
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// A file that must never change: its bytes and modification time.
struct Canary {
    path: PathBuf,
    bytes: Vec<u8>,
    mtime: SystemTime,
}

impl Canary {
    fn new(path: PathBuf) -> Canary {
        let bytes = b"a file memtrace does not own\n".to_vec();
        std::fs::write(&path, &bytes).unwrap();
        // In the past: a write within the same clock tick is still seen.
        let mtime = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        std::fs::File::options()
            .append(true)
            .open(&path)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        Canary { path, bytes, mtime }
    }

    fn untouched(&self) -> bool {
        let meta = std::fs::symlink_metadata(&self.path);
        meta.is_ok_and(|m| m.is_file() && m.modified().ok() == Some(self.mtime))
            && std::fs::read(&self.path).ok().as_deref() == Some(&self.bytes[..])
    }
}

/// A layer the kernel suite traces in a few milliseconds.
const TINY_JOB: &str = "op=relu,input=1x4x4x2";

/// One of memtrace's output options, with a cheap real command that uses it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Writer {
    /// `table --out` (a baseline, JSON).
    Out,
    /// `run --events` (a CSV streamed while tracing).
    Events,
    /// `run --plot` (an SVG).
    Plot,
    /// `plan --emit-offline` (a model and its header): needs TFLM's runner.
    EmitOffline,
}

impl Writer {
    const ALL: [Writer; 4] = [
        Writer::Out,
        Writer::Events,
        Writer::Plot,
        Writer::EmitOffline,
    ];

    /// The output's file name.
    fn file(self) -> &'static str {
        match self {
            Writer::Out => "base.json",
            Writer::Events => "events.csv",
            Writer::Plot => "arena.svg",
            Writer::EmitOffline => "planned.tflite",
        }
    }

    /// Files written beside the output (the header).
    fn siblings(self) -> &'static [&'static str] {
        match self {
            Writer::EmitOffline => &["planned.h"],
            _ => &[],
        }
    }

    /// The command writing `out`.
    fn args(self, out: &Path) -> Vec<String> {
        let suite = common::suite("cortex-m4");
        let (s, o) = (path_str(&suite).to_owned(), path_str(out).to_owned());
        let v: Vec<&str> = match self {
            Writer::Out => vec![
                "table",
                &s,
                "--no-builtin",
                "--grid",
                "op=relu,input=1x4x4x2",
                "--out",
                &o,
            ],
            Writer::Events => vec!["run", &s, "--job", TINY_JOB, "--events", &o],
            Writer::Plot => vec!["run", &s, "--job", TINY_JOB, "--plot", &o],
            Writer::EmitOffline => {
                return vec![
                    "plan".into(),
                    common::shared_model("tflm_hello_world_int8.tflite"),
                    "--emit-offline".into(),
                    o,
                ]
            }
        };
        v.into_iter().map(String::from).collect()
    }

    fn available(self) -> bool {
        self != Writer::EmitOffline || !cfg!(no_tflm)
    }
}

/// The names the old writer chose for `file` in `dir` for process `pid`:
/// the probe `.memtrace-probe-PID` and `.NAME.PID.N.tmp.EXT`.
fn old_names(dir: &Path, file: &str, pid: u32) -> Vec<PathBuf> {
    let ext = Path::new(file)
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    let mut v = vec![dir.join(format!(".memtrace-probe-{pid}"))];
    v.extend((0..6).map(|n| dir.join(format!(".{file}.{pid}.{n}.tmp{ext}"))));
    v
}

/// What is planted at a name memtrace might choose.
#[derive(Clone, Copy, Debug)]
enum Plant {
    LinkToCanary,
    Dangling,
    LinkToFolder,
    Fifo,
    Regular,
    Folder,
}

const PLANTS: [Plant; 6] = [
    Plant::LinkToCanary,
    Plant::Dangling,
    Plant::LinkToFolder,
    Plant::Fifo,
    Plant::Regular,
    Plant::Folder,
];

/// The folder outside the output's, where planted links point.
struct Outside {
    dir: PathBuf,
    canary: Canary,
    folder: PathBuf,
    never: PathBuf,
}

impl Outside {
    fn new(dir: PathBuf) -> Outside {
        std::fs::create_dir_all(&dir).unwrap();
        let folder = dir.join("folder");
        std::fs::create_dir_all(&folder).unwrap();
        Outside {
            canary: Canary::new(dir.join("canary")),
            folder,
            never: dir.join("never-created"),
            dir,
        }
    }

    /// Nothing here changed, nothing came.
    fn untouched(&self) -> bool {
        self.canary.untouched()
            && !self.never.exists()
            && names(&self.folder).is_empty()
            && names(&self.dir) == ["canary", "folder"]
    }
}

/// Plants `what` at `path`; a description to compare with afterwards.
fn plant(path: &Path, what: Plant, outside: &Outside) -> String {
    match what {
        Plant::LinkToCanary => std::os::unix::fs::symlink(&outside.canary.path, path).unwrap(),
        Plant::Dangling => std::os::unix::fs::symlink(&outside.never, path).unwrap(),
        Plant::LinkToFolder => std::os::unix::fs::symlink(&outside.folder, path).unwrap(),
        Plant::Fifo => mkfifo(path),
        Plant::Regular => std::fs::write(path, b"planted").unwrap(),
        Plant::Folder => std::fs::create_dir(path).unwrap(),
    }
    describe(path)
}

/// What is at `path`, without following a link: kind, link target or
/// contents.
fn describe(path: &Path) -> String {
    let Ok(m) = std::fs::symlink_metadata(path) else {
        return "nothing".into();
    };
    let t = m.file_type();
    if t.is_symlink() {
        format!("link to {:?}", std::fs::read_link(path).unwrap())
    } else if t.is_fifo() {
        "fifo".into()
    } else if t.is_dir() {
        format!("folder of {}", std::fs::read_dir(path).unwrap().count())
    } else {
        format!(
            "file {:?} mode {:o}",
            std::fs::read(path).unwrap(),
            m.mode()
        )
    }
}

/// The output of `writer` in a clean folder: what every run must write.
fn reference(writer: Writer, scratch: &Path) -> Vec<u8> {
    let dir = scratch.join(format!("reference-{writer:?}"));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(writer.file());
    let ended = gated_memtrace(scratch, &writer.args(&out), |_| {}, LIMIT);
    assert_eq!(ended.code(), Some(0), "{writer:?}: {}", ended.stderr);
    std::fs::read(&out).unwrap()
}

#[test]
fn a_link_planted_at_the_old_temporary_and_probe_names_is_never_followed() {
    // On the old writer these names were predictable from the process id:
    // the probe truncated the canary, the temporary file wrote into it and
    // the output became the link.
    let scratch = tempfile::tempdir().unwrap();
    let outside = Outside::new(scratch.path().join("outside"));
    for writer in Writer::ALL.into_iter().filter(|w| w.available()) {
        let dir = scratch.path().join(format!("{writer:?}"));
        std::fs::create_dir(&dir).unwrap();
        let out = dir.join(writer.file());
        let mut planted = Vec::new();
        let ended = gated_memtrace(
            scratch.path(),
            &writer.args(&out),
            |pid| {
                for file in [writer.file()].iter().chain(writer.siblings()) {
                    for name in old_names(&dir, file, pid) {
                        if !name.exists() {
                            plant(&name, Plant::LinkToCanary, &outside);
                            planted.push(name);
                        }
                    }
                }
            },
            LIMIT,
        );
        assert_eq!(ended.code(), Some(0), "{writer:?}: {}", ended.stderr);
        assert!(outside.untouched(), "{writer:?} wrote into the canary");
        for name in &planted {
            assert!(describe(name).starts_with("link to"), "{name:?}");
        }
        for file in [writer.file()].iter().chain(writer.siblings()) {
            let meta = std::fs::symlink_metadata(dir.join(file)).unwrap();
            assert!(meta.is_file(), "{writer:?}: {file} is {meta:?}");
        }
        let expected = planted.len() + 1 + writer.siblings().len();
        assert_eq!(names(&dir).len(), expected, "{writer:?}: {:?}", names(&dir));
    }
}

/// `memtrace run` tracing a layer long enough to be interrupted (conv1: a
/// few seconds, 7 MB of events), its events streamed into `out`.
fn slow_events_run(out: &Path) -> Vec<String> {
    let suite = common::suite("cortex-m4");
    [
        "run",
        path_str(&suite),
        "--layer",
        "conv1",
        "--events",
        path_str(out),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Starts `args` and waits for its temporary output in `dir`, then sends
/// `signal` (a `kill` name); how it ended.
fn interrupt_once_writing(scratch: &Path, dir: &Path, args: &[String], signal: &str) -> Ended {
    let signal = signal.to_owned();
    let dir = dir.to_owned();
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = sent.clone();
    let ended = gated_memtrace(
        scratch,
        args,
        move |pid| {
            std::thread::spawn(move || {
                let started = Instant::now();
                while started.elapsed() < Duration::from_secs(60) {
                    // The streamed table's temporary file, holding events
                    // (not the writability probe, which is empty).
                    let writing = names(&dir).iter().any(|n| {
                        n.contains(".tmp")
                            && std::fs::metadata(dir.join(n)).is_ok_and(|m| m.len() > 0)
                    });
                    if writing {
                        let killed = Command::new("kill")
                            .args(["-s", &signal, &pid.to_string()])
                            .status()
                            .unwrap();
                        flag.store(killed.success(), std::sync::atomic::Ordering::SeqCst);
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            });
        },
        LIMIT,
    );
    assert!(
        sent.load(std::sync::atomic::Ordering::SeqCst),
        "no temporary file seen: {ended:?}"
    );
    ended
}

#[test]
fn every_signal_that_ends_memtrace_removes_its_temporary_output() {
    let scratch = tempfile::tempdir().unwrap();
    for (signal, number) in [
        ("USR1", 10),
        ("USR2", 12),
        ("ALRM", 14),
        ("XCPU", 24),
        ("XFSZ", 25),
        ("VTALRM", 26),
        ("PROF", 27),
        ("QUIT", 3),
        ("TERM", 15),
    ] {
        let dir = scratch.path().join(signal);
        std::fs::create_dir(&dir).unwrap();
        let out = dir.join("events.csv");
        let ended = interrupt_once_writing(scratch.path(), &dir, &slow_events_run(&out), signal);
        assert_eq!(ended.signal(), Some(number), "{signal}: {ended:?}");
        assert!(names(&dir).is_empty(), "{signal}: {:?}", names(&dir));
    }
}

#[test]
fn sigpipe_neither_ends_memtrace_nor_leaves_its_temporary_output() {
    // Rust ignores SIGPIPE (a closed pipe is an EPIPE error, which memtrace
    // ends on quietly): sent from outside, it is ignored and the run ends
    // as it would have, its output in place.
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("pipe");
    std::fs::create_dir(&dir).unwrap();
    let out = dir.join("events.csv");
    let ended = interrupt_once_writing(scratch.path(), &dir, &slow_events_run(&out), "PIPE");
    assert_eq!(ended.code(), Some(0), "{ended:?}");
    assert_eq!(names(&dir), ["events.csv"]);
}

#[test]
fn emit_offline_into_a_stream_is_a_usage_error_and_writes_no_sibling() {
    let scratch = tempfile::tempdir().unwrap();
    let fifo = scratch.path().join("fifo.tflite");
    mkfifo(&fifo);
    let link = scratch.path().join("null.tflite");
    std::os::unix::fs::symlink("/dev/null", &link).unwrap();
    let null_header_before = describe(Path::new("/dev/null.h"));
    let model = common::shared_model("tflm_hello_world_int8.tflite");
    for command in ["plan", "verify"] {
        for dest in [Path::new("/dev/null"), &fifo, &link] {
            let args: Vec<String> = [command, &model, "--emit-offline", path_str(dest)]
                .iter()
                .map(|s| s.to_string())
                .collect();
            let ended = gated_memtrace(scratch.path(), &args, |_| {}, LIMIT);
            assert_eq!(ended.code(), Some(2), "{command} {dest:?}: {ended:?}");
            assert!(
                ended.stderr.starts_with("error: ")
                    && ended.stderr.contains("--emit-offline")
                    && ended.stderr.contains(path_str(dest))
                    && ended.stderr.contains("stream"),
                "{}",
                ended.stderr
            );
            assert!(ended.stdout.is_empty());
        }
    }
    assert_eq!(describe(Path::new("/dev/null.h")), null_header_before);
    let mut left = names(scratch.path());
    left.retain(|n| !["stdout", "stderr", "cache"].contains(&n.as_str()));
    assert_eq!(left, ["fifo.tflite", "null.tflite"]);
    assert!(std::fs::symlink_metadata("/dev/null")
        .unwrap()
        .file_type()
        .is_char_device());
}

/// What sits at the output's own name before a campaign run.
#[derive(Clone, Copy, Debug, PartialEq)]
enum AtName {
    Nothing,
    /// A file of the user's: replaced by the output.
    Regular,
    /// A read-only file of the user's: replaced too (its folder is writable).
    ReadOnly,
    /// A hard link to the canary: the name is replaced, the canary kept.
    HardLinkToCanary,
    /// The user's link to their own file: that file gets the output.
    UserLink,
    /// A link to nothing: an error naming it.
    Dangling,
    /// A link to a folder: an error naming it.
    LinkToFolder,
    /// A folder: an error naming it.
    Folder,
    /// A FIFO a reader waits on: the output goes through it (but
    /// `--emit-offline`, whose header would need a sibling, refuses it).
    Fifo,
}

const AT_NAME: [AtName; 9] = [
    AtName::Nothing,
    AtName::Regular,
    AtName::ReadOnly,
    AtName::HardLinkToCanary,
    AtName::UserLink,
    AtName::Dangling,
    AtName::LinkToFolder,
    AtName::Folder,
    AtName::Fifo,
];

impl AtName {
    /// The exit the run must end with.
    fn expected_code(self, writer: Writer) -> i32 {
        match self {
            AtName::Dangling | AtName::LinkToFolder | AtName::Folder => 1,
            AtName::Fifo if writer == Writer::EmitOffline => 2,
            _ => 0,
        }
    }
}

/// Reads a FIFO in a thread until its writer closes it; released by
/// [`release_reader`] if nobody ever writes.
fn fifo_reader(path: &Path) -> std::thread::JoinHandle<Vec<u8>> {
    let path = path.to_owned();
    std::thread::spawn(move || std::fs::read(&path).unwrap_or_default())
}

/// Opens the FIFO `path` for writing without blocking and closes it, so a
/// reader still waiting for a writer sees the end.
fn release_reader(path: &Path) {
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(0o4000) // O_NONBLOCK: fails at once when nobody reads
        .open(path);
}

/// Prepares the output's own name; the file whose contents must be the
/// output when the run succeeds.
fn prepare_name(at: AtName, out: &Path, user: &Path, outside: &Outside) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    match at {
        AtName::Nothing | AtName::Fifo | AtName::Folder => {
            match at {
                AtName::Fifo => mkfifo(out),
                AtName::Folder => std::fs::create_dir(out).unwrap(),
                _ => {}
            }
            out.to_owned()
        }
        AtName::Regular | AtName::ReadOnly => {
            std::fs::write(out, b"the user's old output").unwrap();
            if at == AtName::ReadOnly {
                std::fs::set_permissions(out, std::fs::Permissions::from_mode(0o444)).unwrap();
            }
            out.to_owned()
        }
        AtName::HardLinkToCanary => {
            std::fs::hard_link(&outside.canary.path, out).unwrap();
            out.to_owned()
        }
        AtName::UserLink => {
            std::fs::write(user, b"the user's old output").unwrap();
            std::os::unix::fs::symlink(user, out).unwrap();
            user.to_owned()
        }
        AtName::Dangling => {
            std::os::unix::fs::symlink(&outside.never, out).unwrap();
            out.to_owned()
        }
        AtName::LinkToFolder => {
            std::os::unix::fs::symlink(&outside.folder, out).unwrap();
            out.to_owned()
        }
    }
}

/// The counts of a campaign.
#[derive(Debug, Default)]
struct Tally {
    written: u32,
    refused: u32,
    usage: u32,
    panics: u32,
    signals: u32,
    hangs: u32,
    wrong: u32,
    leftovers: u32,
    touched: u32,
}

#[test]
fn campaign_symlinked_and_pre_existing_output_names() {
    let seed = 0x6f75_7470_7574_u64;
    let mut rng = Rng::new(seed);
    let scratch = tempfile::tempdir().unwrap();
    let outside = Outside::new(scratch.path().join("outside"));
    let writers: Vec<Writer> = Writer::ALL.into_iter().filter(|w| w.available()).collect();
    let references: Vec<(Writer, Vec<u8>)> = writers
        .iter()
        .map(|&w| (w, reference(w, scratch.path())))
        .collect();
    let mut tally = Tally::default();
    let mut failures: Vec<String> = Vec::new();
    for round in 0..28 {
        let writer = writers[rng.range(0, writers.len() as u32 - 1) as usize];
        let at = AT_NAME[rng.range(0, AT_NAME.len() as u32 - 1) as usize];
        let dir = scratch.path().join(format!("round-{round}"));
        std::fs::create_dir(&dir).unwrap();
        let out = dir.join(writer.file());
        let user = scratch.path().join(format!("user-{round}"));
        let holds = prepare_name(at, &out, &user, &outside);
        let reader = (at == AtName::Fifo).then(|| fifo_reader(&out));
        let at_name = describe(&out);
        // Planted at the old names (this run's own process id) and at
        // random names of the new pattern.
        let mut planted: Vec<(PathBuf, String)> = Vec::new();
        let picks: Vec<Plant> = (0..24)
            .map(|_| PLANTS[rng.range(0, PLANTS.len() as u32 - 1) as usize])
            .collect();
        let guesses: Vec<u64> = (0..4).map(|_| rng.next_u64()).collect();
        let ended = gated_memtrace(
            scratch.path(),
            &writer.args(&out),
            |pid| {
                let mut names: Vec<PathBuf> = Vec::new();
                for file in [writer.file()].iter().chain(writer.siblings()) {
                    names.extend(old_names(&dir, file, pid));
                    let ext = Path::new(file).extension().unwrap().to_string_lossy();
                    names.extend(
                        guesses
                            .iter()
                            .map(|g| dir.join(format!(".{file}.{g:016x}.tmp.{ext}"))),
                    );
                }
                for (name, what) in names.into_iter().zip(picks.iter().cycle()) {
                    if !name.exists() && std::fs::symlink_metadata(&name).is_err() {
                        let described = plant(&name, *what, &outside);
                        planted.push((name, described));
                    }
                }
            },
            LIMIT,
        );
        if at == AtName::Fifo {
            release_reader(&out);
        }
        let through_fifo = reader.map(|r| r.join().unwrap());
        let what = format!("round {round}: {writer:?} over {at:?}");
        match (ended.code(), ended.signal(), ended.hung) {
            (Some(0), ..) => tally.written += 1,
            (Some(1), ..) => tally.refused += 1,
            (Some(2), ..) => tally.usage += 1,
            (Some(101), ..) => tally.panics += 1,
            (_, Some(_), _) => tally.signals += 1,
            (.., true) => tally.hangs += 1,
            _ => tally.panics += 1,
        }
        let expected = at.expected_code(writer);
        let reference = &references.iter().find(|(w, _)| *w == writer).unwrap().1;
        let correct = match ended.code() {
            Some(0) => {
                let got = match &through_fifo {
                    Some(bytes) => Some(bytes.clone()),
                    None => std::fs::read(&holds).ok(),
                };
                got.as_ref() == Some(reference)
                    && (at != AtName::UserLink || describe(&out).starts_with("link to"))
            }
            Some(_) => {
                // An error names the path, and the name is as it was.
                ended.stderr.contains(path_str(&out)) && describe(&out) == at_name
            }
            None => false,
        };
        if ended.code() != Some(expected) || !correct {
            tally.wrong += 1;
            failures.push(format!("{what}: {ended:?}"));
        }
        // Nothing planted changed; no file but the outputs came.
        let changed: Vec<&PathBuf> = planted
            .iter()
            .filter(|(p, d)| describe(p) != *d)
            .map(|(p, _)| p)
            .collect();
        if !outside.untouched() || !changed.is_empty() {
            tally.touched += 1;
            failures.push(format!("{what}: touched {changed:?}"));
        }
        let mut allowed: Vec<String> = planted
            .iter()
            .map(|(p, _)| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        allowed.push(writer.file().into());
        if ended.code() == Some(0) {
            allowed.extend(writer.siblings().iter().map(|s| s.to_string()));
        }
        let strays: Vec<String> = names(&dir)
            .into_iter()
            .filter(|n| !allowed.contains(n))
            .collect();
        if !strays.is_empty() {
            tally.leftovers += 1;
            failures.push(format!("{what}: left {strays:?}"));
        }
    }
    eprintln!("campaign seed {seed:#x}: {tally:?}");
    assert!(failures.is_empty(), "{tally:?}\n{}", failures.join("\n"));
    assert!(tally.written > 0 && tally.refused > 0, "{tally:?}");
}

/// The model copied under `name` inside `dir` (made with its folders).
fn hostile_copy(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::copy(common::shared_model("tflm_hello_world_int8.tflite"), &path).unwrap();
    path
}

/// Compiles `check.c` (including `header`) as C11 and C++11, with
/// trigraphs on (`-std=c11`), every warning an error: the compiler's
/// messages if it fails.
fn compile_with_header(header: &Path, checks: &str) -> Result<(), String> {
    let dir = header.parent().unwrap();
    let source = dir.join("check.c");
    std::fs::write(
        &source,
        format!(
            "#include \"{}\"\n{checks}\nint main(void) {{ return kModel[0] == 0; }}\n",
            header.file_name().unwrap().to_string_lossy()
        ),
    )
    .unwrap();
    let compilers: Vec<(&str, Vec<&str>)> = vec![
        ("arm-none-eabi-gcc", vec!["-std=c11", "-x", "c"]),
        ("gcc", vec!["-std=c11", "-x", "c"]),
        ("g++", vec!["-std=c++11", "-x", "c++"]),
    ];
    let mut compiled = 0;
    for (cc, flags) in compilers {
        let out = Command::new(cc)
            .args(&flags)
            .args([
                "-fsyntax-only",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-Wtrigraphs",
            ])
            .arg(&source)
            .current_dir(dir)
            .output();
        let Ok(out) = out else { continue };
        compiled += 1;
        if !out.status.success() {
            return Err(format!("{cc}: {}", String::from_utf8_lossy(&out.stderr)));
        }
    }
    assert!(compiled > 0, "no C compiler");
    Ok(())
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn a_hostile_model_path_never_changes_what_the_header_compiles_to() {
    let scratch = tempfile::tempdir().unwrap();
    // Each would, written as it is into the header's comment, end the
    // comment, start a preprocessor line, splice a line or form a trigraph.
    let names = [
        "ends*/the comment/m.tflite",
        "nl\n#define kTensorArenaSize 1\n#error pwned\n/m.tflite",
        "splice\\\n#error spliced\n/m.tflite",
        "tri??/\n#error trigraph\n/m.tflite",
        "opens /* a comment/m.tflite",
        "cr\r#error cr\r/m\u{7f}\u{202e}.tflite",
    ];
    for (i, name) in names.iter().enumerate() {
        let dir = scratch.path().join(format!("case-{i}"));
        let model = hostile_copy(&dir, name);
        let out = dir.join("planned.tflite");
        let args: Vec<String> = [
            "plan",
            path_str(&model),
            "--emit-offline",
            path_str(&out),
            "--format",
            "json",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let ended = gated_memtrace(scratch.path(), &args, |_| {}, LIMIT);
        assert_eq!(ended.code(), Some(0), "{name:?}: {}", ended.stderr);
        let report: Value = serde_json::from_slice(&ended.stdout).unwrap();
        let arena = report["arena_to_allocate"]["arena"]["bytes"]
            .as_u64()
            .unwrap_or_else(|| panic!("{report}"));
        // The values from outside the header: the report's arena, the
        // written model's size.
        let size = std::fs::metadata(&out).unwrap().len();
        let checks = format!(
            "_Static_assert(kTensorArenaSize == {arena}u, \"arena\");\n\
             _Static_assert(kModelSize == {size}u, \"size\");\n\
             _Static_assert(sizeof(kModel) == {size}u, \"bytes\");\n\
             _Static_assert(kModelOpCount == 1, \"ops\");\n"
        );
        let checks =
            format!("#ifdef __cplusplus\n#define _Static_assert static_assert\n#endif\n{checks}");
        let header = dir.join("planned.h");
        if let Err(e) = compile_with_header(&header, &checks) {
            panic!(
                "{name:?}: {e}\n{}",
                &std::fs::read_to_string(&header).unwrap()[..1500]
            );
        }
    }
}

#[test]
#[cfg_attr(no_tflm, ignore = "TFLM runners not built: set TFLM_TREE")]
fn a_runner_with_a_non_utf8_hostile_name_is_named_harmlessly_in_the_header() {
    use std::os::unix::ffi::OsStrExt;
    let scratch = tempfile::tempdir().unwrap();
    let runner = common::guest("cortex-m4", "tflm-runner");
    let name = std::ffi::OsStr::from_bytes(b"r\xff*/\n#define kModelSize 1\n\xfe.elf");
    // `*/` ends a folder's name: the runner sits in a folder `r\xff*`.
    let hostile = scratch.path().join(name);
    std::fs::create_dir_all(hostile.parent().unwrap()).unwrap();
    std::fs::copy(&runner, &hostile).unwrap();
    let model = common::shared_model("tflm_hello_world_int8.tflite");
    let out = scratch.path().join("proven.tflite");
    let ended = Command::new(env!("CARGO_BIN_EXE_memtrace"))
        .arg("verify")
        .arg(&model)
        .arg("--no-oracle")
        .arg("--runner")
        .arg(&hostile)
        .arg("--emit-offline")
        .arg(&out)
        .env("CI", "1")
        .env("MEMTRACE_CACHE_DIR", scratch.path().join("cache"))
        .output()
        .unwrap();
    assert_eq!(
        ended.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ended.stderr)
    );
    let size = std::fs::metadata(&out).unwrap().len();
    let checks = format!(
        "#ifdef __cplusplus\n#define _Static_assert static_assert\n#endif\n\
         _Static_assert(kModelSize == {size}u, \"size\");\n"
    );
    let header = scratch.path().join("proven.h");
    let text = std::fs::read_to_string(&header).expect("the header is ASCII text");
    assert!(text.is_ascii());
    if let Err(e) = compile_with_header(&header, &checks) {
        panic!("{e}\n{}", &text[..1500]);
    }
}
