//! What the workflows share and that is neither a workflow nor the runtime:
//! errors, traced runs with a spinner and output checks (`common`), text
//! safe for a terminal, where a plan's O_s come from (`provenance`), which
//! library ran a layer (`attribution`), where a contract violation happened
//! (`violations`), TinySeg's transformation (`spill`), and what a command
//! answers (`outcome`). Nothing here imports the runtime or a workflow.

pub mod attribution;
pub mod common;
pub mod error;
pub mod outcome;
pub mod provenance;
pub mod spill;
pub mod text;
pub mod violations;
