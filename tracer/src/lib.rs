//! memtrace tracer: runs a guest ELF in Unicorn and turns its accesses to the
//! buffers it declares through the memtrace protocol into an event stream.
//!
//! Without the `emulator` feature the crate is only the contract shared with the
//! analyzer: [`event`] and [`spec`].

pub mod event;
pub mod spec;

pub use event::{AccessKind, Buffer, Event, LayerInfo, Message, Role};
pub use spec::{LayerSpec, Op};
