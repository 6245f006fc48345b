//! The QEMU engine: a guest run by `qemu-system-arm` (QEMU 10) with
//! memtrace's TCG plugin (`harness-c/qemu/memtrace-plugin.c`, a separate
//! GPL-2.0-or-later program) loaded into it, for the cores Unicorn does not
//! have (the Cortex-M55 with Helium) and to check the two engines against
//! each other.
//!
//! QEMU runs as a child process. The plugin writes records (the port's
//! stores with their values, the accesses to the ranges memtrace traces,
//! the budget, a fault, a stack-guard store) to one pipe and, at each
//! protocol command, waits on a second pipe for memtrace's replies (memory
//! reads, the traced ranges from then on, go on or stop). Everything above
//! the records — the protocol, the events — is `record`'s, as for Unicorn.
//! The job mailbox and preloaded bytes reach the guest through QEMU's
//! generic loader from memory files (`memfd`), so nothing is written to
//! disk; QEMU dies with memtrace (`PR_SET_PDEATHSIG`) and is killed and
//! reaped when the run ends, however it ends.

mod process;
mod wire;

use crate::elf::ElfImage;
use crate::engine::QemuConfig;
use crate::error::{CodeLocation, GuestContext, TraceError};
use crate::machine::{input_writes, GuestInputs};
use crate::record::{self, Effect, EventSink, Guest, PortStore, Recorder, Recording, Stop};
use crate::session::{AccessPath, Progress, RunSummary, StackWatch, TraceOptions};

use process::Qemu;
use wire::{Kind, Reply, Wire, WireRecord};

/// The plugin API version the plugin is built for (QEMU 10.0).
pub const PLUGIN_API: u32 = 4;

/// Runs `image` in QEMU to its `memtrace_exit`, streaming messages to `sink`.
pub(crate) fn run(
    image: &ElfImage,
    config: &QemuConfig,
    mut options: TraceOptions<'_>,
    sink: EventSink,
) -> Result<RunSummary, TraceError> {
    if !image.arch.is_cortex_m() {
        return Err(TraceError::Emulator(format!(
            "the QEMU engine runs Arm Cortex-M guests; {} is {:?}",
            image.path.display(),
            image.arch
        )));
    }
    if options.stray_writes {
        return Err(TraceError::Emulator(
            "the stray-write watch is Unicorn's: run without it on the QEMU engine".into(),
        ));
    }
    let port = image.protocol_port()?;
    let writes = input_writes(
        image,
        GuestInputs {
            job: options.job.as_ref(),
            preload: &options.preload,
        },
    )?;
    let stack = StackWatch::for_image(image);
    let launch = process::Launch {
        config,
        image,
        port: port.address,
        budget: options.max_instructions,
        guard: stack.as_ref().map(|w| (w.zone.0, w.bottom)),
        writes: &writes,
    };
    let (qemu, wire) = Qemu::start(&launch)?;
    let recording = Recording {
        layers: options.layers.take(),
        batch_size: options.batch_size,
        untraced_roles: std::mem::take(&mut options.untraced_roles),
        written_whole_roles: std::mem::take(&mut options.written_whole_roles),
    };
    let mut run = Run {
        image,
        rec: Recorder::new(recording, sink),
        wire,
        current: WireRecord::default(),
        ranges: Vec::new(),
        stack,
        progress: options.progress.take(),
    };
    let ended = run.follow();
    let Run {
        mut rec, mut wire, ..
    } = run;
    let readback = match &rec.stop {
        Some(Stop::Exit { .. }) => read_back(&mut wire, &options.readback),
        _ => Ok(Vec::new()),
    };
    let _ = wire.reply(&[Reply::Stop]);
    drop(wire);
    let status = qemu.finish();
    let layer = rec.layer_name();
    let finish = |err: TraceError| Err(crate::debuginfo::with_locations(err, image));
    match (rec.stop.take(), ended) {
        (Some(Stop::Error(err)), _) => finish(err),
        (Some(Stop::Exit { code, instructions }), _) => Ok(RunSummary {
            arch: image.arch,
            exit_code: code,
            instructions,
            access: AccessPath::Hooks,
            layers: std::mem::take(&mut rec.layers_seen),
            memory: readback?,
            exit_reason: rec.exit_reason.take(),
            idle_dispatches: 0,
            runs: 1,
            engine: crate::engine::EngineKind::Qemu,
        }),
        (None, Err(e)) => finish(e),
        (None, Ok(last)) => finish(match status.stderr_error() {
            Some(message) => TraceError::Emulator(message),
            None => TraceError::NoExit {
                context: GuestContext::at(last, layer),
            },
        }),
    }
}

/// The ranges of [`TraceOptions::readback`], read while QEMU waits at the
/// EXIT command.
fn read_back(wire: &mut Wire, ranges: &[(u64, u64)]) -> Result<Vec<Vec<u8>>, TraceError> {
    ranges
        .iter()
        .map(|&(address, len)| {
            let mut bytes = vec![0u8; len as usize];
            if wire.read_memory(address, &mut bytes) {
                Ok(bytes)
            } else {
                Err(TraceError::Emulator(format!(
                    "reading back {len} bytes at {address:#x}"
                )))
            }
        })
        .collect()
}

/// One run's side of the pipe.
struct Run<'i, 'p> {
    image: &'i ElfImage,
    rec: Recorder,
    wire: Wire,
    /// The record being handled (a port store's PC, LR and time).
    current: WireRecord,
    /// The ranges the plugin traces now.
    ranges: Vec<(u64, u64)>,
    stack: Option<StackWatch>,
    progress: Option<Box<dyn FnMut(Progress) + Send + 'p>>,
}

impl Run<'_, '_> {
    /// Handles records until the run stops (the PC of the last one) or
    /// QEMU exits; the plugin then waits for the final reply.
    fn follow(&mut self) -> Result<u64, TraceError> {
        loop {
            let Some(r) = self.wire.next()? else {
                return Ok(self.current.pc);
            };
            self.current = r;
            match r.kind {
                Kind::Load | Kind::Store => {
                    let write = r.kind == Kind::Store;
                    self.rec.record_any(write, r.address, r.size, (r.t, r.pc));
                }
                Kind::Port => self.port_store(r)?,
                Kind::Budget => self.stop_budget(r),
                Kind::Fault => self.stop_fault(r),
                Kind::Guard => self.guard_store(r)?,
                Kind::Progress => self.report_progress(r.t),
                Kind::Exit => return Ok(self.current.pc),
                Kind::Data => {
                    return Err(TraceError::Emulator(
                        "the QEMU plugin sent memory nobody asked for".into(),
                    ))
                }
            }
            if self.rec.stop.is_some() {
                self.rec.flush();
                return Ok(r.pc);
            }
        }
    }

    fn port_store(&mut self, r: WireRecord) -> Result<(), TraceError> {
        let image = self.image;
        let store = PortStore {
            address: r.address,
            size: r.size as usize,
            value: r.value,
            pc: r.pc,
        };
        let effect = record::port_store(self, image, store);
        if let Effect::LayerClosed(_) | Effect::BufferDeclared { .. } = effect {
            self.update_ranges()?;
        }
        let marker = r.address & (memtrace_abi::protocol::PORT_SIZE - 1)
            == memtrace_abi::protocol::MARKER_OFFSET;
        if marker && self.rec.stop.is_none() {
            self.wire.reply(&[Reply::Continue])?;
        }
        Ok(())
    }

    /// Tells the plugin the open layer's traced buffers, when they changed.
    fn update_ranges(&mut self) -> Result<(), TraceError> {
        let ranges: Vec<(u64, u64)> = self.rec.layer.as_ref().map_or(Vec::new(), |l| {
            l.buffers
                .iter()
                .filter(|b| b.traced)
                .map(|b| (b.buffer.base, b.buffer.base + u64::from(b.buffer.size)))
                .collect()
        });
        if ranges != self.ranges {
            self.wire.reply(&[Reply::Ranges(ranges.clone())])?;
            self.ranges = ranges;
        }
        Ok(())
    }

    fn stop_budget(&mut self, r: WireRecord) {
        if self.rec.stop.is_none() {
            let layer = self.rec.layer_name();
            self.rec.stop = Some(Stop::Error(TraceError::BudgetExceeded {
                budget: r.value,
                context: GuestContext::at(r.pc, layer),
            }));
        }
    }

    /// An exception handler was entered: the interrupted instruction and
    /// its caller (the stacked LR) are where the guest faulted.
    fn stop_fault(&mut self, r: WireRecord) {
        let name = exception_name(r.address);
        let layer = self.rec.layer_name();
        let mut context = GuestContext::at(r.pc, layer);
        if r.lr != 0 {
            context.callers.push(CodeLocation {
                pc: (r.lr & !1).wrapping_sub(4),
                ..CodeLocation::default()
            });
        }
        if self.rec.stop.is_none() {
            self.rec.stop = Some(Stop::Error(TraceError::GuestFault {
                message: format!("{name} (exception {})", r.address),
                context,
            }));
        }
    }

    /// A store to the page below the stack: a stack overflow when it is the
    /// stack's (at or just below SP), else the guest goes on.
    fn guard_store(&mut self, r: WireRecord) -> Result<(), TraceError> {
        let sp = r.value;
        let Some(watch) = &self.stack else {
            return self.wire.reply(&[Reply::Continue]);
        };
        let Some(below) = watch.overflow(r.address, sp) else {
            return self.wire.reply(&[Reply::Continue]);
        };
        let stack_bytes = watch.top - watch.bottom;
        if self.rec.stop.is_none() {
            let layer = self.rec.layer_name();
            self.rec.stop = Some(Stop::Error(TraceError::StackOverflow {
                below,
                address: r.address,
                stack_bytes,
                frames: 1,
                context: GuestContext::at(r.pc, layer),
            }));
        }
        Ok(())
    }

    fn report_progress(&mut self, instructions: u64) {
        let events = self.rec.events + self.rec.batch.len() as u64;
        if let Some(report) = self.progress.as_mut() {
            report(Progress {
                instructions,
                events,
            });
        }
    }
}

impl Guest for Run<'_, '_> {
    fn read(&mut self, address: u64, out: &mut [u8]) -> bool {
        self.wire.read_memory(address, out)
    }

    fn call_site(&mut self, pc: u64) -> u64 {
        // The plugin read LR for the stores made inside memtrace_signal,
        // which it is called from with `bl` (4 bytes).
        if self.image.in_signal(pc) && self.current.lr != 0 {
            (self.current.lr & !1).wrapping_sub(4)
        } else {
            pc
        }
    }

    fn now(&self, _pc: u64) -> u64 {
        self.current.t
    }

    fn recorder(&mut self) -> &mut Recorder {
        &mut self.rec
    }
}

/// The ARMv8-M name of exception `number` (IPSR).
fn exception_name(number: u64) -> &'static str {
    match number {
        2 => "NMI",
        3 => "HardFault",
        4 => "MemManage fault",
        5 => "BusFault",
        6 => "UsageFault",
        7 => "SecureFault",
        11 => "SVCall",
        12 => "DebugMonitor",
        14 => "PendSV",
        15 => "SysTick",
        _ => "interrupt",
    }
}

/// The vector table's handler addresses (all but the reset vector), which
/// the plugin watches for a fault: the board boots from the table at 0.
pub(crate) fn fault_handlers(image: &ElfImage) -> Vec<u64> {
    let Some(table) = image.segments.iter().find(|s| s.address == 0) else {
        return Vec::new();
    };
    let reset = image.entry & !1;
    let mut handlers: Vec<u64> = table
        .data
        .chunks_exact(4)
        .take(16)
        .skip(2)
        .map(|w| u64::from(u32::from_le_bytes([w[0], w[1], w[2], w[3]])))
        .filter(|&h| h != 0 && h & !1 != reset)
        .collect();
    handlers.sort_unstable();
    handlers.dedup();
    handlers
}
