//! Which of the two runs of a split trace ([`crate::ClockMode::Parallel`])
//! records each layer.
//!
//! Both runs execute every instruction; a layer's events cost only the run
//! that records them. Each layer goes to the run that reaches its
//! `LAYER_BEGIN` first: the run ahead is the one that has paid less so far,
//! so the events spread over both cores the way greedy list scheduling
//! spreads jobs, whichever run is the slower one on a given model.

use std::sync::{Arc, Mutex, PoisonError};

/// One of the two runs of a split trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    /// The run without a clock.
    Recording,
    /// The run with the instruction clock, the budget and the progress.
    Counting,
}

/// The recorder of each layer, by the index of its `LAYER_BEGIN` in the run.
#[derive(Debug, Default)]
pub(crate) struct LayerShare {
    recorders: Mutex<Vec<Option<Side>>>,
}

impl LayerShare {
    /// Records layer `index` on `side` if the other run has not taken it;
    /// true when `side` records it.
    pub(crate) fn claim(&self, index: usize, side: Side) -> bool {
        let mut recorders = self
            .recorders
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if recorders.len() <= index {
            recorders.resize(index + 1, None);
        }
        *recorders[index].get_or_insert(side) == side
    }

    /// The run that records layer `index`; `None` before either has
    /// reached it.
    pub(crate) fn recorder(&self, index: usize) -> Option<Side> {
        let recorders = self
            .recorders
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        recorders.get(index).copied().flatten()
    }
}

/// A run's part in a [`LayerShare`].
#[derive(Clone, Debug)]
pub(crate) struct Claim {
    pub(crate) share: Arc<LayerShare>,
    pub(crate) side: Side,
}

impl Claim {
    /// True when this run records layer `index`.
    pub(crate) fn records(&self, index: usize) -> bool {
        self.share.claim(index, self.side)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_run_to_reach_a_layer_records_it_and_the_other_does_not() {
        let share = LayerShare::default();
        assert_eq!(share.recorder(0), None);
        assert!(share.claim(0, Side::Counting));
        assert!(!share.claim(0, Side::Recording));
        // Layers the selection skips leave gaps.
        assert!(share.claim(3, Side::Recording));
        assert!(!share.claim(3, Side::Counting));
        assert_eq!(share.recorder(0), Some(Side::Counting));
        assert_eq!(share.recorder(2), None);
        assert_eq!(share.recorder(3), Some(Side::Recording));
    }
}
