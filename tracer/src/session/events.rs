//! Recording accesses: each guest access to a declared buffer of the open
//! layer becomes load, store or update events, sent to the analyzer in
//! batches.

use super::*;

impl Session<'_> {
    pub(super) fn send(&mut self, message: Message) {
        if self.sink.messages.send(message).is_err() && self.stop.is_none() {
            self.stop = Some(Stop::Error(TraceError::Disconnected));
        }
    }

    /// Sends the pending batch, reusing a vector the analyzer gave back.
    pub(super) fn flush(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let fresh = self
            .sink
            .recycled
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(self.batch_size));
        let full = std::mem::replace(&mut self.batch, fresh);
        self.events += full.len() as u64;
        self.send(Message::Events(full));
    }

    /// One guest access on the MMIO path, to whichever buffers of the open
    /// layer it touches, in declaration order (the order the hook path's
    /// per-buffer hooks fire in).
    pub(super) fn record_access(&mut self, write: bool, address: u64, size: u64) {
        let buffers = self.layer.as_ref().map_or(0, |l| l.buffers.len());
        let mut recorded = false;
        for index in 0..buffers {
            // Most accesses touch one buffer of a few: the others are
            // passed over here, without a call.
            if self.traced_part_of(index, address, size) {
                self.record_bytes(index, write, address, size, self.block_address);
                recorded = true;
            }
        }
        if !recorded {
            if let Some(served) = self.served.as_mut() {
                served.idle_dispatches += 1;
            }
        }
    }

    /// Whether buffer `index` of the open layer is traced and holds some of
    /// the `size` bytes at `address`.
    #[inline]
    fn traced_part_of(&self, index: usize, address: u64, size: u64) -> bool {
        self.layer.as_ref().is_some_and(|l| {
            let b = &l.buffers[index];
            b.traced
                && address < b.buffer.base + b.buffer.size as u64
                && b.buffer.base < address + size
        })
    }

    /// One guest access, recorded for the part of it that lies inside buffer
    /// `index` of the open layer (none, for an access that misses it or a
    /// buffer whose accesses are not traced).
    pub(super) fn record(&mut self, index: usize, write: bool, address: u64, size: u64, pc: u64) {
        if self.layer.as_ref().is_some_and(|l| l.buffers[index].traced) {
            self.record_bytes(index, write, address, size, pc);
        }
    }

    /// The one store of buffer `index` of the open layer, taken as written
    /// whole at its declaration by the instruction at `pc`
    /// ([`TraceOptions::written_whole_roles`]).
    pub(super) fn record_whole_store(&mut self, index: usize, pc: u64) {
        let Some(b) = self.layer.as_ref().map(|l| &l.buffers[index].buffer) else {
            return;
        };
        let (base, size) = (b.base, b.size as u64);
        self.record_bytes(index, true, base, size, pc);
    }

    /// The events of `size` bytes at `address` that lie inside buffer
    /// `index` of the open layer, whether its accesses are traced or not.
    #[inline]
    fn record_bytes(&mut self, index: usize, write: bool, address: u64, size: u64, pc: u64) {
        let Some(layer) = self.layer.as_mut() else {
            return;
        };
        let b = &mut layer.buffers[index];
        let base = b.buffer.base;
        let start = address.max(base);
        let end = (address + size).min(base + b.buffer.size as u64);
        if start >= end {
            return;
        }
        // A split trace's events carry no time, whichever run recorded them.
        let (t, pc) = match self.sink.claim {
            Some(_) => (0, 0),
            None => (self.clock.now(pc) - layer.t0, pc),
        };
        let (first, last) = ((start - base) as u32, (end - base) as u32);
        let event = |offset: u32, end: u32, kind| Event {
            t,
            seq: 0,
            pc,
            buffer: b.buffer.id,
            offset,
            size: end - offset,
            kind,
        };
        if !write {
            push_numbered(
                &mut self.batch,
                &mut layer.seq,
                event(first, last, AccessKind::Load),
            );
        } else {
            // Split into runs of already-written (update) and new (store) bytes.
            let mut start = first;
            while start < last {
                let written = is_set(&b.written, start);
                let mut end = start + 1;
                while end < last && is_set(&b.written, end) == written {
                    end += 1;
                }
                let kind = if written {
                    AccessKind::Update
                } else {
                    AccessKind::Store
                };
                push_numbered(&mut self.batch, &mut layer.seq, event(start, end, kind));
                start = end;
            }
            (first..last).for_each(|off| set(&mut b.written, off));
        }
        if self.batch.len() >= self.batch_size {
            self.flush();
        }
    }
}

/// Appends `event` with the layer's next sequence number.
fn push_numbered(batch: &mut Vec<Event>, seq: &mut u64, mut event: Event) {
    event.seq = *seq;
    *seq += 1;
    batch.push(event);
}

fn is_set(bits: &[u64], i: u32) -> bool {
    bits[(i / 64) as usize] >> (i % 64) & 1 == 1
}

fn set(bits: &mut [u64], i: u32) {
    bits[(i / 64) as usize] |= 1 << (i % 64);
}
