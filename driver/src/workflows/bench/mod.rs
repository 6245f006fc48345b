//! Benchmarks (`memtrace bench`): tracing cost measured side by side in one run.
//!
//! * overhead: `memtrace run` (O_s and kernel attribution, on the MMIO
//!   access path it uses by default, and with `--exact-time` on the hook
//!   path) of a job layer vs the same ELF and job in Unicorn with no hooks
//!   (`memtrace_tracer::baseline`), on the reference suite and on the
//!   CMSIS-NN suite of the same build directory;
//! * Valgrind: the x86-64 build traced by memtrace vs the native x86-64 build
//!   of the same layer under `valgrind --tool=lackey --trace-mem=yes`
//!   (the paper's tracer) and `--tool=none`;
//! * memory: peak RSS of an O_s-only trace of a large layer.

pub mod ladder;
pub mod models;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use memtrace_abi::symbols;
use memtrace_abi::LayerSpec;
use memtrace_analyzer::layer_stats::LayerStats;
use memtrace_analyzer::pc_counts::PcCounts;
use memtrace_tracer::baseline::{run_untraced, UntracedOptions};
use memtrace_tracer::{AccessPath, ElfImage, Job, TraceOptions};

use crate::support::attribution::{kernel_of, kernel_text, KernelResolver};
use crate::support::common::trace_with;
use crate::support::error::{Error, Result};
use crate::workflows::run::{run, RunOptions};
use crate::{bail, failed};

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Directory holding cortex-m4/ and x86_64/ guest builds.
    pub build_dir: PathBuf,
    /// Layer of the overhead and Valgrind comparisons.
    pub job: String,
    /// Layer of the peak-RSS measurement.
    pub rss_job: String,
    /// Timed repetitions; the fastest counts.
    pub repeat: u32,
    /// Skip the Valgrind comparison.
    pub no_valgrind: bool,
    /// Skip the peak-RSS measurement.
    pub no_rss: bool,
}

pub(crate) fn fastest<T>(repeat: u32, mut f: impl FnMut() -> Result<T>) -> Result<(Duration, T)> {
    let mut best: Option<(Duration, T)> = None;
    for _ in 0..repeat.max(1) {
        let start = Instant::now();
        let value = f()?;
        let took = start.elapsed();
        if best.as_ref().is_none_or(|(b, _)| took < *b) {
            best = Some((took, value));
        }
    }
    Ok(best.expect("at least one repetition"))
}

/// The untraced runs a traced one is measured against.
pub(crate) struct Baselines {
    /// Fastest run on memtrace's machine (its TLB fill, no hooks).
    pub raw: Duration,
    /// Fastest run in Unicorn as it comes (`UntracedOptions::stock`).
    pub stock: Duration,
    /// The guest's exit code (in the run on memtrace's machine).
    pub exit_code: i32,
}

/// The fastest of `repeat` runs of `image` without hooks with `options`, on
/// memtrace's machine and in Unicorn as it comes.
pub(crate) fn untraced_baselines(
    image: &ElfImage,
    options: UntracedOptions<'_>,
    repeat: u32,
) -> Result<Baselines> {
    let time = |stock| {
        fastest(repeat, || {
            Ok(run_untraced(image, UntracedOptions { stock, ..options })?.exit_code)
        })
    };
    let (raw, exit_code) = time(false)?;
    let (stock, _) = time(true)?;
    Ok(Baselines {
        raw,
        stock,
        exit_code,
    })
}

/// What a traced run measured: the two paths must agree on all of it.
#[derive(Debug, PartialEq, Eq)]
struct Traced {
    events: u64,
    instructions: u64,
    /// Instructions of the whole run (the layer window and everything else).
    run_instructions: u64,
    monotone: u64,
    exact: u64,
}

/// Traces `job` on `image` with the analyses of `memtrace run` (O_s and
/// kernel attribution); the measured values and the layer's kernel.
fn traced(image: &ElfImage, job: &Job, access: AccessPath) -> Result<(Traced, String)> {
    let mut stats = LayerStats::default();
    let mut pcs = PcCounts::default();
    let summary = trace_with(
        image,
        TraceOptions {
            job: Some(job.clone()),
            access,
            // As `memtrace run`, which checks the memory contract.
            stray_writes: true,
            ..TraceOptions::default()
        },
        &mut [&mut stats, &mut pcs],
    )?;
    KernelResolver::new(image).attribute(&mut stats.layers, &pcs);
    if summary.access != access {
        bail!("{} cannot use the {access:?} path", image.path.display());
    }
    let layer = stats
        .layers
        .first()
        .ok_or_else(|| failed!("the job produced no layer"))?;
    let events = layer
        .buffers
        .iter()
        .map(|b| b.loads + b.stores + b.updates)
        .sum();
    let overlap = layer
        .overlap
        .as_ref()
        .ok_or_else(|| failed!("the job layer has no input/output pair"))?;
    let (library, kernel) = kernel_of(layer);
    Ok((
        Traced {
            events,
            instructions: layer.instructions,
            run_instructions: summary.instructions,
            monotone: overlap.monotone_bytes,
            exact: overlap.exact_bytes,
        },
        kernel_text(library, kernel),
    ))
}

/// Both access paths, fastest of `repeat` each; fails unless they agree.
/// Also the layer's kernel.
fn traced_both(
    image: &ElfImage,
    job: &Job,
    repeat: u32,
) -> Result<(Duration, Duration, Traced, String)> {
    let (mmio, (fast, kernel)) = fastest(repeat, || traced(image, job, AccessPath::Mmio))?;
    let (hooks, (exact, _)) = fastest(repeat, || traced(image, job, AccessPath::Hooks))?;
    if fast != exact {
        bail!("the access paths disagree: MMIO {fast:?}, hooks {exact:?}");
    }
    Ok((mmio, hooks, exact, kernel))
}

/// The overhead of tracing one ELF's job layer.
struct Overhead {
    /// Unicorn without hooks (but memtrace's TLB fill, as traced runs).
    raw: Duration,
    /// Unicorn as it comes (`UntracedOptions::stock`).
    stock: Duration,
    /// `memtrace run` (MMIO path).
    mmio: Duration,
    /// `memtrace run --exact-time` (hook path).
    hooks: Duration,
    traced: Traced,
    /// `` `function` (library) `` of the layer.
    kernel: String,
}

impl Overhead {
    fn ratio(&self, took: Duration) -> f64 {
        took.as_secs_f64() / self.raw.as_secs_f64()
    }

    /// `memtrace run` against Unicorn as it comes.
    fn against_stock(&self) -> f64 {
        self.mmio.as_secs_f64() / self.stock.as_secs_f64()
    }
}

/// Unicorn without hooks and both traced paths on `image`, fastest of
/// `repeat` each.
fn overhead(image: &ElfImage, job: &Job, repeat: u32) -> Result<Overhead> {
    let base = untraced_baselines(
        image,
        UntracedOptions {
            job: Some(job),
            ..Default::default()
        },
        repeat,
    )?;
    if base.exit_code != 0 {
        bail!(
            "the untraced guest {} exited with code {}",
            image.path.display(),
            base.exit_code
        );
    }
    let (mmio, hooks, traced, kernel) = traced_both(image, job, repeat)?;
    Ok(Overhead {
        raw: base.raw,
        stock: base.stock,
        mmio,
        hooks,
        traced,
        kernel,
    })
}

fn write_overhead(out: &mut impl Write, title: &str, o: &Overhead) -> Result<()> {
    let t = &o.traced;
    writeln!(
        out,
        "\n[overhead] {title}: kernel {}, {} instructions in the layer ({:.0} % of the run's {}), {} events, O_s {} B (both paths)",
        o.kernel,
        t.instructions,
        100.0 * t.instructions as f64 / t.run_instructions.max(1) as f64,
        t.run_instructions,
        t.events,
        t.exact
    )?;
    writeln!(
        out,
        "  unicorn, no hooks                 {:>9.3} s",
        o.raw.as_secs_f64()
    )?;
    writeln!(
        out,
        "  unicorn as it comes (its own TLB) {:>9.3} s  = {:>5.2} x",
        o.stock.as_secs_f64(),
        o.ratio(o.stock)
    )?;
    for (name, took) in [
        ("memtrace run (O_s)", o.mmio),
        ("memtrace run --exact-time", o.hooks),
    ] {
        writeln!(
            out,
            "  {name:<32}  {:>9.3} s  = {:>5.2} x   {:>5.1} ns/event",
            took.as_secs_f64(),
            o.ratio(took),
            (took.as_secs_f64() - o.raw.as_secs_f64()) * 1e9 / t.events.max(1) as f64
        )?;
    }
    Ok(())
}

/// Measures tracing overhead, the Valgrind comparison and peak memory,
/// writing the report to `out`.
pub fn bench(opts: &BenchOptions, out: &mut impl Write) -> Result<()> {
    let args = opts;
    let spec = LayerSpec::parse(&args.job).map_err(|e| failed!("bad --job: {e}"))?;
    let job = Job { spec, seed: 1 };
    writeln!(out, "memtrace bench — layer: {}", job.spec)?;

    let m4 = ElfImage::load(&args.build_dir.join("cortex-m4/suite.elf"))?;
    let reference = overhead(&m4, &job, args.repeat)?;
    write_overhead(out, "cortex-m4, suite.elf", &reference)?;
    writeln!(
        out,
        "  target: memtrace run <= 3 x   -> {} ({:.2} x; {:.2} x against unicorn as it comes)",
        if reference.ratio(reference.mmio) <= 3.0 {
            "met"
        } else {
            "NOT met"
        },
        reference.ratio(reference.mmio),
        reference.against_stock()
    )?;
    let cmsis_path = args.build_dir.join("cortex-m4/suite-cmsis.elf");
    if cmsis_path.exists() {
        let cmsis = overhead(&ElfImage::load(&cmsis_path)?, &job, args.repeat)?;
        write_overhead(out, "cortex-m4, suite-cmsis.elf (same layer)", &cmsis)?;
        writeln!(
            out,
            "\n[overhead] ratio to unicorn without hooks, same run: reference {:.2} x, CMSIS-NN {:.2} x (--exact-time: {:.2} x, {:.2} x)",
            reference.ratio(reference.mmio),
            cmsis.ratio(cmsis.mmio),
            reference.ratio(reference.hooks),
            cmsis.ratio(cmsis.hooks)
        )?;
        writeln!(
            out,
            "  (whole runs: suite-cmsis.elf also runs the reference kernel outside the window, untraced, to check its output bit for bit)"
        )?;
        writeln!(
            out,
            "  memtrace run against unicorn as it comes: reference {:.2} x, CMSIS-NN {:.2} x",
            reference.against_stock(),
            cmsis.against_stock()
        )?;
    } else {
        writeln!(
            out,
            "\n[overhead] CMSIS-NN layer skipped: {} is missing (build it with `make -C harness-c CMSIS_NN_DIR=/path/to/CMSIS-NN`, harness-c/README.md)",
            cmsis_path.display()
        )?;
    }

    if !args.no_valgrind {
        valgrind_comparison(args, &job, out)?;
    }
    if !args.no_rss {
        peak_rss(args, out)?;
    }
    Ok(())
}

fn valgrind_comparison(args: &BenchOptions, job: &Job, out: &mut impl Write) -> Result<()> {
    // Valgrind reads options from `./.valgrindrc`: it runs in an empty
    // private directory, not in whatever directory memtrace was started from.
    let workdir = memtrace_io::private_dir::PrivateDir::new(".memtrace-valgrind.")
        .map_err(|e| failed!("a temporary folder for valgrind: {e}"))?;
    if Command::new("valgrind")
        .current_dir(workdir.path())
        .arg("--version")
        .output()
        .is_err()
    {
        writeln!(
            out,
            "\n[valgrind] skipped: valgrind is not installed (apt-get install valgrind)"
        )?;
        return Ok(());
    }
    let x86 = ElfImage::load(&args.build_dir.join("x86_64/suite.elf"))?;
    let (mmio, hooks, t, _) = traced_both(&x86, job, args.repeat)?;
    let (raw, _) = fastest(args.repeat, || {
        Ok(run_untraced(
            &x86,
            UntracedOptions {
                job: Some(job),
                ..Default::default()
            },
        )?)
    })?;
    // Removed when dropped, at the end of this function.
    let native_file = patched_native(&args.build_dir.join("x86_64/suite-native.elf"), job)?;
    let native = std::path::absolute(&*native_file)
        .map_err(|e| failed!("the patched native suite's path: {e}"))?;
    let run_valgrind = |tool: &[&str]| -> Result<Duration> {
        fastest(args.repeat, || {
            let start = Instant::now();
            let status = Command::new("valgrind")
                .current_dir(workdir.path())
                .args(tool)
                .arg("--log-file=/dev/null")
                .arg(&native)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .map_err(|e| failed!("running valgrind: {e}"))?;
            if !status.success() {
                bail!("valgrind {tool:?} on the native suite failed: {status}");
            }
            Ok(start.elapsed())
        })
        .map(|(best, _)| best)
    };
    let lackey = run_valgrind(&["--tool=lackey", "--trace-mem=yes"])?;
    let none = run_valgrind(&["--tool=none"])?;
    writeln!(
        out,
        "\n[valgrind] x86-64, {} instructions in the layer, {} events",
        t.instructions, t.events
    )?;
    writeln!(
        out,
        "  valgrind --tool=none              {:>9.3} s",
        none.as_secs_f64()
    )?;
    writeln!(
        out,
        "  valgrind --tool=lackey --trace-mem {:>8.3} s",
        lackey.as_secs_f64()
    )?;
    writeln!(
        out,
        "  unicorn, no hooks                 {:>9.3} s",
        raw.as_secs_f64()
    )?;
    for (name, took) in [
        ("memtrace run (O_s)", mmio),
        ("memtrace run --exact-time", hooks),
    ] {
        writeln!(
            out,
            "  {name:<33} {:>9.3} s   lackey / memtrace = {:>5.1} x   ({:.2} x unicorn)",
            took.as_secs_f64(),
            lackey.as_secs_f64() / took.as_secs_f64(),
            took.as_secs_f64() / raw.as_secs_f64()
        )?;
    }
    writeln!(
        out,
        "  target: lackey / memtrace run >= 20 x -> {}",
        if lackey.as_secs_f64() >= 20.0 * mmio.as_secs_f64() {
            "met"
        } else {
            "NOT met"
        }
    )?;
    Ok(())
}

/// A temporary copy of the native suite with `job` written into its
/// file-backed `memtrace_job`.
fn patched_native(path: &Path, job: &Job) -> Result<tempfile::TempPath> {
    use object::{Object, ObjectSection, ObjectSymbol};
    use std::os::unix::fs::PermissionsExt;
    let mut bytes = std::fs::read(path).map_err(|source| Error::Io {
        action: "read",
        path: path.to_owned(),
        source,
    })?;
    let offset = {
        let file = object::File::parse(&*bytes).map_err(|e| failed!("{}: {e}", path.display()))?;
        let sym = file
            .symbols()
            .find(|s| s.name() == Ok(symbols::JOB))
            .ok_or_else(|| failed!("{} has no memtrace_job", path.display()))?;
        let section = file
            .section_by_index(
                sym.section_index()
                    .ok_or_else(|| failed!("memtrace_job has no section"))?,
            )
            .map_err(|e| failed!("{}: {e}", path.display()))?;
        let (file_start, _) = section
            .file_range()
            .ok_or_else(|| failed!("memtrace_job is not file-backed in {}", path.display()))?;
        (file_start + sym.address() - section.address()) as usize
    };
    for (i, w) in job.spec.job_words(job.seed).iter().enumerate() {
        bytes[offset + 4 * i..offset + 4 * i + 4].copy_from_slice(&w.to_le_bytes());
    }
    let mut tmp = tempfile::NamedTempFile::new()?;
    std::io::Write::write_all(&mut tmp, &bytes)?;
    let tmp = tmp.into_temp_path();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))?;
    Ok(tmp)
}

/// Peak RSS of an O_s-only trace of the RSS layer, measured in this process:
/// the kernel's high-water mark is reset first (`/proc/self/clear_refs`), so
/// what the earlier measurements held does not count unless still resident.
fn peak_rss(args: &BenchOptions, out: &mut impl Write) -> Result<()> {
    std::fs::write("/proc/self/clear_refs", "5")
        .map_err(|e| failed!("resetting the peak RSS (/proc/self/clear_refs): {e}"))?;
    let report = run(&RunOptions {
        elf: args.build_dir.join("cortex-m4/suite.elf"),
        layers: Vec::new(),
        job: Some(args.rss_job.clone()),
        seed: 1,
        events: None,
        plot: None,
        no_overlay: false,
        max_instructions: 20_000_000_000,
        exact_time: false,
        model: Default::default(),
        engine: None,
    })?;
    let kb = peak_rss_kb().ok_or_else(|| failed!("/proc/self/status has no VmHWM"))?;
    let events: u64 = report
        .layers
        .iter()
        .flat_map(|l| &l.buffers)
        .map(|b| b.loads + b.stores + b.updates)
        .sum();
    writeln!(out, "\n[memory] O_s-only run of {}", args.rss_job)?;
    writeln!(out, "  events                 {events:>12}")?;
    writeln!(
        out,
        "  peak RSS               {:>9.1} MB   (target <= 200 MB)",
        kb as f64 / 1024.0
    )?;
    Ok(())
}

/// `VmHWM` of this process in kB (Linux).
pub(crate) fn peak_rss_kb() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}
