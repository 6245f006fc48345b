//! Planner tests: Table III, the real models, reordering, exact vs heuristics,
//! the validator, offline export and JSON (the plan pictures are tested with
//! them, in the analyzer's `plot::plan`).

use super::*;
use crate::order::{self as ord, OrderKind};
use crate::tests::{real_model, tfmicro_models, REAL_MODELS};
use crate::zoo::{self, GraphBuilder};
use crate::{tflite, Dtype, OpKind, OpOptions};

fn analytic(model: &Model) -> Overlaps {
    Overlaps::compute(model, &OverlapMethod::Analytic)
}

fn opts() -> PlanOptions {
    PlanOptions::default()
}

const KIB: u64 = 1024;

/// Any closure is a source: `FnOverlap("mine".into(), |m, op| ...)`.
struct FnOverlap<F>(String, F);

impl<F: Fn(&Model, usize) -> Option<u64>> OverlapSource for FnOverlap<F> {
    fn name(&self) -> String {
        self.0.clone()
    }
    fn overlap(&self, model: &Model, op: usize) -> Option<u64> {
        (self.1)(model, op)
    }
}

/// The paper's Table III MobileNet rows: (zoo name, original KB, optimised KB).
const TABLE_III: [(&str, u64, u64); 6] = [
    ("mobilenet_v1_1.0_224", 4704, 3136),
    ("mobilenet_v1_1.0_224_int8", 1176, 784),
    ("mobilenet_v1_0.25_224", 1176, 786),
    ("mobilenet_v1_0.25_128_int8", 96, 64),
    ("mobilenet_v2_0.35_224", 2940, 2352),
    ("mobilenet_v2_1.0_224", 5880, 4704),
];

#[test]
fn table_three_mobilenet_v1_025_128_int8_goes_from_96_to_64_kb() {
    let m = zoo::build("mobilenet_v1_0.25_128_int8").unwrap();
    let original = run(&m, PlannerKind::DmoHeap, &Overlaps::none(&m), &opts()).unwrap();
    assert_eq!(original.peak_bytes, Some(96 * KIB));
    let dmo = run(&m, PlannerKind::DmoHeap, &analytic(&m), &opts()).unwrap();
    let peak = dmo.peak_bytes.unwrap();
    assert!((64 * KIB..65 * KIB).contains(&peak), "{peak}");
    // The saving comes from conv_pw_1 (32 KiB in, 64 KiB out) overlapping.
    assert!(dmo
        .overlaps_used
        .iter()
        .any(|u| m.tensors[u.output].name == "conv_pw_1" && u.bytes > 31 * KIB));
    // The lower bound agrees: nothing below 64 KiB is possible.
    assert!(dmo.lower_bound_bytes >= 64 * KIB);
}

#[test]
fn table_three_rows_are_reproduced() {
    for (name, original_kb, optimised_kb) in TABLE_III {
        let m = zoo::build(name).unwrap();
        let c = report::compare_all(&m, &analytic(&m), &opts()).unwrap();
        let heap = c.plan("dmo-heap", "none").unwrap().peak_bytes.unwrap();
        assert_eq!(heap, original_kb * KIB, "{name} original");
        let dmo = c.plan("dmo-heap", "analytic").unwrap().peak_bytes.unwrap();
        let paper = optimised_kb * KIB;
        // Within 0.5 % of the paper (docs/planners.md explains the rest:
        // the analytic O_s deficit of the peak layer and 16-byte alignment).
        let diff = dmo.abs_diff(paper) as f64 / paper as f64;
        assert!(
            diff < 0.005,
            "{name}: {dmo} vs {paper} ({:.3} %)",
            diff * 100.0
        );
        let exact = c.plan("exact", "analytic").unwrap();
        assert!(exact.peak_bytes.unwrap() <= dmo, "{name}");
        eprintln!("{}", c.to_table());
    }
}

#[test]
fn algorithmic_overlaps_plan_at_least_as_well_as_analytic() {
    for name in ["mobilenet_v1_0.25_128_int8", "mobilenet_v1_1.0_224"] {
        let m = zoo::build(name).unwrap();
        let an = analytic(&m);
        let al = Overlaps::compute(&m, &OverlapMethod::Algorithmic);
        for op in 0..m.ops.len() {
            assert!(
                al.get(op) >= an.get(op),
                "{name} op {op}: analytic above algorithmic"
            );
        }
        let a = run(&m, PlannerKind::Exact, &an, &opts()).unwrap();
        let b = run(&m, PlannerKind::Exact, &al, &opts()).unwrap();
        assert!(b.peak_bytes <= a.peak_bytes);
        eprintln!(
            "{name}: analytic {:?} algorithmic {:?}",
            a.peak_bytes, b.peak_bytes
        );
    }
}

#[test]
fn the_four_real_models_plan_and_every_plan_validates() {
    for name in REAL_MODELS {
        let m = real_model(name);
        for ov in [Overlaps::none(&m), analytic(&m)] {
            let c = report::compare_all(&m, &ov, &opts()).unwrap();
            eprintln!("{}", c.to_table());
            for p in &c.plans {
                if p.status == PlanStatus::NotApplicable {
                    continue;
                }
                let used = if p.overlap == "none" {
                    Overlaps::none(&m)
                } else {
                    ov.clone()
                };
                validate::validate(&m, p, &used).unwrap();
                let peak = p.peak_bytes.unwrap();
                assert!(peak >= p.lower_bound_bytes, "{name} {}", p.planner);
                assert_eq!(p.gap_bytes, Some(peak - p.lower_bound_bytes));
            }
            let exact = c.plan("exact", &ov.method).unwrap();
            for p in c
                .plans
                .iter()
                .filter(|p| p.overlap == ov.method || p.overlap == "none")
            {
                if let Some(peak) = p.peak_bytes {
                    assert!(
                        exact.peak_bytes.unwrap() <= peak,
                        "{name}: exact vs {}",
                        p.planner
                    );
                }
            }
        }
    }
}

/// Sizes and lifetimes of TFLM's `TestPersonDetectionModel` buffers.
const TFLM_PERSON_DETECTION_SIZES: [u64; 30] = [
    9216, 3, 256, 2304, 2304, 2304, 1152, 4608, 4608, 4608, 4608, 4608, 4608, 4608, 4608, 4608,
    4608, 4608, 2304, 9216, 9216, 9216, 4608, 18432, 18432, 18432, 9216, 36864, 18432, 18432,
];

#[test]
fn person_detection_is_the_model_of_tflm_planner_tests() {
    let m = real_model("person_detection_grayscale");
    let unaligned = PlanOptions {
        alignment: 1,
        ..opts()
    };
    let linear = run(&m, PlannerKind::Linear, &Overlaps::none(&m), &unaligned).unwrap();
    // linear_memory_planner_test.cc: the sum of the buffers is 241,027 bytes.
    assert_eq!(linear.peak_bytes, Some(241_027));
    let mut ours: Vec<u64> = linear.tensors.iter().map(|t| t.size).collect();
    let mut theirs = TFLM_PERSON_DETECTION_SIZES.to_vec();
    ours.sort_unstable();
    theirs.sort_unstable();
    assert_eq!(ours, theirs);
    let greedy = run(&m, PlannerKind::TflmGreedy, &Overlaps::none(&m), &unaligned).unwrap();
    assert!(greedy.peak_bytes.unwrap() < 241_027);
}

#[test]
fn reordering_beats_the_default_order_on_a_branching_graph() {
    let m = zoo::liberis_fig1();
    let none = Overlaps::none(&m);
    let o = PlanOptions {
        alignment: 1,
        ..opts()
    };
    let greedy = run(&m, PlannerKind::TflmGreedy, &none, &o).unwrap();
    let heap = run(&m, PlannerKind::DmoHeap, &none, &o).unwrap();
    let reorder = run(&m, PlannerKind::Reorder, &none, &o).unwrap();
    assert_eq!(greedy.peak_bytes, Some(5216));
    assert_eq!(heap.peak_bytes, Some(5216));
    assert_eq!(reorder.peak_bytes, Some(4960));
    assert_eq!(reorder.order_name.name(), "reordered");
    assert!(ord::is_valid_order(&m, &reorder.order));
    // The default order's own bound is 5216: no placement of it reaches 4960.
    assert_eq!(greedy.lower_bound_bytes, 5216);
    assert_eq!(reorder.lower_bound_bytes, 4960);
    // MobileNet v2's residual graph: the DP finds nothing better than the
    // model order, but must not be worse.
    let v2 = zoo::build("mobilenet_v2_0.35_224").unwrap();
    let ov = analytic(&v2);
    let r = run(&v2, PlannerKind::Reorder, &ov, &opts()).unwrap();
    let h = run(&v2, PlannerKind::DmoHeap, &ov, &opts()).unwrap();
    assert!(r.lower_bound_bytes <= h.lower_bound_bytes);
}

/// A deterministic pseudo-random small DAG.
fn random_graph(seed: u64, ops: usize) -> Model {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = |n: u64| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) % n
    };
    let mut g = GraphBuilder::new(format!("random_{seed}"), Dtype::Int8);
    let mut tensors = vec![g.input("input", &[1, 4, 4, 1 + next(8) as u32])];
    for i in 0..ops {
        let a = tensors[tensors.len() - 1 - next(tensors.len().min(3) as u64) as usize];
        let mut inputs = vec![a];
        if next(3) == 0 && tensors.len() > 1 {
            let b = tensors[next(tensors.len() as u64) as usize];
            if b != a {
                inputs.push(b);
            }
        }
        let kind = if inputs.len() == 2 {
            OpKind::Concatenation
        } else {
            OpKind::Relu
        };
        let shape = if kind == OpKind::Relu && next(2) == 0 {
            g.shape(a).to_vec()
        } else {
            vec![1, 4, 4, 1 + next(12) as u32]
        };
        let t = g.op(kind, inputs, &format!("t{i}"), &shape, OpOptions::default());
        tensors.push(t);
    }
    let last = *tensors.last().unwrap();
    g.finish(&[last])
}

#[test]
fn exact_matches_or_beats_every_heuristic_on_small_graphs() {
    let mut models: Vec<Model> = vec![
        zoo::liberis_fig1(),
        zoo::sakr_cifar10(),
        zoo::build("mobilenet_v1_0.25_128_int8").unwrap(),
        real_model("micro_speech"),
        real_model("magic_wand"),
        real_model("hello_world"),
    ];
    models.extend((0..12).map(|s| random_graph(s, 6 + (s as usize % 5))));
    for m in &models {
        m.validate().unwrap();
        for ov in [Overlaps::none(m), analytic(m)] {
            let c = report::compare_all(m, &ov, &opts()).unwrap();
            let exact = c.plan("exact", &ov.method).unwrap();
            assert_eq!(exact.status, PlanStatus::Optimal, "{}", m.name);
            let e = exact.peak_bytes.unwrap();
            for p in &c.plans {
                if let Some(peak) = p.peak_bytes {
                    assert!(e <= peak, "{}: exact {e} > {} {peak}", m.name, p.planner);
                }
            }
        }
    }
}

/// Exhaustive search over all offsets (multiples of the alignment) for
/// tiny problems, checked with the validator's rules.
fn brute_force(problem: &Problem) -> u64 {
    let n = problem.buffers.len();
    let a = problem.alignment;
    let total: u64 = problem.buffers.iter().map(|b| b.size).sum();
    let slots = total / a + 1;
    let mut best = total;
    let mut offsets = vec![0u64; n];
    fn ok(problem: &Problem, off: &[u64], k: usize) -> bool {
        (0..k).all(|j| {
            if !problem.conflict(j, k) {
                return true;
            }
            let (bj, bk) = (&problem.buffers[j], &problem.buffers[k]);
            let apart = off[j] + bj.size <= off[k] || off[k] + bk.size <= off[j];
            let dmo = |i: usize, o: usize| {
                problem
                    .pair_credit(i, o)
                    .is_some_and(|c| off[i] + c >= off[o] + problem.buffers[o].size)
            };
            apart || dmo(j, k) || dmo(k, j)
        })
    }
    fn rec(p: &Problem, k: usize, off: &mut Vec<u64>, slots: u64, best: &mut u64) {
        if k == off.len() {
            *best = (*best).min(p.peak(off));
            return;
        }
        for s in 0..slots {
            off[k] = s * p.alignment;
            if off[k] + p.buffers[k].size >= *best {
                break;
            }
            if ok(p, off, k) {
                rec(p, k + 1, off, slots, best);
            }
        }
    }
    rec(problem, 0, &mut offsets, slots, &mut best);
    best
}

#[test]
fn exact_is_optimal_against_brute_force() {
    for seed in 0..10 {
        let m = random_graph(100 + seed, 4 + (seed as usize % 2));
        for ov in [Overlaps::none(&m), analytic(&m)] {
            let o = PlanOptions {
                alignment: 16,
                ..opts()
            };
            let plan = run(&m, PlannerKind::Exact, &ov, &o).unwrap();
            let mut best = u64::MAX;
            for k in [OrderKind::Model, OrderKind::Eager, OrderKind::Lazy] {
                let p = Problem::new(&m, &ord::order(&m, k), &ov, 16);
                best = best.min(brute_force(&p));
            }
            let r = ord::reorder_dp(&m, &|op| ov.get(op), 1000).unwrap();
            let p = Problem::new(&m, &r.order, &ov, 16);
            best = best.min(brute_force(&p));
            assert_eq!(plan.peak_bytes, Some(best), "{}", m.name);
        }
    }
}

#[test]
fn validator_rejects_clobbers_and_accepts_safe_dmo_overlaps() {
    let m = zoo::build("mobilenet_v1_0.25_128_int8").unwrap();
    let ov = analytic(&m);
    let plan = run(&m, PlannerKind::DmoHeap, &ov, &opts()).unwrap();
    validate::validate(&m, &plan, &ov).unwrap();
    // Without O_s the same layout clobbers.
    let e = validate::validate(&m, &plan, &Overlaps::none(&m)).unwrap_err();
    assert!(e.0.contains("overlap"), "{e}");
    // conv_dw_1 (32 KiB) feeds conv_pw_1 (64 KiB): build the pair by hand.
    let idx = |n: &str| plan.tensors.iter().position(|t| t.name == n).unwrap();
    let (i, o) = (idx("conv_dw_1"), idx("conv_pw_1"));
    let op = m
        .ops
        .iter()
        .position(|x| m.tensors[x.outputs[0]].name == "conv_pw_1")
        .unwrap();
    let os = ov.get(op);
    let mut p = plan.clone();
    let out_bytes = m.tensors[p.tensors[o].tensor].bytes;
    // Move everything else far away, then overlap by exactly O_s: valid.
    let far = 10 * plan.peak_bytes.unwrap();
    for (k, t) in p.tensors.iter_mut().enumerate() {
        if k != i && k != o {
            t.offset += far;
        }
    }
    p.tensors[o].offset = 0;
    p.tensors[i].offset = out_bytes - os;
    p.peak_bytes = p.tensors.iter().map(|t| t.offset + t.size).max();
    validate::validate(&m, &p, &ov).unwrap();
    // One byte more is a clobber.
    p.tensors[i].offset -= 1;
    assert!(validate::validate(&m, &p, &ov).is_err());
    // The mirror direction (input end over output start) is not allowed.
    p.tensors[i].offset = 0;
    p.tensors[o].offset = m.tensors[p.tensors[i].tensor].bytes - 16;
    p.peak_bytes = p.tensors.iter().map(|t| t.offset + t.size).max();
    assert!(validate::validate(&m, &p, &ov).is_err());
    // Wrong lifetimes, missing tensors and a wrong peak are caught too.
    let mut q = plan.clone();
    q.tensors[3].last_op += 1;
    assert!(validate::validate(&m, &q, &ov).is_err());
    let mut q = plan.clone();
    q.tensors.pop();
    assert!(validate::validate(&m, &q, &ov).is_err());
    let mut q = plan.clone();
    q.peak_bytes = Some(1);
    assert!(validate::validate(&m, &q, &ov).is_err());
}

#[test]
fn greedy_on_a_model_is_tflm_s_greedy() {
    let m = real_model("magic_wand");
    let plan = run(&m, PlannerKind::TflmGreedy, &Overlaps::none(&m), &opts()).unwrap();
    let reqs: Vec<greedy::Request> = plan
        .tensors
        .iter()
        .map(|t| greedy::Request {
            size: t.size,
            first: t.first_op,
            last: t.last_op,
        })
        .collect();
    let offsets = greedy::greedy_offsets(&reqs);
    let ours: Vec<u64> = plan.tensors.iter().map(|t| t.offset).collect();
    assert_eq!(ours, offsets);
    // Tensor-index order, TFLM lifetimes: the input is created at step 0 and
    // the output lives to the last step.
    assert!(plan.tensors.windows(2).all(|w| w[0].tensor < w[1].tensor));
    let input = plan
        .tensors
        .iter()
        .find(|t| t.tensor == m.inputs[0])
        .unwrap();
    assert_eq!(input.first_op, 0);
    let output = plan
        .tensors
        .iter()
        .find(|t| t.tensor == m.outputs[0])
        .unwrap();
    assert_eq!(output.last_op, m.ops.len() - 1);
}

#[test]
fn replacement_is_sakr_s_single_buffer() {
    let m = zoo::sakr_cifar10();
    let plan = run(&m, PlannerKind::Replacement, &analytic(&m), &opts()).unwrap();
    // Their total buffer is the 32x32x32 conv1 output (32768 B); memtrace's
    // arena also holds the 3072 B input image, which conv1 must not clobber.
    assert_eq!(plan.peak_bytes, Some(32_768 + 3_072));
    let pool1 = plan.tensors.iter().find(|t| t.name == "pool1").unwrap();
    assert_eq!(pool1.offset, 0, "pooling writes over its input");
    let v2 = zoo::build("mobilenet_v2_0.35_224").unwrap();
    let na = run(&v2, PlannerKind::Replacement, &analytic(&v2), &opts()).unwrap();
    assert_eq!(na.status, PlanStatus::NotApplicable);
    assert!(na.note.unwrap().contains("sequential"));
}

#[test]
fn traced_tables_credit_only_what_was_traced() {
    let m = zoo::build("mobilenet_v1_0.25_128_int8").unwrap();
    let an = analytic(&m);
    let mut traced = TracedOverlaps::default();
    for op in 0..m.ops.len() {
        if let Some(spec) = m.layer_spec(op) {
            traced.by_spec.insert(spec.to_string(), an.get(op));
        }
    }
    let tr = Overlaps::compute(&m, &traced);
    assert_eq!(tr.method, "traced");
    assert_eq!(tr.per_op, an.per_op);
    let closure = FnOverlap("half".into(), |model: &Model, op: usize| {
        Some(model.tensors[model.ops[op].outputs[0]].bytes / 2)
    });
    let half = Overlaps::compute(&m, &closure);
    let p = run(&m, PlannerKind::DmoHeap, &half, &opts()).unwrap();
    assert_eq!(p.overlap, "half");
}

#[test]
fn offline_allocation_is_written_into_a_copy_of_the_model() {
    let path = tfmicro_models().join("person_detection_grayscale.tflite");
    let m = tflite::import_file(&path).unwrap();
    let plan = run(&m, PlannerKind::DmoHeap, &analytic(&m), &opts()).unwrap();
    let offsets = plan.offline_offsets(&m);
    assert_eq!(offsets.len(), m.tensors.len());
    for (i, t) in m.tensors.iter().enumerate() {
        assert_eq!(offsets[i] >= 0, t.needs_arena(), "{}", t.name);
    }
    let dir = std::env::temp_dir().join(format!("memtrace-offline-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("pd_offline.tflite");
    let report = tflite::write_offline(&path, &offsets, &out).unwrap();
    let written = std::fs::read(&out).unwrap();
    assert_eq!(tflite::read_offline(&written).unwrap(), Some(offsets));
    assert_eq!(
        tflite::import_bytes("person_detection_grayscale", &written).unwrap(),
        m
    );
    assert!(report.min_buffer_alignment >= 4);
    assert!(tflite::write_offline(&path, &[0], &out).is_err());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn comparisons_serialise_with_the_documented_keys() {
    let m = real_model("magic_wand");
    let c = report::compare_all(&m, &analytic(&m), &opts()).unwrap();
    let v = serde_json::to_value(&c).unwrap();
    assert_eq!(v["model"], "magic_wand");
    assert!(v["lower_bound_bytes"].as_u64().unwrap() > 0);
    let plans = v["plans"].as_array().unwrap();
    assert_eq!(plans.len(), c.plans.len());
    for p in plans {
        for key in [
            "planner",
            "overlap",
            "peak_bytes",
            "gap_bytes",
            "status",
            "tensors",
        ] {
            assert!(p.get(key).is_some(), "{key}");
        }
        for t in p["tensors"].as_array().unwrap() {
            for key in ["name", "offset", "size", "first_op", "last_op"] {
                assert!(t.get(key).is_some(), "{key}");
            }
        }
    }
    assert_eq!(plans[0]["status"], "heuristic");
    let back: Comparison = serde_json::from_value(v).unwrap();
    assert_eq!(back.plans.len(), c.plans.len());
    let table = c.to_table();
    assert!(table.contains("tflm-greedy") && table.contains("exact"));
}

#[test]
fn synthetic_graphs_plan_and_validate() {
    let m = zoo::synthetic_graph(2000);
    assert_eq!(m.ops.len(), 2000);
    m.validate().unwrap();
    let ov = analytic(&m);
    let heuristic: Vec<PlannerKind> = PlannerKind::ALL
        .into_iter()
        .filter(|&p| p != PlannerKind::Exact)
        .collect();
    assert_eq!(heuristic.len(), 5);
    // `run` validates every plan it returns.
    let plans: Vec<Plan> = heuristic
        .iter()
        .map(|&p| run(&m, p, &ov, &opts()).unwrap())
        .collect();
    let reorder = &plans[heuristic
        .iter()
        .position(|&p| p == PlannerKind::Reorder)
        .unwrap()];
    assert_eq!(reorder.status.to_string(), "heuristic");
}

/// A concatenation's inputs each have their own O_s (docs/overlap.md §6) but
/// cannot both lie at the output's end: the planners pair the output with
/// the first input only, and the validator accepts the first input at the
/// output's end and refuses the second there — though the second's own O_s
/// (its whole 40 B, for the reference kernel) would allow it.
#[test]
fn a_concatenation_overlaps_its_output_with_its_first_input_only() {
    let mut g = GraphBuilder::new("concat", Dtype::Int8);
    let a = g.input("a", &[1, 4, 5, 3]);
    let b = g.input("b", &[1, 4, 5, 2]);
    let c = g.concat_channels("c", &[a, b]);
    let d = g.op(
        OpKind::Relu,
        vec![c],
        "d",
        &[1, 4, 5, 5],
        OpOptions::default(),
    );
    let m = g.finish(&[d]);
    let ov = Overlaps::compute(&m, &OverlapMethod::Algorithmic);
    let spec = m.layer_spec(0).unwrap();
    assert_eq!(ov.get(0), 60, "the first input's O_s");
    assert_eq!(
        memtrace_overlap::algorithmic::algorithmic_overlap_of_input(&spec, 1),
        Some(40)
    );
    let problem = Problem::new(&m, &[0, 1], &ov, 1);
    let pairs: Vec<usize> = problem
        .pairs
        .iter()
        .filter(|p| p.op == 0)
        .map(|p| problem.buffers[p.input].tensor)
        .collect();
    assert_eq!(pairs, vec![a]);
    let plan = run(&m, PlannerKind::DmoHeap, &ov, &opts()).unwrap();
    validate::validate(&m, &plan, &ov).unwrap();
    // By hand: c at 0, everything else far away, then one input at c's end.
    let idx = |t: usize| plan.tensors.iter().position(|p| p.tensor == t).unwrap();
    let place = |first: u64, second: u64| {
        let mut p = plan.clone();
        for (k, t) in p.tensors.iter_mut().enumerate() {
            t.offset = 1000 + 200 * k as u64;
        }
        p.tensors[idx(c)].offset = 0;
        p.tensors[idx(a)].offset = first;
        p.tensors[idx(b)].offset = second;
        p.peak_bytes = p.tensors.iter().map(|t| t.offset + t.size).max();
        p
    };
    validate::validate(&m, &place(100 - 60, 2000), &ov).unwrap();
    assert!(validate::validate(&m, &place(100 - 60 - 1, 2000), &ov).is_err());
    let e = validate::validate(&m, &place(2000, 100 - 40), &ov).unwrap_err();
    assert!(e.0.contains("`b`") && e.0.contains("`c`"), "{e}");
}

/// MLPerf Tiny's anomaly-detection autoencoder (`ad01`): fully connected
/// layers 640 → 128 ×4 → 8 → 128 ×4 → 640, int8.
fn ad01_like() -> Model {
    let mut g = GraphBuilder::new("ad01_like", Dtype::Int8);
    let mut x = g.input("input", &[1, 640]);
    for (i, units) in [128, 128, 128, 128, 8, 128, 128, 128, 128]
        .iter()
        .enumerate()
    {
        x = g.fully_connected(&format!("fc{i}"), x, *units, crate::Activation::Relu);
    }
    x = g.fully_connected("out", x, 640, crate::Activation::None);
    g.finish(&[x])
}

#[test]
fn planners_with_overlaps_never_need_more_than_without_them_or_than_tflm_greedy() {
    // On ad01 the heap with overlaps gave 896 B where
    // TFLM's greedy plan needs 768 B. Both placements without overlaps hold
    // under any O_s, so a planner allowed to overlap must never do worse.
    let mut models = vec![ad01_like()];
    models.extend(REAL_MODELS.iter().map(|n| real_model(n)));
    models.extend(
        [
            "sakr_cifar10",
            "mobilenet_v1_0.25_128_int8",
            "tiny_unet_80x120_int8",
        ]
        .iter()
        .map(|n| zoo::build(n).unwrap()),
    );
    for m in &models {
        let none = Overlaps::none(m);
        let greedy = run(m, PlannerKind::TflmGreedy, &none, &opts()).unwrap();
        for method in [OverlapMethod::Analytic, OverlapMethod::Algorithmic] {
            let overlaps = Overlaps::compute(m, &method);
            for planner in [PlannerKind::DmoHeap, PlannerKind::Reorder] {
                let with = run(m, planner, &overlaps, &opts()).unwrap();
                let without = run(m, planner, &none, &opts()).unwrap();
                let (w, n, g) = (with.peak_bytes, without.peak_bytes, greedy.peak_bytes);
                assert!(
                    w <= n && w <= g,
                    "{} {} {:?}: {w:?} B with overlaps, {n:?} B without, tflm-greedy {g:?} B",
                    m.name,
                    planner.name(),
                    method
                );
                assert_eq!(with.overlap, overlaps.method, "keeps its O_s source");
                assert_eq!(with.planner, planner);
            }
        }
    }
}
