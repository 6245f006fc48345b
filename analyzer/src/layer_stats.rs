//! Per-layer access counts and empirical O_s, online.

use memtrace_abi::{AccessKind, Buffer, Event, LayerInfo, LayerSpec, OutputDigest, Role};

use crate::report::{percent, BufferReport, LayerReport, OverlapReport};
use memtrace_abi::Analysis;
use memtrace_overlap::check::{check, method_values_of_input, MethodValues};
use memtrace_overlap::empirical::OverlapAccumulator;

/// Builds a [`LayerReport`] for every traced layer.
#[derive(Default)]
pub struct LayerStats {
    current: Option<Current>,
    /// Finished layers, in order.
    pub layers: Vec<LayerReport>,
}

struct Current {
    report: LayerReport,
    /// buffer id -> index in `report.buffers` (ids are small; sparse is fine).
    slot: Vec<Option<usize>>,
    overlap: Option<OverlapAccumulator>,
    /// The second declared input against the first output.
    overlap2: Option<OverlapAccumulator>,
}

impl Analysis for LayerStats {
    /// Counts, O_s and ownership follow the events' order (`seq`) alone.
    fn reads_event_times(&self) -> bool {
        false
    }

    fn layer_begin(&mut self, layer: &LayerInfo) {
        self.current = Some(Current {
            report: LayerReport {
                index: layer.index,
                name: layer.name.clone(),
                op: layer.op.clone(),
                params: layer.params.clone(),
                spec: layer.spec.clone(),
                instructions: 0,
                buffers: Vec::new(),
                overlap: None,
                input2_overlap: None,
                contract: None,
                attribution: None,
                output_digest: None,
            },
            slot: Vec::new(),
            overlap: None,
            overlap2: None,
        });
    }

    fn buffer(&mut self, b: &Buffer) {
        let Some(cur) = self.current.as_mut() else {
            return;
        };
        let id = b.id as usize;
        if cur.slot.len() <= id {
            cur.slot.resize(id + 1, None);
        }
        cur.slot[id] = Some(cur.report.buffers.len());
        cur.report.buffers.push(BufferReport {
            id: b.id,
            name: b.name.clone(),
            role: b.role,
            size: b.size as u64,
            elem_size: b.elem_size,
            loads: 0,
            stores: 0,
            updates: 0,
        });
        // O_s pairs the first declared input with the first declared output,
        // and the second input (if any) with the same output.
        let output = cur.report.buffers.iter().find(|x| x.role == Role::Output);
        let mut inputs = cur.report.buffers.iter().filter(|x| x.role == Role::Input);
        if let Some(o) = output {
            if let (None, Some(i)) = (&cur.overlap, inputs.next()) {
                cur.overlap = Some(OverlapAccumulator::new(i.id, i.size, o.id, o.size));
            }
            if let (None, Some(i)) = (&cur.overlap2, inputs.next()) {
                cur.overlap2 = Some(OverlapAccumulator::new(i.id, i.size, o.id, o.size));
            }
        }
    }

    fn events(&mut self, events: &[Event]) {
        let Some(cur) = self.current.as_mut() else {
            return;
        };
        for e in events {
            if let Some(Some(i)) = cur.slot.get(e.buffer as usize) {
                let b = &mut cur.report.buffers[*i];
                match e.kind {
                    AccessKind::Load => b.loads += 1,
                    AccessKind::Store => b.stores += 1,
                    AccessKind::Update => b.updates += 1,
                }
            }
        }
        for acc in [cur.overlap.as_mut(), cur.overlap2.as_mut()]
            .into_iter()
            .flatten()
        {
            acc.observe(events);
        }
    }

    fn layer_output(&mut self, output: &OutputDigest) {
        if let Some(cur) = self.current.as_mut() {
            cur.report.output_digest = (output.bytes > 0).then(|| output.hex());
        }
    }

    fn layer_end(&mut self, instructions: u64) {
        let Some(mut cur) = self.current.take() else {
            return;
        };
        cur.report.instructions = instructions;
        let output = cur.report.buffers.iter().find(|x| x.role == Role::Output);
        let mut inputs = cur.report.buffers.iter().filter(|x| x.role == Role::Input);
        if let (Some(acc), Some(i), Some(o)) = (&cur.overlap, inputs.next(), output) {
            cur.report.overlap = Some(overlap_report(acc, &cur.report, 0, i, o));
        }
        if let (Some(acc), Some(i), Some(o)) = (&cur.overlap2, inputs.next(), output) {
            cur.report.input2_overlap = Some(overlap_report(acc, &cur.report, 1, i, o));
        }
        self.layers.push(cur.report);
    }
}

/// Gives a finished layer its configuration `spec` (known only after the
/// run, e.g. from the model a TFLM runner ran) and the host methods' O_s
/// (algorithmic, analytic) with their cross-checks against the traced values.
pub fn attach_spec(layer: &mut LayerReport, spec: LayerSpec) {
    for (k, o) in [layer.overlap.as_mut(), layer.input2_overlap.as_mut()]
        .into_iter()
        .enumerate()
    {
        if let Some(o) = o {
            let m = method_values_of_input(&spec, k, o.input_bytes, o.output_bytes);
            o.flags = check(o.monotone_bytes, o.exact_bytes, &m);
            o.algorithmic_bytes = m.algorithmic;
            o.analytic_bytes = m.analytic;
            o.analytic_printed_bytes = m.analytic_printed;
        }
    }
    layer.spec = Some(spec);
}

/// The O_s report of input `k` (buffer `i`) against output `o`: the traced
/// values and, when the layer has a spec, the host methods and their checks.
fn overlap_report(
    acc: &OverlapAccumulator,
    layer: &LayerReport,
    k: usize,
    i: &BufferReport,
    o: &BufferReport,
) -> OverlapReport {
    let r = acc.result();
    let methods = layer
        .spec
        .as_ref()
        .map(|s| method_values_of_input(s, k, i.size, o.size))
        .unwrap_or_default();
    let MethodValues {
        algorithmic,
        analytic,
        analytic_printed,
    } = methods;
    OverlapReport {
        input: i.name.clone(),
        output: o.name.clone(),
        input_bytes: i.size,
        output_bytes: o.size,
        monotone_bytes: r.monotone_bytes,
        exact_bytes: r.exact_bytes,
        reverse_monotone_bytes: r.reverse_monotone_bytes,
        reverse_exact_bytes: r.reverse_exact_bytes,
        monotone_percent: percent(r.monotone_bytes, o.size),
        exact_percent: percent(r.exact_bytes, o.size),
        monotone_saving_percent: percent(r.monotone_bytes, i.size + o.size),
        exact_saving_percent: percent(r.exact_bytes, i.size + o.size),
        algorithmic_bytes: algorithmic,
        analytic_bytes: analytic,
        analytic_printed_bytes: analytic_printed,
        flags: check(r.monotone_bytes, r.exact_bytes, &methods),
    }
}
