#!/usr/bin/env python3
"""Whole models on two kernel libraries, as a Markdown table.

    scripts/kernels-models.py MEMTRACE MODEL...

For each model (`zoo:NAME` or a .tflite path) it runs `memtrace verify` on
real TFLM with its reference kernels and with its CMSIS-NN kernels, the
reference kernels' DMO plan on CMSIS-NN (`--overlap-from tflm`), and
`memtrace plan` for the lower bound with CMSIS-NN's traced O_s, and prints
one Markdown row per model. Every number comes from memtrace's JSON; nothing is computed here
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
    dmo = ("--planner", "dmo-heap")
    tflm = memtrace(binary, "verify", model, *dmo)
    cmsis = memtrace(binary, "verify", model, "--kernels", "cmsis-nn", *dmo)
    cross = memtrace(binary, "verify", model, "--kernels", "cmsis-nn", "--overlap-from", "tflm",
                     *dmo)
    bound = memtrace(binary, "plan", model, "--kernels", "cmsis-nn", "--overlap", "traced", *dmo)
    same = "yes" if cmsis["output_digest"] == tflm["output_digest"] else "**no**"
    name = model.split("/")[-1]
    return (f"| {name} | {tflm['reference']['head_bytes']:,} | {tflm['plan']['planned_bytes']:,} "
            f"| {verdict(cross)} | {cmsis['reference']['head_bytes']:,} "
            f"| {cmsis['plan']['planned_bytes']:,} ({verdict(cmsis)}) "
            f"| {bound['lower_bound_bytes']:,} | {same} |")


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    binary = sys.argv[1]
    print("| model | TFLM head B | DMO, reference O_s B | that plan on CMSIS-NN "
          "| TFLM head, CMSIS-NN B | DMO, CMSIS-NN O_s B | lower bound, CMSIS-NN O_s B "
          "| CMSIS-NN outputs = reference |")
    print("|---|---|---|---|---|---|---|---|")
    for model in sys.argv[2:]:
        print(row(binary, model), flush=True)


if __name__ == "__main__":
    main()
