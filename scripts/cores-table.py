#!/usr/bin/env python3
"""The per-core table of docs/kernels.md, measured by memtrace itself.

For the MLPerf Tiny models and TFLM's person_detect (../shared/models), on
every Arm core (harness-c/build/<core>/, `make -C harness-c cores`) with both
kernel builds of real TFLM, and on 32-bit RISC-V with its reference kernels
(CMSIS-NN is Arm's library), runs

    memtrace verify MODEL --kernels K --target CORE --format json

and prints one Markdown row per (model, kernels, core): TFLM's own plan
(head and tail), the arena to allocate for memtrace's plan (the one `plan
--format json` reports as `arena_to_allocate`; verify proves that plan and
measures the same arena), whether the plan verified bit-exact, the
instructions of TFLM's own plan's run, and the operators whose traced O_s
differ from the Cortex-M4's.

    scripts/cores-table.py [--memtrace PATH] [--core cortex-m0 ...]
                           [--model NAME.tflite ...] [--kernels tflm ...]

MEMTRACE_TFLM_PYTHON (the host oracle) is passed on when set. Only the
standard library.
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS_DIR = ROOT.parent / "shared" / "models"
MODELS = [
    "mlperf_tiny_kws_ds_cnn_int8.tflite",
    "mlperf_tiny_vww_mobilenet_v1_0.25_96_int8.tflite",
    "mlperf_tiny_ic_resnet8_int8.tflite",
    "mlperf_tiny_ad_fc_autoencoder_int8.tflite",
    "tflm_person_detect.tflite",
]
CORES = ["cortex-m0", "cortex-m3", "cortex-m4", "cortex-m7", "cortex-m33", "riscv32"]
# Cores without CMSIS-NN (Arm's library): only the reference kernels run there.
NO_CMSIS_NN = {"riscv32"}
KERNELS = ["tflm", "cmsis-nn"]
BASE_CORE = "cortex-m4"


def default_memtrace():
    target = os.environ.get("CARGO_TARGET_DIR", str(Path.home() / ".cache/memtrace-target"))
    return str(Path(target) / "release" / "memtrace")


RUNNERS = {"tflm": "tflm-runner.elf", "cmsis-nn": "tflm-runner-cmsis.elf"}


def built(core, kernels):
    """Whether the TFLM runner of `kernels` is built for `core`."""
    return (ROOT / "harness-c" / "build" / core / RUNNERS[kernels]).is_file()


def verify(memtrace, model, kernels, core):
    """verify's JSON report, or None (with the error on stderr)."""
    cmd = [memtrace, "verify", str(MODELS_DIR / model), "--kernels", kernels,
           "--target", core, "--format", "json"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode not in (0, 1) or not out.stdout.strip():
        sys.stderr.write(f"{' '.join(cmd)}: exit {out.returncode}\n{out.stderr}\n")
        return None
    return json.loads(out.stdout)


def overlaps(report):
    """Traced O_s per operator: {index: (op, monotone bytes)}."""
    return {o["index"]: (o["op"], o["monotone_bytes"]) for o in report["traced_overlaps"]}


def differing(report, base):
    """The operators whose O_s differ from the base core's, as text; a run
    of consecutive operators with the same change is written once
    (`0-9:FULLY_CONNECTED 2→1`)."""
    if report is base:
        return "(reference)"
    ours, theirs = overlaps(report), overlaps(base)
    changes = [(i, op, theirs[i][1], b) for i, (op, b) in sorted(ours.items())
               if i in theirs and theirs[i][1] != b]
    runs = []
    for i, op, was, now in changes:
        if runs and runs[-1][1] == i - 1 and tuple(runs[-1][2:]) == (op, was, now):
            runs[-1][1] = i
        else:
            runs.append([i, i, op, was, now])
    text = [f"{a}{'' if a == b else f'-{b}'}:{op} {was}→{now}" for a, b, op, was, now in runs]
    return ", ".join(text) if text else "none"


def row(model, kernels, core, report, base):
    if report is None:
        return f"| {model} | {kernels} | {core} | — | — | — | — | failed | — |"
    ref = report["reference"]
    arena = (report.get("arena_to_allocate") or {}).get("arena") or {}
    oracle = report.get("oracle")
    exact = "yes" if report["bit_exact"] and (oracle is None or oracle["bit_exact"]) else "NO"
    verdict = exact if report["ok"] else "FAILED"
    diffs = differing(report, base) if base else "—"
    instructions = f"{ref['instructions']:,}".replace(",", " ")
    return (f"| {model} | {kernels} | {core} | {ref['head_bytes']} | {ref['tail_bytes']} | "
            f"{arena.get('bytes', '—')} | {instructions} | {verdict} | {diffs} |")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--memtrace", default=default_memtrace())
    p.add_argument("--core", action="append", choices=CORES)
    p.add_argument("--model", action="append")
    p.add_argument("--kernels", action="append", choices=KERNELS)
    args = p.parse_args()
    cores = args.core or CORES
    if BASE_CORE not in cores:
        cores = [BASE_CORE] + cores
    print("| model | kernels | core | TFLM head B | TFLM tail B | DMO arena B | instructions | "
          "bit-exact (plan, oracle) | operators whose O_s differ from the M4's (M4→core) |")
    print("|---|---|---|---:|---:|---:|---:|---|---|")
    for model in args.model or MODELS:
        short = model.removesuffix(".tflite")
        for kernels in args.kernels or KERNELS:
            runs_on = [c for c in cores if not (kernels == "cmsis-nn" and c in NO_CMSIS_NN)]
            here = [c for c in runs_on if built(c, kernels)]
            for c in runs_on:
                if c not in here:
                    sys.stderr.write(f"skipped: {kernels} on {c} (runner not built: "
                                     f"make -C harness-c cores CORES={c})\n")
            reports = {core: verify(args.memtrace, model, kernels, core) for core in here}
            base = reports.get(BASE_CORE)
            for core in here:
                print(row(short, kernels, core, reports[core], base), flush=True)


if __name__ == "__main__":
    main()
