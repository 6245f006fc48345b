#!/usr/bin/env bash
# Installs what memtrace's QEMU engine needs when it is missing: QEMU 10
# (qemu-system-arm from Debian's bookworm-backports: the Cortex-M55 and TCG
# plugin API 4) and glib's headers for building the plugin. Adds the
# backports suite to apt's sources (one deb822 file) when it is not listed.
# Runs apt-get as root, or through sudo; otherwise says exactly what to run.
set -euo pipefail

qemu_ok() {
    command -v qemu-system-arm >/dev/null 2>&1 || return 1
    local major
    major=$(qemu-system-arm --version | sed -n 's/^QEMU emulator version \([0-9]*\)\..*/\1/p')
    [ -n "$major" ] && [ "$major" -ge 10 ]
}
glib_ok() { pkg-config --exists glib-2.0 2>/dev/null; }
qemu_ok && glib_ok && exit 0

if [ "$(id -u)" -eq 0 ]; then
    sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo=(sudo -n)
else
    echo "error: the QEMU engine needs qemu-system-arm 10 and libglib2.0-dev; run as root:" >&2
    echo "       add bookworm-backports to apt's sources, then" >&2
    echo "       apt-get install -t bookworm-backports qemu-system-arm && apt-get install libglib2.0-dev" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
sources=/etc/apt/sources.list.d/memtrace-bookworm-backports.sources
if ! qemu_ok; then
    if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
        echo "memtrace: adding Debian's bookworm-backports to apt's sources ($sources)" >&2
        printf '%s\n' 'Types: deb' 'URIs: http://deb.debian.org/debian' 'Suites: bookworm-backports' \
            'Components: main' 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' \
            | "${sudo[@]}" tee "$sources.tmp" >/dev/null
        "${sudo[@]}" mv "$sources.tmp" "$sources"
    fi
    echo "memtrace: installing qemu-system-arm from bookworm-backports" >&2
    "${sudo[@]}" apt-get update -q >/dev/null
    "${sudo[@]}" apt-get install -y -q -t bookworm-backports qemu-system-arm >/dev/null || {
        echo "error: apt-get could not install qemu-system-arm from bookworm-backports" >&2
        exit 1
    }
    qemu_ok || { echo "error: qemu-system-arm is older than 10 after the install" >&2; exit 1; }
fi
if ! glib_ok; then
    echo "memtrace: installing libglib2.0-dev (the plugin's headers)" >&2
    # On some images apt refuses it until libpcre2-8-0 may be downgraded to
    # the version libpcre2-dev wants.
    "${sudo[@]}" apt-get install -y -q libglib2.0-dev >/dev/null 2>&1 ||
        "${sudo[@]}" apt-get install -y -q --allow-downgrades libglib2.0-dev libpcre2-8-0=10.42-1 >/dev/null || {
            echo "error: apt-get could not install libglib2.0-dev" >&2
            exit 1
        }
fi
