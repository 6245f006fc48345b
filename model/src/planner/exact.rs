//! `exact`: branch and bound over placements, DMO overlaps allowed.
//!
//! For a fixed execution order, every pair of tensors live at a common step
//! must be ordered in the arena: `b` above `a` means `off(b) ≥ off(a) +
//! size(a)`, or, for a DMO pair (`a` the output, `b` the input dying at the
//! same operator), `off(b) ≥ off(a) + size(a) − credit`. Given a set of such
//! decisions, the lowest offsets satisfying them are longest paths; the search
//! keeps those minimal offsets, picks a pair that still collides, and branches
//! on its two orientations. A node whose peak already reaches the incumbent
//! (or whose lower bound does) is cut. Every feasible placement satisfies one
//! orientation of each pair, so when the search finishes, the incumbent is
//! optimal for that order. (A cycle of decisions has positive length — an
//! O_s never exceeds the input it lets overlap — so it only drives offsets up
//! until the bound cuts it.)
//!
//! The orders tried are the model's, eager, lazy and (if the DP finishes)
//! the reordered one; the incumbent starts as the best `dmo-heap` /
//! `tflm-greedy` placement of those orders, so `exact` is never worse than
//! they are. Status "optimal" (for the orders searched) when every order's
//! search finished, else "best found".

use std::time::Instant;

use super::greedy::{greedy_offsets, requests};
use super::heap::{heap_offsets, peak_seeds, Direction};
use super::{candidate_orders, Plan, PlanOptions, PlanStatus, Problem};
use crate::order::{self, OrderKind, PlanOrder};
use crate::planner::{Overlaps, PlannerKind};
use crate::Model;

/// Searches stop being attempted beyond this many colliding pairs (the
/// depth of the search's recursion).
const MAX_CONFLICTS: usize = 4000;

fn colliding_pairs(problem: &Problem) -> usize {
    let n = problem.buffers.len();
    (0..n)
        .map(|a| (a + 1..n).filter(|&b| problem.conflict(a, b)).count())
        .sum()
}

struct Search<'a> {
    problem: &'a Problem,
    /// Edge weight a → b if b goes above a (None: no conflict).
    conflicts: Vec<(usize, usize)>,
    weight: Vec<Vec<Option<i128>>>,
    offsets: Vec<i128>,
    edges: Vec<Vec<(usize, i128)>>,
    best: u64,
    best_offsets: Option<Vec<u64>>,
    lower_bound: u64,
    deadline: Instant,
    nodes: u64,
    timed_out: bool,
}

impl<'a> Search<'a> {
    fn new(problem: &'a Problem, incumbent: u64, deadline: Instant) -> Self {
        let n = problem.buffers.len();
        let mut weight = vec![vec![None; n]; n];
        let mut conflicts = Vec::new();
        for a in 0..n {
            for b in a + 1..n {
                if problem.conflict(a, b) {
                    conflicts.push((a, b));
                }
            }
        }
        for &(a, b) in &conflicts {
            weight[a][b] = Some(problem.buffers[a].size as i128);
            weight[b][a] = Some(problem.buffers[b].size as i128);
        }
        for p in &problem.pairs {
            // The input may sit as low as output end − credit.
            let out_size = problem.buffers[p.output].size as i128;
            weight[p.output][p.input] = Some(out_size - p.credit as i128);
        }
        // Biggest pairs first: they decide the peak.
        conflicts.sort_by_key(|&(a, b)| {
            std::cmp::Reverse(problem.buffers[a].size + problem.buffers[b].size)
        });
        Search {
            problem,
            conflicts,
            weight,
            offsets: vec![0; n],
            edges: vec![Vec::new(); n],
            best: incumbent,
            best_offsets: None,
            lower_bound: problem.lower_bound(),
            deadline,
            nodes: 0,
            timed_out: false,
        }
    }

    fn size(&self, i: usize) -> i128 {
        self.problem.buffers[i].size as i128
    }

    fn peak(&self) -> i128 {
        (0..self.offsets.len())
            .map(|i| self.offsets[i] + self.size(i))
            .max()
            .unwrap_or(0)
    }

    /// Whether (a, b) is satisfied by the current offsets.
    fn satisfied(&self, a: usize, b: usize) -> bool {
        let above = |lo: usize, hi: usize| {
            self.weight[lo][hi].is_some_and(|w| self.offsets[hi] >= self.offsets[lo] + w)
        };
        above(a, b) || above(b, a)
    }

    /// Adds edge lo → hi and propagates; false if some buffer then reaches
    /// the incumbent. `trail` records changed offsets for undo.
    fn add_edge(&mut self, lo: usize, hi: usize, trail: &mut Vec<(usize, i128)>) -> bool {
        let w = match self.weight[lo][hi] {
            Some(w) => w,
            None => return true,
        };
        self.edges[lo].push((hi, w));
        let mut stack = vec![(lo, hi, w)];
        while let Some((from, to, w)) = stack.pop() {
            let want = self.offsets[from] + w;
            if want > self.offsets[to] {
                trail.push((to, self.offsets[to]));
                self.offsets[to] = want;
                if want + self.size(to) >= self.best as i128 {
                    return false;
                }
                for &(next, w2) in &self.edges[to] {
                    stack.push((to, next, w2));
                }
            }
        }
        true
    }

    fn undo(&mut self, lo: usize, trail: Vec<(usize, i128)>) {
        for (i, old) in trail.into_iter().rev() {
            self.offsets[i] = old;
        }
        self.edges[lo].pop();
    }

    fn dfs(&mut self) {
        self.nodes += 1;
        if self.nodes.is_multiple_of(1024) && Instant::now() >= self.deadline {
            self.timed_out = true;
        }
        if self.timed_out || self.best <= self.lower_bound {
            return;
        }
        let peak = self.peak();
        if peak >= self.best as i128 {
            return;
        }
        let Some(&(a, b)) = self.conflicts.iter().find(|&&(a, b)| !self.satisfied(a, b)) else {
            self.best = peak as u64;
            self.best_offsets = Some(self.offsets.iter().map(|&o| o as u64).collect());
            return;
        };
        // Try the orientation that raises the offsets least first.
        let cost = |s: &Self, lo: usize, hi: usize| {
            s.weight[lo][hi].map_or(i128::MAX, |w| s.offsets[lo] + w + s.size(hi))
        };
        let mut options = [(a, b), (b, a)];
        if cost(self, b, a) < cost(self, a, b) {
            options.swap(0, 1);
        }
        for (lo, hi) in options {
            let mut trail = Vec::new();
            if self.add_edge(lo, hi, &mut trail) {
                self.dfs();
            }
            self.undo(lo, trail);
            if self.timed_out {
                return;
            }
        }
    }
}

/// The best heuristic placement of `problem`: the incumbent a search must
/// beat.
fn incumbent(problem: &Problem) -> Vec<u64> {
    let mut seeds = vec![Direction::Backward, Direction::Forward];
    seeds.extend(peak_seeds(problem));
    let mut candidates: Vec<Vec<u64>> = seeds
        .into_iter()
        .map(|d| heap_offsets(problem, d))
        .collect();
    candidates.push(greedy_offsets(&requests(problem)));
    candidates
        .into_iter()
        .min_by_key(|o| problem.peak(o))
        .unwrap_or_default()
}

/// The offsets found for one order's `problem` by `deadline`, whether the
/// search finished (proved them optimal), and what it did.
fn search_order(
    problem: &Problem,
    opts: &PlanOptions,
    deadline: Instant,
) -> (Vec<u64>, bool, String) {
    let incumbent = incumbent(problem);
    if problem.buffers.len() > opts.exact_max_tensors {
        let note = format!(
            "{} tensors > {} searched",
            problem.buffers.len(),
            opts.exact_max_tensors
        );
        return (incumbent, false, note);
    }
    if colliding_pairs(problem) > MAX_CONFLICTS {
        let note = format!("more than {MAX_CONFLICTS} colliding pairs, not searched");
        return (incumbent, false, note);
    }
    let mut search = Search::new(problem, problem.peak(&incumbent), deadline);
    search.dfs();
    let offsets = search.best_offsets.take().unwrap_or(incumbent);
    (
        offsets,
        !search.timed_out,
        format!("{} nodes", search.nodes),
    )
}

/// `exact`: see the module docs.
pub fn exact(model: &Model, overlaps: &Overlaps, opts: &PlanOptions) -> Plan {
    let start = Instant::now();
    let deadline = start + opts.exact_time_limit;
    let os = |op: usize| overlaps.get(op);
    let mut orders = candidate_orders(
        model,
        &[OrderKind::Model, OrderKind::Eager, OrderKind::Lazy],
        opts,
    );
    let dp = if opts.model_order_only {
        Err(String::new())
    } else {
        order::reorder_dp(model, &os, opts.reorder_max_states).map_err(|e| e.to_string())
    };
    if let Ok(r) = dp {
        if !orders.iter().any(|(_, o)| *o == r.order) {
            orders.push((PlanOrder::Reordered, r.order));
        }
    }
    let mut best: Option<(Plan, u64)> = None;
    let mut all_finished = true;
    let mut notes = Vec::new();
    for (name, order) in &orders {
        let problem = Problem::new(model, order, overlaps, opts.alignment);
        let (offsets, finished, note) = search_order(&problem, opts, deadline);
        notes.push(format!("{name}: {note}"));
        all_finished &= finished;
        let peak = problem.peak(&offsets);
        let plan = problem.plan(model, PlannerKind::Exact, &overlaps.method, name, &offsets);
        if best.as_ref().is_none_or(|(_, p)| peak < *p) {
            best = Some((plan, peak));
        }
    }
    let Some((mut plan, _)) = best else {
        let problem = Problem::new(model, &[], overlaps, opts.alignment);
        return problem.plan(
            model,
            PlannerKind::Exact,
            &overlaps.method,
            &PlanOrder::model(),
            &[],
        );
    };
    plan.status = if all_finished {
        PlanStatus::Optimal
    } else {
        PlanStatus::BestFound
    };
    if !all_finished {
        notes.push(format!(
            "stopped after {:.1} s",
            start.elapsed().as_secs_f64()
        ));
    }
    plan.note = Some(format!(
        "optimal over orders searched ({})",
        notes.join(", ")
    ));
    plan
}
