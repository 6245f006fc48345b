//! Where a plan's O_s come from: the source chosen (traced, algorithmic,
//! analytic, none) and whose loop nests it models, with the warning a plan
//! carries when that is not the library it is made for.

use memtrace_model::planner::overlap::OverlapMethod;

use memtrace_abi::target::Kernels;

/// Where the O_s of a plan comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum OverlapChoice {
    /// Traced from the compiled kernels.
    Traced,
    /// The paper's Algorithm 2 on the reference loop nest.
    Algorithmic,
    /// The paper's closed-form bounds.
    Analytic,
    /// No overlap.
    None,
}

impl OverlapChoice {
    /// The analyzer's method, or `None` for traced O_s.
    pub fn method(self) -> Option<OverlapMethod> {
        match self {
            OverlapChoice::Traced => None,
            OverlapChoice::Algorithmic => Some(OverlapMethod::Algorithmic),
            OverlapChoice::Analytic => Some(OverlapMethod::Analytic),
            OverlapChoice::None => Some(OverlapMethod::None),
        }
    }

    /// The source's name in reports (`traced`, `algorithmic`, ...).
    pub fn name(self) -> &'static str {
        match self {
            OverlapChoice::Traced => "traced",
            OverlapChoice::Algorithmic => "algorithmic",
            OverlapChoice::Analytic => "analytic",
            OverlapChoice::None => "none",
        }
    }
}

/// Whose loop nests an O_s source models, and whether that is the library a
/// plan is made for. Plans with overlaps are safe only on the library whose
/// loop nests gave their O_s: the algorithmic and analytic methods model the
/// TFLM reference kernels, traces model the library of the traced suite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OverlapProvenance {
    /// The library the plan is made for (`--kernels`).
    pub kernels: Kernels,
    /// The O_s source.
    pub source: OverlapChoice,
    /// The library whose loop nests the O_s describe (`None` for no
    /// overlap, which is safe on any library).
    pub modelled: Option<Kernels>,
}

impl OverlapProvenance {
    /// True when the O_s describe another library than the plan's.
    pub(crate) fn is_foreign(&self) -> bool {
        self.modelled.is_some_and(|m| m != self.kernels)
    }

    /// The warning a report that uses a foreign O_s carries, if any.
    pub fn warning(&self) -> Option<String> {
        let modelled = self.modelled?;
        self.is_foreign().then(|| {
            let source = match self.source {
                OverlapChoice::Traced => format!("traced from the {} kernels", modelled.name()),
                other => other.name().to_string(),
            };
            let k = self.kernels.name();
            format!(
                "O_s source `{source}` models the {} kernels' loop nests, not {k}'s: plans that \
                 overlap tensors by it may corrupt data on {k} (use O_s traced from {k}'s own \
                 kernels, `--overlap traced`, or check the plan with `memtrace verify --kernels {k}`)",
                modelled.name()
            )
        })
    }
}
