//! The model program of the guest executor (`harness-c/executor/`): a whole
//! model — operators with their parameters and host-computed quantisation,
//! constant tensors, and the arena offset of every activation tensor — in the
//! binary format the executor reads from guest memory.
//!
//! The host writes the encoded program at the guest symbol `memtrace_arena`
//! (the start of the NOLOAD arena) before the first instruction; the
//! activation arena follows the program at [`EncodedProgram::arena_offset`].
//! The format is specified in `docs/protocol.md` (section 13) and mirrored by
//! `harness-c/include/memtrace_program.h`. This module knows nothing of
//! planners or models: it takes plain offsets, shapes and parameters.

use crate::dtype::Dtype;
use crate::op::OpKind;

c_constants! {
    /// The magic of `memtrace_program.h` ("PRG1", little-endian).
    PROGRAM_MAGIC_TABLE: u32 {
        MEMTRACE_PROGRAM_MAGIC = 0x3147_5250,
    }
}

/// "PRG1", little-endian.
pub const PROGRAM_MAGIC: u32 = MEMTRACE_PROGRAM_MAGIC;

c_constants! {
    /// Word indices of the header, tensor and operator records
    /// (`enum prg_header`, `enum prg_tensor`, `enum prg_op`).
    PROGRAM_LAYOUT: usize {
        PRG_MAGIC = 0,
        PRG_SIZE = 1,
        PRG_N_TENSORS = 2,
        PRG_TENSORS = 3,
        PRG_N_OPS = 4,
        PRG_OPS = 5,
        PRG_N_INPUTS = 6,
        PRG_INPUTS = 7,
        PRG_N_OUTPUTS = 8,
        PRG_OUTPUTS = 9,
        PRG_ARENA_OFFSET = 10,
        PRG_ARENA_BYTES = 11,
        PRG_FLAGS = 12,
        PRG_STORAGE_BYTES = 13,
        PRG_HEADER_WORDS = 16,
        TEN_DTYPE = 0,
        TEN_BYTES = 1,
        TEN_NDIMS = 2,
        TEN_DIMS = 3,
        TEN_ZERO_POINT = 7,
        TEN_LOCATION = 8,
        TEN_OFFSET = 9,
        TEN_NAME = 10,
        TEN_WORDS = 12,
        OPW_KIND = 0,
        OPW_DTYPE = 1,
        OPW_NAME = 2,
        OPW_PARAMS = 3,
        OPW_INPUT = 4,
        OPW_INPUT2 = 5,
        OPW_WEIGHTS = 6,
        OPW_BIAS = 7,
        OPW_OUTPUT = 8,
        OPW_STRIDE_H = 9,
        OPW_STRIDE_W = 10,
        OPW_DILATION_H = 11,
        OPW_DILATION_W = 12,
        OPW_PAD_H = 13,
        OPW_PAD_W = 14,
        OPW_DEPTH_MULTIPLIER = 15,
        OPW_FILTER_H = 16,
        OPW_FILTER_W = 17,
        OPW_ACT_MIN = 18,
        OPW_ACT_MAX = 19,
        OPW_FLOAT_MIN = 20,
        OPW_FLOAT_MAX = 21,
        OPW_INPUT_OFFSET = 22,
        OPW_WEIGHTS_OFFSET = 23,
        OPW_OUTPUT_OFFSET = 24,
        OPW_OUTPUT_MULTIPLIER = 25,
        OPW_OUTPUT_SHIFT = 26,
        OPW_CHANNEL_MULTIPLIERS = 27,
        OPW_CHANNEL_SHIFTS = 28,
        OPW_SOFTMAX_MULTIPLIER = 29,
        OPW_SOFTMAX_LEFT_SHIFT = 30,
        OPW_DIFF_MIN = 31,
        OPW_BETA = 32,
        OPW_INPUT2_OFFSET = 33,
        OPW_INPUT1_MULTIPLIER = 34,
        OPW_INPUT1_SHIFT = 35,
        OPW_INPUT2_MULTIPLIER = 36,
        OPW_INPUT2_SHIFT = 37,
        OPW_LEFT_SHIFT = 38,
        OPW_CHANNELS = 39,
        OPW_QUANT_SCALE = 40,
        OPW_QUANT_ZERO_POINT = 41,
        OPW_SCRATCH = 42,
        OPW_SCRATCH_BYTES = 43,
        OPW_AXIS = 44,
        OPW_INPUTS = 45,
        OPW_ACCUMULATOR_BYTES = 46,
        OPW_COPY_FROM = 47,
        OPW_WORDS = 48,
    }
}

c_constants! {
    /// Limits of the program format (`#define`s of the header).
    PROGRAM_LIMITS: usize {
        MEMTRACE_PROGRAM_MAX_INPUTS = 10,
    }
}

c_constants! {
    /// Bits of the header's `PRG_FLAGS` word (`enum prg_flag`).
    PROGRAM_FLAGS: u32 {
        PRG_FLAG_QUERY_SCRATCH = 1,
        PRG_FLAG_SCRATCH_WORDS = 2,
    }
}

c_constants! {
    /// Location codes (`enum prg_location`); the element-type and operator
    /// codes are the vocabulary's ([`crate::dtype::PROGRAM_DTYPE_CODES`],
    /// [`crate::op::PROGRAM_KIND_CODES`]).
    PROGRAM_CODES: i32 {
        TEN_LOC_ARENA = 0,
        TEN_LOC_CONSTANT = 1,
        TEN_LOC_STORAGE = 2,
    }
}

/// How the executor's run ended: its exit codes (`enum` in
/// `harness-c/executor/executor.h`, docs/protocol.md §9).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecutorExit {
    /// Every operator ran (`kOk`).
    Ok = 0,
    /// No or invalid program at `memtrace_arena` (`kNoProgram`).
    NoProgram = 3,
    /// An operator or element type the executor has no kernel for
    /// (`kUnsupported`).
    Unsupported = 4,
    /// An operator needs scratch memory the program does not give it
    /// (`kNoScratch`).
    NoScratch = 6,
    /// The kernel library returned an error status (`kLibraryError`).
    LibraryError = 7,
}

impl ExecutorExit {
    /// Every exit code, in code order.
    pub const ALL: [ExecutorExit; 5] = [
        ExecutorExit::Ok,
        ExecutorExit::NoProgram,
        ExecutorExit::Unsupported,
        ExecutorExit::NoScratch,
        ExecutorExit::LibraryError,
    ];

    /// The executor's exit code.
    pub fn code(self) -> i32 {
        self as i32
    }

    /// The exit of `code`, if the executor has it.
    pub fn from_code(code: i32) -> Option<ExecutorExit> {
        ExecutorExit::ALL.into_iter().find(|e| e.code() == code)
    }

    /// The name of the code in `executor.h`.
    pub fn c_name(self) -> &'static str {
        match self {
            ExecutorExit::Ok => "kOk",
            ExecutorExit::NoProgram => "kNoProgram",
            ExecutorExit::Unsupported => "kUnsupported",
            ExecutorExit::NoScratch => "kNoScratch",
            ExecutorExit::LibraryError => "kLibraryError",
        }
    }

    /// What the code says, for error messages.
    pub fn meaning(self) -> &'static str {
        match self {
            ExecutorExit::Ok => "success",
            ExecutorExit::NoProgram => "no program",
            ExecutorExit::Unsupported => "unsupported operator",
            ExecutorExit::NoScratch => "scratch missing",
            ExecutorExit::LibraryError => "the kernel library reported an error",
        }
    }

    /// The failure codes and their meanings, as a hint after "exited with
    /// code N": `3: no program, 4: unsupported operator, …; docs/protocol.md §9`.
    pub fn hint() -> String {
        let codes: Vec<String> = ExecutorExit::ALL[1..]
            .iter()
            .map(|e| format!("{}: {}", e.code(), e.meaning()))
            .collect();
        format!("{}; docs/protocol.md §9", codes.join(", "))
    }
}

/// Words in the program header.
pub const HEADER_WORDS: usize = PRG_HEADER_WORDS;
/// Words per tensor record.
pub const TENSOR_WORDS: usize = TEN_WORDS;
/// Words per operator record.
pub const OP_WORDS: usize = OPW_WORDS;
/// The activation arena starts at a multiple of this from the program start.
pub const ARENA_ALIGN: u64 = 4096;

/// Where a tensor's bytes are.
#[derive(Clone, Debug, PartialEq)]
pub enum TensorData {
    /// An activation at this byte offset of the activation arena.
    Arena {
        /// Byte offset from the start of the activation arena.
        offset: u64,
    },
    /// A constant (weights, bias) stored in the program.
    Constant(Vec<u8>),
    /// A spilled tensor at this byte offset of the storage region.
    Storage {
        /// Byte offset from the start of the storage region.
        offset: u64,
    },
}

/// One tensor record of the program.
#[derive(Clone, Debug, PartialEq)]
pub struct ProgramTensor {
    /// Tensor name (reported as the buffer name in layer windows).
    pub name: String,
    /// Element type; its [`Dtype::program_code`] is what the record holds.
    pub dtype: Dtype,
    /// Up to 4 dimensions, outermost first.
    pub dims: Vec<u32>,
    /// Quantisation zero point.
    pub zero_point: i32,
    /// Arena offset or constant bytes of the tensor.
    pub data: TensorData,
}

impl ProgramTensor {
    /// Size in bytes: the product of the dimensions times the element size.
    pub fn bytes(&self) -> u64 {
        self.dims.iter().map(|&d| d as u64).product::<u64>() * self.dtype.size()
    }
}

/// Operator parameters, with quantisation already computed by the host
/// (TFLite's conventions: `input_offset` = −input zero point, shifts
/// positive = left).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OpParams {
    /// Stride along the height.
    pub stride_h: i32,
    /// Stride along the width.
    pub stride_w: i32,
    /// Dilation along the height.
    pub dilation_h: i32,
    /// Dilation along the width.
    pub dilation_w: i32,
    /// TFLite `PaddingValues.height`: padding rows before the first input row.
    pub pad_h: i32,
    /// TFLite `PaddingValues.width`: padding columns before the first input column.
    pub pad_w: i32,
    /// Output channels per input channel of a depthwise convolution.
    pub depth_multiplier: i32,
    /// Pool window height.
    pub filter_h: i32,
    /// Pool window width.
    pub filter_w: i32,
    /// Lower clamp of quantised outputs (fused activation).
    pub act_min: i32,
    /// Upper clamp of quantised outputs (fused activation).
    pub act_max: i32,
    /// Lower clamp of float outputs (fused activation).
    pub float_min: f32,
    /// Upper clamp of float outputs (fused activation).
    pub float_max: f32,
    /// TFLite `input_offset` (the negated input zero point).
    pub input_offset: i32,
    /// TFLite `weights_offset` (the negated weights zero point).
    pub weights_offset: i32,
    /// TFLite `output_offset` (the output zero point).
    pub output_offset: i32,
    /// Fixed-point multiplier of the output rescaling.
    pub output_multiplier: i32,
    /// Shift of the output rescaling (positive = left).
    pub output_shift: i32,
    /// Add: the negated zero point of the second input.
    pub input2_offset: i32,
    /// Add: fixed-point multiplier of the first input.
    pub input1_multiplier: i32,
    /// Add: shift of the first input (positive = left).
    pub input1_shift: i32,
    /// Add: fixed-point multiplier of the second input.
    pub input2_multiplier: i32,
    /// Add: shift of the second input (positive = left).
    pub input2_shift: i32,
    /// Add: left shift applied to both inputs before rescaling.
    pub left_shift: i32,
    /// Softmax: fixed-point input multiplier (TFLite `PreprocessSoftmaxScaling`).
    pub softmax_multiplier: i32,
    /// Softmax: input left shift (TFLite `PreprocessSoftmaxScaling`).
    pub softmax_left_shift: i32,
    /// Softmax: TFLite `diff_min`, the lowest difference to the row maximum that is not
    /// treated as zero probability.
    pub diff_min: i32,
    /// Softmax: the beta (inverse temperature) of float softmax.
    pub beta: f32,
    /// QUANTIZE (output's) / DEQUANTIZE (input's) scale and zero point.
    pub quant_scale: f32,
    /// QUANTIZE (output's) / DEQUANTIZE (input's) zero point.
    pub quant_zero_point: i32,
    /// Concatenation: the axis (non-negative, in the tensors' own rank).
    pub axis: i32,
    /// Bytes per element of an accumulator scratch buffer (int8 transpose
    /// conv): 0 for the kernel's own (int32), 2 for TinySeg's int16 variant.
    pub accumulator_bytes: i32,
    /// SPILL: byte offset in the input where the copied range starts.
    pub copy_from: i32,
}

/// One operator record of the program.
#[derive(Clone, Debug, PartialEq)]
pub struct ProgramOp {
    /// The operator; its [`OpKind::program_code`] says which kernel runs.
    pub kind: OpKind,
    /// Element type of the kernel (its input's).
    pub dtype: Dtype,
    /// Layer name (the model's operator name).
    pub name: String,
    /// `key=value,...` text of the layer window (may be empty).
    pub params_text: String,
    /// Activation inputs (1; 2 for add; 2 to [`MEMTRACE_PROGRAM_MAX_INPUTS`]
    /// for concatenation), tensor indices.
    pub inputs: Vec<u32>,
    /// Weights tensor index, if the operator has one.
    pub weights: Option<u32>,
    /// Bias tensor index, if the operator has one.
    pub bias: Option<u32>,
    /// Output tensor index.
    pub output: u32,
    /// Kernel parameters and quantisation.
    pub params: OpParams,
    /// Per output channel (multiplier, shift) of int8 conv / depthwise.
    pub per_channel: Vec<(i32, i32)>,
    /// The arena tensor the kernel library uses as scratch memory, if any.
    pub scratch: Option<u32>,
}

/// A whole model for the executor.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Program {
    /// All tensors; operators and graph inputs/outputs refer to them by index.
    pub tensors: Vec<ProgramTensor>,
    /// In execution order.
    pub ops: Vec<ProgramOp>,
    /// Graph inputs and the bytes the executor copies into them first (in a
    /// layer window `load_input`, which declares the tensor as its output).
    pub inputs: Vec<(u32, Vec<u8>)>,
    /// Graph outputs (tensor indices), read back after `EXIT`.
    pub outputs: Vec<u32>,
    /// Size of the activation arena (≥ every offset + size).
    pub arena_bytes: u64,
    /// Bytes of the storage region the program uses (≥ every storage
    /// tensor's offset + size).
    pub storage_bytes: u64,
    /// Query mode: the executor runs nothing and writes each operator's
    /// scratch need into its `OPW_SCRATCH_BYTES` word instead.
    pub query_scratch: bool,
}

/// The encoded program and where its activation arena begins.
#[derive(Clone, Debug)]
pub struct EncodedProgram {
    /// The encoded program: 32-bit little-endian words, then names and constant data.
    pub bytes: Vec<u8>,
    /// Byte offset of activation-arena offset 0 from the program start.
    pub arena_offset: u64,
    /// Byte offset of the first operator record from the program start.
    pub ops_offset: u64,
}

impl EncodedProgram {
    /// Byte offset, from the program start, of operator `op`'s
    /// `OPW_SCRATCH_BYTES` word (filled by the executor in query mode).
    pub fn scratch_bytes_word(&self, op: usize) -> u64 {
        self.ops_offset + ((op * OPW_WORDS + OPW_SCRATCH_BYTES) * 4) as u64
    }
}

/// A program the format cannot express.
#[derive(Debug, thiserror::Error)]
#[error("program: {0}")]
pub struct ProgramError(pub String);

struct Blob {
    bytes: Vec<u8>,
}

impl Blob {
    fn align(&mut self, a: usize) {
        while !self.bytes.len().is_multiple_of(a) {
            self.bytes.push(0);
        }
    }
    fn string(&mut self, s: &str) -> u32 {
        let at = self.bytes.len() as u32;
        let s: String = s.chars().filter(|&c| c != '\0').take(200).collect();
        self.bytes.extend_from_slice(s.as_bytes());
        self.bytes.push(0);
        at
    }
    fn data(&mut self, d: &[u8]) -> u32 {
        self.align(16);
        let at = self.bytes.len() as u32;
        self.bytes.extend_from_slice(d);
        at
    }
}

fn opt(v: Option<u32>) -> i32 {
    v.map(|x| x as i32).unwrap_or(-1)
}

/// Byte offsets, from the program start, of the record tables.
struct Layout {
    tensors: usize,
    ops: usize,
    inputs: usize,
    outputs: usize,
    blob: usize,
}

impl Program {
    /// Encodes the program (checks indices, sizes and dimensions).
    pub fn encode(&self) -> Result<EncodedProgram, ProgramError> {
        self.check_tensors()?;
        self.check_ops()?;
        let layout = self.layout();
        // Blob offsets are relative to the program start.
        let mut blob = Blob {
            bytes: vec![0u8; layout.blob],
        };
        let tensor_words: Vec<i32> = self
            .tensors
            .iter()
            .flat_map(|t| tensor_record(t, &mut blob))
            .collect();
        let mut op_words = Vec::new();
        for op in &self.ops {
            op_words.extend(op_record(op, &mut blob)?);
        }
        let input_words = self.input_records(&mut blob)?;
        blob.align(ARENA_ALIGN as usize);
        let arena_offset = blob.bytes.len() as u64;
        let mut words: Vec<i32> = Vec::new();
        words.extend_from_slice(&self.header(&layout, arena_offset));
        words.extend(tensor_words);
        words.extend(op_words);
        words.extend(input_words);
        words.extend(self.outputs.iter().map(|&o| o as i32));
        let mut bytes = blob.bytes;
        for (i, w) in words.iter().enumerate() {
            bytes[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
        }
        if bytes.len() > i32::MAX as usize {
            return Err(ProgramError("program larger than 2 GiB".into()));
        }
        Ok(EncodedProgram {
            bytes,
            arena_offset,
            ops_offset: layout.ops as u64,
        })
    }

    /// Checks the storage size and every tensor's type, rank and place.
    fn check_tensors(&self) -> Result<(), ProgramError> {
        let err = |m: String| Err(ProgramError(m));
        if self.storage_bytes > i32::MAX as u64 {
            return err(format!(
                "a storage region of {} bytes does not fit the program's 32-bit words",
                self.storage_bytes
            ));
        }
        for (i, t) in self.tensors.iter().enumerate() {
            if t.dtype.program_code().is_none() {
                return err(format!(
                    "tensor {i} `{}` has type {}, which the executor does not have",
                    t.name, t.dtype
                ));
            }
            if t.dims.is_empty() || t.dims.len() > 4 {
                return err(format!(
                    "tensor {i} `{}` has {} dimensions (1..=4 supported)",
                    t.name,
                    t.dims.len()
                ));
            }
            match &t.data {
                TensorData::Arena { offset } if offset + t.bytes() > self.arena_bytes => {
                    return err(format!(
                        "tensor {i} `{}` at arena offset {offset} + {} bytes exceeds the arena ({} bytes)",
                        t.name,
                        t.bytes(),
                        self.arena_bytes
                    ))
                }
                TensorData::Storage { offset } if offset + t.bytes() > self.storage_bytes => {
                    return err(format!(
                        "tensor {i} `{}` at storage offset {offset} + {} bytes exceeds the storage ({} bytes)",
                        t.name,
                        t.bytes(),
                        self.storage_bytes
                    ))
                }
                TensorData::Constant(d) if d.len() as u64 != t.bytes() => {
                    return err(format!(
                        "constant tensor {i} `{}` has {} bytes of data, its shape needs {}",
                        t.name,
                        d.len(),
                        t.bytes()
                    ))
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Checks that every operator names existing tensors, has a type of the
    /// executor and as many inputs as the format holds.
    fn check_ops(&self) -> Result<(), ProgramError> {
        let err = |m: String| Err(ProgramError(m));
        let nt = self.tensors.len() as u32;
        for op in &self.ops {
            let all = op
                .inputs
                .iter()
                .chain(op.weights.iter())
                .chain(op.bias.iter())
                .chain(op.scratch.iter())
                .chain(std::iter::once(&op.output));
            if let Some(bad) = all.clone().find(|&&t| t >= nt) {
                return err(format!("operator `{}` uses tensor {bad} of {nt}", op.name));
            }
            if op.dtype.program_code().is_none() {
                return err(format!(
                    "operator `{}` has type {}, which the executor does not have",
                    op.name, op.dtype
                ));
            }
            if op.inputs.is_empty() || op.inputs.len() > MEMTRACE_PROGRAM_MAX_INPUTS {
                return err(format!(
                    "operator `{}` has {} inputs",
                    op.name,
                    op.inputs.len()
                ));
            }
        }
        Ok(())
    }

    /// Where the header is followed by the tensor, operator, input and
    /// output records, and where the blob of names and data starts.
    fn layout(&self) -> Layout {
        let tensors = HEADER_WORDS * 4;
        let ops = tensors + self.tensors.len() * TENSOR_WORDS * 4;
        let inputs = ops + self.ops.len() * OP_WORDS * 4;
        let outputs = inputs + self.inputs.len() * 12;
        let blob = outputs + self.outputs.len() * 4;
        Layout {
            tensors,
            ops,
            inputs,
            outputs,
            blob,
        }
    }

    /// The `[tensor, data offset, bytes]` records of the graph inputs, their
    /// data in the blob.
    fn input_records(&self, blob: &mut Blob) -> Result<Vec<i32>, ProgramError> {
        let nt = self.tensors.len() as u32;
        let mut words = Vec::new();
        for (t, data) in &self.inputs {
            if *t >= nt {
                return Err(ProgramError(format!("graph input {t} of {nt} tensors")));
            }
            let expect = self.tensors[*t as usize].bytes();
            if data.len() as u64 != expect {
                return Err(ProgramError(format!(
                    "input data for `{}` has {} bytes, the tensor {expect}",
                    self.tensors[*t as usize].name,
                    data.len()
                )));
            }
            let off = blob.data(data);
            words.extend_from_slice(&[*t as i32, off as i32, data.len() as i32]);
        }
        Ok(words)
    }

    /// The header words.
    fn header(&self, layout: &Layout, arena_offset: u64) -> [i32; PRG_HEADER_WORDS] {
        let mut header = [0i32; PRG_HEADER_WORDS];
        header[PRG_MAGIC] = PROGRAM_MAGIC as i32;
        header[PRG_SIZE] = arena_offset as i32;
        header[PRG_N_TENSORS] = self.tensors.len() as i32;
        header[PRG_TENSORS] = layout.tensors as i32;
        header[PRG_N_OPS] = self.ops.len() as i32;
        header[PRG_OPS] = layout.ops as i32;
        header[PRG_N_INPUTS] = self.inputs.len() as i32;
        header[PRG_INPUTS] = layout.inputs as i32;
        header[PRG_N_OUTPUTS] = self.outputs.len() as i32;
        header[PRG_OUTPUTS] = layout.outputs as i32;
        header[PRG_ARENA_OFFSET] = arena_offset as i32;
        header[PRG_ARENA_BYTES] = self.arena_bytes as i32;
        header[PRG_STORAGE_BYTES] = self.storage_bytes as i32;
        // OPW_SCRATCH is always filled, so the executor may read it.
        let query = if self.query_scratch {
            PRG_FLAG_QUERY_SCRATCH
        } else {
            0
        };
        header[PRG_FLAGS] = (PRG_FLAG_SCRATCH_WORDS | query) as i32;
        header
    }
}

/// The record of one tensor; its name and constant data go to the blob.
fn tensor_record(t: &ProgramTensor, blob: &mut Blob) -> [i32; TEN_WORDS] {
    let name = blob.string(&t.name);
    let (loc, off) = match &t.data {
        TensorData::Arena { offset } => (TEN_LOC_ARENA, *offset as i32),
        TensorData::Constant(d) => (TEN_LOC_CONSTANT, blob.data(d) as i32),
        TensorData::Storage { offset } => (TEN_LOC_STORAGE, *offset as i32),
    };
    let mut dims = [1i32; 4];
    for (k, &d) in t.dims.iter().enumerate() {
        dims[k] = d as i32;
    }
    let mut r = [0i32; TEN_WORDS];
    // check_tensors admits only the executor's types.
    r[TEN_DTYPE] = t.dtype.program_code().unwrap_or(0);
    r[TEN_BYTES] = t.bytes() as i32;
    r[TEN_NDIMS] = t.dims.len() as i32;
    r[TEN_DIMS..TEN_DIMS + 4].copy_from_slice(&dims);
    r[TEN_ZERO_POINT] = t.zero_point;
    r[TEN_LOCATION] = loc;
    r[TEN_OFFSET] = off;
    r[TEN_NAME] = name as i32;
    r
}

/// The per-channel multipliers and shifts of an operator in the blob, or
/// (−1, −1) when it has none.
fn per_channel_arrays(op: &ProgramOp, blob: &mut Blob) -> (i32, i32) {
    if op.per_channel.is_empty() {
        return (-1, -1);
    }
    let m: Vec<u8> = op
        .per_channel
        .iter()
        .flat_map(|p| p.0.to_le_bytes())
        .collect();
    let s: Vec<u8> = op
        .per_channel
        .iter()
        .flat_map(|p| p.1.to_le_bytes())
        .collect();
    (blob.data(&m) as i32, blob.data(&s) as i32)
}

/// More than two inputs: all of them in the blob, as `[count, index...]`;
/// −1 otherwise.
fn input_list(op: &ProgramOp, blob: &mut Blob) -> i32 {
    if op.inputs.len() <= 2 {
        return -1;
    }
    let list: Vec<u8> = std::iter::once(op.inputs.len() as i32)
        .chain(op.inputs.iter().map(|&t| t as i32))
        .flat_map(i32::to_le_bytes)
        .collect();
    blob.data(&list) as i32
}

/// The record of one operator; its strings and arrays go to the blob.
fn op_record(op: &ProgramOp, blob: &mut Blob) -> Result<[i32; OPW_WORDS], ProgramError> {
    let kind = op.kind.program_code().ok_or_else(|| {
        ProgramError(format!(
            "operator `{}` ({}) has no executor kernel",
            op.name,
            op.kind.tflite_name()
        ))
    })?;
    let name = blob.string(&op.name);
    let text = blob.string(&op.params_text);
    let (mult_off, shift_off) = per_channel_arrays(op, blob);
    let inputs = input_list(op, blob);
    let mut w = [0i32; OPW_WORDS];
    w[OPW_KIND] = kind;
    // check_ops admits only the executor's types.
    w[OPW_DTYPE] = op.dtype.program_code().unwrap_or(0);
    w[OPW_NAME] = name as i32;
    w[OPW_PARAMS] = text as i32;
    w[OPW_INPUT] = op.inputs[0] as i32;
    w[OPW_INPUT2] = op.inputs.get(1).map(|&x| x as i32).unwrap_or(-1);
    w[OPW_WEIGHTS] = opt(op.weights);
    w[OPW_BIAS] = opt(op.bias);
    w[OPW_OUTPUT] = op.output as i32;
    w[OPW_CHANNEL_MULTIPLIERS] = mult_off;
    w[OPW_CHANNEL_SHIFTS] = shift_off;
    w[OPW_CHANNELS] = op.per_channel.len() as i32;
    w[OPW_SCRATCH] = opt(op.scratch);
    w[OPW_INPUTS] = inputs;
    param_words(&op.params, &mut w);
    Ok(w)
}

/// The kernel parameters of an operator record.
fn param_words(p: &OpParams, w: &mut [i32; OPW_WORDS]) {
    w[OPW_STRIDE_H] = p.stride_h;
    w[OPW_STRIDE_W] = p.stride_w;
    w[OPW_DILATION_H] = p.dilation_h;
    w[OPW_DILATION_W] = p.dilation_w;
    w[OPW_PAD_H] = p.pad_h;
    w[OPW_PAD_W] = p.pad_w;
    w[OPW_DEPTH_MULTIPLIER] = p.depth_multiplier;
    w[OPW_FILTER_H] = p.filter_h;
    w[OPW_FILTER_W] = p.filter_w;
    w[OPW_ACT_MIN] = p.act_min;
    w[OPW_ACT_MAX] = p.act_max;
    w[OPW_FLOAT_MIN] = p.float_min.to_bits() as i32;
    w[OPW_FLOAT_MAX] = p.float_max.to_bits() as i32;
    w[OPW_INPUT_OFFSET] = p.input_offset;
    w[OPW_WEIGHTS_OFFSET] = p.weights_offset;
    w[OPW_OUTPUT_OFFSET] = p.output_offset;
    w[OPW_OUTPUT_MULTIPLIER] = p.output_multiplier;
    w[OPW_OUTPUT_SHIFT] = p.output_shift;
    w[OPW_SOFTMAX_MULTIPLIER] = p.softmax_multiplier;
    w[OPW_SOFTMAX_LEFT_SHIFT] = p.softmax_left_shift;
    w[OPW_DIFF_MIN] = p.diff_min;
    w[OPW_BETA] = p.beta.to_bits() as i32;
    w[OPW_INPUT2_OFFSET] = p.input2_offset;
    w[OPW_INPUT1_MULTIPLIER] = p.input1_multiplier;
    w[OPW_INPUT1_SHIFT] = p.input1_shift;
    w[OPW_INPUT2_MULTIPLIER] = p.input2_multiplier;
    w[OPW_INPUT2_SHIFT] = p.input2_shift;
    w[OPW_LEFT_SHIFT] = p.left_shift;
    w[OPW_QUANT_SCALE] = p.quant_scale.to_bits() as i32;
    w[OPW_QUANT_ZERO_POINT] = p.quant_zero_point;
    w[OPW_AXIS] = p.axis;
    w[OPW_ACCUMULATOR_BYTES] = p.accumulator_bytes;
    w[OPW_COPY_FROM] = p.copy_from;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::PK_RESHAPE;

    #[test]
    fn header_and_records_land_where_the_guest_reads_them() {
        let p = Program {
            tensors: vec![
                ProgramTensor {
                    name: "x".into(),
                    dtype: Dtype::Int8,
                    dims: vec![1, 4],
                    zero_point: 0,
                    data: TensorData::Arena { offset: 16 },
                },
                ProgramTensor {
                    name: "y".into(),
                    dtype: Dtype::Int8,
                    dims: vec![1, 4],
                    zero_point: -128,
                    data: TensorData::Arena { offset: 0 },
                },
            ],
            ops: vec![ProgramOp {
                kind: OpKind::Reshape,
                dtype: Dtype::Int8,
                name: "r".into(),
                params_text: String::new(),
                inputs: vec![0],
                weights: None,
                bias: None,
                output: 1,
                params: OpParams::default(),
                per_channel: vec![],
                scratch: Some(0),
            }],
            inputs: vec![(0, vec![1, 2, 3, 4])],
            outputs: vec![1],
            arena_bytes: 32,
            storage_bytes: 0,
            query_scratch: true,
        };
        let e = p.encode().unwrap();
        let word = |i: usize| i32::from_le_bytes(e.bytes[i * 4..i * 4 + 4].try_into().unwrap());
        assert_eq!(word(0) as u32, PROGRAM_MAGIC);
        assert_eq!(e.arena_offset % ARENA_ALIGN, 0);
        assert_eq!(e.bytes.len() as u64, e.arena_offset);
        let t1 = HEADER_WORDS + TENSOR_WORDS;
        assert_eq!(word(t1 + 7), -128);
        assert_eq!(word(HEADER_WORDS + 2 * TENSOR_WORDS), PK_RESHAPE);
        let op0 = HEADER_WORDS + 2 * TENSOR_WORDS;
        assert_eq!(word(op0 + OPW_SCRATCH), 0);
        assert_eq!(
            e.scratch_bytes_word(0),
            ((op0 + OPW_SCRATCH_BYTES) * 4) as u64
        );
        assert_eq!(
            word(PRG_FLAGS) as u32,
            PRG_FLAG_QUERY_SCRATCH | PRG_FLAG_SCRATCH_WORDS
        );
        // Bad: tensor beyond the arena.
        let mut bad = p.clone();
        bad.arena_bytes = 8;
        assert!(bad.encode().is_err());
        // Two inputs need no list.
        assert_eq!(word(op0 + OPW_INPUTS), -1);
        // Three inputs: all of them as [count, index...] at OPW_INPUTS.
        let mut three = p.clone();
        three.ops[0].kind = OpKind::Concatenation;
        three.ops[0].inputs = vec![1, 0, 1];
        three.ops[0].params.axis = 1;
        let e3 = three.encode().unwrap();
        let word3 = |i: usize| i32::from_le_bytes(e3.bytes[i * 4..i * 4 + 4].try_into().unwrap());
        let list = word3(op0 + OPW_INPUTS) as usize;
        assert_eq!(list % 4, 0);
        assert_eq!(
            [
                word3(list / 4),
                word3(list / 4 + 1),
                word3(list / 4 + 2),
                word3(list / 4 + 3)
            ],
            [3, 1, 0, 1]
        );
        assert_eq!((word3(op0 + OPW_INPUT), word3(op0 + OPW_INPUT2)), (1, 0));
        assert_eq!(word3(op0 + OPW_AXIS), 1);
        // More than the format allows.
        let mut many = three.clone();
        many.ops[0].inputs = vec![0; MEMTRACE_PROGRAM_MAX_INPUTS + 1];
        assert!(many.encode().unwrap_err().to_string().contains("11 inputs"));
    }

    #[test]
    fn exit_codes_round_trip_and_say_what_they_mean() {
        for e in ExecutorExit::ALL {
            assert_eq!(ExecutorExit::from_code(e.code()), Some(e));
        }
        assert_eq!(ExecutorExit::from_code(5), None);
        assert_eq!(
            ExecutorExit::hint(),
            "3: no program, 4: unsupported operator, 6: scratch missing, 7: the kernel \
             library reported an error; docs/protocol.md §9"
        );
    }
}
