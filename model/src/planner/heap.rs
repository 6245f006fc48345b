//! The DMO paper's heap allocation (Section IV) and the `reorder` planner.
//!
//! Heap allocation with a heuristic choice of the next buffer: start by
//! placing one buffer at offset 0; then repeatedly take the unplaced buffers
//! whose lifetime overlaps an already placed buffer and place the one that
//! fits at the lowest address (ties: larger first, then closer in time to the
//! seed, then tensor index). A buffer fits where it overlaps no live placed
//! buffer, except that the input of an operator that dies there may start as
//! low as `output end − O_s` (and an output may end as high as `input start +
//! O_s`).
//!
//! The paper seeds with a graph output (*backward*, its "reverse execution
//! order") or a graph input (*forward*). On a long chain of DMO pairs that
//! alone drifts: every input sits on the top part of its output, so going
//! backwards from the last layer the offsets climb, and by the time the
//! peak-defining layer is reached it no longer starts near 0 (MobileNet v1
//! 1.0 224 comes out at 4.29 MiB instead of 3.07 MiB). memtrace therefore also
//! seeds at the peak: the output and the dying inputs of the operator whose
//! step has the largest lower bound, growing both ways from there. Each
//! execution order (eager and lazy; they coincide for sequential models) is
//! planned from every seed and the lowest peak kept; the note names the
//! winner.

use std::cmp::Reverse;
use std::collections::BTreeSet;

use super::{candidate_orders, Plan, PlanOptions, Problem};
use crate::order::{self, OrderKind, PlanOrder};
use crate::planner::{Overlaps, PlannerKind};
use crate::Model;

/// Where the heap allocation starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Seed with a graph input, grow forwards in time.
    Forward,
    /// Seed with a graph output, grow backwards (the paper's reverse order).
    Backward,
    /// Seed with this buffer (an input or output of the peak step), grow
    /// both ways.
    Seed(usize),
}

impl Direction {
    /// Name of the direction for plan notes (`forward`, `backward`, or the seed tensor).
    pub fn name(self, problem: &Problem, model: &Model) -> String {
        match self {
            Direction::Forward => "forward".into(),
            Direction::Backward => "backward".into(),
            Direction::Seed(b) => format!(
                "seeded at `{}`",
                model.tensors[problem.buffers[b].tensor].name
            ),
        }
    }
}

/// Seeds at the step with the largest lower bound: its output and the
/// inputs that die there.
pub fn peak_seeds(problem: &Problem) -> Vec<Direction> {
    let steps = problem.steps.max(1);
    let mut live = vec![0u64; steps];
    for b in &problem.buffers {
        for l in &mut live[b.first..=b.last.min(steps - 1)] {
            *l += b.size;
        }
    }
    for p in &problem.pairs {
        let credit = p
            .credit
            .min(problem.buffers[p.output].size)
            .min(problem.buffers[p.input].size);
        live[p.step] = live[p.step].saturating_sub(credit);
    }
    let Some(peak_step) = (0..steps).max_by_key(|&s| (live[s], std::cmp::Reverse(s))) else {
        return Vec::new();
    };
    let mut seeds: Vec<usize> = (0..problem.buffers.len())
        .filter(|&i| problem.buffers[i].first == peak_step || problem.buffers[i].last == peak_step)
        .collect();
    seeds.sort_by_key(|&i| std::cmp::Reverse(problem.buffers[i].size));
    seeds.truncate(3);
    seeds.into_iter().map(Direction::Seed).collect()
}

/// For each buffer, its DMO partners: (other buffer, credit, this is the input).
fn partners(problem: &Problem) -> Vec<Vec<(usize, u64, bool)>> {
    let mut p = vec![Vec::new(); problem.buffers.len()];
    for pair in &problem.pairs {
        p[pair.input].push((pair.output, pair.credit, true));
        p[pair.output].push((pair.input, pair.credit, false));
    }
    p
}

/// Lowest offset (multiple of `align`) at which buffer `c` of `size` fits
/// against the placed buffers `placed` (offset, size, index).
pub(crate) fn lowest_fit(
    size: u64,
    align: u64,
    placed: impl Iterator<Item = (u64, u64, usize)>,
    partner: impl Fn(usize) -> Option<(u64, bool)>,
) -> u64 {
    // x is forbidden iff lo < x < hi.
    let mut forbidden: Vec<(i128, i128)> = placed
        .map(|(off, psize, idx)| {
            let (off, psize, size) = (off as i128, psize as i128, size as i128);
            match partner(idx) {
                // c is the input: it may start at or above p.end - credit.
                Some((credit, true)) => (off - size, off + psize - credit as i128),
                // c is the output: it may end at or below p.start + credit.
                Some((credit, false)) => (off - size + credit as i128, off + psize),
                None => (off - size, off + psize),
            }
        })
        .filter(|(lo, hi)| hi - lo > 1)
        .collect();
    forbidden.sort_unstable();
    let align = align as i128;
    let mut x: i128 = 0;
    for (lo, hi) in forbidden {
        if x <= lo {
            break;
        }
        if x < hi {
            x = (hi + align - 1).div_euclid(align) * align;
        }
    }
    x as u64
}

/// The distinct entries of `lists` that pass `keep` (`stamp` marks seen ones
/// with `id`).
fn distinct(
    lists: &[Vec<usize>],
    stamp: &mut [u32],
    id: u32,
    keep: impl Fn(usize) -> bool,
) -> Vec<usize> {
    let mut out = Vec::new();
    for list in lists {
        for &i in list {
            if stamp[i] != id && keep(i) {
                stamp[i] = id;
                out.push(i);
            }
        }
    }
    out
}

/// Each buffer's time key, closer to the seed end first: its first step
/// (forward), steps from the end (backward), or its distance in time to
/// the seed buffer.
fn time_keys(problem: &Problem, direction: Direction) -> Vec<usize> {
    let bufs = &problem.buffers;
    let steps = problem.steps.max(1);
    let seed_time = match direction {
        Direction::Seed(b) if b < bufs.len() => Some((bufs[b].first, bufs[b].last)),
        _ => None,
    };
    bufs.iter()
        .map(|b| match (direction, seed_time) {
            (Direction::Backward, _) => steps - 1 - b.last.min(steps - 1),
            (Direction::Seed(_), Some((f, l))) => {
                if b.last < f {
                    f - b.last
                } else {
                    b.first.saturating_sub(l)
                }
            }
            _ => b.first,
        })
        .collect()
}

/// Heap placement of `problem` in `direction`; returns offsets per buffer.
pub fn heap_offsets(problem: &Problem, direction: Direction) -> Vec<u64> {
    let n = problem.buffers.len();
    let mut offsets = vec![0u64; n];
    if n == 0 {
        return offsets;
    }
    let partner_list = partners(problem);
    let bufs = &problem.buffers;
    let steps = problem.steps.max(1);
    // Placed buffers live at each step.
    let mut at_step: Vec<Vec<usize>> = vec![Vec::new(); steps];
    let mut placed = vec![false; n];
    let mut stamp = vec![0u32; n];
    let mut stamp_id = 0u32;
    let span = |i: usize| bufs[i].first..=bufs[i].last.min(steps - 1);
    // Buffers live at each step (for finding new candidates).
    let mut live_at: Vec<Vec<usize>> = vec![Vec::new(); steps];
    for i in 0..n {
        for list in &mut live_at[span(i)] {
            list.push(i);
        }
    }
    let times = time_keys(problem, direction);
    let time_key = |i: usize| times[i];
    // The lowest offset `u` fits at among the placed buffers live with it.
    let fit_of = |u: usize, offsets: &[u64], at_step: &[Vec<usize>], stamp: &mut [u32], id: u32| {
        let others = distinct(&at_step[span(u)], stamp, id, |_| true);
        lowest_fit(
            bufs[u].size,
            problem.alignment,
            others.iter().map(|&p| (offsets[p], bufs[p].size, p)),
            |p| {
                partner_list[u]
                    .iter()
                    .find(|&&(o, _, _)| o == p)
                    .map(|&(_, credit, is_input)| (credit, is_input))
            },
        )
    };
    // Seed: the given buffer, or the one nearest the chosen end of time.
    let seed = match direction {
        Direction::Seed(b) if b < n => b,
        _ => (0..n)
            .min_by_key(|&i| (time_key(i), Reverse(bufs[i].size), i))
            .unwrap_or(0),
    };
    // Candidate queue keyed by (fit offset, larger first, time, index).
    type Key = (u64, Reverse<u64>, usize, usize);
    let mut queue: BTreeSet<Key> = BTreeSet::new();
    let mut key_of: Vec<Option<Key>> = vec![None; n];
    let mut remaining = n;
    let mut next = Some(seed);
    while let Some(c) = next {
        // Place c.
        stamp_id += 1;
        offsets[c] = fit_of(c, &offsets, &at_step, &mut stamp, stamp_id);
        placed[c] = true;
        remaining -= 1;
        if let Some(k) = key_of[c].take() {
            queue.remove(&k);
        }
        for list in &mut at_step[span(c)] {
            list.push(c);
        }
        // Re-evaluate unplaced buffers live together with c.
        stamp_id += 1;
        let touched = distinct(&live_at[span(c)], &mut stamp, stamp_id, |u| !placed[u]);
        for u in touched {
            stamp_id += 1;
            let fit = fit_of(u, &offsets, &at_step, &mut stamp, stamp_id);
            let key = (fit, Reverse(bufs[u].size), time_key(u), u);
            if let Some(old) = key_of[u].replace(key) {
                queue.remove(&old);
            }
            queue.insert(key);
        }
        next = match queue.iter().next() {
            Some(&k) => Some(k.3),
            None if remaining > 0 => {
                // Nothing overlaps the placed buffers in time: start again
                // from the unplaced buffer nearest the seed end.
                (0..n)
                    .filter(|&i| !placed[i])
                    .min_by_key(|&i| (time_key(i), Reverse(bufs[i].size), i))
            }
            None => None,
        };
    }
    offsets
}

/// Best heap plan over `orders` × both directions.
pub(crate) fn best_heap(
    model: &Model,
    overlaps: &Overlaps,
    opts: &PlanOptions,
    orders: &[(PlanOrder, Vec<usize>)],
    planner: PlannerKind,
) -> Plan {
    let mut best: Option<Plan> = None;
    for (name, order) in orders {
        let problem = Problem::new(model, order, overlaps, opts.alignment);
        let mut seeds = vec![Direction::Backward, Direction::Forward];
        seeds.extend(peak_seeds(&problem));
        for dir in seeds {
            let offsets = heap_offsets(&problem, dir);
            let dir_name = dir.name(&problem, model);
            let mut plan = problem.plan(model, planner, &overlaps.method, name, &offsets);
            plan.note = Some(format!("{name} order, {dir_name}"));
            if best.as_ref().is_none_or(|b| plan.peak_bytes < b.peak_bytes) {
                best = Some(plan);
            }
        }
    }
    best.unwrap_or_else(|| {
        let problem = Problem::new(model, &[], overlaps, opts.alignment);
        problem.plan(model, planner, &overlaps.method, &PlanOrder::model(), &[])
    })
}

/// `dmo-heap`: best of eager and lazy orders, backward and forward.
pub fn dmo_heap(model: &Model, overlaps: &Overlaps, opts: &PlanOptions) -> Plan {
    let orders = candidate_orders(model, &[OrderKind::Eager, OrderKind::Lazy], opts);
    best_heap(model, overlaps, opts, &orders, PlannerKind::DmoHeap)
}

/// `reorder`: the order minimising the peak working set (Liberis & Lane's
/// DP, with DMO credits), then heap placement. If the DP gives up, the best
/// of the eager and lazy orders is used and the note says so.
pub fn reorder(model: &Model, overlaps: &Overlaps, opts: &PlanOptions) -> Plan {
    if opts.model_order_only {
        let orders = candidate_orders(model, &[], opts);
        return best_heap(model, overlaps, opts, &orders, PlannerKind::Reorder);
    }
    let os = |op: usize| overlaps.get(op);
    match order::reorder_dp(model, &os, opts.reorder_max_states) {
        Ok(r) => {
            let mut plan = best_heap(
                model,
                overlaps,
                opts,
                &[(PlanOrder::Reordered, r.order)],
                PlannerKind::Reorder,
            );
            let note = plan.note.take().unwrap_or_default();
            plan.note = Some(format!(
                "{note}; DP visited {} operator sets, optimal working set {} B",
                r.states, r.peak_working_set
            ));
            plan
        }
        Err(e) => {
            let orders = candidate_orders(model, &[OrderKind::Eager, OrderKind::Lazy], opts);
            let mut plan = best_heap(model, overlaps, opts, &orders, PlannerKind::Reorder);
            plan.note = Some(format!("{e}; fell back to eager/lazy orders"));
            plan
        }
    }
}
