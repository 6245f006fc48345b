//! Planning-time measurements for the CLI's bench subcommand (no `cargo
//! bench` harness needed).

use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::{run, Overlaps, PlanError, PlanOptions, PlannerKind};
use crate::zoo::GraphBuilder;
use crate::{Activation, DataType, Model, OpKind, OpOptions};

/// Wall-clock time of one planner on one model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// Model name.
    pub model: String,
    /// Planner name.
    pub planner: String,
    /// O_s source the plan used (`none` for planners that never overlap).
    pub overlap: String,
    /// Wall-clock time in seconds, validation included.
    pub seconds: f64,
    /// Peak arena bytes of the plan; `None` when not applicable.
    pub peak_bytes: Option<u64>,
    /// How the plan was obtained (`heuristic`, `optimal`, ...).
    pub status: String,
}

/// Times each of `planners` (validation included) on `model`.
pub fn time_planners(
    model: &Model,
    overlaps: &Overlaps,
    planners: &[PlannerKind],
    opts: &PlanOptions,
) -> Result<Vec<Timing>, PlanError> {
    let mut out = Vec::new();
    for &p in planners {
        let start = Instant::now();
        let plan = run(model, p, overlaps, opts)?;
        out.push(Timing {
            model: model.name.clone(),
            planner: p.name().to_string(),
            overlap: plan.overlap.clone(),
            seconds: start.elapsed().as_secs_f64(),
            peak_bytes: plan.peak_bytes,
            status: plan.status.to_string(),
        });
    }
    Ok(out)
}

/// Every planner except `exact`.
pub const HEURISTIC_PLANNERS: [PlannerKind; 5] = [
    PlannerKind::Linear,
    PlannerKind::TflmGreedy,
    PlannerKind::DmoHeap,
    PlannerKind::Replacement,
    PlannerKind::Reorder,
];

/// A deterministic synthetic int8 network of about `ops` operators on
/// 16×16×16 activations: alternating residual blocks (1×1 conv, 3×3
/// depthwise, 1×1 conv, ADD with the block input) and two-branch blocks
/// (two conv/depthwise/conv branches joined by a CONCATENATION and a 1×1 conv
/// back to 16 channels), so the graph branches like Inception/ResNet cells.
pub fn synthetic_graph(ops: usize) -> Model {
    let mut g = GraphBuilder::new(format!("synthetic_{ops}"), DataType::Int8);
    let mut x = g.input("input", &[1, 16, 16, 16]);
    let mut count = 0usize;
    let mut block = 0usize;
    while count + 4 <= ops {
        if block.is_multiple_of(2) {
            let a = g.conv2d(&format!("b{block}_expand"), x, 16, 1, 1, Activation::Relu6);
            let b = g.depthwise(&format!("b{block}_dw"), a, 1, Activation::Relu6);
            let c = g.conv2d(&format!("b{block}_project"), b, 16, 1, 1, Activation::None);
            x = g.add(&format!("b{block}_add"), x, c);
            count += 4;
        } else if count + 8 <= ops {
            let mut branches = Vec::new();
            for br in 0..2 {
                let a = g.conv2d(&format!("b{block}_{br}_a"), x, 8, 1, 1, Activation::Relu6);
                let b = g.depthwise(&format!("b{block}_{br}_dw"), a, 1, Activation::Relu6);
                branches.push(b);
            }
            let cat = g.op(
                OpKind::Concatenation,
                branches,
                &format!("b{block}_concat"),
                &[1, 16, 16, 16],
                OpOptions {
                    axis: Some(3),
                    ..OpOptions::default()
                },
            );
            x = g.conv2d(&format!("b{block}_mix"), cat, 16, 1, 1, Activation::Relu6);
            count += 6;
        } else {
            x = g.conv2d(&format!("b{block}_tail"), x, 16, 1, 1, Activation::Relu6);
            count += 1;
        }
        block += 1;
    }
    while count < ops {
        x = g.conv2d(&format!("tail{count}"), x, 16, 1, 1, Activation::Relu6);
        count += 1;
    }
    g.finish(&[x])
}
