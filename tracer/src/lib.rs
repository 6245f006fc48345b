//! memtrace tracer: runs a guest ELF in Unicorn and turns its accesses to the
//! buffers it declares through the memtrace protocol (docs/protocol.md) into an
//! event stream for the analyzer.
//!
//! Without the `emulator` feature the crate is only the contract shared with the
//! analyzer: [`event`] and [`spec`].

pub mod event;
pub mod program;
pub mod spec;

#[cfg(feature = "emulator")]
pub mod baseline;
#[cfg(feature = "emulator")]
pub mod clock;
#[cfg(feature = "emulator")]
pub mod debuginfo;
#[cfg(feature = "emulator")]
pub mod elf;
#[cfg(feature = "emulator")]
pub mod error;
#[cfg(feature = "emulator")]
pub mod protocol;
#[cfg(feature = "emulator")]
pub mod session;

pub use event::{AccessKind, Buffer, Event, LayerInfo, Message, Role};
pub use spec::{LayerSpec, Op};

#[cfg(feature = "emulator")]
pub use elf::{Arch, ElfImage};
#[cfg(feature = "emulator")]
pub use error::TraceError;
#[cfg(feature = "emulator")]
pub use session::{run, AccessPath, ClockMode, EventSink, Job, Progress, RunSummary, TraceOptions};
