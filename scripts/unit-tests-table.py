#!/usr/bin/env python3
"""CMSIS-NN's own unit tests under `memtrace check`, as the Markdown table of
docs/kernels.md ("CMSIS-NN's unit tests under memcheck").

Runs every suite `make -C harness-c/unit-tests` built
(`memtrace check SUITE.elf --format json`) and prints one row per suite:
Unity's own counts and verdict as memtrace read them from the program's
output, how the program ended, memcheck's findings by kind (lost blocks
included), the instructions it retired, and its CMSIS-NN API calls as
layers (docs/check.md, "API calls as layers"): the calls traced, the API
calls made inside them (a wrapper's kernel, an LSTM's elementwise kernels:
no layers of their own), those that break the memory contract, and the
largest traced monotone O_s of a call.

    scripts/unit-tests-table.py [--memtrace PATH] [--build-dir harness-c/build]

Only the standard library.
"""

import argparse
import collections
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def default_memtrace():
    target = os.environ.get("CARGO_TARGET_DIR", str(Path.home() / ".cache/memtrace-target"))
    return str(Path(target) / "release" / "memtrace")


def check(memtrace, elf):
    """memtrace's JSON report of one suite (its exit status is not an error
    here: findings make it non-zero)."""
    out = subprocess.run(
        [memtrace, "check", "--format", "json", str(elf)],
        capture_output=True, text=True, check=False,
    )
    if not out.stdout.strip():
        sys.exit(f"memtrace check {elf} printed no report: {out.stderr.strip()}")
    return json.loads(out.stdout)


def findings_cell(report):
    """Findings by kind, e.g. `overrun ×3, leak (lost) ×1`, or `none`."""
    memcheck = report["memcheck"]
    kinds = collections.Counter(f["kind"] for f in memcheck["findings"])
    lost = sum(1 for leak in memcheck["leaks"] if not leak["reachable"])
    if lost:
        kinds["leak (lost)"] = lost
    if report["end"]["kind"] not in ("exit",):
        kinds[report["end"]["kind"]] += 1
    return ", ".join(f"{k} ×{n}" for k, n in sorted(kinds.items())) or "none"


def calls_cells(report):
    """Calls traced as layers (of all API calls), calls breaking the memory
    contract, and the largest monotone O_s of a call with the call."""
    calls = report.get("calls") or []
    traced = [c for c in calls if c["layer"]]
    broken = sum(1 for c in calls if c["violates"])
    best = None
    for c in traced:
        overlap = c["layer"].get("overlap")
        if overlap and (best is None or overlap["monotone_bytes"] > best[0]):
            best = (overlap["monotone_bytes"], overlap["output_bytes"], c["function"])
    largest = f"{best[0]} B of {best[1]} B (`{best[2]}`)" if best else "–"
    traced_cell = f"{len(traced)}" if len(traced) == len(calls) else f"{len(traced)} of {len(calls)}"
    return traced_cell, str(inner_calls(report)), str(broken), largest


def inner_calls(report):
    """API calls made inside the traced calls (their inner calls)."""
    return sum(i["calls"] for c in report.get("calls") or [] for i in c.get("inner_calls") or [])


def unity_cell(report):
    u = report["unity"]
    if u is None:
        return "no Unity summary"
    verdict = "OK" if u["ok"] else "FAIL"
    return f"{u['tests']} Tests {u['failures']} Failures {u['ignored']} Ignored {verdict}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memtrace", default=default_memtrace())
    parser.add_argument("--build-dir", default=str(ROOT / "harness-c" / "build"))
    args = parser.parse_args()
    suites = sorted((Path(args.build_dir) / "cortex-m4" / "unit-tests").glob("test_arm_*.elf"))
    if not suites:
        sys.exit("no suites built: make -C harness-c/unit-tests")
    print("| suite | tests | Unity's result | ended | memcheck findings | instructions "
          "| calls traced | inner calls | contract broken | largest O_s |")
    print("|---|---:|---|---|---|---:|---:|---:|---:|---|")
    totals = collections.Counter()
    for elf in suites:
        r = check(args.memtrace, elf)
        end = r["end"]
        ended = f"exit {end['code']}" if end["kind"] == "exit" else end["kind"]
        tests = r["unity"]["tests"] if r["unity"] else "–"
        traced, inner, broken, largest = calls_cells(r)
        print(f"| `{elf.stem}` | {tests} | {unity_cell(r)} | {ended} | {findings_cell(r)} "
              f"| {r['instructions']:,} ".replace(",", " ")
              + f"| {traced} | {inner} | {broken} | {largest} |")
        totals["suites"] += 1
        totals["tests"] += r["unity"]["tests"] if r["unity"] else 0
        totals["with findings"] += r["memcheck"]["errors"] > 0
        totals["calls"] += len(r.get("calls") or [])
        totals["traced"] += sum(1 for c in r.get("calls") or [] if c["layer"])
        totals["inner"] += int(inner)
        totals["broken"] += int(broken)
    print()
    print(f"{totals['suites']} suites, {totals['tests']} tests; "
          f"{totals['with findings']} suites with memcheck findings; "
          f"{totals['calls']} CMSIS-NN API calls, {totals['traced']} traced as layers "
          f"({totals['inner']} more made inside them), "
          f"{totals['broken']} breaking the memory contract.")


if __name__ == "__main__":
    main()
