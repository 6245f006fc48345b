//! TFLM's structures in guest memory, read with the member offsets of the
//! program's own DWARF: the interpreter graph's subgraph arrays, a node
//! and its registration, eval tensors, and the single-arena allocator
//! behind a `MicroAllocator`.

use super::super::Uc;
use crate::debuginfo::{StructLayout, TypeLayouts};

const GRAPH: &str = "tflite::MicroInterpreterGraph";
const ALLOCATIONS: &str = "tflite::SubgraphAllocations";
const NODE_AND_REGISTRATION: &str = "tflite::NodeAndRegistration";
const NODE: &str = "TfLiteNode";
const REGISTRATION: &str = "TFLMRegistration";
const EVAL_TENSOR: &str = "TfLiteEvalTensor";
const INT_ARRAY: &str = "TfLiteIntArray";
const MICRO_ALLOCATOR: &str = "tflite::MicroAllocator";
const ARENA: &str = "tflite::SingleArenaBufferAllocator";
const CONTEXT: &str = "TfLiteContext";
const INTERPRETER_CONTEXT: &str = "tflite::MicroInterpreterContext";
const SCRATCH_HANDLE: &str = "tflite::ScratchBufferHandle";
/// The structures read, by qualified name.
pub(super) const STRUCTS: &[&str] = &[
    GRAPH,
    ALLOCATIONS,
    NODE_AND_REGISTRATION,
    NODE,
    REGISTRATION,
    EVAL_TENSOR,
    INT_ARRAY,
    MICRO_ALLOCATOR,
    ARENA,
    CONTEXT,
    INTERPRETER_CONTEXT,
    SCRATCH_HANDLE,
];

/// A field: its offset in its structure and its bytes.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Field {
    pub offset: u64,
    pub bytes: u64,
}

/// Every offset the tracer reads TFLM's structures at.
#[derive(Clone, Copy, Debug)]
pub(super) struct Offsets {
    pub graph_allocations: Field,
    pub graph_allocator: Field,
    pub allocations_size: u64,
    pub allocations_nodes: Field,
    pub allocations_tensors: Field,
    pub node_and_registration_size: u64,
    pub node: u64,
    pub registration: Field,
    pub node_inputs: Field,
    pub node_outputs: Field,
    pub invoke: Field,
    pub builtin_code: Field,
    pub custom_name: Field,
    pub tensor_size: u64,
    pub tensor_data: Field,
    pub tensor_dims: Field,
    pub tensor_type: Field,
    pub array_size: Field,
    pub array_data: u64,
    pub non_persistent: Field,
    pub persistent: Field,
    pub non_persistent_base: u64,
    pub persistent_base: u64,
    pub buffer_head: Field,
    pub buffer_tail: Field,
    pub head: Field,
    pub tail: Field,
    pub temp: Field,
}

/// Layouts looked up by name, each miss said in words.
struct Lookup<'a>(&'a TypeLayouts);

impl Lookup<'_> {
    fn layout(&self, name: &str) -> Result<&StructLayout, String> {
        self.0
            .structs
            .get(name)
            .ok_or_else(|| format!("its DWARF defines no `{name}` (was TFLM compiled with -g?)"))
    }

    fn field(&self, ty: &str, member: &str) -> Result<Field, String> {
        let m = self
            .layout(ty)?
            .member(member)
            .ok_or_else(|| format!("`{ty}` has no member `{member}` in its DWARF"))?;
        Ok(Field {
            offset: m.offset,
            bytes: m.size.unwrap_or(4),
        })
    }

    fn size(&self, ty: &str) -> Result<u64, String> {
        match self.layout(ty)?.size {
            0 => Err(format!("`{ty}` has no size in its DWARF")),
            n => Ok(n),
        }
    }

    fn base(&self, ty: &str, base: &str) -> Result<u64, String> {
        self.layout(ty)?
            .bases
            .get(base)
            .copied()
            .ok_or_else(|| format!("`{ty}` does not derive from `{base}` in its DWARF"))
    }
}

impl Offsets {
    pub(super) fn from(types: &TypeLayouts) -> Result<Offsets, String> {
        let t = Lookup(types);
        Ok(Offsets {
            graph_allocations: t.field(GRAPH, "subgraph_allocations_")?,
            graph_allocator: t.field(GRAPH, "allocator_")?,
            allocations_size: t.size(ALLOCATIONS)?,
            allocations_nodes: t.field(ALLOCATIONS, "node_and_registrations")?,
            allocations_tensors: t.field(ALLOCATIONS, "tensors")?,
            node_and_registration_size: t.size(NODE_AND_REGISTRATION)?,
            node: t.field(NODE_AND_REGISTRATION, "node")?.offset,
            registration: t.field(NODE_AND_REGISTRATION, "registration")?,
            node_inputs: t.field(NODE, "inputs")?,
            node_outputs: t.field(NODE, "outputs")?,
            invoke: t.field(REGISTRATION, "invoke")?,
            builtin_code: t.field(REGISTRATION, "builtin_code")?,
            custom_name: t.field(REGISTRATION, "custom_name")?,
            tensor_size: t.size(EVAL_TENSOR)?,
            tensor_data: t.field(EVAL_TENSOR, "data")?,
            tensor_dims: t.field(EVAL_TENSOR, "dims")?,
            tensor_type: t.field(EVAL_TENSOR, "type")?,
            array_size: t.field(INT_ARRAY, "size")?,
            array_data: t.field(INT_ARRAY, "data")?.offset,
            non_persistent: t.field(MICRO_ALLOCATOR, "non_persistent_buffer_allocator_")?,
            persistent: t.field(MICRO_ALLOCATOR, "persistent_buffer_allocator_")?,
            non_persistent_base: t.base(ARENA, "INonPersistentBufferAllocator")?,
            persistent_base: t.base(ARENA, "IPersistentBufferAllocator")?,
            buffer_head: t.field(ARENA, "buffer_head_")?,
            buffer_tail: t.field(ARENA, "buffer_tail_")?,
            head: t.field(ARENA, "head_")?,
            tail: t.field(ARENA, "tail_")?,
            temp: t.field(ARENA, "temp_")?,
        })
    }
}

/// The offsets of TFLM's scratch buffers: a kernel asks for one while it
/// is prepared (`MicroInterpreterContext::RequestScratchBufferInArena`,
/// whose index is the allocator's request count at that moment) and finds
/// it while it runs in the interpreter context's handles (`TfLiteContext`'s
/// `impl_` is that context).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct ScratchOffsets {
    pub graph_context: Field,
    pub graph_subgraph: Field,
    pub graph_operator: Field,
    pub context_impl: Field,
    pub interpreter_allocator: Field,
    pub interpreter_graph: Field,
    pub interpreter_handles: Field,
    pub request_count: Field,
    pub handle_size: u64,
    pub handle_data: Field,
}

impl ScratchOffsets {
    pub(super) fn from(types: &TypeLayouts) -> Result<ScratchOffsets, String> {
        let t = Lookup(types);
        Ok(ScratchOffsets {
            graph_context: t.field(GRAPH, "context_")?,
            graph_subgraph: t.field(GRAPH, "current_subgraph_index_")?,
            graph_operator: t.field(GRAPH, "current_operator_index_")?,
            context_impl: t.field(CONTEXT, "impl_")?,
            interpreter_allocator: t.field(INTERPRETER_CONTEXT, "allocator_")?,
            interpreter_graph: t.field(INTERPRETER_CONTEXT, "graph_")?,
            interpreter_handles: t.field(INTERPRETER_CONTEXT, "scratch_buffer_handles_")?,
            request_count: t.field(MICRO_ALLOCATOR, "scratch_buffer_request_count_")?,
            handle_size: t.size(SCRATCH_HANDLE)?,
            handle_data: t.field(SCRATCH_HANDLE, "data")?,
        })
    }
}

/// Guest memory, little-endian.
pub(super) trait Memory {
    /// `bytes` (1 to 8) at `address`, zero-extended.
    fn read(&self, address: u64, bytes: u64) -> Option<u64>;

    fn field(&self, base: u64, f: Field) -> Option<u64> {
        self.read(base + f.offset, f.bytes)
    }
}

impl Memory for Uc<'_, '_> {
    fn read(&self, address: u64, bytes: u64) -> Option<u64> {
        let mut b = [0u8; 8];
        let n = bytes.clamp(1, 8) as usize;
        self.mem_read(address, &mut b[..n]).ok()?;
        Some(u64::from_le_bytes(b))
    }
}

/// TFLM's arena as its allocator describes it: one buffer, the planned
/// tensors growing from its start (the head), persistent allocations from
/// its end (the tail).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TflmArena {
    /// Its first byte (TFLM aligns the start of the array it was given).
    pub start: u64,
    /// Its bytes, from `start` to the end of the array.
    pub bytes: u64,
    /// The head: `SingleArenaBufferAllocator::GetNonPersistentUsedBytes()`.
    pub head_bytes: u64,
    /// The tail: `GetPersistentUsedBytes()`.
    pub tail_bytes: u64,
}

impl TflmArena {
    /// `MicroInterpreter::arena_used_bytes()`: head and tail.
    pub fn used_bytes(&self) -> u64 {
        self.head_bytes + self.tail_bytes
    }

    /// One past its last byte.
    pub(super) fn end(&self) -> u64 {
        self.start + self.bytes
    }

    /// Where the persistent tail starts.
    pub(super) fn tail_start(&self) -> u64 {
        self.end() - self.tail_bytes
    }
}

/// The subgraph's arrays: `(allocator, nodes, tensors)`.
pub(super) fn read_frame(
    mem: &dyn Memory,
    o: &Offsets,
    graph: u64,
    subgraph: i64,
) -> Result<(u64, u64, u64), String> {
    let unreadable = |what: &str| format!("the interpreter's {what} is unreadable");
    if !(0..1 << 16).contains(&subgraph) {
        return Err(format!("subgraph {subgraph} is no subgraph index"));
    }
    let allocations = mem
        .field(graph, o.graph_allocations)
        .filter(|&a| a != 0)
        .ok_or_else(|| unreadable("subgraph_allocations_"))?;
    let allocator = mem
        .field(graph, o.graph_allocator)
        .filter(|&a| a != 0)
        .ok_or_else(|| unreadable("allocator_"))?;
    let entry = allocations + subgraph as u64 * o.allocations_size;
    let nodes = mem
        .field(entry, o.allocations_nodes)
        .ok_or_else(|| unreadable("node_and_registrations"))?;
    let tensors = mem
        .field(entry, o.allocations_tensors)
        .ok_or_else(|| unreadable("tensors"))?;
    Ok((allocator, nodes, tensors))
}

/// A kernel's scratch request at the entry of
/// `MicroInterpreterContext::RequestScratchBufferInArena(bytes, &index)`
/// (`this` the interpreter context): `(allocator, subgraph, node, index)`,
/// the node the graph is preparing and the index the request will get.
pub(super) fn read_request(
    mem: &dyn Memory,
    s: &ScratchOffsets,
    interpreter_context: u64,
) -> Option<(u64, i64, u64, u64)> {
    let allocator = mem.field(interpreter_context, s.interpreter_allocator)?;
    let graph = mem.field(interpreter_context, s.interpreter_graph)?;
    let subgraph = mem.field(graph, s.graph_subgraph)? as u32 as i32 as i64;
    let node = mem.field(graph, s.graph_operator)?;
    let index = mem.field(allocator, s.request_count)?;
    Some((allocator, subgraph, node, index))
}

/// The scratch handles of the interpreter whose graph is `graph` (its
/// `TfLiteContext`'s `impl_` is the interpreter context holding them).
pub(super) fn read_handles(mem: &dyn Memory, s: &ScratchOffsets, graph: u64) -> Option<u64> {
    let context = mem.field(graph, s.graph_context).filter(|&c| c != 0)?;
    let interpreter_context = mem.field(context, s.context_impl).filter(|&c| c != 0)?;
    mem.field(interpreter_context, s.interpreter_handles)
        .filter(|&h| h != 0)
}

/// Where scratch buffer `index` is (`GetScratchBuffer`).
pub(super) fn scratch_data(
    mem: &dyn Memory,
    s: &ScratchOffsets,
    handles: u64,
    index: u64,
) -> Option<u64> {
    let at = handles.checked_add(index.checked_mul(s.handle_size)?)?;
    mem.field(at, s.handle_data).filter(|&d| d != 0)
}

/// The arena behind a `MicroAllocator`: its two allocator interfaces must
/// be parts of one `SingleArenaBufferAllocator` (what
/// `MicroInterpreter(model, resolver, arena, bytes)` creates), whose
/// fields must be in order.
pub(super) fn read_arena(
    mem: &dyn Memory,
    o: &Offsets,
    allocator: u64,
) -> Result<TflmArena, String> {
    let unreadable = || "the allocator is unreadable".to_owned();
    let non_persistent = mem
        .field(allocator, o.non_persistent)
        .ok_or_else(unreadable)?;
    let persistent = mem.field(allocator, o.persistent).ok_or_else(unreadable)?;
    let arena = non_persistent.wrapping_sub(o.non_persistent_base);
    if persistent.wrapping_sub(o.persistent_base) != arena {
        return Err(
            "the allocator's persistent and non-persistent buffers are two allocators, not one single-arena allocator"
                .into(),
        );
    }
    let read = |f: Field| mem.field(arena, f).ok_or_else(unreadable);
    let (buffer_head, buffer_tail) = (read(o.buffer_head)?, read(o.buffer_tail)?);
    let (head, tail, temp) = (read(o.head)?, read(o.tail)?, read(o.temp)?);
    let ordered = buffer_head <= head && head <= temp && temp <= tail && tail <= buffer_tail;
    if !ordered {
        return Err(format!(
            "the arena's pointers are out of order (buffer {buffer_head:#x}..{buffer_tail:#x}, head {head:#x}, temp {temp:#x}, tail {tail:#x})"
        ));
    }
    Ok(TflmArena {
        start: buffer_head,
        bytes: buffer_tail - buffer_head,
        // `GetNonPersistentUsedBytes()`: temporary allocations count while
        // they live.
        head_bytes: (head - buffer_head).max(temp - buffer_head),
        tail_bytes: buffer_tail - tail,
    })
}

/// The node `r1` points at, if it is one of the array at `nodes`.
pub(super) fn node_index(o: &Offsets, nodes: u64, r1: u64) -> Option<usize> {
    let offset = r1.checked_sub(nodes + o.node)?;
    let stride = o.node_and_registration_size;
    let index = offset / stride;
    // More nodes than any model has: not this array.
    (offset % stride == 0 && index < 1 << 20).then_some(index as usize)
}

#[cfg(test)]
pub(super) mod tests {
    use std::collections::HashMap;

    use super::*;

    /// Guest memory as a map of words, for tests.
    #[derive(Default)]
    pub struct Words(pub HashMap<u64, u32>);

    impl Words {
        pub fn put(&mut self, at: u64, words: &[u32]) {
            for (i, w) in words.iter().enumerate() {
                self.0.insert(at + 4 * i as u64, *w);
            }
        }
    }

    impl Memory for Words {
        fn read(&self, address: u64, bytes: u64) -> Option<u64> {
            let word = *self.0.get(&(address & !3))? as u64;
            let shifted = word >> (8 * (address & 3));
            Some(match bytes {
                1 => shifted & 0xFF,
                2 => shifted & 0xFFFF,
                _ => shifted,
            })
        }
    }

    fn at(offset: u64) -> Field {
        Field { offset, bytes: 4 }
    }

    /// A 32-bit layout like arm-none-eabi-g++'s for TFLM's structures.
    pub fn offsets() -> Offsets {
        Offsets {
            graph_allocations: at(12),
            graph_allocator: at(8),
            allocations_size: 8,
            allocations_nodes: at(0),
            allocations_tensors: at(4),
            node_and_registration_size: 32,
            node: 0,
            registration: at(28),
            node_inputs: at(0),
            node_outputs: at(4),
            invoke: at(12),
            builtin_code: at(20),
            custom_name: at(24),
            tensor_size: 12,
            tensor_data: at(0),
            tensor_dims: at(4),
            tensor_type: Field {
                offset: 8,
                bytes: 1,
            },
            array_size: at(0),
            array_data: 4,
            non_persistent: at(4),
            persistent: at(8),
            non_persistent_base: 0,
            persistent_base: 4,
            buffer_head: at(8),
            buffer_tail: at(12),
            head: at(16),
            tail: at(20),
            temp: at(24),
        }
    }

    const ALLOCATOR: u64 = 0x1000;
    const ARENA: u64 = 0x2000;

    fn allocator(words: &mut Words, persistent: u32, fields: [u32; 5]) {
        words.put(ALLOCATOR + 4, &[ARENA as u32, persistent]);
        words.put(ARENA + 8, &fields);
    }

    #[test]
    fn the_arena_is_read_as_tflm_sums_it() {
        let mut m = Words::default();
        // buffer 0x10000..0x20000, head at +0x400, temp above it, tail 0x100 below the end
        allocator(
            &mut m,
            ARENA as u32 + 4,
            [0x10000, 0x20000, 0x10400, 0x1ff00, 0x10500],
        );
        let a = read_arena(&m, &offsets(), ALLOCATOR).unwrap();
        assert_eq!(a.start, 0x10000);
        assert_eq!(a.bytes, 0x10000);
        // Temporary allocations alive count (GetNonPersistentUsedBytes).
        assert_eq!(a.head_bytes, 0x500);
        assert_eq!(a.tail_bytes, 0x100);
        assert_eq!(a.used_bytes(), 0x600);
        assert_eq!(a.tail_start(), 0x1ff00);
    }

    #[test]
    fn two_allocators_or_pointers_out_of_order_are_no_arena() {
        let mut m = Words::default();
        allocator(
            &mut m,
            0x9000,
            [0x10000, 0x20000, 0x10400, 0x1ff00, 0x10400],
        );
        let e = read_arena(&m, &offsets(), ALLOCATOR).unwrap_err();
        assert!(e.contains("two allocators"), "{e}");
        allocator(
            &mut m,
            ARENA as u32 + 4,
            [0x10000, 0x20000, 0x1ff80, 0x1ff00, 0x1ff80],
        );
        let e = read_arena(&m, &offsets(), ALLOCATOR).unwrap_err();
        assert!(e.contains("out of order"), "{e}");
        assert!(read_arena(&Words::default(), &offsets(), ALLOCATOR).is_err());
    }

    #[test]
    fn a_node_pointer_is_an_index_only_on_the_array_stride() {
        let o = offsets();
        assert_eq!(node_index(&o, 0x4000, 0x4000), Some(0));
        assert_eq!(node_index(&o, 0x4000, 0x4000 + 3 * 32), Some(3));
        assert_eq!(node_index(&o, 0x4000, 0x4004), None);
        assert_eq!(node_index(&o, 0x4000, 0x3fe0), None);
    }

    #[test]
    fn a_frame_is_the_subgraphs_arrays() {
        let mut m = Words::default();
        let graph = 0x5000;
        m.put(graph + 8, &[ALLOCATOR as u32, 0x6000]);
        m.put(0x6000, &[0x7000, 0x8000, 0x7100, 0x8100]);
        let o = offsets();
        assert_eq!(
            read_frame(&m, &o, graph, 1),
            Ok((ALLOCATOR, 0x7100, 0x8100))
        );
        assert!(read_frame(&m, &o, graph, -1).is_err());
        assert!(read_frame(&m, &o, 0x9999_0000, 0).is_err());
    }
}
