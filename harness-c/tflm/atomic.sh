#!/bin/sh
# atomic.sh — writes one file of the shared TFLM cache so that no reader
# ever sees it half-made: under a name of this process, renamed into place.
# Two builds of the same cache entry (two clones, two terminals) may both
# compile an object; each rename is whole, so `ar` reads complete objects.
# A build stopped by a signal removes its temporary file.
#
#   atomic.sh cc OUT.o COMPILER ARGS...   compile to OUT.o
#   atomic.sh ar OUT.a AR OBJECTS...      archive OBJECTS as OUT.a
set -eu
mode=$1 out=$2
shift 2
tmp="$out.$$.tmp"
trap 'rm -f "$tmp"' EXIT
trap 'exit 130' INT TERM HUP
case $mode in
cc)
    "$@" -o "$tmp"
    ;;
ar)
    ar=$1
    shift
    "$ar" rcs "$tmp" "$@"
    ;;
*)
    echo "atomic.sh: unknown mode $mode" >&2
    exit 2
    ;;
esac
mv -f "$tmp" "$out"
