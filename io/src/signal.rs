//! The crate's one signal handler: on SIGINT, SIGTERM or SIGHUP it runs the
//! clean-ups registered with [`on_signal`] — unfinished outputs
//! ([`crate::output`]), private directories and their children
//! ([`crate::private_dir`]) — and then ends the process the way the signal
//! would have. It knows neither: each registers its own clean-up.

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

fn install() {
    HANDLER.call_once(|| {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) else {
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
                    let _ = signal_hook::low_level::emulate_default_handler(signal);
                    // A signal whose default is not to terminate: exit as
                    // the shell would report it.
                    std::process::exit(128 + signal);
                }
            });
    });
}
