//! A bounded, deterministic, seeded mutation campaign:
//! the ELF loader, the `.tflite` importer, the `--job` spec parser and the
//! plan / baseline JSON readers, fed mutants of real inputs (the harness
//! ELFs, the tfmicro crate's models, zoo exports, canonical specs, a plan and
//! a baseline written by memtrace itself).
//!
//! In-process targets run under `catch_unwind` and must never panic; a few
//! hundred mutants go through the real binary, which must exit 0 or 1 (never
//! 101, an abort or another signal), within its time limit, and leave no
//! file behind. Each target prints its counts and asserts panics = timeouts
//! = signals = 0.
//!
//! Four classes run through the binary, each with a rule
//! beyond "exit 0 or 1": `verify --plan` files mutated from `plan`'s own
//! placements, judged by a live-overlap oracle written here (a placement
//! that overlaps two tensors live at once, neither the other's same-operator
//! input/output, must never verify OK); TinySeg's options, which without
//! `--planner tinyseg` must be usage errors (exit 2); `--kernels` /
//! `--runner` / `--runtime` combinations (a runner built with another
//! library is refused, an accepted report names the library that ran); and
//! every plan `plan --kernels K` prints, verified clean on K.
//!
//! Every input that ever failed is kept under `fixtures/fuzz/<target>/`
//! (text inputs as they are, binary mutants as a small JSON recipe of edits
//! to a named seed) and is run first. A failing run writes its inputs there;
//! commit them with the fix. `MEMTRACE_FUZZ_SEED` replaces the campaign's
//! seed and `MEMTRACE_FUZZ_SCALE` multiplies the number of inputs (for
//! exploration; the defaults keep `make test` deterministic and short).

mod common;

use std::cell::RefCell;
use std::collections::HashMap;
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

use memtrace_abi::spec::{Dtype, LayerSpec, OpKind};
use memtrace_driver::verify::placement_from_plan;
use memtrace_model::export::{materialize, to_tflite};
use memtrace_model::planner::{self, Overlaps, PlanOptions, PlannerKind};
use memtrace_model::{tflite, zoo, Model};
use memtrace_overlap::configs::{estimated_instructions, try_random_configs};
use memtrace_overlap::rng::Rng;
use memtrace_tracer::ElfImage;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The campaign's default seed.
const SEED: u64 = 0x6d65_6d74_7261_6365;
/// An in-process call slower than this counts as a timeout.
const IN_PROCESS_LIMIT: Duration = Duration::from_secs(5);
/// A binary run is killed (and counted as a timeout) after this.
const BINARY_LIMIT: Duration = Duration::from_secs(30);
/// Text fixtures larger than this are not kept (binary mutants are kept as
/// recipes, which are always small).
const MAX_FIXTURE: usize = 64 << 10;

fn seed(salt: u64) -> Rng {
    let base = std::env::var("MEMTRACE_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SEED);
    Rng::new(base ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// `MEMTRACE_FUZZ_SCALE` multiplies the number of generated inputs (for
/// exploration; 1 in `make test`).
fn scaled(n: usize) -> usize {
    let k: usize = std::env::var("MEMTRACE_FUZZ_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    n * k.max(1)
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

// ---------------------------------------------------------------- tallies

/// Outcome counts of one target.
#[derive(Clone, Default, Debug)]
struct Tally {
    inputs: usize,
    accepted: usize,
    clean_errors: usize,
    panics: usize,
    timeouts: usize,
    signals: usize,
    /// Exit codes other than 0, 1 (101 is counted as a panic).
    bad_exits: usize,
    /// Left files behind.
    leftovers: usize,
    replayed: usize,
    /// Exit 2 where a usage error is a clean outcome (argument combinations).
    usage_errors: usize,
    /// Inputs the live-overlap oracle (or another rule of the input's class)
    /// says must be refused.
    must_refuse: usize,
    /// Runs that broke their class's rule: accepted although the oracle said
    /// it must be refused, not a usage error though an option does nothing,
    /// a report naming a library whose code did not run.
    oracle_violations: usize,
    /// Plans `memtrace plan` made for a library, verified on that library.
    own_plans: usize,
    /// ... of which did not verify clean and bit-exact.
    own_clobbers: usize,
    failures: Vec<String>,
}

impl Tally {
    fn merge(&mut self, o: Tally) {
        self.inputs += o.inputs;
        self.accepted += o.accepted;
        self.clean_errors += o.clean_errors;
        self.panics += o.panics;
        self.timeouts += o.timeouts;
        self.signals += o.signals;
        self.bad_exits += o.bad_exits;
        self.leftovers += o.leftovers;
        self.replayed += o.replayed;
        self.usage_errors += o.usage_errors;
        self.must_refuse += o.must_refuse;
        self.oracle_violations += o.oracle_violations;
        self.own_plans += o.own_plans;
        self.own_clobbers += o.own_clobbers;
        self.failures.extend(o.failures);
    }

    fn finish(&self, target: &str, started: Instant) {
        println!(
            "fuzz {target}: {} inputs ({} fixtures replayed), {} accepted, {} clean errors, \
             {} usage errors, {} oracle violations ({} judged unsafe), {} of {} own-library \
             plans clobber, {} panics, {} timeouts, {} signals, {} bad exits, {} left files, \
             {:.1} s",
            self.inputs,
            self.replayed,
            self.accepted,
            self.clean_errors,
            self.usage_errors,
            self.oracle_violations,
            self.must_refuse,
            self.own_clobbers,
            self.own_plans,
            self.panics,
            self.timeouts,
            self.signals,
            self.bad_exits,
            self.leftovers,
            started.elapsed().as_secs_f64()
        );
        for f in self.failures.iter().take(20) {
            println!("  FAILURE {f}");
        }
        assert_eq!(
            (
                self.panics,
                self.timeouts,
                self.signals,
                self.bad_exits,
                self.leftovers,
                self.oracle_violations,
                self.own_clobbers
            ),
            (0, 0, 0, 0, 0, 0, 0),
            "fuzz {target}: failures (inputs kept under fixtures/fuzz/<target>/)"
        );
        assert_eq!(
            self.inputs,
            self.accepted + self.clean_errors + self.usage_errors
        );
    }
}

// ------------------------------------------------------------ in-process

thread_local! {
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Panics inside the campaign are recorded, not printed (other panics, such
/// as a failing assertion, still print).
fn quiet_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let fuzzing = LAST_PANIC.with(|p| p.borrow().as_deref() == Some(""));
            if fuzzing {
                let msg = format!("{info}");
                LAST_PANIC.with(|p| *p.borrow_mut() = Some(msg));
            } else {
                default(info);
            }
        }));
    });
}

/// Runs `f` (Ok = accepted, Err = clean error) and counts what happened.
fn in_process(tally: &mut Tally, what: &str, f: impl FnOnce() -> Result<(), String>) -> bool {
    quiet_panics();
    tally.inputs += 1;
    LAST_PANIC.with(|p| *p.borrow_mut() = Some(String::new()));
    let started = Instant::now();
    let r = catch_unwind(AssertUnwindSafe(f));
    let msg = LAST_PANIC.with(|p| p.borrow_mut().take());
    let mut ok = true;
    match r {
        Ok(Ok(())) => tally.accepted += 1,
        Ok(Err(e)) => {
            tally.clean_errors += 1;
            if e.trim().is_empty() {
                tally
                    .failures
                    .push(format!("{what}: an empty error message"));
                tally.panics += 1;
                ok = false;
            }
        }
        Err(_) => {
            tally.panics += 1;
            tally
                .failures
                .push(format!("{what}: panic: {}", msg.unwrap_or_default()));
            ok = false;
        }
    }
    if started.elapsed() > IN_PROCESS_LIMIT {
        tally.timeouts += 1;
        tally
            .failures
            .push(format!("{what}: took {:?}", started.elapsed()));
        ok = false;
    }
    ok
}

// ------------------------------------------------------- binary mutants

/// One edit of a seed's bytes.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Edit {
    Put { at: usize, hex: String },
    Insert { at: usize, hex: String },
    Delete { at: usize, len: usize },
    Truncate { len: usize },
}

/// A binary mutant: edits to a named seed (what `fixtures/fuzz/` keeps).
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Recipe {
    seed: String,
    edits: Vec<Edit>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .filter_map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok())
        .collect()
}

fn apply(seed: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for e in edits {
        match e {
            Edit::Put { at, hex } => {
                for (i, v) in unhex(hex).into_iter().enumerate() {
                    if let Some(x) = b.get_mut(at + i) {
                        *x = v;
                    }
                }
            }
            Edit::Insert { at, hex } => {
                let at = (*at).min(b.len());
                b.splice(at..at, unhex(hex));
            }
            Edit::Delete { at, len } => {
                let at = (*at).min(b.len());
                let end = (at + len).min(b.len());
                b.drain(at..end);
            }
            Edit::Truncate { len } => b.truncate(*len),
        }
    }
    b
}

/// Values that break size arithmetic, little-endian in `width` bytes.
fn interesting(rng: &mut Rng, width: usize) -> Vec<u8> {
    let random = rng.next_u64();
    let v: u64 = match width {
        1 => rng.weighted(&[(1, 0u64), (1, 1), (1, 0x7f), (1, 0x80), (1, 0xff)]),
        2 => rng.weighted(&[(1, 0u64), (1, 0xffff), (1, 0x8000), (1, 0x7fff), (1, 1)]),
        4 => rng.weighted(&[
            (2, 0u64),
            (1, 1),
            (2, 0xffff_ffff),
            (2, 0x8000_0000),
            (2, 0x7fff_ffff),
            (1, 0xffff_fff0),
            (1, 0x10000),
            (2, random & 0xffff_ffff),
        ]),
        _ => rng.weighted(&[
            (2, 0u64),
            (2, u64::MAX),
            (1, 1 << 63),
            (1, 1 << 51),
            (1, 1 << 32),
            (1, 0x7fff_ffff_ffff_ffff),
            (1, 0x8000_0000_0000),
            (2, random),
        ]),
    };
    v.to_le_bytes()[..width].to_vec()
}

/// 1–4 random edits of `base`, mostly inside `hot` ranges.
fn mutate(rng: &mut Rng, base: &[u8], hot: &[(usize, usize)]) -> Vec<Edit> {
    let len = base.len();
    let n = rng.range(1, 4);
    let mut edits = Vec::new();
    for _ in 0..n {
        let at = if !hot.is_empty() && rng.chance(70) {
            let (a, b) = hot[rng.range(0, hot.len() as u32 - 1) as usize];
            a + (rng.next_u64() as usize) % (b - a).max(1)
        } else {
            (rng.next_u64() as usize) % len.max(1)
        };
        let e = match rng.range(0, 9) {
            0..=2 => {
                let width = rng.weighted(&[(1, 1usize), (1, 2), (3, 4), (2, 8)]);
                Edit::Put {
                    at,
                    hex: hex(&interesting(rng, width)),
                }
            }
            3..=5 => Edit::Put {
                at,
                hex: hex(&[(rng.next_u64() & 0xff) as u8]),
            },
            6 => Edit::Insert {
                at,
                hex: hex(&(0..rng.range(1, 16))
                    .map(|_| rng.next_u64() as u8)
                    .collect::<Vec<_>>()),
            },
            7 => Edit::Delete {
                at,
                len: rng.range(1, 64) as usize,
            },
            8 => Edit::Truncate {
                len: (rng.next_u64() as usize) % len.max(1),
            },
            _ => {
                // Flip one bit of the seed's byte.
                let bit = 1u8 << rng.range(0, 7);
                Edit::Put {
                    at,
                    hex: hex(&[base.get(at).copied().unwrap_or(0) ^ bit]),
                }
            }
        };
        edits.push(e);
    }
    edits
}

// --------------------------------------------------------------- seeds

/// Named binary seeds: the harness ELFs.
fn elf_seeds() -> Vec<(String, Vec<u8>)> {
    let mut v = Vec::new();
    for target in ["cortex-m4", "x86_64"] {
        for name in ["suite", "suite-cmsis", "bad-protocol"] {
            let path = common::guest(target, name);
            v.push((
                format!("elf:{target}/{name}.elf"),
                std::fs::read(path).unwrap(),
            ));
        }
    }
    v
}

/// ELF header, program headers and section headers: where sizes live.
fn elf_hot(b: &[u8]) -> Vec<(usize, usize)> {
    let rd = |at: usize, n: usize| {
        (0..n).rev().fold(0usize, |v, i| {
            (v << 8) | *b.get(at + i).unwrap_or(&0) as usize
        })
    };
    let (ph, phe, phn, sh, she, shn) = if b.get(4) == Some(&2) {
        (
            rd(0x20, 8),
            rd(0x36, 2),
            rd(0x38, 2),
            rd(0x28, 8),
            rd(0x3a, 2),
            rd(0x3c, 2),
        )
    } else {
        (
            rd(0x1c, 4),
            rd(0x2a, 2),
            rd(0x2c, 2),
            rd(0x20, 4),
            rd(0x2e, 2),
            rd(0x30, 2),
        )
    };
    vec![(0, 64), (ph, ph + phe * phn), (sh, sh + she * shn)]
}

/// Named `.tflite` seeds: tfmicro's small models and zoo exports.
fn tflite_seeds() -> Vec<(String, Vec<u8>)> {
    let mut v = Vec::new();
    for name in ["hello_world", "micro_speech", "magic_wand"] {
        v.push((
            format!("tflite:{name}"),
            std::fs::read(common::tfmicro_model(name)).unwrap(),
        ));
    }
    let sakr = materialize(&zoo::build("sakr_cifar10").unwrap(), 1);
    v.push(("tflite:zoo:sakr_cifar10".into(), to_tflite(&sakr).unwrap()));
    v
}

fn seed_bytes<'a>(seeds: &'a [(String, Vec<u8>)], name: &str) -> Option<&'a [u8]> {
    seeds
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, b)| b.as_slice())
}

/// Canonical and hand-written spec texts.
fn spec_seeds() -> Vec<String> {
    let mut v: Vec<String> = vec![
        common::TABLE_ONE.into(),
        "op=conv2d,dtype=int8,input=1x9x7x3,filter=5x3x3x3,stride=2x1,padding=valid,activation=relu6"
            .into(),
        "op=depthwise_conv2d,input=1x5x5x2,filter=1x3x3x4".into(),
        "op=max_pool,input=1x8x8x4,filter=3x3".into(),
        "op=matmul,dtype=f32,input=16x12,filter=12x16".into(),
        "op=fully_connected,input=1x1x3x32,filter=10x32".into(),
        "op=relu,dtype=f32,input=1x16x16x8".into(),
        "op=add,input=2x3x4x5,activation=relu".into(),
    ];
    for op in OpKind::SUITE {
        for dtype in [Dtype::Float32, Dtype::Int8] {
            if let Ok(c) = try_random_configs(op, dtype, 2, 5, 3_000_000) {
                v.extend(c.iter().map(|s| s.to_string()));
            }
        }
    }
    v
}

// ------------------------------------------------------------- fixtures

fn fixture_dir(target: &str) -> PathBuf {
    repo().join("fixtures/fuzz").join(target)
}

fn fnv(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// Keeps a failing input (text or recipe) for the next runs.
fn keep(target: &str, ext: &str, content: &[u8]) {
    if content.len() > MAX_FIXTURE {
        return;
    }
    let dir = fixture_dir(target);
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(dir.join(format!("{}.{ext}", fnv(content))), content);
}

/// Kept inputs of `target` with extension `ext`, sorted by name.
fn kept(target: &str, ext: &str) -> Vec<Vec<u8>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(fixture_dir(target))
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == ext))
                .collect()
        })
        .unwrap_or_default();
    paths.sort();
    paths.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

fn kept_recipes(target: &str) -> Vec<Recipe> {
    kept(target, "json")
        .iter()
        .filter_map(|b| serde_json::from_slice(b).ok())
        .collect()
}

// ---------------------------------------------------------- text mutants

const NUMBERS: [&str; 14] = [
    "0",
    "1",
    "-1",
    "2147483647",
    "2147483648",
    "4294967295",
    "4294967296",
    "18446744073709551615",
    "99999999999999999999999",
    "",
    "1e9",
    "0x10",
    " 7 ",
    "65536",
];

/// A mutant of a `key=value,...` spec text.
fn mutate_spec(rng: &mut Rng, text: &str) -> String {
    let mut items: Vec<String> = text.split(',').map(str::to_owned).collect();
    for _ in 0..rng.range(1, 3) {
        let i = rng.range(0, items.len() as u32 - 1) as usize;
        match rng.range(0, 9) {
            0 | 1 => {
                // A number (or any field) inside the item.
                let mut segs: Vec<String> = Vec::new();
                let mut cur = String::new();
                for c in items[i].chars() {
                    if c == '=' || c == 'x' {
                        segs.push(std::mem::take(&mut cur));
                        segs.push(c.to_string());
                    } else {
                        cur.push(c);
                    }
                }
                segs.push(cur);
                let pick = 2 * rng.range(0, (segs.len() as u32 - 1) / 2) as usize;
                segs[pick] = NUMBERS[rng.range(0, NUMBERS.len() as u32 - 1) as usize].into();
                items[i] = segs.concat();
            }
            2 => items.push(items[i].clone()),
            3 => {
                if items.len() > 1 {
                    items.remove(i);
                }
            }
            4 => {
                let keys = [
                    "op",
                    "dtype",
                    "input",
                    "filter",
                    "stride",
                    "dilation",
                    "padding",
                    "depth_multiplier",
                    "activation",
                    "output",
                    "pad",
                ];
                let value = items[i].split_once('=').map_or("", |(_, v)| v).to_owned();
                let key = keys[rng.range(0, keys.len() as u32 - 1) as usize];
                items[i] = format!("{key}={value}");
            }
            5 => items[i] = items[i].replace('x', ["xx", "X", "x0x", ""][rng.range(0, 3) as usize]),
            6 => {
                let junk = ["é", "\u{0}", "ｘ", "=", ",", "  ", "\n", "op=relu", "🦀"];
                let at = rng.range(0, items[i].len() as u32) as usize;
                let at = (0..=at)
                    .rev()
                    .find(|&a| items[i].is_char_boundary(a))
                    .unwrap_or(0);
                items[i].insert_str(at, junk[rng.range(0, junk.len() as u32 - 1) as usize]);
            }
            7 => {
                let dims = rng.range(0, 6);
                let shape: Vec<String> = (0..dims)
                    .map(|_| NUMBERS[rng.range(0, 8) as usize].to_owned())
                    .collect();
                let key = ["input", "filter", "output"][rng.range(0, 2) as usize];
                items.push(format!("{key}={}", shape.join("x")));
            }
            8 => {
                let cut = rng.range(0, items[i].len() as u32) as usize;
                let cut = (0..=cut)
                    .rev()
                    .find(|&a| items[i].is_char_boundary(a))
                    .unwrap_or(0);
                items[i].truncate(cut);
            }
            _ => {
                let j = rng.range(0, items.len() as u32 - 1) as usize;
                items.swap(i, j)
            }
        }
    }
    items.join(",")
}

/// A mutant of a JSON document: a value replaced, a key dropped, or the
/// text cut or garbled.
fn mutate_json(rng: &mut Rng, text: &str) -> String {
    if rng.chance(25) {
        let mut b = text.as_bytes().to_vec();
        match rng.range(0, 2) {
            0 => b.truncate((rng.next_u64() as usize) % b.len().max(1)),
            1 => {
                let at = (rng.next_u64() as usize) % b.len().max(1);
                b[at] = b"{}[]\",:-09ex \\"[rng.range(0, 13) as usize];
            }
            _ => {
                let at = (rng.next_u64() as usize) % b.len().max(1);
                b.splice(
                    at..at,
                    "[[[[[[[[[[".repeat(rng.range(1, 30) as usize).into_bytes(),
                );
            }
        }
        return String::from_utf8_lossy(&b).into_owned();
    }
    let mut v: Value = serde_json::from_str(text).unwrap();
    for _ in 0..rng.range(1, 3) {
        // Collect paths to every node, pick one.
        let mut paths: Vec<Vec<PathStep>> = Vec::new();
        collect_paths(&v, &mut Vec::new(), &mut paths);
        let p = &paths[rng.range(0, paths.len() as u32 - 1) as usize];
        let replacement = match rng.range(0, 11) {
            0 => serde_json::json!(u64::MAX),
            1 => serde_json::json!(-1),
            2 => serde_json::json!(1e308),
            3 => serde_json::json!(0),
            4 => serde_json::json!(9_007_199_254_740_993u64),
            5 => serde_json::json!(""),
            6 => Value::String("x".repeat(10_000)),
            7 => Value::Null,
            8 => serde_json::json!([]),
            9 => serde_json::json!({}),
            10 => serde_json::json!(2147483648u64),
            _ => Value::String("op=conv2d,input=1x4294967295x2x1,filter=1x1x1x1".into()),
        };
        if rng.chance(15) {
            remove_at(&mut v, p);
        } else if let Some(slot) = node_at(&mut v, p) {
            *slot = replacement;
        }
    }
    if rng.chance(10) {
        if let Some(rows) = v.get_mut("rows").and_then(Value::as_array_mut) {
            let copy = rows.clone();
            rows.extend(copy);
        }
    }
    serde_json::to_string(&v).unwrap()
}

#[derive(Clone, Debug)]
enum PathStep {
    Key(String),
    Index(usize),
}

fn collect_paths(v: &Value, at: &mut Vec<PathStep>, out: &mut Vec<Vec<PathStep>>) {
    out.push(at.clone());
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                at.push(PathStep::Key(k.clone()));
                collect_paths(x, at, out);
                at.pop();
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                at.push(PathStep::Index(i));
                collect_paths(x, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

fn node_at<'a>(v: &'a mut Value, path: &[PathStep]) -> Option<&'a mut Value> {
    let mut cur = v;
    for s in path {
        cur = match s {
            PathStep::Key(k) => cur.get_mut(k)?,
            PathStep::Index(i) => cur.get_mut(*i)?,
        };
    }
    Some(cur)
}

fn remove_at(v: &mut Value, path: &[PathStep]) {
    let Some((last, parent)) = path.split_last() else {
        return;
    };
    if let Some(p) = node_at(v, parent) {
        match (p, last) {
            (Value::Object(m), PathStep::Key(k)) => {
                m.remove(k);
            }
            (Value::Array(a), PathStep::Index(i)) if *i < a.len() => {
                a.remove(*i);
            }
            _ => {}
        }
    }
}

// -------------------------------------------------- in-process targets

fn elf_target(name: &str, bytes: Vec<u8>) -> Result<(), String> {
    let image = ElfImage::parse(Path::new(name), bytes.into()).map_err(|e| e.to_string())?;
    let _ = image.protocol_port();
    let _ = image.function_at(image.entry);
    let _ = image.is_loaded(image.entry, u64::MAX);
    let _ = image.is_executable(u64::MAX - 1, u64::MAX);
    for s in [
        "memtrace_port",
        "memtrace_job",
        "memtrace_arena",
        "memtrace_signal",
    ] {
        if let Some(sym) = image.symbol(s) {
            let _ = image.is_loaded(sym.address, sym.size);
            let _ = image.is_executable(sym.address, sym.size);
            let _ = image.function_at(sym.address);
        }
    }
    Ok(())
}

/// Import, then what `plan` and `verify` do with an imported model before
/// the emulator: validate, layer specs, two planners, the offline plan
/// written into the model.
fn tflite_target(bytes: &[u8]) -> Result<(), String> {
    let model = tflite::import_bytes("fuzz", bytes).map_err(|e| e.to_string())?;
    model.validate().map_err(|e| e.to_string())?;
    let _ = tflite::read_offline(bytes);
    for op in 0..model.ops.len() {
        if let Some(spec) = model.layer_spec(op) {
            assert_eq!(LayerSpec::parse(&spec.to_string()).as_ref(), Ok(&spec));
        }
    }
    let plan = planner::run(
        &model,
        PlannerKind::TflmGreedy,
        &Overlaps::none(&model),
        &PlanOptions::default(),
    )
    .map_err(|e| e.to_string())?;
    let _ = planner::run(
        &model,
        PlannerKind::DmoHeap,
        &Overlaps::none(&model),
        &PlanOptions::default(),
    );
    let mut offsets = vec![None; model.tensors.len()];
    for t in &plan.tensors {
        offsets[t.tensor] = Some(t.offset);
    }
    tflite::emit_offline(bytes, &offline_offsets(&offsets)).map_err(|e| e.to_string())?;
    Ok(())
}

/// Offsets as `OfflineMemoryAllocation` holds them (-1: TFLM places it).
fn offline_offsets(offsets: &[Option<u64>]) -> Vec<i64> {
    offsets
        .iter()
        .map(|o| o.and_then(|v| i64::try_from(v).ok()).unwrap_or(-1))
        .collect()
}

fn spec_target(text: &str) -> Result<(), String> {
    let spec = LayerSpec::parse(text).map_err(|e| e.to_string())?;
    let again = LayerSpec::parse(&spec.to_string()).map_err(|e| format!("round trip: {e}"))?;
    assert_eq!(
        again, spec,
        "canonical text of `{text}` parses back differently"
    );
    let _ = spec.job_words(1);
    let _ = estimated_instructions(&spec);
    let _ = (spec.input_bytes(), spec.output_bytes());
    Ok(())
}

/// What `verify --plan` does with a plan file, up to the emulator: names to
/// tensors, offsets over the reference placement, the arena, the offline
/// plan written into the model's bytes.
fn plan_target(
    bytes: &[u8],
    model: &Model,
    reference: &[Option<u64>],
    text: &str,
) -> Result<(), String> {
    let (offsets, _arena) =
        placement_from_plan(model, reference, text).map_err(|e| e.to_string())?;
    tflite::emit_offline(bytes, &offline_offsets(&offsets)).map_err(|e| e.to_string())?;
    Ok(())
}

#[test]
fn fuzz_elf_loader_in_process() {
    let started = Instant::now();
    let seeds = elf_seeds();
    let mut t = Tally::default();
    let run = |t: &mut Tally, r: &Recipe| {
        let Some(base) = seed_bytes(&seeds, &r.seed) else {
            return;
        };
        let bytes = apply(base, &r.edits);
        if !in_process(t, &r.seed, || elf_target(&r.seed, bytes)) {
            keep("elf", "json", &serde_json::to_vec(r).unwrap());
        }
    };
    for r in kept_recipes("elf") {
        t.replayed += 1;
        run(&mut t, &r);
    }
    let mut rng = seed(1);
    for i in 0..scaled(1200) {
        let (name, base) = &seeds[i % seeds.len()];
        let r = Recipe {
            seed: name.clone(),
            edits: mutate(&mut rng, base, &elf_hot(base)),
        };
        run(&mut t, &r);
    }
    // The unmutated seeds load.
    for (name, base) in &seeds {
        elf_target(name, base.clone()).unwrap();
    }
    t.finish("elf", started);
}

#[test]
fn fuzz_tflite_importer_in_process() {
    let started = Instant::now();
    let seeds = tflite_seeds();
    let mut t = Tally::default();
    let run = |t: &mut Tally, r: &Recipe| {
        let Some(base) = seed_bytes(&seeds, &r.seed) else {
            return;
        };
        let bytes = apply(base, &r.edits);
        if !in_process(t, &r.seed, || tflite_target(&bytes)) {
            keep("tflite", "json", &serde_json::to_vec(r).unwrap());
        }
    };
    for r in kept_recipes("tflite") {
        t.replayed += 1;
        run(&mut t, &r);
    }
    let mut rng = seed(2);
    for i in 0..scaled(1200) {
        let (name, base) = &seeds[i % seeds.len()];
        let hot = [
            (0, 512.min(base.len())),
            (base.len().saturating_sub(2048), base.len()),
        ];
        let r = Recipe {
            seed: name.clone(),
            edits: mutate(&mut rng, base, &hot),
        };
        run(&mut t, &r);
    }
    for (_, base) in &seeds {
        tflite_target(base).unwrap();
    }
    t.finish("tflite", started);
}

#[test]
fn fuzz_job_spec_parser_in_process() {
    let started = Instant::now();
    let seeds = spec_seeds();
    let mut t = Tally::default();
    let run = |t: &mut Tally, text: &str| {
        if !in_process(t, "spec", || spec_target(text)) {
            keep("spec", "txt", text.as_bytes());
        }
    };
    for b in kept("spec", "txt") {
        t.replayed += 1;
        run(&mut t, &String::from_utf8_lossy(&b));
    }
    let mut rng = seed(3);
    for i in 0..scaled(3000) {
        let mut text = seeds[i % seeds.len()].clone();
        for _ in 0..rng.range(1, 3) {
            text = mutate_spec(&mut rng, &text);
        }
        run(&mut t, &text);
    }
    for s in &seeds {
        spec_target(s).unwrap();
    }
    t.finish("spec", started);
}

#[test]
fn fuzz_plan_json_in_process() {
    let started = Instant::now();
    let bytes = std::fs::read(common::tfmicro_model("magic_wand")).unwrap();
    let model = tflite::import_bytes("magic_wand", &bytes).unwrap();
    let plan = planner::run(
        &model,
        PlannerKind::TflmGreedy,
        &Overlaps::none(&model),
        &PlanOptions::default(),
    )
    .unwrap();
    let names = model.tensor_names();
    let mut reference = vec![None; model.tensors.len()];
    for p in &plan.tensors {
        reference[p.tensor] = Some(p.offset);
    }
    let seed_plan = serde_json::json!({
        "tensors": plan.tensors.iter().map(|p| serde_json::json!({
            "name": names[p.tensor], "offset": p.offset})).collect::<Vec<_>>(),
        "arena_bytes": plan.peak_bytes,
    })
    .to_string();
    plan_target(&bytes, &model, &reference, &seed_plan).unwrap();
    let mut t = Tally::default();
    let run = |t: &mut Tally, text: &str| {
        if !in_process(t, "plan", || plan_target(&bytes, &model, &reference, text)) {
            keep("plan", "json", text.as_bytes());
        }
    };
    for b in kept("plan", "json") {
        t.replayed += 1;
        run(&mut t, &String::from_utf8_lossy(&b));
    }
    let mut rng = seed(4);
    for _ in 0..scaled(800) {
        let text = mutate_json(&mut rng, &seed_plan);
        run(&mut t, &text);
    }
    t.finish("plan", started);
}

// --------------------------------------------------- through the binary

/// One binary run: files to create in a fresh directory and the arguments.
struct Job {
    target: &'static str,
    /// (file name, bytes)
    files: Vec<(String, Vec<u8>)>,
    args: Vec<String>,
    /// What to keep under fixtures/fuzz/<target>/ if it fails.
    keep: (&'static str, Vec<u8>),
    /// What the run must do beyond exiting 0 or 1.
    expect: Expect,
}

/// The rule of an input's class, beyond "exit 0 or 1, in time, no file
/// left". The default is that rule alone.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    /// Exit 2 (clap's usage error) is a clean outcome too.
    #[serde(default)]
    usage_ok: bool,
    /// Must exit 2, because of this (an option that would do nothing).
    #[serde(default)]
    usage: Option<String>,
    /// Must not exit 0, because of this (the live-overlap oracle's reason).
    #[serde(default)]
    refuse: Option<String>,
    /// Must exit 0 with a JSON report of no clobbers and bit-exact outputs.
    #[serde(default)]
    verifies: bool,
    /// On exit 0, the JSON report's `"kernels"` must be this library.
    #[serde(default)]
    kernels: Option<String>,
}

fn run_job(job: &Job, n: usize) -> Tally {
    let mut t = Tally {
        inputs: 1,
        ..Tally::default()
    };
    let dir = std::env::temp_dir().join(format!("memtrace-fuzz-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for (name, bytes) in &job.files {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_memtrace"))
        .args(&job.args)
        .current_dir(&dir)
        .env("CI", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("memtrace starts");
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let mut stdout = child.stdout.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = stdout.read_to_end(&mut b);
        b
    });
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if started.elapsed() > BINARY_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let err = reader.join().unwrap_or_default();
    let err: String = err.trim().chars().take(400).collect();
    let out = out_reader.join().unwrap_or_default();
    let what = format!("{} {:?}", job.target, job.args);
    let mut failed = true;
    let expect = &job.expect;
    if expect.refuse.is_some() {
        t.must_refuse += 1;
    }
    if expect.verifies {
        t.own_plans += 1;
    }
    match status {
        None => {
            t.timeouts += 1;
            t.failures
                .push(format!("{what}: still running after {BINARY_LIMIT:?}"));
        }
        Some(s) => match (s.code(), s.signal()) {
            (Some(0), _) => {
                t.accepted += 1;
                failed = false;
            }
            // An error, or a verdict (verify FAILED, regress SHRANK).
            (Some(1), _) => {
                t.clean_errors += 1;
                failed = false;
            }
            (Some(2), _) if expect.usage_ok || expect.usage.is_some() => {
                t.usage_errors += 1;
                failed = false;
            }
            (Some(101), _) => {
                t.panics += 1;
                t.failures.push(format!("{what}: panic: {err}"));
            }
            (Some(c), _) => {
                t.bad_exits += 1;
                t.failures.push(format!("{what}: exit {c}: {err}"));
            }
            (None, sig) => {
                t.signals += 1;
                t.failures.push(format!("{what}: signal {sig:?}: {err}"));
            }
        },
    }
    let code = status.and_then(|s| s.code());
    if let (Some(why), Some(c)) = (&expect.usage, code) {
        if c != 2 {
            t.oracle_violations += 1;
            t.failures.push(format!(
                "{what}: exit {c}, not a usage error ({why}): {err}"
            ));
            failed = true;
        }
    }
    if let (Some(why), Some(0)) = (&expect.refuse, code) {
        t.oracle_violations += 1;
        t.failures.push(format!("{what}: accepted, although {why}"));
        failed = true;
    }
    let report: Option<Value> = serde_json::from_slice(&out).ok();
    if let (Some(k), Some(0)) = (&expect.kernels, code) {
        let said = report.as_ref().map(|r| r["kernels"].clone());
        if said.as_ref().and_then(Value::as_str) != Some(k.as_str()) {
            t.oracle_violations += 1;
            t.failures.push(format!(
                "{what}: the report's \"kernels\" is {said:?}, the run was for {k}"
            ));
            failed = true;
        }
    }
    if expect.verifies {
        let clean = code == Some(0)
            && report.as_ref().is_some_and(|r| {
                r["clobbers"].as_array().is_some_and(Vec::is_empty)
                    && r["bit_exact"] == Value::Bool(true)
            });
        if !clean {
            t.own_clobbers += 1;
            let clobbers = report.as_ref().map(|r| r["clobbers"].to_string());
            let clobbers: String = clobbers.unwrap_or_default().chars().take(300).collect();
            t.failures.push(format!(
                "{what}: a plan for its own library does not verify clean \
                 (exit {code:?}, clobbers {clobbers}): {err}"
            ));
            failed = true;
        }
    }
    // Nothing but the inputs is left in the directory.
    let mut left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !job.files.iter().any(|(f, _)| f == n))
        .collect();
    left.sort();
    if !left.is_empty() {
        t.leftovers += 1;
        t.failures.push(format!("{what}: left {left:?}"));
        failed = true;
    }
    if failed {
        keep(job.target, job.keep.0, &job.keep.1);
    }
    let _ = std::fs::remove_dir_all(&dir);
    t
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn fuzz_through_the_binary() {
    let started = Instant::now();
    let suite = common::guest("cortex-m4", "suite");
    let suite_s = suite.display().to_string();
    let elfs = elf_seeds();
    let models = tflite_seeds();
    let hello = std::fs::read(common::tfmicro_model("hello_world")).unwrap();
    let mut jobs: Vec<Job> = Vec::new();

    let elf_job = |r: &Recipe, base: &[u8]| Job {
        target: "elf-bin",
        files: vec![("k.elf".into(), apply(base, &r.edits))],
        // The suites run one small job layer; the others their own layers.
        args: if r.seed.contains("suite") {
            args(&[
                "run",
                "k.elf",
                "--job",
                "op=relu,input=1x4x4x2",
                "--max-instructions",
                "2000000",
            ])
        } else {
            args(&["run", "k.elf", "--max-instructions", "2000000"])
        },
        keep: ("json", serde_json::to_vec(r).unwrap()),
        expect: Expect::default(),
    };
    let model_job = |r: &Recipe, base: &[u8], verify: bool| Job {
        target: if verify { "verify-bin" } else { "plan-bin" },
        files: vec![("m.tflite".into(), apply(base, &r.edits))],
        args: if verify {
            args(&["verify", "m.tflite", "--max-instructions", "100000000"])
        } else {
            args(&["plan", "m.tflite"])
        },
        keep: ("json", serde_json::to_vec(r).unwrap()),
        expect: Expect::default(),
    };
    let spec_job = |text: &str| Job {
        target: "job-bin",
        files: vec![],
        args: vec![
            "run".into(),
            suite_s.clone(),
            "--job".into(),
            text.into(),
            "--max-instructions".into(),
            "5000000".into(),
        ],
        keep: ("txt", text.as_bytes().to_vec()),
        expect: Expect::default(),
    };
    let plan_job = |text: &str| Job {
        target: "plan-json-bin",
        files: vec![
            ("m.tflite".into(), hello.clone()),
            ("p.json".into(), text.as_bytes().to_vec()),
        ],
        args: args(&["verify", "m.tflite", "--plan", "p.json", "--no-oracle"]),
        keep: ("json", text.as_bytes().to_vec()),
        expect: Expect::default(),
    };
    let baseline_job = |text: &str| Job {
        target: "baseline-bin",
        files: vec![("b.json".into(), text.as_bytes().to_vec())],
        args: vec![
            "regress".into(),
            "b.json".into(),
            suite_s.clone(),
            "--max-instructions".into(),
            "5000000".into(),
            "--jobs".into(),
            "1".into(),
        ],
        keep: ("json", text.as_bytes().to_vec()),
        expect: Expect::default(),
    };

    // Kept failures first.
    let mut replayed = 0;
    for r in kept_recipes("elf-bin") {
        if let Some(b) = seed_bytes(&elfs, &r.seed) {
            jobs.push(elf_job(&r, b));
            replayed += 1;
        }
    }
    for (target, verify) in [("plan-bin", false), ("verify-bin", true)] {
        for r in kept_recipes(target) {
            if let Some(b) = seed_bytes(&models, &r.seed) {
                jobs.push(model_job(&r, b, verify));
                replayed += 1;
            }
        }
    }
    for b in kept("job-bin", "txt") {
        jobs.push(spec_job(&String::from_utf8_lossy(&b)));
        replayed += 1;
    }
    for b in kept("plan-json-bin", "json") {
        jobs.push(plan_job(&String::from_utf8_lossy(&b)));
        replayed += 1;
    }
    for b in kept("baseline-bin", "json") {
        jobs.push(baseline_job(&String::from_utf8_lossy(&b)));
        replayed += 1;
    }

    // Seeds written by memtrace itself: a plan of hello_world and a baseline.
    let hello_model = tflite::import_bytes("hello_world", &hello).unwrap();
    let greedy = planner::run(
        &hello_model,
        PlannerKind::TflmGreedy,
        &Overlaps::none(&hello_model),
        &PlanOptions::default(),
    )
    .unwrap();
    let names = hello_model.tensor_names();
    let plan_seed = serde_json::json!({
        "tensors": greedy.tensors.iter().map(|p| serde_json::json!({
            "name": names[p.tensor], "offset": p.offset})).collect::<Vec<_>>(),
        "arena_bytes": greedy.peak_bytes,
    })
    .to_string();
    let base_dir = std::env::temp_dir().join(format!("memtrace-fuzz-base-{}", std::process::id()));
    std::fs::create_dir_all(&base_dir).unwrap();
    let base_path = base_dir.join("base.json");
    let out = common::memtrace([
        "table",
        &suite_s,
        "--out",
        common::path_str(&base_path),
        "--no-builtin",
        "--grid",
        "op=relu,input=1x4x4x{2,3}",
        "--grid",
        "op=max_pool,input=1x6x6x2,filter=2x2,stride=2",
        "--grid",
        "op=depthwise_conv2d,input=1x5x5x2,filter=1x3x3x4",
    ]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let baseline_seed = std::fs::read_to_string(&base_path).unwrap();
    std::fs::remove_dir_all(&base_dir).unwrap();

    let mut rng = seed(5);
    for i in 0..scaled(90) {
        let (name, base) = &elfs[i % elfs.len()];
        let r = Recipe {
            seed: name.clone(),
            edits: mutate(&mut rng, base, &elf_hot(base)),
        };
        jobs.push(elf_job(&r, base));
    }
    for i in 0..scaled(70) {
        let (name, base) = &models[i % models.len()];
        let hot = [
            (0, 512.min(base.len())),
            (base.len().saturating_sub(2048), base.len()),
        ];
        let r = Recipe {
            seed: name.clone(),
            edits: mutate(&mut rng, base, &hot),
        };
        // hello_world and micro_speech run on TFLM (and the host oracle)
        // in about a second.
        let verify = i % 2 == 0 && (name.contains("hello") || name.contains("speech"));
        jobs.push(model_job(&r, base, verify));
    }
    let specs = spec_seeds();
    for i in 0..scaled(60) {
        let mut text = specs[i % specs.len()].clone();
        // (A command line cannot carry a NUL byte.)
        text = mutate_spec(&mut rng, &text).replace('\0', "");
        jobs.push(spec_job(&text));
    }
    for _ in 0..scaled(40) {
        jobs.push(plan_job(&mutate_json(&mut rng, &plan_seed)));
    }
    for _ in 0..scaled(40) {
        jobs.push(baseline_job(&mutate_json(&mut rng, &baseline_seed)));
    }
    // The classes with their own rules: plan files against the live-overlap oracle,
    // TinySeg options, libraries and runners, and every plan `plan` makes
    // for a library verified on it (slow ones first).
    let (mut more, more_replayed) = issue20_jobs(&mut seed(6));
    replayed += more_replayed;
    more.append(&mut jobs);
    let jobs = more;

    // Two workers (the machine has two cores).
    let next = Mutex::new(0usize);
    let total = Mutex::new(Tally::default());
    let by_target: Mutex<HashMap<&'static str, Tally>> = Mutex::new(HashMap::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let i = {
                    let mut n = next.lock().unwrap();
                    let i = *n;
                    *n += 1;
                    i
                };
                let Some(job) = jobs.get(i) else { break };
                let t = run_job(job, i);
                let mut bt = by_target.lock().unwrap();
                let e = bt.entry(job.target).or_default();
                e.merge(t.clone());
                drop(bt);
                total.lock().unwrap().merge(t);
            });
        }
    });
    let mut total = total.into_inner().unwrap();
    total.replayed = replayed;
    let mut targets: Vec<_> = by_target.into_inner().unwrap().into_iter().collect();
    targets.sort_by_key(|(target, _)| *target);
    for (target, t) in targets {
        let mut line = format!(
            "  {target}: {} runs, {} accepted, {} clean errors",
            t.inputs, t.accepted, t.clean_errors
        );
        if t.usage_errors > 0 || t.oracle_violations > 0 {
            line += &format!(", {} usage errors", t.usage_errors);
        }
        if t.must_refuse > 0 {
            line += &format!(", {} judged unsafe by the oracle", t.must_refuse);
        }
        if t.own_plans > 0 {
            line += &format!(
                ", {} of {} plans clobber on their own library",
                t.own_clobbers, t.own_plans
            );
        }
        if t.oracle_violations > 0 {
            line += &format!(", {} ORACLE VIOLATIONS", t.oracle_violations);
        }
        println!("{line}");
    }
    total.finish("binary", started);
}

// ------------------------- the classes with rules of their own, through the binary

/// Small models of `../shared/models/` (each verifies in well under a
/// second): plan files against the oracle, TinySeg options, libraries.
const SMALL_MODELS: [&str; 3] = [
    "mlperf_tiny_ad_fc_autoencoder_int8.tflite",
    "tflm_simple_add_model.tflite",
    "tflm_hello_world_int8.tflite",
];
/// Larger models for the own-library property (seconds per run).
const PROPERTY_MODELS: [&str; 2] = ["mlperf_tiny_kws_ds_cnn_int8.tflite", "zoo:sakr_cifar10"];
const LIBRARIES: [&str; 2] = ["tflm", "cmsis-nn"];

fn shared_dir() -> PathBuf {
    repo().join("../shared/models")
}

/// A model argument: a zoo name as it is, a file of `../shared/models/` as
/// `$SHARED/NAME` (kept inputs name no machine's paths).
fn model_arg(name: &str) -> String {
    if name.starts_with("zoo:") {
        name.into()
    } else {
        format!("$SHARED/{name}")
    }
}

fn expand(arg: &str) -> String {
    arg.replace("$SHARED", &shared_dir().display().to_string())
        .replace("$REPO", &repo().display().to_string())
}

fn pick<'a, T>(rng: &mut Rng, items: &'a [T]) -> &'a T {
    &items[rng.range(0, items.len() as u32 - 1) as usize]
}

/// A kept input of the classes below: arguments (`$SHARED`, `$REPO` for
/// the machine's paths), text files, and the class's rule.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    args: Vec<String>,
    #[serde(default)]
    files: Vec<(String, String)>,
    expect: Expect,
}

fn case_job(target: &'static str, case: Case) -> Job {
    let keep = ("json", serde_json::to_vec_pretty(&case).unwrap());
    Job {
        target,
        files: case
            .files
            .iter()
            .map(|(n, t)| (n.clone(), t.as_bytes().to_vec()))
            .collect(),
        args: case.args.iter().map(|a| expand(a)).collect(),
        keep,
        expect: case.expect,
    }
}

fn kept_cases(target: &'static str) -> Vec<Job> {
    kept(target, "json")
        .iter()
        .filter_map(|b| serde_json::from_slice::<Case>(b).ok())
        .map(|c| case_job(target, c))
        .collect()
}

/// `memtrace plan MODEL --kernels K --format json EXTRA…`.
fn plan_report(model: &str, kernels: &str, extra: &[&str]) -> Value {
    let mut a = vec![
        "plan".to_string(),
        expand(&model_arg(model)),
        "--kernels".into(),
        kernels.into(),
        "--format".into(),
        "json".into(),
    ];
    a.extend(extra.iter().map(|s| s.to_string()));
    let out = common::memtrace(&a);
    assert!(out.status.success(), "{a:?}: {}", common::stderr(&out));
    common::json(&out)
}

/// A plan's order is the model's.
fn model_order(plan: &Value, ops: usize) -> bool {
    plan["order"]
        .as_array()
        .is_some_and(|o| o.iter().map(Value::as_u64).eq((0..ops as u64).map(Some)))
}

/// An arena tensor of a model under one library: its bytes (from `plan
/// --alignment 1`) and the operators, in model order, from the one that
/// writes it (0 for a graph input) to the last that reads it (one past the
/// last operator for a graph output, read back after the run), computed
/// here from the model's operator list, not taken from the planner.
struct LiveTensor {
    name: String,
    bytes: u64,
    first: usize,
    last: usize,
    /// A library's scratch buffer, live during its operator: not certainly
    /// written in full, so never a certain clobber.
    scratch: bool,
}

/// A second method for "does this placement clobber a live tensor": the
/// live-overlap oracle of one model on one library.
struct Oracle {
    model: String,
    kernels: &'static str,
    tensors: Vec<LiveTensor>,
    /// (i, j) of an input and an output of one operator: DMO overlaps them
    /// up to O_s, so their overlap is never a certain clobber.
    in_out: std::collections::HashSet<(usize, usize)>,
    /// memtrace's own plans in model order: offsets and arena.
    seeds: Vec<(Vec<u64>, u64)>,
}

impl Oracle {
    fn new(name: &str, kernels: &'static str, report: &Value) -> Oracle {
        let model = tflite::import_file(&shared_dir().join(name)).unwrap();
        let names = model.tensor_names();
        let ops = model.ops.len();
        let sized = plan_report(name, kernels, &["--alignment", "1", "--planner", "linear"]);
        let mut tensors = Vec::new();
        let mut index = HashMap::new();
        for t in sized["plans"][0]["tensors"].as_array().unwrap() {
            let tname = t["name"].as_str().unwrap().to_owned();
            let bytes = t["size"].as_u64().unwrap();
            let (first, last, scratch) = match names.iter().position(|x| *x == tname) {
                Some(i) => {
                    let first = if model.inputs.contains(&i) {
                        0
                    } else {
                        model
                            .ops
                            .iter()
                            .position(|o| o.outputs.contains(&i))
                            .unwrap_or_else(|| panic!("{name}: `{tname}` has no writer"))
                    };
                    let read = model.ops.iter().rposition(|o| o.inputs.contains(&i));
                    let last = if model.outputs.contains(&i) {
                        ops
                    } else {
                        read.unwrap_or(first).max(first)
                    };
                    index.insert(i, tensors.len());
                    (first, last, false)
                }
                None => {
                    let base = tname
                        .strip_suffix("/scratch")
                        .unwrap_or_else(|| panic!("{name}: no tensor `{tname}` in the model"));
                    let op = model
                        .ops
                        .iter()
                        .position(|o| o.outputs.iter().any(|&t| names[t] == base))
                        .unwrap_or_else(|| panic!("{name}: no operator writes `{base}`"));
                    (op, op, true)
                }
            };
            tensors.push(LiveTensor {
                name: tname,
                bytes,
                first,
                last,
                scratch,
            });
        }
        let mut in_out = std::collections::HashSet::new();
        for op in &model.ops {
            for a in &op.inputs {
                for b in &op.outputs {
                    if let (Some(&i), Some(&j)) = (index.get(a), index.get(b)) {
                        in_out.insert((i, j));
                        in_out.insert((j, i));
                    }
                }
            }
        }
        let mut oracle = Oracle {
            model: name.into(),
            kernels,
            tensors,
            in_out,
            seeds: Vec::new(),
        };
        for p in report["plans"].as_array().unwrap() {
            let Some(arena) = p["peak_bytes"].as_u64() else {
                continue;
            };
            if !model_order(p, ops) {
                continue;
            }
            let mut offsets = vec![None; oracle.tensors.len()];
            for t in p["tensors"].as_array().unwrap() {
                let i = oracle
                    .tensors
                    .iter()
                    .position(|x| t["name"] == x.name.as_str())
                    .unwrap_or_else(|| panic!("{name}: plan tensor {t} unknown"));
                offsets[i] = t["offset"].as_u64();
            }
            let offsets: Vec<u64> = offsets.into_iter().map(Option::unwrap).collect();
            // The oracle agrees that memtrace's own plans clobber nothing.
            if let Some(why) = oracle.certain_clobber(&offsets) {
                panic!(
                    "{name} ({kernels}): `plan`'s {} / {} plan: {why}",
                    p["planner"], p["overlap"]
                );
            }
            oracle.seeds.push((offsets, arena));
        }
        assert!(!oracle.seeds.is_empty(), "{name}: no plan in model order");
        oracle
    }

    /// Two tensors that are live at once and share a byte, neither one
    /// operator's input and the other its output: the later one's writer
    /// overwrites bytes the earlier one's last reader (or the read-back of
    /// the outputs) still reads.
    fn certain_clobber(&self, offsets: &[u64]) -> Option<String> {
        for i in 0..self.tensors.len() {
            for j in i + 1..self.tensors.len() {
                let (a, b) = (&self.tensors[i], &self.tensors[j]);
                if a.scratch || b.scratch || a.bytes == 0 || b.bytes == 0 {
                    continue;
                }
                if self.in_out.contains(&(i, j)) {
                    continue;
                }
                let shared = offsets[i] < offsets[j].saturating_add(b.bytes)
                    && offsets[j] < offsets[i].saturating_add(a.bytes);
                let live = a.first <= b.last && b.first <= a.last;
                if shared && live {
                    return Some(format!(
                        "`{}` [{}, +{}) and `{}` [{}, +{}) share bytes while both live \
                         (operators {}..={})",
                        a.name,
                        offsets[i],
                        a.bytes,
                        b.name,
                        offsets[j],
                        b.bytes,
                        a.first.max(b.first),
                        a.last.min(b.last)
                    ));
                }
            }
        }
        None
    }
}

/// A plan file under construction: one entry per tensor of the oracle.
struct PlanMutant {
    offsets: Vec<Value>,
    arena: Option<Value>,
    kernels: Option<Value>,
    arena_key: &'static str,
    /// An entry whose `"offset"` key is misspelt.
    offset_typo: Option<usize>,
    /// An entry left out (the tensor keeps its reference offset) or
    /// renamed: the oracle has no verdict.
    dropped: Option<usize>,
    renamed: Option<usize>,
}

impl PlanMutant {
    fn render(&self, o: &Oracle) -> String {
        let tensors: Vec<Value> = (0..o.tensors.len())
            .filter(|&i| Some(i) != self.dropped)
            .map(|i| {
                let mut e = serde_json::Map::new();
                let name = &o.tensors[i].name;
                let name = if Some(i) == self.renamed {
                    format!("{name} ")
                } else {
                    name.clone()
                };
                e.insert("name".into(), name.into());
                let key = if Some(i) == self.offset_typo {
                    "ofset"
                } else {
                    "offset"
                };
                e.insert(key.into(), self.offsets[i].clone());
                Value::Object(e)
            })
            .collect();
        let mut doc = serde_json::Map::new();
        doc.insert("tensors".into(), Value::Array(tensors));
        if let Some(a) = &self.arena {
            doc.insert(self.arena_key.into(), a.clone());
        }
        if let Some(k) = &self.kernels {
            doc.insert("kernels".into(), k.clone());
        }
        Value::Object(doc).to_string()
    }

    /// `None`: no verdict; `Some(None)`: no certain clobber; `Some(Some(why))`:
    /// `verify` must refuse the plan or report it failed.
    fn judge(&self, o: &Oracle) -> Option<Option<String>> {
        if self.dropped.is_some() || self.renamed.is_some() {
            return None;
        }
        if self.offset_typo.is_some() || (self.arena.is_some() && self.arena_key != "arena_bytes") {
            return Some(Some("the plan has a key the format does not have".into()));
        }
        let other = LIBRARIES.iter().find(|&&k| k != o.kernels).unwrap();
        if self.kernels.as_ref().and_then(Value::as_str) == Some(other) {
            return Some(Some(format!("the plan was made for {other}")));
        }
        let mut offsets = Vec::new();
        for (i, v) in self.offsets.iter().enumerate() {
            match v.as_u64() {
                Some(x) => offsets.push(x),
                None => {
                    return Some(Some(format!(
                        "the offset of `{}` is {v}",
                        o.tensors[i].name
                    )))
                }
            }
        }
        let limit = (1u64 << 31) - 1;
        let mut end = 0u64;
        for (t, &x) in o.tensors.iter().zip(&offsets) {
            match x.checked_add(t.bytes) {
                Some(e) => end = end.max(e),
                None => return Some(Some(format!("`{}` ends beyond 2^64", t.name))),
            }
        }
        if end > limit {
            return Some(Some(format!(
                "the arena ends at byte {end}, beyond 2^31 - 1"
            )));
        }
        if let Some(a) = self.arena.as_ref().and_then(Value::as_u64) {
            if a < end {
                return Some(Some(format!(
                    "\"arena_bytes\": {a}, but a tensor ends at {end}"
                )));
            }
            if a > limit {
                return Some(Some(format!("\"arena_bytes\": {a} is beyond 2^31 - 1")));
            }
        }
        Some(o.certain_clobber(&offsets))
    }
}

/// 1–3 edits of one of memtrace's own plans: a tensor moved onto another's
/// bytes (most often), shifted, two swapped, the arena, the library, odd
/// offsets, misspelt keys, an entry dropped or renamed.
fn mutate_plan(rng: &mut Rng, o: &Oracle) -> PlanMutant {
    let (offsets, arena) = pick(rng, &o.seeds).clone();
    let n = o.tensors.len() as u32;
    let mut m = PlanMutant {
        offsets: offsets.iter().map(|&x| Value::from(x)).collect(),
        arena: Some(Value::from(arena)),
        kernels: Some(Value::from(o.kernels)),
        arena_key: "arena_bytes",
        offset_typo: None,
        dropped: None,
        renamed: None,
    };
    let end = o
        .tensors
        .iter()
        .zip(&offsets)
        .map(|(t, &x)| x + t.bytes)
        .max()
        .unwrap_or(0);
    for _ in 0..rng.range(1, 3) {
        let i = rng.range(0, n - 1) as usize;
        let j = rng.range(0, n - 1) as usize;
        let bi = o.tensors[i].bytes as i64;
        let bj = o.tensors[j].bytes as i64;
        match rng.weighted(&[
            (6, 0u8),
            (2, 1),
            (2, 2),
            (2, 3),
            (1, 4),
            (1, 5),
            (1, 6),
            (1, 7),
        ]) {
            0 => {
                // Onto j's bytes, at a 16-byte step.
                if let Some(oj) = m.offsets[j].as_u64() {
                    let d = (rng.next_u64() % (bi + bj).max(1) as u64) as i64 - bi + 1;
                    let at = (oj as i64 + d.div_euclid(16) * 16).max(0);
                    m.offsets[i] = Value::from(at as u64);
                }
            }
            1 => {
                if let Some(oi) = m.offsets[i].as_u64() {
                    let d = *pick(rng, &[16, -16, 1, -1, bi, -bi, 64]);
                    m.offsets[i] = Value::from((oi as i64 + d).max(0) as u64);
                }
            }
            2 => m.offsets.swap(i, j),
            3 => {
                m.arena = pick(
                    rng,
                    &[
                        Some(Value::from(end.saturating_sub(1))),
                        Some(Value::from(end.saturating_sub(16))),
                        Some(Value::from(0)),
                        Some(Value::from(1)),
                        None,
                        Some(Value::from(end)),
                        Some(Value::from(end + 4096)),
                        Some(Value::from(u64::MAX)),
                        Some(Value::from(1u64 << 31)),
                    ],
                )
                .clone()
            }
            4 => {
                let other = LIBRARIES.iter().find(|&&k| k != o.kernels).unwrap();
                m.kernels = pick(
                    rng,
                    &[
                        Some(Value::from(*other)),
                        Some(Value::from(*other)),
                        None,
                        Some(Value::from("TFLM")),
                        Some(Value::from("")),
                        Some(Value::from(7)),
                        Some(Value::Null),
                    ],
                )
                .clone()
            }
            5 => {
                m.offsets[i] = pick(
                    rng,
                    &[
                        Value::from(-1),
                        Value::from(u64::MAX),
                        serde_json::json!(1e308),
                        Value::from("16"),
                        Value::Null,
                        Value::from(1u64 << 31),
                        Value::from((1u64 << 31) - 16),
                        serde_json::json!(0.5),
                    ],
                )
                .clone()
            }
            6 => {
                if rng.chance(50) {
                    m.arena_key = "arena_btes";
                } else {
                    m.offset_typo = Some(i);
                }
            }
            _ => {
                if rng.chance(50) {
                    m.dropped = Some(i);
                } else {
                    m.renamed = Some(i);
                }
            }
        }
    }
    m
}

/// `verify MODEL --kernels K --plan p.json` on a mutant of one of `plan`'s
/// placements, with the oracle's verdict as the rule.
fn oracle_case(rng: &mut Rng, o: &Oracle) -> Case {
    let m = mutate_plan(rng, o);
    let mut text = m.render(o);
    let mut refuse = m.judge(o).flatten();
    if rng.chance(15) {
        text = mutate_json(rng, &text);
        refuse = None;
    }
    Case {
        // No host oracle: the case is about the plan, and TFLM's run under
        // its own plan is the reference its outputs are compared with.
        args: vec![
            "verify".into(),
            "--no-oracle".into(),
            model_arg(&o.model),
            "--kernels".into(),
            o.kernels.into(),
            "--plan".into(),
            "p.json".into(),
            "--format".into(),
            "json".into(),
        ],
        files: vec![("p.json".into(), text)],
        expect: Expect {
            refuse,
            kernels: Some(o.kernels.into()),
            ..Expect::default()
        },
    }
}

/// TinySeg's options with and without `--planner tinyseg`: without it they
/// would do nothing, which is a usage error (exit 2).
fn tinyseg_case(rng: &mut Rng) -> Case {
    let verify = rng.chance(50);
    let small = SMALL_MODELS.map(model_arg);
    let model = if verify || rng.chance(50) {
        pick(rng, &small).clone()
    } else {
        pick(rng, &["zoo:sakr_cifar10", "zoo:tiny_unet_80x120_int8"]).to_string()
    };
    let planner = *pick(
        rng,
        &[
            Some("tinyseg"),
            Some("tinyseg"),
            Some("tinyseg"),
            None,
            Some("dmo-heap"),
            Some("tflm-greedy"),
            Some("exact"),
            Some("all"),
            Some("bogus"),
        ],
    );
    let mut args: Vec<String> = vec![if verify { "verify" } else { "plan" }.into(), model.clone()];
    // Tiny U-Net's trace on TFLM is taken from the cache, which
    // `issue20_jobs` fills before the campaign: traced afresh it would not
    // fit the time limit of one input.
    if verify {
        args.push("--no-oracle".into());
    }
    if let Some(p) = planner {
        args.extend(["--planner".into(), p.into()]);
    }
    let mut given = Vec::new();
    let mut opt = |args: &mut Vec<String>, name: &'static str, value: &str| {
        args.extend([name.to_string(), value.to_string()]);
        given.push(name);
    };
    if rng.chance(50) {
        let base = *pick(
            rng,
            &[
                "tflm-greedy",
                "dmo-heap",
                "reorder",
                "exact",
                "linear",
                "replacement",
                "tinyseg",
                "greedy",
                "",
            ],
        );
        opt(&mut args, "--base", base);
    }
    if rng.chance(50) {
        let v = if rng.chance(50) {
            pick(rng, &NUMBERS).to_string()
        } else {
            pick(rng, &["16", "1000", "20000", "30000", "33000", "1000000"]).to_string()
        };
        opt(&mut args, "--target-bytes", &v);
    }
    if rng.chance(40) {
        let v = *pick(rng, &["never", "exact", "always", "sometimes"]);
        opt(&mut args, "--scratch-int16", v);
    }
    if rng.chance(20) && small.contains(&model) {
        args.extend(["--kernels".into(), "cmsis-nn".into()]);
    }
    args.extend(["--format".into(), "json".into()]);
    let usage = (planner != Some("tinyseg") && !given.is_empty())
        .then(|| format!("{} without --planner tinyseg", given.join(", ")));
    Case {
        args,
        files: vec![],
        expect: Expect {
            usage_ok: true,
            usage,
            ..Expect::default()
        },
    }
}

/// `verify` with `--kernels`, `--runner`, `--runtime`, `--target`,
/// `--overlap-from`, `--overlap` combined: a TFLM runner built with another
/// library than `--kernels` is refused, `--overlap-from` with a method and
/// the retired `--runtime executor` are usage errors, and an accepted run's
/// report names the library whose code ran.
fn kernels_case(rng: &mut Rng) -> Case {
    let small = SMALL_MODELS.map(model_arg);
    let mut args = vec!["verify".to_string(), pick(rng, &small).clone()];
    let kernels = *pick(
        rng,
        &[
            None,
            Some("tflm"),
            Some("tflm"),
            Some("cmsis-nn"),
            Some("cmsis-nn"),
            Some("cmsis"),
        ],
    );
    let runtime = *pick(
        rng,
        &[
            None,
            None,
            None,
            Some("executor"),
            Some("tflm"),
            Some("tflm"),
        ],
    );
    let target = *pick(
        rng,
        &[None, None, None, None, Some("x86-64"), Some("cortex-m4")],
    );
    let runner = *pick(
        rng,
        &[
            None,
            None,
            None,
            Some("cortex-m4/tflm-runner.elf"),
            Some("cortex-m4/tflm-runner-cmsis.elf"),
            Some("cortex-m4/suite.elf"),
            Some("cortex-m4/suite-cmsis.elf"),
            Some("x86_64/tflm-runner.elf"),
            Some("x86_64/tflm-runner-cmsis.elf"),
            Some("cortex-m4/bad-protocol.elf"),
            Some("missing/tflm-runner.elf"),
        ],
    );
    let overlap_from = *pick(rng, &[None, None, None, Some("tflm"), Some("cmsis-nn")]);
    let overlap = *pick(
        rng,
        &[
            None,
            None,
            None,
            Some("traced"),
            Some("analytic"),
            Some("none"),
        ],
    );
    for (name, v) in [
        ("--kernels", kernels),
        ("--runtime", runtime),
        ("--target", target),
        ("--overlap-from", overlap_from),
        ("--overlap", overlap),
    ] {
        if let Some(v) = v {
            args.extend([name.into(), v.into()]);
        }
    }
    if let Some(e) = runner {
        args.extend(["--runner".into(), format!("$REPO/harness-c/build/{e}")]);
    }
    args.extend(["--format".into(), "json".into()]);
    let lib = kernels.unwrap_or("tflm");
    let mut expect = Expect {
        usage_ok: true,
        kernels: Some(lib.into()),
        ..Expect::default()
    };
    if let (Some(_), Some(m)) = (overlap_from, overlap.filter(|&m| m != "traced")) {
        expect.usage = Some(format!("--overlap-from with --overlap {m}"));
    }
    if runtime == Some("executor") {
        expect.usage = Some("--runtime executor (retired)".into());
    }
    if let Some(e) = runner {
        let built = if e.contains("cmsis") {
            "cmsis-nn"
        } else {
            "tflm"
        };
        if e.contains("tflm-runner") && built != lib && lib != "cmsis" {
            expect.refuse = Some(format!("{e} is built with {built}, the run is for {lib}"));
        }
    }
    Case {
        args,
        files: vec![],
        expect,
    }
}

/// Every plan `memtrace plan --kernels K` prints, verified on K: with its
/// placements (`--plan`, model order) or, for a plan in another order, by
/// its planner with the same O_s source.
fn own_library_cases(model: &str, kernels: &str, report: &Value, ops: usize) -> Vec<Case> {
    let mut seen = std::collections::HashSet::new();
    let mut cases = Vec::new();
    for p in report["plans"].as_array().unwrap() {
        let Some(arena) = p["peak_bytes"].as_u64() else {
            continue;
        };
        let planner = p["planner"].as_str().unwrap();
        let overlap = p["overlap"].as_str().unwrap();
        let mut args = vec![
            "verify".to_string(),
            "--no-oracle".into(),
            model_arg(model),
            "--kernels".into(),
            kernels.into(),
            "--format".into(),
            "json".into(),
        ];
        let mut files = Vec::new();
        if model_order(p, ops) {
            let tensors: Vec<Value> = p["tensors"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| serde_json::json!({"name": t["name"], "offset": t["offset"]}))
                .collect();
            let text = serde_json::json!({
                "tensors": tensors, "arena_bytes": arena, "kernels": kernels, "overlap": overlap,
            })
            .to_string();
            if !seen.insert(serde_json::to_string(&tensors).unwrap()) {
                continue;
            }
            files.push(("p.json".to_string(), text));
            args.extend(["--plan".into(), "p.json".into()]);
        } else {
            args.extend([
                "--planner".into(),
                planner.into(),
                "--overlap".into(),
                overlap.into(),
            ]);
        }
        cases.push(Case {
            args,
            files,
            expect: Expect {
                verifies: true,
                kernels: Some(kernels.into()),
                ..Expect::default()
            },
        });
    }
    cases
}

/// The jobs of the four classes: kept failures first, then new inputs.
fn issue20_jobs(rng: &mut Rng) -> (Vec<Job>, usize) {
    let mut jobs = Vec::new();
    for target in [
        "plan-oracle-bin",
        "tinyseg-bin",
        "kernels-bin",
        "own-library-bin",
    ] {
        jobs.extend(kept_cases(target));
    }
    let replayed = jobs.len();
    // Tiny U-Net's run on TFLM, traced once into the cache without a time
    // limit, so that the TinySeg cases' `plan`s of it read it back.
    plan_report("zoo:tiny_unet_80x120_int8", "tflm", &[]);
    let mut oracles = Vec::new();
    let mut own = Vec::new();
    for kernels in LIBRARIES {
        for model in SMALL_MODELS.iter().chain(&PROPERTY_MODELS) {
            let report = plan_report(model, kernels, &[]);
            let ops = if let Some(z) = model.strip_prefix("zoo:") {
                zoo::build(z).unwrap().ops.len()
            } else {
                tflite::import_file(&shared_dir().join(model))
                    .unwrap()
                    .ops
                    .len()
            };
            own.extend(own_library_cases(model, kernels, &report, ops));
            if SMALL_MODELS.contains(model) {
                oracles.push(Oracle::new(model, kernels, &report));
            }
        }
    }
    for i in 0..scaled(150) {
        let o = &oracles[i % oracles.len()];
        jobs.push(case_job("plan-oracle-bin", oracle_case(rng, o)));
    }
    for _ in 0..scaled(60) {
        jobs.push(case_job("tinyseg-bin", tinyseg_case(rng)));
    }
    for _ in 0..scaled(60) {
        jobs.push(case_job("kernels-bin", kernels_case(rng)));
    }
    // Every library against every runner build.
    for kernels in LIBRARIES {
        for built in LIBRARIES {
            let file = match built {
                "tflm" => "tflm-runner.elf",
                _ => "tflm-runner-cmsis.elf",
            };
            let mut expect = Expect {
                kernels: Some(kernels.into()),
                ..Expect::default()
            };
            if built != kernels {
                expect.refuse = Some(format!("{file} is built with {built}, not {kernels}"));
            }
            let case = Case {
                args: [
                    "verify",
                    &model_arg(SMALL_MODELS[2]),
                    "--kernels",
                    kernels,
                    "--runner",
                    &format!("$REPO/harness-c/build/cortex-m4/{file}"),
                    "--format",
                    "json",
                ]
                .map(String::from)
                .to_vec(),
                files: vec![],
                expect,
            };
            jobs.push(case_job("kernels-bin", case));
        }
    }
    // The slow property runs first, so the two workers end together.
    let mut property: Vec<Job> = own
        .into_iter()
        .map(|c| case_job("own-library-bin", c))
        .collect();
    property.append(&mut jobs);
    (property, replayed)
}
