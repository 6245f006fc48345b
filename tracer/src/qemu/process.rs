//! QEMU as a child process: its command line, the pipe and memory-file
//! descriptors it inherits, and its end (killed and reaped whatever
//! happens; it dies with memtrace).

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::wire::Wire;
use super::{fault_handlers, QemuConfig};
use crate::elf::ElfImage;
use crate::error::TraceError;

/// The plugin's descriptors in QEMU: records out, replies in.
const RECORDS_FD: RawFd = 3;
const REPLIES_FD: RawFd = 4;
/// The first descriptor of the memory files with the guest's inputs.
const FIRST_INPUT_FD: RawFd = 5;

/// Most descriptors QEMU inherits (the pipe's two and the memory files).
const MAX_INHERITED: usize = 64;

/// How long QEMU may take to exit once told to stop.
const EXIT_WAIT: Duration = Duration::from_secs(2);

/// What a run asks QEMU for.
pub(super) struct Launch<'a> {
    pub(super) config: &'a QemuConfig,
    pub(super) image: &'a ElfImage,
    pub(super) port: u64,
    pub(super) budget: u64,
    /// The stack's guard `[start, end)`.
    pub(super) guard: Option<(u64, u64)>,
    /// Bytes written into guest memory before the first instruction.
    pub(super) writes: &'a [(u64, Vec<u8>)],
}

/// A running QEMU.
pub(super) struct Qemu {
    child: Option<Child>,
    stderr: Option<JoinHandle<String>>,
}

/// How QEMU ended.
pub(super) struct Ended {
    success: bool,
    stderr: String,
}

impl Ended {
    /// QEMU's own complaint, when it failed (a plugin it could not load, a
    /// machine it does not have).
    pub(super) fn stderr_error(&self) -> Option<String> {
        let text = self.stderr.trim();
        (!self.success || text.contains("plugin")).then(|| {
            format!(
                "QEMU stopped without the guest's exit: {}{}",
                if text.is_empty() {
                    "(no message)"
                } else {
                    text
                },
                if text.contains("plugin") {
                    format!(
                        "; memtrace's plugin needs QEMU 10 or later (plugin API {})",
                        super::PLUGIN_API
                    )
                } else {
                    String::new()
                }
            )
        })
    }
}

impl Qemu {
    /// Starts QEMU on `launch`, with the plugin's end of the pipe.
    pub(super) fn start(launch: &Launch<'_>) -> Result<(Qemu, Wire), TraceError> {
        let (records, plugin_out) = std::io::pipe().map_err(io("creating QEMU's pipe"))?;
        let (plugin_in, replies) = std::io::pipe().map_err(io("creating QEMU's pipe"))?;
        let blobs = memory_image(launch.image, launch.writes);
        let inputs: Vec<OwnedFd> = blobs
            .iter()
            .map(|(_, bytes)| memory_file(bytes))
            .collect::<Result<_, _>>()?;
        if inputs.len() + 2 > MAX_INHERITED {
            return Err(TraceError::Emulator(format!(
                "{} memory blobs: the QEMU engine takes at most {}",
                inputs.len(),
                MAX_INHERITED - 2
            )));
        }
        let mut command = command_line(launch, &blobs);
        let mut inherited: Vec<(RawFd, RawFd)> = vec![
            (plugin_out.as_raw_fd(), RECORDS_FD),
            (plugin_in.as_raw_fd(), REPLIES_FD),
        ];
        for (i, fd) in inputs.iter().enumerate() {
            inherited.push((fd.as_raw_fd(), FIRST_INPUT_FD + i as RawFd));
        }
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // SAFETY: between fork and exec only async-signal-safe calls
        // (prctl, dup2) on descriptors that stay open in the parent.
        unsafe {
            command.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                // Each source is first copied above every target, so moving
                // one into place never closes another still to be moved.
                let mut copies = [0 as RawFd; MAX_INHERITED];
                for (copy, &(from, _)) in copies.iter_mut().zip(&inherited) {
                    *copy = libc::fcntl(from, libc::F_DUPFD, 1000);
                    if *copy < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                for (&copy, &(_, to)) in copies.iter().zip(&inherited) {
                    if libc::dup2(copy, to) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let mut child = command.spawn().map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                TraceError::Emulator(format!(
                    "{} not found: the QEMU engine needs qemu-system-arm 10 or later \
                     (Debian: add bookworm-backports, then `apt-get install -t bookworm-backports qemu-system-arm`; \
                     `make test` does both)",
                    launch.config.qemu.display()
                ))
            } else {
                TraceError::Emulator(format!("starting {}: {e}", launch.config.qemu.display()))
            }
        })?;
        drop((plugin_out, plugin_in, inputs));
        let stderr = child.stderr.take().map(|mut pipe| {
            std::thread::spawn(move || {
                let mut text = String::new();
                let _ = pipe.read_to_string(&mut text);
                text
            })
        });
        let qemu = Qemu {
            child: Some(child),
            stderr,
        };
        Ok((qemu, Wire::new(records, replies)))
    }

    /// Waits for QEMU to exit (killing it after [`EXIT_WAIT`]).
    pub(super) fn finish(mut self) -> Ended {
        let success = self
            .child
            .take()
            .is_some_and(|child| reap(child, EXIT_WAIT));
        let stderr = self
            .stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        Ended { success, stderr }
    }
}

impl Drop for Qemu {
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            reap(child, Duration::ZERO);
        }
    }
}

/// Waits up to `wait` for `child`, then kills it; whether it exited 0.
fn reap(mut child: Child, wait: Duration) -> bool {
    let until = Instant::now() + wait;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status.success(),
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(2)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
        }
    }
}

fn command_line(launch: &Launch<'_>, blobs: &[(u64, Vec<u8>)]) -> Command {
    let config = launch.config;
    let image = launch.image;
    let mut plugin = format!(
        "{},out={RECORDS_FD},in={REPLIES_FD},port={:#x},budget={}",
        config.plugin.display(),
        launch.port,
        launch.budget
    );
    if let Some(f) = image.symbol(memtrace_abi::symbols::SIGNAL) {
        plugin += &format!(
            ",signal={:#x}:{:#x}",
            f.address & !1,
            (f.address & !1) + f.size.max(1)
        );
    }
    if let Some((start, end)) = launch.guard.filter(|(s, e)| s < e) {
        plugin += &format!(",guard={start:#x}:{end:#x}");
    }
    for handler in fault_handlers(image) {
        plugin += &format!(",fault={handler:#x}");
    }
    let mut command = Command::new(&config.qemu);
    command
        .args(["-machine", &config.machine, "-cpu", &config.cpu])
        .args(["-nographic", "-monitor", "none", "-serial", "none"])
        .args(["-semihosting-config", "enable=on,target=native"])
        .arg("-name")
        .arg(format!("memtrace:{}", image.path.display()))
        .args(["-plugin", &plugin]);
    for (i, (address, _)) in blobs.iter().enumerate() {
        let fd = FIRST_INPUT_FD + i as RawFd;
        command.args([
            "-device",
            &format!("loader,file=/proc/self/fd/{fd},addr={address:#x},force-raw=on"),
        ]);
    }
    command
}

/// The guest's memory before its first instruction, as `(address, bytes)`
/// blobs for QEMU's loader: the segments' file bytes with the host's
/// inputs written over them and beside them. (QEMU's own ELF loader would
/// claim each segment's zero-filled tail, where the inputs go, and refuse a
/// second blob there; the rest of the board's RAM starts zeroed.) The
/// board boots from the vector table in the blob at 0.
fn memory_image(image: &ElfImage, writes: &[(u64, Vec<u8>)]) -> Vec<(u64, Vec<u8>)> {
    let mut blobs: Vec<(u64, Vec<u8>)> = image
        .segments
        .iter()
        .filter(|s| !s.data.is_empty())
        .map(|s| (s.address, s.data.clone()))
        .collect();
    for (address, bytes) in writes {
        blobs = write_over(blobs, *address, bytes);
    }
    blobs.sort_by_key(|(address, _)| *address);
    blobs
}

/// `blobs` with `bytes` written at `address`: every blob it meets or
/// touches and it merged into one.
fn write_over(blobs: Vec<(u64, Vec<u8>)>, address: u64, bytes: &[u8]) -> Vec<(u64, Vec<u8>)> {
    let end = address + bytes.len() as u64;
    let (meet, mut rest): (Vec<_>, Vec<_>) = blobs
        .into_iter()
        .partition(|(a, b)| *a <= end && address <= a + b.len() as u64);
    let start = meet
        .iter()
        .map(|(a, _)| *a)
        .min()
        .unwrap_or(address)
        .min(address);
    let stop = meet
        .iter()
        .map(|(a, b)| a + b.len() as u64)
        .max()
        .unwrap_or(end)
        .max(end);
    let mut merged = vec![0u8; (stop - start) as usize];
    for (a, b) in &meet {
        let at = (a - start) as usize;
        merged[at..at + b.len()].copy_from_slice(b);
    }
    let at = (address - start) as usize;
    merged[at..at + bytes.len()].copy_from_slice(bytes);
    rest.push((start, merged));
    rest
}

/// An anonymous memory file holding `bytes`, for QEMU's loader.
fn memory_file(bytes: &[u8]) -> Result<OwnedFd, TraceError> {
    // SAFETY: a NUL-terminated name; the descriptor is owned from here on.
    let fd = unsafe { libc::memfd_create(c"memtrace-input".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io("creating a memory file")(std::io::Error::last_os_error()));
    }
    // SAFETY: `fd` was just created and nothing else owns it.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut file = std::fs::File::from(owned);
    std::io::Write::write_all(&mut file, bytes).map_err(io("writing a memory file"))?;
    Ok(file.into())
}

fn io(what: &'static str) -> impl Fn(std::io::Error) -> TraceError {
    move |e| TraceError::Emulator(format!("{what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::write_over;

    #[test]
    fn writes_merge_with_the_blobs_they_meet_and_win() {
        let blobs = vec![(0x100, vec![1u8; 16]), (0x200, vec![2u8; 4])];
        // Over the first blob's tail and past its end.
        let mut out = write_over(blobs, 0x10c, &[9; 8]);
        out.sort();
        assert_eq!(out[0].0, 0x100);
        assert_eq!(out[0].1.len(), 0x14);
        assert_eq!(&out[0].1[..12], &[1; 12]);
        assert_eq!(&out[0].1[12..], &[9; 8]);
        assert_eq!(out[1], (0x200, vec![2; 4]));
        // Apart from every blob: a blob of its own.
        let out = write_over(out, 0x300, &[7; 2]);
        assert_eq!(out.len(), 3);
        assert!(out.contains(&(0x300, vec![7, 7])));
    }
}
