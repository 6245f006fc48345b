#!/usr/bin/env bash
# Installs the Debian packages given as arguments when any is missing.
# Runs apt-get as root, or through sudo; otherwise says exactly what to run.
set -euo pipefail

missing=()
for pkg in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$pkg")
    fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "memtrace: installing missing packages: ${missing[*]}" >&2
if ! command -v apt-get >/dev/null 2>&1; then
    echo "error: apt-get not found; install these packages by hand: ${missing[*]}" >&2
    exit 1
fi
if [ "$(id -u)" -eq 0 ]; then
    sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo=(sudo -n)
else
    echo "error: missing packages and no root rights; run as root:" >&2
    echo "       apt-get update && apt-get install -y ${missing[*]}" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
if ! "${sudo[@]}" apt-get install -y -q "${missing[@]}" >/dev/null 2>&1; then
    "${sudo[@]}" apt-get update -q >/dev/null || {
        echo "error: apt-get update failed; check the network or the package sources" >&2
        exit 1
    }
    "${sudo[@]}" apt-get install -y -q "${missing[@]}" || {
        echo "error: apt-get could not install: ${missing[*]}" >&2
        exit 1
    }
fi
