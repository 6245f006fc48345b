//! The pairing of two runs' API calls (`regress --unit-tests`): a longest
//! common subsequence of their keys, always the same one — the path a walk
//! from the first calls takes through the suffix-LCS table when it pairs two
//! equal keys at once and, between dropping an old call and taking a new
//! one that keep it optimal, drops the old call first.
//!
//! That table has (n+1)·(m+1) cells; this computes the same path in O(n+m)
//! space and, on two runs that differ by D calls, O((n+m)·D) time (runs
//! with nothing in order in common still take n·m steps: seconds for
//! 30 000 calls a side, where the table took 3.6 GB):
//!
//! - A divide and conquer on the old calls' middle row (after Hirschberg):
//!   one backward sweep of the suffix-LCS values carries, for every cell,
//!   the column at which the walk from that cell first reaches the middle
//!   row. The walk from the start crosses there, and its two halves are
//!   the walks of the two smaller rectangles (a walk that passes through a
//!   cell is, from it on, that cell's walk; before it, every choice it
//!   makes is also the best inside the top rectangle).
//! - A band: a path with E steps that are not pairs keeps to E + 1
//!   diagonals, so only those cells are swept. Cells outside it keep a
//!   value some real path reaches, never more than their true one, and the
//!   cells of optimal paths get their true values: the walk's choices are
//!   unchanged. E is found by doubling it until the sweep's own answer
//!   needs no wider band; the halves' E follow from the values at the
//!   crossing.
//! - A row whose key the new run never has equals the row below it, so it
//!   is skipped.

use std::collections::HashMap;
use std::hash::Hash;

/// One step of the pairing: `[old index, new index]`, one side `None` for
/// a call the other run does not make.
pub(crate) type Pair = [Option<usize>; 2];

/// The pairing of `old` with `new` by equal keys, in order (see the
/// module's documentation for which of the longest pairings).
pub(crate) fn pair_by_key<K: Eq + Hash>(old: &[K], new: &[K]) -> Vec<Pair> {
    let mut ids = HashMap::new();
    let mut id = |k| {
        let next = ids.len() as u32;
        *ids.entry(k).or_insert(next)
    };
    let a: Vec<u32> = old.iter().map(&mut id).collect();
    let b: Vec<u32> = new.iter().map(&mut id).collect();
    let mut in_new = vec![false; ids.len()];
    for &k in &b {
        in_new[k as usize] = true;
    }
    let pairing = Pairing {
        a: &a,
        b: &b,
        in_new: &in_new,
    };
    let mut out = Vec::with_capacity(a.len() + b.len());
    let all = Rect {
        i0: 0,
        i1: a.len(),
        j0: 0,
        j1: b.len(),
    };
    pairing.walk(all, None, &mut out);
    out
}

/// Old rows `i0..i1` against new columns `j0..j1`.
#[derive(Clone, Copy, Debug)]
struct Rect {
    i0: usize,
    i1: usize,
    j0: usize,
    j1: usize,
}

impl Rect {
    fn rows(&self) -> usize {
        self.i1 - self.i0
    }

    fn columns(&self) -> usize {
        self.j1 - self.j0
    }

    /// Steps that are not pairs on a path through it with `common` pairs.
    fn edits(&self, common: usize) -> usize {
        self.rows() + self.columns() - 2 * common
    }
}

/// What a sweep of a rectangle found.
struct Sweep {
    /// Pairs of the best path from its top-left cell (a lower bound when
    /// the band was too narrow).
    common: usize,
    /// The column at which the walk from the top-left cell first reaches
    /// the middle row, and the pairs of the best path on from there.
    crossing: (usize, usize),
    /// The band held every cell: `common` is exact.
    whole: bool,
}

struct Pairing<'a> {
    a: &'a [u32],
    b: &'a [u32],
    in_new: &'a [bool],
}

impl Pairing<'_> {
    /// Appends the walk through `rect` to `out`; `edits` is the number of
    /// steps that are not pairs on its best paths, when known.
    fn walk(&self, rect: Rect, edits: Option<usize>, out: &mut Vec<Pair>) {
        let Rect { i0, i1, j0, j1 } = rect;
        // Equal keys pair at once (and leave the best paths' edits as
        // they were).
        let same = self.a[i0..i1]
            .iter()
            .zip(&self.b[j0..j1])
            .take_while(|(x, y)| x == y)
            .count();
        out.extend((0..same).map(|k| [Some(i0 + k), Some(j0 + k)]));
        let rect = Rect {
            i0: i0 + same,
            j0: j0 + same,
            ..rect
        };
        let Rect { i0, i1, j0, j1 } = rect;
        if rect.rows() == 0 {
            out.extend((j0..j1).map(|j| [None, Some(j)]));
        } else if rect.columns() == 0 {
            out.extend((i0..i1).map(|i| [Some(i), None]));
        } else if rect.rows() == 1 {
            self.walk_one_row(rect, out);
        } else {
            let middle = i0 + rect.rows() / 2;
            let sweep = match edits {
                Some(edits) => self.sweep(rect, edits, middle),
                None => self.widening_sweep(rect, middle),
            };
            let (crossing, below) = sweep.crossing;
            let top = Rect {
                i0,
                i1: middle,
                j0,
                j1: crossing,
            };
            let bottom = Rect {
                i0: middle,
                i1,
                j0: crossing,
                j1,
            };
            self.walk(top, Some(top.edits(sweep.common - below)), out);
            self.walk(bottom, Some(bottom.edits(below)), out);
        }
    }

    /// A sweep of `rect` whose best paths' edits are not known: the band
    /// is widened until the sweep's own answer needs no wider one.
    fn widening_sweep(&self, rect: Rect, middle: usize) -> Sweep {
        let skew = rect.rows().abs_diff(rect.columns());
        let mut band = skew + 64;
        loop {
            let sweep = self.sweep(rect, band, middle);
            let found = rect.edits(sweep.common);
            // Every path with `found` edits keeps to a band this wide: the
            // best (with no more) were all swept, so `found` is exact.
            if found <= band || sweep.whole {
                return sweep;
            }
            band = found.min(band.saturating_mul(2));
        }
    }

    /// The walk of one old call: it pairs with the first equal new call
    /// (taking the new calls before it); with none, it is dropped first.
    fn walk_one_row(&self, rect: Rect, out: &mut Vec<Pair>) {
        let i = rect.i0;
        match (rect.j0..rect.j1).find(|&j| self.b[j] == self.a[i]) {
            Some(at) => {
                out.extend((rect.j0..at).map(|j| [None, Some(j)]));
                out.push([Some(i), Some(at)]);
                out.extend((at + 1..rect.j1).map(|j| [None, Some(j)]));
            }
            None => {
                out.push([Some(i), None]);
                out.extend((rect.j0..rect.j1).map(|j| [None, Some(j)]));
            }
        }
    }

    /// The suffix-LCS values of `rect` swept from its last row up, within
    /// the `edits` band, and where each cell's walk first reaches the
    /// `middle` row.
    fn sweep(&self, rect: Rect, edits: usize, middle: usize) -> Sweep {
        let (rows, columns) = (rect.rows(), rect.columns());
        // Diagonal d = column − row (relative); a path with `edits` steps
        // off the diagonal ends on columns − rows, so keeps to lo..=hi.
        let skew = columns as i64 - rows as i64;
        let (lo, hi) = (-((edits as i64 - skew) / 2), (edits as i64 + skew) / 2);
        // The last row and column hold 0, the true value; every other cell
        // holds a value some path from it reaches.
        let mut common = vec![0u32; columns + 1];
        let mut crossing = vec![0u32; columns + 1];
        let mut at_middle = Vec::new();
        for r in (0..rows).rev() {
            let i = rect.i0 + r;
            let key = self.a[i];
            let first = (r as i64 + lo).max(0) as usize;
            let end = (r as i64 + hi + 1).min(columns as i64);
            if self.in_new[key as usize] && end > first as i64 {
                let end = end as usize;
                sweep_row(
                    &self.b[rect.j0 + first..rect.j0 + end],
                    key,
                    &mut common[first..=end],
                    &mut crossing[first..=end],
                );
            }
            if i == middle {
                crossing
                    .iter_mut()
                    .enumerate()
                    .for_each(|(c, x)| *x = c as u32);
                at_middle.clone_from(&common);
            }
        }
        let c = crossing[0] as usize;
        Sweep {
            common: common[0] as usize,
            crossing: (rect.j0 + c, at_middle[c] as usize),
            whole: lo <= -(rows as i64) && hi >= columns as i64,
        }
    }
}

/// One row of values and crossings, right to left, over the row below
/// (`keys` are the row's cells' new calls; `common` and `crossing` hold
/// one cell more, the one after the row's last). A cell's walk pairs
/// equal keys, else drops the old call when that keeps the best, else
/// takes the new one.
fn sweep_row(keys: &[u32], key: u32, common: &mut [u32], crossing: &mut [u32]) {
    let n = keys.len();
    let mut right = (common[n], crossing[n]);
    let mut diagonal = right;
    let cells = common[..n].iter_mut().zip(&mut crossing[..n]).zip(keys);
    for ((value, cross), &k) in cells.rev() {
        let down = (*value, *cross);
        right = if k == key {
            (diagonal.0 + 1, diagonal.1)
        } else if down.0 >= right.0 {
            down
        } else {
            right
        };
        (*value, *cross) = right;
        diagonal = down;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pairing as it was first written: the whole suffix-LCS table,
    /// then the walk from the first calls (the oracle).
    fn pair_by_table<K: Eq>(a: &[K], b: &[K]) -> Vec<Pair> {
        let mut common = vec![vec![0u32; b.len() + 1]; a.len() + 1];
        for i in (0..a.len()).rev() {
            for j in (0..b.len()).rev() {
                common[i][j] = if a[i] == b[j] {
                    common[i + 1][j + 1] + 1
                } else {
                    common[i + 1][j].max(common[i][j + 1])
                };
            }
        }
        let (mut i, mut j, mut pairs) = (0, 0, Vec::new());
        while i < a.len() || j < b.len() {
            if i < a.len() && j < b.len() && a[i] == b[j] {
                pairs.push([Some(i), Some(j)]);
                (i, j) = (i + 1, j + 1);
            } else if j == b.len() || (i < a.len() && common[i + 1][j] >= common[i][j + 1]) {
                pairs.push([Some(i), None]);
                i += 1;
            } else {
                pairs.push([None, Some(j)]);
                j += 1;
            }
        }
        pairs
    }

    /// A small deterministic generator (xorshift64*).
    struct Random(u64);

    impl Random {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) % n
        }
    }

    /// The LCS length by bit-parallel rows (Allison and Dix): an answer
    /// independent of both pairings.
    fn lcs_length(a: &[u32], b: &[u32]) -> usize {
        let words = b.len().div_ceil(64);
        let mut masks: HashMap<u32, Vec<u64>> = HashMap::new();
        for (j, &k) in b.iter().enumerate() {
            masks.entry(k).or_insert_with(|| vec![0; words])[j / 64] |= 1 << (j % 64);
        }
        let none = vec![0u64; words];
        let mut v = vec![u64::MAX; words];
        for k in a {
            let m = masks.get(k).unwrap_or(&none);
            let (mut carry, mut borrow) = (0u64, 0u64);
            for w in 0..words {
                let u = v[w] & m[w];
                let (sum, c1) = v[w].overflowing_add(u);
                let (sum, c2) = sum.overflowing_add(carry);
                carry = u64::from(c1 || c2);
                let (diff, b1) = v[w].overflowing_sub(u);
                let (diff, b2) = diff.overflowing_sub(borrow);
                borrow = u64::from(b1 || b2);
                v[w] = sum | diff;
            }
        }
        // The bits past b's end stay set (no mask has them): the zeros
        // are b's calls in the common subsequence.
        v.iter().map(|w| w.count_zeros() as usize).sum()
    }

    /// Every call once, in order; pairs of equal keys, increasing.
    fn assert_a_pairing(a: &[u32], b: &[u32], pairs: &[Pair]) {
        let olds: Vec<usize> = pairs.iter().filter_map(|p| p[0]).collect();
        let news: Vec<usize> = pairs.iter().filter_map(|p| p[1]).collect();
        assert_eq!(olds, (0..a.len()).collect::<Vec<_>>());
        assert_eq!(news, (0..b.len()).collect::<Vec<_>>());
        for p in pairs {
            if let [Some(i), Some(j)] = *p {
                assert_eq!(a[i], b[j]);
            }
        }
    }

    #[test]
    fn the_pairing_is_the_tables_on_small_random_runs() {
        let mut random = Random(0x6d65_6d74_7261_6365);
        for case in 0..20_000 {
            let keys = 1 + random.below(5);
            let a: Vec<u64> = (0..random.below(14)).map(|_| random.below(keys)).collect();
            let b: Vec<u64> = if case % 3 == 0 {
                // A copy with a few calls added and removed, as two
                // releases' runs of one suite differ.
                let mut b = a.clone();
                for _ in 0..random.below(4) {
                    let at = random.below(b.len() as u64 + 1) as usize;
                    if random.below(2) == 0 && at < b.len() {
                        b.remove(at);
                    } else {
                        b.insert(at, random.below(keys + 1));
                    }
                }
                b
            } else {
                (0..random.below(14)).map(|_| random.below(keys)).collect()
            };
            assert_eq!(
                pair_by_key(&a, &b),
                pair_by_table(&a, &b),
                "old {a:?}, new {b:?}"
            );
        }
    }

    #[test]
    fn the_pairing_is_the_tables_where_the_band_must_widen() {
        // Runs that differ by more than the first band's 64 edits, with
        // few keys, so ties abound.
        let mut random = Random(42);
        for _ in 0..30 {
            let a: Vec<u64> = (0..150 + random.below(150))
                .map(|_| random.below(3))
                .collect();
            let b: Vec<u64> = (0..150 + random.below(150))
                .map(|_| random.below(3))
                .collect();
            assert_eq!(pair_by_key(&a, &b), pair_by_table(&a, &b));
        }
    }

    /// 30 000 calls a side, as a long suite makes: a few dozen call keys in
    /// loops, and the new run with 1 % of its calls added, removed or
    /// replaced.
    fn long_runs() -> (Vec<u32>, Vec<u32>) {
        let mut random = Random(7);
        let a: Vec<u32> = (0..30_000)
            .map(|i| (i % 40) as u32 ^ (random.below(3) as u32))
            .collect();
        let mut b = a.clone();
        for _ in 0..300 {
            let at = random.below(b.len() as u64) as usize;
            match random.below(3) {
                0 => {
                    b.remove(at);
                }
                1 => b.insert(at, 100 + random.below(5) as u32),
                _ => b[at] = random.below(40) as u32,
            }
        }
        (a, b)
    }

    #[test]
    fn thirty_thousand_calls_a_side_pair_in_linear_space_and_little_time() {
        let (a, b) = long_runs();
        peak::reset();
        let start = std::time::Instant::now();
        let pairs = pair_by_key(&a, &b);
        let took = start.elapsed();
        let peak = peak::bytes();
        eprintln!("30 000 × 30 000 calls paired in {took:?}, {peak} B at most");
        assert!(took.as_secs_f64() < 1.0, "took {took:?}");
        // The table took (n+1)·(m+1) cells of 4 B, 3.6 GB; the pairing
        // holds the keys, a few rows and its answer.
        assert!(peak < 16 << 20, "peak {peak} B");
        assert_a_pairing(&a, &b, &pairs);
        let paired = pairs
            .iter()
            .filter(|p| p[0].is_some() && p[1].is_some())
            .count();
        assert_eq!(paired, lcs_length(&a, &b));
    }

    #[test]
    fn runs_with_no_call_in_common_pair_at_once() {
        let a: Vec<u32> = (0..30_000).collect();
        let b: Vec<u32> = (30_000..60_000).collect();
        let start = std::time::Instant::now();
        let pairs = pair_by_key(&a, &b);
        assert!(start.elapsed().as_secs_f64() < 1.0);
        assert_a_pairing(&a, &b, &pairs);
        assert!(pairs.iter().all(|p| p[0].is_none() || p[1].is_none()));
    }

    #[test]
    fn the_bit_parallel_length_is_the_tables() {
        let mut random = Random(3);
        for _ in 0..500 {
            let a: Vec<u32> = (0..random.below(150))
                .map(|_| random.below(4) as u32)
                .collect();
            let b: Vec<u32> = (0..random.below(150))
                .map(|_| random.below(4) as u32)
                .collect();
            let table = pair_by_table(&a, &b)
                .iter()
                .filter(|p| p[0].is_some() && p[1].is_some())
                .count();
            assert_eq!(lcs_length(&a, &b), table);
        }
    }

    /// The bytes this thread holds at most, counted by the test binary's
    /// allocator.
    mod peak {
        use std::alloc::{GlobalAlloc, Layout, System};
        use std::cell::Cell;

        thread_local! {
            static LIVE: Cell<isize> = const { Cell::new(0) };
            static PEAK: Cell<isize> = const { Cell::new(0) };
            static BASE: Cell<isize> = const { Cell::new(0) };
        }

        struct Counting;

        fn add(bytes: isize) {
            let _ = LIVE.try_with(|live| {
                live.set(live.get() + bytes);
                let _ = PEAK.try_with(|peak| peak.set(peak.get().max(live.get())));
            });
        }

        // SAFETY: every call is passed to the system allocator unchanged;
        // only the counts are added.
        unsafe impl GlobalAlloc for Counting {
            unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
                add(layout.size() as isize);
                // SAFETY: as the caller's.
                unsafe { System.alloc(layout) }
            }

            unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
                add(-(layout.size() as isize));
                // SAFETY: as the caller's.
                unsafe { System.dealloc(ptr, layout) }
            }

            unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, size: usize) -> *mut u8 {
                add(size as isize - layout.size() as isize);
                // SAFETY: as the caller's.
                unsafe { System.realloc(ptr, layout, size) }
            }
        }

        #[global_allocator]
        static COUNTING: Counting = Counting;

        /// Starts counting this thread's peak from what it holds now.
        pub(crate) fn reset() {
            let live = LIVE.with(Cell::get);
            BASE.with(|b| b.set(live));
            PEAK.with(|p| p.set(live));
        }

        /// The most this thread held since [`reset`], above what it held
        /// then.
        pub fn bytes() -> usize {
            (PEAK.with(Cell::get) - BASE.with(Cell::get)).max(0) as usize
        }
    }
}
