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
        for index in 0..buffers {
            self.record(index, write, address, size, self.block_address);
        }
    }

    /// One guest access, recorded for the part of it that lies inside buffer
    /// `index` of the open layer (none, for an access that misses it).
    pub(super) fn record(&mut self, index: usize, write: bool, address: u64, size: u64, pc: u64) {
        let Some(layer) = self.layer.as_mut() else {
            return;
        };
        let b = &mut layer.buffers[index];
        if !b.traced {
            return;
        }
        let base = b.buffer.base;
        let start = address.max(base);
        let end = (address + size).min(base + b.buffer.size as u64);
        if start >= end {
            return;
        }
        let (t, pc) = stamp(&self.clock, &self.sink, pc, layer.t0);
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

impl Session<'_> {
    /// The one store event of buffer `index` of the open layer, taken as
    /// written whole at its declaration by the instruction at `pc`
    /// ([`TraceOptions::written_whole_roles`]).
    pub(super) fn record_whole_store(&mut self, index: usize, pc: u64) {
        let Some(layer) = self.layer.as_mut() else {
            return;
        };
        let b = &mut layer.buffers[index];
        b.written.fill(u64::MAX);
        let (t, pc) = stamp(&self.clock, &self.sink, pc, layer.t0);
        let event = Event {
            t,
            seq: 0,
            pc,
            buffer: b.buffer.id,
            offset: 0,
            size: b.buffer.size,
            kind: AccessKind::Store,
        };
        push_numbered(&mut self.batch, &mut layer.seq, event);
        if self.batch.len() >= self.batch_size {
            self.flush();
        }
    }
}

/// An event's time in its layer (which began at `t0`) and its
/// instruction: none in a split trace, whichever run recorded it.
fn stamp(clock: &Clock, sink: &EventSink, pc: u64, t0: u64) -> (u64, u64) {
    match sink.claim {
        Some(_) => (0, 0),
        None => (clock.now(pc) - t0, pc),
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
