//! TinySeg on real TFLM: its operators in the kernel suite and its spill
//! and fetch operators as TFLM custom operators.

mod common;

mod tinyseg {
    pub mod tinyseg_ops;
    pub mod tinyseg_spill;
}
