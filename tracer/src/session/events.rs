//! Accesses on the MMIO path (`mmio.rs`), each recorded for whichever
//! traced buffers of the open layer it touches, in declaration order (the
//! order the hook path's per-buffer hooks fire in).

use super::*;

impl Session<'_> {
    /// One guest access the MMIO path served, made in the block now running.
    pub(super) fn record_access(&mut self, write: bool, address: u64, size: u64) {
        let buffers = self.rec.layer.as_ref().map_or(0, |l| l.buffers.len());
        if !(0..buffers).any(|i| self.rec.traced_part_of(i, address, size)) {
            if let Some(served) = self.served.as_mut() {
                served.idle_dispatches += 1;
            }
            return;
        }
        let pc = self.block_address;
        let at = (self.clock.now(pc), pc);
        self.rec.record_any(write, address, size, at);
    }
}
