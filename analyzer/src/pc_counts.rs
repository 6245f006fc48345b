//! Buffer accesses per guest PC, per layer: which code made a layer's
//! accesses. The driver maps the PCs to functions and kernel libraries
//! (docs/kernels.md, "Which kernel ran a layer"); this analysis only counts.
//!
//! It runs on every `memtrace run`, so it is cheap: consecutive events of a
//! batch mostly share their PC (on the MMIO access path every access of a
//! translated block carries the block's address), so it counts runs of equal
//! PCs and touches its hash map once per run, not once per event.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use memtrace_abi::{Analysis, Event, LayerInfo};

/// A multiplicative hash of one `u64` (a PC): keys are few and not chosen by
/// an adversary, so SipHash's cost buys nothing here.
#[derive(Default)]
struct PcHasher(u64);

impl Hasher for PcHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0 ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    fn finish(&self) -> u64 {
        // hashbrown takes the bucket from the low bits and a tag from the
        // high ones: fold the well-mixed high half into the low one.
        self.0 ^ (self.0 >> 29)
    }
}

type PcMap = HashMap<u64, u64, BuildHasherDefault<PcHasher>>;

/// The accesses of one layer by PC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerPcs {
    /// Position of the layer in the run (0-based), as in its `LayerReport`.
    pub index: usize,
    /// Layer name given by the guest.
    pub name: String,
    /// `(pc, events)` for every PC that made an event in the layer, most
    /// events first (ties: lower PC first). The PC is the event's `pc`: the
    /// accessing instruction on the hook path, its block's address on the
    /// MMIO path.
    pub counts: Vec<(u64, u64)>,
}

impl LayerPcs {
    /// Events of the layer (the sum of `counts`).
    pub fn events(&self) -> u64 {
        self.counts.iter().map(|&(_, n)| n).sum()
    }
}

/// Counts every layer's events per PC.
#[derive(Default)]
pub struct PcCounts {
    current: Option<Current>,
    /// Finished layers, in order.
    pub layers: Vec<LayerPcs>,
}

struct Current {
    index: usize,
    name: String,
    map: PcMap,
    /// The PC of the run of equal PCs still being counted, and its length.
    run_pc: u64,
    run: u64,
}

impl Current {
    fn flush(&mut self) {
        if self.run > 0 {
            *self.map.entry(self.run_pc).or_insert(0) += self.run;
            self.run = 0;
        }
    }
}

impl Analysis for PcCounts {
    fn layer_begin(&mut self, layer: &LayerInfo) {
        self.current = Some(Current {
            index: layer.index,
            name: layer.name.clone(),
            map: PcMap::default(),
            run_pc: 0,
            run: 0,
        });
    }

    fn events(&mut self, events: &[Event]) {
        let Some(cur) = self.current.as_mut() else {
            return;
        };
        let (mut pc, mut run) = (cur.run_pc, cur.run);
        for e in events {
            if e.pc == pc {
                run += 1;
            } else {
                if run > 0 {
                    *cur.map.entry(pc).or_insert(0) += run;
                }
                pc = e.pc;
                run = 1;
            }
        }
        (cur.run_pc, cur.run) = (pc, run);
    }

    fn layer_end(&mut self, _instructions: u64) {
        let Some(mut cur) = self.current.take() else {
            return;
        };
        cur.flush();
        let mut counts: Vec<(u64, u64)> = cur.map.into_iter().collect();
        counts.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        self.layers.push(LayerPcs {
            index: cur.index,
            name: cur.name,
            counts,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memtrace_abi::AccessKind;
    use memtrace_overlap::rng::Rng;

    fn event(pc: u64) -> Event {
        Event {
            t: 0,
            seq: 0,
            pc,
            buffer: 0,
            offset: 0,
            size: 1,
            kind: AccessKind::Load,
        }
    }

    fn layer(index: usize) -> LayerInfo {
        LayerInfo {
            index,
            name: format!("l{index}"),
            op: "custom".into(),
            params: String::new(),
            spec: None,
        }
    }

    #[test]
    fn runs_split_across_batches_and_layers_count_like_a_plain_tally() {
        // Random PCs from a small set, with long runs, fed in random batch
        // sizes over two layers; the reference is a BTreeMap tally.
        let mut rng = Rng::new(9);
        let mut counts = PcCounts::default();
        let mut expected = Vec::new();
        for index in 0..2 {
            counts.layer_begin(&layer(index));
            let mut tally = std::collections::BTreeMap::<u64, u64>::new();
            let mut pcs = Vec::new();
            while pcs.len() < 5_000 {
                let pc = 0x800_0000 + 2 * u64::from(rng.range(0, 39));
                for _ in 0..=rng.range(0, 5) {
                    pcs.push(pc);
                    *tally.entry(pc).or_default() += 1;
                }
            }
            let mut rest: &[u64] = &pcs;
            while !rest.is_empty() {
                let n = (rng.range(1, 50) as usize).min(rest.len());
                let batch: Vec<Event> = rest[..n].iter().map(|&pc| event(pc)).collect();
                counts.events(&batch);
                rest = &rest[n..];
            }
            counts.layer_end(0);
            let mut want: Vec<(u64, u64)> = tally.into_iter().collect();
            want.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            expected.push(want);
        }
        assert_eq!(counts.layers.len(), 2);
        for (got, want) in counts.layers.iter().zip(&expected) {
            assert_eq!(&got.counts, want);
            assert_eq!(got.events(), want.iter().map(|w| w.1).sum::<u64>());
        }
        assert_eq!(counts.layers[1].name, "l1");
    }

    #[test]
    fn a_layer_without_events_has_no_pcs_and_pc_zero_is_counted() {
        let mut counts = PcCounts::default();
        counts.layer_begin(&layer(0));
        counts.layer_end(0);
        counts.layer_begin(&layer(1));
        counts.events(&[event(0), event(0), event(4)]);
        counts.layer_end(0);
        assert!(counts.layers[0].counts.is_empty());
        assert_eq!(counts.layers[1].counts, vec![(0, 2), (4, 1)]);
    }
}
