//! A bounded, deterministic, seeded mutation campaign (issue #12, item 9):
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

use memtrace_abi::spec::{Dtype, LayerSpec, Op};
use memtrace_analyzer::model::{tflite, zoo, Model};
use memtrace_analyzer::overlap::configs::{estimated_instructions, try_random_configs};
use memtrace_analyzer::planner::{self, Overlaps, PlanOptions, PlannerKind};
use memtrace_analyzer::rng::Rng;
use memtrace_analyzer::verify::export::{materialize, to_tflite};
use memtrace_analyzer::verify::lower::{check_placement, lower, tensor_names, LowerInput};
use memtrace_driver::verify::placement_from_plan;
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
#[derive(Default, Debug)]
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
        self.failures.extend(o.failures);
    }

    fn finish(&self, target: &str, started: Instant) {
        println!(
            "fuzz {target}: {} inputs ({} fixtures replayed), {} accepted, {} clean errors, \
             {} panics, {} timeouts, {} signals, {} bad exits, {} left files, {:.1} s",
            self.inputs,
            self.replayed,
            self.accepted,
            self.clean_errors,
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
                self.leftovers
            ),
            (0, 0, 0, 0, 0),
            "fuzz {target}: failures (inputs kept under fixtures/fuzz/{target}/)"
        );
        assert_eq!(self.inputs, self.accepted + self.clean_errors);
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
        for name in ["suite", "executor", "bad-protocol"] {
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
    for op in Op::ALL {
        for dtype in [Dtype::F32, Dtype::Int8] {
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
/// the emulator: validate, layer specs, two planners, lowering.
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
    let arena = plan.peak_bytes.unwrap_or(0);
    // Lowering fills graph inputs with seeded data: keep it small.
    if arena <= 4 << 20 {
        lower(
            &model,
            &LowerInput {
                order: &plan.order,
                offsets: &offsets,
                arena_bytes: arena,
                seed: 1,
                input_data: None,
            },
        )
        .map_err(|e| e.to_string())?;
    }
    Ok(())
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
/// tensors, offsets over the reference placement, the arena, lowering.
fn plan_target(model: &Model, reference: &[Option<u64>], text: &str) -> Result<(), String> {
    let (offsets, arena) =
        placement_from_plan(model, reference, text).map_err(|e| e.to_string())?;
    check_placement(model, &offsets, arena).map_err(|e| e.to_string())?;
    lower(
        model,
        &LowerInput {
            order: &(0..model.ops.len()).collect::<Vec<_>>(),
            offsets: &offsets,
            arena_bytes: arena,
            seed: 1,
            input_data: None,
        },
    )
    .map_err(|e| e.to_string())?;
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
    let model = tflite::import_file(&common::tfmicro_model("magic_wand")).unwrap();
    let plan = planner::run(
        &model,
        PlannerKind::TflmGreedy,
        &Overlaps::none(&model),
        &PlanOptions::default(),
    )
    .unwrap();
    let names = tensor_names(&model);
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
    plan_target(&model, &reference, &seed_plan).unwrap();
    let mut t = Tally::default();
    let run = |t: &mut Tally, text: &str| {
        if !in_process(t, "plan", || plan_target(&model, &reference, text)) {
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
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("memtrace starts");
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
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
    let what = format!("{} {:?}", job.target, job.args);
    let mut failed = true;
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
    };
    let plan_job = |text: &str| Job {
        target: "plan-json-bin",
        files: vec![
            ("m.tflite".into(), hello.clone()),
            ("p.json".into(), text.as_bytes().to_vec()),
        ],
        args: args(&["verify", "m.tflite", "--plan", "p.json"]),
        keep: ("json", text.as_bytes().to_vec()),
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
    let names = tensor_names(&hello_model);
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
        // hello_world and micro_speech run in the executor in milliseconds.
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

    // Two workers (the machine has two cores).
    let next = Mutex::new(0usize);
    let total = Mutex::new(Tally::default());
    let by_target: Mutex<HashMap<&'static str, (usize, usize)>> = Mutex::new(HashMap::new());
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
                e.0 += 1;
                e.1 += t.clean_errors;
                drop(bt);
                total.lock().unwrap().merge(t);
            });
        }
    });
    let mut total = total.into_inner().unwrap();
    total.replayed = replayed;
    let mut targets: Vec<_> = by_target.into_inner().unwrap().into_iter().collect();
    targets.sort();
    for (target, (n, errors)) in targets {
        println!("  {target}: {n} runs, {errors} clean errors");
    }
    total.finish("binary", started);
}
