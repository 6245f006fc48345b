//! An unmodified Cortex-M4 program, run as it was built (`memtrace check`):
//! from its entry point with the stack its vector table or linker script
//! names, its memory as its segments and symbols describe it plus a heap and
//! a stack (`layout.rs`), Arm semihosting for its console and exit
//! (`semihosting.rs`), an instruction budget, and, when asked, memcheck of
//! its heap (`memcheck.rs`) and a stack-overflow watch.
//!
//! There is no protocol and no peripheral model: an access to memory the
//! program was not given stops it with the address and the source line.

mod calls;
mod cmsis_api;
mod guest_memory;
mod layer;
pub mod layout;
mod report;
mod tflm_ops;

use std::collections::HashMap;

use unicorn_engine::{uc_error, HookType, MemType, Prot, RegisterARM, Unicorn};

use crate::arch::Machine;
use crate::clock::BlockClock;
use crate::elf::ElfImage;
use crate::error::TraceError;
use crate::machine::{emulator_error, fast_stores, load_segments, set_permissions};
pub use crate::memcheck::FindingKind;
use crate::memcheck::{decode_call, Memcheck, RawStack, ALLOCATOR, COPIES, LENIENT};
use crate::semihosting::{op_name, Console, Exit, HeapInfo, Outcome, Semihost};
use crate::unwind::Unwinder;
use guest_memory::HostAccess;
use layer::{Closed, Layers, Owner};
pub use layer::{InnerCall, Sink};
pub use layout::Layout;
use report::finish;
pub use report::{
    BlockReport, Finding, Leak, MemcheckReport, ProgramEnd, ProgramRun, StopKind, StrayRead,
    TflmRun, TracedCall, TracedOperator, KEEP_OUTPUT,
};
pub use tflm_ops::{TflmArena, TflmInvocation, INVOKE_SUBGRAPH};

/// How to run a program.
#[derive(Clone, Debug)]
pub struct ProgramOptions {
    /// The program's arguments (after its name).
    pub args: Vec<String>,
    /// Instructions after which the program is stopped.
    pub max_instructions: u64,
    /// Heap bytes, where the linker script does not say.
    pub heap_bytes: u64,
    /// Stack bytes, where the linker script does not say.
    pub stack_bytes: u64,
    /// Echo the program's stdout and stderr as they come.
    pub echo: bool,
    /// Check the heap (memcheck) and the stack.
    pub memcheck: bool,
}

/// Frames unwound for a finding or a stop.
const FRAMES: usize = 64;

/// Thumb's `BKPT 0xAB`, the semihosting trap.
const BKPT_AB: u16 = 0xBEAB;

/// Unicorn's ARM interrupt number of a BKPT.
const EXCP_BKPT: u32 = 7;

pub(super) enum RawEnd {
    Exit(Exit),
    Stop {
        kind: StopKind,
        message: String,
        stack: RawStack,
    },
}

#[derive(Clone, Copy)]
enum Intercept {
    Allocator {
        name: &'static str,
        first_arg: usize,
    },
    /// A copy function (`memcpy`, …), by its name.
    Copy(&'static str),
}

pub(super) struct State<'i> {
    image: &'i ElfImage,
    layout: Layout,
    host: Option<Semihost>,
    clock: BlockClock,
    budget: u64,
    memcheck: Option<Memcheck>,
    intercepts: HashMap<u64, Intercept>,
    unwinder: Option<Option<Unwinder>>,
    end: Option<RawEnd>,
    /// Why the run cannot go on as the user asked (a command line too long
    /// for the program's buffer): memtrace's error, not the program's.
    error: Option<TraceError>,
    /// Where to go on after a hook stopped the engine (see [`Resume`]).
    resume: Option<Resume>,
    /// The layers' sink and open window, when layers are traced.
    layers: Option<Layers<'i>>,
    /// The CMSIS-NN API calls traced as layers, when asked for.
    calls: Option<calls::Calls>,
    /// TFLM's operator invocations traced as layers, when asked for and the
    /// program has an interpreter.
    tflm: Option<tflm_ops::TflmOps>,
    /// Why operators were asked for and none can be traced.
    tflm_missing: Option<String>,
}

/// What of an unmodified program becomes layers, and where their messages
/// go.
pub struct LayerTracing<'i> {
    /// Each layer's messages (begin, buffers, events, stray writes, end),
    /// as the program runs.
    pub sink: Sink<'i>,
    /// Each outermost call of a CMSIS-NN API function (`calls.rs`).
    pub calls: bool,
    /// Each operator invocation of TFLM's interpreter (`tflm_ops.rs`); a
    /// CMSIS-NN call inside one belongs to the operator's layer.
    pub operators: bool,
}

/// Whether `image` has a TFLM interpreter whose operators can be traced
/// as layers: `Err` says why not (no node loop, no DWARF for TFLM's
/// structures).
pub fn find_interpreter(image: &ElfImage) -> Result<(), String> {
    tflm_ops::TflmOps::for_image(image).map(|_| ())
}

/// A new start after a semihosting call or a skipped bad free: the hook
/// stops the engine and `run_program` starts it again here with these
/// registers. Writing the PC from inside a hook would do the same, but it
/// leaves Unicorn's PC unsynchronised in every memory hook after it
/// (`skip_sync_pc_on_exit` stays set until the next `emu_start`), and
/// memcheck needs the exact instruction of every access.
struct Resume {
    pc: u64,
    registers: Vec<(RegisterARM, u64)>,
}

pub(super) type Uc<'a, 'i> = Unicorn<'a, State<'i>>;

/// Runs `image`, an unmodified Cortex-M program, to its exit, as the core
/// `image.arch` names.
pub fn run_program(image: &ElfImage, options: &ProgramOptions) -> Result<ProgramRun, TraceError> {
    run_program_with(image, options, None)
}

/// Runs `image` like [`run_program`]; with `tracing`, each outermost call
/// of a CMSIS-NN API function the program makes and each operator TFLM's
/// interpreter invokes is a layer whose messages go to its sink as the
/// program runs, and [`ProgramRun::calls`] and [`ProgramRun::tflm`] list
/// them.
pub fn run_program_with<'i>(
    image: &'i ElfImage,
    options: &ProgramOptions,
    tracing: Option<LayerTracing<'i>>,
) -> Result<ProgramRun, TraceError> {
    if !image.arch.is_cortex_m() {
        return Err(TraceError::UnsupportedElf {
            path: image.path.clone(),
            reason: "`check` runs Cortex-M programs (Thumb ELF executables)".into(),
        });
    }
    let layout = Layout::of(image, options.heap_bytes, options.stack_bytes).map_err(|reason| {
        TraceError::NoRoom {
            path: image.path.clone(),
            reason,
        }
    })?;
    let name = image
        .path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let cmdline = std::iter::once(name)
        .chain(options.args.iter().cloned())
        .collect::<Vec<_>>()
        .join(" ");
    let heap = HeapInfo {
        heap_base: layout.heap.0 as u32,
        heap_limit: layout.heap.1 as u32,
        stack_base: layout.stack.1 as u32,
        stack_limit: layout.stack.0 as u32,
    };
    let console = Console {
        stdout: Vec::new(),
        stderr: Vec::new(),
        echo: options.echo,
        keep: KEEP_OUTPUT,
    };
    let mut intercepts = if options.memcheck {
        intercepts(image)
    } else {
        HashMap::new()
    };
    let allocator = intercepts
        .values()
        .any(|i| matches!(i, Intercept::Allocator { .. }));
    if !allocator {
        // Blocks memcheck cannot see would make every heap access an error.
        intercepts.clear();
    }
    let memcheck = options.memcheck.then(|| match allocator {
        true => Memcheck::new(
            layout.heap.0,
            layout.heap.1,
            function_ranges(image, &LENIENT),
            function_ranges(image, &COPIES),
        ),
        false => Memcheck::without_heap(NO_ALLOCATOR),
    });
    let (calls, operators) = tracing
        .as_ref()
        .map_or((false, false), |t| (t.calls, t.operators));
    let (tflm, tflm_missing) = match operators.then(|| tflm_ops::TflmOps::for_image(image)) {
        Some(Ok(t)) => (Some(t), None),
        Some(Err(why)) => (None, Some(why)),
        None => (None, None),
    };
    let state = State {
        image,
        layout,
        host: Some(Semihost::new(&cmdline, heap, console)),
        clock: image.arch.block_clock(),
        budget: options.max_instructions,
        memcheck,
        intercepts,
        unwinder: None,
        end: None,
        error: None,
        resume: None,
        layers: tracing.map(|t| Layers::new(t.sink)),
        calls: calls.then(|| calls::Calls::for_image(image)).flatten(),
        tflm,
        tflm_missing,
    };
    let mut uc = image.arch.new_engine(state)?;
    fast_stores(&mut uc, image.arch)?;
    map_memory(&mut uc, image, &layout)?;
    install_hooks(&mut uc, &layout, options.memcheck && allocator)?;
    if options.memcheck {
        guest_memory::watch_read_only(&mut uc)?;
    }
    uc.reg_write(RegisterARM::SP, layout.initial_sp)
        .map_err(|e| emulator_error("setting the stack pointer", e))?;
    let mut start = image.arch.start_address(image.entry);
    let result = loop {
        let result = uc.emu_start(start, 0, 0, 0);
        let Some(resume) = uc.get_data_mut().resume.take() else {
            break result;
        };
        if uc.get_data().end.is_some() {
            break result;
        }
        for (r, value) in resume.registers {
            uc.reg_write(r, value)
                .map_err(|e| emulator_error("resuming the program", e))?;
        }
        start = resume.pc;
    };
    if let Some(error) = uc.get_data_mut().error.take() {
        return Err(error);
    }
    let pc = uc.pc_read().unwrap_or(0);
    if result == Err(uc_error::FETCH_PROT) {
        // The PC is the address the program jumped to.
        stop_at_jump(&mut uc, pc);
    }
    if let Some(c) = layer::close(&mut uc, pc, true) {
        closed(&mut uc, &c);
    }
    tflm_ops::finish(&mut uc);
    finish(uc, image, result)
}

fn map_memory(uc: &mut Uc<'_, '_>, image: &ElfImage, layout: &Layout) -> Result<(), TraceError> {
    for (s, e) in layout.regions(image) {
        uc.mem_map(s, e - s, Prot::ALL)
            .and_then(|()| set_permissions(uc, image, s, e, Prot::NONE))
            .map_err(|err| emulator_error(&format!("mapping guest memory {s:#x}..{e:#x}"), err))?;
    }
    load_segments(uc, image, None)
}

/// Why memcheck checks no heap when the program has no allocator symbols
/// (a stripped program).
const NO_ALLOCATOR: &str = "the program has no allocator symbols (malloc, free, realloc, calloc, _malloc_r, …): its heap blocks cannot be known";

/// The allocator's and the copy functions' entry points.
fn intercepts(image: &ElfImage) -> HashMap<u64, Intercept> {
    let mut out = HashMap::new();
    for (name, first_arg) in ALLOCATOR {
        if let Some(s) = image.symbol(name).filter(|s| s.is_function) {
            out.insert(s.address, Intercept::Allocator { name, first_arg });
        }
    }
    for name in COPIES {
        if let Some(s) = image.symbol(name).filter(|s| s.is_function) {
            out.entry(s.address).or_insert(Intercept::Copy(name));
        }
    }
    out
}

/// The code ranges of the functions named `names` (a function without a
/// size, as hand-written assembly often is, ends where the next begins).
fn function_ranges(image: &ElfImage, names: &[&str]) -> Vec<(u64, u64)> {
    let functions: Vec<(u64, u64, &str)> = image.functions().collect();
    let mut out = Vec::new();
    for (i, &(start, size, name)) in functions.iter().enumerate() {
        if !names.contains(&name) {
            continue;
        }
        let end = if size > 0 {
            start + size
        } else {
            functions[i + 1..]
                .iter()
                .map(|f| f.0)
                .find(|&a| a > start)
                .unwrap_or(start + 2)
        };
        out.push((start, end));
    }
    out
}

/// Installs the run's hooks; `heap`: memcheck's of the heap and the
/// allocator.
fn install_hooks(uc: &mut Uc<'_, '_>, layout: &Layout, heap: bool) -> Result<(), TraceError> {
    let hook_err = |e| emulator_error("installing hooks", e);
    uc.add_block_hook(1, 0, on_block).map_err(hook_err)?;
    uc.add_intr_hook(on_interrupt).map_err(hook_err)?;
    uc.add_mem_hook(
        HookType::MEM_READ_UNMAPPED | HookType::MEM_WRITE_UNMAPPED | HookType::MEM_FETCH_UNMAPPED,
        1,
        0,
        on_unmapped,
    )
    .map_err(hook_err)?;
    // A fetch from a data page is read from the error Unicorn returns
    // (`run_program_with`): a MEM_FETCH_PROT hook over all memory sends
    // every store to a data page through the slow path.
    let api_entries = uc
        .get_data()
        .calls
        .as_ref()
        .map_or(Vec::new(), |c| c.entry_points());
    for at in api_entries {
        uc.add_code_hook(at, at, |uc, address, _| calls::on_entry(uc, address))
            .map_err(hook_err)?;
    }
    if heap {
        let entries: Vec<u64> = uc.get_data().intercepts.keys().copied().collect();
        for at in entries {
            uc.add_code_hook(at, at, on_intercept).map_err(hook_err)?;
        }
        let (start, end) = layout.heap;
        // An empty heap has no access to check (and `(start, start - 1)`
        // would be Unicorn's range of all memory).
        if start < end {
            uc.add_mem_hook(
                HookType::MEM_READ | HookType::MEM_WRITE,
                start,
                end - 1,
                on_heap_access,
            )
            .map_err(hook_err)?;
        }
    }
    Ok(())
}

pub(super) fn reg(uc: &Uc<'_, '_>, r: RegisterARM) -> u64 {
    uc.reg_read(r).unwrap_or(0)
}

/// The call stack at `pc`: its return addresses unwound from the stack.
pub(super) fn stack_here(uc: &mut Uc<'_, '_>, pc: u64) -> RawStack {
    let image = uc.get_data().image;
    let regs = image.arch.registers(uc, pc);
    let mut unwinder = uc
        .get_data_mut()
        .unwinder
        .take()
        .unwrap_or_else(|| Unwinder::for_image(image));
    let returns = match unwinder.as_mut() {
        Some(u) => u.callers(image, regs, |a, out| uc.mem_read(a, out).is_ok(), FRAMES),
        None => Vec::new(),
    };
    uc.get_data_mut().unwinder = Some(unwinder);
    RawStack { pc, returns }
}

pub(super) fn stop(uc: &mut Uc<'_, '_>, kind: StopKind, message: String, pc: u64) {
    if uc.get_data().end.is_none() {
        let stack = stack_here(uc, pc);
        stop_with(uc, kind, message, stack);
    }
    let _ = uc.emu_stop();
}

/// Stops the program with `stack` as the place and calls of the stop.
fn stop_with(uc: &mut Uc<'_, '_>, kind: StopKind, message: String, stack: RawStack) {
    if uc.get_data().end.is_none() {
        uc.get_data_mut().end = Some(RawEnd::Stop {
            kind,
            message,
            stack,
        });
    }
    let _ = uc.emu_stop();
}

fn on_block(uc: &mut Uc<'_, '_>, address: u64, size: u32) {
    if !uc.get_data_mut().clock.enter_cached(address) {
        let mut code = vec![0u8; size as usize];
        let _ = uc.mem_read(address, &mut code);
        // Off the hot path: a block that loops forever is only ever
        // entered here, the first time.
        let arch = uc.get_data().image.arch;
        let spins = arch.loops_forever(address, &code, |a, out| uc.mem_read(a, out).is_ok());
        uc.get_data_mut().clock.block_start(address, size, || code);
        if spins {
            let message = format!(
                "the program loops forever at pc {address:#x}: a branch to itself, which nothing can leave (`check` raises no interrupt)"
            );
            return stop(uc, StopKind::Loop, message, address);
        }
    }
    // After the clock has entered the block: a layer ends at its start.
    if layer::returning(uc, address) {
        if let Some(c) = layer::close(uc, address, false) {
            closed(uc, &c);
        }
    }
    tflm_ops::on_block(uc, address);
    let s = uc.get_data();
    let retired = s.clock.retired_before_block();
    if retired > s.budget {
        let budget = s.budget;
        let message = format!(
            "the program ran {retired} instructions without exiting, more than its budget of {budget} (raise it with --max-instructions)"
        );
        return stop(uc, StopKind::Budget, message, address);
    }
    let sp = reg(uc, RegisterARM::SP);
    let (bottom, top) = s.layout.stack;
    if sp < bottom && sp + layout::GUARD_GAP >= bottom && s.memcheck.is_some() {
        let message = format!(
            "stack overflow: the stack pointer {sp:#x} is {} B below the stack's lowest address {bottom:#x} (the stack is {} B; raise it with --stack)",
            bottom - sp,
            top - bottom
        );
        return stop(uc, StopKind::StackOverflow, message, address);
    }
    if s.memcheck.as_ref().is_some_and(|m| m.in_allocator()) {
        let r0 = reg(uc, RegisterARM::R0) as u32;
        if let Some(m) = uc.get_data_mut().memcheck.as_mut() {
            m.block(address, sp, || r0);
        }
    }
}

/// Hands what a closed window saw to its owner.
fn closed(uc: &mut Uc<'_, '_>, c: &Closed) {
    let s = uc.get_data_mut();
    match c.owner {
        Owner::Call(r) => {
            if let Some(calls) = s.calls.as_mut() {
                calls.closed(r, c);
            }
        }
        Owner::Operator(r) => {
            if let Some(t) = s.tflm.as_mut() {
                t.closed(r, c);
            }
        }
    }
}

fn on_intercept(uc: &mut Uc<'_, '_>, address: u64, _size: u32) {
    let Some(&what) = uc.get_data().intercepts.get(&address) else {
        return;
    };
    let args = [
        RegisterARM::R0,
        RegisterARM::R1,
        RegisterARM::R2,
        RegisterARM::R3,
    ]
    .map(|r| reg(uc, r) as u32);
    match what {
        Intercept::Copy(name) => {
            let range = (args[0] as u64, args[1] as u64, args[2] as u64);
            if let Some(mut m) = uc.get_data_mut().memcheck.take() {
                m.copy_range(name, range, || stack_here(uc, address));
                m.copy(range.0, range.1, range.2);
                uc.get_data_mut().memcheck = Some(m);
            }
            if layer::is_open(uc) {
                layer::copy_entered(uc, address, (range.0, range.2));
            }
        }
        Intercept::Allocator { name, first_arg } => {
            let lr = reg(uc, RegisterARM::LR);
            let sp = reg(uc, RegisterARM::SP);
            let outer = !uc
                .get_data()
                .memcheck
                .as_ref()
                .is_some_and(|m| m.in_allocator());
            let stack = if outer {
                stack_here(uc, address)
            } else {
                RawStack::default()
            };
            let call = decode_call(name, &args[first_arg..]);
            let skip = uc
                .get_data_mut()
                .memcheck
                .as_mut()
                .is_some_and(|m| m.enter(call, lr & !1, sp, stack));
            if skip {
                // The bad free is not made (newlib would corrupt its heap):
                // the call returns at once.
                uc.get_data_mut().resume = Some(Resume {
                    pc: lr | 1,
                    registers: vec![(RegisterARM::R0, 0), (RegisterARM::SP, sp)],
                });
                let _ = uc.emu_stop();
            }
        }
    }
}

fn on_heap_access(
    uc: &mut Uc<'_, '_>,
    kind: MemType,
    address: u64,
    size: usize,
    _value: i64,
) -> bool {
    let arch = uc.get_data().image.arch;
    let pc = uc.pc_read().unwrap_or(0);
    if let Some(mut m) = uc.get_data_mut().memcheck.take() {
        let write = kind == MemType::WRITE;
        m.access(pc, write, address, size as u64, || stack_here(uc, pc));
        uc.get_data_mut().memcheck = Some(m);
    }
    arch.clear_stale_it_state(uc);
    true
}

fn on_unmapped(uc: &mut Uc<'_, '_>, kind: MemType, address: u64, size: usize, _value: i64) -> bool {
    let pc = uc.pc_read().unwrap_or(0);
    let what = match kind {
        MemType::WRITE_UNMAPPED => "write to",
        MemType::FETCH_UNMAPPED => "instruction fetch from",
        _ => "read of",
    };
    if kind == MemType::FETCH_UNMAPPED && address < RETURN_FROM_ENTRY {
        stop_at_jump(uc, address);
        return false;
    }
    let (bottom, top) = uc.get_data().layout.stack;
    let sp = reg(uc, RegisterARM::SP);
    if kind != MemType::FETCH_UNMAPPED && sp_is_wild(sp, bottom, top) && near(address, sp) {
        let message = format!(
            "the stack pointer is wild: {sp:#x} is outside the stack ({bottom:#x}–{top:#x}), and the {what} {address:#x} ({size} B) went through it"
        );
        stop(uc, StopKind::Fault, message, pc);
        return false;
    }
    if kind != MemType::FETCH_UNMAPPED
        && address < bottom
        && address + layout::GUARD_GAP >= bottom
        && address + 256 >= sp
    {
        let message = format!(
            "stack overflow: {what} {address:#x}, {} B below the stack's lowest address {bottom:#x} (raise it with --stack)",
            bottom - address
        );
        stop(uc, StopKind::StackOverflow, message, pc);
        return false;
    }
    let message = format!(
        "{what} unmapped address {address:#x} ({size} B){}",
        peripheral_note(address)
    );
    stop(uc, StopKind::Fault, message, pc);
    false
}

/// Fetches from here on are a return through the poisoned link register
/// the program starts with (`0xFFFF_FFFF`): a return from its entry point.
const RETURN_FROM_ENTRY: u64 = 0xFFFF_FFF0;

/// Whether the stack pointer `sp` is outside the stack `[bottom, top]` and
/// the guard gap below it (where an overflow is reported as one).
fn sp_is_wild(sp: u64, bottom: u64, top: u64) -> bool {
    !(bottom.saturating_sub(layout::GUARD_GAP)..=top).contains(&sp)
}

/// Whether an access at `address` is one through the stack pointer `sp`
/// (a push or a frame's slot, in 32-bit arithmetic: a push at SP 0 writes
/// at the top of the address space).
fn near(address: u64, sp: u64) -> bool {
    (address as u32).wrapping_sub(sp as u32).wrapping_add(256) <= 512
}

/// What an unmapped address probably is, on a Cortex-M.
fn peripheral_note(address: u64) -> &'static str {
    match address {
        0x4000_0000..=0x5FFF_FFFF => ": a peripheral register; `check` models no peripherals",
        0xE000_0000..=0xE00F_FFFF => {
            ": the private peripheral bus (SysTick, NVIC, SCB); `check` models no peripherals"
        }
        RETURN_FROM_ENTRY.. => ": the program returned from its entry point",
        _ => ": memory the program's segments, heap and stack do not cover",
    }
}

/// Where a jump to `address`, which is not code, went: data, the heap,
/// the stack or unmapped memory.
fn jump_target(s: &State<'_>, address: u64) -> String {
    if let Some(data) = s.image.data_at(address) {
        return data;
    }
    let ((h0, h1), (s0, s1)) = (s.layout.heap, s.layout.stack);
    if (h0..h1).contains(&address) {
        format!("the heap ({h0:#x}–{h1:#x})")
    } else if (s0..s1).contains(&address) {
        format!("the stack ({s0:#x}–{s1:#x})")
    } else {
        "unmapped (no segment, heap or stack)".to_owned()
    }
}

/// Stops the program at a jump to `address`, which holds no code: the
/// caller is the link register's (a call through a bad function pointer
/// sets it), and its callers are unwound from there.
fn stop_at_jump(uc: &mut Uc<'_, '_>, address: u64) {
    let lr = reg(uc, RegisterARM::LR);
    let target = jump_target(uc.get_data(), address);
    let message = format!("the program jumped to {address:#x}, which is {target}, not code");
    let mut stack = stack_here(uc, lr & !1);
    stack.returns.insert(0, lr);
    stack.pc = address;
    stop_with(uc, StopKind::Fault, message, stack);
}

fn on_interrupt(uc: &mut Uc<'_, '_>, number: u32) {
    let arch = uc.get_data().image.arch;
    let pc = uc.pc_read().unwrap_or(0);
    arch.clear_stale_it_state(uc);
    let mut insn = [0u8; 2];
    let is_semihosting = number == EXCP_BKPT
        && uc.mem_read(pc, &mut insn).is_ok()
        && u16::from_le_bytes(insn) == BKPT_AB;
    if !is_semihosting {
        let message = format!("{} (exception {number})", arch.interrupt_name(number));
        return stop(uc, StopKind::Fault, message, pc);
    }
    let operation = reg(uc, RegisterARM::R0) as u32;
    let arg = reg(uc, RegisterARM::R1) as u32;
    let instructions = uc.get_data().clock.now(pc);
    let Some(mut host) = uc.get_data_mut().host.take() else {
        return;
    };
    let mut mem = HostAccess::new(uc);
    let outcome = host.call(&mut mem, operation, arg, instructions);
    mem.check(op_name(operation), pc);
    uc.get_data_mut().host = Some(host);
    match outcome {
        Ok(Outcome::Return(value)) => {
            uc.get_data_mut().resume = Some(Resume {
                pc: (pc + 2) | 1,
                registers: vec![(RegisterARM::R0, value as u64)],
            });
            let _ = uc.emu_stop();
        }
        Ok(Outcome::Exit(exit)) => {
            uc.get_data_mut().end = Some(RawEnd::Exit(exit));
            let _ = uc.emu_stop();
        }
        Ok(Outcome::CommandLineTooLong { bytes, buffer }) => {
            let path = uc.get_data().image.path.clone();
            uc.get_data_mut().error = Some(TraceError::CommandLineTooLong {
                path,
                bytes,
                buffer,
            });
            let _ = uc.emu_stop();
        }
        Err(unsupported) => stop(uc, StopKind::Unsupported, unsupported.0, pc),
    }
}
