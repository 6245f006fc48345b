//! A run without hooks (`baseline::run_untraced`) is the same guest run: it
//! leaves the same memory and exit as a traced run, and a guest that never
//! exits is stopped by its time limit with the place it was spinning.

mod common;

use std::time::{Duration, Instant};

use common::{guest, trace_messages};
use memtrace_abi::LayerSpec;
use memtrace_tracer::baseline::{run_untraced, UntracedOptions};
use memtrace_tracer::{AccessPath, ElfImage, Job, TraceError, TraceOptions};

/// The first bytes of the kernel suite's arena, where a job's buffers live.
const ARENA_PREFIX: u64 = 64 * 1024;

#[test]
fn a_run_without_hooks_leaves_the_memory_of_a_traced_run() {
    let job = Job {
        spec: LayerSpec::parse(
            "op=conv2d,dtype=int8,input=1x12x12x8,filter=16x3x3x8,stride=1,padding=same",
        )
        .unwrap(),
        seed: 11,
    };
    for target in ["cortex-m4", "x86_64"] {
        let image = ElfImage::load(&guest(target, "suite.elf")).unwrap();
        let arena = image.symbol("memtrace_arena").unwrap().address;
        let readback = vec![(arena, ARENA_PREFIX)];
        let untraced = run_untraced(
            &image,
            UntracedOptions {
                job: Some(&job),
                readback: &readback,
                ..Default::default()
            },
        )
        .unwrap();
        let (traced, _) = trace_messages(
            &image,
            TraceOptions {
                job: Some(job.clone()),
                readback: readback.clone(),
                access: AccessPath::Mmio,
                ..TraceOptions::default()
            },
        );
        assert_eq!(untraced.exit_code, traced.exit_code, "{target}");
        assert_eq!(untraced.memory, traced.memory, "{target}");
        // The job wrote its output somewhere in there.
        assert!(untraced.memory[0].iter().any(|&b| b != 0), "{target}");
    }
}

#[test]
fn the_exit_reason_is_read_without_hooks_as_with_them() {
    // The TFLM runner without a model exits with a reason.
    for target in ["cortex-m4", "x86_64"] {
        let image = ElfImage::load(&guest(target, "tflm-runner.elf")).unwrap();
        let untraced = run_untraced(&image, UntracedOptions::default()).unwrap();
        let traced = memtrace_tracer::trace(&image, TraceOptions::default(), &mut []).unwrap();
        assert_ne!(untraced.exit_code, 0, "{target}");
        assert_eq!(untraced.exit_code, traced.exit_code, "{target}");
        assert!(traced.exit_reason.is_some(), "{target}");
        assert_eq!(untraced.exit_reason, traced.exit_reason, "{target}");
    }
}

#[test]
fn a_guest_that_never_exits_is_stopped_by_the_time_limit_where_it_spins() {
    let started = Instant::now();
    let err = spin_until(Duration::from_millis(300));
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(matches!(err, TraceError::TimeLimit { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("spin.c:"), "{text}");
    assert!(text.contains("spin_forever"), "{text}");
}

/// memtrace fills Unicorn's TLB itself so that stores to data pages stay
/// fast (`machine::fast_stores`); the guest must not notice. Checked against
/// Unicorn as it comes, on layers whose kernels use IT blocks and the stack.
#[test]
fn the_host_filled_tlb_runs_the_guest_as_stock_unicorn_does() {
    let specs = [
        "op=conv2d,dtype=int8,input=1x12x12x8,filter=16x3x3x8,stride=1,padding=same",
        "op=depthwise_conv2d,dtype=f32,input=1x9x9x4,filter=1x3x3x4,stride=2,padding=valid",
        "op=fully_connected,dtype=int8,input=1x64,filter=10x64",
    ];
    for target in ["cortex-m4", "x86_64"] {
        for suite in ["suite.elf", "suite-cmsis.elf"] {
            let image = ElfImage::load(&guest(target, suite)).unwrap();
            let arena = image.symbol("memtrace_arena").unwrap().address;
            let readback = vec![(arena, ARENA_PREFIX)];
            for spec in specs {
                let job = Job {
                    spec: LayerSpec::parse(spec).unwrap(),
                    seed: 5,
                };
                let run = |stock| {
                    run_untraced(
                        &image,
                        UntracedOptions {
                            job: Some(&job),
                            readback: &readback,
                            stock,
                            ..Default::default()
                        },
                    )
                    .unwrap()
                };
                let (fast, stock) = (run(false), run(true));
                assert_eq!(fast.exit_code, 0, "{target} {suite} {spec}");
                assert_eq!(fast.exit_code, stock.exit_code, "{target} {suite} {spec}");
                assert_eq!(fast.memory, stock.memory, "{target} {suite} {spec}");
            }
        }
    }
}

/// An IT block whose conditional instructions straddle a code-page boundary
/// (`it_across_pages` in `harness-c/guests/it_block.c`): the host-filled TLB
/// must keep the IT state the first page's block stored, or the instructions
/// on the second page run unconditionally and the guest exits 2 — as it did
/// when the TLB fill of a fetch cleared the IT state too.
#[test]
fn an_it_block_across_a_code_page_boundary_keeps_its_condition() {
    let image = ElfImage::load(&guest("cortex-m4", "it-block.elf")).unwrap();
    let pages = image.symbol("it_across_pages").unwrap().address;
    assert_eq!(
        (pages + 8) % 4096,
        0,
        "the guest no longer puts its IT block across a page boundary"
    );
    for stock in [false, true] {
        let run = run_untraced(
            &image,
            UntracedOptions {
                stock,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(run.exit_code, 0, "stock Unicorn TLB: {stock}");
    }
}

/// A time limit far away must not stop a run while other threads create
/// engines: Unicorn's own timeout reads a clock that each new engine briefly
/// turns from monotonic to wall time, which made `verify` report "did not
/// exit within 8000 s" after 8 s.
#[test]
fn a_distant_time_limit_holds_while_other_threads_create_engines() {
    let suite = ElfImage::load(&guest("cortex-m4", "suite.elf")).unwrap();
    let job = Job {
        spec: LayerSpec::parse("op=relu,dtype=f32,input=1x4x4x3").unwrap(),
        seed: 1,
    };
    let done = std::sync::atomic::AtomicBool::new(false);
    let started = Instant::now();
    let err = std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let options = UntracedOptions {
                    job: Some(&job),
                    ..Default::default()
                };
                assert_eq!(run_untraced(&suite, options).unwrap().exit_code, 0);
            }
        });
        let err = spin_until(Duration::from_secs(3));
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        err
    });
    assert!(matches!(err, TraceError::TimeLimit { .. }), "{err}");
    assert!(
        started.elapsed() >= Duration::from_secs(3),
        "stopped after {:?}, before its limit",
        started.elapsed()
    );
}

/// The error of the Cortex-M4 guest that never exits, run untraced with
/// `time_limit`.
fn spin_until(time_limit: Duration) -> TraceError {
    let image = ElfImage::load(&guest("cortex-m4", "spin.elf")).unwrap();
    let options = UntracedOptions {
        time_limit: Some(time_limit),
        ..Default::default()
    };
    run_untraced(&image, options).unwrap_err()
}

/// A memtrace.h guest whose `main` calls `park`, a `for (;;);` (a `b .`
/// at -O2), built against the harness's Cortex-M4 run-time into `dir`.
fn parking_guest(dir: &std::path::Path) -> std::path::PathBuf {
    let harness = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../harness-c");
    let source = dir.join("park.c");
    std::fs::write(
        &source,
        "#include \"memtrace.h\"\n\
         __attribute__((noinline)) void park(void) {\n\
             for (;;) {\n\
             }\n\
         }\n\
         int main(void) {\n\
             park();\n\
             return 0;\n\
         }\n",
    )
    .unwrap();
    let elf = dir.join("park.elf");
    let status = std::process::Command::new("arm-none-eabi-gcc")
        .args([
            "-mcpu=cortex-m4",
            "-mthumb",
            "-mfloat-abi=hard",
            "-mfpu=fpv4-sp-d16",
        ])
        .args(["-O2", "-g", "-ffreestanding", "-nostdlib", "-static"])
        .arg(format!("-I{}", harness.join("include").display()))
        .arg(format!("-L{}", harness.join("build/cortex-m4").display()))
        .args(["-T", "memtrace.ld"])
        .arg(&source)
        .args(["-lmemtrace_rt", "-lgcc", "-o"])
        .arg(&elf)
        .status()
        .expect("arm-none-eabi-gcc runs");
    assert!(status.success(), "building park.c");
    elf
}

#[test]
fn a_branch_to_itself_stops_a_run_without_hooks_at_once_not_at_its_time_limit() {
    let dir = std::env::temp_dir().join(format!("memtrace-park-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let image = ElfImage::load(&parking_guest(&dir)).unwrap();
    let started = Instant::now();
    let err = run_untraced(
        &image,
        UntracedOptions {
            time_limit: Some(Duration::from_secs(60)),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert!(matches!(err, TraceError::LoopsForever { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("the program loops forever at pc 0x"),
        "{text}"
    );
    assert!(
        text.contains("`park` (") && text.contains("park.c:3)"),
        "{text}"
    );
    assert!(text.contains("called from `main`"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}
