#!/usr/bin/env bash
# Builds the memtrace wheel into python/dist/: the `memtrace` binary (maturin,
# from the workspace, in $CARGO_TARGET_DIR), the Python API (python/memtrace)
# and the prebuilt guests a user needs without a cross compiler, as the
# wheel's data (installed under PREFIX/share/memtrace, where the binary
# looks first: driver/src/runtime/kernels.rs, INSTALLED_GUESTS).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
venv=${WHEEL_VENV:-$HOME/.cache/memtrace-wheel-venv}
maturin_req=${MATURIN:-maturin>=1.5,<2}

# What a user runs without compiling: both TFLM runners and both kernel
# suites per target, and the runtime library, linker script and headers
# for building their own binary with memtrace.h.
guests=(tflm-runner.elf tflm-runner-cmsis.elf suite.elf suite-cmsis.elf libmemtrace_rt.a memtrace.ld)
targets=(cortex-m4 x86_64)

stage="$root/python/build/memtrace.data/data/share/memtrace"
rm -rf "$root/python/build"
for t in "${targets[@]}"; do
    mkdir -p "$stage/guests/$t"
    for g in "${guests[@]}"; do
        src="$root/harness-c/build/$t/$g"
        if [ ! -f "$src" ]; then
            echo "error: $src is not built: run make guests first" >&2
            exit 1
        fi
        # A wheel's runners run any model: never one built for some
        # operators only (harness-c's TFLM_OPS).
        ops="${src%.elf}.ops"
        if [ -f "$ops" ] && [ "$(cat "$ops")" != all ]; then
            echo "error: $src registers only $(cat "$ops"): run make guests (TFLM_OPS=all) first" >&2
            exit 1
        fi
        cp "$src" "$stage/guests/$t/"
    done
done
mkdir -p "$stage/include"
cp "$root"/harness-c/include/memtrace*.h "$stage/include/"

if ! "$venv/bin/maturin" --version >/dev/null 2>&1; then
    echo "memtrace: creating $venv with $maturin_req (the wheel builder)" >&2
    rm -rf "$venv"
    python3 -m venv "$venv" || { echo "error: python3 -m venv failed; install Debian's python3-venv" >&2; exit 1; }
    "$venv/bin/pip" install -q --disable-pip-version-check "$maturin_req" || {
        rm -rf "$venv"
        echo "error: pip could not install $maturin_req from PyPI" >&2
        exit 1
    }
fi

rm -rf "$root/python/dist"
cd "$root/python"
"$venv/bin/maturin" build --release --out "$root/python/dist" "$@"
ls -l "$root/python/dist"
