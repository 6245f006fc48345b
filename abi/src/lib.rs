//! memtrace's guest ABI and event contract, shared by the tracer (which
//! produces events) and the analyzer (which consumes them) — and by nothing
//! that knows the emulator.
//!
//! * [`protocol`]: the `memtrace_port` wire format of `harness-c/include/memtrace.h`;
//! * the vocabulary every layer of the stack shares: [`op`] (operators),
//!   [`dtype`] (element types), [`activation`] (fused activations) and
//!   [`geometry`] (padding, output sizes);
//! * [`spec`]: layer configurations and the job mailbox of `memtrace_job.h`;
//! * [`symbols`]: the guest symbols the host finds by name;
//! * [`selection`]: how `--layer` names a layer (name, index, `index:op`);
//! * [`runner`]: the mailbox of the TFLM runner guests (`memtrace_tflm.h`);
//! * [`event`]: the event stream the tracer sends;
//! * [`analysis`]: the trait every consumer of that stream implements.
//!
//! The C headers and these modules are checked against each other by
//! `abi/tests/headers.rs`; `docs/protocol.md` is the written specification.

/// Defines constants mirrored from a C header, named exactly as there, and a
/// table of them by name for `abi/tests/headers.rs` to compare with the
/// header. `$ty` is the constants' type.
macro_rules! c_constants {
    ($(#[$meta:meta])* $table:ident: $ty:ty { $($name:ident = $value:expr),* $(,)? }) => {
        $(
            #[doc = concat!("`", stringify!($name), "` of the C header.")]
            pub const $name: $ty = $value;
        )*
        $(#[$meta])*
        pub const $table: &[(&str, i64)] = &[$((stringify!($name), $value as i64)),*];
    };
}

pub mod activation;
pub mod analysis;
pub mod dtype;
pub mod event;
pub mod geometry;
pub mod op;
pub mod protocol;
pub mod runner;
pub mod selection;
pub mod spec;
pub mod symbols;
pub mod target;

pub use activation::Activation;
pub use analysis::Analysis;
pub use dtype::Dtype;
pub use event::{AccessKind, Buffer, Event, LayerInfo, Message, OutputDigest, Role, StrayWrite};
pub use geometry::{out_size, Padding, Shape};
pub use op::OpKind;
pub use spec::LayerSpec;
pub use target::{AccessPath, Arch, EngineKind, Kernels, Runtime};

/// A name that is not in a vocabulary (an op, a dtype, ...), with the names
/// that are.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} `{name}` (known: {known})")]
pub struct UnknownName {
    what: &'static str,
    name: String,
    known: String,
}

impl UnknownName {
    pub(crate) fn new(what: &'static str, name: &str, known: &[&str]) -> Self {
        UnknownName {
            what,
            name: name.to_owned(),
            known: known.join(", "),
        }
    }
}
