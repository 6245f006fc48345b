//! The guest's side of the port: stores to `memtrace_port`, the commands they
//! make, buffer declarations (hooked or served, per access path) and guest
//! strings.

use super::*;

pub(super) fn on_port_write(
    uc: &mut HookUc<'_, '_>,
    _kind: MemType,
    address: u64,
    size: usize,
    value: i64,
) -> bool {
    let pc = uc.pc_read().unwrap_or(0);
    clear_stale_it_state(uc);
    port_store(uc, address, size, value, pc);
    true
}

/// A guest store of `size` bytes at `address` inside `memtrace_port`, made by
/// the instruction at `pc`.
pub(super) fn port_store(uc: &mut HookUc<'_, '_>, address: u64, size: usize, value: i64, pc: u64) {
    if let Err(e) = port_command(uc, address, size, value, pc) {
        // Errors point at the guest's call; times use the storing instruction.
        let site = call_site(uc, pc);
        uc.get_data_mut().fail_protocol(e, site);
    }
    if uc.get_data().stop.is_some() {
        let _ = uc.emu_stop();
    }
}

/// Decodes one port store: a FIFO word, or a MARKER command applied at once.
fn port_command(
    uc: &mut HookUc<'_, '_>,
    address: u64,
    size: usize,
    value: i64,
    pc: u64,
) -> Result<(), String> {
    let offset = address & (PORT_SIZE - 1);
    if size != 4 || !offset.is_multiple_of(4) {
        return Err(format!(
            "memtrace_port written with a {size}-byte store at offset {offset} (use 32-bit stores)"
        ));
    }
    let word = value as u32;
    if offset != MARKER_OFFSET {
        return uc.get_data_mut().decoder.push(word).map_err(|e| e.0);
    }
    let command = uc.get_data_mut().decoder.command(word).map_err(|e| e.0)?;
    execute(uc, command, pc)
}

/// For a store made inside `memtrace_signal`, the guest's call of it: that
/// is where a command comes from, and what errors should point at. Both
/// targets call it directly (`bl`, 4 bytes; `call rel32`, 5 bytes) from a
/// leaf-free inline wrapper, so the return address is still at hand.
fn call_site(uc: &HookUc<'_, '_>, pc: u64) -> u64 {
    let image = uc.get_data().image;
    let inside = image
        .symbol(symbols::SIGNAL)
        .is_some_and(|f| pc >= f.address && pc < f.address + f.size.max(1));
    if !inside {
        return pc;
    }
    let call = image.arch.caller(uc, guest_read);
    call.unwrap_or(pc)
}

/// Applies one protocol command; `Err` is a protocol violation.
fn execute(uc: &mut HookUc<'_, '_>, cmd: Command, pc: u64) -> Result<(), String> {
    match cmd {
        Command::LayerBegin { name, op, params } => {
            if let Some(open) = &uc.get_data().layer {
                return Err(format!(
                    "LAYER_BEGIN while layer `{}` is still open",
                    open.name
                ));
            }
            let name = read_string(uc, name, "layer name")?;
            let op = read_string(uc, op, "op name")?;
            let params = read_string(uc, params, "layer params")?;
            let spec = LayerSpec::parse(&params).ok().filter(|s| s.op.name() == op);
            let s = uc.get_data_mut();
            let t0 = s.clock.now(pc);
            let index = s.layers_seen.len();
            let selected = s.selection.as_ref().is_none_or(|sel| {
                sel.iter()
                    .any(|l| memtrace_abi::selection::selects(l, index, &name, &op))
            });
            let recorded = selected && s.sink.records_layer(index);
            s.layers_seen.push(name.clone());
            s.layer = Some(OpenLayer {
                name: name.clone(),
                selected,
                recorded,
                t0,
                seq: 0,
                buffers: Vec::new(),
                unwound: 0,
            });
            if selected {
                s.send(Message::LayerBegin(LayerInfo {
                    index,
                    name,
                    op,
                    params,
                    spec,
                }));
                guard::begin(uc);
            }
            Ok(())
        }
        Command::Buffer(decl) => declare_buffer(uc, decl, pc),
        Command::LayerEnd => {
            let s = uc.get_data_mut();
            let Some(layer) = s.layer.take() else {
                return Err("LAYER_END without LAYER_BEGIN".into());
            };
            let instructions = s.clock.now(pc) - layer.t0;
            if layer.selected {
                s.flush();
                let output = output_digest(uc, &layer.buffers);
                let s = uc.get_data_mut();
                s.send(Message::LayerOutput(output));
                s.send(Message::LayerEnd { instructions });
            }
            for b in layer.buffers {
                if let Some(h) = b.hook {
                    let _ = uc.remove_hook(h);
                }
            }
            if layer.selected {
                guard::end(uc);
            }
            mmio::release_layer_pages(uc)
        }
        Command::Reason { text } => {
            let reason = read_string(uc, text, "exit reason")?;
            uc.get_data_mut().exit_reason = Some(reason);
            Ok(())
        }
        Command::Exit { code } => {
            let s = uc.get_data_mut();
            if let Some(open) = &s.layer {
                return Err(format!("EXIT while layer `{}` is still open", open.name));
            }
            let instructions = s.clock.now(pc);
            s.send(Message::Exit { code, instructions });
            if s.stop.is_none() {
                s.stop = Some(Stop::Exit { code, instructions });
            }
            Ok(())
        }
    }
}

fn declare_buffer(uc: &mut HookUc<'_, '_>, decl: BufferDecl, pc: u64) -> Result<(), String> {
    let BufferDecl {
        id,
        role,
        base,
        size,
        elem_size,
        name,
    } = decl;
    let Some(layer) = &uc.get_data().layer else {
        return Err("BUFFER declared outside a layer (declare buffers after LAYER_BEGIN)".into());
    };
    let role = Role::from_code(role)
        .ok_or_else(|| format!("buffer {id} has unknown role {role} (0..=4)"))?;
    let name = read_string(uc, name, "buffer name")?;
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
    // An input may overlap the layer's output (DMO places them so); any other
    // pair of overlapping buffers is an error.
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
    if !uc.get_data().image.is_loaded(base, size as u64) {
        return Err(format!(
            "buffer `{name}` [{base:#x}, {end:#x}) is not inside the guest's loaded memory"
        ));
    }
    let s = uc.get_data();
    let whole = layer.recorded && s.written_whole_roles.contains(&role);
    let traced = layer.recorded && !whole && !s.untraced_roles.contains(&role);
    let index = layer.buffers.len();
    let hook = if traced && uc.get_data().served.is_some() {
        mmio::serve_range(uc, base, end)?;
        None
    } else if traced {
        let hook = uc
            .add_mem_hook(
                HookType::MEM_READ | HookType::MEM_WRITE,
                base.saturating_sub(MAX_ACCESS - 1),
                end - 1,
                move |uc: &mut HookUc<'_, '_>, kind, address, size, _value| {
                    let pc = uc.pc_read().unwrap_or(0);
                    let write = kind == MemType::WRITE;
                    uc.get_data_mut()
                        .record(index, write, address, size as u64, pc);
                    clear_stale_it_state(uc);
                    true
                },
            )
            .map_err(|e| format!("cannot hook buffer `{name}`: {e:?}"))?;
        Some(hook)
    } else {
        None
    };
    let buffer = Buffer {
        id,
        role,
        name,
        base,
        size,
        elem_size,
    };
    let s = uc.get_data_mut();
    if traced || whole {
        s.send(Message::BufferDeclared(buffer.clone()));
    }
    let layer = s.layer.as_mut().expect("checked above");
    layer.buffers.push(TracedBuffer {
        written: vec![0; (size as usize).div_ceil(64)],
        buffer,
        hook,
        traced,
    });
    if whole {
        s.record_whole_store(index, pc);
    }
    Ok(())
}

/// Reads a NUL-terminated guest string of at most `MAX_STRING` bytes.
fn read_string(uc: &HookUc<'_, '_>, address: u64, what: &str) -> Result<String, String> {
    crate::machine::read_guest_string(|at, out| guest_read(uc, at, out).is_ok(), address, what)
}

/// Reads guest memory, RAM straight from its host memory (reading served
/// pages through Unicorn would re-enter the MMIO callbacks).
pub(super) fn guest_read(
    uc: &HookUc<'_, '_>,
    address: u64,
    out: &mut [u8],
) -> Result<(), unicorn_engine::uc_error> {
    if uc.get_data().ram.read(address, out) {
        Ok(())
    } else {
        uc.mem_read(address, out)
    }
}

/// The digest of a closing layer's output buffers, in declaration order
/// (a piece the guest's memory does not hold is left out).
fn output_digest(uc: &HookUc<'_, '_>, buffers: &[TracedBuffer]) -> OutputDigest {
    let mut digest = OutputDigest::default();
    let mut piece = [0u8; 4096];
    for b in buffers.iter().filter(|b| b.buffer.role == Role::Output) {
        let (mut at, end) = (b.buffer.base, b.buffer.base + u64::from(b.buffer.size));
        while at < end {
            let n = (end - at).min(piece.len() as u64) as usize;
            if guest_read(uc, at, &mut piece[..n]).is_ok() {
                digest.update(&piece[..n]);
            }
            at += n as u64;
        }
    }
    digest
}
