//! The live-overlap oracle (a second method for "does this placement
//! clobber a live tensor") and the plan-file mutants it judges.

use std::collections::HashMap;

use memtrace_model::tflite;
use memtrace_overlap::rng::Rng;
use serde_json::Value;

use crate::binary::Expect;
use crate::cases::{model_arg, model_order, pick, plan_report, shared_dir, Case, LIBRARIES};
use crate::mutate::mutate_json;

/// An arena tensor of a model under one library: its bytes (from `plan
/// --alignment 1`) and the operators, in model order, from the one that
/// writes it (0 for a graph input) to the last that reads it (one past the
/// last operator for a graph output, read back after the run), computed
/// here from the model's operator list, not taken from the planner.
pub(crate) struct LiveTensor {
    pub(crate) name: String,
    pub(crate) bytes: u64,
    pub(crate) first: usize,
    pub(crate) last: usize,
    /// A library's scratch buffer, live during its operator: not certainly
    /// written in full, so never a certain clobber.
    pub(crate) scratch: bool,
}

/// A second method for "does this placement clobber a live tensor": the
/// live-overlap oracle of one model on one library.
pub(crate) struct Oracle {
    pub(crate) model: String,
    pub(crate) kernels: &'static str,
    pub(crate) tensors: Vec<LiveTensor>,
    /// (i, j) of an input and an output of one operator: DMO overlaps them
    /// up to O_s, so their overlap is never a certain clobber.
    pub(crate) in_out: std::collections::HashSet<(usize, usize)>,
    /// memtrace's own plans in model order: offsets and arena.
    pub(crate) seeds: Vec<(Vec<u64>, u64)>,
}

impl Oracle {
    pub(crate) fn new(name: &str, kernels: &'static str, report: &Value) -> Oracle {
        let model = tflite::import_file(&shared_dir().join(name)).unwrap();
        let names = model.tensor_names();
        let ops = model.ops.len();
        let sized = plan_report(name, kernels, &["--alignment", "1", "--planner", "linear"]);
        let mut tensors = Vec::new();
        let mut index = HashMap::new();
        for t in sized["plans"][0]["tensors"].as_array().unwrap() {
            let tname = t["name"].as_str().unwrap().to_owned();
            let bytes = t["size"].as_u64().unwrap();
            let (first, last, scratch) = match names.iter().position(|x| *x == tname) {
                Some(i) => {
                    let first = if model.inputs.contains(&i) {
                        0
                    } else {
                        model
                            .ops
                            .iter()
                            .position(|o| o.outputs.contains(&i))
                            .unwrap_or_else(|| panic!("{name}: `{tname}` has no writer"))
                    };
                    let read = model.ops.iter().rposition(|o| o.inputs.contains(&i));
                    let last = if model.outputs.contains(&i) {
                        ops
                    } else {
                        read.unwrap_or(first).max(first)
                    };
                    index.insert(i, tensors.len());
                    (first, last, false)
                }
                None => {
                    let base = tname
                        .strip_suffix("/scratch")
                        .unwrap_or_else(|| panic!("{name}: no tensor `{tname}` in the model"));
                    let op = model
                        .ops
                        .iter()
                        .position(|o| o.outputs.iter().any(|&t| names[t] == base))
                        .unwrap_or_else(|| panic!("{name}: no operator writes `{base}`"));
                    (op, op, true)
                }
            };
            tensors.push(LiveTensor {
                name: tname,
                bytes,
                first,
                last,
                scratch,
            });
        }
        let mut in_out = std::collections::HashSet::new();
        for op in &model.ops {
            for a in &op.inputs {
                for b in &op.outputs {
                    if let (Some(&i), Some(&j)) = (index.get(a), index.get(b)) {
                        in_out.insert((i, j));
                        in_out.insert((j, i));
                    }
                }
            }
        }
        let mut oracle = Oracle {
            model: name.into(),
            kernels,
            tensors,
            in_out,
            seeds: Vec::new(),
        };
        for p in report["plans"].as_array().unwrap() {
            let Some(arena) = p["peak_bytes"].as_u64() else {
                continue;
            };
            if !model_order(p, ops) {
                continue;
            }
            let mut offsets = vec![None; oracle.tensors.len()];
            for t in p["tensors"].as_array().unwrap() {
                let i = oracle
                    .tensors
                    .iter()
                    .position(|x| t["name"] == x.name.as_str())
                    .unwrap_or_else(|| panic!("{name}: plan tensor {t} unknown"));
                offsets[i] = t["offset"].as_u64();
            }
            let offsets: Vec<u64> = offsets.into_iter().map(Option::unwrap).collect();
            // The oracle agrees that memtrace's own plans clobber nothing.
            if let Some(why) = oracle.certain_clobber(&offsets) {
                panic!(
                    "{name} ({kernels}): `plan`'s {} / {} plan: {why}",
                    p["planner"], p["overlap"]
                );
            }
            oracle.seeds.push((offsets, arena));
        }
        assert!(!oracle.seeds.is_empty(), "{name}: no plan in model order");
        oracle
    }

    /// Two tensors that are live at once and share a byte, neither one
    /// operator's input and the other its output: the later one's writer
    /// overwrites bytes the earlier one's last reader (or the read-back of
    /// the outputs) still reads.
    pub(crate) fn certain_clobber(&self, offsets: &[u64]) -> Option<String> {
        for i in 0..self.tensors.len() {
            for j in i + 1..self.tensors.len() {
                let (a, b) = (&self.tensors[i], &self.tensors[j]);
                if a.scratch || b.scratch || a.bytes == 0 || b.bytes == 0 {
                    continue;
                }
                if self.in_out.contains(&(i, j)) {
                    continue;
                }
                let shared = offsets[i] < offsets[j].saturating_add(b.bytes)
                    && offsets[j] < offsets[i].saturating_add(a.bytes);
                let live = a.first <= b.last && b.first <= a.last;
                if shared && live {
                    return Some(format!(
                        "`{}` [{}, +{}) and `{}` [{}, +{}) share bytes while both live \
                         (operators {}..={})",
                        a.name,
                        offsets[i],
                        a.bytes,
                        b.name,
                        offsets[j],
                        b.bytes,
                        a.first.max(b.first),
                        a.last.min(b.last)
                    ));
                }
            }
        }
        None
    }
}

/// A plan file under construction: one entry per tensor of the oracle.
pub(crate) struct PlanMutant {
    pub(crate) offsets: Vec<Value>,
    pub(crate) arena: Option<Value>,
    pub(crate) kernels: Option<Value>,
    pub(crate) arena_key: &'static str,
    /// An entry whose `"offset"` key is misspelt.
    pub(crate) offset_typo: Option<usize>,
    /// An entry left out (the tensor keeps its reference offset) or
    /// renamed: the oracle has no verdict.
    pub(crate) dropped: Option<usize>,
    pub(crate) renamed: Option<usize>,
}

impl PlanMutant {
    pub(crate) fn render(&self, o: &Oracle) -> String {
        let tensors: Vec<Value> = (0..o.tensors.len())
            .filter(|&i| Some(i) != self.dropped)
            .map(|i| {
                let mut e = serde_json::Map::new();
                let name = &o.tensors[i].name;
                let name = if Some(i) == self.renamed {
                    format!("{name} ")
                } else {
                    name.clone()
                };
                e.insert("name".into(), name.into());
                let key = if Some(i) == self.offset_typo {
                    "ofset"
                } else {
                    "offset"
                };
                e.insert(key.into(), self.offsets[i].clone());
                Value::Object(e)
            })
            .collect();
        let mut doc = serde_json::Map::new();
        doc.insert("tensors".into(), Value::Array(tensors));
        if let Some(a) = &self.arena {
            doc.insert(self.arena_key.into(), a.clone());
        }
        if let Some(k) = &self.kernels {
            doc.insert("kernels".into(), k.clone());
        }
        Value::Object(doc).to_string()
    }

    /// `None`: no verdict; `Some(None)`: no certain clobber; `Some(Some(why))`:
    /// `verify` must refuse the plan or report it failed.
    pub(crate) fn judge(&self, o: &Oracle) -> Option<Option<String>> {
        if self.dropped.is_some() || self.renamed.is_some() {
            return None;
        }
        if self.offset_typo.is_some() || (self.arena.is_some() && self.arena_key != "arena_bytes") {
            return Some(Some("the plan has a key the format does not have".into()));
        }
        let other = LIBRARIES.iter().find(|&&k| k != o.kernels).unwrap();
        if self.kernels.as_ref().and_then(Value::as_str) == Some(other) {
            return Some(Some(format!("the plan was made for {other}")));
        }
        let mut offsets = Vec::new();
        for (i, v) in self.offsets.iter().enumerate() {
            match v.as_u64() {
                Some(x) => offsets.push(x),
                None => {
                    return Some(Some(format!(
                        "the offset of `{}` is {v}",
                        o.tensors[i].name
                    )))
                }
            }
        }
        let limit = (1u64 << 31) - 1;
        let mut end = 0u64;
        for (t, &x) in o.tensors.iter().zip(&offsets) {
            match x.checked_add(t.bytes) {
                Some(e) => end = end.max(e),
                None => return Some(Some(format!("`{}` ends beyond 2^64", t.name))),
            }
        }
        if end > limit {
            return Some(Some(format!(
                "the arena ends at byte {end}, beyond 2^31 - 1"
            )));
        }
        if let Some(a) = self.arena.as_ref().and_then(Value::as_u64) {
            if a < end {
                return Some(Some(format!(
                    "\"arena_bytes\": {a}, but a tensor ends at {end}"
                )));
            }
            if a > limit {
                return Some(Some(format!("\"arena_bytes\": {a} is beyond 2^31 - 1")));
            }
        }
        Some(o.certain_clobber(&offsets))
    }
}

/// 1–3 edits of one of memtrace's own plans: a tensor moved onto another's
/// bytes (most often), shifted, two swapped, the arena, the library, odd
/// offsets, misspelt keys, an entry dropped or renamed.
pub(crate) fn mutate_plan(rng: &mut Rng, o: &Oracle) -> PlanMutant {
    let (offsets, arena) = pick(rng, &o.seeds).clone();
    let n = o.tensors.len() as u32;
    let mut m = PlanMutant {
        offsets: offsets.iter().map(|&x| Value::from(x)).collect(),
        arena: Some(Value::from(arena)),
        kernels: Some(Value::from(o.kernels)),
        arena_key: "arena_bytes",
        offset_typo: None,
        dropped: None,
        renamed: None,
    };
    let end = o
        .tensors
        .iter()
        .zip(&offsets)
        .map(|(t, &x)| x + t.bytes)
        .max()
        .unwrap_or(0);
    for _ in 0..rng.range(1, 3) {
        let i = rng.range(0, n - 1) as usize;
        let j = rng.range(0, n - 1) as usize;
        let bi = o.tensors[i].bytes as i64;
        let bj = o.tensors[j].bytes as i64;
        match rng.weighted(&[
            (6, 0u8),
            (2, 1),
            (2, 2),
            (2, 3),
            (1, 4),
            (1, 5),
            (1, 6),
            (1, 7),
        ]) {
            0 => {
                // Onto j's bytes, at a 16-byte step.
                if let Some(oj) = m.offsets[j].as_u64() {
                    let d = (rng.next_u64() % (bi + bj).max(1) as u64) as i64 - bi + 1;
                    let at = (oj as i64 + d.div_euclid(16) * 16).max(0);
                    m.offsets[i] = Value::from(at as u64);
                }
            }
            1 => {
                if let Some(oi) = m.offsets[i].as_u64() {
                    let d = *pick(rng, &[16, -16, 1, -1, bi, -bi, 64]);
                    m.offsets[i] = Value::from((oi as i64 + d).max(0) as u64);
                }
            }
            2 => m.offsets.swap(i, j),
            3 => {
                m.arena = pick(
                    rng,
                    &[
                        Some(Value::from(end.saturating_sub(1))),
                        Some(Value::from(end.saturating_sub(16))),
                        Some(Value::from(0)),
                        Some(Value::from(1)),
                        None,
                        Some(Value::from(end)),
                        Some(Value::from(end + 4096)),
                        Some(Value::from(u64::MAX)),
                        Some(Value::from(1u64 << 31)),
                    ],
                )
                .clone()
            }
            4 => {
                let other = LIBRARIES.iter().find(|&&k| k != o.kernels).unwrap();
                m.kernels = pick(
                    rng,
                    &[
                        Some(Value::from(*other)),
                        Some(Value::from(*other)),
                        None,
                        Some(Value::from("TFLM")),
                        Some(Value::from("")),
                        Some(Value::from(7)),
                        Some(Value::Null),
                    ],
                )
                .clone()
            }
            5 => {
                m.offsets[i] = pick(
                    rng,
                    &[
                        Value::from(-1),
                        Value::from(u64::MAX),
                        serde_json::json!(1e308),
                        Value::from("16"),
                        Value::Null,
                        Value::from(1u64 << 31),
                        Value::from((1u64 << 31) - 16),
                        serde_json::json!(0.5),
                    ],
                )
                .clone()
            }
            6 => {
                if rng.chance(50) {
                    m.arena_key = "arena_btes";
                } else {
                    m.offset_typo = Some(i);
                }
            }
            _ => {
                if rng.chance(50) {
                    m.dropped = Some(i);
                } else {
                    m.renamed = Some(i);
                }
            }
        }
    }
    m
}

/// `verify MODEL --kernels K --plan p.json` on a mutant of one of `plan`'s
/// placements, with the oracle's verdict as the rule.
pub(crate) fn oracle_case(rng: &mut Rng, o: &Oracle) -> Case {
    let m = mutate_plan(rng, o);
    let mut text = m.render(o);
    let mut refuse = m.judge(o).flatten();
    if rng.chance(15) {
        text = mutate_json(rng, &text);
        refuse = None;
    }
    Case {
        // No host oracle: the case is about the plan, and TFLM's run under
        // its own plan is the reference its outputs are compared with.
        args: vec![
            "verify".into(),
            "--no-oracle".into(),
            model_arg(&o.model),
            "--kernels".into(),
            o.kernels.into(),
            "--plan".into(),
            "p.json".into(),
            "--format".into(),
            "json".into(),
        ],
        files: vec![("p.json".into(), text)],
        expect: Expect {
            refuse,
            kernels: Some(o.kernels.into()),
            ..Expect::default()
        },
    }
}
