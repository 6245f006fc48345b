#!/usr/bin/env python3
"""The per-model table of docs/verify.md, "Arena truth": every public model
of ../shared/models and the int8 zoo, run by `memtrace verify` on real TFLM
(Cortex-M4) with both kernel builds, and planned by `memtrace plan --runtime
tflm` for the lower bound.

    python3 scripts/tflm-models-table.py [MEMTRACE] [MODEL ...] > table.md

Columns: operators; the arena head TFLM's own plan used and memtrace's
`tflm-greedy` prediction of it (reference / CMSIS-NN kernels), TFLM's tail;
the DMO plan with O_s traced on each kernel build, and the lower bound for
it; the verify verdicts (clean and bit-exact on TFLM, and against PyPI
tflite-micro when installed) and the wall time of both verifies.
"""

import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS_DIR = os.path.join(ROOT, "..", "shared", "models")
ZOO = [
    "zoo:mobilenet_v1_0.25_128_int8",
    "zoo:mobilenet_v1_0.25_128_int8_zeropad",
    "zoo:sakr_cifar10",
    "zoo:tiny_unet_80x120_int8",
    "zoo:hourglass_64x64_int8",
    "zoo:mobilenet_v1_1.0_224_int8",
]
KERNELS = ["tflm", "cmsis-nn"]


def memtrace_json(exe, args):
    out = subprocess.run([exe, *args, "--format", "json"], capture_output=True, text=True)
    if out.returncode not in (0, 1) or not out.stdout:
        return None, out.stderr.strip().splitlines()[-1] if out.stderr else "no output"
    return json.loads(out.stdout), None


def verdict(r):
    if r["clobbers"]:
        c = r["clobbers"][0]
        return f"clobber at `{c['op']}`"
    if not r["bit_exact"]:
        return "DIFFERENT"
    o = r.get("oracle")
    if o and o.get("error") is None and not o.get("bit_exact"):
        return "differs from PyPI"
    return "clean, bit-exact" + (" (= PyPI)" if o and o.get("bit_exact") else "")


def row(exe, model):
    name = os.path.basename(model)
    cells = {}
    for k in KERNELS:
        t = time.time()
        v, err = memtrace_json(exe, ["verify", model, "--kernels", k])
        seconds = time.time() - t
        if v is None:
            return f"| {name} | error: {err} |"
        p, err = memtrace_json(
            exe, ["plan", model, "--runtime", "tflm", "--kernels", k, "--overlap", "traced"]
        )
        cells[k] = (v, p, seconds)
    ref, cm = cells["tflm"], cells["cmsis-nn"]
    ops = len(ref[0]["traced_overlaps"])

    def head(c):
        r = c[0]["reference"]
        mark = "" if r["planned_bytes"] == r["head_bytes"] else f" (pred. {r['planned_bytes']})"
        return f"{r['head_bytes']}{mark}"

    def lower(c):
        return str(c[1]["lower_bound_bytes"]) if c[1] else "–"

    return (
        f"| {name} | {ops} | {head(ref)} / {head(cm)} | "
        f"{ref[0]['reference']['tail_bytes']} / {cm[0]['reference']['tail_bytes']} | "
        f"{ref[0]['plan']['planned_bytes']} / {cm[0]['plan']['planned_bytes']} | "
        f"{lower(ref)} / {lower(cm)} | {verdict(ref[0])} / {verdict(cm[0])} | "
        f"{ref[2]:.0f} / {cm[2]:.0f} |"
    )


def main():
    exe = sys.argv[1] if len(sys.argv) > 1 else "memtrace"
    models = sys.argv[2:] or sorted(
        os.path.join(MODELS_DIR, f) for f in os.listdir(MODELS_DIR) if f.endswith(".tflite")
    ) + ZOO
    print(
        "| model | ops | TFLM head B (ref / CMSIS-NN) | TFLM tail B | DMO B (ref O_s / CMSIS-NN O_s) "
        "| lower bound B | verify on TFLM | seconds |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for m in models:
        print(row(exe, m), flush=True)


if __name__ == "__main__":
    main()
