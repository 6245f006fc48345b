//! The engine-blind half of a traced run: the guest protocol applied to the
//! port stores an engine reports, and the accesses it reports to declared
//! buffers turned into events, sent to the analyzer in batches.
//!
//! An engine (`session` for Unicorn, `qemu` for QEMU) owns a [`Recorder`]
//! and implements [`Guest`] — guest memory and the guest's call of
//! `memtrace_signal` — for [`execute`]; what a command means for the engine
//! (a hook to install, a range to trace, pages to protect) comes back as an
//! [`Effect`].

use crossbeam_channel::{Receiver, Sender};

use memtrace_abi::event::{AccessKind, Buffer, Event, LayerInfo, Message, OutputDigest, Role};
use memtrace_abi::protocol::{BufferDecl, Command, PortDecoder, MARKER_OFFSET, PORT_SIZE};
use memtrace_abi::spec::LayerSpec;

use crate::elf::ElfImage;
use crate::error::{GuestContext, TraceError};
use crate::split::Claim;

/// Where events go: the analyzer's channel and the channel it returns empty
/// batch vectors on; for one of the two runs of a split trace, also which
/// layers' events are this run's to record.
pub(crate) struct EventSink {
    pub(crate) messages: Sender<Message>,
    pub(crate) recycled: Receiver<Vec<Event>>,
    /// `None`: every selected layer.
    pub(crate) claim: Option<Claim>,
}

impl EventSink {
    /// True when this run records the events of the selected layer
    /// `index` (the other run of a split trace may have taken it).
    fn records_layer(&self, index: usize) -> bool {
        self.claim.as_ref().is_none_or(|c| c.records(index))
    }
}

/// A declared buffer and which of its bytes the layer has written.
pub(crate) struct TracedBuffer {
    pub(crate) buffer: Buffer,
    written: Vec<u64>,
    /// Its accesses become events ([`crate::TraceOptions::untraced_roles`]).
    pub(crate) traced: bool,
}

/// The layer between a LAYER_BEGIN and its LAYER_END.
pub(crate) struct OpenLayer {
    pub(crate) name: String,
    pub(crate) selected: bool,
    /// Selected, and its events are this run's to record.
    pub(crate) recorded: bool,
    /// Instruction index of the LAYER_BEGIN marker store.
    pub(crate) t0: u64,
    seq: u64,
    pub(crate) buffers: Vec<TracedBuffer>,
    /// Stray writes whose callers were unwound.
    pub(crate) unwound: u32,
}

/// How the run stopped.
pub(crate) enum Stop {
    Exit { code: i32, instructions: u64 },
    Error(TraceError),
}

/// What the guest's memory and registers give the protocol, from whichever
/// engine runs it.
pub(crate) trait Guest {
    /// Reads guest memory; false when some of it is not mapped.
    fn read(&mut self, address: u64, out: &mut [u8]) -> bool;
    /// The instruction the command at `pc` is attributed to: for a store
    /// made inside `memtrace_signal`, the guest's call of it.
    fn call_site(&mut self, pc: u64) -> u64;
    /// The engine's instruction index of the store at `pc`.
    fn now(&self, pc: u64) -> u64;
    /// The recorder the engine runs the protocol with.
    fn recorder(&mut self) -> &mut Recorder;
}

/// What a command asks of the engine that ran it.
pub(crate) enum Effect {
    Nothing,
    /// A selected layer began.
    LayerOpened,
    /// Buffer `index` of the open layer was declared; its accesses are to
    /// be reported when `traced`.
    BufferDeclared {
        index: usize,
        traced: bool,
    },
    /// The layer ended (selected or not), with its buffers.
    LayerClosed(OpenLayer),
}

/// The protocol state and the event batch of one traced run.
pub(crate) struct Recorder {
    decoder: PortDecoder,
    pub(crate) layer: Option<OpenLayer>,
    pub(crate) layers_seen: Vec<String>,
    /// The text of the last REASON command.
    pub(crate) exit_reason: Option<String>,
    selection: Option<Vec<String>>,
    pub(crate) batch: Vec<Event>,
    batch_size: usize,
    pub(crate) sink: EventSink,
    /// Events sent so far.
    pub(crate) events: u64,
    pub(crate) stop: Option<Stop>,
    untraced_roles: Vec<Role>,
    written_whole_roles: Vec<Role>,
}

/// What a recorder records: the options of [`crate::TraceOptions`] that are
/// the protocol's, not the engine's.
pub(crate) struct Recording {
    pub(crate) layers: Option<Vec<String>>,
    pub(crate) batch_size: usize,
    pub(crate) untraced_roles: Vec<Role>,
    pub(crate) written_whole_roles: Vec<Role>,
}

impl Recorder {
    pub(crate) fn new(recording: Recording, sink: EventSink) -> Recorder {
        Recorder {
            decoder: PortDecoder::default(),
            layer: None,
            layers_seen: Vec::new(),
            exit_reason: None,
            selection: recording.layers,
            batch: Vec::with_capacity(recording.batch_size),
            batch_size: recording.batch_size.max(1),
            sink,
            events: 0,
            stop: None,
            untraced_roles: recording.untraced_roles,
            written_whole_roles: recording.written_whole_roles,
        }
    }

    /// The open layer's name, for error contexts.
    pub(crate) fn layer_name(&self) -> Option<String> {
        self.layer.as_ref().map(|l| l.name.clone())
    }

    pub(crate) fn send(&mut self, message: Message) {
        if self.sink.messages.send(message).is_err() && self.stop.is_none() {
            self.stop = Some(Stop::Error(TraceError::Disconnected));
        }
    }

    /// Sends the pending batch, reusing a vector the analyzer gave back.
    pub(crate) fn flush(&mut self) {
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

    /// Ends the run with a protocol error at `pc`, unless it has ended.
    pub(crate) fn fail_protocol(&mut self, message: String, pc: u64) {
        if self.stop.is_none() {
            let layer = self.layer_name();
            self.stop = Some(Stop::Error(TraceError::Protocol {
                message,
                context: GuestContext::at(pc, layer),
            }));
        }
    }

    /// Ends the run with a guest fault at `pc`, unless it has ended.
    pub(crate) fn fail_guest(&mut self, message: String, pc: u64, layer: Option<String>) {
        if self.stop.is_none() {
            self.stop = Some(Stop::Error(TraceError::GuestFault {
                message,
                context: GuestContext::at(pc, layer),
            }));
        }
    }

    /// Whether buffer `index` of the open layer is traced and holds some of
    /// the `size` bytes at `address`.
    #[inline]
    pub(crate) fn traced_part_of(&self, index: usize, address: u64, size: u64) -> bool {
        self.layer.as_ref().is_some_and(|l| {
            let b = &l.buffers[index];
            b.traced
                && address < b.buffer.base + b.buffer.size as u64
                && b.buffer.base < address + size
        })
    }

    /// One guest access at instruction `t` by the instruction at `pc`,
    /// recorded for the part of it that lies inside buffer `index` of the
    /// open layer (none, for an access that misses it or a buffer whose
    /// accesses are not traced).
    #[inline]
    pub(crate) fn record(
        &mut self,
        index: usize,
        write: bool,
        address: u64,
        size: u64,
        at: (u64, u64),
    ) {
        if self.layer.as_ref().is_some_and(|l| l.buffers[index].traced) {
            self.record_bytes(index, write, address, size, at);
        }
    }

    /// One guest access, to whichever traced buffers of the open layer it
    /// touches, in declaration order; false when it touches none.
    pub(crate) fn record_any(
        &mut self,
        write: bool,
        address: u64,
        size: u64,
        at: (u64, u64),
    ) -> bool {
        let buffers = self.layer.as_ref().map_or(0, |l| l.buffers.len());
        let mut recorded = false;
        for index in 0..buffers {
            // Most accesses touch one buffer of a few: the others are
            // passed over here, without a call.
            if self.traced_part_of(index, address, size) {
                self.record_bytes(index, write, address, size, at);
                recorded = true;
            }
        }
        recorded
    }

    /// The one store of buffer `index` of the open layer, taken as written
    /// whole at its declaration ([`crate::TraceOptions::written_whole_roles`]).
    fn record_whole_store(&mut self, index: usize, at: (u64, u64)) {
        let Some(b) = self.layer.as_ref().map(|l| &l.buffers[index].buffer) else {
            return;
        };
        let (base, size) = (b.base, b.size as u64);
        self.record_bytes(index, true, base, size, at);
    }

    /// The events of `size` bytes at `address` that lie inside buffer
    /// `index` of the open layer, whether its accesses are traced or not;
    /// `at` is the access's instruction index and PC.
    #[inline]
    fn record_bytes(&mut self, index: usize, write: bool, address: u64, size: u64, at: (u64, u64)) {
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
            None => (at.0 - layer.t0, at.1),
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

    fn begin_layer(&mut self, name: String, op: String, params: String, t0: u64) -> Effect {
        let spec = LayerSpec::parse(&params).ok().filter(|s| s.op.name() == op);
        let index = self.layers_seen.len();
        let selected = self.selection.as_ref().is_none_or(|sel| {
            sel.iter()
                .any(|l| memtrace_abi::selection::selects(l, index, &name, &op))
        });
        let recorded = selected && self.sink.records_layer(index);
        self.layers_seen.push(name.clone());
        self.layer = Some(OpenLayer {
            name: name.clone(),
            selected,
            recorded,
            t0,
            seq: 0,
            buffers: Vec::new(),
            unwound: 0,
        });
        if !selected {
            return Effect::Nothing;
        }
        self.send(Message::LayerBegin(LayerInfo {
            index,
            name,
            op,
            params,
            spec,
        }));
        Effect::LayerOpened
    }

    /// Checks a declaration against the open layer's other buffers and the
    /// image, and adds it.
    fn declare(
        &mut self,
        decl: BufferDecl,
        role: Role,
        name: String,
        image: &ElfImage,
        at: (u64, u64),
    ) -> Result<Effect, String> {
        let BufferDecl {
            id,
            base,
            size,
            elem_size,
            ..
        } = decl;
        let Some(layer) = &self.layer else {
            return Err("BUFFER declared outside a layer".into());
        };
        if size == 0 || elem_size == 0 || !size.is_multiple_of(elem_size) {
            return Err(format!(
                "buffer `{name}` has size {size} and element size {elem_size}: size must be a positive multiple of the element size"
            ));
        }
        if let Some(other) = layer.buffers.iter().find(|b| b.buffer.id == id) {
            return Err(format!(
                "buffer id {id} declared twice (`{}` and `{name}`)",
                other.buffer.name
            ));
        }
        let end = base + size as u64;
        // An input may overlap the layer's output (DMO places them so); any
        // other pair of overlapping buffers is an error.
        let io_pair = |a: Role, b: Role| {
            matches!(
                (a, b),
                (Role::Input, Role::Output) | (Role::Output, Role::Input)
            )
        };
        if let Some(other) = layer.buffers.iter().find(|b| {
            base < b.buffer.base + b.buffer.size as u64
                && b.buffer.base < end
                && !io_pair(role, b.buffer.role)
        }) {
            return Err(format!(
                "buffer `{name}` [{base:#x}, {end:#x}) overlaps buffer `{}` [{:#x}, {:#x})",
                other.buffer.name,
                other.buffer.base,
                other.buffer.base + other.buffer.size as u64
            ));
        }
        if !image.is_loaded(base, size as u64) {
            return Err(format!(
                "buffer `{name}` [{base:#x}, {end:#x}) is not inside the guest's loaded memory"
            ));
        }
        let whole = layer.recorded && self.written_whole_roles.contains(&role);
        let traced = layer.recorded && !whole && !self.untraced_roles.contains(&role);
        let buffer = Buffer {
            id,
            role,
            name,
            base,
            size,
            elem_size,
        };
        if traced || whole {
            self.send(Message::BufferDeclared(buffer.clone()));
        }
        let layer = self.layer.as_mut().expect("checked above");
        let index = layer.buffers.len();
        layer.buffers.push(TracedBuffer {
            written: vec![0; (size as usize).div_ceil(64)],
            buffer,
            traced,
        });
        if whole {
            self.record_whole_store(index, at);
        }
        Ok(Effect::BufferDeclared { index, traced })
    }

    fn end_layer(&mut self, t: u64, digest: Option<OutputDigest>) -> Result<Effect, String> {
        let Some(layer) = self.layer.take() else {
            return Err("LAYER_END without LAYER_BEGIN".into());
        };
        if layer.selected {
            self.flush();
            self.send(Message::LayerOutput(digest.unwrap_or_default()));
            self.send(Message::LayerEnd {
                instructions: t - layer.t0,
            });
        }
        Ok(Effect::LayerClosed(layer))
    }

    fn exit(&mut self, code: i32, instructions: u64) -> Result<Effect, String> {
        if let Some(open) = &self.layer {
            return Err(format!("EXIT while layer `{}` is still open", open.name));
        }
        self.send(Message::Exit { code, instructions });
        if self.stop.is_none() {
            self.stop = Some(Stop::Exit { code, instructions });
        }
        Ok(Effect::Nothing)
    }
}

/// One guest store into `memtrace_port`: `size` bytes of `value` at
/// `address`, made by the instruction at `pc`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PortStore {
    pub(crate) address: u64,
    pub(crate) size: usize,
    pub(crate) value: u64,
    pub(crate) pc: u64,
}

/// Decodes one port store: a FIFO word, or a MARKER command applied at
/// once. A protocol error ends the run, reported at the guest's call.
pub(crate) fn port_store<G: Guest>(guest: &mut G, image: &ElfImage, store: PortStore) -> Effect {
    match port_command(guest, image, store) {
        Ok(effect) => effect,
        Err(e) => {
            // Errors point at the guest's call; times use the storing instruction.
            let site = guest.call_site(store.pc);
            guest.recorder().fail_protocol(e, site);
            Effect::Nothing
        }
    }
}

fn port_command<G: Guest>(
    guest: &mut G,
    image: &ElfImage,
    store: PortStore,
) -> Result<Effect, String> {
    let PortStore {
        address,
        size,
        value,
        pc,
    } = store;
    let offset = address & (PORT_SIZE - 1);
    if size != 4 || !offset.is_multiple_of(4) {
        return Err(format!(
            "memtrace_port written with a {size}-byte store at offset {offset} (use 32-bit stores)"
        ));
    }
    let word = value as u32;
    if offset != MARKER_OFFSET {
        guest.recorder().decoder.push(word).map_err(|e| e.0)?;
        return Ok(Effect::Nothing);
    }
    let command = guest.recorder().decoder.command(word).map_err(|e| e.0)?;
    execute(guest, image, command, pc)
}

/// Applies one protocol command made by the store at `pc`; `Err` is a
/// protocol violation.
fn execute<G: Guest>(
    guest: &mut G,
    image: &ElfImage,
    cmd: Command,
    pc: u64,
) -> Result<Effect, String> {
    let t = guest.now(pc);
    match cmd {
        Command::LayerBegin { name, op, params } => {
            if let Some(open) = &guest.recorder().layer {
                return Err(format!(
                    "LAYER_BEGIN while layer `{}` is still open",
                    open.name
                ));
            }
            let name = read_string(guest, name, "layer name")?;
            let op = read_string(guest, op, "op name")?;
            let params = read_string(guest, params, "layer params")?;
            Ok(guest.recorder().begin_layer(name, op, params, t))
        }
        Command::Buffer(decl) => {
            if guest.recorder().layer.is_none() {
                return Err(
                    "BUFFER declared outside a layer (declare buffers after LAYER_BEGIN)".into(),
                );
            }
            let role = Role::from_code(decl.role).ok_or_else(|| {
                format!("buffer {} has unknown role {} (0..=4)", decl.id, decl.role)
            })?;
            let name = read_string(guest, decl.name, "buffer name")?;
            guest.recorder().declare(decl, role, name, image, (t, pc))
        }
        Command::LayerEnd => {
            let mut digest = None;
            if let Some(layer) = guest.recorder().layer.as_ref().filter(|l| l.selected) {
                let outputs: Vec<(u64, u64)> = layer
                    .buffers
                    .iter()
                    .filter(|b| b.buffer.role == Role::Output)
                    .map(|b| (b.buffer.base, u64::from(b.buffer.size)))
                    .collect();
                digest = Some(output_digest(guest, &outputs));
            }
            guest.recorder().end_layer(t, digest)
        }
        Command::Reason { text } => {
            let reason = read_string(guest, text, "exit reason")?;
            guest.recorder().exit_reason = Some(reason);
            Ok(Effect::Nothing)
        }
        Command::Exit { code } => guest.recorder().exit(code, t),
    }
}

/// Reads a NUL-terminated guest string of at most `MAX_STRING` bytes.
fn read_string<G: Guest>(guest: &mut G, address: u64, what: &str) -> Result<String, String> {
    crate::machine::read_guest_string(|at, out| guest.read(at, out), address, what)
}

/// The digest of a closing layer's output buffers `(base, size)`, in
/// declaration order (a piece the guest's memory does not hold is left out).
fn output_digest<G: Guest>(guest: &mut G, outputs: &[(u64, u64)]) -> OutputDigest {
    let mut digest = OutputDigest::default();
    let mut piece = [0u8; 4096];
    for &(base, size) in outputs {
        let (mut at, end) = (base, base + size);
        while at < end {
            let n = (end - at).min(piece.len() as u64) as usize;
            if guest.read(at, &mut piece[..n]) {
                digest.update(&piece[..n]);
            }
            at += n as u64;
        }
    }
    digest
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
