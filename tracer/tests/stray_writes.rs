//! Stray writes (`TraceOptions::stray_writes`): a write inside a selected
//! layer window to memory that is none of the layer's buffers and not the
//! stack is reported with its address, size and PC, on both access paths;
//! and watching for them changes nothing the guest computes.

mod common;

use common::{guest, trace_messages};
use memtrace_abi::{Message, StrayWrite};
use memtrace_tracer::{AccessPath, ElfImage, TraceOptions};

const PATHS: [AccessPath; 2] = [AccessPath::Hooks, AccessPath::Mmio];

/// Each layer's name with the stray writes reported in it.
fn strays_by_layer(messages: &[Message]) -> Vec<(String, Vec<StrayWrite>)> {
    let mut layers: Vec<(String, Vec<StrayWrite>)> = Vec::new();
    for m in messages {
        match m {
            Message::LayerBegin(l) => layers.push((l.name.clone(), Vec::new())),
            Message::StrayWrite(w) => layers.last_mut().expect("inside a layer").1.push(w.clone()),
            _ => {}
        }
    }
    layers
}

fn watched(access: AccessPath) -> TraceOptions<'static> {
    TraceOptions {
        access,
        stray_writes: true,
        ..TraceOptions::default()
    }
}

#[test]
fn the_store_to_an_undeclared_global_is_the_only_stray_write() {
    for target in ["cortex-m4", "x86_64"] {
        let image = ElfImage::load(&guest(target, "contract.elf")).unwrap();
        let stray = image.symbol("contract_stray").unwrap();
        let kernel = image.symbol("kernel_global_write").unwrap();
        let mut exact = None;
        for access in PATHS {
            let (_, messages) = trace_messages(&image, watched(access));
            let layers = strays_by_layer(&messages);
            assert_eq!(layers.len(), 6, "{target} {access:?}");
            for (name, writes) in &layers {
                if name != "global-write" {
                    assert!(writes.is_empty(), "{target} {access:?} {name}: {writes:x?}");
                    continue;
                }
                assert_eq!(writes.len(), 1, "{target} {access:?}: {writes:x?}");
                let w = writes[0].clone();
                assert_eq!(
                    (w.address, w.size),
                    (stray.address, 4),
                    "{target} {access:?}"
                );
                assert_eq!(
                    image.function_at(w.pc),
                    Some("kernel_global_write"),
                    "{target} {access:?}: {w:x?}"
                );
                assert!(w.pc >= kernel.address);
                match access {
                    AccessPath::Hooks => {
                        // Unwound from the stack: the kernel was called by
                        // the guest's `layer` (or `main`, if inlined there).
                        let caller = w.callers.first().and_then(|&ra| image.function_at(ra - 1));
                        assert!(
                            matches!(caller, Some("layer" | "main")),
                            "{target}: {w:x?} called from {caller:?}"
                        );
                        exact = Some(w)
                    }
                    // MMIO: the stray bytes share a served page with the
                    // buffers; the PC and time are those of the block, and
                    // no registers are at hand to unwind.
                    AccessPath::Mmio => {
                        let e = exact.as_ref().unwrap();
                        assert!(w.pc <= e.pc && w.t <= e.t, "{w:x?} vs exact {e:x?}");
                        assert!(w.callers.is_empty(), "{w:x?}");
                    }
                }
            }
        }
    }
}

#[test]
fn stray_writes_are_reported_only_when_asked_for() {
    let image = ElfImage::load(&guest("cortex-m4", "contract.elf")).unwrap();
    for access in PATHS {
        let options = TraceOptions {
            access,
            ..TraceOptions::default()
        };
        let (_, messages) = trace_messages(&image, options);
        assert!(
            !messages.iter().any(|m| matches!(m, Message::StrayWrite(_))),
            "{access:?}"
        );
    }
}

#[test]
fn a_stray_write_still_reaches_memory() {
    for target in ["cortex-m4", "x86_64"] {
        let image = ElfImage::load(&guest(target, "contract.elf")).unwrap();
        let stray = image.symbol("contract_stray").unwrap();
        for access in PATHS {
            let options = TraceOptions {
                readback: vec![(stray.address, 4)],
                ..watched(access)
            };
            let (summary, _) = trace_messages(&image, options);
            assert_eq!(
                summary.memory[0],
                0x5354u32.to_le_bytes(),
                "{target} {access:?}"
            );
        }
    }
}

#[test]
fn guests_that_check_their_own_results_still_pass_while_watched() {
    // it-block.elf and rep-string.elf exit 0 only when they computed
    // correctly; on the hook path every store to their buffers' pages now
    // passes the write-protection hook.
    for (target, name) in [("cortex-m4", "it-block.elf"), ("x86_64", "rep-string.elf")] {
        let image = ElfImage::load(&guest(target, name)).unwrap();
        for access in PATHS {
            let (summary, messages) = trace_messages(&image, watched(access));
            assert_eq!(summary.exit_code, 0, "{name} {access:?}");
            assert!(
                !messages.iter().any(|m| matches!(m, Message::StrayWrite(_))),
                "{name} {access:?}"
            );
        }
    }
}
