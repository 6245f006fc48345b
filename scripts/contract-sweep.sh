#!/usr/bin/env bash
# The kernel memory contract over a kernel suite: its built-in layers and a
# sweep of job configurations (pointwise, 3x3 and 1xN conv, depthwise s1/s2,
# max/average pool, fully connected, add), printed as one Markdown table per
# target. docs/kernels.md ("Memory contract") quotes it for suite-cmsis.elf.
#
#   scripts/contract-sweep.sh [SUITE_NAME] [MEMTRACE]
#
# SUITE_NAME defaults to suite-cmsis (harness-c/build/<target>/SUITE_NAME.elf),
# MEMTRACE to memtrace on PATH or ~/.cache/memtrace-target/release/memtrace.
# MEMTRACE_RUN_ARGS adds options to every run (e.g. --exact-time).
set -euo pipefail

cd "$(dirname "$0")/.."
suite="${1:-suite-cmsis}"
memtrace="${2:-$(command -v memtrace || echo ~/.cache/memtrace-target/release/memtrace)}"
read -r -a extra <<< "${MEMTRACE_RUN_ARGS:-}"

jobs=(
  # pointwise (1x1) convolutions
  "op=conv2d,dtype=int8,input=1x16x16x16,filter=32x1x1x16"
  "op=conv2d,dtype=int8,input=1x15x15x6,filter=8x1x1x6"
  "op=conv2d,dtype=int8,input=1x16x16x8,filter=16x1x1x8,stride=2"
  # 3x3 and 1xN convolutions
  "op=conv2d,dtype=int8,input=1x16x16x8,filter=16x3x3x8,padding=same"
  "op=conv2d,dtype=int8,input=1x16x16x3,filter=8x3x3x3,stride=2,padding=same"
  "op=conv2d,dtype=int8,input=1x17x17x5,filter=7x3x3x5,padding=valid"
  "op=conv2d,dtype=int8,input=1x1x32x8,filter=8x1x3x8,padding=valid"
  "op=conv2d,dtype=int8,input=1x16x16x4,filter=8x3x3x4,dilation=2,padding=same"
  "op=conv2d,dtype=int8,input=2x8x8x4,filter=4x3x3x4,padding=same"
  # depthwise, stride 1 and 2
  "op=depthwise_conv2d,dtype=int8,input=1x16x16x16,filter=1x3x3x16,stride=1,padding=same"
  "op=depthwise_conv2d,dtype=int8,input=1x16x16x16,filter=1x3x3x16,stride=2,padding=same"
  "op=depthwise_conv2d,dtype=int8,input=1x12x12x6,filter=1x3x3x6,stride=1,padding=valid"
  "op=depthwise_conv2d,dtype=int8,input=1x16x16x8,filter=1x5x5x8,stride=1,padding=same"
  "op=depthwise_conv2d,dtype=int8,input=1x16x16x8,filter=1x3x3x8,stride=2,padding=valid"
  "op=depthwise_conv2d,dtype=int8,input=1x12x12x8,filter=1x3x3x16,stride=1,padding=same,depth_multiplier=2"
  "op=depthwise_conv2d,dtype=int8,input=1x16x16x4,filter=1x3x3x4,dilation=2,padding=same"
  "op=depthwise_conv2d,dtype=int8,input=1x9x9x3,filter=1x3x3x3,stride=2,padding=same"
  # pools
  "op=max_pool,dtype=int8,input=1x16x16x8,filter=2x2,stride=2"
  "op=max_pool,dtype=int8,input=1x15x15x5,filter=3x3,stride=1,padding=same"
  "op=average_pool,dtype=int8,input=1x16x16x8,filter=2x2,stride=2"
  "op=average_pool,dtype=int8,input=1x15x15x5,filter=3x3,stride=1,padding=same"
  "op=average_pool,dtype=int8,input=1x9x9x3,filter=3x3,stride=2,padding=valid"
  # fully connected
  "op=fully_connected,dtype=int8,input=1x1x1x64,filter=10x64"
  "op=fully_connected,dtype=int8,input=1x1x3x30,filter=7x30"
  "op=fully_connected,dtype=int8,input=1x1x2x33,filter=5x33"
  # add
  "op=add,dtype=int8,input=1x8x8x16"
  "op=add,dtype=int8,input=1x7x5x3"
)

# One row per layer of a `memtrace run --format json` report.
rows() {
  jq -r --arg what "$1" '.layers[] | .contract as $c |
    [ (if $what == "" then .name else $what end),
      (if $c.ok then "ok" else ([ $c | to_entries[] | select(.value | type == "object" and has("ok") and (.ok | not)) | .key ] | join(" ")) end),
      ([ $c.scratch[] | "\(.high_water_bytes)/\(.declared_bytes)" ] | join(" ")),
      ([ $c | to_entries[] | select(.value | type == "object" and has("first") and .first != null) |
         "\(.key): \(.value.first.buffer)+\(.value.first.offset) \(.value.first.size) B" +
         (if .value.first.function then " at \(.value.first.function) (\(.value.first.file):\(.value.first.line))" else "" end) ] | join("; "))
    ] | "| " + join(" | ") + " |"'
}

for target in cortex-m4 x86_64; do
  elf="harness-c/build/$target/$suite.elf"
  echo
  echo "### $target: $elf"
  echo
  echo "| layer / job | contract | scratch used/declared B | first violation |"
  echo "|---|---|---|---|"
  "$memtrace" run "$elf" "${extra[@]}" --format json 2>/dev/null | rows ""
  for job in "${jobs[@]}"; do
    "$memtrace" run "$elf" "${extra[@]}" --job "$job" --format json 2>/dev/null | rows "\`${job}\`"
  done
done
