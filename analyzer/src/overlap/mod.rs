//! Safe input/output buffer overlap O_s (DMO paper, Section III).
pub mod algorithmic;
pub mod analytic;
pub mod check;
pub mod configs;
pub mod empirical;
pub mod timeline;
