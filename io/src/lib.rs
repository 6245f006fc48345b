//! memtrace's file I/O, one copy for every crate: bounded reads of regular
//! files only ([`input`]), atomic writes of outputs ([`output`]) and the
//! private working directories of the child processes it starts
//! ([`private_dir`]); on an interrupt, one signal handler removes what both
//! leave unfinished (`signal`). Every file or folder memtrace names itself
//! gets an unpredictable name and is created exclusively, never through a
//! link (`unique`).
//!
//! It knows files, and nothing of ELF images, models or events: the tracer
//! reads guests through it, the model crate `.tflite` files, the analyzer and
//! the driver their tables, pictures and reports.

pub mod input;
pub mod output;
pub mod private_dir;
mod signal;
mod unique;

pub use input::ReadError;
pub use output::WriteError;
