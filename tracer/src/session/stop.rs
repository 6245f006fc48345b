//! Stopping a run from another thread: a run whose clock runs beside it
//! (`ClockMode::Parallel`) has no budget of its own, so when its partner
//! fails (the budget ran out, the guest faulted) the partner stops it; and
//! an untraced run (`baseline.rs`) is stopped by its time limit.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use unicorn_engine::{uc_emu_stop, uc_engine, Unicorn};

/// The engine of a run in progress, as another thread sees it.
struct Engine(*mut uc_engine);

// SAFETY: the pointer is only used for `uc_emu_stop`, which Unicorn allows
// from any thread (its own `timeout` stops runs that way), and only while
// the run holds it attached, under the switch's lock.
unsafe impl Send for Engine {}

/// A stop request for one run, from any thread.
#[derive(Default)]
pub(crate) struct StopSwitch {
    requested: AtomicBool,
    engine: Mutex<Option<Engine>>,
}

/// A run attached to its switch; detaches when dropped.
pub(crate) struct Attached<'s>(&'s StopSwitch);

impl StopSwitch {
    /// Makes `uc`'s coming emulation stoppable; `None` when a stop was
    /// requested already (the run must not start).
    pub(crate) fn attach<D>(&self, uc: &Unicorn<'_, D>) -> Option<Attached<'_>> {
        let mut engine = self.engine.lock().unwrap_or_else(|e| e.into_inner());
        if self.requested.load(Ordering::SeqCst) {
            return None;
        }
        *engine = Some(Engine(uc.get_handle()));
        Some(Attached(self))
    }

    /// Stops the run and returns once it has ended, or at once when it
    /// has not started (it then never will).
    pub(crate) fn stop(&self) {
        self.requested.store(true, Ordering::SeqCst);
        loop {
            {
                let engine = self.engine.lock().unwrap_or_else(|e| e.into_inner());
                let Some(Engine(uc)) = engine.as_ref() else {
                    return;
                };
                // SAFETY: attached, so the engine is alive until it detaches,
                // which needs this lock.
                let _ = unsafe { uc_emu_stop(*uc) };
            }
            // A stop that arrives just before emulation starts is lost
            // (`uc_emu_start` clears it): ask again until the run has ended.
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// True when [`StopSwitch::stop`] was called.
    pub(crate) fn requested(&self) -> bool {
        self.requested.load(Ordering::SeqCst)
    }
}

impl Drop for Attached<'_> {
    fn drop(&mut self) {
        *self.0.engine.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}
