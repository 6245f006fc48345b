//! What a program run leaves: how it ended, its output, memcheck's findings
//! and leaks, their call chains resolved to source lines at the end of the
//! run (`finish`), and the leak scan's roots.

use unicorn_engine::RegisterARM;

use super::{reg, stop, Layout, RawEnd, Uc};
use crate::debuginfo::DebugInfo;
use crate::elf::ElfImage;
use crate::error::{CodeLocation, TraceError};
use crate::memcheck::{FindingKind, RawStack};
use crate::semihosting::Exit;

use super::calls::RawCall;
use super::layer::InnerCall;
use super::tflm_ops::{RawOperator, TflmInvocation};

/// Why a program stopped without exiting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopKind {
    /// An access to unmapped memory, an exception, an emulation error.
    Fault,
    /// The stack pointer went below the stack.
    StackOverflow,
    /// The instruction budget ran out.
    Budget,
    /// A branch to itself, which nothing can leave (`b .`, a newlib nosys
    /// `_exit`).
    Loop,
    /// A semihosting call memtrace does not answer.
    Unsupported,
}

/// How a program ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProgramEnd {
    /// It exited through semihosting (normally, or with another reason).
    Exited(Exit),
    /// memtrace stopped it.
    Stopped {
        /// Why.
        kind: StopKind,
        /// What happened, in words.
        message: String,
        /// Where: the instruction, then its callers.
        chain: Vec<CodeLocation>,
    },
}

/// A heap block a finding concerns.
#[derive(Clone, Debug)]
pub struct BlockReport {
    /// First byte.
    pub address: u64,
    /// Bytes asked for.
    pub size: u64,
    /// Where it was allocated (the allocator function, then its callers).
    pub allocated: Vec<CodeLocation>,
    /// Where it was freed, if it was.
    pub freed: Option<Vec<CodeLocation>>,
}

/// One memcheck finding.
#[derive(Clone, Debug)]
pub struct Finding {
    /// What it is.
    pub kind: FindingKind,
    /// In words.
    pub message: String,
    /// The instruction, then its callers.
    pub chain: Vec<CodeLocation>,
    /// The block concerned.
    pub block: Option<BlockReport>,
    /// How often the same instruction did it.
    pub count: u64,
    /// An overrun's bytes outside its block, `[start, end)`.
    pub outside: Option<(u64, u64)>,
}

impl BlockReport {
    /// Where `address` lies relative to this block, and where it was
    /// allocated: "in the heap, 4 B past the end of the 48-byte block at
    /// 0x12238 allocated at main (prog.c:82)".
    pub fn place_of(&self, address: u64, size: u64) -> String {
        let end = self.address + self.size;
        let side = if address >= end {
            format!("{} B past the end of", address + size - end)
        } else if address < self.address {
            format!("{} B before", self.address - address)
        } else {
            format!("{} B into", address - self.address)
        };
        let freed = if self.freed.is_some() { "freed " } else { "" };
        // The program's frame: the first past the allocator's own.
        let site = self
            .allocated
            .iter()
            .skip(1)
            .find(|f| f.file.is_some())
            .map(|f| {
                let name = f.function.as_deref().unwrap_or("?");
                match (&f.file, f.line) {
                    (Some(file), Some(line)) => format!(" allocated at {name} ({file}:{line})"),
                    _ => format!(" allocated at {name}"),
                }
            })
            .unwrap_or_default();
        format!(
            "in the heap, {side} the {freed}{}-byte block at {:#x}{site}",
            self.size, self.address
        )
    }
}

/// A block still allocated at exit.
#[derive(Clone, Debug)]
pub struct Leak {
    /// First byte.
    pub address: u64,
    /// Bytes.
    pub size: u64,
    /// Whether a pointer in the program's data, stack or reachable blocks
    /// still points into it ("still reachable"); if not, it is lost.
    pub reachable: bool,
    /// Where it was allocated.
    pub allocated: Vec<CodeLocation>,
}

/// What memcheck found.
#[derive(Clone, Debug, Default)]
pub struct MemcheckReport {
    /// Errors, in the order found.
    pub findings: Vec<Finding>,
    /// Blocks live at exit (none when the program did not exit).
    pub leaks: Vec<Leak>,
    /// Allocations made.
    pub allocations: u64,
    /// Frees made.
    pub frees: u64,
    /// Bytes allocated in all.
    pub bytes_allocated: u64,
    /// Why the heap was not checked (the program has no allocator
    /// symbols); `None` when it was.
    pub heap_unchecked: Option<String>,
}

/// A load of the program's data by an API call outside its buffers.
#[derive(Clone, Debug)]
pub struct StrayRead {
    /// The loading instruction.
    pub at: CodeLocation,
    /// The first byte read.
    pub address: u64,
    /// Bytes read.
    pub size: u64,
    /// The data object it lies in, and the offset into it.
    pub object: Option<(String, u64)>,
}

/// A CMSIS-NN API call the program made (`run_program_with`).
#[derive(Clone, Debug)]
pub struct TracedCall {
    /// Its layer's index, `None` when it could not be a layer.
    pub index: Option<usize>,
    /// The API function.
    pub function: &'static str,
    /// The call: the calling function and its file:line.
    pub call_site: CodeLocation,
    /// The shapes its arguments give.
    pub shapes: String,
    /// Why it is no layer.
    pub error: Option<String>,
    /// Instructions retired inside it.
    pub instructions: u64,
    /// Loads of the program's data (its data objects, heap, the caller's
    /// stack) outside the call's buffers and argument structures.
    pub stray_reads: u64,
    /// The first of them.
    pub first_stray_read: Option<StrayRead>,
    /// The program ended inside the call.
    pub unfinished: bool,
    /// What is wrong with the buffers its arguments describe (one not
    /// declared, one reaching past the caller's array).
    pub notes: Vec<String>,
    /// The API functions it called, whose accesses are its layer's.
    pub inner_calls: Vec<InnerCall>,
    /// Where its context arguments' scratch buffers start (`ctx->buf`,
    /// NULL left out): a memcheck finding in the heap block there is an
    /// overrun of the buffer the library's size function sized.
    pub scratch: Vec<u64>,
}

/// An operator invocation of TFLM's interpreter (`run_program_with`).
#[derive(Clone, Debug)]
pub struct TracedOperator {
    /// Its layer's index among the run's layers; `None` when it could not
    /// be one.
    pub index: Option<usize>,
    /// The interpreter's run of its node loop it belongs to (0-based,
    /// [`TflmRun::invocations`]).
    pub invocation: usize,
    /// Its node's position in the subgraph.
    pub node: usize,
    /// TFLite's name of the operator (`CONV_2D`) or its custom name.
    pub op: String,
    /// The registration's builtin code.
    pub builtin_code: i64,
    /// The function invoked: the kernel's `Eval`.
    pub kernel: CodeLocation,
    /// `in1, in2 -> out` shapes of its tensors.
    pub shapes: String,
    /// Why it is no layer.
    pub error: Option<String>,
    /// Instructions retired inside it.
    pub instructions: u64,
    /// The program ended inside it.
    pub unfinished: bool,
    /// Tensors not declared and why.
    pub notes: Vec<String>,
    /// The CMSIS-NN API functions its kernel called, whose accesses are
    /// its layer's (when API calls are traced).
    pub inner_calls: Vec<InnerCall>,
    /// The persistent op data its kernel allocated for itself while it
    /// was initialised and prepared: buffers and bytes. Memory it owns,
    /// not buffers of its layer.
    pub persistent: (usize, u64),
    /// Stores its kernel made there (state kept between invocations).
    pub persistent_writes: u64,
    /// Bytes of each scratch buffer its kernel asked for while it was
    /// prepared (`RequestScratchBufferInArena`), in the order asked.
    pub scratch_requested: Vec<u64>,
}

/// TFLM's interpreter in a run that traced its operators.
#[derive(Clone, Debug, Default)]
pub struct TflmRun {
    /// Why no operator could be traced (no interpreter, no DWARF for
    /// TFLM's structures); `None` when the interpreter was found.
    pub missing: Option<String>,
    /// Each outermost run of its node loop (`MicroInterpreter::Invoke`),
    /// with the arena's head and tail when it returned.
    pub invocations: Vec<TflmInvocation>,
    /// Each operator invocation, in order.
    pub operators: Vec<TracedOperator>,
}

/// A finished program run.
#[derive(Clone, Debug)]
pub struct ProgramRun {
    /// How it ended.
    pub end: ProgramEnd,
    /// Its stdout (at most [`KEEP_OUTPUT`] bytes).
    pub stdout: Vec<u8>,
    /// Its stderr (at most [`KEEP_OUTPUT`] bytes).
    pub stderr: Vec<u8>,
    /// Instructions retired.
    pub instructions: u64,
    /// Its memory.
    pub layout: Layout,
    /// Memcheck's results, when it ran.
    pub memcheck: Option<MemcheckReport>,
    /// The CMSIS-NN API calls, in order, when they were traced.
    pub calls: Vec<TracedCall>,
    /// TFLM's interpreter and its operators, when they were traced.
    pub tflm: Option<TflmRun>,
}

/// Bytes of each output stream a run keeps.
pub const KEEP_OUTPUT: usize = 64 << 20;

pub(super) fn finish(
    mut uc: Uc<'_, '_>,
    image: &ElfImage,
    result: Result<(), unicorn_engine::uc_error>,
) -> Result<ProgramRun, TraceError> {
    let pc = uc.pc_read().unwrap_or(0);
    if uc.get_data().end.is_none() {
        let message = match result {
            Err(e) => format!("emulation stopped: {e:?}"),
            Ok(()) => "the program stopped without exiting".to_owned(),
        };
        stop(&mut uc, StopKind::Fault, message, pc);
    }
    let debug = DebugInfo::load(image);
    let resolve = |s: &RawStack| resolve_chain(&debug, image, s);
    let leaks = match uc.get_data().end {
        Some(RawEnd::Exit(_)) => live_blocks(&uc),
        _ => Vec::new(),
    };
    let s = uc.get_data_mut();
    let instructions = s.clock.now(pc);
    let end = match s.end.take() {
        Some(RawEnd::Exit(exit)) => ProgramEnd::Exited(exit),
        Some(RawEnd::Stop {
            kind,
            message,
            stack,
        }) => ProgramEnd::Stopped {
            kind,
            message,
            chain: resolve(&stack),
        },
        None => unreachable!("a stop was recorded above"),
    };
    let memcheck = s.memcheck.take().map(|m| {
        let findings = m
            .coalesced()
            .iter()
            .map(|f| Finding {
                kind: f.kind,
                message: f.message.clone(),
                chain: resolve(&f.stack),
                block: f.block.as_ref().map(|(address, b)| BlockReport {
                    address: *address,
                    size: b.size,
                    allocated: resolve(&b.allocated),
                    freed: b.freed.as_ref().map(resolve),
                }),
                count: f.count,
                outside: f.extent.map(|e| (e.lo, e.hi)),
            })
            .collect();
        let leaks = leaks
            .iter()
            .filter_map(|&(address, reachable)| {
                let b = m.live.get(&address)?;
                Some(Leak {
                    address,
                    size: b.size,
                    reachable,
                    allocated: resolve(&b.allocated),
                })
            })
            .collect();
        MemcheckReport {
            findings,
            leaks,
            allocations: m.allocations,
            frees: m.frees,
            bytes_allocated: m.bytes_allocated,
            heap_unchecked: m.heap_unchecked.map(str::to_owned),
        }
    });
    let calls = s
        .calls
        .take()
        .map_or(Vec::new(), |c| c.records)
        .into_iter()
        .map(|r| traced_call(&debug, image, r))
        .collect();
    let tflm = match (s.tflm.take(), s.tflm_missing.take()) {
        (Some(t), _) => Some(TflmRun {
            missing: None,
            invocations: t.invocations,
            operators: t
                .records
                .into_iter()
                .map(|r| traced_operator(&debug, image, r))
                .collect(),
        }),
        (None, Some(why)) => Some(TflmRun {
            missing: Some(why),
            ..TflmRun::default()
        }),
        (None, None) => None,
    };
    let host = s.host.take();
    let (stdout, stderr) = host.map_or((Vec::new(), Vec::new()), |h| {
        (h.console.stdout, h.console.stderr)
    });
    Ok(ProgramRun {
        end,
        stdout,
        stderr,
        instructions,
        layout: s.layout,
        memcheck,
        calls,
        tflm,
    })
}

/// The live blocks at exit and whether a pointer reaches each: the roots
/// are the program's writable segments, its stack and its registers.
fn live_blocks(uc: &Uc<'_, '_>) -> Vec<(u64, bool)> {
    let s = uc.get_data();
    let Some(m) = s.memcheck.as_ref() else {
        return Vec::new();
    };
    let read = |at: u64, n: u64| {
        let mut bytes = vec![0u8; n as usize];
        let _ = uc.mem_read(at, &mut bytes);
        bytes
    };
    let mut roots: Vec<Vec<u8>> = s
        .image
        .segments
        .iter()
        .filter(|seg| !seg.executable)
        .map(|seg| read(seg.address & !3, seg.size))
        .collect();
    let sp = reg(uc, RegisterARM::SP) & !3;
    let (bottom, top) = s.layout.stack;
    if (bottom..top).contains(&sp) {
        roots.push(read(sp, top - sp));
    }
    use RegisterARM::*;
    let regs: Vec<u8> = [R0, R1, R2, R3, R4, R5, R6, R7, R8, R9, R10, R11, R12, LR]
        .into_iter()
        .flat_map(|r| (reg(uc, r) as u32).to_le_bytes())
        .collect();
    roots.push(regs);
    m.reachability(&roots, read)
}

/// A raw stack as code locations: the instruction (with the functions it
/// is inlined into), then each caller.
fn resolve_chain(debug: &DebugInfo, image: &ElfImage, stack: &RawStack) -> Vec<CodeLocation> {
    let mut first = debug.locate(image, stack.pc);
    first.inlined_into = None;
    let mut chain = vec![first];
    chain.extend(debug.call_chain(image, stack.pc, &stack.returns));
    chain
}

/// A call's record with its call site and stray read located.
fn traced_call(debug: &DebugInfo, image: &ElfImage, r: RawCall) -> TracedCall {
    let site = r.return_address.saturating_sub(1);
    let mut call_site = debug.locate(image, site);
    call_site.pc = site & !1;
    TracedCall {
        index: r.index,
        function: r.function,
        call_site,
        shapes: r.shapes,
        error: r.error,
        instructions: r.instructions,
        stray_reads: r.stray_reads,
        first_stray_read: r.first_stray_read.map(|(pc, address, size)| StrayRead {
            at: debug.locate(image, pc),
            address,
            size,
            object: image.object_at(address).map(|(n, o)| (n.to_owned(), o)),
        }),
        unfinished: r.unfinished,
        notes: r.notes,
        inner_calls: r.inner_calls,
        scratch: r.scratch,
    }
}

/// An operator's record with its kernel function located.
fn traced_operator(debug: &DebugInfo, image: &ElfImage, r: RawOperator) -> TracedOperator {
    let mut kernel = debug.locate(image, r.invoke);
    kernel.inlined_into = None;
    TracedOperator {
        index: r.index,
        invocation: r.invocation,
        node: r.node,
        op: r.op,
        builtin_code: r.builtin_code,
        kernel,
        shapes: r.shapes,
        error: r.error,
        instructions: r.instructions,
        unfinished: r.unfinished,
        notes: r.notes,
        inner_calls: r.inner_calls,
        persistent: r.persistent,
        persistent_writes: r.persistent_writes,
        scratch_requested: r.scratch_requested,
    }
}
