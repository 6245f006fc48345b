//! Outcome counts of one target, and running a target in-process under
//! `catch_unwind` and a time limit (a panic or a slow call is counted, not
//! propagated).

use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;
use std::time::Instant;

use crate::IN_PROCESS_LIMIT;

/// Outcome counts of one target.
#[derive(Clone, Default, Debug)]
pub(crate) struct Tally {
    pub(crate) inputs: usize,
    pub(crate) accepted: usize,
    pub(crate) clean_errors: usize,
    pub(crate) panics: usize,
    pub(crate) timeouts: usize,
    pub(crate) signals: usize,
    /// Exit codes other than 0, 1 (101 is counted as a panic).
    pub(crate) bad_exits: usize,
    /// Left files behind.
    pub(crate) leftovers: usize,
    pub(crate) replayed: usize,
    /// Exit 2 where a usage error is a clean outcome (argument combinations).
    pub(crate) usage_errors: usize,
    /// Inputs the live-overlap oracle (or another rule of the input's class)
    /// says must be refused.
    pub(crate) must_refuse: usize,
    /// Runs that broke their class's rule: accepted although the oracle said
    /// it must be refused, not a usage error though an option does nothing,
    /// a report naming a library whose code did not run.
    pub(crate) oracle_violations: usize,
    /// Plans `memtrace plan` made for a library, verified on that library.
    pub(crate) own_plans: usize,
    /// ... of which did not verify clean and bit-exact.
    pub(crate) own_clobbers: usize,
    pub(crate) failures: Vec<String>,
}

impl Tally {
    pub(crate) fn merge(&mut self, o: Tally) {
        self.inputs += o.inputs;
        self.accepted += o.accepted;
        self.clean_errors += o.clean_errors;
        self.panics += o.panics;
        self.timeouts += o.timeouts;
        self.signals += o.signals;
        self.bad_exits += o.bad_exits;
        self.leftovers += o.leftovers;
        self.replayed += o.replayed;
        self.usage_errors += o.usage_errors;
        self.must_refuse += o.must_refuse;
        self.oracle_violations += o.oracle_violations;
        self.own_plans += o.own_plans;
        self.own_clobbers += o.own_clobbers;
        self.failures.extend(o.failures);
    }

    pub(crate) fn finish(&self, target: &str, started: Instant) {
        println!(
            "fuzz {target}: {} inputs ({} fixtures replayed), {} accepted, {} clean errors, \
             {} usage errors, {} oracle violations ({} judged unsafe), {} of {} own-library \
             plans clobber, {} panics, {} timeouts, {} signals, {} bad exits, {} left files, \
             {:.1} s",
            self.inputs,
            self.replayed,
            self.accepted,
            self.clean_errors,
            self.usage_errors,
            self.oracle_violations,
            self.must_refuse,
            self.own_clobbers,
            self.own_plans,
            self.panics,
            self.timeouts,
            self.signals,
            self.bad_exits,
            self.leftovers,
            started.elapsed().as_secs_f64()
        );
        for f in self.failures.iter().take(20) {
            println!("  FAILURE {f}");
        }
        assert_eq!(
            (
                self.panics,
                self.timeouts,
                self.signals,
                self.bad_exits,
                self.leftovers,
                self.oracle_violations,
                self.own_clobbers
            ),
            (0, 0, 0, 0, 0, 0, 0),
            "fuzz {target}: failures (inputs kept under fixtures/fuzz/<target>/)"
        );
        assert_eq!(
            self.inputs,
            self.accepted + self.clean_errors + self.usage_errors
        );
    }
}

thread_local! {
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Panics inside the campaign are recorded, not printed (other panics, such
/// as a failing assertion, still print).
pub(crate) fn quiet_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let fuzzing = LAST_PANIC.with(|p| p.borrow().as_deref() == Some(""));
            if fuzzing {
                let msg = format!("{info}");
                LAST_PANIC.with(|p| *p.borrow_mut() = Some(msg));
            } else {
                default(info);
            }
        }));
    });
}

/// Runs `f` (Ok = accepted, Err = clean error) and counts what happened.
pub(crate) fn in_process(
    tally: &mut Tally,
    what: &str,
    f: impl FnOnce() -> Result<(), String>,
) -> bool {
    quiet_panics();
    tally.inputs += 1;
    LAST_PANIC.with(|p| *p.borrow_mut() = Some(String::new()));
    let started = Instant::now();
    let r = catch_unwind(AssertUnwindSafe(f));
    let msg = LAST_PANIC.with(|p| p.borrow_mut().take());
    let mut ok = true;
    match r {
        Ok(Ok(())) => tally.accepted += 1,
        Ok(Err(e)) => {
            tally.clean_errors += 1;
            if e.trim().is_empty() {
                tally
                    .failures
                    .push(format!("{what}: an empty error message"));
                tally.panics += 1;
                ok = false;
            }
        }
        Err(_) => {
            tally.panics += 1;
            tally
                .failures
                .push(format!("{what}: panic: {}", msg.unwrap_or_default()));
            ok = false;
        }
    }
    if started.elapsed() > IN_PROCESS_LIMIT {
        tally.timeouts += 1;
        tally
            .failures
            .push(format!("{what}: took {:?}", started.elapsed()));
        ok = false;
    }
    ok
}
