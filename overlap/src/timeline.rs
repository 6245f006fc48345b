//! Placing the algorithmic minR / maxW curves on a trace's time axis.
//!
//! The algorithmic method counts *steps* (output writes of the modelled loop
//! nest); a trace counts instructions. [`StepClock`] watches a layer's output
//! writes online and remembers, for the sampled steps of a [`Curves`], when
//! they happened, in memory proportional to the number of samples:
//!
//! * **by count** — step `k` is the `k`-th write event to the output buffer.
//!   Exact for the reference kernels, which store one element per step;
//! * **by front** — step `k` is the first moment the traced write front (the
//!   largest output end byte written so far) reaches the model's `maxW(k)`.
//!   Used when the trace has a different number of writes than the model has
//!   steps (a compiler merged or split stores, or the kernel is not the
//!   modelled one); it is monotone and lines `maxW` up with the traced stores.

use memtrace_abi::{AccessKind, Event};

use super::algorithmic::Curves;

/// How a [`StepClock`] mapped steps to instructions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepMapping {
    /// The k-th output write event is step k.
    ByCount,
    /// The time the traced write front first reaches maxW(k).
    ByFront,
}

/// Online collector of the instruction times of a curve's sampled steps.
#[derive(Clone, Debug)]
pub struct StepClock {
    output: u32,
    /// Sampled step indices, increasing.
    steps: Vec<u64>,
    /// maxW at those steps, non-decreasing.
    fronts: Vec<u64>,
    by_count: Vec<u64>,
    by_front: Vec<u64>,
    writes: u64,
    max_end: u64,
    last_t: u64,
}

impl StepClock {
    /// Watches writes to buffer `output` for the sampled steps of `curves`.
    pub fn new(output: u32, curves: &Curves) -> StepClock {
        StepClock {
            output,
            steps: curves.points.iter().map(|p| p.step).collect(),
            fronts: curves.points.iter().map(|p| p.max_write_end).collect(),
            by_count: Vec::with_capacity(curves.points.len()),
            by_front: Vec::with_capacity(curves.points.len()),
            writes: 0,
            max_end: 0,
            last_t: 0,
        }
    }

    /// Feeds a batch of events (any buffers) in order.
    pub fn observe(&mut self, events: &[Event]) {
        for e in events {
            if e.buffer != self.output || e.kind == AccessKind::Load {
                continue;
            }
            self.last_t = e.t;
            if self.by_count.len() < self.steps.len()
                && self.steps[self.by_count.len()] == self.writes
            {
                self.by_count.push(e.t);
            }
            self.writes += 1;
            self.max_end = self.max_end.max((e.offset + e.size) as u64);
            while self.by_front.len() < self.fronts.len()
                && self.fronts[self.by_front.len()] <= self.max_end
            {
                self.by_front.push(e.t);
            }
        }
    }

    /// Instruction time of every sampled step, and the mapping used: by count
    /// when the trace has exactly `total_steps` output writes, else by front.
    /// Samples the trace never reached get the last write's time.
    pub fn times(&self, total_steps: u64) -> (Vec<u64>, StepMapping) {
        let (src, mapping) = if self.writes == total_steps {
            (&self.by_count, StepMapping::ByCount)
        } else {
            (&self.by_front, StepMapping::ByFront)
        };
        let mut out = src.clone();
        out.resize(self.steps.len(), self.last_t);
        (out, mapping)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithmic::algorithmic_curves;
    use memtrace_abi::LayerSpec;

    fn ev(t: u64, buffer: u32, offset: u32, size: u32, kind: AccessKind) -> Event {
        Event {
            t,
            seq: t,
            pc: 0,
            buffer,
            offset,
            size,
            kind,
        }
    }

    #[test]
    fn count_mapping_uses_the_kth_write() {
        let s = LayerSpec::parse("op=relu,input=1x1x1x10").unwrap();
        let c = algorithmic_curves(&s, 0).unwrap();
        let mut clock = StepClock::new(1, &c);
        let mut events = vec![];
        for i in 0..10u32 {
            events.push(ev(10 * i as u64, 0, 4 * i, 4, AccessKind::Load));
            events.push(ev(10 * i as u64 + 5, 1, 4 * i, 4, AccessKind::Store));
        }
        clock.observe(&events[..7]);
        clock.observe(&events[7..]);
        let (t, m) = clock.times(c.total_steps);
        assert_eq!(m, StepMapping::ByCount);
        assert_eq!(t, (0..10).map(|i| 10 * i + 5).collect::<Vec<_>>());
    }

    #[test]
    fn front_mapping_when_stores_are_merged() {
        let s = LayerSpec::parse("op=relu,input=1x1x1x8").unwrap();
        let c = algorithmic_curves(&s, 0).unwrap();
        let mut clock = StepClock::new(1, &c);
        // two 16-byte stores cover the 8 steps
        clock.observe(&[
            ev(3, 1, 0, 16, AccessKind::Store),
            ev(9, 1, 16, 16, AccessKind::Store),
        ]);
        let (t, m) = clock.times(c.total_steps);
        assert_eq!(m, StepMapping::ByFront);
        assert_eq!(t, vec![3, 3, 3, 3, 9, 9, 9, 9]);
    }
}
