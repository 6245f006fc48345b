//! Whole models on real TFLM: `verify` and `plan` on the shared and zoo
//! models, both kernel builds, plan files and their provenance, the arena
//! to allocate and the firmware that uses it, the trace cache, and the
//! host oracle (PyPI `tflite-micro`), TFLM's own example programs,
//! unmodified, under `check`, and every Cortex-M core a model ships to.

mod common;

mod models {
    pub mod check_micro_speech;
    pub mod check_tflm_app;
    pub mod cores;
    pub mod deploy;
    pub mod foreign_overlap;
    pub mod hardening;
    pub mod one_traced_source;
    pub mod persistent_buffers;
    pub mod plan_files;
    pub mod qemu;
    pub mod red_zones;
    pub mod riscv;
    pub mod scratch_sizing;
    pub mod tflm_runtime;
    pub mod trace_cache;
    pub mod verify_cmsis;
    pub mod verify_cmsis_model;
    pub mod verify_models;
    pub mod verify_tflm_oracle;
    pub mod verify_tiny_unet;
}
