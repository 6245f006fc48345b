//! One traced run of a guest: Unicorn set-up, hooks, protocol rules and the
//! event batches sent to the analyzer.
//!
//! Cost model (docs/measurements.md, "Emulator costs behind the tracer's design"): any memory hook sends every guest access through
//! Unicorn's helper path, and the helper checks hook ranges at run time. So the
//! only memory hooks are one on `memtrace_port` (installed before the first
//! instruction) and one per declared buffer of a selected layer (installed when
//! the guest declares it, removed at layer end). Memory hooks also make Unicorn
//! synchronise the PC, which gives each event its exact instruction.
//! [`AccessPath::Mmio`] avoids memory hooks altogether (see `session/mmio.rs`).
//!
//! Here: the public options and summary, the machine and the hooks that every
//! run has. `commands` applies the protocol, `events` turns accesses into
//! events, `mmio` is the hook-free access path, `ram` the host memory behind
//! guest RAM, `guard` the stray-write watch, `stack` the stack-overflow
//! watch.

mod blocks;
mod commands;
mod events;
mod guard;
mod mmio;
mod ram;
mod stack;
mod stop;

pub(crate) use stack::StackWatch;
pub(crate) use stop::StopSwitch;

use commands::{guest_read, on_port_write, port_store};

use unicorn_engine::{uc_error, HookType, MemType, Unicorn};

use memtrace_abi::event::Role;
use memtrace_abi::protocol::PORT_SIZE;

use crate::arch::{Machine, Registers};
use crate::clock::BlockClock;
use crate::elf::{Arch, ElfImage};
use crate::error::{CodeLocation, GuestContext, TraceError};
pub(crate) use crate::machine::{emulator_error, page_ranges, set_permissions, PAGE};
use crate::machine::{load_segments, page_runs, write_inputs, GuestInputs, Job};
pub(crate) use crate::record::EventSink;
use crate::record::{self, Effect, Guest, PortStore, Recorder, Recording, Stop};
use crate::unwind::Unwinder;

/// Widest single guest access (x86 SSE): a buffer hook starts this many bytes
/// early so accesses that begin before the buffer and reach into it are seen.
const MAX_ACCESS: u64 = 16;

/// How retired instructions are counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ClockMode {
    /// Block lengths plus position in block (Thumb-2 and x86-64).
    #[default]
    Auto,
    /// A hook on every instruction (slower; used to cross-check `Auto`). It
    /// counts what Unicorn's code hook reports, which differs from `Auto` for
    /// failed IT-block instructions and `rep` iterations (see `clock`).
    PerInstruction,
    /// Two runs of the same guest on two threads (`stream::trace`): one
    /// counts instructions and enforces the budget, the other has no
    /// clock, and each layer's events are recorded by whichever reaches it
    /// first, so the events' cost spreads over two cores. Events carry
    /// `t = 0` and `pc = 0`, so it is taken only when no analysis reads
    /// them (`Analysis::reads_event_times`: O_s, counts and the shadow map
    /// do not) and without the stray-write watch (whose page changes wait
    /// for block starts); otherwise it is [`ClockMode::Auto`].
    Parallel,
}

pub use memtrace_abi::target::AccessPath;

/// Progress report for long runs.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    /// Instructions retired so far.
    pub instructions: u64,
    /// Events recorded so far.
    pub events: u64,
}

/// What to trace and how.
pub struct TraceOptions<'a> {
    /// Kernel-suite job to write into the `memtrace_job` mailbox; `None` writes none.
    pub job: Option<Job>,
    /// Layers to record events for, each by name, index or `index:op`
    /// ([`memtrace_abi::selection::selects`]); `None` records all.
    pub layers: Option<Vec<String>>,
    /// Instruction budget: the run fails with `BudgetExceeded` once it retires more.
    pub max_instructions: u64,
    /// Events per batch message.
    pub batch_size: usize,
    /// How retired instructions are counted.
    pub clock: ClockMode,
    /// How accesses to declared buffers are observed.
    pub access: AccessPath,
    /// Called every 2^24 retired instructions with the progress so far.
    pub progress: Option<Box<dyn FnMut(Progress) + Send + 'a>>,
    /// Bytes the host writes into guest memory before the first instruction
    /// (after the job mailbox), e.g. a model and its inputs for the TFLM runner.
    pub preload: Vec<(u64, Vec<u8>)>,
    /// Guest ranges `(address, length)` read back once the guest has exited;
    /// returned in [`RunSummary::memory`] in the same order.
    pub readback: Vec<(u64, u64)>,
    /// Report writes made inside a selected layer window outside its
    /// declared buffers and the stack ([`memtrace_abi::StrayWrite`]). Costs
    /// one page-protection change per selected layer on the MMIO path; on
    /// the hook path each store to a buffer page also passes a hook.
    pub stray_writes: bool,
    /// Buffers of these roles are declared (their writes are not stray) but
    /// not traced: no events, and the analyses are not told of them. An
    /// O_s-only run needs neither weights nor scratch, and a kernel's
    /// scratch (an im2col column re-read once per output channel) can make
    /// most of a layer's events.
    pub untraced_roles: Vec<Role>,
    /// Buffers of these roles are not traced either, but announced, and
    /// each gives one store event over the whole buffer at its declaration:
    /// where the buffer may write, not when or what it reads. That is all a
    /// shadow map needs of scratch (it ignores scratch loads, and a scratch
    /// buffer cannot overlap its layer's other buffers), and a kernel's
    /// scratch re-read once per output channel can make most of a layer's
    /// events. Takes precedence over [`TraceOptions::untraced_roles`].
    pub written_whole_roles: Vec<Role>,
    /// The emulator that runs the guest.
    pub engine: crate::engine::Engine,
}

impl Default for TraceOptions<'_> {
    fn default() -> Self {
        TraceOptions {
            job: None,
            layers: None,
            max_instructions: 20_000_000_000,
            batch_size: 8192,
            clock: ClockMode::Auto,
            access: AccessPath::Hooks,
            progress: None,
            preload: Vec::new(),
            readback: Vec::new(),
            stray_writes: false,
            untraced_roles: Vec::new(),
            written_whole_roles: Vec::new(),
            engine: crate::engine::Engine::Unicorn,
        }
    }
}

/// Outcome of a run that reached `memtrace_exit`.
#[derive(Clone, Debug)]
pub struct RunSummary {
    /// Architecture of the guest.
    pub arch: Arch,
    /// Exit code the guest passed to `memtrace_exit`.
    pub exit_code: i32,
    /// Instructions retired by the whole run.
    pub instructions: u64,
    /// The access path the run used.
    pub access: AccessPath,
    /// Names of all layers the guest opened, traced or not, in order.
    pub layers: Vec<String>,
    /// The ranges of [`TraceOptions::readback`], read after the exit.
    pub memory: Vec<Vec<u8>>,
    /// Why the guest exited, if it said so (`memtrace_exit_reason`).
    pub exit_reason: Option<String>,
    /// Accesses the MMIO path served that touched no traced byte: data
    /// that shares an engine page with a traced buffer (an untraced scratch
    /// buffer beside a layer's input, say) or with the port. Each cost an
    /// MMIO dispatch and recorded nothing; 0 on the hook path.
    pub idle_dispatches: u64,
    /// Emulator runs the trace took: 2 for a split trace
    /// ([`ClockMode::Parallel`]), 1 otherwise.
    pub runs: u32,
    /// The engine that ran it.
    pub engine: crate::engine::EngineKind,
}

enum Clock {
    Blocks(BlockClock),
    /// Instructions started so far (the current one included).
    Counted(u64),
    /// Another run counts ([`ClockMode::Parallel`]).
    Off,
}

impl Clock {
    fn now(&self, pc: u64) -> u64 {
        match self {
            Clock::Blocks(c) => c.now(pc),
            Clock::Counted(n) => n.saturating_sub(1),
            Clock::Off => 0,
        }
    }
}

struct Session<'a> {
    image: &'a ElfImage,
    /// The protocol and the events, engine-blind.
    rec: Recorder,
    clock: Clock,
    /// Hooks on the open layer's traced buffers (the hook path).
    buffer_hooks: Vec<unicorn_engine::UcHookId>,
    budget: u64,
    progress: Option<Box<dyn FnMut(Progress) + Send + 'a>>,
    next_progress: u64,
    /// Host memory behind guest RAM.
    ram: ram::GuestRam,
    /// State of the MMIO access path; `None` on the hook path.
    served: Option<mmio::Served>,
    /// State of the stray-write watch; `None` when not asked for.
    guard: Option<guard::Guard>,
    /// The stack's bounds and guard pages; `None` without stack symbols.
    stack: Option<stack::StackWatch>,
    /// The image's call-frame information, read at the first unwind
    /// (`Some(None)`: it has none).
    unwinder: Option<Option<Unwinder>>,
    /// Address of the block now running.
    block_address: u64,
}

type Uc<'a> = Unicorn<'a, Session<'a>>;
/// [`Machine::clear_stale_it_state`] after a memory hook.
fn clear_stale_it_state(uc: &mut HookUc<'_, '_>) {
    let arch = uc.get_data().image.arch;
    arch.clear_stale_it_state(uc);
}

/// What hooks receive: any emulator lifetime, any session lifetime.
type HookUc<'u, 's> = Unicorn<'u, Session<'s>>;

/// Runs `image` to its `memtrace_exit`, streaming messages to `sink`;
/// `switch` lets another thread stop it.
pub(crate) fn run(
    image: &ElfImage,
    options: TraceOptions<'_>,
    sink: EventSink,
    switch: Option<&StopSwitch>,
) -> Result<RunSummary, TraceError> {
    let port = image.protocol_port()?;
    let clock = match (image.arch, options.clock) {
        (_, ClockMode::PerInstruction) => Clock::Counted(0),
        (arch, ClockMode::Auto) => Clock::Blocks(arch.block_clock()),
        (_, ClockMode::Parallel) => Clock::Off,
    };
    let served = match options.access {
        AccessPath::Mmio => mmio::Served::for_image(image, port.address),
        AccessPath::Hooks => None,
    };
    let access = if served.is_some() {
        AccessPath::Mmio
    } else {
        AccessPath::Hooks
    };
    let recording = Recording {
        layers: options.layers,
        batch_size: options.batch_size,
        untraced_roles: options.untraced_roles,
        written_whole_roles: options.written_whole_roles,
    };
    let session = Session {
        image,
        rec: Recorder::new(recording, sink),
        clock,
        buffer_hooks: Vec::new(),
        budget: options.max_instructions,
        progress: options.progress,
        next_progress: 1 << 24,
        ram: ram::GuestRam::for_image(image),
        served,
        guard: options
            .stray_writes
            .then(|| guard::Guard::for_image(image, port.address & !(PAGE - 1))),
        stack: stack::StackWatch::for_image(image),
        unwinder: None,
        block_address: 0,
    };
    let mut uc = new_machine(image, session)?;
    write_inputs(
        &mut uc,
        image,
        GuestInputs {
            job: options.job.as_ref(),
            preload: &options.preload,
        },
    )?;
    let readback = options.readback;
    install_hooks(&mut uc, port.address)?;
    // Lives until the run has ended: Unicorn calls into it.
    let _blocks = match uc.get_data().clock {
        Clock::Off => None,
        _ => Some(blocks::BlockHook::install(&mut uc)?),
    };
    stack::protect(&mut uc).map_err(TraceError::Emulator)?;
    let result = match switch.map(|s| s.attach(&uc)) {
        Some(None) => Ok(()),
        _attached => uc.emu_start(image.arch.start_address(image.entry), 0, 0, 0),
    };
    let pc = uc.pc_read().unwrap_or(0);
    if result == Err(uc_error::FETCH_PROT) {
        // The PC is the address the program jumped to.
        stop_at_jump(&mut uc, pc);
    }
    let rec = &mut uc.get_data_mut().rec;
    let layer = rec.layer_name();
    let stop = rec.stop.take();
    let layers = std::mem::take(&mut rec.layers_seen);
    let exit_reason = rec.exit_reason.take();
    let finish = |err: TraceError| Err(crate::debuginfo::with_locations(err, image));
    match (stop, result) {
        (Some(Stop::Error(err)), _) => finish(err),
        (Some(Stop::Exit { code, instructions }), _) => {
            let mut memory = Vec::with_capacity(readback.len());
            for &(address, len) in &readback {
                let mut bytes = vec![0u8; len as usize];
                guest_read(&uc, address, &mut bytes)
                    .map_err(|e| emulator_error(&format!("reading back {address:#x}"), e))?;
                memory.push(bytes);
            }
            Ok(RunSummary {
                arch: image.arch,
                exit_code: code,
                instructions,
                access,
                layers,
                memory,
                exit_reason,
                idle_dispatches: uc
                    .get_data()
                    .served
                    .as_ref()
                    .map_or(0, |s| s.idle_dispatches),
                runs: 1,
                engine: crate::engine::EngineKind::Unicorn,
            })
        }
        (None, Err(e)) => finish(TraceError::GuestFault {
            message: format!("emulation stopped: {e:?}"),
            context: GuestContext::at(pc, layer),
        }),
        (None, Ok(())) => finish(TraceError::NoExit {
            context: GuestContext::at(pc, layer),
        }),
    }
}

/// The machine of a traced run: RAM host-backed (`ram.rs`); segments loaded.
fn new_machine<'a>(image: &ElfImage, session: Session<'a>) -> Result<Uc<'a>, TraceError> {
    let mut uc = image.arch.new_engine(session)?;
    crate::machine::fast_stores(&mut uc, image.arch)?;
    ram::map(&mut uc)?;
    load_segments(&mut uc, image, None)?;
    crate::machine::map_control_page(&mut uc, image)?;
    Ok(uc)
}

fn install_hooks<'a>(uc: &mut Uc<'a>, port: u64) -> Result<(), TraceError> {
    let hook_err = |e| emulator_error("installing hooks", e);
    if uc.get_data().served.is_some() {
        mmio::install(uc)?;
    } else {
        uc.add_mem_hook(
            HookType::MEM_WRITE,
            port,
            port + PORT_SIZE - 1,
            on_port_write,
        )
        .map_err(hook_err)?;
    }
    // Memory hooks are kept off data pages: Unicorn sends every store to a
    // RAM page that any memory hook covers through its slow path
    // (`notdirty_write`, a translated-code check per store), while a page
    // no hook covers takes stores at full speed after the first. So the
    // write-protect hook covers only the pages that may be protected: the
    // stack's guard pages and, with the stray-write watch, what it protects
    // (which keeps the stack out when the image names it).
    // An empty range would become `(s, s - 1)`, which Unicorn reads as all
    // memory.
    let inclusive = |pages: Vec<(u64, u64)>| {
        pages
            .into_iter()
            .filter(|(s, e)| s < e)
            .map(|(s, e)| (s, e - 1))
            .collect()
    };
    let write_prot: Vec<(u64, u64)> = match uc.get_data().guard.as_ref() {
        // `(1, 0)`: Unicorn's range of all memory.
        Some(g) => g.hooked_pages().map_or(vec![(1, 0)], inclusive),
        None => {
            let stack = uc.get_data().stack.as_ref();
            stack.map_or(Vec::new(), |w| inclusive(vec![w.zone]))
        }
    };
    for (first, last) in write_prot {
        uc.add_mem_hook(HookType::MEM_WRITE_PROT, first, last, guard::on_write_prot)
            .map_err(hook_err)?;
    }
    for (first, last) in hooked_ranges(uc.get_data().image) {
        uc.add_mem_hook(
            HookType::MEM_READ_UNMAPPED
                | HookType::MEM_WRITE_UNMAPPED
                | HookType::MEM_FETCH_UNMAPPED,
            first,
            last,
            on_unmapped,
        )
        .map_err(hook_err)?;
    }
    uc.add_intr_hook(on_interrupt).map_err(hook_err)?;
    // No hook for a fetch from a data page (`run` reads it from the error
    // Unicorn returns): a MEM_FETCH_PROT hook over all memory sends every
    // store to a data page through the slow path, 5.6x slower on a loop.
    // Budget and progress are checked per block in both modes; the counting
    // hook, where needed, does nothing else.
    if matches!(uc.get_data().clock, Clock::Counted(_)) {
        uc.add_code_hook(1, 0, blocks::on_instruction)
            .map_err(hook_err)?;
    }
    Ok(())
}

/// The guest addresses `(first, last)` (inclusive) the unmapped-access
/// hooks cover: all but the data pages the image loads. Stores to a data
/// page no memory hook covers run at full speed; and Unicorn walks its
/// whole TLB after translating a block on a page no memory hook covers, so
/// code pages stay covered (an unmapped-access hook never fires on them).
fn hooked_ranges(image: &ElfImage) -> Vec<(u64, u64)> {
    let mut hooked = Vec::new();
    let mut next = 0u64;
    for (start, end) in data_pages(image) {
        if start > next {
            hooked.push((next, start - 1));
        }
        next = end;
    }
    if next != 0 || hooked.is_empty() {
        hooked.push((next, u64::MAX));
    }
    hooked
}

/// The loaded pages no executable segment touches, as sorted ranges.
fn data_pages(image: &ElfImage) -> impl Iterator<Item = (u64, u64)> + '_ {
    page_ranges(image)
        .into_iter()
        .flat_map(|(start, end)| page_runs(image, start, end))
        .filter(|&(_, _, executable)| !executable)
        .map(|(first, end, _)| (first, end))
}

fn on_unmapped(
    uc: &mut HookUc<'_, '_>,
    kind: MemType,
    address: u64,
    size: usize,
    _value: i64,
) -> bool {
    let pc = uc.pc_read().unwrap_or(0);
    let what = match kind {
        MemType::WRITE_UNMAPPED => "write to",
        MemType::FETCH_UNMAPPED => "instruction fetch from",
        _ => "read of",
    };
    let arch = uc.get_data().image.arch;
    if kind == MemType::FETCH_UNMAPPED {
        stop_at_jump(uc, address);
        return false;
    }
    // A frame larger than the guard pages lands below them.
    if stack::stop_on_overflow(uc, pc, address) {
        return false;
    }
    let regs = arch.registers(uc, pc);
    let s = uc.get_data_mut();
    let layer = s.rec.layer.as_ref().map(|l| l.name.clone());
    let callers = s.callers(regs, FAULT_FRAMES);
    s.rec.fail_guest(
        format!("{what} unmapped address {address:#x} ({size} bytes)"),
        pc,
        layer,
    );
    if let Some(Stop::Error(TraceError::GuestFault { context, .. })) = s.rec.stop.as_mut() {
        if context.callers.is_empty() {
            context.callers = Session::caller_locations(&callers);
        }
    }
    false
}

/// Most caller frames unwound for a guest fault.
const FAULT_FRAMES: usize = 64;

/// Fails the run at a jump to `address`, which holds no code: what is
/// there, and as its caller the return address (a call through a bad
/// function pointer sets it), with that caller's callers.
fn stop_at_jump(uc: &mut HookUc<'_, '_>, address: u64) {
    let arch = uc.get_data().image.arch;
    let target = uc
        .get_data()
        .image
        .data_at(address)
        .unwrap_or_else(|| "unmapped".to_owned());
    let ret = arch.return_address(uc);
    let mut returns = Vec::new();
    if let Some(ret) = ret {
        returns.push(ret);
        // Unwound from the caller: after a call its registers are still
        // its own (but on x86-64, whose return address is on the stack).
        if arch != Arch::X86_64 {
            let regs = arch.registers(uc, arch.code_address(ret));
            returns.extend(uc.get_data_mut().callers(regs, FAULT_FRAMES));
        }
    }
    let s = uc.get_data_mut();
    if s.rec.stop.is_none() {
        let layer = s.rec.layer.as_ref().map(|l| l.name.clone());
        let mut context = GuestContext::at(address, layer);
        context.callers = Session::caller_locations(&returns);
        s.rec.stop = Some(Stop::Error(TraceError::GuestFault {
            message: format!("the program jumped to {address:#x}, which is {target}, not code"),
            context,
        }));
    }
    let _ = uc.emu_stop();
}

fn on_interrupt(uc: &mut HookUc<'_, '_>, number: u32) {
    let pc = uc.pc_read().unwrap_or(0);
    let arch = uc.get_data().image.arch;
    let name = arch.interrupt_name(number);
    let s = uc.get_data_mut();
    let layer = s.rec.layer.as_ref().map(|l| l.name.clone());
    s.rec
        .fail_guest(format!("{name} (interrupt {number})"), pc, layer);
    let _ = uc.emu_stop();
}

impl Session<'_> {
    /// The return addresses of the calls that led to the instruction whose
    /// registers are `regs`, innermost first, at most `max` (none when the
    /// image has no call-frame information).
    fn callers(&mut self, regs: Registers, max: usize) -> Vec<u64> {
        let image = self.image;
        let unwinder = self
            .unwinder
            .get_or_insert_with(|| Unwinder::for_image(image));
        let Some(unwinder) = unwinder.as_mut() else {
            return Vec::new();
        };
        let ram = &self.ram;
        unwinder.callers(image, regs, |a, out| ram.read(a, out), max)
    }

    /// Return addresses as code locations still to be resolved
    /// (`debuginfo::with_locations`).
    fn caller_locations(callers: &[u64]) -> Vec<CodeLocation> {
        callers
            .iter()
            .map(|&pc| CodeLocation {
                pc,
                ..CodeLocation::default()
            })
            .collect()
    }
}
