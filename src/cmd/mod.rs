//! Subcommands.

pub mod bench;
pub mod common;
pub mod regress;
pub mod run;
pub mod sweep;
pub mod table;
pub mod validate;
