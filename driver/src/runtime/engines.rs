//! The emulator a command runs a guest on: Unicorn for the cores it has,
//! QEMU (with memtrace's plugin) for the Cortex-M55, or the one asked for.

use std::path::PathBuf;

use memtrace_abi::target::EngineKind;
use memtrace_tracer::{Arch, Engine, QemuConfig};

use super::kernels::guest_roots;
use crate::bail;
use crate::support::error::Result;

/// The QEMU board every QEMU run uses: Arm's MPS3 AN547 (Corstone-300),
/// whose core is the Cortex-M55; the harness links its M55 guests for it
/// (`harness-c/rt/cortex-m55/`).
pub const QEMU_MACHINE: &str = "mps3-an547";

/// The environment variable that names the QEMU to run (default
/// `qemu-system-arm` on the `PATH`).
pub const QEMU_ENV: &str = "MEMTRACE_QEMU";

/// The plugin's file in the harness build (`make -C harness-c qemu-plugin`).
const PLUGIN: &str = "qemu/libmemtrace-qemu.so";

/// The engine that runs a guest for `arch`: `asked`, or the core's own
/// ([`EngineKind::default_for`]).
pub fn engine_for(arch: Arch, asked: Option<EngineKind>) -> Result<Engine> {
    match asked.unwrap_or(EngineKind::default_for(arch)) {
        EngineKind::Unicorn if !arch.unicorn_has() => bail!(
            "Unicorn has no {arch}: it runs on the QEMU engine (`--engine qemu`, the default for it)"
        ),
        EngineKind::Unicorn => Ok(Engine::Unicorn),
        EngineKind::Qemu if arch.is_cortex_m() => Ok(Engine::Qemu(qemu_config()?)),
        EngineKind::Qemu => bail!("the QEMU engine runs Cortex-M guests; {arch} runs on Unicorn"),
    }
}

fn qemu_config() -> Result<QemuConfig> {
    let qemu = std::env::var_os(QEMU_ENV).map_or_else(|| "qemu-system-arm".into(), PathBuf::from);
    Ok(QemuConfig {
        qemu,
        plugin: plugin()?,
        machine: QEMU_MACHINE.into(),
        cpu: "cortex-m55".into(),
    })
}

/// memtrace's QEMU plugin in the first guest folder that has it.
fn plugin() -> Result<PathBuf> {
    let roots = guest_roots();
    if let Some(found) = roots.iter().map(|r| r.join(PLUGIN)).find(|p| p.is_file()) {
        return Ok(found);
    }
    let first = roots
        .first()
        .map_or_else(|| PathBuf::from(PLUGIN), |r| r.join(PLUGIN));
    bail!(
        "{} not found: build memtrace's QEMU plugin (`make -C harness-c qemu-plugin`, which \
         needs Debian's libglib2.0-dev)",
        first.display()
    )
}
