//! Empty: this crate only exists so that `cargo metadata` locates cmsis-nn-rs.
