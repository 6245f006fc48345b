//! TinySeg's graph transformations (Algorithm 3), on a model whose operator
//! order is its execution order: spilling a tensor for its cold range (whole,
//! or its tail after a split), and fusing a fetch into the operator after it.
//!
//! Every edit returns a new [`Graph`]: the model and, for each of its
//! operators, the operator of the original model it stands for (`None` for
//! the operators TinySeg inserted), so per-operator facts such as O_s can be
//! carried over.

use crate::cold::GraphColdRange;
use crate::{Accumulator, Dtype, Model, Op, OpKind, OpOptions, Tensor};

/// A model in execution order and where its operators came from.
#[derive(Clone, Debug)]
pub struct Graph {
    /// The model; its operator order is the execution order.
    pub model: Model,
    /// Per operator: its index in the original model, `None` if inserted.
    pub origin: Vec<Option<usize>>,
}

impl Graph {
    /// `model` with its operators permuted into `order` (a valid execution
    /// order of it).
    pub(crate) fn in_order(model: &Model, order: &[usize]) -> Graph {
        let mut m = model.clone();
        m.ops = order.iter().map(|&i| model.ops[i].clone()).collect();
        Graph {
            model: m,
            origin: order.iter().map(|&i| Some(i)).collect(),
        }
    }

    fn insert(&mut self, at: usize, op: Op) {
        self.model.ops.insert(at, op);
        self.origin.insert(at, None);
    }

    fn add_tensor(&mut self, t: Tensor) -> usize {
        self.model.tensors.push(t);
        self.model.tensors.len() - 1
    }
}

/// What a spill did, for the step report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpillEdit {
    /// The spilled tensor (index in the model before the edit, kept).
    pub victim: usize,
    /// Bytes written to storage and read back.
    pub spilled_bytes: u64,
    /// Bytes of the victim that stay in the arena (0 for a whole spill).
    pub kept_bytes: u64,
    /// The storage tensor.
    pub stored: usize,
    /// The tensor the readers after the cold range read instead of the victim.
    pub fetched: usize,
    /// Index of the fetching operator in the new model.
    pub fetch_op: usize,
}

/// The axis a partial spill splits `t` along: the outermost with more than
/// one element, so that each part is one contiguous byte range; with its
/// extent.
pub fn split_axis(t: &Tensor) -> Option<(usize, u32)> {
    t.shape
        .iter()
        .enumerate()
        .find(|(_, &d)| d > 1)
        .map(|(a, &d)| (a, d))
}

/// Rows (slices along [`split_axis`]) of `t` to spill so that at least
/// `needed` bytes leave the arena: the paper's `align(MR)`, aligned to the
/// tensor's shape. `None` when that is the whole tensor (or it cannot be split).
pub fn tail_rows(t: &Tensor, needed: u64) -> Option<u32> {
    let (_, extent) = split_axis(t)?;
    let row = t.bytes / extent as u64;
    let rows = needed.div_ceil(row.max(1));
    (rows < extent as u64).then_some(rows.max(1) as u32)
}

fn part(t: &Tensor, name: String, rows: u32, in_storage: bool) -> Tensor {
    let (axis, extent) = split_axis(t).unwrap_or((0, 1));
    let mut shape = t.shape.clone();
    if let Some(d) = shape.get_mut(axis) {
        *d = rows;
    }
    Tensor {
        name,
        bytes: t.bytes / extent as u64 * rows as u64,
        shape,
        data: None,
        in_storage,
        ..t.clone()
    }
}

/// Refuses to spill what TinySeg may not: a tensor outside the arena, a
/// graph output, or one never idle in `range`.
fn check_spillable(model: &Model, range: &GraphColdRange) -> Result<(), String> {
    let t = &model.tensors[range.tensor];
    if !t.needs_arena() {
        return Err(format!("`{}` is not an arena tensor", t.name));
    }
    if model.outputs.contains(&range.tensor) {
        return Err(format!("`{}` is a graph output", t.name));
    }
    if range.idle_ops() == 0 || range.end >= model.ops.len() {
        return Err(format!("`{}` is never idle", t.name));
    }
    Ok(())
}

/// The stored copy of `t` and, when only `tail_rows` of it are stored, the
/// part kept in the arena.
fn stored_and_kept(t: &Tensor, tail_rows: Option<u32>) -> Result<(Tensor, Option<Tensor>), String> {
    let stored_rows = tail_rows.filter(|_| split_axis(t).is_some());
    Ok(match stored_rows {
        Some(rows) => {
            let (_, extent) = split_axis(t).unwrap_or((0, 1));
            if rows == 0 || rows >= extent {
                return Err(format!("cannot keep {rows} of {extent} rows"));
            }
            (
                part(t, format!("{}/spilled", t.name), rows, true),
                Some(part(t, format!("{}/kept", t.name), extent - rows, false)),
            )
        }
        None => (
            Tensor {
                name: format!("{}/spilled", t.name),
                data: None,
                in_storage: true,
                ..t.clone()
            },
            None,
        ),
    })
}

/// Spills `range.tensor` for its cold range: a `SPILL` right after the
/// operator at `range.start` and a fetch right before the operator at
/// `range.end`, whose readers from there on read the fetched copy. With
/// `tail_rows`, only that many trailing rows go to storage: a `SPILL_KEEP`
/// copies the rest into its own tensor, and a `FETCH_CONCAT` puts the two
/// back together (TinySeg's Split, Spill, Fetching and Concatenation).
pub fn spill(
    graph: &Graph,
    range: &GraphColdRange,
    tail_rows: Option<u32>,
) -> Result<(Graph, SpillEdit), String> {
    let model = &graph.model;
    let v = range.tensor;
    let t = model.tensors.get(v).ok_or("no such tensor")?;
    check_spillable(model, range)?;
    let mut g = graph.clone();
    let (stored_t, kept_t) = stored_and_kept(t, tail_rows)?;
    let spilled_bytes = stored_t.bytes;
    let stored = g.add_tensor(stored_t);
    let fetched = g.add_tensor(Tensor {
        name: format!("{}/fetched", t.name),
        data: None,
        in_storage: false,
        ..t.clone()
    });
    // Readers at or after the end of the cold range read the fetched copy.
    for op in &mut g.model.ops[range.end..] {
        for i in &mut op.inputs {
            if *i == v {
                *i = fetched;
            }
        }
    }
    let simple = |kind, inputs, output, options| Op {
        kind,
        inputs,
        outputs: vec![output],
        options,
        scratch: None,
    };
    let (fetch, kept_bytes) = match kept_t {
        Some(k) => {
            let kept_bytes = k.bytes;
            let kept = g.add_tensor(k);
            let axis = split_axis(t).map(|(a, _)| a as i32);
            let fetch = simple(
                OpKind::FetchConcat,
                vec![kept, stored],
                fetched,
                OpOptions {
                    axis,
                    ..OpOptions::default()
                },
            );
            g.insert(range.end, fetch);
            g.insert(
                range.start + 1,
                simple(OpKind::SpillKeep, vec![v], kept, OpOptions::default()),
            );
            (range.end + 1, kept_bytes)
        }
        None => {
            g.insert(
                range.end,
                simple(OpKind::Fetch, vec![stored], fetched, OpOptions::default()),
            );
            (range.end, 0)
        }
    };
    g.insert(
        range.start + 1,
        simple(OpKind::Spill, vec![v], stored, OpOptions::default()),
    );
    let fetch_op = fetch + 1;
    g.model.validate().map_err(|e| e.to_string())?;
    g.model.check_shapes().map_err(|e| e.to_string())?;
    Ok((
        g,
        SpillEdit {
            victim: v,
            spilled_bytes,
            kept_bytes,
            stored,
            fetched,
            fetch_op,
        },
    ))
}

/// The single operator that reads tensor `t` right after operator `at`, if
/// `t` has exactly that one reader and is not a graph output.
fn sole_next_reader(model: &Model, at: usize, t: usize) -> Option<usize> {
    if model.outputs.contains(&t) {
        return None;
    }
    let readers: Vec<usize> = (0..model.ops.len())
        .filter(|&i| model.ops[i].inputs.contains(&t))
        .collect();
    (readers == [at + 1]).then_some(at + 1)
}

/// Which operator a fetch was fused into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fusion {
    /// `FETCH` + `CONCATENATION` → `FETCH_CONCAT`.
    Concat,
    /// `FETCH` or `FETCH_CONCAT` + `CONV_2D` → `FETCH_CONV_2D`.
    Conv2d,
}

/// Fuses the fetching operator at `fetch_op` with the operator right after
/// it, if that one is its output's only reader and the pair has a fused
/// form: a `FETCH` into a `CONCATENATION` of at most two inputs, or a
/// `FETCH`/`FETCH_CONCAT` into a `CONV_2D` reading it as its input (the
/// convolution then reads the concatenated input where its parts lie).
/// Returns the new graph, the fused operator's index and which fusion it was.
pub fn fuse_next(graph: &Graph, fetch_op: usize) -> Option<(Graph, usize, Fusion)> {
    let model = &graph.model;
    let f = model.ops.get(fetch_op)?;
    let out = *f.outputs.first()?;
    let next = sole_next_reader(model, fetch_op, out)?;
    let n = &model.ops[next];
    let fused = match (f.kind, n.kind) {
        (OpKind::Fetch, OpKind::Concatenation) if n.inputs.len() <= 2 => {
            let inputs = n
                .inputs
                .iter()
                .map(|&i| if i == out { f.inputs[0] } else { i })
                .collect();
            (
                Op {
                    kind: OpKind::FetchConcat,
                    inputs,
                    ..n.clone()
                },
                Fusion::Concat,
            )
        }
        (OpKind::Fetch | OpKind::FetchConcat, OpKind::Conv2d)
            if n.inputs.first() == Some(&out) && !n.inputs[1..].contains(&out) =>
        {
            let mut inputs = f.inputs.clone();
            inputs.extend_from_slice(&n.inputs[1..]);
            let axis = match f.kind {
                OpKind::FetchConcat => f.options.axis,
                _ => Some(-1),
            };
            (
                Op {
                    kind: OpKind::FetchConv2d,
                    inputs,
                    options: OpOptions {
                        axis,
                        ..n.options.clone()
                    },
                    // TFLM's reference loop, which both runtimes run for
                    // it, asks for no scratch: the convolution's own
                    // (CMSIS-NN's im2col buffer) goes with it.
                    scratch: None,
                    ..n.clone()
                },
                Fusion::Conv2d,
            )
        }
        _ => return None,
    };
    let mut g = graph.clone();
    g.model.ops[next] = fused.0;
    g.model.ops.remove(fetch_op);
    g.origin.remove(fetch_op);
    if g.model.validate().is_err() || g.model.check_shapes().is_err() {
        return None;
    }
    Some((g, fetch_op, fused.1))
}

/// When to narrow an accumulator scratch tensor to int16.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum NarrowScratch {
    /// Never: scratch tensors stay int32.
    Never,
    /// Where the weights prove that no output's sum can leave the int16
    /// range for any int8 input (`int16_accumulator_is_exact`): the outputs
    /// stay bit-exact.
    #[default]
    Exact,
    /// Every int8 `TRANSPOSE_CONV`, as the paper does; outputs whose sums
    /// leave the int16 range come out wrong (`memtrace verify` counts them).
    Always,
}

/// Whether an int16 accumulator gives an int8 `TRANSPOSE_CONV` exactly the
/// int32 result for every possible input: for each output channel and each
/// class of kernel taps that can land on one output position (taps equal
/// modulo the stride), the sum of `|weight| · max|input + input offset|`
/// stays within int16. `None` without weight data.
pub fn int16_accumulator_is_exact(model: &Model, op: &Op) -> Option<bool> {
    let x = &model.tensors[op.data_input()?];
    let w = &model.tensors[*op.inputs.get(1)?];
    let data = w.data.as_ref()?;
    let [oc, kh, kw, ic] = w.shape[..] else {
        return None;
    };
    let zp = x
        .quantization
        .as_ref()
        .and_then(|q| q.zero_point.first().copied())
        .unwrap_or(0);
    let reach = (-128 - zp).abs().max((127 - zp).abs());
    let (sh, sw) = (op.options.stride.0.max(1), op.options.stride.1.max(1));
    let (kh, kw, ic) = (kh as usize, kw as usize, ic as usize);
    let mut worst = 0i64;
    for o in 0..oc as usize {
        for ry in 0..sh as usize {
            for rx in 0..sw as usize {
                let mut sum = 0i64;
                for fy in (ry..kh).step_by(sh as usize) {
                    for fx in (rx..kw).step_by(sw as usize) {
                        let at = ((o * kh + fy) * kw + fx) * ic;
                        sum += data[at..at + ic]
                            .iter()
                            .map(|&b| (b as i8 as i64).abs())
                            .sum::<i64>();
                    }
                }
                worst = worst.max(sum * reach);
            }
        }
    }
    Some(worst <= i16::MAX as i64)
}

/// TinySeg's temporary tensor quantisation (Section 5.3): int8
/// `TRANSPOSE_CONV`s whose accumulator scratch tensor is int32 get an int16
/// one, half the bytes — all of them ([`NarrowScratch::Always`]) or those
/// whose weights prove it exact. Returns the new graph and the operators
/// changed (none: `None`). Partial sums wrap modulo 2^16, so an output stays
/// exact only where its final sum fits in int16.
pub fn narrow_scratch(graph: &Graph, policy: NarrowScratch) -> Option<(Graph, Vec<usize>)> {
    if policy == NarrowScratch::Never {
        return None;
    }
    let mut g = graph.clone();
    let mut changed = Vec::new();
    for i in 0..g.model.ops.len() {
        let op = &g.model.ops[i];
        let int8 = op
            .data_input()
            .is_some_and(|t| g.model.tensors[t].dtype == Dtype::Int8);
        let (Some(scratch), Some(&y)) = (op.scratch, op.outputs.first()) else {
            continue;
        };
        if op.kind != OpKind::TransposeConv || op.options.accumulator != Accumulator::Int32 || !int8
        {
            continue;
        }
        if policy == NarrowScratch::Exact && int16_accumulator_is_exact(&g.model, op) != Some(true)
        {
            continue;
        }
        let bytes = g.model.tensors[y].elements() * Accumulator::Int16.size();
        let t = &mut g.model.tensors[scratch];
        if bytes >= t.bytes {
            continue;
        }
        t.bytes = bytes;
        t.shape = vec![bytes as u32];
        g.model.ops[i].options.accumulator = Accumulator::Int16;
        changed.push(i);
    }
    (!changed.is_empty()).then_some((g, changed))
}
