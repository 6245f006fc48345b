//! The mailbox of the TFLM runner guests (`harness-c/include/memtrace_tflm.h`):
//! real TensorFlow Lite Micro in the emulator, with the model as data.
//!
//! The host writes the `.tflite` bytes at `memtrace_model`, the input bytes at
//! `memtrace_io` and [`TflmJob::bytes`] at `memtrace_tflm_job`; the runner
//! answers in the same mailbox ([`TflmResult`]) and in `memtrace_io` (the
//! outputs and the tensor table). This module only encodes and decodes; it
//! knows nothing of the emulator. `docs/protocol.md` ("The TFLM runner") is
//! the written specification.

use serde::{Deserialize, Serialize};

c_constants! {
    /// Magic and size of the mailbox.
    TFLM_HEADER: u32 {
        MEMTRACE_TFLM_MAGIC = 0x5446_4C31,
        MEMTRACE_TFLM_WORDS = 32,
    }
}

c_constants! {
    /// Word indices of the mailbox (`enum memtrace_tflm_word`).
    TFLM_LAYOUT: usize {
        TFLM_MAGIC = 0,
        TFLM_MODEL_BYTES = 1,
        TFLM_ARENA_BYTES = 2,
        TFLM_FLAGS = 3,
        TFLM_INPUT_BYTES = 4,
        TFLM_RED_ZONE_BYTES = 5,
        TFLM_DUMP_OP = 6,
        TFLM_STAGE = 8,
        TFLM_ARENA_USED = 9,
        TFLM_HEAD_BYTES = 10,
        TFLM_TAIL_BYTES = 11,
        TFLM_HEAD_OFFSET = 12,
        TFLM_N_INPUTS = 13,
        TFLM_N_OUTPUTS = 14,
        TFLM_N_TENSORS = 15,
        TFLM_N_SCRATCH = 16,
        TFLM_N_OPS = 17,
        TFLM_OUTPUT_OFFSET = 18,
        TFLM_OUTPUT_BYTES = 19,
        TFLM_TABLE_OFFSET = 20,
        TFLM_DIGEST_OFFSET = 21,
        TFLM_DUMP_BYTES = 22,
    }
}

c_constants! {
    /// Flags, stages, tensor locations and exit codes.
    TFLM_CODES: u32 {
        TFLM_FLAG_LAYERS = 1,
        TFLM_FLAG_NO_WEIGHTS = 2,
        TFLM_FLAG_DIGESTS = 4,
        TFLM_STAGE_STARTED = 1,
        TFLM_STAGE_MODEL = 2,
        TFLM_STAGE_ALLOCATED = 3,
        TFLM_STAGE_INVOKED = 4,
        TFLM_LOC_NONE = 0,
        TFLM_LOC_ARENA = 1,
        TFLM_LOC_MODEL = 2,
        TFLM_LOC_OTHER = 3,
        TFLM_EXIT_OK = 0,
        TFLM_EXIT_BAD_JOB = 2,
        TFLM_EXIT_BAD_MODEL = 3,
        TFLM_EXIT_ALLOCATE = 4,
        TFLM_EXIT_INVOKE = 5,
        TFLM_EXIT_IO = 6,
    }
}

c_constants! {
    /// The custom options of TinySeg's storage operators on the runner
    /// (`enum memtrace_tflm_storage_word`): word indices of the slot in
    /// `memtrace_storage`, the stored tensor and the operator's parameters.
    TFLM_STORAGE_LAYOUT: usize {
        TFLM_STORAGE_WORD_VERSION = 0,
        TFLM_STORAGE_WORD_OFFSET = 1,
        TFLM_STORAGE_WORD_BYTES = 2,
        TFLM_STORAGE_WORD_TYPE = 3,
        TFLM_STORAGE_WORD_RANK = 4,
        TFLM_STORAGE_WORD_DIMS = 5,
        TFLM_STORAGE_WORD_SCALE = 9,
        TFLM_STORAGE_WORD_ZERO_POINT = 10,
        TFLM_STORAGE_WORD_FROM = 11,
        TFLM_STORAGE_WORD_AXIS = 12,
        TFLM_STORAGE_WORD_PARTS = 13,
        TFLM_STORAGE_WORD_POSITION = 14,
        TFLM_STORAGE_WORD_PADDING = 15,
        TFLM_STORAGE_WORD_STRIDE_W = 16,
        TFLM_STORAGE_WORD_STRIDE_H = 17,
        TFLM_STORAGE_WORD_DILATION_W = 18,
        TFLM_STORAGE_WORD_DILATION_H = 19,
        TFLM_STORAGE_WORD_ACTIVATION = 20,
        TFLM_STORAGE_WORDS = 21,
    }
}

c_constants! {
    /// The version of that layout.
    TFLM_STORAGE_CODES: i32 {
        TFLM_STORAGE_VERSION = 1,
    }
}

/// Guest symbols of the runner.
pub mod symbols {
    /// The mailbox.
    pub const JOB: &str = "memtrace_tflm_job";
    /// Start of the model region.
    pub const MODEL: &str = "memtrace_model";
    /// End of the model region.
    pub const MODEL_END: &str = "memtrace_model_end";
    /// Start of the input/output region.
    pub const IO: &str = "memtrace_io";
    /// End of the input/output region.
    pub const IO_END: &str = "memtrace_io_end";
    /// The tensor arena: the same symbols as the kernel suite's.
    pub use crate::symbols::{ARENA, ARENA_END};

    /// Every symbol of the runner, for the check against the harness.
    pub const ALL: [&str; 7] = [JOB, MODEL, MODEL_END, IO, IO_END, ARENA, ARENA_END];
}

/// Layer name of the windows that copy the graph inputs into the arena.
pub const LOAD_INPUT: &str = "load_input";

/// Buffer id of an operator window's first output (output j is this + j;
/// input k is id k), and of a `load_input` window's input tensor
/// (docs/protocol.md, "Operator windows"; `kIdOutputs` of
/// `harness-c/tflm/runner.cc`).
pub const BUFFER_ID_OUTPUTS: u32 = 32;

/// Buffer id of an operator window's first scratch buffer (`kIdScratch`).
pub const BUFFER_ID_SCRATCH: u32 = 96;

/// What the host asks of one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TflmJob {
    /// Bytes of the `.tflite` at `memtrace_model`.
    pub model_bytes: u32,
    /// The tensor arena TFLM gets, from `memtrace_arena`.
    pub arena_bytes: u32,
    /// Input bytes at the start of `memtrace_io` (0: inputs left as zeros).
    pub input_bytes: u32,
    /// One memtrace layer per operator.
    pub layers: bool,
    /// Declare constant tensors (weights, bias) as buffers.
    pub weights: bool,
    /// 0, or a red-zoned run: this many bytes (a multiple of 16) left free
    /// before and after every buffer TFLM plans, the offline plan ignored.
    pub red_zone_bytes: u32,
    /// A digest of every operator's outputs ([`TflmResult::digests`]).
    pub digests: bool,
    /// Copy this operator's outputs back ([`TflmResult::dump`]).
    pub dump_op: Option<u32>,
}

impl TflmJob {
    /// The mailbox as little-endian bytes, [`MEMTRACE_TFLM_WORDS`] words.
    pub fn bytes(&self) -> Vec<u8> {
        let mut w = [0u32; MEMTRACE_TFLM_WORDS as usize];
        w[TFLM_MAGIC] = MEMTRACE_TFLM_MAGIC;
        w[TFLM_MODEL_BYTES] = self.model_bytes;
        w[TFLM_ARENA_BYTES] = self.arena_bytes;
        w[TFLM_INPUT_BYTES] = self.input_bytes;
        w[TFLM_RED_ZONE_BYTES] = self.red_zone_bytes;
        w[TFLM_DUMP_OP] = self.dump_op.map_or(0, |op| op + 1);
        let mut flags = 0;
        if self.layers {
            flags |= TFLM_FLAG_LAYERS;
        }
        if !self.weights {
            flags |= TFLM_FLAG_NO_WEIGHTS;
        }
        if self.digests {
            flags |= TFLM_FLAG_DIGESTS;
        }
        w[TFLM_FLAGS] = flags;
        w.iter().flat_map(|x| x.to_le_bytes()).collect()
    }
}

/// Where TFLM put one tensor of subgraph 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "location")]
pub enum Placement {
    /// No data (an optional input, or not allocated).
    None,
    /// In the arena, `offset` bytes from `memtrace_arena`.
    Arena {
        /// Offset from the arena region's start.
        offset: u64,
    },
    /// A constant in the model's buffers, `offset` bytes from `memtrace_model`.
    Model {
        /// Offset from the model's start.
        offset: u64,
    },
    /// Somewhere else in guest memory.
    Other,
}

/// One tensor of the runner's tensor table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorPlace {
    /// Where its data is.
    #[serde(flatten)]
    pub placement: Placement,
    /// Its bytes.
    pub bytes: u64,
}

/// One scratch buffer TFLM gave an operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScratchPlace {
    /// Operator index in subgraph 0.
    pub op: u32,
    /// Offset from `memtrace_arena`.
    pub offset: u64,
    /// Its bytes.
    pub bytes: u64,
}

/// What the runner wrote back: the mailbox words and the io region.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TflmResult {
    /// The last stage reached (`TFLM_STAGE_*`).
    pub stage: u32,
    /// `MicroInterpreter::arena_used_bytes()`.
    pub arena_used_bytes: u64,
    /// The arena's head: planned tensors and scratch buffers.
    pub head_bytes: u64,
    /// The arena's tail: persistent buffers.
    pub tail_bytes: u64,
    /// Where the head starts, from `memtrace_arena`.
    pub head_offset: u64,
    /// Operators of subgraph 0.
    pub ops: u32,
    /// Model inputs.
    pub inputs: u32,
    /// Model outputs.
    pub outputs: u32,
    /// The output tensors' bytes, concatenated in order.
    #[serde(skip)]
    pub output_bytes: Vec<u8>,
    /// Every tensor of subgraph 0, in the model's order.
    #[serde(skip)]
    pub tensors: Vec<TensorPlace>,
    /// Every scratch buffer, in TFLM's order.
    #[serde(skip)]
    pub scratch: Vec<ScratchPlace>,
    /// Per operator of subgraph 0, the FNV-1a (32-bit) of its outputs'
    /// bytes and their count, when the job asked for digests.
    #[serde(skip)]
    pub digests: Vec<OpDigest>,
    /// The outputs of the operator the job asked to dump, concatenated.
    #[serde(skip)]
    pub dump: Vec<u8>,
}

/// The digest of one operator's outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpDigest {
    /// FNV-1a (32-bit) of the output bytes, concatenated.
    pub fnv: u32,
    /// How many bytes.
    pub bytes: u32,
}

/// A runner answer that cannot be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("the TFLM runner's answer is malformed: {0}")]
pub struct ResultError(pub String);

fn word(bytes: &[u8], index: usize) -> Result<u32, ResultError> {
    bytes
        .get(index * 4..index * 4 + 4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or_else(|| ResultError(format!("word {index} is missing")))
}

/// `len` bytes at `offset` of `io`, or an error naming `what`.
fn slice<'a>(io: &'a [u8], offset: u64, len: u64, what: &str) -> Result<&'a [u8], ResultError> {
    usize::try_from(offset)
        .ok()
        .zip(usize::try_from(len).ok())
        .and_then(|(o, l)| io.get(o..o.checked_add(l)?))
        .ok_or_else(|| {
            ResultError(format!(
                "{what} ({len} bytes at {offset}) lies outside the io region ({} bytes)",
                io.len()
            ))
        })
}

impl TflmResult {
    /// Decodes the mailbox (`mailbox`, the [`MEMTRACE_TFLM_WORDS`] words
    /// read back) and the io region (`io`) after a run that reached
    /// [`TFLM_STAGE_INVOKED`].
    pub fn decode(mailbox: &[u8], io: &[u8]) -> Result<TflmResult, ResultError> {
        let w = |i| word(mailbox, i);
        let stage = w(TFLM_STAGE)?;
        let output_bytes = slice(
            io,
            w(TFLM_OUTPUT_OFFSET)? as u64,
            w(TFLM_OUTPUT_BYTES)? as u64,
            "the outputs",
        )?
        .to_vec();
        let n_tensors = w(TFLM_N_TENSORS)? as u64;
        let n_scratch = w(TFLM_N_SCRATCH)? as u64;
        let table = slice(
            io,
            w(TFLM_TABLE_OFFSET)? as u64,
            (n_tensors + n_scratch) * 12,
            "the tensor table",
        )?;
        let record = |k: usize| -> [u64; 3] {
            let r = &table[k * 12..k * 12 + 12];
            [0, 4, 8].map(|o| u32::from_le_bytes([r[o], r[o + 1], r[o + 2], r[o + 3]]) as u64)
        };
        let tensors = (0..n_tensors as usize)
            .map(|k| {
                let [loc, offset, bytes] = record(k);
                let placement = match loc as u32 {
                    TFLM_LOC_NONE => Placement::None,
                    TFLM_LOC_ARENA => Placement::Arena { offset },
                    TFLM_LOC_MODEL => Placement::Model { offset },
                    TFLM_LOC_OTHER => Placement::Other,
                    other => {
                        return Err(ResultError(format!(
                            "tensor {k} has the unknown location {other}"
                        )))
                    }
                };
                Ok(TensorPlace { placement, bytes })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let scratch = (0..n_scratch as usize)
            .map(|k| {
                let [op, offset, bytes] = record(n_tensors as usize + k);
                ScratchPlace {
                    op: op as u32,
                    offset,
                    bytes,
                }
            })
            .collect();
        let ops = w(TFLM_N_OPS)?;
        let digest_at = w(TFLM_DIGEST_OFFSET)? as u64;
        let digests = match digest_at {
            0 => Vec::new(),
            at => slice(io, at, ops as u64 * 8, "the operator digests")?
                .chunks_exact(8)
                .map(|r| OpDigest {
                    fnv: u32::from_le_bytes([r[0], r[1], r[2], r[3]]),
                    bytes: u32::from_le_bytes([r[4], r[5], r[6], r[7]]),
                })
                .collect(),
        };
        let dump_bytes = w(TFLM_DUMP_BYTES)? as u64;
        let dump = slice(
            io,
            (io.len() as u64).saturating_sub(dump_bytes),
            dump_bytes,
            "the dumped operator outputs",
        )?
        .to_vec();
        Ok(TflmResult {
            digests,
            dump,
            stage,
            arena_used_bytes: w(TFLM_ARENA_USED)? as u64,
            head_bytes: w(TFLM_HEAD_BYTES)? as u64,
            tail_bytes: w(TFLM_TAIL_BYTES)? as u64,
            head_offset: w(TFLM_HEAD_OFFSET)? as u64,
            ops,
            inputs: w(TFLM_N_INPUTS)?,
            outputs: w(TFLM_N_OUTPUTS)?,
            output_bytes,
            tensors,
            scratch,
        })
    }
}

/// The operator index of a runner layer (`params` = `index=N`), `None` for
/// the `load_input` windows and layers of other guests.
pub fn op_index(params: &str) -> Option<usize> {
    params
        .split(',')
        .find_map(|kv| kv.strip_prefix("index="))
        .and_then(|v| v.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(pairs: &[(usize, u32)]) -> Vec<u8> {
        let mut w = vec![0u32; MEMTRACE_TFLM_WORDS as usize];
        for &(i, v) in pairs {
            w[i] = v;
        }
        w.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn the_job_sets_magic_sizes_and_flags() {
        let job = TflmJob {
            model_bytes: 1000,
            arena_bytes: 4096,
            input_bytes: 96,
            layers: true,
            weights: false,
            red_zone_bytes: 64,
            digests: true,
            dump_op: Some(2),
        };
        let b = job.bytes();
        assert_eq!(b.len(), 4 * MEMTRACE_TFLM_WORDS as usize);
        assert_eq!(word(&b, TFLM_MAGIC).unwrap(), 0x5446_4C31);
        assert_eq!(&b[0..4], b"1LFT", "\"TFL1\" read as a little-endian word");
        assert_eq!(word(&b, TFLM_MODEL_BYTES).unwrap(), 1000);
        assert_eq!(word(&b, TFLM_ARENA_BYTES).unwrap(), 4096);
        assert_eq!(word(&b, TFLM_INPUT_BYTES).unwrap(), 96);
        assert_eq!(word(&b, TFLM_RED_ZONE_BYTES).unwrap(), 64);
        assert_eq!(word(&b, TFLM_DUMP_OP).unwrap(), 3, "1 + the operator");
        assert_eq!(
            word(&b, TFLM_FLAGS).unwrap(),
            TFLM_FLAG_LAYERS | TFLM_FLAG_NO_WEIGHTS | TFLM_FLAG_DIGESTS
        );
    }

    #[test]
    fn a_result_decodes_outputs_tensors_and_scratch() {
        let mailbox = words(&[
            (TFLM_STAGE, TFLM_STAGE_INVOKED),
            (TFLM_ARENA_USED, 5000),
            (TFLM_N_TENSORS, 2),
            (TFLM_N_SCRATCH, 1),
            (TFLM_OUTPUT_OFFSET, 16),
            (TFLM_OUTPUT_BYTES, 3),
            (TFLM_TABLE_OFFSET, 32),
        ]);
        let mut io = vec![0u8; 32 + 36];
        io[16..19].copy_from_slice(&[7, 8, 9]);
        let recs: [u32; 9] = [TFLM_LOC_ARENA, 64, 10, TFLM_LOC_MODEL, 128, 20, 1, 256, 30];
        for (k, v) in recs.iter().enumerate() {
            io[32 + 4 * k..36 + 4 * k].copy_from_slice(&v.to_le_bytes());
        }
        let r = TflmResult::decode(&mailbox, &io).unwrap();
        assert_eq!(r.stage, TFLM_STAGE_INVOKED);
        assert_eq!(r.arena_used_bytes, 5000);
        assert_eq!(r.output_bytes, vec![7, 8, 9]);
        assert_eq!(r.tensors[0].placement, Placement::Arena { offset: 64 });
        assert_eq!(r.tensors[1].placement, Placement::Model { offset: 128 });
        assert_eq!(r.tensors[1].bytes, 20);
        assert_eq!(
            r.scratch,
            vec![ScratchPlace {
                op: 1,
                offset: 256,
                bytes: 30
            }]
        );
    }

    #[test]
    fn a_table_outside_the_io_region_is_an_error_not_a_panic() {
        let mailbox = words(&[(TFLM_N_TENSORS, 1000), (TFLM_TABLE_OFFSET, 8)]);
        let e = TflmResult::decode(&mailbox, &[0u8; 64]).unwrap_err();
        assert!(e.0.contains("tensor table"), "{e}");
        let bad_loc = words(&[(TFLM_N_TENSORS, 1)]);
        let mut io = vec![0u8; 12];
        io[0] = 9;
        assert!(TflmResult::decode(&bad_loc, &io).is_err());
    }

    #[test]
    fn op_index_reads_the_runner_params() {
        assert_eq!(op_index("index=12"), Some(12));
        assert_eq!(op_index("op=conv2d,index=3"), Some(3));
        assert_eq!(op_index(""), None);
        assert_eq!(op_index("index=x"), None);
    }
}
