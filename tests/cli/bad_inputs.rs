//! Hostile inputs through the real binary: huge or overlapping
//! ELF segments, special files as inputs, plans with sizes near 2^64. Each
//! must end quickly with exit status 1 and a one-line `error:` naming what
//! was wrong, never an abort, a panic or a hang.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{guest, path_str, stderr, tfmicro_model};

/// Runs `memtrace ARGS`, killing it after `limit`.
fn memtrace_within(args: &[&str], limit: Duration) -> (Output, Duration) {
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_memtrace"))
        .args(args)
        .env("CI", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("memtrace starts");
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("memtrace {args:?} still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    (child.wait_with_output().unwrap(), started.elapsed())
}

/// Asserts a clean failure: exit 1, one `error:` line containing `needles`.
fn clean_error(args: &[&str], limit: Duration, needles: &[&str]) {
    let (out, took) = memtrace_within(args, limit);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    assert!(err.starts_with("error: "), "{args:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: `{n}` not in: {err}");
    }
    eprintln!("{args:?}: {took:?}: {}", err.trim_end());
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("memtrace-bad-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A copy of `elf` with the `index`-th program header's p_memsz replaced.
fn with_memsz(elf: &Path, index: usize, memsz: u64, out: &Path) {
    let mut b = std::fs::read(elf).unwrap();
    let rd =
        |b: &[u8], at: usize, n: usize| (0..n).rev().fold(0u64, |v, i| (v << 8) | b[at + i] as u64);
    let is64 = b[4] == 2;
    let (phoff, entsize, at, width) = if is64 {
        (rd(&b, 0x20, 8) as usize, rd(&b, 0x36, 2) as usize, 40, 8)
    } else {
        (rd(&b, 0x1c, 4) as usize, rd(&b, 0x2a, 2) as usize, 20, 4)
    };
    let field = phoff + index * entsize + at;
    for i in 0..width {
        b[field + i] = (memsz >> (8 * i)) as u8;
    }
    std::fs::write(out, b).unwrap();
}

#[test]
fn huge_and_overlapping_segments_fail_fast_and_cleanly() {
    let dir = scratch("segments");
    let huge = dir.join("huge.elf");
    with_memsz(&guest("x86_64", "suite"), 2, 2_251_799_813_713_920, &huge);
    clean_error(
        &["run", path_str(&huge)],
        Duration::from_secs(20),
        &["huge.elf", "address space"],
    );
    let wide = dir.join("wide.elf");
    with_memsz(&guest("cortex-m4", "suite"), 0, 0xffff_fff0, &wide);
    clean_error(
        &["run", path_str(&wide)],
        Duration::from_secs(20),
        &["wide.elf", "0xfffffff0"],
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn special_files_are_refused_as_elf_and_tflite_inputs() {
    let limit = Duration::from_secs(20);
    clean_error(
        &["run", "/dev/zero"],
        limit,
        &["/dev/zero", "character device"],
    );
    clean_error(
        &["plan", "/dev/zero"],
        limit,
        &["/dev/zero", "character device"],
    );
    clean_error(
        &["verify", "/dev/zero"],
        limit,
        &["/dev/zero", "character device"],
    );
    let dir = scratch("fifo");
    for name in ["model.tflite", "kernel.elf"] {
        let fifo = dir.join(name);
        assert!(Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
    }
    // Nobody writes to them: opening one for reading would block forever.
    clean_error(
        &["plan", path_str(&dir.join("model.tflite"))],
        limit,
        &["model.tflite", "FIFO"],
    );
    clean_error(
        &["run", path_str(&dir.join("kernel.elf"))],
        limit,
        &["kernel.elf", "FIFO"],
    );
    clean_error(&["run", path_str(&dir)], limit, &["directory"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn plans_with_sizes_near_two_to_the_64_are_clean_errors() {
    let model = tfmicro_model("hello_world");
    let dir = scratch("plans");
    // A tensor the plan may place: the graph output.
    let tensor = "Identity";
    let cases = [
        (
            format!(
                r#"{{"tensors": [{{"name": "{tensor}", "offset": 0}}], "arena_bytes": {}}}"#,
                u64::MAX
            ),
            // Larger than the TFLM runner's arena (its linker script's).
            vec!["18446744073709551615", "runner's arena"],
        ),
        (
            format!(
                r#"{{"tensors": [{{"name": "{tensor}", "offset": {}}}]}}"#,
                u64::MAX
            ),
            vec!["`Identity`", "18446744073709551615"],
        ),
        (
            format!(
                r#"{{"tensors": [{{"name": "{tensor}", "offset": {}}}], "arena_bytes": 64}}"#,
                u64::MAX - 1
            ),
            vec!["`Identity`", "does not fit"],
        ),
    ];
    for (i, (json, needles)) in cases.iter().enumerate() {
        let plan = dir.join(format!("plan{i}.json"));
        std::fs::write(&plan, json).unwrap();
        let args = ["verify", path_str(&model), "--plan", path_str(&plan)];
        let needles: Vec<&str> = needles.iter().map(|s| &**s).collect();
        clean_error(&args, Duration::from_secs(60), &needles);
    }
    // The same file with a sane offset verifies (the tensor name is right).
    let plan = dir.join("sane.json");
    std::fs::write(
        &plan,
        format!(r#"{{"tensors": [{{"name": "{tensor}", "offset": 64}}]}}"#),
    )
    .unwrap();
    let (out, _) = memtrace_within(
        &["verify", path_str(&model), "--plan", path_str(&plan)],
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    std::fs::remove_dir_all(&dir).unwrap();
}
