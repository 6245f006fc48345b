//! One bounded run of a command, shared by the hostile modules: how it
//! ended (exited, killed by a signal, or killed at its deadline), its
//! output read back from files so that a full pipe never stalls it.

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How a command ended.
#[derive(Debug)]
pub(crate) enum Ended {
    /// Exited with this status and output.
    Exited(Output),
    /// Killed by a signal (an abort) or by the deadline (a hang).
    Killed { signal: Option<i32>, hung: bool },
}

/// Runs `cmd` to its end or `limit`, whichever comes first (then kills it).
pub(crate) fn run_for(mut cmd: Command, limit: Duration) -> Ended {
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = (dir.path().join("out"), dir.path().join("err"));
    let mut child = cmd
        .env("CI", "1")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .expect("memtrace starts");
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            if status.code().is_none() {
                return Ended::Killed {
                    signal: status.signal(),
                    hung: false,
                };
            }
            return Ended::Exited(Output {
                status,
                stdout: std::fs::read(&out).unwrap(),
                stderr: std::fs::read(&err).unwrap(),
            });
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return Ended::Killed {
                signal: None,
                hung: true,
            };
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
