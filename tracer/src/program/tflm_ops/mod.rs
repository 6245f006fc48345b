//! TFLM operator invocations of an unmodified program as layers (`memtrace
//! check` with operators traced).
//!
//! TFLM runs a model's operators in one loop,
//! `tflite::MicroInterpreterGraph::InvokeSubgraph(int)`: for each node it
//! calls `registration->invoke(context, node)`. Its entry is found by the
//! function's demangled symbol, and every structure read on the way by the
//! member offsets of the program's own DWARF (`TypeLayouts`), never by
//! offsets copied from TFLM's headers (which change with its build flags:
//! `TfLiteNode` has other members under `TF_LITE_STATIC_MEMORY`):
//!
//! - at the loop's entry (outermost only; a control-flow operator's
//!   subgraphs run inside its own layer), `this` (r0) and the subgraph
//!   (r1) give the subgraph's `NodeAndRegistration` and `TfLiteEvalTensor`
//!   arrays (`subgraph_allocations_`) and the arena
//!   (`allocator_` → the `SingleArenaBufferAllocator`);
//! - a block that starts a function called from the loop (the link
//!   register in it) with r1 pointing at node *i* of that array, and whose
//!   address is node *i*'s `registration->invoke`, is operator *i*'s
//!   invocation: a layer window (`layer.rs`) until it returns, with the
//!   node's input and output tensors as buffers;
//! - at the loop's return, the arena's head and tail are read from the
//!   allocator, as `MicroInterpreter::arena_used_bytes()` sums them.
//!
//! Roles follow memtrace's TFLM runner (docs/protocol.md section 15): an
//! input tensor outside the arena is a constant (weights; bias for input 2
//! of a convolution, depthwise convolution or fully connected layer, input
//! 3 of a transpose convolution), one in the arena's persistent tail a
//! variable (state that outlives the operator: scratch), any other an
//! input; output 0 is the output, the others scratch. Scratch buffers a
//! kernel requested in the arena are not declared (the loop does not say
//! whose they are): the reference kernels of int8 models request none.

mod structs;
mod tensors;

use unicorn_engine::RegisterARM;

use memtrace_abi::OpKind;

use super::layer::{self, Closed, Owner, Window};
use super::{reg, Uc};
use crate::arch::Machine;
use crate::debuginfo::TypeLayouts;
use crate::elf::ElfImage;
pub use structs::TflmArena;
use structs::{node_index, read_arena, read_frame, Memory, Offsets, STRUCTS};
use tensors::{op_name, Tensors, ELEMENT_BYTES};

/// The interpreter's node loop, demangled.
pub const INVOKE_SUBGRAPH: &str = "tflite::MicroInterpreterGraph::InvokeSubgraph(int)";

/// One outermost run of the node loop (`MicroInterpreter::Invoke`).
#[derive(Clone, Debug)]
pub struct TflmInvocation {
    /// The subgraph it ran (0: the model's main subgraph).
    pub subgraph: i64,
    /// The operators it invoked as layers.
    pub operators: usize,
    /// The arena when the loop returned (when the program ended inside it:
    /// at its entry); why it could not be read.
    pub arena: Result<TflmArena, String>,
    /// The program ended inside the loop.
    pub unfinished: bool,
}

/// One operator invocation, as the tracer saw it.
#[derive(Clone, Debug)]
pub struct RawOperator {
    /// Its layer's index among the run's layers; `None` when it could not
    /// be one.
    pub index: Option<usize>,
    /// The loop run it belongs to (0-based, [`TflmInvocation`]s).
    pub invocation: usize,
    /// Its node's position in the subgraph.
    pub node: usize,
    /// TFLite's name of the operator (`CONV_2D`), or its custom name.
    pub op: String,
    /// Its registration's builtin code.
    pub builtin_code: i64,
    /// The function invoked (Thumb bit cleared).
    pub invoke: u64,
    /// `in1, in2 -> out` shapes of its tensors.
    pub shapes: String,
    /// Why it is no layer (a structure that is not one).
    pub error: Option<String>,
    /// Instructions retired inside the invocation.
    pub instructions: u64,
    /// The invocation had not returned when the program ended.
    pub unfinished: bool,
    /// Tensors not declared and why.
    pub notes: Vec<String>,
}

/// The outermost node loop running: what its entry gave.
#[derive(Clone, Copy, Debug)]
struct Frame {
    return_pc: u64,
    entry_sp: u64,
    allocator: u64,
    nodes: u64,
    tensors: u64,
    arena: Option<TflmArena>,
    invocation: usize,
}

/// The operators of one run.
pub(super) struct TflmOps {
    /// The loop's code, `[start, end)`.
    code: (u64, u64),
    offsets: Offsets,
    /// `TfLiteType` value → element bytes.
    element_bytes: Vec<(i64, u32)>,
    frame: Option<Frame>,
    pub(super) invocations: Vec<TflmInvocation>,
    pub(super) records: Vec<RawOperator>,
}

impl TflmOps {
    /// The interpreter of `image`, or why it has none to trace: no node
    /// loop, or DWARF that does not describe TFLM's structures.
    pub(super) fn for_image(image: &ElfImage) -> Result<TflmOps, String> {
        let code = node_loop(image)?;
        let names: Vec<&str> = ELEMENT_BYTES.iter().map(|(n, _)| *n).collect();
        let types = TypeLayouts::load(image, STRUCTS, &names);
        let offsets = Offsets::from(&types)?;
        let element_bytes = ELEMENT_BYTES
            .iter()
            .filter_map(|(n, b)| Some((*types.enumerators.get(*n)?, *b)))
            .collect();
        Ok(TflmOps {
            code,
            offsets,
            element_bytes,
            frame: None,
            invocations: Vec::new(),
            records: Vec::new(),
        })
    }

    /// What the window of record `record` saw.
    pub(super) fn closed(&mut self, record: usize, closed: &Closed) {
        if let Some(r) = self.records.get_mut(record) {
            r.instructions = closed.instructions;
            r.unfinished = closed.unfinished;
        }
    }
}

/// The node loop's code range: the function whose demangled name is
/// [`INVOKE_SUBGRAPH`].
fn node_loop(image: &ElfImage) -> Result<(u64, u64), String> {
    let found = image
        .functions()
        .filter(|(_, _, name)| name.contains("InvokeSubgraph"))
        .find(|(_, _, name)| {
            addr2line::demangle(name, gimli::DW_LANG_C_plus_plus).as_deref()
                == Some(INVOKE_SUBGRAPH)
        });
    match found {
        Some((start, size, _)) if size > 0 => {
            let start = image.arch.code_address(start);
            Ok((start, start + size))
        }
        Some(_) => Err(format!(
            "`{INVOKE_SUBGRAPH}` has no size in the symbol table"
        )),
        None => Err(format!(
            "no function `{INVOKE_SUBGRAPH}`: the program does not link TFLM's MicroInterpreter"
        )),
    }
}

/// A block start: the node loop's entry or return, or an operator's
/// invocation. Costs a comparison or two at most blocks.
pub(super) fn on_block(uc: &mut Uc<'_, '_>, address: u64) {
    let Some((frame, code)) = uc.get_data().tflm.as_ref().map(|t| (t.frame, t.code)) else {
        return;
    };
    match frame {
        None if address == code.0 && !layer::is_open(uc) => enter_loop(uc),
        None => {}
        Some(f) if address == f.return_pc && reg(uc, RegisterARM::SP) == f.entry_sp => {
            leave_loop(uc, false);
        }
        // Inside a layer a call from the loop is a nested subgraph's.
        Some(_) if layer::is_open(uc) => {}
        Some(f) => {
            let lr = reg(uc, RegisterARM::LR) & !1;
            if (code.0..code.1).contains(&lr) {
                invoke_at(uc, address, f);
            }
        }
    }
}

/// The program ended: an invocation still open is recorded unfinished.
pub(super) fn finish(uc: &mut Uc<'_, '_>) {
    if uc
        .get_data()
        .tflm
        .as_ref()
        .is_some_and(|t| t.frame.is_some())
    {
        leave_loop(uc, true);
    }
}

fn enter_loop(uc: &mut Uc<'_, '_>) {
    let graph = reg(uc, RegisterARM::R0);
    let subgraph = reg(uc, RegisterARM::R1) as u32 as i32 as i64;
    let return_pc = reg(uc, RegisterARM::LR) & !1;
    let entry_sp = reg(uc, RegisterARM::SP);
    let Some(t) = uc.get_data().tflm.as_ref() else {
        return;
    };
    let o = t.offsets;
    let invocation = t.invocations.len();
    let frame = read_frame(&*uc, &o, graph, subgraph);
    let (frame, error) = match frame {
        Ok((allocator, nodes, tensors)) => {
            let arena = read_arena(&*uc, &o, allocator);
            let frame = Frame {
                return_pc,
                entry_sp,
                allocator,
                nodes,
                tensors,
                arena: arena.as_ref().ok().copied(),
                invocation,
            };
            (Some(frame), arena.err())
        }
        Err(e) => (None, Some(e)),
    };
    let Some(t) = uc.get_data_mut().tflm.as_mut() else {
        return;
    };
    t.invocations.push(TflmInvocation {
        subgraph,
        operators: 0,
        arena: Err(error.unwrap_or_else(|| "the node loop has not returned".to_owned())),
        unfinished: false,
    });
    // Without its arrays no operator of this run can be found; the
    // invocation says why.
    t.frame = frame;
}

fn leave_loop(uc: &mut Uc<'_, '_>, unfinished: bool) {
    let Some(f) = uc.get_data().tflm.as_ref().and_then(|t| t.frame) else {
        return;
    };
    let o = uc.get_data().tflm.as_ref().map(|t| t.offsets);
    let arena = match (unfinished, o) {
        (false, Some(o)) => read_arena(&*uc, &o, f.allocator),
        _ => f
            .arena
            .ok_or_else(|| "the arena was unreadable at the loop's entry".to_owned()),
    };
    let Some(t) = uc.get_data_mut().tflm.as_mut() else {
        return;
    };
    t.frame = None;
    if let Some(inv) = t.invocations.get_mut(f.invocation) {
        inv.arena = arena;
        inv.unfinished = unfinished;
    }
}

/// A block called from the node loop: operator *i*'s invocation when r1
/// points at node *i* and the block is its registration's `invoke`.
fn invoke_at(uc: &mut Uc<'_, '_>, address: u64, f: Frame) {
    let Some(t) = uc.get_data().tflm.as_ref() else {
        return;
    };
    let o = t.offsets;
    let r1 = reg(uc, RegisterARM::R1);
    let Some(node_index) = node_index(&o, f.nodes, r1) else {
        return;
    };
    let entry = f.nodes + node_index as u64 * o.node_and_registration_size;
    let Some(registration) = uc.field(entry, o.registration).filter(|&r| r != 0) else {
        return;
    };
    let invoke = uc.field(registration, o.invoke).unwrap_or(0) & !1;
    if invoke != address {
        return;
    }
    open_operator(uc, address, f, node_index, r1, registration);
}

fn open_operator(
    uc: &mut Uc<'_, '_>,
    address: u64,
    f: Frame,
    node_index: usize,
    node: u64,
    registration: u64,
) {
    let Some(t) = uc.get_data().tflm.as_ref() else {
        return;
    };
    let o = t.offsets;
    let builtin_code = uc
        .field(registration, o.builtin_code)
        .map_or(-1, |c| c as u32 as i32 as i64);
    let op = op_name(&*uc, &o, registration, builtin_code);
    let kind = OpKind::from_builtin_code(builtin_code as i32);
    let tensors = Tensors {
        mem: &*uc,
        o: &o,
        element_bytes: &t.element_bytes,
        tensors: f.tensors,
        arena: f.arena,
    };
    let buffers = tensors.buffers(node, kind);
    let return_pc = reg(uc, RegisterARM::LR) & !1;
    let entry_sp = reg(uc, RegisterARM::SP);
    let t0 = uc.get_data().clock.now(address);
    let mut raw = RawOperator {
        index: None,
        invocation: f.invocation,
        node: node_index,
        op: op.clone(),
        builtin_code,
        invoke: address,
        shapes: String::new(),
        error: None,
        instructions: 0,
        unfinished: false,
        notes: Vec::new(),
    };
    let window = buffers.and_then(|(buffers, shapes, mut notes)| {
        let (buffers, dropped) = layer::declarable(buffers)?;
        notes.extend(dropped);
        raw.shapes = shapes;
        raw.notes = notes;
        Ok(buffers)
    });
    let Some(t) = uc.get_data_mut().tflm.as_mut() else {
        return;
    };
    let record = t.records.len();
    let buffers = match window {
        Ok(b) => b,
        Err(e) => {
            raw.error = Some(e);
            t.records.push(raw);
            return;
        }
    };
    t.records.push(raw);
    let window = Window {
        owner: Owner::Operator(record),
        name: format!("{node_index}:{op}"),
        op,
        params: format!("index={node_index}"),
        spec: None,
        buffers,
        return_pc,
        entry_sp,
        // `invoke(context, node)` has no stack arguments.
        stack_arguments: entry_sp,
        reads: None,
    };
    let opened = layer::open(uc, window, t0, address);
    let Some(t) = uc.get_data_mut().tflm.as_mut() else {
        return;
    };
    if let Some(r) = t.records.get_mut(record) {
        r.index = opened;
    }
    if opened.is_some() {
        if let Some(inv) = t.invocations.get_mut(f.invocation) {
            inv.operators += 1;
        }
    }
}
