//! O_s from a trace, computed online (docs/overlap.md §1).
//!
//! The output buffer (OB bytes at A) and the input (IB bytes at A + OB − o)
//! are both swept upwards. A write of output byte w clobbers input byte
//! r = w − OB + o, which is harmless unless r is read later.
//!
//! * monotone (the paper's minR/maxW): `max(0, min_k(OB − M_k + m_k))`, where
//!   M_k is the largest output end byte written up to write k and m_k the
//!   lowest input offset read after it (IB if none). Regrouped by read: every
//!   read of r at a time when the writes so far reach M gives a candidate
//!   `OB − M + r`, and the last write gives `OB − M_final + IB`. That needs
//!   O(1) state.
//! * exact: the largest o (≤ the monotone method's last-write term
//!   `OB − M_final + IB`, which is IB once the whole output is written) such
//!   that no o' ≤ o clobbers. For input byte r last read at time L(r), the
//!   smallest clobbering overlap is `r + OB + 1 − M(L(r))`, with M(s) the
//!   largest output end written before s; so exact =
//!   `min(OB − M_final + IB, min_r (r + OB − M(L(r))))`. Sharing the cap with
//!   the monotone value keeps exact ≥ monotone even for a layer that leaves
//!   part of its output unwritten. That needs the last read of every input
//!   byte and the (increasing) history of M: memory proportional to the
//!   buffers, not to the number of events.
//!
//! The **reverse sweep** (the mirror case the DMO paper leaves open, docs/overlap.md §10) places the input
//! *below* the output, its end overlapping the output's start by o bytes:
//! input byte r sits at A − IB + o + r, so a write of output byte w clobbers
//! r = w + IB − o. For input byte r last read at L(r), the smallest
//! clobbering overlap is `IB − r + m(L(r))`, with m(s) the lowest output
//! offset written before s. So, with m_final the lowest offset ever written:
//!
//! * reverse exact = `min(IB + m_final, min_r (IB − r − 1 + m(L(r))))`;
//! * reverse monotone = `max(0, min_k (IB − R_k + m_k))`, R_k the largest
//!   input end byte read after write k (the cap `IB + m_final` if none).
//!
//! Kernels that sweep upwards write low output offsets first, so the reverse
//! overlap is usually small: the input's end is read last.

use memtrace_abi::{AccessKind, Event};

/// Online monotone and exact O_s of one (input, output) buffer pair.
#[derive(Debug, Clone)]
pub struct OverlapAccumulator {
    input: u32,
    output: u32,
    input_bytes: u64,
    output_bytes: u64,
    /// Largest end byte of output writes so far (M).
    max_write_end: u64,
    /// Smallest `OB − M + r` over reads that follow a write.
    monotone_min: Option<i64>,
    /// Per input byte: 1 + seq of its last read (0 = never read), as far
    /// as the highest byte read: the declared size comes from the guest,
    /// and 8 B per declared byte would be allocated before any was read.
    last_read: Vec<u64>,
    /// (seq, M) each time M grew, in seq order.
    write_front: Vec<(u64, u64)>,
    /// Reverse sweep: smallest `IB − R + m` over reads that follow a write.
    reverse_monotone_min: Option<i64>,
    /// (seq, m) each time the lowest written output offset m fell.
    write_floor: Vec<(u64, u64)>,
}

/// Result of an [`OverlapAccumulator`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EmpiricalOverlap {
    /// Monotone O_s (the paper's minR/maxW), in bytes.
    pub monotone_bytes: u64,
    /// Exact O_s in bytes: the largest overlap such that no overlap up to it
    /// clobbers an input byte before its last read.
    pub exact_bytes: u64,
    /// The same two for the input placed below the output (reverse sweep).
    pub reverse_monotone_bytes: u64,
    /// Exact O_s of the reverse sweep, in bytes.
    pub reverse_exact_bytes: u64,
}

impl OverlapAccumulator {
    /// Tracks buffer `input` (IB bytes) against buffer `output` (OB bytes).
    pub fn new(input: u32, input_bytes: u64, output: u32, output_bytes: u64) -> Self {
        OverlapAccumulator {
            input,
            output,
            input_bytes,
            output_bytes,
            max_write_end: 0,
            monotone_min: None,
            last_read: Vec::new(),
            write_front: Vec::new(),
            reverse_monotone_min: None,
            write_floor: Vec::new(),
        }
    }

    /// Feeds events in `seq` order.
    pub fn observe(&mut self, events: &[Event]) {
        for e in events {
            if e.buffer == self.output && e.kind != AccessKind::Load {
                let end = (e.offset + e.size) as u64;
                if end > self.max_write_end {
                    self.max_write_end = end;
                    self.write_front.push((e.seq, end));
                }
                let start = e.offset as u64;
                if self.write_floor.last().is_none_or(|&(_, m)| start < m) {
                    self.write_floor.push((e.seq, start));
                }
            } else if e.buffer == self.input && e.kind == AccessKind::Load {
                if self.max_write_end > 0 {
                    let candidate =
                        self.output_bytes as i64 - self.max_write_end as i64 + e.offset as i64;
                    self.monotone_min =
                        Some(self.monotone_min.map_or(candidate, |m| m.min(candidate)));
                }
                if let Some(&(_, floor)) = self.write_floor.last() {
                    let candidate =
                        self.input_bytes as i64 - (e.offset + e.size) as i64 + floor as i64;
                    self.reverse_monotone_min = Some(
                        self.reverse_monotone_min
                            .map_or(candidate, |m| m.min(candidate)),
                    );
                }
                let range = e.offset as usize..e.offset as usize + e.size as usize;
                if self.last_read.len() < range.end {
                    self.last_read.resize(range.end, 0);
                }
                self.last_read[range].fill(e.seq + 1);
            }
        }
    }

    /// Monotone O_s in bytes.
    pub(crate) fn monotone(&self) -> u64 {
        if self.write_front.is_empty() {
            // Nothing written: nothing can be clobbered.
            return self.input_bytes;
        }
        let last_write =
            self.output_bytes as i64 - self.max_write_end as i64 + self.input_bytes as i64;
        let m = self.monotone_min.map_or(last_write, |m| m.min(last_write));
        m.max(0) as u64
    }

    /// Exact O_s in bytes.
    pub(crate) fn exact(&self) -> u64 {
        if self.write_front.is_empty() {
            return self.input_bytes;
        }
        let mut best =
            self.output_bytes as i64 - self.max_write_end as i64 + self.input_bytes as i64;
        let ob = self.output_bytes as i64;
        self.each_last_read(&self.write_front, |r, front| {
            best = best.min(r + ob - front);
        });
        best.max(0) as u64
    }

    /// Reverse-sweep cap `IB + m_final` (None when nothing was written).
    fn reverse_cap(&self) -> Option<i64> {
        self.write_floor
            .last()
            .map(|&(_, m)| self.input_bytes as i64 + m as i64)
    }

    /// Monotone O_s of the reverse sweep, in bytes.
    pub(crate) fn reverse_monotone(&self) -> u64 {
        let Some(cap) = self.reverse_cap() else {
            return self.input_bytes;
        };
        let m = self.reverse_monotone_min.map_or(cap, |m| m.min(cap));
        m.max(0) as u64
    }

    /// Exact O_s of the reverse sweep, in bytes.
    pub(crate) fn reverse_exact(&self) -> u64 {
        let Some(mut best) = self.reverse_cap() else {
            return self.input_bytes;
        };
        let ib = self.input_bytes as i64;
        self.each_last_read(&self.write_floor, |r, floor| {
            best = best.min(ib - r - 1 + floor);
        });
        best.max(0) as u64
    }

    /// Calls `f(r, v)` for every input byte r read after some write, with v
    /// the value `history` (write-order (seq, value) steps: M or m) had just
    /// before r's last read.
    fn each_last_read(&self, history: &[(u64, u64)], mut f: impl FnMut(i64, i64)) {
        // Neighbouring bytes were mostly last read by the same access (a
        // 4-byte load covers four): look each distinct read up once.
        let mut memo: Option<(u64, Option<i64>)> = None;
        for (r, &last) in self.last_read.iter().enumerate() {
            if last == 0 {
                continue;
            }
            let value = match memo {
                Some((seq, value)) if seq == last => value,
                _ => {
                    let i = history.partition_point(|&(s, _)| s < last - 1);
                    let value = (i > 0).then(|| history[i - 1].1 as i64);
                    memo = Some((last, value));
                    value
                }
            };
            if let Some(v) = value {
                f(r as i64, v);
            }
        }
    }

    /// The four O_s values of the events seen so far.
    pub fn result(&self) -> EmpiricalOverlap {
        EmpiricalOverlap {
            monotone_bytes: self.monotone(),
            exact_bytes: self.exact(),
            reverse_monotone_bytes: self.reverse_monotone(),
            reverse_exact_bytes: self.reverse_exact(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IN: u32 = 0;
    const OUT: u32 = 1;

    #[test]
    fn a_declared_input_of_4_gib_allocates_only_what_is_read() {
        // Its declared size is the guest's word: 8 B per declared byte up
        // front was 32 GiB, and the process aborted.
        let mut acc = OverlapAccumulator::new(IN, u32::MAX as u64, OUT, 16);
        acc.observe(&events(&[
            (IN, 0, 4, AccessKind::Load),
            (OUT, 0, 4, AccessKind::Store),
            (IN, 4, 4, AccessKind::Load),
        ]));
        assert_eq!(acc.last_read.len(), 8);
        // The last read (bytes 4..8) follows the write of 0..4: an overlap
        // that puts byte 4 of the input under output byte 0..4 clobbers it.
        let r = acc.result();
        assert_eq!(r.monotone_bytes, 16 - 4 + 4);
    }

    /// Events from (buffer, offset, size, kind) in order.
    fn events(list: &[(u32, u32, u32, AccessKind)]) -> Vec<Event> {
        list.iter()
            .enumerate()
            .map(|(i, &(buffer, offset, size, kind))| Event {
                t: i as u64,
                seq: i as u64,
                pc: 0,
                buffer,
                offset,
                size,
                kind,
            })
            .collect()
    }

    /// The definition applied literally: try every overlap o and every
    /// (write, later read) pair.
    fn brute_force(ev: &[Event], ib: u64, ob: u64) -> (u64, u64) {
        let clobbers = |o: i64| {
            ev.iter().enumerate().any(|(k, w)| {
                w.buffer == OUT
                    && w.kind != AccessKind::Load
                    && (w.offset..w.offset + w.size).any(|wb| {
                        let r = wb as i64 - ob as i64 + o;
                        ev[k + 1..].iter().any(|rd| {
                            rd.buffer == IN
                                && rd.kind == AccessKind::Load
                                && (rd.offset as i64..(rd.offset + rd.size) as i64).contains(&r)
                        })
                    })
            })
        };
        let front = ev
            .iter()
            .filter(|w| w.buffer == OUT && w.kind != AccessKind::Load)
            .map(|w| (w.offset + w.size) as i64)
            .max();
        let cap = front.map_or(ib as i64, |m| ob as i64 - m + ib as i64);
        let exact = (0..=cap).take_while(|&o| !clobbers(o)).last().unwrap_or(-1);
        // monotone, straight from the definition
        let mut mono = i64::MAX;
        let mut m = 0i64;
        let mut any = false;
        for (k, w) in ev.iter().enumerate() {
            if w.buffer == OUT && w.kind != AccessKind::Load {
                any = true;
                m = m.max((w.offset + w.size) as i64);
                let later_min = ev[k + 1..]
                    .iter()
                    .filter(|r| r.buffer == IN && r.kind == AccessKind::Load)
                    .map(|r| r.offset as i64)
                    .min()
                    .unwrap_or(ib as i64);
                mono = mono.min(ob as i64 - m + later_min);
            }
        }
        let mono = if any { mono.max(0) } else { ib as i64 };
        (mono as u64, (exact.max(0)) as u64)
    }

    /// The reverse sweep's definitions applied literally: input byte r at
    /// A − IB + o + r, so a write of w clobbers r = w + IB − o.
    fn brute_force_reverse(ev: &[Event], ib: u64, _ob: u64) -> (u64, u64) {
        let writes = || {
            ev.iter()
                .enumerate()
                .filter(|(_, w)| w.buffer == OUT && w.kind != AccessKind::Load)
        };
        let Some(floor) = writes().map(|(_, w)| w.offset as i64).min() else {
            return (ib, ib);
        };
        let cap = ib as i64 + floor;
        let clobbers = |o: i64| {
            writes().any(|(k, w)| {
                (w.offset..w.offset + w.size).any(|wb| {
                    let r = wb as i64 + ib as i64 - o;
                    ev[k + 1..].iter().any(|rd| {
                        rd.buffer == IN
                            && rd.kind == AccessKind::Load
                            && (rd.offset as i64..(rd.offset + rd.size) as i64).contains(&r)
                    })
                })
            })
        };
        let exact = (0..=cap).take_while(|&o| !clobbers(o)).last().unwrap_or(-1);
        let mut mono = cap;
        let mut m = i64::MAX;
        for (k, w) in writes() {
            m = m.min(w.offset as i64);
            let later_max = ev[k + 1..]
                .iter()
                .filter(|r| r.buffer == IN && r.kind == AccessKind::Load)
                .map(|r| (r.offset + r.size) as i64)
                .max();
            if let Some(rmax) = later_max {
                mono = mono.min(ib as i64 - rmax + m);
            }
        }
        (mono.max(0) as u64, exact.max(0) as u64)
    }

    fn check(list: &[(u32, u32, u32, AccessKind)], ib: u64, ob: u64) -> EmpiricalOverlap {
        let ev = events(list);
        let mut acc = OverlapAccumulator::new(IN, ib, OUT, ob);
        // Feed in two batches to exercise batch boundaries.
        let (a, b) = ev.split_at(ev.len() / 2);
        acc.observe(a);
        acc.observe(b);
        let (mono, exact) = brute_force(&ev, ib, ob);
        assert_eq!(acc.monotone(), mono, "monotone");
        assert_eq!(acc.exact(), exact, "exact");
        assert!(acc.exact() >= acc.monotone());
        let (rmono, rexact) = brute_force_reverse(&ev, ib, ob);
        assert_eq!(acc.reverse_monotone(), rmono, "reverse monotone");
        assert_eq!(acc.reverse_exact(), rexact, "reverse exact");
        assert!(acc.reverse_exact() >= acc.reverse_monotone());
        acc.result()
    }

    use AccessKind::{Load as L, Store as S, Update as U};

    #[test]
    fn elementwise_in_place_gives_the_output_size() {
        // relu over 4 f32: read i, write i
        let mut list = vec![];
        for i in 0..4 {
            list.push((IN, 4 * i, 4, L));
            list.push((OUT, 4 * i, 4, S));
        }
        let r = check(&list, 16, 16);
        assert_eq!(r.monotone_bytes, 16);
        assert_eq!(r.exact_bytes, 16);
        // Mirrored, the input's end meets the output's start: any o from 1
        // to 15 puts output element 0, written first, on an input byte read
        // later, so not even one byte may overlap (o = 16, in place, would be
        // safe again, but the definition asks for every o' <= o).
        assert_eq!(r.reverse_exact_bytes, 0);
        assert_eq!(r.reverse_monotone_bytes, 0);
    }

    #[test]
    fn accumulating_output_cannot_overlap() {
        // zero C, then C += A[k]: every output byte written before input 0 is read
        let mut list = vec![(OUT, 0, 4, S), (OUT, 4, 4, S)];
        for k in 0..2 {
            list.push((IN, 4 * k, 4, L));
            list.push((OUT, 0, 4, U));
            list.push((OUT, 4, 4, U));
        }
        let r = check(&list, 8, 8);
        assert_eq!(r.monotone_bytes, 0);
    }

    #[test]
    fn exact_exceeds_monotone_when_a_low_read_is_not_the_last() {
        // input byte 0 read early and again late; monotone is held down by
        // the late re-read of a low offset, exact only by last reads.
        let list = [
            (IN, 0, 1, L),
            (OUT, 0, 1, S),
            (IN, 1, 1, L),
            (OUT, 1, 1, S),
            (IN, 2, 1, L),
            (IN, 0, 1, L),
            (OUT, 2, 1, S),
            (IN, 3, 1, L),
            (OUT, 3, 1, S),
        ];
        let r = check(&list, 4, 4);
        assert!(r.exact_bytes >= r.monotone_bytes);
    }

    #[test]
    fn random_traces_agree_with_the_literal_definition() {
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = |n: u32| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as u32
        };
        for _ in 0..300 {
            let ib = 1 + next(12);
            let ob = 1 + next(12);
            let mut written = vec![false; ob as usize];
            let mut list = vec![];
            for _ in 0..(1 + next(20)) {
                if next(2) == 0 {
                    let off = next(ib);
                    let size = 1 + next(ib - off);
                    list.push((IN, off, size, L));
                } else {
                    let off = next(ob);
                    let kind = if written[off as usize] { U } else { S };
                    written[off as usize] = true;
                    list.push((OUT, off, 1, kind));
                }
            }
            check(&list, ib as u64, ob as u64);
        }
    }
}
