#!/usr/bin/env bash
# Makes a Python venv at $1 with the PyPI package `tflite-micro` (the real,
# current TensorFlow Lite Micro built for the host), the independent oracle
# of `memtrace verify` (scripts/tflm_oracle.py). Does nothing when it exists.
set -euo pipefail

venv=${1:?usage: install-oracle.sh VENV_DIR}
# A pinned nightly, so that CI compares against the same TFLM every time.
package=${TFLM_PACKAGE:-tflite-micro==0.dev20261023182759}

# Up to date when the runtime imports and, for a pinned package, the pinned
# version is the one installed.
wanted=""
[[ $package == *==* ]] && wanted=${package#*==}
have=$("$venv/bin/python" -c "import importlib.metadata as m; print(m.version('tflite-micro'))" 2>/dev/null || true)
if { [ -z "$wanted" ] || [ "$have" = "$wanted" ]; } \
    && "$venv/bin/python" -c "import tflite_micro.python.tflite_micro.runtime" 2>/dev/null; then
    exit 0
fi
python=$(command -v python3 || true)
if [ -z "$python" ]; then
    echo "error: python3 not found; install Debian's python3 and python3-venv" >&2
    exit 1
fi
echo "memtrace: creating $venv with $package (the TFLM oracle)" >&2
rm -rf "$venv"
if ! "$python" -m venv "$venv"; then
    echo "error: '$python -m venv' failed; install Debian's python3-venv" >&2
    exit 1
fi
if ! "$venv/bin/pip" install -q --disable-pip-version-check "$package"; then
    rm -rf "$venv"
    echo "error: pip could not install $package from PyPI into $venv" >&2
    exit 1
fi
"$venv/bin/python" -c "import tflite_micro.python.tflite_micro.runtime" || {
    echo "error: $package installed but its runtime does not import" >&2
    exit 1
}
