//! Kernel libraries and their own tests: CMSIS-NN's kernels against the
//! reference models, its releases, `regress` across builds, and `check` on
//! the libraries' unit-test programs.

mod common;

mod libraries {
    pub mod check;
    pub mod check_calls;
    pub mod check_misc;
    pub mod check_recurrent;
    pub mod check_tensors;
    pub mod cmsis_releases;
    pub mod kernels_cmsis;
    pub mod regress_cmsis;
    pub mod regress_modified;
    pub mod regress_releases;
    pub mod regress_unit_tests;
}
