//! Each operator's persistent op data: what its kernel allocated for itself
//! in the arena's tail while it was initialised and prepared
//! (`context->AllocatePersistentBuffer`, which reaches
//! `tflite::MicroInterpreterContext::AllocatePersistentBuffer`). Kernels
//! that keep state between invocations write it there when they run (the
//! signal library's FFT work areas, filter bank accumulators and noise
//! estimates): memory the operator owns, so its writes there are no stray
//! writes. They are no buffers of its layer either (the TFLM runner
//! declares none), only counted.
//!
//! The owner of an allocation is the node the graph is initialising or
//! preparing at the function's entry; its address is what the function
//! returns (r0 at its return: the block at its return address with the
//! stack pointer of its entry).

use super::structs::{read_request, Memory, ScratchOffsets};

/// One persistent buffer a kernel allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Allocation {
    /// The `MicroAllocator` it came from.
    pub allocator: u64,
    pub subgraph: i64,
    pub node: u64,
    pub base: u64,
    pub bytes: u64,
}

/// An allocation whose function has not returned yet.
#[derive(Clone, Copy, Debug)]
struct Pending {
    return_pc: u64,
    entry_sp: u64,
    allocator: u64,
    subgraph: i64,
    node: u64,
    bytes: u64,
}

/// The persistent buffers allocated so far, and the one being allocated.
pub(super) struct Persistent {
    /// `MicroInterpreterContext::AllocatePersistentBuffer`'s entry.
    pub entry: u64,
    offsets: ScratchOffsets,
    pending: Option<Pending>,
    allocations: Vec<Allocation>,
}

impl Persistent {
    pub(super) fn new(entry: u64, offsets: ScratchOffsets) -> Persistent {
        Persistent {
            entry,
            offsets,
            pending: None,
            allocations: Vec::new(),
        }
    }

    /// The function's entry: `this` (the interpreter context) and the
    /// bytes asked for give the owner; the address comes at the return.
    pub(super) fn enter(
        &mut self,
        mem: &dyn Memory,
        interpreter_context: u64,
        bytes: u64,
        return_pc: u64,
        entry_sp: u64,
    ) {
        self.pending = read_request(mem, &self.offsets, interpreter_context).map(
            |(allocator, subgraph, node, _)| Pending {
                return_pc,
                entry_sp,
                allocator,
                subgraph,
                node,
                bytes,
            },
        );
    }

    /// Whether a block at `address` with the stack at `sp` is the return
    /// of the allocation in flight.
    pub(super) fn returning(&self, address: u64, sp: u64) -> bool {
        self.pending
            .is_some_and(|p| p.return_pc == address && p.entry_sp == sp)
    }

    /// The allocation in flight returned `base` (NULL: it failed).
    pub(super) fn returned(&mut self, base: u64) {
        let Some(p) = self.pending.take() else {
            return;
        };
        if base != 0 && p.bytes > 0 {
            self.record(Allocation {
                allocator: p.allocator,
                subgraph: p.subgraph,
                node: p.node,
                base,
                bytes: p.bytes,
            });
        }
    }

    /// A new allocation. An allocator's tail only grows downwards, so one
    /// at or above its last allocation means the allocator was made anew
    /// over the same arena (another interpreter): what it allocated before
    /// is gone.
    fn record(&mut self, a: Allocation) {
        let last = self
            .allocations
            .iter()
            .rev()
            .find(|x| x.allocator == a.allocator)
            .map(|x| x.base);
        if last.is_some_and(|base| a.base >= base) {
            self.allocations.retain(|x| x.allocator != a.allocator);
        }
        self.allocations.push(a);
    }

    /// The allocator starts a model anew: what it allocated is gone.
    pub(super) fn forget(&mut self, allocator: u64) {
        self.allocations.retain(|x| x.allocator != allocator);
    }

    /// `[start, end)` of the persistent buffers node `node` of `subgraph`
    /// allocated from `allocator`.
    pub(super) fn owned(&self, allocator: u64, subgraph: i64, node: u64) -> Vec<(u64, u64)> {
        self.allocations
            .iter()
            .filter(|a| a.allocator == allocator && a.subgraph == subgraph && a.node == node)
            .map(|a| (a.base, a.base + a.bytes))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allocation(allocator: u64, node: u64, base: u64) -> Allocation {
        Allocation {
            allocator,
            subgraph: 0,
            node,
            base,
            bytes: 16,
        }
    }

    fn persistent() -> Persistent {
        Persistent {
            entry: 0,
            offsets: ScratchOffsets::default(),
            pending: None,
            allocations: Vec::new(),
        }
    }

    #[test]
    fn an_operator_owns_what_it_allocated_and_a_new_allocator_forgets_the_old() {
        let mut p = persistent();
        p.record(allocation(0xA0, 0, 0x9000));
        p.record(allocation(0xA0, 1, 0x8FF0));
        p.record(allocation(0xA0, 1, 0x8FE0));
        assert_eq!(
            p.owned(0xA0, 0, 1),
            vec![(0x8FF0, 0x9000), (0x8FE0, 0x8FF0)]
        );
        assert_eq!(p.owned(0xB0, 0, 1), vec![]);
        // The same allocator's tail back at the arena's end: a new
        // interpreter over the same arena; node 1's buffers are gone.
        p.record(allocation(0xA0, 0, 0x9000));
        assert_eq!(p.owned(0xA0, 0, 1), vec![]);
        assert_eq!(p.owned(0xA0, 0, 0), vec![(0x9000, 0x9010)]);
    }

    #[test]
    fn a_model_started_anew_forgets_even_allocations_above_the_new_ones() {
        // A second interpreter whose allocator lies where the first's did,
        // its first allocation below the first one's last: the address
        // order cannot tell, the model's start does.
        let mut p = persistent();
        p.record(allocation(0xA0, 3, 0x9000));
        p.forget(0xA0);
        p.record(allocation(0xA0, 0, 0x8000));
        assert_eq!(p.owned(0xA0, 0, 3), vec![]);
        assert_eq!(p.owned(0xA0, 0, 0), vec![(0x8000, 0x8010)]);
    }
}
