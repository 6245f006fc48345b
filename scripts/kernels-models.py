#!/usr/bin/env python3
"""Whole models on two kernel libraries: the table of docs/kernels.md.

    scripts/kernels-models.py MEMTRACE MODEL...

For each model (`zoo:NAME` or a .tflite path) it runs `memtrace verify` on
the TFLM reference executor and on the CMSIS-NN executor, the reference
kernels' DMO plan on CMSIS-NN (`--overlap-from tflm`), and `memtrace plan`
for the lower bound with CMSIS-NN's traced O_s, and prints one Markdown row
per model. Every number comes from memtrace's JSON; nothing is computed here
but the formatting.
"""
import json
import subprocess
import sys


def memtrace(binary, *args):
    out = subprocess.run([binary, *args, "--format", "json"], capture_output=True, text=True)
    if not out.stdout.strip():
        raise SystemExit(f"memtrace {' '.join(args)} failed: {out.stderr.strip()}")
    return json.loads(out.stdout)


def verdict(report):
    clobbers = len(report["clobbers"])
    if clobbers == 0 and report["bit_exact"]:
        return "clean, bit-exact"
    first = report["clobbers"][0] if clobbers else None
    where = f"; first: {first['op']} reads {first['tensor']} byte {first['offset']}" if first else ""
    exact = "bit-exact" if report["bit_exact"] else f"{report['mismatched_bytes']} output bytes differ"
    return f"**{clobbers} clobber(s)**, {exact}{where}"


def row(binary, model):
    tflm = memtrace(binary, "verify", model)
    cmsis = memtrace(binary, "verify", model, "--kernels", "cmsis-nn")
    cross = memtrace(binary, "verify", model, "--kernels", "cmsis-nn", "--overlap-from", "tflm")
    bound = memtrace(binary, "plan", model, "--kernels", "cmsis-nn", "--overlap", "traced",
                     "--planner", "dmo-heap")
    library = cmsis["reference_kernels"]
    same = "yes" if library and library["bit_exact"] else "**no**"
    name = model.split("/")[-1]
    return (f"| {name} | {tflm['reference']['arena_bytes']:,} | {tflm['plan']['arena_bytes']:,} "
            f"| {verdict(cross)} | {cmsis['reference']['arena_bytes']:,} "
            f"| {cmsis['plan']['arena_bytes']:,} ({verdict(cmsis)}) "
            f"| {bound['lower_bound_bytes']:,} | {same} |")


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    binary = sys.argv[1]
    print("| model | TFLM greedy B | DMO, reference O_s B | that plan on CMSIS-NN "
          "| TFLM greedy + CMSIS-NN scratch B | DMO, CMSIS-NN O_s B | lower bound, CMSIS-NN O_s B "
          "| CMSIS-NN outputs = reference |")
    print("|---|---|---|---|---|---|---|---|")
    for model in sys.argv[2:]:
        print(row(binary, model), flush=True)


if __name__ == "__main__":
    main()
