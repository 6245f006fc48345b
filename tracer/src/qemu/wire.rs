//! The pipe between memtrace and its QEMU plugin: fixed 32-byte records
//! from the plugin, 32-bit words back (the format is written down at the top
//! of `harness-c/qemu/memtrace-plugin.c`).

use std::io::{BufReader, Read, Write};
use std::io::{PipeReader, PipeWriter};

use crate::error::TraceError;

/// What a record reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum Kind {
    #[default]
    Load,
    Store,
    /// A store to `memtrace_port` (at its MARKER word the plugin waits).
    Port,
    /// The instruction budget ran out; QEMU exits.
    Budget,
    /// An exception handler was entered; the plugin waits.
    Fault,
    /// A store to the stack's guard page; the plugin waits.
    Guard,
    Progress,
    /// Guest memory asked for with a READ.
    Data,
    /// QEMU is exiting.
    Exit,
}

impl Kind {
    fn from_code(code: u8) -> Option<Kind> {
        Some(match code {
            0 => Kind::Load,
            1 => Kind::Store,
            2 => Kind::Port,
            3 => Kind::Budget,
            4 => Kind::Fault,
            5 => Kind::Guard,
            6 => Kind::Progress,
            7 => Kind::Data,
            8 => Kind::Exit,
            _ => return None,
        })
    }
}

/// One record from the plugin.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct WireRecord {
    pub(super) kind: Kind,
    pub(super) size: u64,
    pub(super) address: u64,
    pub(super) pc: u64,
    /// LR, for a port store made inside `memtrace_signal`, or the stacked
    /// LR of a fault.
    pub(super) lr: u64,
    /// Instructions retired before this one.
    pub(super) t: u64,
    pub(super) value: u64,
}

const RECORD: usize = 32;

/// A reply, while the plugin waits.
pub(super) enum Reply {
    Read { address: u64, len: u32 },
    Ranges(Vec<(u64, u64)>),
    Continue,
    Stop,
}

impl Reply {
    fn words(&self) -> Vec<u32> {
        match self {
            Reply::Read { address, len } => vec![1, *address as u32, *len],
            Reply::Ranges(ranges) => {
                let mut w = vec![2, ranges.len() as u32];
                for &(lo, hi) in ranges {
                    w.extend([lo as u32, hi as u32]);
                }
                w
            }
            Reply::Continue => vec![3],
            Reply::Stop => vec![4],
        }
    }
}

/// Both ends of the pipe, memtrace's side.
pub(crate) struct Wire {
    records: BufReader<PipeReader>,
    replies: PipeWriter,
}

impl Wire {
    pub(super) fn new(records: PipeReader, replies: PipeWriter) -> Wire {
        Wire {
            records: BufReader::with_capacity(1 << 16, records),
            replies,
        }
    }

    /// The next record; `None` when QEMU has closed the pipe.
    pub(super) fn next(&mut self) -> Result<Option<WireRecord>, TraceError> {
        let mut r = [0u8; RECORD];
        match self.records.read_exact(&mut r) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(TraceError::Emulator(format!("reading from QEMU: {e}"))),
        }
        let u32_at = |i: usize| u64::from(u32::from_le_bytes([r[i], r[i + 1], r[i + 2], r[i + 3]]));
        let u64_at = |i: usize| u32_at(i) | u32_at(i + 4) << 32;
        let kind = Kind::from_code(r[0]).ok_or_else(|| {
            TraceError::Emulator(format!("the QEMU plugin sent a record of kind {}", r[0]))
        })?;
        Ok(Some(WireRecord {
            kind,
            size: u64::from(r[1]),
            address: u32_at(4),
            pc: u32_at(8),
            lr: u32_at(12),
            t: u64_at(16),
            value: u64_at(24),
        }))
    }

    /// Sends replies to the waiting plugin.
    pub(super) fn reply(&mut self, replies: &[Reply]) -> Result<(), TraceError> {
        let bytes: Vec<u8> = replies
            .iter()
            .flat_map(Reply::words)
            .flat_map(u32::to_le_bytes)
            .collect();
        self.replies
            .write_all(&bytes)
            .map_err(|e| TraceError::Emulator(format!("writing to QEMU's plugin: {e}")))
    }

    /// Reads guest memory through the waiting plugin; false when the guest
    /// has none there (or QEMU has gone).
    pub(super) fn read_memory(&mut self, address: u64, out: &mut [u8]) -> bool {
        if out.is_empty() {
            return true;
        }
        let len = out.len() as u32;
        if self.reply(&[Reply::Read { address, len }]).is_err() {
            return false;
        }
        match self.next() {
            Ok(Some(r)) if r.kind == Kind::Data && r.value == u64::from(len) => {
                self.records.read_exact(out).is_ok()
            }
            _ => false,
        }
    }
}
