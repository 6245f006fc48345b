//! The event stream: the contract between the tracer and the analyzer.
//!
//! The tracer sends [`Message`]s in program order over a bounded crossbeam
//! channel. Memory accesses travel in [`Message::Events`] batches so the channel
//! costs little per access; batch vectors are returned to the tracer through a
//! recycling channel so that steady-state tracing does not allocate.

use serde::{Deserialize, Serialize};

use crate::spec::LayerSpec;

/// What an access did to the bytes it touched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AccessKind {
    /// A read of the bytes.
    Load,
    /// First write of these bytes within the current layer.
    Store,
    /// Write to bytes already written within the current layer.
    Update,
}

impl AccessKind {
    /// Lower-case name used in tables and reports (`load`, `store`, `update`).
    pub fn name(self) -> &'static str {
        match self {
            AccessKind::Load => "load",
            AccessKind::Store => "store",
            AccessKind::Update => "update",
        }
    }
}

/// One access to one declared buffer (accesses spanning two buffers, or mixing
/// written and unwritten bytes, are split).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Event {
    /// Retired-instruction index since layer begin (exact).
    pub t: u64,
    /// Position in the total order of accesses since layer begin (a read of an
    /// instruction comes before its write).
    pub seq: u64,
    /// Guest PC of the accessing instruction.
    pub pc: u64,
    /// Buffer id, as declared by the guest.
    pub buffer: u32,
    /// Byte offset from the buffer base.
    pub offset: u32,
    /// Access width in bytes (after splitting).
    pub size: u32,
    /// Whether the access read, first wrote or rewrote the bytes.
    pub kind: AccessKind,
}

/// Role of a declared buffer in its layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// An activation the layer reads (`MEMTRACE_ROLE_INPUT`).
    Input,
    /// The activation the layer writes (`MEMTRACE_ROLE_OUTPUT`).
    Output,
    /// Filter or weight tensor (`MEMTRACE_ROLE_WEIGHTS`).
    Weights,
    /// Bias vector (`MEMTRACE_ROLE_BIAS`).
    Bias,
    /// Temporary memory the kernel needs (`MEMTRACE_ROLE_SCRATCH`).
    Scratch,
    /// Bytes right before or after another buffer of the layer that no
    /// access may touch (`MEMTRACE_ROLE_RED_ZONE`): a red-zoned run's zones.
    RedZone,
    /// Memory the kernel allocated for itself before the run
    /// (`MEMTRACE_ROLE_PERSISTENT`): its op data and the state it keeps
    /// between invocations. The operator may read and write it freely.
    Persistent,
}

impl Role {
    /// Every role.
    pub const ALL: [Role; 7] = [
        Role::Input,
        Role::Output,
        Role::Weights,
        Role::Bias,
        Role::Scratch,
        Role::RedZone,
        Role::Persistent,
    ];

    /// Decodes `MEMTRACE_ROLE_*`.
    pub fn from_code(code: u32) -> Option<Role> {
        use crate::protocol::*;
        Some(match code {
            MEMTRACE_ROLE_INPUT => Role::Input,
            MEMTRACE_ROLE_OUTPUT => Role::Output,
            MEMTRACE_ROLE_WEIGHTS => Role::Weights,
            MEMTRACE_ROLE_BIAS => Role::Bias,
            MEMTRACE_ROLE_SCRATCH => Role::Scratch,
            MEMTRACE_ROLE_RED_ZONE => Role::RedZone,
            MEMTRACE_ROLE_PERSISTENT => Role::Persistent,
            _ => return None,
        })
    }
    /// Lower-case name used in tables and reports (`input`, `output`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Role::Input => "input",
            Role::Output => "output",
            Role::Weights => "weights",
            Role::Bias => "bias",
            Role::Scratch => "scratch",
            Role::RedZone => "red_zone",
            Role::Persistent => "persistent",
        }
    }
}

/// A buffer declared by the guest for the current layer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Buffer {
    /// Buffer id chosen by the guest, unique within the layer.
    pub id: u32,
    /// What the buffer is to the layer.
    pub role: Role,
    /// Name given by the guest (the tensor's name).
    pub name: String,
    /// Guest address of byte 0.
    pub base: u64,
    /// Size in bytes.
    pub size: u32,
    /// Element size in bytes (reported, not used to split accesses).
    pub elem_size: u32,
}

/// A layer window opened by the guest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerInfo {
    /// Position of the layer in the run (0-based).
    pub index: usize,
    /// Layer name given by the guest (identifies the layer in reports).
    pub name: String,
    /// Operator text given by the guest (`conv2d`, `add`, ... or anything else).
    pub op: String,
    /// The guest's `key=value,...` parameter text.
    pub params: String,
    /// `params` understood as a kernel-suite layer, when it is one.
    pub spec: Option<LayerSpec>,
}

/// A write made inside a traced layer window to memory that is none of the
/// layer's declared buffers and not the guest's stack (see docs/protocol.md,
/// "Stray writes"). Only the tracer can see these: they touch no buffer, so
/// they are no [`Event`]. Sent only when the trace asked for them
/// (`TraceOptions::stray_writes`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StrayWrite {
    /// Retired-instruction index since layer begin of the storing instruction.
    pub t: u64,
    /// Guest PC of the storing instruction (exact on both access paths for
    /// pages that hold no declared buffer; on the MMIO path, the address of
    /// its block for bytes on a page that also holds a declared buffer).
    pub pc: u64,
    /// Guest address of the first byte written outside the buffers.
    pub address: u64,
    /// Bytes written outside the buffers, from `address` on (an access that
    /// also writes buffer bytes is clipped to the bytes outside them).
    pub size: u32,
    /// The return addresses of the calls that led to the store, innermost
    /// caller first (Thumb bit cleared), unwound from the guest's stack with
    /// the ELF's call-frame information. Empty when the ELF has none, on the
    /// MMIO access path (its callbacks do not see the registers; `memtrace
    /// run` re-traces such layers on the hook path), and after the first
    /// [`STRAY_WRITES_UNWOUND`] stray writes of a layer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub callers: Vec<u64>,
}

/// Stray writes per layer whose callers the tracer unwinds
/// ([`StrayWrite::callers`]); later ones carry none.
pub const STRAY_WRITES_UNWOUND: u32 = 256;

/// The FNV-1a (64-bit) digest of bytes read in pieces: a layer's output
/// buffers when it ended, a run's outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutputDigest {
    /// Bytes digested.
    pub bytes: u64,
    /// The hash so far.
    pub hash: u64,
}

impl Default for OutputDigest {
    fn default() -> Self {
        OutputDigest {
            bytes: 0,
            hash: 0xcbf2_9ce4_8422_2325,
        }
    }
}

impl OutputDigest {
    /// The digest of `data` alone.
    pub fn of(data: &[u8]) -> Self {
        let mut d = OutputDigest::default();
        d.update(data);
        d
    }

    /// Digests `data` after what came before.
    pub fn update(&mut self, data: &[u8]) {
        for &b in data {
            self.hash ^= u64::from(b);
            self.hash = self.hash.wrapping_mul(0x0100_0000_01b3);
        }
        self.bytes += data.len() as u64;
    }

    /// The hash as 16 hex digits.
    pub fn hex(&self) -> String {
        format!("{:016x}", self.hash)
    }
}

/// Messages in the order the guest produced them.
#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    /// The guest opened a layer window (`LAYER_BEGIN`).
    LayerBegin(LayerInfo),
    /// The guest declared a buffer of the open layer (`BUFFER`).
    BufferDeclared(Buffer),
    /// Accesses of the current layer, in `seq` order.
    Events(Vec<Event>),
    /// A write outside the open layer's buffers and the stack. Stray writes
    /// arrive in program order among themselves and before their layer's
    /// `LayerEnd`; events of the same layer made before one may still be in
    /// an unsent batch, so order them with events by `t`.
    StrayWrite(StrayWrite),
    /// The bytes the open layer's output buffers (role `output`) held when
    /// the guest closed it, in declaration order; sent just before
    /// `LayerEnd`.
    LayerOutput(OutputDigest),
    /// The guest closed the open layer window (`LAYER_END`).
    LayerEnd {
        /// Instructions retired inside the window.
        instructions: u64,
    },
    /// The guest called `memtrace_exit`.
    Exit {
        /// Exit code the guest passed.
        code: i32,
        /// Instructions retired by the whole run.
        instructions: u64,
    },
}
