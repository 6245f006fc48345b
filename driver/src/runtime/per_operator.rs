//! Every operator of a model against the same operator on other kernels
//! ([`compare_operators`]): CMSIS-NN's int8 kernels are meant to be
//! bit-exact with TFLM's reference kernels, so the first operator whose
//! outputs differ is where a kernel went wrong, whether or not a host oracle
//! is installed and whatever the final outputs say.
//!
//! Both runs are untraced: the runner hashes each operator's outputs once it
//! has run (`TFLM_FLAG_DIGESTS`, FNV-1a). Where the digests part, both runs
//! are repeated once with that operator's outputs copied back
//! (`TFLM_DUMP_OP`), which gives the bytes that differ.

use serde::Serialize;

use memtrace_abi::runner::{OpDigest, TflmResult};
use memtrace_model::graph::TfliteGraph;
use memtrace_tracer::{AccessPath, ElfImage};

use super::ModelRun;
use crate::support::error::{Context, Result};

/// The first operator whose outputs differ between the two kernel builds.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct OperatorDifference {
    /// The operator's index in subgraph 0 (Netron's numbering).
    pub index: u32,
    /// Its TFLite operator, e.g. `CONV_2D`.
    pub op: String,
    /// Its first output tensor.
    pub output: String,
    /// Bytes of its outputs.
    pub output_bytes: u64,
    /// Of those, the bytes that differ.
    pub differing_bytes: u64,
    /// The first byte that differs.
    pub first_differing_byte: u64,
    /// Operators after it whose outputs differ too (they read what it wrote).
    pub later_operators_differing: usize,
}

/// The outputs of every operator on the kernels under test against the
/// same operators on the other build.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct OperatorComparison {
    /// The other build's runner.
    pub against: String,
    /// Operators compared.
    pub operators: usize,
    /// The first that differs; `None`: every operator's outputs are equal.
    pub first_difference: Option<OperatorDifference>,
    /// Instructions of the runs on both builds.
    pub instructions: u64,
    /// Wall-clock seconds of those runs (`memtrace bench --models`; not
    /// reported: not deterministic).
    #[serde(skip)]
    pub seconds: f64,
}

impl OperatorComparison {
    /// One line for `verify`'s text.
    pub(crate) fn to_text(&self, kernels: &str, against: &str) -> String {
        match &self.first_difference {
            None => format!(
                "operators: each of the {} operators' outputs equal to the {against} kernels' \
                 ({})\n",
                self.operators, self.against
            ),
            Some(d) => format!(
                "operators: operator `{}:{}` (output `{}`) on the {kernels} kernels differs from \
                 the {against} kernels: {} of its {} output bytes, the first at byte {}{}\n",
                d.index,
                d.op,
                d.output,
                d.differing_bytes,
                d.output_bytes,
                d.first_differing_byte,
                match d.later_operators_differing {
                    0 => String::new(),
                    n => format!("; {n} later operator(s) differ as well"),
                }
            ),
        }
    }
}

/// Runs `model` on `inputs` on both runners and compares every operator's
/// outputs; `under_test` is the build being verified, `against` the other.
pub(crate) fn compare_operators(
    under_test: &ElfImage,
    against: &ElfImage,
    graph: &TfliteGraph,
    model: &[u8],
    inputs: &[u8],
    max_instructions: u64,
) -> Result<OperatorComparison> {
    let started = std::time::Instant::now();
    let mut instructions = 0;
    let mut run = |image: &ElfImage, dump: Option<u32>| -> Result<TflmResult> {
        let (result, took) =
            untraced(image, model, inputs, max_instructions, dump).with_context(|| match dump {
                None => format!("digests of every operator on {}", image.path.display()),
                Some(k) => format!("operator {k}'s outputs on {}", image.path.display()),
            })?;
        instructions += took;
        Ok(result)
    };
    let mut digests = |image: &ElfImage| -> Result<Vec<OpDigest>> {
        let r = run(image, None)?;
        // A runner built before it hashed its operators' outputs answers
        // with none: nothing to compare, rather than every operator differing.
        if r.digests.len() != r.ops as usize {
            crate::bail!(
                "{} does not hash its operators' outputs (built before memtrace did): rebuild it \
                 (make -C harness-c)",
                image.path.display()
            );
        }
        Ok(r.digests)
    };
    let a = digests(under_test)?;
    let b = digests(against)?;
    let differing: Vec<usize> = (0..a.len().max(b.len()))
        .filter(|&i| a.get(i) != b.get(i))
        .collect();
    let first_difference = match differing.first() {
        None => None,
        Some(&k) => {
            let x = run(under_test, Some(k as u32))?.dump;
            let y = run(against, Some(k as u32))?.dump;
            let differs: Vec<usize> = (0..x.len().max(y.len()))
                .filter(|&i| x.get(i) != y.get(i))
                .collect();
            let op = graph.ops.get(k);
            Some(OperatorDifference {
                index: k as u32,
                op: op.map_or_else(|| "?".into(), |o| o.name.clone()),
                output: op
                    .and_then(|o| o.outputs.first())
                    .and_then(|&t| usize::try_from(t).ok())
                    .map_or_else(String::new, |t| graph.tensor_name(t)),
                output_bytes: x.len().max(y.len()) as u64,
                differing_bytes: differs.len() as u64,
                first_differing_byte: differs.first().map_or(0, |&i| i as u64),
                later_operators_differing: differing.len() - 1,
            })
        }
    };
    Ok(OperatorComparison {
        against: against.path.display().to_string(),
        operators: a.len(),
        first_difference,
        instructions,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// An untraced run of the whole model with every operator's digest, and
/// `dump`'s outputs copied back; with its instructions.
fn untraced(
    image: &ElfImage,
    model: &[u8],
    inputs: &[u8],
    max_instructions: u64,
    dump: Option<u32>,
) -> Result<(TflmResult, u64)> {
    let run = ModelRun {
        layers: false,
        digests: true,
        dump_op: dump,
        split: false,
        ..ModelRun::whole(image, model, inputs, max_instructions)
    };
    let outcome = run.trace(AccessPath::Mmio, None, false, &mut [])?;
    Ok((outcome.result, outcome.summary.instructions))
}
