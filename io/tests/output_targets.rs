//! Outputs over special files, symbolic links and FIFOs; temporary files on
//! errors, panics and signals; outputs that are inputs.

use std::io::{Read, Write};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use memtrace_io::output::{
    ensure_distinct, output_target, registered_temporaries, render_atomically, same_file,
    write_atomically, OutputTarget,
};
use memtrace_io::WriteError;

/// A fresh directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("memtrace-out-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Names in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn no_temporaries_under(dir: &Path) {
    let left: Vec<_> = registered_temporaries()
        .into_iter()
        .filter(|p| p.starts_with(dir))
        .collect();
    assert!(left.is_empty(), "still registered: {left:?}");
}

#[test]
fn dev_null_stays_a_character_device() {
    assert_eq!(
        output_target(Path::new("/dev/null")).unwrap(),
        OutputTarget::Stream("/dev/null".into())
    );
    write_atomically(Path::new("/dev/null"), |w| {
        Ok::<_, WriteError>(w.write_all(b"results\n")?)
    })
    .unwrap();
    render_atomically(Path::new("/dev/null"), |tmp| {
        Ok::<_, WriteError>(std::fs::write(tmp, b"picture bytes")?)
    })
    .unwrap();
    let meta = std::fs::symlink_metadata("/dev/null").unwrap();
    assert!(meta.file_type().is_char_device(), "/dev/null was replaced");
    // Nothing was created next to it.
    let strays: Vec<_> = listing(Path::new("/dev"))
        .into_iter()
        .filter(|n| n.contains(".tmp"))
        .collect();
    assert!(strays.is_empty(), "{strays:?}");
}

#[test]
fn a_symbolic_link_is_written_through_and_stays_a_link() {
    let dir = scratch("symlink");
    let real = dir.join("real.json");
    std::fs::write(&real, "old").unwrap();
    let link = dir.join("latest.json");
    std::os::unix::fs::symlink("real.json", &link).unwrap();
    write_atomically(&link, |w| Ok::<_, WriteError>(w.write_all(b"new")?)).unwrap();
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read_to_string(&real).unwrap(), "new");
    assert_eq!(listing(&dir), ["latest.json", "real.json"]);
    // A dangling link is an error naming the link and its target.
    let dangling = dir.join("dangling.json");
    std::os::unix::fs::symlink("missing.json", &dangling).unwrap();
    let e = write_atomically(&dangling, |w| Ok::<_, WriteError>(w.write_all(b"x")?))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("dangling.json") && e.contains("missing.json"),
        "{e}"
    );
    assert_eq!(listing(&dir), ["dangling.json", "latest.json", "real.json"]);
    no_temporaries_under(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_fifo_is_opened_and_written_not_replaced() {
    let dir = scratch("fifo");
    let fifo = dir.join("pipe");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let mut s = String::new();
            std::fs::File::open(&fifo)
                .unwrap()
                .read_to_string(&mut s)
                .unwrap();
            s
        })
    };
    write_atomically(&fifo, |w| {
        Ok::<_, WriteError>(w.write_all(b"through the pipe")?)
    })
    .unwrap();
    assert_eq!(reader.join().unwrap(), "through the pipe");
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
    // A picture too (rendered elsewhere, then copied in).
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let mut b = Vec::new();
            std::fs::File::open(&fifo)
                .unwrap()
                .read_to_end(&mut b)
                .unwrap();
            b
        })
    };
    render_atomically(&fifo, |tmp| {
        Ok::<_, WriteError>(std::fs::write(tmp, b"\x89PNG")?)
    })
    .unwrap();
    assert_eq!(reader.join().unwrap(), b"\x89PNG");
    assert_eq!(listing(&dir), ["pipe"]);
    no_temporaries_under(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn directories_and_sockets_are_refused_by_name() {
    let dir = scratch("refuse");
    let e = write_atomically(&dir, |w| Ok::<_, WriteError>(w.write_all(b"x")?))
        .unwrap_err()
        .to_string();
    assert!(e.contains("a directory"), "{e}");
    let sock = dir.join("sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let e = write_atomically(&sock, |w| Ok::<_, WriteError>(w.write_all(b"x")?))
        .unwrap_err()
        .to_string();
    assert!(e.contains("a socket") && e.contains("sock"), "{e}");
    assert_eq!(listing(&dir), ["sock"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_error_or_panic_mid_write_leaves_no_temporary_file() {
    let dir = scratch("error");
    let out = dir.join("table.csv");
    let e = write_atomically(&out, |w| {
        w.write_all(&[b'x'; 100_000])?; // past the BufWriter: on disk
        Err(WriteError::Refused("the writer failed half-way".into()))
    })
    .unwrap_err();
    assert!(e.to_string().contains("half-way"));
    assert!(listing(&dir).is_empty(), "{:?}", listing(&dir));
    // An existing output is left as it was.
    std::fs::write(&out, "previous").unwrap();
    let _ = write_atomically(&out, |w| {
        w.write_all(&[b'y'; 100_000])?;
        Err(WriteError::Refused("again".into()))
    });
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "previous");
    let r = std::panic::catch_unwind(|| {
        let _ = write_atomically::<WriteError>(&out, |w| {
            w.write_all(&[b'z'; 100_000]).unwrap();
            panic!("writer panicked");
        });
    });
    assert!(r.is_err());
    let _ = render_atomically(&dir.join("p.png"), |tmp| {
        std::fs::write(tmp, [0u8; 10])?;
        Err(WriteError::Refused("render failed".into()))
    });
    assert_eq!(listing(&dir), ["table.csv"]);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "previous");
    no_temporaries_under(&dir);
    // And a successful write replaces it.
    write_atomically(&out, |w| Ok::<_, WriteError>(w.write_all(b"done")?)).unwrap();
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "done");
    assert_eq!(listing(&dir), ["table.csv"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Run as a child by `a_signal_removes_the_temporary_file`: starts writing
/// `MEMTRACE_CHILD_OUT` and never finishes.
#[test]
fn child_writer_that_hangs() {
    let Some(out) = std::env::var_os("MEMTRACE_CHILD_OUT") else {
        return; // only meaningful as a child
    };
    let _ = write_atomically::<WriteError>(Path::new(&out), |w| {
        w.write_all(b"partial")?;
        w.flush()?;
        std::thread::sleep(Duration::from_secs(60));
        Ok(())
    });
}

/// Run as a child with stdout captured: writes to `/dev/stdout`.
#[test]
fn child_writer_to_dev_stdout() {
    if std::env::var_os("MEMTRACE_CHILD_STDOUT").is_none() {
        return;
    }
    write_atomically(Path::new("/dev/stdout"), |w| {
        Ok::<_, WriteError>(w.write_all(b"@@through stdout@@")?)
    })
    .unwrap();
}

fn child(test: &str) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["--exact", test, "--nocapture", "--test-threads", "1"]);
    c
}

/// Every signal sent to end a process, by number and `kill` name: each
/// must remove the temporary file and still end the writer by itself.
fn ending_signals() -> Vec<(i32, String)> {
    let mut all: Vec<(i32, String)> = [
        (libc::SIGTERM, "TERM"),
        (libc::SIGINT, "INT"),
        (libc::SIGHUP, "HUP"),
        (libc::SIGQUIT, "QUIT"),
        (libc::SIGUSR1, "USR1"),
        (libc::SIGUSR2, "USR2"),
        (libc::SIGALRM, "ALRM"),
        (libc::SIGVTALRM, "VTALRM"),
        (libc::SIGPROF, "PROF"),
        (libc::SIGXCPU, "XCPU"),
        (libc::SIGXFSZ, "XFSZ"),
        (libc::SIGABRT, "ABRT"),
        (libc::SIGIO, "IO"),
        (libc::SIGPWR, "PWR"),
    ]
    .into_iter()
    .map(|(n, s)| (n, s.to_owned()))
    .collect();
    all.push((libc::SIGRTMIN() + 3, (libc::SIGRTMIN() + 3).to_string()));
    all
}

/// Starts `child_writer_that_hangs` on `out` (without core dumps: several
/// ending signals dump core by default) and waits until its temporary file
/// holds bytes; the child and the temporary file's name.
fn hanging_writer(dir: &Path, out: &Path) -> (std::process::Child, String) {
    use std::os::unix::process::CommandExt;
    let mut cmd = child("child_writer_that_hangs");
    cmd.env("MEMTRACE_CHILD_OUT", out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: setrlimit is async-signal-safe and touches only the child.
    unsafe {
        cmd.pre_exec(|| {
            let none = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &none);
            Ok(())
        });
    }
    let mut proc = cmd.spawn().unwrap();
    let started = Instant::now();
    let tmp = loop {
        let found = listing(dir).into_iter().find(|n| {
            n.contains(".tmp") && std::fs::metadata(dir.join(n)).is_ok_and(|m| m.len() > 0)
        });
        if found.is_some() || started.elapsed() > Duration::from_secs(20) {
            break found;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let Some(tmp) = tmp else {
        let _ = proc.kill();
        let _ = proc.wait();
        panic!("no temporary file");
    };
    (proc, tmp)
}

#[test]
fn every_signal_that_ends_the_process_removes_the_temporary_file() {
    for (signal, name) in ending_signals() {
        let dir = scratch(&format!("signal-{name}"));
        let out = dir.join("events.parquet");
        let (mut proc, tmp) = hanging_writer(&dir, &out);
        assert!(tmp.starts_with(".events.parquet."), "{tmp}");
        // SAFETY: a plain kill of our own child, not yet reaped.
        assert_eq!(unsafe { libc::kill(proc.id() as i32, signal) }, 0);
        let status = proc.wait().unwrap();
        assert_eq!(status.signal(), Some(signal), "{name}: {status:?}");
        assert!(listing(&dir).is_empty(), "{name}: {:?}", listing(&dir));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn sigpipe_is_ignored_and_the_write_goes_on() {
    // Rust ignores SIGPIPE (a closed pipe is an EPIPE error instead): the
    // writer neither dies nor loses its temporary file, and a later TERM
    // still cleans up.
    let dir = scratch("signal-PIPE");
    let out = dir.join("events.parquet");
    let (mut proc, tmp) = hanging_writer(&dir, &out);
    // SAFETY: plain kills of our own child, not yet reaped.
    assert_eq!(unsafe { libc::kill(proc.id() as i32, libc::SIGPIPE) }, 0);
    std::thread::sleep(Duration::from_millis(300));
    assert!(proc.try_wait().unwrap().is_none(), "SIGPIPE ended it");
    assert_eq!(listing(&dir), [tmp]);
    assert_eq!(unsafe { libc::kill(proc.id() as i32, libc::SIGTERM) }, 0);
    let status = proc.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{status:?}");
    assert!(listing(&dir).is_empty(), "{:?}", listing(&dir));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Symbolic links to `canary` (and folders) at every name the old writer
/// could have chosen in this process: `.NAME.PID.N.tmp.EXT`.
fn plant_old_temporary_names(dir: &Path, name: &str, ext: &str, canary: &Path) -> usize {
    let pid = std::process::id();
    for n in 0..256 {
        let planted = dir.join(format!(".{name}.{pid}.{n}.tmp{ext}"));
        if n % 8 == 7 {
            std::fs::create_dir(&planted).unwrap();
        } else {
            std::os::unix::fs::symlink(canary, &planted).unwrap();
        }
    }
    256
}

#[test]
fn a_symlink_at_the_temporary_name_is_never_followed() {
    let dir = scratch("planted-temporary");
    let outside = scratch("planted-temporary-outside");
    let canary = outside.join("canary");
    std::fs::write(&canary, b"not memtrace's").unwrap();
    let before = std::fs::metadata(&canary).unwrap().modified().unwrap();
    let planted = plant_old_temporary_names(&dir, "table.csv", ".csv", &canary)
        + plant_old_temporary_names(&dir, "p.png", ".png", &canary);
    let out = dir.join("table.csv");
    write_atomically(&out, |w| Ok::<_, WriteError>(w.write_all(b"results")?)).unwrap();
    render_atomically(&dir.join("p.png"), |tmp| {
        Ok::<_, WriteError>(std::fs::write(tmp, b"\x89PNG")?)
    })
    .unwrap();
    let streamed = memtrace_io::output::AtomicFile::create(&out).unwrap();
    streamed.handle().unwrap().write_all(b"streamed").unwrap();
    streamed.commit().unwrap();
    assert_eq!(std::fs::read(&canary).unwrap(), b"not memtrace's");
    assert_eq!(
        std::fs::metadata(&canary).unwrap().modified().unwrap(),
        before
    );
    // The outputs are regular files of their own, the planted names as
    // they were, nothing else.
    for (path, bytes) in [(&out, &b"streamed"[..]), (&dir.join("p.png"), b"\x89PNG")] {
        let meta = std::fs::symlink_metadata(path).unwrap();
        assert!(meta.file_type().is_file(), "{path:?} is {meta:?}");
        assert_eq!(std::fs::read(path).unwrap(), bytes);
    }
    assert_eq!(listing(&dir).len(), planted + 2, "{:?}", listing(&dir));
    assert_eq!(listing(&outside), ["canary"]);
    no_temporaries_under(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&outside).unwrap();
}

#[test]
fn the_writability_probe_creates_exclusively_and_leaves_nothing() {
    let dir = scratch("probe");
    let outside = scratch("probe-outside");
    let canary = outside.join("canary");
    std::fs::write(&canary, b"keep").unwrap();
    std::os::unix::fs::symlink(
        &canary,
        dir.join(format!(".memtrace-probe-{}", std::process::id())),
    )
    .unwrap();
    memtrace_io::output::probe_writable(&dir.join("out.json")).unwrap();
    assert_eq!(std::fs::read(&canary).unwrap(), b"keep");
    assert_eq!(listing(&dir).len(), 1, "{:?}", listing(&dir));
    // A folder that takes no files is an error naming the output.
    use std::os::unix::fs::PermissionsExt;
    let ro = dir.join("ro");
    std::fs::create_dir(&ro).unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o500)).unwrap();
    let writable = std::fs::File::create(ro.join("x")).is_ok(); // root writes anyway
    let _ = std::fs::remove_file(ro.join("x"));
    let probed = memtrace_io::output::probe_writable(&ro.join("out.json"));
    assert_eq!(probed.is_ok(), writable, "{probed:?}");
    if let Err(e) = probed {
        assert!(e.to_string().contains("out.json"), "{e}");
    }
    assert!(listing(&ro).is_empty(), "{:?}", listing(&ro));
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&outside).unwrap();
}

#[test]
fn dev_stdout_is_written_through_to_whatever_stdout_is() {
    // Captured: stdout is a pipe.
    let out = child("child_writer_to_dev_stdout")
        .env("MEMTRACE_CHILD_STDOUT", "1")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("@@through stdout@@"));
    // Redirected to a regular file: the file gets it and is not replaced.
    let dir = scratch("stdout");
    let file = dir.join("redirected.txt");
    let handle = std::fs::File::create(&file).unwrap();
    let status = child("child_writer_to_dev_stdout")
        .env("MEMTRACE_CHILD_STDOUT", "1")
        .stdout(handle.try_clone().unwrap())
        .status()
        .unwrap();
    assert!(status.success());
    use std::os::unix::fs::MetadataExt;
    let before = handle.metadata().unwrap().ino();
    assert_eq!(std::fs::metadata(&file).unwrap().ino(), before, "replaced");
    assert!(std::fs::read_to_string(&file)
        .unwrap()
        .contains("@@through stdout@@"));
    assert_eq!(listing(&dir), ["redirected.txt"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_output_that_is_an_input_is_recognised() {
    let dir = scratch("same");
    let input = dir.join("model.tflite");
    std::fs::write(&input, "model").unwrap();
    let other = dir.join("other.tflite");
    std::fs::write(&other, "model").unwrap();
    let hard = dir.join("hard.tflite");
    std::fs::hard_link(&input, &hard).unwrap();
    let soft = dir.join("soft.tflite");
    std::os::unix::fs::symlink(&input, &soft).unwrap();
    let dotted = dir.join(".").join("model.tflite");
    for alias in [&input, &hard, &soft, &dotted] {
        assert!(same_file(alias, &input), "{}", alias.display());
        let e = ensure_distinct(alias, &[&other, &input])
            .unwrap_err()
            .to_string();
        assert!(e.contains("refusing"), "{e}");
    }
    // Same contents is not the same file; a new output is never an input.
    assert!(!same_file(&other, &input));
    ensure_distinct(&other, &[&input]).unwrap();
    ensure_distinct(&dir.join("new.tflite"), &[&input]).unwrap();
    ensure_distinct(&input, &[Path::new("zoo:mobilenet")]).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}
