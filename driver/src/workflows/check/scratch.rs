//! Scratch from the shapes in a program as built: each model a TFLM
//! interpreter ran is read from the program's own data (the object that
//! holds the `tflite::Model` its allocator was started with), and every
//! operator is sized from its shapes (`memtrace_model::scratch_sizing`)
//! against the scratch its node asked for while it was prepared. A
//! shortfall is a finding whatever the layout of TFLM's planner hid: check
//! runs the firmware's own plan and cannot red-zone it.

use memtrace_abi::Kernels;
use memtrace_model::scratch_sizing::ScratchSizing;
use memtrace_model::source::{ModelFile, ModelSource};
use memtrace_tracer::program::TracedOperator;
use memtrace_tracer::ElfImage;
use serde_json::{json, Value};

/// One model's scratch, sized from its shapes.
#[derive(Clone, Debug)]
pub struct ModelScratch {
    /// Where the program holds the model: `` `g_model` (18712 B at 0x…) ``,
    /// or its address when no object holds it.
    pub model: String,
    /// The run of the node loop whose operators' requests were sized.
    pub invocation: usize,
    /// The kernels the formulas were chosen for.
    pub kernels: Kernels,
    /// The sizing, or why the model could not be read.
    pub sizing: Result<ScratchSizing, String>,
}

impl ModelScratch {
    /// Operators that asked for less scratch than their kernel uses.
    pub fn short(&self) -> usize {
        self.sizing.as_ref().map_or(0, |s| s.shortfalls().count())
    }

    /// The report's lines.
    pub(super) fn text(&self) -> String {
        match &self.sizing {
            Ok(s) => format!(
                "tflm: model {} (invoke {}, {} kernels): {}",
                self.model,
                self.invocation,
                self.kernels.name(),
                s.to_text()
            ),
            Err(why) => format!(
                "tflm: model {}: scratch not sized from the shapes: {why}\n",
                self.model
            ),
        }
    }

    pub(super) fn json(&self) -> Value {
        json!({
            "model": self.model,
            "invocation": self.invocation,
            "kernels": self.kernels.name(),
            "sizing": self.sizing.as_ref().ok(),
            "error": self.sizing.as_ref().err(),
        })
    }
}

/// Every model the interpreter ran on subgraph 0 (`invocations[i]` is the
/// model of run `i`), once, from its first run's operators.
pub(super) fn size_models(
    image: &ElfImage,
    invocations: &[(i64, Option<u64>)],
    operators: &[TracedOperator],
) -> Vec<ModelScratch> {
    let kernels = kernels_linked(image);
    let mut seen = Vec::new();
    let mut out = Vec::new();
    for (i, &(subgraph, model)) in invocations.iter().enumerate() {
        let Some(model) = model.filter(|_| subgraph == 0) else {
            continue;
        };
        if seen.contains(&model) {
            continue;
        }
        seen.push(model);
        let requested: Vec<(usize, u64)> = operators
            .iter()
            .filter(|o| o.invocation == i)
            .flat_map(|o| o.scratch_requested.iter().map(move |&b| (o.node, b)))
            .collect();
        let (name, bytes) = model_bytes(image, model);
        let sizing = bytes.and_then(|b| {
            // Decoded once, as a file is (named after its data object).
            let source = ModelSource::File(name.clone().into());
            let file = ModelFile::decode(&source, 1, b.to_vec()).map_err(|e| e.to_string())?;
            let model = file.model().map_err(|e| e.to_string())?;
            Ok(crate::runtime::size_scratch_of(
                &file.graph,
                model,
                kernels,
                image.arch,
                &requested,
            ))
        });
        out.push(ModelScratch {
            model: name,
            invocation: i,
            kernels,
            sizing,
        });
    }
    out
}

/// The kernels the program links: CMSIS-NN when it defines one of the
/// library's int8 or int16 functions (`arm_convolve_s8`: TFLM's reference
/// kernels define none), TFLM's reference kernels otherwise.
fn kernels_linked(image: &ElfImage) -> Kernels {
    let cmsis = image.function_names().any(|n| {
        n.starts_with("arm_") && (n.contains("_s8") || n.contains("_s16") || n.contains("_s4"))
    });
    if cmsis {
        Kernels::CmsisNn
    } else {
        Kernels::Tflm
    }
}

/// The data object holding the flatbuffer whose root table is at `model`,
/// as the report names it, and its bytes: a flatbuffer starts with the
/// offset of its root, so the object's start plus that offset is `model`.
fn model_bytes(image: &ElfImage, model: u64) -> (String, Result<&[u8], String>) {
    let Some((start, size, name)) = image
        .objects()
        .find(|&(a, s, _)| (a..a.saturating_add(s)).contains(&model))
    else {
        return (
            format!("at {model:#x}"),
            Err(
                "no data object of the program holds it (a model built or loaded at run time)"
                    .to_owned(),
            ),
        );
    };
    let offset = model - start;
    let label = format!(
        "`{}` ({size} B at {start:#x})",
        memtrace_tracer::elf::source_name(name)
    );
    let bytes = image.bytes_at(start, size).ok_or_else(|| {
        "its bytes are not in the program's file (an object filled at run time)".to_owned()
    });
    let bytes = bytes.and_then(|b| {
        let root = b
            .get(..4)
            .map(|r| u64::from(u32::from_le_bytes([r[0], r[1], r[2], r[3]])));
        if root == Some(offset) {
            Ok(b)
        } else {
            Err(format!(
                "the model is {offset} B into it, not where the object's flatbuffer root points"
            ))
        }
    });
    (label, bytes)
}
