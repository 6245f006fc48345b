//! TFLM's `GreedyMemoryPlanner` and `LinearMemoryPlanner`, reimplemented from
//! their behaviour (the ported unit tests below are the specification).
//!
//! Greedy: buffers sorted by size, largest first (a stable descending sort:
//! equal sizes keep the order they were added in); the first goes at 0; each
//! next one walks the already-placed buffers that are live at the same time,
//! in order of offset, and takes the first gap big enough (or the end of the
//! last of them). Placed buffers with equal offsets keep insertion order.
//!
//! Linear: every buffer at the end of the previous one, in the order added.

use super::{Plan, PlanOptions, Problem};
use crate::order::{self, OrderKind, PlanOrder};
use crate::planner::{Overlaps, PlannerKind};
use crate::Model;

/// One buffer request as TFLM's `AddBuffer(size, first_time_used,
/// last_time_used)` receives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// Size in bytes.
    pub size: u64,
    /// First step the buffer is used.
    pub first: usize,
    /// Last step the buffer is used.
    pub last: usize,
}

/// Offsets of TFLM's greedy planner for `requests` (in `AddBuffer` order).
pub fn greedy_offsets(requests: &[Request]) -> Vec<u64> {
    let n = requests.len();
    let mut offsets = vec![0u64; n];
    if n == 0 {
        return offsets;
    }
    // Current TFLM fills its sort array from the tail (offline-planned
    // buffers take the head), so equal sizes end up in reverse `AddBuffer`
    // order after its stable bubble sort. tfmicro 0.1.0 (2019) kept them in
    // insertion order; the arena head of today's TFLM is what we match.
    let mut by_size: Vec<usize> = (0..n).rev().collect();
    by_size.sort_by(|&a, &b| requests[b].size.cmp(&requests[a].size));
    // Placed buffers in ascending offset order; ties keep placement order.
    let mut placed: Vec<usize> = vec![by_size[0]];
    offsets[by_size[0]] = 0;
    for &id in &by_size[1..] {
        let want = requests[id];
        let live_together = |other: usize| {
            let r = &requests[other];
            !(r.first > want.last || want.first > r.last)
        };
        let mut candidate = 0u64;
        for &other in placed.iter().filter(|&&o| live_together(o)) {
            if offsets[other] >= candidate && offsets[other] - candidate >= want.size {
                break; // the gap before `other` is big enough
            }
            candidate = candidate.max(offsets[other] + requests[other].size);
        }
        offsets[id] = candidate;
        let at = placed.partition_point(|&p| offsets[p] <= candidate);
        placed.insert(at, id);
    }
    offsets
}

/// Offsets of TFLM's linear planner.
pub fn linear_offsets(requests: &[Request]) -> Vec<u64> {
    let mut next = 0;
    requests
        .iter()
        .map(|r| {
            let o = next;
            next += r.size;
            o
        })
        .collect()
}

/// The problem's buffers as `tflm-greedy` requests.
pub(crate) fn requests(problem: &Problem) -> Vec<Request> {
    problem
        .buffers
        .iter()
        .map(|b| Request {
            size: b.size,
            first: b.first,
            last: b.last,
        })
        .collect()
}

/// `tflm-greedy` on the model's order, as TFLM would plan it.
pub fn tflm_greedy(model: &Model, opts: &PlanOptions) -> Plan {
    let order = order::order(model, OrderKind::Model);
    let problem = Problem::new(model, &order, &Overlaps::none(model), opts.alignment);
    let offsets = greedy_offsets(&requests(&problem));
    problem.plan(
        model,
        PlannerKind::TflmGreedy,
        "none",
        &PlanOrder::model(),
        &offsets,
    )
}

/// `linear` on the model's order.
pub fn linear(model: &Model, opts: &PlanOptions) -> Plan {
    let order = order::order(model, OrderKind::Model);
    let problem = Problem::new(model, &order, &Overlaps::none(model), opts.alignment);
    let offsets = linear_offsets(&requests(&problem));
    problem.plan(
        model,
        PlannerKind::Linear,
        "none",
        &PlanOrder::model(),
        &offsets,
    )
}

#[cfg(test)]
mod tests {
    //! The cases of TFLM's `greedy_memory_planner_test.cc` and
    //! `linear_memory_planner_test.cc` (tfmicro 0.1.0), with their expected
    //! offsets and sizes.
    use super::*;

    /// Peak of TFLM's `GetMaximumMemorySize`: the largest end offset.
    fn max_memory(requests: &[Request], offsets: &[u64]) -> u64 {
        requests
            .iter()
            .zip(offsets)
            .map(|(r, &o)| o + r.size)
            .max()
            .unwrap_or(0)
    }

    fn req(size: u64, first: usize, last: usize) -> Request {
        Request { size, first, last }
    }

    /// The stable descending sort TFLM's `ReverseSortInPlace` performs.
    fn reverse_sort(values: &[u64]) -> (Vec<u64>, Vec<usize>) {
        let mut ids: Vec<usize> = (0..values.len()).collect();
        ids.sort_by(|&a, &b| values[b].cmp(&values[a]));
        (ids.iter().map(|&i| values[i]).collect(), ids)
    }

    #[test]
    fn reverse_sort_in_place_cases() {
        let (v, ids) = reverse_sort(&[10, 9, 8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(v, vec![10, 9, 8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(ids, (0..10).collect::<Vec<_>>());

        let (v, ids) = reverse_sort(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
        assert_eq!(v, vec![10, 9, 8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(ids, (0..10).rev().collect::<Vec<_>>());

        // 1..=10 repeated ten times: values descend, equal values keep their
        // original order (ids 9, 19, …, 99, then 8, 18, …).
        let values: Vec<u64> = (0..100).map(|i| i % 10 + 1).collect();
        let (v, ids) = reverse_sort(&values);
        let expected_v: Vec<u64> = (0..100).map(|i| 10 - i / 10).collect();
        let expected_ids: Vec<usize> = (0..100).map(|i| (9 - i / 10) + 10 * (i % 10)).collect();
        assert_eq!(v, expected_v);
        assert_eq!(ids, expected_ids);
    }

    fn overlap_free(reqs: &[Request], offsets: &[u64]) -> bool {
        for i in 0..reqs.len() {
            for j in 0..reqs.len() {
                let (a, b) = (&reqs[i], &reqs[j]);
                if i == j || a.first > b.last || b.first > a.last {
                    continue;
                }
                if offsets[i] < offsets[j] + b.size && offsets[j] < offsets[i] + a.size {
                    return false;
                }
            }
        }
        true
    }

    #[test]
    fn greedy_basics() {
        let reqs = [req(10, 0, 1), req(20, 2, 3)];
        let off = greedy_offsets(&reqs);
        assert!(overlap_free(&reqs, &off));
        assert_eq!(max_memory(&reqs, &off), 20);
        assert_eq!(off, vec![0, 0]);
    }

    #[test]
    fn greedy_medium() {
        let reqs = [
            req(10, 0, 1),
            req(20, 1, 2),
            req(30, 2, 3),
            req(40, 3, 4),
            req(50, 0, 1),
        ];
        let off = greedy_offsets(&reqs);
        assert_eq!(off, vec![50, 70, 40, 0, 0]);
        assert!(overlap_free(&reqs, &off));
        assert_eq!(max_memory(&reqs, &off), 90);
    }

    /// Buffer sizes and lifetimes of the 250 KB person-detection MobileNet.
    pub(crate) fn person_detection_requests() -> Vec<Request> {
        vec![
            req(9216, 0, 29),
            req(3, 28, 29),
            req(256, 27, 28),
            req(2304, 26, 27),
            req(2304, 25, 26),
            req(2304, 24, 25),
            req(1152, 23, 24),
            req(4608, 22, 23),
            req(4608, 21, 22),
            req(4608, 20, 21),
            req(4608, 19, 20),
            req(4608, 18, 19),
            req(4608, 17, 18),
            req(4608, 16, 17),
            req(4608, 15, 16),
            req(4608, 14, 15),
            req(4608, 13, 14),
            req(4608, 12, 13),
            req(2304, 11, 12),
            req(9216, 10, 11),
            req(9216, 9, 10),
            req(9216, 8, 9),
            req(4608, 7, 8),
            req(18432, 6, 7),
            req(18432, 5, 6),
            req(18432, 4, 5),
            req(9216, 3, 4),
            req(36864, 2, 3),
            req(18432, 1, 2),
            req(18432, 0, 1),
        ]
    }

    #[test]
    fn greedy_person_detection_model() {
        let reqs = person_detection_requests();
        let off = greedy_offsets(&reqs);
        assert!(overlap_free(&reqs, &off));
        // The sum of all the buffers is 241,027 bytes; the plan must beat it.
        assert!(max_memory(&reqs, &off) < 241_027);
    }

    #[test]
    fn greedy_overlap_case() {
        let reqs = [req(100, 0, 1), req(50, 2, 3), req(20, 1, 2)];
        let off = greedy_offsets(&reqs);
        assert!(overlap_free(&reqs, &off));
        assert_eq!(max_memory(&reqs, &off), 120);
    }

    #[test]
    fn linear_basics() {
        let reqs = [req(10, 0, 1), req(20, 1, 2)];
        let off = linear_offsets(&reqs);
        assert_eq!(max_memory(&reqs, &off), 30);
        assert_eq!(off, vec![0, 10]);
    }

    #[test]
    fn linear_person_detection_model() {
        let reqs = person_detection_requests();
        let off = linear_offsets(&reqs);
        assert_eq!(max_memory(&reqs, &off), 241_027);
    }
}
