//! Decoding of the guest's writes to `memtrace_port` (docs/protocol.md).
//!
//! Word 0 of the port is a FIFO of 32-bit words; a write to word 1 is a command
//! that consumes a fixed number of FIFO words. This module knows the wire format
//! only; the layer/buffer rules are checked by the session that reads strings
//! from guest memory.

/// Byte offset of the FIFO word in `memtrace_port`.
pub const FIFO_OFFSET: u64 = 0;
/// Byte offset of the marker word in `memtrace_port`.
pub const MARKER_OFFSET: u64 = 4;
/// Size of `memtrace_port`.
pub const PORT_SIZE: u64 = 8;
/// Longest accepted string, NUL included.
pub const MAX_STRING: usize = MEMTRACE_MAX_STRING as usize;
c_constants! {
    /// The commands and roles of `memtrace.h`.
    MEMTRACE_H: u32 {
        MEMTRACE_CMD_LAYER_BEGIN = 1,
        MEMTRACE_CMD_BUFFER = 2,
        MEMTRACE_CMD_LAYER_END = 3,
        MEMTRACE_CMD_EXIT = 4,
        MEMTRACE_CMD_REASON = 5,
        MEMTRACE_ROLE_INPUT = 0,
        MEMTRACE_ROLE_OUTPUT = 1,
        MEMTRACE_ROLE_WEIGHTS = 2,
        MEMTRACE_ROLE_BIAS = 3,
        MEMTRACE_ROLE_SCRATCH = 4,
        MEMTRACE_ROLE_RED_ZONE = 5,
        MEMTRACE_ROLE_PERSISTENT = 6,
        MEMTRACE_MAX_STRING = 256,
    }
}

/// A violation of the port's wire format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ProtocolError(pub String);

/// More unconsumed FIFO words than this cannot be a well-formed command.
const FIFO_LIMIT: usize = 64;

/// A decoded marker command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// `LAYER_BEGIN`: opens a layer window.
    LayerBegin {
        /// Guest address of the NUL-terminated layer name.
        name: u64,
        /// Guest address of the NUL-terminated operator text.
        op: u64,
        /// Guest address of the NUL-terminated `key=value,...` parameter text.
        params: u64,
    },
    /// `BUFFER`: declares a buffer of the open layer.
    Buffer(BufferDecl),
    /// `LAYER_END`: closes the open layer window.
    LayerEnd,
    /// `EXIT`: the guest ends the run (`memtrace_exit`).
    Exit {
        /// Exit code the guest passed.
        code: i32,
    },
    /// `REASON`: the guest's reason for the exit that follows
    /// (`memtrace_exit_reason`).
    Reason {
        /// Guest address of the NUL-terminated reason text.
        text: u64,
    },
}

/// The words of a BUFFER command, undecoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferDecl {
    /// Buffer id chosen by the guest.
    pub id: u32,
    /// `MEMTRACE_ROLE_*`
    pub role: u32,
    /// Guest address of byte 0.
    pub base: u64,
    /// Size in bytes.
    pub size: u32,
    /// Element size in bytes.
    pub elem_size: u32,
    /// Guest address of the NUL-terminated name.
    pub name: u64,
}

/// Accumulates FIFO words and turns marker writes into [`Command`]s.
#[derive(Debug, Default)]
pub struct PortDecoder {
    fifo: Vec<u32>,
}

impl PortDecoder {
    /// A guest write of `word` to the FIFO.
    pub fn push(&mut self, word: u32) -> Result<(), ProtocolError> {
        if self.fifo.len() >= FIFO_LIMIT {
            return Err(ProtocolError(format!(
                "more than {FIFO_LIMIT} FIFO words without a command"
            )));
        }
        self.fifo.push(word);
        Ok(())
    }

    /// A guest write of `code` to the marker.
    pub fn command(&mut self, code: u32) -> Result<Command, ProtocolError> {
        let (name, needed) = match code {
            MEMTRACE_CMD_LAYER_BEGIN => ("LAYER_BEGIN", 6),
            MEMTRACE_CMD_BUFFER => ("BUFFER", 8),
            MEMTRACE_CMD_LAYER_END => ("LAYER_END", 0),
            MEMTRACE_CMD_EXIT => ("EXIT", 1),
            MEMTRACE_CMD_REASON => ("REASON", 2),
            _ => {
                self.fifo.clear();
                return Err(ProtocolError(format!(
                    "unknown command {code} written to the marker"
                )));
            }
        };
        let words = std::mem::take(&mut self.fifo);
        if words.len() != needed {
            return Err(ProtocolError(format!(
                "{name} expects {needed} FIFO words but {} were pushed",
                words.len()
            )));
        }
        let wide = |i: usize| words[i] as u64 | (words[i + 1] as u64) << 32;
        Ok(match code {
            MEMTRACE_CMD_LAYER_BEGIN => Command::LayerBegin {
                name: wide(0),
                op: wide(2),
                params: wide(4),
            },
            MEMTRACE_CMD_BUFFER => Command::Buffer(BufferDecl {
                id: words[0],
                role: words[1],
                base: wide(2),
                size: words[4],
                elem_size: words[5],
                name: wide(6),
            }),
            MEMTRACE_CMD_LAYER_END => Command::LayerEnd,
            MEMTRACE_CMD_REASON => Command::Reason { text: wide(0) },
            _ => Command::Exit {
                code: words[0] as i32,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(d: &mut PortDecoder, words: &[u32]) {
        for &w in words {
            d.push(w).unwrap();
        }
    }

    /// A seeded campaign of random port writes (part of the fuzz campaign of
    /// `make test`): the decoder never panics, every command it accepts had
    /// exactly its word count pushed since the previous command, and the FIFO
    /// never holds more than its limit.
    #[test]
    fn random_port_writes_never_panic_and_commands_take_their_words() {
        let mut state = 0x6d65_6d74_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let (mut accepted, mut refused) = (0, 0);
        for _ in 0..200 {
            let mut d = PortDecoder::default();
            let mut pushed = 0usize;
            for _ in 0..400 {
                let r = next();
                if r % 4 == 0 {
                    let code = (r >> 8) as u32 % 7;
                    match d.command(code) {
                        Ok(cmd) => {
                            let words = match cmd {
                                Command::LayerBegin { .. } => 6,
                                Command::Buffer(_) => 8,
                                Command::LayerEnd => 0,
                                Command::Exit { .. } => 1,
                                Command::Reason { .. } => 2,
                            };
                            assert_eq!(pushed, words, "{cmd:?}");
                            accepted += 1;
                        }
                        Err(e) => {
                            assert!(!e.0.is_empty());
                            refused += 1;
                        }
                    }
                    pushed = 0;
                } else if d.push((r >> 16) as u32).is_ok() {
                    pushed += 1;
                } else {
                    assert_eq!(pushed, FIFO_LIMIT);
                }
            }
        }
        assert!(accepted > 0 && refused > 0, "{accepted} {refused}");
    }

    #[test]
    fn buffer_command_reassembles_wide_words() {
        let mut d = PortDecoder::default();
        feed(&mut d, &[7, 1, 0x1000, 0x1, 64, 4, 0x2000, 0]);
        assert_eq!(
            d.command(2).unwrap(),
            Command::Buffer(BufferDecl {
                id: 7,
                role: 1,
                base: 0x1_0000_1000,
                size: 64,
                elem_size: 4,
                name: 0x2000
            })
        );
        // The FIFO is empty again.
        assert_eq!(d.command(3).unwrap(), Command::LayerEnd);
    }

    #[test]
    fn wrong_word_counts_and_codes_are_errors() {
        let mut d = PortDecoder::default();
        feed(&mut d, &[1, 2]);
        assert!(d.command(3).unwrap_err().0.contains("LAYER_END expects 0"));
        assert!(d.command(9).unwrap_err().0.contains("unknown command 9"));
        assert_eq!(
            d.command(4).unwrap_err().0,
            "EXIT expects 1 FIFO words but 0 were pushed"
        );
        for _ in 0..64 {
            d.push(0).unwrap();
        }
        assert!(d.push(0).is_err());
    }
}
