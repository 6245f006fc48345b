#!/usr/bin/env python3
"""Reference vs CMSIS-NN O_s, side by side, as the Markdown table of docs/kernels.md.

Traces every built-in layer of suite.elf and suite-cmsis.elf
(`memtrace run ELF --format json`) and every layer of a configs file
(`memtrace run ELF --job SPEC --format json`, fixtures/kernels/sweep.specs by
default) and prints, per architecture, one row per layer: both libraries'
traced monotone and exact O_s, the CMSIS-NN kernel and its scratch buffer,
what changed, and what the algorithmic and analytic methods (which model the
TFLM reference loop nest) say next to the CMSIS-NN trace.

    scripts/kernels-table.py [--memtrace PATH] [--build-dir harness-c/build]
                             [--arch cortex-m4 --arch x86_64] [--specs FILE]

Only the standard library; needs suite-cmsis.elf (make -C harness-c with
CMSIS-NN, harness-c/README.md).
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def default_memtrace():
    target = os.environ.get("CARGO_TARGET_DIR", str(Path.home() / ".cache/memtrace-target"))
    return str(Path(target) / "release/memtrace")


def run(memtrace, elf, job=None):
    """The layers of `memtrace run ELF [--job SPEC] --format json`."""
    args = [memtrace, "run", str(elf), "--format", "json"]
    if job:
        args += ["--job", job]
    out = subprocess.run(args, capture_output=True, text=True, env={**os.environ, "CI": "1"})
    if out.returncode != 0:
        sys.exit(f"{' '.join(args)} failed ({out.returncode}):\n{out.stderr}")
    return json.loads(out.stdout)["layers"]


def read_specs(path):
    """(name, spec) per line of a configs file whose lines end in `# name`."""
    rows = []
    for line in Path(path).read_text().splitlines():
        spec, _, name = line.partition("#")
        if spec.strip():
            rows.append((name.strip() or spec.strip(), spec.strip()))
    return rows


def short_kernel(name):
    """`tflite::reference_integer_ops::ConvPerChannel` -> `ConvPerChannel`."""
    return name.rsplit("::", 1)[-1] if "<" not in name else name


def scratch_bytes(layer):
    return sum(b["size"] for b in layer["buffers"] if b["role"] == "scratch")


def change(ref, cmsis):
    dm = cmsis["monotone_bytes"] - ref["monotone_bytes"]
    de = cmsis["exact_bytes"] - ref["exact_bytes"]
    if dm < 0 or de < 0:
        return f"**shrank** {dm:+d}"
    if dm > 0 or de > 0:
        return f"grew {dm:+d}"
    return "same"


def methods(o):
    """The reference-model methods next to the CMSIS-NN trace, with the flags."""
    text = f"{o['algorithmic_bytes']} / {o['analytic_bytes']}"
    flags = " ".join(o["flags"])
    return f"{text} **{flags}**" if flags else f"{text} ok"


def table(memtrace, build, arch, specs):
    suite, cmsis = build / arch / "suite.elf", build / arch / "suite-cmsis.elf"
    for elf in (suite, cmsis):
        if not elf.exists():
            sys.exit(f"{elf} is missing: build the guests (make -C harness-c, with CMSIS-NN)")
    pairs = list(zip(run(memtrace, suite), run(memtrace, cmsis)))
    for name, spec in specs:
        (r,), (c,) = run(memtrace, suite, spec), run(memtrace, cmsis, spec)
        r, c = dict(r, name=name), dict(c, name=name)
        pairs.append((r, c))
    lines = [
        f"**{arch}** (`{suite.relative_to(ROOT) if suite.is_relative_to(ROOT) else suite}` vs `suite-cmsis.elf`)",
        "",
        "| layer | IB → OB | reference kernel | reference monotone / exact B | CMSIS-NN kernel | CMSIS-NN monotone / exact B | scratch B | change | algorithmic / analytic B vs CMSIS-NN trace |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r, c in pairs:
        assert r["name"] == c["name"] and r["params"] == c["params"], (r["name"], c["name"])
        ro, co = r["overlap"], c["overlap"]
        lines.append(
            "| {name} | {ib} → {ob} | `{rk}` | {rm} / {re} | `{ck}` ({cl}) | {cm} / {ce} | {sc} | {ch} | {me} |".format(
                name=r["name"],
                ib=ro["input_bytes"],
                ob=ro["output_bytes"],
                rk=short_kernel(r["kernel"]),
                rm=ro["monotone_bytes"],
                re=ro["exact_bytes"],
                ck=c["kernel"],
                cl=c["library"],
                cm=co["monotone_bytes"],
                ce=co["exact_bytes"],
                sc=scratch_bytes(c),
                ch=change(ro, co),
                me=methods(co),
            )
        )
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--memtrace", default=default_memtrace())
    p.add_argument("--build-dir", default=str(ROOT / "harness-c/build"))
    p.add_argument("--arch", action="append", choices=["cortex-m4", "x86_64"])
    p.add_argument("--specs", default=str(ROOT / "fixtures/kernels/sweep.specs"))
    a = p.parse_args()
    specs = read_specs(a.specs)
    build = Path(a.build_dir).resolve()
    print("\n".join(table(a.memtrace, build, arch, specs) for arch in a.arch or ["cortex-m4", "x86_64"]))


if __name__ == "__main__":
    main()
