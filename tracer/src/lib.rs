//! memtrace tracer: runs a guest ELF in Unicorn and turns its accesses to the
//! buffers it declares through the memtrace protocol (docs/protocol.md) into an
//! event stream, which it feeds to the caller's analyses ([`trace`]).
//!
//! It knows ELF ([`elf`]), DWARF ([`debuginfo`]), the emulator (`arch`,
//! `machine`, [`session`]) and the guest protocol (from `memtrace-abi`), and
//! nothing of what the events mean: O_s, models and planners are the
//! analyzer's.

mod arch;
pub mod attributes;
pub mod baseline;
pub mod clock;
pub mod debuginfo;
pub mod elf;
pub mod engine;
pub mod error;
mod machine;
mod memcheck;
pub mod program;
mod qemu;
mod record;
pub mod semihosting;
pub mod session;
mod split;
mod stream;
mod unwind;

pub use elf::{Arch, ElfImage};
pub use engine::{Engine, EngineKind, QemuConfig};
pub use error::{Result, TraceError};
pub use machine::Job;
pub use session::{AccessPath, ClockMode, Progress, RunSummary, TraceOptions};
pub use stream::trace;
