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
//!
//! The modules, in the order a campaign uses them: `seeds` and `fixtures`
//! (its inputs), `mutate` (their mutants), `tally` (the counts, and the
//! in-process runner), `targets` (the in-process targets and their tests),
//! `binary` (one run of the binary and the rule it must keep), `cases`,
//! `oracle` and `classes` (the classes with rules of their own), and
//! `through_binary` (the campaign through the binary).

#[path = "fuzz_campaign/binary.rs"]
mod binary;
#[path = "fuzz_campaign/cases.rs"]
mod cases;
#[path = "fuzz_campaign/classes.rs"]
mod classes;
mod common;
#[path = "fuzz_campaign/fixtures.rs"]
mod fixtures;
#[path = "fuzz_campaign/json.rs"]
mod json;
#[path = "fuzz_campaign/mutate.rs"]
mod mutate;
#[path = "fuzz_campaign/oracle.rs"]
mod oracle;
#[path = "fuzz_campaign/outputs.rs"]
mod outputs;
#[path = "fuzz_campaign/programs.rs"]
mod programs;
#[path = "fuzz_campaign/seeds.rs"]
mod seeds;
#[path = "fuzz_campaign/tally.rs"]
mod tally;
#[path = "fuzz_campaign/targets.rs"]
mod targets;
#[path = "fuzz_campaign/through_binary.rs"]
mod through_binary;

use std::path::Path;
use std::time::Duration;

use memtrace_overlap::rng::Rng;

/// The campaign's default seed.
pub(crate) const SEED: u64 = 0x6d65_6d74_7261_6365;
/// An in-process call slower than this counts as a timeout.
pub(crate) const IN_PROCESS_LIMIT: Duration = Duration::from_secs(5);
/// A binary run is killed (and counted as a timeout) after this. A hang
/// never ends, so the limit only has to lie well above the slowest honest
/// run: a plan or verify of `zoo:sakr_cifar10` on real TFLM took over 30 s
/// on this 2-core machine at load 8.
pub(crate) const BINARY_LIMIT: Duration = Duration::from_secs(120);
/// Text fixtures larger than this are not kept (binary mutants are kept as
/// recipes, which are always small).
pub(crate) const MAX_FIXTURE: usize = 64 << 10;

pub(crate) fn seed(salt: u64) -> Rng {
    let base = std::env::var("MEMTRACE_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SEED);
    Rng::new(base ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// `MEMTRACE_FUZZ_SCALE` multiplies the number of generated inputs (for
/// exploration; 1 in `make test`).
pub(crate) fn scaled(n: usize) -> usize {
    let k: usize = std::env::var("MEMTRACE_FUZZ_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    n * k.max(1)
}

pub(crate) fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}
