//! The guest's side of the port on Unicorn: stores to `memtrace_port` go to
//! the engine-blind protocol (`record`), and what its commands ask of the
//! engine — buffer hooks or served ranges, the stray-write watch — is done
//! here.

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
    let image = uc.get_data().image;
    let store = PortStore {
        address,
        size,
        value: value as u64,
        pc,
    };
    let effect = record::port_store(uc, image, store);
    if let Err(e) = apply(uc, effect) {
        let site = call_site(uc, pc);
        uc.get_data_mut().rec.fail_protocol(e, site);
    }
    if uc.get_data().rec.stop.is_some() {
        let _ = uc.emu_stop();
    }
}

impl Guest for HookUc<'_, '_> {
    fn read(&mut self, address: u64, out: &mut [u8]) -> bool {
        guest_read(self, address, out).is_ok()
    }

    fn call_site(&mut self, pc: u64) -> u64 {
        call_site(self, pc)
    }

    fn now(&self, pc: u64) -> u64 {
        self.get_data().clock.now(pc)
    }

    fn recorder(&mut self) -> &mut Recorder {
        &mut self.get_data_mut().rec
    }
}

/// For a store made inside `memtrace_signal`, the guest's call of it: that
/// is where a command comes from, and what errors should point at. Both
/// targets call it directly (`bl`, 4 bytes; `call rel32`, 5 bytes) from a
/// leaf-free inline wrapper, so the return address is still at hand.
fn call_site(uc: &HookUc<'_, '_>, pc: u64) -> u64 {
    let image = uc.get_data().image;
    if !image.in_signal(pc) {
        return pc;
    }
    let call = image.arch.caller(uc, guest_read);
    call.unwrap_or(pc)
}

/// What a command asks of Unicorn.
fn apply(uc: &mut HookUc<'_, '_>, effect: Effect) -> Result<(), String> {
    match effect {
        Effect::Nothing => Ok(()),
        Effect::LayerOpened => {
            guard::begin(uc);
            Ok(())
        }
        Effect::BufferDeclared { index, traced } => {
            if traced {
                trace_buffer(uc, index)?;
            }
            Ok(())
        }
        Effect::LayerClosed(layer) => {
            for hook in std::mem::take(&mut uc.get_data_mut().buffer_hooks) {
                let _ = uc.remove_hook(hook);
            }
            if layer.selected {
                guard::end(uc);
            }
            mmio::release_layer_pages(uc)
        }
    }
}

/// Watches buffer `index` of the open layer: its pages served (MMIO path)
/// or a hook over it (hook path).
fn trace_buffer(uc: &mut HookUc<'_, '_>, index: usize) -> Result<(), String> {
    let Some(b) = uc
        .get_data()
        .rec
        .layer
        .as_ref()
        .map(|l| &l.buffers[index].buffer)
    else {
        return Ok(());
    };
    let (base, end, name) = (b.base, b.base + b.size as u64, b.name.clone());
    if uc.get_data().served.is_some() {
        return mmio::serve_range(uc, base, end);
    }
    let hook = uc
        .add_mem_hook(
            HookType::MEM_READ | HookType::MEM_WRITE,
            base.saturating_sub(MAX_ACCESS - 1),
            end - 1,
            move |uc: &mut HookUc<'_, '_>, kind, address, size, _value| {
                let pc = uc.pc_read().unwrap_or(0);
                let write = kind == MemType::WRITE;
                let s = uc.get_data_mut();
                let t = s.clock.now(pc);
                s.rec.record(index, write, address, size as u64, (t, pc));
                clear_stale_it_state(uc);
                true
            },
        )
        .map_err(|e| format!("cannot hook buffer `{name}`: {e:?}"))?;
    uc.get_data_mut().buffer_hooks.push(hook);
    Ok(())
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
