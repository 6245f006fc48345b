//! Kernel libraries: which build of the harness's guests runs a layer or a
//! model. The same operator compiled from two libraries can walk memory in
//! different orders, so O_s, scratch needs and the safety of an overlapped
//! plan belong to the library build, not to the operator.

use std::path::{Path, PathBuf};

use memtrace_tracer::{Arch, ElfImage};

use crate::failed;
use crate::support::error::Result;

pub use memtrace_abi::target::Kernels;

/// True when `name` follows CMSIS-NN's function naming: `arm_nn_*`, or
/// `arm_*` with a `_s8`, `_s16` or `_s4` data-type part (`arm_convolve_s8`,
/// `arm_avgpool_s16`, `arm_nn_mat_mult_kernel_s8_s16`).
fn is_cmsis_nn_function(name: &str) -> bool {
    name.starts_with("arm_")
        && (name.starts_with("arm_nn_") || ["_s8", "_s16", "_s4"].iter().any(|t| name.contains(t)))
}

/// The kernel library an ELF (kernel suite or TFLM runner) was built
/// with, from its function symbols: CMSIS-NN when it defines any of
/// CMSIS-NN's functions, TFLM's reference kernels otherwise (the harness
/// links the reference kernels into every build, CMSIS-NN only into the
/// `-cmsis` ones).
pub(crate) fn library_of(image: &ElfImage) -> Kernels {
    if image.function_names().any(is_cmsis_nn_function) {
        Kernels::CmsisNn
    } else {
        Kernels::Tflm
    }
}

/// An error unless `image` (a guest of `kind`, e.g. "runner") was built
/// with `kernels`; `file` is that library's build of the guest.
pub(crate) fn check_built_with(
    image: &ElfImage,
    kernels: Kernels,
    kind: &str,
    file: &str,
) -> Result<()> {
    let built_with = library_of(image);
    if built_with != kernels {
        return Err(failed!(
            "{} is a {} {kind} ({}) but the run is for the {} kernels: pass --kernels {} or \
             harness-c/build/TARGET/{file}",
            image.path.display(),
            built_with.name(),
            match built_with {
                Kernels::CmsisNn => "it defines CMSIS-NN's arm_* functions",
                Kernels::Tflm => "it defines none of CMSIS-NN's arm_* functions",
            },
            kernels.name(),
            built_with.name(),
        ));
    }
    Ok(())
}

/// The harness build folder of `arch`.
pub fn build_dir(arch: Arch) -> &'static str {
    arch.build_dir()
}

/// Where an installation keeps its prebuilt guests, relative to the
/// folder of the executable (`PREFIX/bin/memtrace` →
/// `PREFIX/share/memtrace/guests`): the layout of a Python wheel's data
/// (`make wheel`), which pip installs under the environment's prefix.
pub const INSTALLED_GUESTS: &str = "../share/memtrace/guests";

/// The harness build folders guests are looked for in, first to last: an
/// installation's guests beside the executable ([`INSTALLED_GUESTS`]) and
/// nothing else when it has them; otherwise the source tree this memtrace
/// was built from, then `harness-c/build` beside
/// any folder holding the running executable (a target directory inside a
/// clone). Never the working directory: a `harness-c/build` planted where
/// memtrace happens to run would otherwise silently replace the guests.
pub fn guest_roots() -> Vec<PathBuf> {
    let exe = std::env::current_exe().and_then(std::fs::canonicalize).ok();
    let installed = installed_guests();
    let source_tree = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(|tree| tree.join("harness-c").join("build"));
    let beside_exe = exe
        .iter()
        .flat_map(|exe| exe.ancestors().skip(1))
        .map(|base| base.join("harness-c").join("build"))
        .collect::<Vec<_>>();
    // An installation is self-contained: its binary never mixes in the
    // guests of a source tree that happens to be where it was built.
    if let Some(installed) = installed {
        return vec![installed];
    }
    let mut roots: Vec<PathBuf> = Vec::new();
    for root in source_tree.into_iter().chain(beside_exe) {
        if !roots.contains(&root) {
            roots.push(root);
        }
    }
    roots
}

/// An installation's guests ([`INSTALLED_GUESTS`] beside the executable),
/// when memtrace runs from one.
pub(crate) fn installed_guests() -> Option<PathBuf> {
    let exe = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .ok()?;
    let dir = exe.parent()?.join(INSTALLED_GUESTS);
    dir.is_dir().then_some(dir)
}

/// `harness-c/build/ARCH/FILE` of the first of [`guest_roots`] that has it;
/// the error says where it was looked for and how to get it.
pub(crate) fn harness_guest(arch: Arch, file: &str, option: &str) -> Result<PathBuf> {
    let rel = Path::new(build_dir(arch)).join(file);
    let roots = guest_roots();
    roots
        .iter()
        .map(|root| root.join(&rel))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            let cmsis = if file.contains("cmsis") {
                " with CMSIS_NN_DIR=/path/to/CMSIS-NN"
            } else {
                ""
            };
            let first = roots
                .first()
                .map_or_else(|| rel.clone(), |root| root.join(&rel));
            if installed_guests().is_some() {
                return failed!(
                    "{} is not among the guests this installation carries ({}): build it in a \
                     memtrace source tree (`make -C harness-c build/{}`{cmsis}, which needs \
                     Debian's gcc-arm-none-eabi and libnewlib-arm-none-eabi) and pass {option}",
                    rel.display(),
                    roots[0].display(),
                    rel.display()
                );
            }
            // The other cores' guests are not part of the default build.
            let every = if matches!(arch, Arch::CortexM4 | Arch::X86_64) {
                "every guest: `make build`".to_string()
            } else if arch == Arch::Riscv32 {
                "every RISC-V guest: `make -C harness-c riscv32`".to_string()
            } else {
                format!(
                    "every guest of this core: `make -C harness-c cores CORES={}`",
                    arch.name()
                )
            };
            failed!(
                "{} not found: build it (`make -C harness-c build/{}`{cmsis}; {every}) or pass \
                 {option}",
                first.display(),
                rel.display()
            )
        })
}

#[cfg(test)]
mod tests {
    use super::is_cmsis_nn_function;

    #[test]
    fn cmsis_nn_functions_are_told_by_their_names() {
        for name in [
            "arm_convolve_s8",
            "arm_avgpool_s8_get_buffer_size",
            "arm_nn_mat_mult_kernel_s8_s16",
            "arm_elementwise_add_s16",
        ] {
            assert!(is_cmsis_nn_function(name), "{name}");
        }
        for name in [
            "arm_cfft_f32",
            "main",
            "tflite_conv",
            "memtrace_arena",
            "armchair_s8",
        ] {
            assert!(!is_cmsis_nn_function(name), "{name}");
        }
    }
}
