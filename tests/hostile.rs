//! The third hostile round: each defect a campaign against the real-TFLM
//! runtime found, pinned by a regression test, and each class of input that
//! found one kept as a small seeded campaign that must report no
//! wrong-but-accepted result, abort, hang, leftover file or file touched
//! outside what memtrace owns.
//!
//! One module per area, so the tests read as a specification of that area:
//! the output oracle, plan files and the arena, models TFLM accepts, and the
//! build, the command line and the trace cache.

mod common;

mod hostile {
    pub mod build_cli;
    pub mod check_calls;
    pub mod check_programs;
    pub mod ended;
    pub mod json;
    pub mod models;
    pub mod oracle;
    pub mod outputs;
    pub mod plans;
    pub mod regress_scratch;
    pub mod regress_ut;
}
