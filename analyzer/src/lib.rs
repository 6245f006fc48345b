
pub mod overlap;
