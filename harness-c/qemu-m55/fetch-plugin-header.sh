#!/bin/sh
# fetch-plugin-header.sh DIR — puts qemu-plugin.h, the TCG plugin API header
# of the installed qemu-system-arm, into DIR.
#
# Debian ships QEMU with plugin support (-plugin) but no package with the
# header, so it comes from the same source package (apt-get source, through
# a deb-src list of its own in a temporary directory: the system's apt
# sources are left as they are). Only include/qemu/qemu-plugin.h is kept;
# the header is the API's interface, the plugin (memlog.c) is ours.
set -eu
dest=$1
command -v qemu-system-arm >/dev/null || {
    echo "error: qemu-system-arm not found (apt-get install qemu-system-arm)" >&2; exit 1; }
src_pkg=$(dpkg-query -W -f='${source:Package}' qemu-system-arm)
src_ver=$(dpkg-query -W -f='${source:Version}' qemu-system-arm)
. /etc/os-release
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/lists/partial" "$tmp/src"
for suite in "$VERSION_CODENAME" "$VERSION_CODENAME-updates"; do
    printf 'deb-src http://deb.debian.org/debian %s main\n' "$suite"
done > "$tmp/sources.list"
printf 'deb-src http://deb.debian.org/debian-security %s-security main\n' "$VERSION_CODENAME" >> "$tmp/sources.list"
apt_opts="-o Dir::Etc::sourcelist=$tmp/sources.list -o Dir::Etc::sourceparts=/nonexistent \
  -o Dir::State::Lists=$tmp/lists -o APT::Sandbox::User=root"
# shellcheck disable=SC2086
apt-get -qq $apt_opts update
# shellcheck disable=SC2086
(cd "$tmp/src" && apt-get -qq $apt_opts source --download-only "$src_pkg=$src_ver")
orig=$(ls "$tmp/src"/*.orig.tar.* | head -n 1)
tar -xf "$orig" -C "$tmp/src" --wildcards '*/include/qemu/qemu-plugin.h'
mkdir -p "$dest"
cp "$tmp"/src/*/include/qemu/qemu-plugin.h "$dest/qemu-plugin.h"
echo "qemu-plugin.h of $src_pkg $src_ver -> $dest/qemu-plugin.h"
