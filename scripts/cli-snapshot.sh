#!/usr/bin/env bash
# Runs the README's examples (and table/regress) with one memtrace binary and
# writes their outputs, with wall-clock figures removed, into one folder, so
# that two builds can be compared byte for byte:
#
#   scripts/cli-snapshot.sh OLD_BINARY old/ && scripts/cli-snapshot.sh NEW_BINARY new/
#   diff -r old new
set -euo pipefail
bin=$(realpath "$1"); out=$(realpath -m "$2")
# A fresh trace cache: runs taken from an earlier one say so in their reports.
MEMTRACE_CACHE_DIR=$(mktemp -d)
export MEMTRACE_CACHE_DIR
trap 'rm -rf "$MEMTRACE_CACHE_DIR"' EXIT
cd "$(dirname "$0")/.."
mkdir -p "$out"
suite=harness-c/build/cortex-m4/suite.elf
# Timings differ from run to run; everything else must not.
untimed() { grep -v -E '"(seconds|untraced_seconds|configs_per_second)"|configs/s| s$' || true; }
"$bin" run "$suite" --layer conv2 > "$out/run-conv2.txt"
"$bin" run "$suite" \
    --job 'op=depthwise_conv2d,dtype=f32,input=1x112x112x96,filter=1x3x3x96,stride=2,padding=same' \
    --plot "$out/table1.png" --events "$out/table1.parquet" --format json > "$out/run-table1.json"
"$bin" validate "$suite" --op all --configs 10 --format json 2>/dev/null | untimed > "$out/validate.json"
"$bin" validate "$suite" --op all --configs 10 --format csv > "$out/validate.csv" 2>/dev/null
"$bin" plan zoo:mobilenet_v1_0.25_128_int8 --overlap traced > "$out/plan.txt"
"$bin" plan zoo:mobilenet_v1_0.25_128_int8 --format json | untimed > "$out/plan.json"
"$bin" verify zoo:mobilenet_v1_0.25_128_int8 --format json | untimed > "$out/verify.json"
"$bin" zoo export mobilenet_v1_0.25_128_int8 "$out/mb.tflite" 2> "$out/zoo-export.txt"
"$bin" table "$suite" --out "$out/baseline.json" 2>/dev/null
"$bin" regress "$out/baseline.json" harness-c/build/cortex-m4/suite-modified.elf \
    > "$out/regress.md" 2>/dev/null || true
sed -i "s|$out|OUT|g" "$out"/*.json "$out"/*.md "$out"/*.txt
echo "snapshot of $bin in $out"
