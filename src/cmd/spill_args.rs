//! The TinySeg arguments `plan` and `verify` share (`--planner tinyseg`).

use clap::Args;
use memtrace_driver::support::spill::SpillOptions;
use memtrace_model::planner::PlannerKind;
use memtrace_model::tinyseg::NarrowScratch;

/// TinySeg's base planner and target peak.
#[derive(Args, Debug, Clone)]
pub struct SpillArgs {
    /// With `--planner tinyseg`: the planner that places the tensors after
    /// every spill and fusion (tflm-greedy as in the paper, the default;
    /// dmo-heap to add DMO overlaps, reorder, exact, linear).
    #[arg(long, value_enum, value_name = "PLANNER")]
    pub base: Option<PlannerKind>,
    /// With `--planner tinyseg`: stop once the arena peak is at most this
    /// many bytes, spilling only part of a tensor when that is enough
    /// (default: spill while it lowers the peak).
    #[arg(long, value_name = "BYTES")]
    pub target_bytes: Option<u64>,
    /// With `--planner tinyseg`: narrow int8 TRANSPOSE_CONV accumulator
    /// scratch from int32 to int16 never, where the weights prove the sums
    /// fit (exact), or always (the paper's step; sums that overflow give
    /// wrong outputs, which verify reports). Default: exact.
    #[arg(long, value_enum, value_name = "WHEN")]
    pub scratch_int16: Option<NarrowScratch>,
}

impl SpillArgs {
    /// The driver's options.
    pub fn options(&self) -> SpillOptions {
        SpillOptions {
            base: self.base.unwrap_or(PlannerKind::TflmGreedy),
            target_bytes: self.target_bytes,
            narrow_scratch: self.scratch_int16.unwrap_or(NarrowScratch::Exact),
        }
    }

    /// Refuses TinySeg's options when the planner is not TinySeg: they
    /// would have no effect.
    pub fn check(&self, tinyseg: bool) {
        if tinyseg {
            return;
        }
        for (given, option) in [
            (self.base.is_some(), "--base"),
            (self.target_bytes.is_some(), "--target-bytes"),
            (self.scratch_int16.is_some(), "--scratch-int16"),
        ] {
            if given {
                super::usage_error(&format!(
                    "{option} has no effect without --planner tinyseg (it is an option of \
                     TinySeg's transformation)"
                ));
            }
        }
    }
}
