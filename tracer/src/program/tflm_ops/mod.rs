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
//! input; output 0 is the output, the others scratch. The scratch buffers
//! a kernel asked for in the arena are scratch too, as many bytes as it
//! asked for: whose they are is learnt while the kernels are prepared (the
//! entry of `MicroInterpreterContext::RequestScratchBufferInArena`, with
//! the node the graph is preparing), where they are from the interpreter
//! context's handles when the operator runs. The persistent buffers a
//! kernel allocated for itself while it was initialised and prepared are
//! its own memory (`persistent.rs`): its writes there are counted, no
//! stray writes.
//!
//! `structs.rs` reads TFLM's structures, `tensors.rs` turns a node's
//! tensors into buffers.

mod persistent;
mod structs;
mod tensors;

use unicorn_engine::RegisterARM;

use memtrace_abi::{OpKind, Role};

use super::layer::{self, Closed, InnerCall, LayerBuffer, Owner, Window};
use super::{reg, Uc};
use crate::arch::Machine;
use crate::debuginfo::TypeLayouts;
use crate::elf::ElfImage;
use persistent::Persistent;
pub use structs::TflmArena;
use structs::{
    node_index, read_arena, read_frame, read_handles, read_request, scratch_data, Memory, Offsets,
    ScratchOffsets, STRUCTS,
};
use tensors::{op_name, NameTable, Tensors, ELEMENT_BYTES, NAME_TABLE};

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
    /// The `tflite::Model` its allocator was last given
    /// (`MicroAllocator::StartModelAllocation`), when that was seen.
    pub model: Option<u64>,
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
    /// The CMSIS-NN API functions its kernel called.
    pub inner_calls: Vec<InnerCall>,
    /// Its persistent op data: buffers and bytes.
    pub persistent: (usize, u64),
    /// Stores its kernel made to its persistent op data.
    pub persistent_writes: u64,
    /// Bytes of each scratch buffer its kernel asked for while it was
    /// prepared, in the order asked.
    pub scratch_requested: Vec<u64>,
}

/// The outermost node loop running: what its entry gave.
#[derive(Clone, Copy, Debug)]
struct Frame {
    return_pc: u64,
    entry_sp: u64,
    allocator: u64,
    subgraph: i64,
    nodes: u64,
    tensors: u64,
    arena: Option<TflmArena>,
    /// The interpreter context's scratch buffer handles.
    handles: Option<u64>,
    invocation: usize,
}

/// A scratch buffer a kernel asked for while it was prepared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Request {
    allocator: u64,
    subgraph: i64,
    node: u64,
    index: u64,
    bytes: u64,
}

/// What it takes to give each operator its scratch buffers: the request
/// function's entry, the offsets, the requests seen.
struct Scratch {
    request_entry: u64,
    offsets: ScratchOffsets,
    requests: Vec<Request>,
}

/// The operators of one run.
pub(super) struct TflmOps {
    /// The loop's code, `[start, end)`.
    code: (u64, u64),
    offsets: Offsets,
    /// `TfLiteType` value → element bytes.
    element_bytes: Vec<(i64, u32)>,
    /// TFLite's operator names in the program, when it links them.
    names: Option<NameTable>,
    frame: Option<Frame>,
    /// `None` when the program's DWARF or symbols do not describe TFLM's
    /// scratch requests: operators then declare none.
    scratch: Option<Scratch>,
    /// `None` like `scratch`, or when the program has no
    /// `MicroInterpreterContext::AllocatePersistentBuffer`.
    persistent: Option<Persistent>,
    /// `MicroAllocator::StartModelAllocation`'s entry, when the program
    /// has it: where an allocator starts a model anew.
    start_model: Option<u64>,
    /// Each allocator's model, as it was last started: (allocator, model).
    models: Vec<(u64, u64)>,
    pub(super) invocations: Vec<TflmInvocation>,
    pub(super) records: Vec<RawOperator>,
}

impl TflmOps {
    /// The interpreter of `image`, or why it has none to trace: no node
    /// loop, or DWARF that does not describe TFLM's structures.
    pub(super) fn for_image(image: &ElfImage) -> Result<TflmOps, String> {
        let code = function_named(image, INVOKE_SUBGRAPH)?.ok_or_else(|| {
            format!(
                "no function `{INVOKE_SUBGRAPH}`: the program does not link TFLM's MicroInterpreter"
            )
        })?;
        let names: Vec<&str> = ELEMENT_BYTES.iter().map(|(n, _)| *n).collect();
        let types = TypeLayouts::load(image, STRUCTS, &names);
        let offsets = Offsets::from(&types)?;
        let element_bytes = ELEMENT_BYTES
            .iter()
            .filter_map(|(n, b)| Some((*types.enumerators.get(*n)?, *b)))
            .collect();
        let scratch = match (
            function_named(image, REQUEST_SCRATCH).ok().flatten(),
            ScratchOffsets::from(&types),
        ) {
            (Some((entry, _)), Ok(offsets)) => Some(Scratch {
                request_entry: entry,
                offsets,
                requests: Vec::new(),
            }),
            _ => None,
        };
        let persistent = match (
            function_named(image, ALLOCATE_PERSISTENT).ok().flatten(),
            &scratch,
        ) {
            (Some((entry, _)), Some(s)) => Some(Persistent::new(entry, s.offsets)),
            _ => None,
        };
        let start_model = function_named(image, START_MODEL)
            .ok()
            .flatten()
            .map(|(entry, _)| entry);
        let names = image
            .symbol(NAME_TABLE)
            .filter(|s| !s.is_function && s.size > 0)
            .map(|s| NameTable::new(s.address, s.size));
        Ok(TflmOps {
            code,
            offsets,
            element_bytes,
            names,
            frame: None,
            scratch,
            persistent,
            start_model,
            models: Vec::new(),
            invocations: Vec::new(),
            records: Vec::new(),
        })
    }

    /// What the window of record `record` saw.
    pub(super) fn closed(&mut self, record: usize, closed: &Closed) {
        if let Some(r) = self.records.get_mut(record) {
            r.instructions = closed.instructions;
            r.unfinished = closed.unfinished;
            r.inner_calls = closed.inner_calls.clone();
            r.persistent_writes = closed.owned_writes;
        }
    }
}

/// The function through which kernels ask for scratch buffers while
/// they are prepared, demangled up to its parameters (`size_t` is another
/// type on another target).
const REQUEST_SCRATCH: &str = "tflite::MicroInterpreterContext::RequestScratchBufferInArena(";

/// The function through which kernels allocate their persistent op data
/// while they are initialised and prepared, demangled up to its parameters.
const ALLOCATE_PERSISTENT: &str = "tflite::MicroInterpreterContext::AllocatePersistentBuffer(";

/// The function with which an allocator starts a model's allocation, before
/// its operators are initialised and prepared, demangled up to its
/// parameters.
const START_MODEL: &str = "tflite::MicroAllocator::StartModelAllocation(";

/// The code range `[start, end)` of the function whose demangled name is
/// `name` (or, for a name ending in `(`, starts with it); `None` when the
/// program has none.
fn function_named(image: &ElfImage, name: &str) -> Result<Option<(u64, u64)>, String> {
    // The function's own name, between the last `::` and the parameters:
    // only symbols holding it are demangled.
    let bare = name.split('(').next().unwrap_or(name);
    let bare = bare.rsplit("::").next().unwrap_or(bare);
    let found = image
        .functions()
        .filter(|(_, _, mangled)| mangled.contains(bare))
        .find(|(_, _, mangled)| {
            let demangled = addr2line::demangle(mangled, gimli::DW_LANG_C_plus_plus);
            demangled.is_some_and(|d| {
                if name.ends_with('(') {
                    d.starts_with(name)
                } else {
                    d == name
                }
            })
        });
    match found {
        Some((start, size, _)) if size > 0 => {
            let start = image.arch.code_address(start);
            Ok(Some((start, start + size)))
        }
        Some(_) => Err(format!("`{name}` has no size in the symbol table")),
        None => Ok(None),
    }
}

/// A block start: the node loop's entry or return, or an operator's
/// invocation. Costs a comparison or two at most blocks.
pub(super) fn on_block(uc: &mut Uc<'_, '_>, address: u64) {
    let Some(t) = uc.get_data().tflm.as_ref() else {
        return;
    };
    let (frame, code) = (t.frame, t.code);
    if t.start_model == Some(address) {
        return start_model(uc);
    }
    if t.scratch
        .as_ref()
        .is_some_and(|s| s.request_entry == address)
    {
        return record_request(uc);
    }
    if let Some(p) = t.persistent.as_ref() {
        if p.entry == address {
            return enter_allocation(uc);
        }
        if p.returning(address, reg(uc, RegisterARM::SP)) {
            return leave_allocation(uc);
        }
    }
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
    let handles = t
        .scratch
        .as_ref()
        .and_then(|s| read_handles(&*uc, &s.offsets, graph));
    let frame = read_frame(&*uc, &o, graph, subgraph);
    let (frame, error) = match frame {
        Ok((allocator, nodes, tensors)) => {
            let arena = read_arena(&*uc, &o, allocator);
            let frame = Frame {
                return_pc,
                entry_sp,
                allocator,
                subgraph,
                nodes,
                tensors,
                arena: arena.as_ref().ok().copied(),
                handles,
                invocation,
            };
            (Some(frame), arena.err())
        }
        Err(e) => (None, Some(e)),
    };
    let Some(t) = uc.get_data_mut().tflm.as_mut() else {
        return;
    };
    let model = frame
        .as_ref()
        .and_then(|f| t.models.iter().find(|(a, _)| *a == f.allocator))
        .map(|&(_, m)| m);
    t.invocations.push(TflmInvocation {
        subgraph,
        operators: 0,
        arena: Err(error.unwrap_or_else(|| "the node loop has not returned".to_owned())),
        unfinished: false,
        model,
    });
    // Without its arrays no operator of this run can be found; the
    // invocation says why.
    t.frame = frame;
}

/// An allocator starts a model (`this` in r0, the `tflite::Model` in r1):
/// whatever its operators asked for and allocated before belongs to the
/// model it held before, and is forgotten.
fn start_model(uc: &mut Uc<'_, '_>) {
    let (allocator, model) = (reg(uc, RegisterARM::R0), reg(uc, RegisterARM::R1));
    let Some(t) = uc.get_data_mut().tflm.as_mut() else {
        return;
    };
    t.models.retain(|(a, _)| *a != allocator);
    t.models.push((allocator, model));
    if let Some(s) = t.scratch.as_mut() {
        s.requests.retain(|r| r.allocator != allocator);
    }
    if let Some(p) = t.persistent.as_mut() {
        p.forget(allocator);
    }
}

/// A kernel asks for a scratch buffer: the node being prepared, and the
/// index the request gets ([`Scratch::record`]: the interpreter may be
/// prepared again, or another one reuse the arena).
fn record_request(uc: &mut Uc<'_, '_>) {
    let interpreter_context = reg(uc, RegisterARM::R0);
    let bytes = reg(uc, RegisterARM::R1);
    let Some(s) = uc.get_data().tflm.as_ref().and_then(|t| t.scratch.as_ref()) else {
        return;
    };
    let Some((allocator, subgraph, node, index)) =
        read_request(&*uc, &s.offsets, interpreter_context)
    else {
        return;
    };
    let Some(s) = uc
        .get_data_mut()
        .tflm
        .as_mut()
        .and_then(|t| t.scratch.as_mut())
    else {
        return;
    };
    s.record(Request {
        allocator,
        subgraph,
        node,
        index,
        bytes,
    });
}

/// A kernel allocates persistent op data: its owner (the node being
/// initialised or prepared) and size; its address comes at the return.
fn enter_allocation(uc: &mut Uc<'_, '_>) {
    let (interpreter_context, bytes) = (reg(uc, RegisterARM::R0), reg(uc, RegisterARM::R1));
    let (return_pc, sp) = (reg(uc, RegisterARM::LR) & !1, reg(uc, RegisterARM::SP));
    let Some(mut p) = uc
        .get_data_mut()
        .tflm
        .as_mut()
        .and_then(|t| t.persistent.take())
    else {
        return;
    };
    p.enter(&*uc, interpreter_context, bytes, return_pc, sp);
    if let Some(t) = uc.get_data_mut().tflm.as_mut() {
        t.persistent = Some(p);
    }
}

/// The allocation returns its address in r0.
fn leave_allocation(uc: &mut Uc<'_, '_>) {
    let base = reg(uc, RegisterARM::R0) as u32 as u64;
    if let Some(p) = uc
        .get_data_mut()
        .tflm
        .as_mut()
        .and_then(|t| t.persistent.as_mut())
    {
        p.returned(base);
    }
}

impl Scratch {
    /// A new request; one of an index already seen for the same allocator
    /// starts a new allocation of the model, whose earlier requests from
    /// that index on are forgotten.
    fn record(&mut self, request: Request) {
        self.requests
            .retain(|r| r.allocator != request.allocator || r.index < request.index);
        self.requests.push(request);
    }

    /// The requests node `node` of the frame's subgraph made, in order.
    fn of_node<'a>(&'a self, f: &'a Frame, node: usize) -> impl Iterator<Item = &'a Request> {
        self.requests.iter().filter(move |r| {
            r.allocator == f.allocator && r.subgraph == f.subgraph && r.node == node as u64
        })
    }
}

/// The scratch buffers node `node` of the frame's subgraph asked for, as
/// buffers (`scratch<j>`, the bytes the kernel asked for), and the notes
/// of those that cannot be found.
fn scratch_buffers(
    mem: &dyn Memory,
    scratch: Option<&Scratch>,
    f: &Frame,
    node: usize,
) -> (Vec<LayerBuffer>, Vec<String>) {
    let (mut buffers, mut notes) = (Vec::new(), Vec::new());
    let Some(s) = scratch else {
        return (buffers, notes);
    };
    for (j, r) in s.of_node(f, node).enumerate() {
        let data = f
            .handles
            .and_then(|h| scratch_data(mem, &s.offsets, h, r.index));
        match data {
            Some(base) => buffers.push(LayerBuffer {
                role: Role::Scratch,
                name: format!("scratch{j}"),
                base,
                size: r.bytes,
                elem_size: 1,
            }),
            None => notes.push(format!(
                "scratch{j} ({} B, request {}) not declared: its handle is unreadable",
                r.bytes, r.index
            )),
        }
    }
    (buffers, notes)
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
    let op = op_name(&*uc, &o, registration, builtin_code, t.names);
    let kind = OpKind::from_builtin_code(builtin_code as i32);
    let tensors = Tensors {
        mem: &*uc,
        o: &o,
        element_bytes: &t.element_bytes,
        tensors: f.tensors,
        arena: f.arena,
    };
    let (scratch, scratch_notes) = scratch_buffers(&*uc, t.scratch.as_ref(), &f, node_index);
    let scratch_requested = t.scratch.as_ref().map_or(Vec::new(), |s| {
        s.of_node(&f, node_index).map(|r| r.bytes).collect()
    });
    let owned = t.persistent.as_ref().map_or(Vec::new(), |p| {
        p.owned(f.allocator, f.subgraph, node_index as u64)
    });
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
        inner_calls: Vec::new(),
        persistent: (owned.len(), owned.iter().map(|(s, e)| e - s).sum()),
        persistent_writes: 0,
        scratch_requested,
    };
    let memory = uc.get_data().layout.regions(uc.get_data().image);
    let window = buffers.and_then(|(mut buffers, shapes, mut notes)| {
        buffers.extend(scratch);
        notes.extend(scratch_notes);
        let (buffers, dropped) = layer::declarable(buffers, &memory)?;
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
        owned,
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

#[cfg(test)]
mod tests {
    use super::structs::tests::Words;
    use super::*;

    fn field(offset: u64) -> structs::Field {
        structs::Field { offset, bytes: 4 }
    }

    fn scratch() -> Scratch {
        Scratch {
            request_entry: 0x100,
            offsets: ScratchOffsets {
                graph_context: field(4),
                graph_subgraph: field(16),
                graph_operator: field(20),
                context_impl: field(0),
                interpreter_allocator: field(4),
                interpreter_graph: field(8),
                interpreter_handles: field(20),
                request_count: field(40),
                handle_size: 4,
                handle_data: field(0),
            },
            requests: Vec::new(),
        }
    }

    fn request(allocator: u64, node: u64, index: u64, bytes: u64) -> Request {
        Request {
            allocator,
            subgraph: 0,
            node,
            index,
            bytes,
        }
    }

    fn frame(allocator: u64, handles: Option<u64>) -> Frame {
        Frame {
            return_pc: 0,
            entry_sp: 0,
            allocator,
            subgraph: 0,
            nodes: 0,
            tensors: 0,
            arena: None,
            handles,
            invocation: 0,
        }
    }

    #[test]
    fn a_new_allocation_of_the_model_forgets_the_requests_it_replaces() {
        let mut s = scratch();
        for r in [
            request(1, 0, 0, 64),
            request(1, 2, 1, 32),
            request(2, 0, 0, 8),
        ] {
            s.record(r);
        }
        // The first interpreter prepared again: its index 1 anew.
        s.record(request(1, 3, 1, 16));
        assert_eq!(
            s.requests,
            [
                request(1, 0, 0, 64),
                request(2, 0, 0, 8),
                request(1, 3, 1, 16)
            ]
        );
    }

    #[test]
    fn an_operators_scratch_is_its_nodes_requests_where_the_handles_say() {
        let mut s = scratch();
        for r in [
            request(1, 4, 0, 64),
            request(1, 5, 1, 32),
            request(1, 5, 2, 8),
        ] {
            s.record(r);
        }
        s.record(request(9, 5, 0, 100));
        let mut m = Words::default();
        m.put(0x3000, &[0x2000_0000, 0x2000_0040, 0]);
        let (buffers, notes) = scratch_buffers(&m, Some(&s), &frame(1, Some(0x3000)), 5);
        let got: Vec<(&str, u64, u64)> = buffers
            .iter()
            .map(|b| (b.name.as_str(), b.base, b.size))
            .collect();
        assert_eq!(got, [("scratch0", 0x2000_0040, 32)]);
        // A handle that points nowhere is said, not declared.
        assert_eq!(notes.len(), 1);
        assert!(notes[0].contains("scratch1 (8 B, request 2)"), "{notes:?}");
        let (buffers, notes) = scratch_buffers(&m, Some(&s), &frame(1, None), 5);
        assert!(buffers.is_empty() && notes.len() == 2);
        assert_eq!(scratch_buffers(&m, None, &frame(1, None), 5).0, []);
    }

    #[test]
    fn a_request_is_read_as_the_node_being_prepared_and_the_next_index() {
        let s = scratch();
        let mut m = Words::default();
        // interpreter context 0x100: allocator 0x200, graph 0x300
        m.put(0x104, &[0x200, 0x300]);
        m.put(0x200 + 40, &[7]);
        m.put(0x300 + 16, &[0, 12]);
        assert_eq!(
            structs::read_request(&m, &s.offsets, 0x100),
            Some((0x200, 0, 12, 7))
        );
        // graph 0x300 → context 0x400 → its impl 0x100 → handles 0x3000
        m.put(0x304, &[0x400]);
        m.put(0x400, &[0x100]);
        m.put(0x114, &[0x3000]);
        assert_eq!(read_handles(&m, &s.offsets, 0x300), Some(0x3000));
        assert_eq!(read_handles(&m, &s.offsets, 0x999), None);
    }
}
