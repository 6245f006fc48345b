//! The guest symbols the host looks up by name in a memtrace ELF: where the
//! protocol port, the mailboxes and the memory regions are. The harness's
//! linker scripts (`harness-c/rt/*/memtrace*.ld`) and C sources define them;
//! `abi/tests/headers.rs` checks that every name here is defined there.

/// The protocol port, `volatile uint32_t memtrace_port[2]` (`memtrace.h`).
pub const PORT: &str = "memtrace_port";
/// The out-of-line command function on the port page (`memtrace.h`).
pub const SIGNAL: &str = "memtrace_signal";
/// The kernel suite's job mailbox (`memtrace_job.h`).
pub const JOB: &str = "memtrace_job";
/// Start of the NOLOAD arena (TFLM's tensor arena in the runner).
pub const ARENA: &str = "memtrace_arena";
/// End of the arena region.
pub const ARENA_END: &str = "memtrace_arena_end";
/// Start of the storage region of spilled tensors (the fourth `PT_LOAD`).
pub const STORAGE: &str = "memtrace_storage";
/// End of the storage region.
pub const STORAGE_END: &str = "memtrace_storage_end";
/// Lowest address of the stack; the page below it is the guard page.
pub const STACK_BOTTOM: &str = "__stack_bottom";
/// Highest address of the stack (the initial stack pointer).
pub const STACK_TOP: &str = "__stack_top";

/// Every symbol of this module, for the check against the harness.
pub const ALL: [&str; 9] = [
    PORT,
    SIGNAL,
    JOB,
    ARENA,
    ARENA_END,
    STORAGE,
    STORAGE_END,
    STACK_BOTTOM,
    STACK_TOP,
];
