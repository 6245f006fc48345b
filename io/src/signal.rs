//! The crate's one signal handler: on any signal sent to end the process
//! ([`ENDING_SIGNALS`]: SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2,
//! SIGALRM, SIGVTALRM, SIGPROF, SIGXCPU, SIGXFSZ, SIGABRT, SIGIO, SIGPWR,
//! SIGSTKFLT and the real-time signals) it runs the clean-ups registered with
//! [`on_signal`] — unfinished outputs ([`crate::output`]), private
//! directories and their children ([`crate::private_dir`]) — and then ends
//! the process the way the signal would have: the default disposition is
//! restored and the signal raised again, so the parent sees death by that
//! signal. It knows neither: each registers its own clean-up.
//!
//! Not handled: SIGKILL and SIGSTOP (they cannot be); the faults a bug
//! raises in the faulting thread (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP,
//! SIGSYS: returning from their handler would fault again); and SIGPIPE,
//! which Rust ignores from the start, so that a write to a closed pipe is an
//! `EPIPE` error the command ends on quietly (`memtrace ... | head`) with
//! its own clean-up — a `kill -PIPE` therefore does nothing.

use std::sync::{Mutex, Once};

static CLEANUPS: Mutex<Vec<fn()>> = Mutex::new(Vec::new());
static HANDLER: Once = Once::new();

/// Runs `cleanup` when the process is interrupted. The caller registers it
/// once (behind its own `Once`). If the handler cannot be installed,
/// nothing runs; only an interrupted run may then leave files behind.
pub(crate) fn on_signal(cleanup: fn()) {
    install();
    CLEANUPS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(cleanup);
}

/// The signals whose default action ends the process and that someone
/// sends to end it (see the module docs for those left out).
pub(crate) const ENDING_SIGNALS: &[libc::c_int] = &[
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGALRM,
    libc::SIGVTALRM,
    libc::SIGPROF,
    libc::SIGXCPU,
    libc::SIGXFSZ,
    libc::SIGABRT,
    #[cfg(any(target_os = "linux", target_os = "android"))]
    libc::SIGIO,
    #[cfg(any(target_os = "linux", target_os = "android"))]
    libc::SIGPWR,
    #[cfg(any(target_os = "linux", target_os = "android"))]
    libc::SIGSTKFLT,
];

/// [`ENDING_SIGNALS`] and the real-time signals libc leaves to programs
/// (their default action ends the process too).
fn handled_signals() -> Vec<libc::c_int> {
    let mut all = ENDING_SIGNALS.to_vec();
    #[cfg(any(target_os = "linux", target_os = "android"))]
    all.extend(libc::SIGRTMIN()..=libc::SIGRTMAX());
    all
}

fn install() {
    HANDLER.call_once(|| {
        let Ok(mut signals) = signal_hook::iterator::Signals::new(handled_signals()) else {
            return;
        };
        let _ = std::thread::Builder::new()
            .name("memtrace-cleanup".into())
            .spawn(move || {
                if let Some(signal) = signals.forever().next() {
                    // Left locked: the process ends right after.
                    let cleanups = CLEANUPS.lock().unwrap_or_else(|e| e.into_inner());
                    for cleanup in cleanups.iter() {
                        cleanup();
                    }
                    end_by(signal);
                }
            });
    });
}

/// Ends the process by `signal` with its default disposition, as if no
/// handler had been installed; should that fail, exits as a shell reports a
/// death by signal (128 + its number).
fn end_by(signal: libc::c_int) -> ! {
    // SAFETY: plain system calls; the sigset is initialised by sigemptyset
    // before use.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, signal);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(signal);
    }
    std::process::exit(128 + signal)
}
