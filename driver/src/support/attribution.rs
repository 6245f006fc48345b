//! Which kernel library and function ran each traced layer: the PCs counted
//! by [`PcCounts`] resolved through the ELF's DWARF (inlined-function chains
//! with their source files) and symbols, then attributed by
//! `memtrace_analyzer::kernel` (docs/kernels.md, "Which kernel ran a layer").

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use memtrace_analyzer::kernel::{kernel_report, CodeFrame, Library};
use memtrace_analyzer::pc_counts::{LayerPcs, PcCounts};
use memtrace_analyzer::report::{KernelReport, LayerReport};
use memtrace_tracer::debuginfo::DebugInfo;
use memtrace_tracer::ElfImage;

/// Resolves PCs of one ELF to function chains, loading its DWARF on first
/// use and caching every PC; shared by the worker threads of a sweep.
pub struct KernelResolver<'a> {
    image: &'a ElfImage,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    debug: Option<DebugInfo>,
    chains: HashMap<u64, Vec<CodeFrame>>,
}

impl<'a> KernelResolver<'a> {
    /// A resolver for `image` (nothing is loaded yet).
    pub fn new(image: &'a ElfImage) -> KernelResolver<'a> {
        KernelResolver {
            image,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// The kernel report of one layer's PC counts.
    pub fn report(&self, pcs: &LayerPcs) -> KernelReport {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let Inner { debug, chains } = &mut *inner;
        kernel_report(&pcs.counts, |pc| {
            chains
                .entry(pc)
                .or_insert_with(|| {
                    debug
                        .get_or_insert_with(|| DebugInfo::load(self.image))
                        .frames(self.image, pc)
                        .into_iter()
                        .map(|f| CodeFrame {
                            function: f.function,
                            file: f.file,
                        })
                        .collect()
                })
                .clone()
        })
    }

    /// Fills `attribution` of every layer report from the counts of the
    /// same layer (matched by index).
    pub(crate) fn attribute(&self, layers: &mut [LayerReport], counts: &PcCounts) {
        for layer in layers {
            if let Some(pcs) = counts.layers.iter().find(|p| p.index == layer.index) {
                layer.attribution = Some(self.report(pcs));
            }
        }
    }
}

/// Whether a layer ran some other kernel than the TFLM reference ones the
/// algorithmic and analytic methods model: its kernel is known and its
/// library is not `TFLM reference`.
pub(crate) fn other_than_reference(library: Option<&str>, kernel: Option<&str>) -> bool {
    matches!((library, kernel), (Some(l), Some(k))
        if l != Library::TflmReference.name() && !k.is_empty())
}

/// The `library` and `kernel` of a layer report, when attributed.
pub(crate) fn kernel_of(layer: &LayerReport) -> (Option<&str>, Option<&str>) {
    layer.attribution.as_ref().map_or((None, None), |a| {
        (Some(a.library.name()), Some(a.kernel.as_str()))
    })
}

/// `` `kernel` (library) ``, or `-` when not attributed.
pub(crate) fn kernel_text(library: Option<&str>, kernel: Option<&str>) -> String {
    match (library, kernel) {
        (Some(l), Some(k)) if !k.is_empty() => format!("`{k}` ({l})"),
        _ => "-".to_owned(),
    }
}
