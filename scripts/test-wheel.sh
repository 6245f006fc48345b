#!/usr/bin/env bash
# Installs the wheel of python/dist/ in a fresh venv and runs the Python
# API's tests (python/tests) with that venv's interpreter and a PATH that
# holds nothing but the venv: no compiler, no source-tree memtrace.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
wheel=$(ls "$root"/python/dist/memtrace-*.whl 2>/dev/null | head -n1 || true)
if [ -z "$wheel" ]; then
    echo "error: no wheel in python/dist: run make wheel" >&2
    exit 1
fi
venv=$(mktemp -d "${TMPDIR:-/tmp}/memtrace-wheel-test.XXXXXX")
trap 'rm -rf "$venv"' EXIT
python3 -m venv "$venv"
start=$(date +%s%N)
"$venv/bin/pip" install -q --disable-pip-version-check "$wheel"
installed=$(date +%s%N)
"$venv/bin/pip" install -q --disable-pip-version-check pytest pandas polars ray pyarrow
echo "memtrace: wheel $(basename "$wheel") ($(stat -c %s "$wheel") bytes) installed in" \
    "$(( (installed - start) / 1000000 )) ms" >&2
cd "$venv"
oracle=()
[ -n "${MEMTRACE_TFLM_PYTHON:-}" ] && oracle=(MEMTRACE_TFLM_PYTHON="$MEMTRACE_TFLM_PYTHON")
# The tests start their own two-node Ray cluster on this machine, local
# only: without token authentication, whatever ~/.ray holds.
env -i HOME="$HOME" PATH="$venv/bin" TMPDIR="${TMPDIR:-/tmp}" "${oracle[@]}" RAY_AUTH_MODE=disabled \
    MEMTRACE_MODELS="${MEMTRACE_MODELS:-$root/../shared/models}" \
    "$venv/bin/python" -m pytest -q -p no:cacheprovider "$root/python/tests"
