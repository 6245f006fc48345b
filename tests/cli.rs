//! The command line as a user meets it: `run`, `plan`, `validate` and
//! `cold` on kernel binaries and models, their outputs and exit codes, bad
//! inputs and special files, a user's own binary, and the shape of the
//! workspace itself.

mod common;

mod cli {
    pub mod architecture;
    pub mod bad_inputs;
    pub mod cold_ranges;
    pub mod exit_codes;
    pub mod golden;
    pub mod overlap_run;
    pub mod plan_cli;
    pub mod run_contract;
    pub mod run_errors;
    pub mod run_outputs;
    pub mod run_overlap;
    pub mod stdout_closed;
    pub mod strict_files;
    pub mod suite_operators;
    pub mod user_binary;
    pub mod validate_sweep;
}
