//! A node's tensors as layer buffers: their bytes, shapes and roles, and
//! the operator's name.

use memtrace_abi::{OpKind, Role};

use super::super::layer::LayerBuffer;
use super::structs::{Field, Memory, Offsets, TflmArena};

/// The byte size TFLM gives each element type (`TfLiteTypeSizeOf`), by
/// the name of its `TfLiteType` enumerator; the values come from the
/// program's DWARF. Int4 tensors are stored one element a byte.
pub(super) const ELEMENT_BYTES: &[(&str, u32)] = &[
    ("kTfLiteFloat16", 2),
    ("kTfLiteBFloat16", 2),
    ("kTfLiteFloat32", 4),
    ("kTfLiteFloat64", 8),
    ("kTfLiteInt16", 2),
    ("kTfLiteInt32", 4),
    ("kTfLiteUInt32", 4),
    ("kTfLiteUInt8", 1),
    ("kTfLiteUInt16", 2),
    ("kTfLiteInt8", 1),
    ("kTfLiteInt64", 8),
    ("kTfLiteUInt64", 8),
    ("kTfLiteBool", 1),
    ("kTfLiteResource", 4),
    ("kTfLiteComplex64", 8),
    ("kTfLiteComplex128", 16),
    ("kTfLiteInt4", 1),
];

/// TFLite's `BuiltinOperator_CUSTOM`: the registration names itself.
const BUILTIN_CUSTOM: i32 = 32;

/// More bytes than a guest's memory holds (memtrace maps at most 1 GiB):
/// the eval tensor is not one.
const MAX_TENSOR_BYTES: u64 = 1 << 30;

/// More dimensions than any TFLite tensor has: the dims array is not one.
const MAX_DIMS: u32 = 16;

/// TFLite's name of the operator (as TFLM's `OpNameFromRegistration`): the
/// builtin's, or the custom name the registration carries.
pub(super) fn op_name(
    mem: &dyn Memory,
    o: &Offsets,
    registration: u64,
    code: i64,
    names: Option<NameTable>,
) -> String {
    if code == BUILTIN_CUSTOM as i64 {
        let name = mem
            .field(registration, o.custom_name)
            .and_then(|at| c_string(mem, at, 64));
        return name.unwrap_or_else(|| "CUSTOM".to_owned());
    }
    if let Some(name) = names.and_then(|t| t.name(mem, code)) {
        return name;
    }
    match OpKind::from_builtin_code(code as i32) {
        Some(k) => k.tflite_name().to_owned(),
        None => format!("BUILTIN_{code}"),
    }
}

/// TFLite's names of its builtin operators as the program holds them:
/// the schema's `EnumNamesBuiltinOperator()` table of C strings (a static
/// local array, linked when TFLM names an operator, as its profiler and
/// error messages do).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct NameTable {
    /// The array of pointers.
    pub address: u64,
    /// Its entries.
    pub entries: u64,
}

/// The table's symbol: `tflite::EnumNamesBuiltinOperator()::names`.
pub(super) const NAME_TABLE: &str = "_ZZN6tflite24EnumNamesBuiltinOperatorEvE5names";

/// Bytes of a pointer of the table (a 32-bit core).
const POINTER_BYTES: u64 = 4;

impl NameTable {
    /// The table of `size` bytes at `address`.
    pub(super) fn new(address: u64, size: u64) -> NameTable {
        NameTable {
            address,
            entries: size / POINTER_BYTES,
        }
    }

    /// Entry `code`, when it is a non-empty name.
    fn name(&self, mem: &dyn Memory, code: i64) -> Option<String> {
        let code = u64::try_from(code).ok().filter(|&c| c < self.entries)?;
        let at = mem.read(self.address + code * POINTER_BYTES, POINTER_BYTES)?;
        c_string(mem, at, 64).filter(|n| !n.is_empty())
    }
}

/// A NUL-terminated string of at most `max` bytes.
fn c_string(mem: &dyn Memory, at: u64, max: u64) -> Option<String> {
    if at == 0 {
        return None;
    }
    let mut bytes = Vec::new();
    for i in 0..max {
        match mem.read(at + i, 1)? as u8 {
            0 => break,
            b => bytes.push(b),
        }
    }
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// A node's tensors read from guest memory.
pub(super) struct Tensors<'a> {
    pub mem: &'a dyn Memory,
    pub o: &'a Offsets,
    /// `TfLiteType` value → element bytes.
    pub element_bytes: &'a [(i64, u32)],
    /// The subgraph's `TfLiteEvalTensor` array.
    pub tensors: u64,
    /// The arena, to tell constants and variables from activations.
    pub arena: Option<TflmArena>,
}

/// One eval tensor: where its data is, its shape and element bytes.
struct EvalTensor {
    data: u64,
    dims: Vec<i64>,
    elem: Option<u32>,
    ty: u64,
}

impl EvalTensor {
    fn bytes(&self) -> Option<u64> {
        let elements = self
            .dims
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(u64::try_from(d).ok()?))?;
        elements.checked_mul(self.elem? as u64)
    }

    fn shape(&self) -> String {
        if self.dims.is_empty() {
            return "scalar".to_owned();
        }
        let dims: Vec<String> = self.dims.iter().map(|d| d.to_string()).collect();
        dims.join("x")
    }
}

impl Tensors<'_> {
    /// The node's buffers, its shapes in words, and the tensors left out.
    pub(super) fn buffers(
        &self,
        node: u64,
        kind: Option<OpKind>,
    ) -> Result<(Vec<LayerBuffer>, String, Vec<String>), String> {
        let inputs = self.indices(node, self.o.node_inputs, "inputs")?;
        let outputs = self.indices(node, self.o.node_outputs, "outputs")?;
        let mut buffers = Vec::new();
        let mut notes = Vec::new();
        let mut seen = Vec::new();
        let mut shapes = (Vec::new(), Vec::new());
        for (input, list) in [(true, &inputs), (false, &outputs)] {
            for (k, &index) in list.iter().enumerate() {
                // An optional input left out; each tensor declared once (a
                // tensor read twice, `x + x`, is one buffer).
                if index < 0 || seen.contains(&index) {
                    continue;
                }
                seen.push(index);
                let tensor = self.tensor(index)?;
                let shape = tensor.shape();
                if input {
                    shapes.0.push(shape);
                } else {
                    shapes.1.push(shape);
                }
                let bytes = match (tensor.elem, tensor.bytes()) {
                    (None, _) => Err(format!("type {} has no byte size in TFLM", tensor.ty)),
                    (_, Some(0)) => Err("no bytes".to_owned()),
                    _ if tensor.data == 0 => Err("no data".to_owned()),
                    (_, Some(b)) if b <= MAX_TENSOR_BYTES => Ok(b),
                    _ => Err(format!(
                        "its shape {} is more than a guest's memory",
                        tensor.shape()
                    )),
                };
                let bytes = match bytes {
                    Ok(b) => b,
                    Err(why) => {
                        notes.push(format!("tensor{index} not declared: {why}"));
                        continue;
                    }
                };
                buffers.push(LayerBuffer {
                    role: self.role(input, k, kind, tensor.data),
                    name: format!("tensor{index}"),
                    base: tensor.data,
                    size: bytes,
                    elem_size: tensor.elem.unwrap_or(1),
                });
            }
        }
        let shapes = format!("{} -> {}", shapes.0.join(", "), shapes.1.join(", "));
        Ok((buffers, shapes, notes))
    }

    /// The tensor indices of a `TfLiteIntArray*` member of the node.
    fn indices(&self, node: u64, field: Field, what: &str) -> Result<Vec<i64>, String> {
        let array = self
            .mem
            .field(node, field)
            .ok_or_else(|| format!("the node's {what} are unreadable"))?;
        if array == 0 {
            return Ok(Vec::new());
        }
        self.int_array(array, &format!("the node's {what}"))
    }

    fn int_array(&self, array: u64, what: &str) -> Result<Vec<i64>, String> {
        let size = self
            .mem
            .field(array, self.o.array_size)
            .ok_or_else(|| format!("{what} are unreadable"))? as u32;
        if size > 1024 {
            return Err(format!("{what} hold {size} entries: not a TfLiteIntArray"));
        }
        (0..size as u64)
            .map(|i| {
                self.mem
                    .read(array + self.o.array_data + 4 * i, 4)
                    .map(|v| v as u32 as i32 as i64)
                    .ok_or_else(|| format!("{what} are unreadable"))
            })
            .collect()
    }

    fn tensor(&self, index: i64) -> Result<EvalTensor, String> {
        let at = self.tensors + index as u64 * self.o.tensor_size;
        let unreadable = || format!("eval tensor {index} is unreadable");
        let data = self
            .mem
            .field(at, self.o.tensor_data)
            .ok_or_else(unreadable)?;
        let dims_at = self
            .mem
            .field(at, self.o.tensor_dims)
            .ok_or_else(unreadable)?;
        let ty = self
            .mem
            .field(at, self.o.tensor_type)
            .ok_or_else(unreadable)?;
        // No dims: a scalar, one element (`TfLiteEvalTensorByteLength`).
        let dims = match dims_at {
            0 => Vec::new(),
            a => self.int_array(a, &format!("tensor {index}'s dims"))?,
        };
        if dims.len() > MAX_DIMS as usize {
            return Err(format!("tensor {index} has {} dims", dims.len()));
        }
        Ok(EvalTensor {
            data,
            dims,
            elem: self
                .element_bytes
                .iter()
                .find(|(v, _)| *v as u64 == ty)
                .map(|(_, b)| *b),
            ty,
        })
    }

    /// The role of input or output `k` whose data is at `data`.
    fn role(&self, input: bool, k: usize, kind: Option<OpKind>, data: u64) -> Role {
        let arena = self.arena;
        let in_arena = arena.is_some_and(|a| (a.start..a.end()).contains(&data));
        let persistent = arena.is_some_and(|a| (a.tail_start()..a.end()).contains(&data));
        if persistent {
            // A variable tensor: state that outlives the operator.
            return Role::Scratch;
        }
        if !input {
            return if k == 0 { Role::Output } else { Role::Scratch };
        }
        if in_arena {
            return Role::Input;
        }
        let bias = match kind {
            Some(OpKind::Conv2d | OpKind::DepthwiseConv2d | OpKind::FullyConnected) => k == 2,
            Some(OpKind::TransposeConv) => k == 3,
            _ => false,
        };
        if bias {
            Role::Bias
        } else {
            Role::Weights
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::structs::tests::{offsets, Words};
    use super::*;

    const INT8: i64 = 9;
    const INT32: i64 = 2;
    const TENSORS: u64 = 0x8000;
    const ARENA: TflmArena = TflmArena {
        start: 0x2000_0000,
        bytes: 0x1_0000,
        head_bytes: 0x8000,
        tail_bytes: 0x1000,
    };

    /// Eval tensor `i`: data, dims (at `dims_at`) and type.
    fn tensor(m: &mut Words, i: u64, data: u32, dims_at: u32, dims: &[u32], ty: i64) {
        m.put(TENSORS + 12 * i, &[data, dims_at, ty as u32]);
        if dims_at != 0 {
            m.put(dims_at as u64, &[dims.len() as u32]);
            m.put(dims_at as u64 + 4, dims);
        }
    }

    fn node(m: &mut Words, at: u64, inputs: &[i32], outputs: &[i32]) {
        let (ins, outs) = (at + 0x100, at + 0x200);
        m.put(at, &[ins as u32, outs as u32]);
        for (list, array) in [(inputs, ins), (outputs, outs)] {
            m.put(array, &[list.len() as u32]);
            let words: Vec<u32> = list.iter().map(|&i| i as u32).collect();
            m.put(array + 4, &words);
        }
    }

    fn tensors<'a>(m: &'a Words, o: &'a Offsets) -> Tensors<'a> {
        Tensors {
            mem: m,
            o,
            element_bytes: &[(INT8, 1), (INT32, 4)],
            tensors: TENSORS,
            arena: Some(ARENA),
        }
    }

    #[test]
    fn a_convolutions_tensors_get_the_runners_roles() {
        let mut m = Words::default();
        // input in the head, filter and bias in the model, output in the head
        tensor(&mut m, 0, 0x2000_0100, 0x9000, &[1, 8, 8, 2], INT8);
        tensor(&mut m, 1, 0x0800_0000, 0x9100, &[4, 3, 3, 2], INT8);
        tensor(&mut m, 2, 0x0800_1000, 0x9200, &[4], INT32);
        tensor(&mut m, 3, 0x2000_0200, 0x9300, &[1, 8, 8, 4], INT8);
        node(&mut m, 0xA000, &[0, 1, 2], &[3]);
        let o = offsets();
        let (buffers, shapes, notes) = tensors(&m, &o)
            .buffers(0xA000, Some(OpKind::Conv2d))
            .unwrap();
        let got: Vec<(Role, &str, u64)> = buffers
            .iter()
            .map(|b| (b.role, b.name.as_str(), b.size))
            .collect();
        assert_eq!(
            got,
            [
                (Role::Input, "tensor0", 128),
                (Role::Weights, "tensor1", 72),
                (Role::Bias, "tensor2", 16),
                (Role::Output, "tensor3", 256),
            ]
        );
        assert_eq!(shapes, "1x8x8x2, 4x3x3x2, 4 -> 1x8x8x4");
        assert!(notes.is_empty());
    }

    #[test]
    fn variables_repeats_optional_inputs_and_unknown_types() {
        let mut m = Words::default();
        // a variable in the persistent tail, read twice; an optional input;
        // a scalar of a type TFLM gives no size; a second output
        tensor(&mut m, 0, 0x2000_F800, 0x9000, &[2, 4], INT32);
        tensor(&mut m, 1, 0x2000_0100, 0, &[], 99);
        tensor(&mut m, 2, 0x2000_0200, 0x9100, &[3], INT8);
        tensor(&mut m, 3, 0x2000_0300, 0, &[], INT8);
        // dims no guest could hold
        tensor(&mut m, 4, 0x2000_0400, 0x9200, &[65536, 65536], INT8);
        node(&mut m, 0xA000, &[0, -1, 0, 1, 4], &[2, 3]);
        let o = offsets();
        let (buffers, shapes, notes) = tensors(&m, &o).buffers(0xA000, None).unwrap();
        let got: Vec<(Role, u64)> = buffers.iter().map(|b| (b.role, b.size)).collect();
        assert_eq!(
            got,
            [(Role::Scratch, 32), (Role::Output, 3), (Role::Scratch, 1)]
        );
        assert_eq!(shapes, "2x4, scalar, 65536x65536 -> 3, scalar");
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].contains("tensor1") && notes[0].contains("type 99"));
        assert!(notes[1].contains("tensor4") && notes[1].contains("more than a guest's memory"));
    }

    #[test]
    fn a_node_that_is_no_node_is_an_error() {
        let mut m = Words::default();
        m.put(0xA000, &[0xB000, 0]);
        m.put(0xB000, &[5000]);
        let o = offsets();
        let e = tensors(&m, &o).buffers(0xA000, None).unwrap_err();
        assert!(e.contains("not a TfLiteIntArray"), "{e}");
        assert!(tensors(&Words::default(), &o)
            .buffers(0xA000, None)
            .is_err());
    }

    #[test]
    fn operators_are_named_as_tflm_names_them() {
        let mut m = Words::default();
        let o = offsets();
        m.put(0xC000 + 24, &[0xD000]);
        m.put(
            0xD000,
            &[
                u32::from_le_bytes(*b"MY_O"),
                u32::from_le_bytes(*b"P\0\0\0"),
            ],
        );
        assert_eq!(op_name(&m, &o, 0xC000, 3, None), "CONV_2D");
        assert_eq!(op_name(&m, &o, 0xC000, 32, None), "MY_OP");
        assert_eq!(op_name(&m, &o, 0xC000, 9999, None), "BUILTIN_9999");
        // The program's own table of TFLite's names: CAST is builtin 53.
        m.put(0xE000 + 53 * 4, &[0xE400]);
        m.put(0xE400, &[u32::from_le_bytes(*b"CAST"), 0]);
        let table = Some(NameTable::new(0xE000, 54 * 4));
        assert_eq!(op_name(&m, &o, 0xC000, 53, table), "CAST");
        // Past its end, or an entry without a name: memtrace's own names.
        assert_eq!(op_name(&m, &o, 0xC000, 54, table), "BUILTIN_54");
        assert_eq!(op_name(&m, &o, 0xC000, 3, table), "CONV_2D");
    }
}
