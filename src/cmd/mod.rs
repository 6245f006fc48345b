//! Subcommands.

pub mod bench;
pub mod common;
pub mod ladder;
pub mod plan;
pub mod regress;
pub mod run;
pub mod sweep;
pub mod table;
pub mod validate;
pub mod verify;
pub mod zoo;
