//! Subcommands.

pub mod bench;
pub mod common;
pub mod run;
