#!/usr/bin/env python3
"""The CMSIS-NN release history of docs/kernels.md, measured by memtrace itself.

Builds the kernel suite against every CMSIS-NN release beside the repository
(../shared/third_party: v4.0.0, v5.0.0, v6.0.0, v7.0.0 and the development
head), on both targets, with harness-c's Makefile (one build directory per
release), writes a `memtrace table` baseline of each (the built-in MobileNet
layers, fixtures/kernels/sweep.specs and fixtures/kernels/unaligned.specs),
runs `memtrace regress` between adjacent releases, and prints per target:
the traced O_s, the memory contract with scratch used/declared, and the
instruction count of every layer in every release, then what each regress
found.

    scripts/cmsis-releases-table.py [--memtrace PATH] [--build-root DIR]
                                    [--arch cortex-m4 --arch x86_64]

Only the standard library.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
THIRD_PARTY = ROOT.parent / "shared" / "third_party"
RELEASES = [
    ("v4.0.0", "cmsis-nn-v4.0.0"),
    ("v5.0.0", "cmsis-nn-v5.0.0"),
    ("v6.0.0", "cmsis-nn-v6.0.0"),
    ("v7.0.0", "cmsis-nn"),
    ("head", "cmsis-nn-main"),
]
SPECS = [ROOT / "fixtures/kernels/sweep.specs", ROOT / "fixtures/kernels/unaligned.specs"]


def target_dir():
    return Path(os.environ.get("CARGO_TARGET_DIR", str(Path.home() / ".cache/memtrace-target")))


def row_names():
    """`config N` -> the name after `#` in the specs files, in table order."""
    names, i = {}, 0
    for path in SPECS:
        for line in path.read_text().splitlines():
            spec, _, comment = line.partition("#")
            if spec.strip():
                i += 1
                names[f"config {i}"] = comment.strip() or f"config {i}"
    return names


def build(root, release, checkout, arch):
    elf = root / release / arch / "suite-cmsis.elf"
    subprocess.run(
        ["make", "-s", "-C", str(ROOT / "harness-c"), "-j2", f"BUILD={root / release}",
         f"CMSIS_NN_DIR={checkout}", str(elf)],
        check=True, stdout=subprocess.DEVNULL)
    return elf


def memtrace(binary, *args):
    out = subprocess.run([binary, *map(str, args)], capture_output=True, text=True,
                         env={**os.environ, "CI": "1"})
    return out


def table(binary, elf, out):
    specs = Path(out).with_suffix(".specs")
    specs.write_text("".join(s.read_text() for s in SPECS))
    o = memtrace(binary, "table", elf, "--out", out, "--configs-file", specs)
    if o.returncode != 0:
        sys.exit(f"memtrace table {elf} failed:\n{o.stderr}")
    return json.loads(Path(out).read_text())


def contract_cell(row):
    c = row.get("contract")
    if c is None:
        return "-"
    scratch = ", ".join(f"{s['used_bytes']}/{s['declared_bytes']}" for s in c["scratch"])
    broken = [b["rule"] for b in c["broken"]]
    text = "ok" if not broken else " ".join(broken)
    return f"{text}; {scratch}" if scratch else text


def os_cell(row):
    m, e = row["monotone_bytes"], row["exact_bytes"]
    return str(m) if m == e else f"{m} / {e}"


def print_tables(arch, baselines, names):
    releases = [r for r, _ in RELEASES if r in baselines]
    first = baselines[releases[0]]["rows"]
    header = "| layer | " + " | ".join(releases) + " |"
    rule = "|---|" + "---|" * len(releases)
    for title, cell in [
        ("traced O_s B (monotone, or monotone / exact)", os_cell),
        ("memory contract (broken rules; scratch used/declared B)", contract_cell),
        ("instructions", lambda r: str(r.get("instructions", "-"))),
    ]:
        print(f"\n**{arch}: {title}**\n")
        print(header)
        print(rule)
        for i, row in enumerate(first):
            name = names.get(row["name"], row["name"])
            cells = []
            for r in releases:
                rows = baselines[r]["rows"]
                cells.append(cell(rows[i]) if i < len(rows) else "-")
            print(f"| {name} | " + " | ".join(cells) + " |")


def print_regress(binary, arch, root, tables, names):
    releases = [r for r, _ in RELEASES if r in tables]
    pairs = list(zip(releases, releases[1:]))
    print(f"\n**{arch}: `memtrace regress` between adjacent releases**\n")
    for old, new in pairs:
        elf = root / new / arch / "suite-cmsis.elf"
        o = memtrace(binary, "regress", tables[old], elf, "--format", "json")
        report = json.loads(o.stdout)
        c = report["counts"]
        print(f"- {old} → {new}: exit {o.returncode}; O_s {c['shrank']} shrank, "
              f"{c['grew']} grew, {c['same']} same; {c['contract_broken']} broke the "
              f"contract; {c['slower']} slower, {c['faster']} faster (> 2 % instructions)")
        for row in report["rows"]:
            for ch in row["changes"]:
                if ch["kind"] == "instructions":
                    continue
                print(f"  - {names.get(row['name'], row['name'])}: {describe(ch)}")


def describe(ch):
    k = ch["kind"]
    if k == "overlap":
        return f"{ch['value']} O_s {ch['old']} → {ch['new']} B"
    if k == "new_violation":
        return f"new contract violation {ch['rule']}: {ch['first']}"
    if k == "violation_gone":
        return f"{ch['rule']} no longer violated"
    if k == "scratch":
        d, u = ch["declared"], ch["used"]
        return f"scratch `{ch['buffer']}` declared {d[0]} → {d[1]} B, used {u[0]} → {u[1]} B"
    if k == "kernel":
        return f"kernel {ch['before']} → {ch['after']}"
    return json.dumps(ch)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--memtrace", default=str(target_dir() / "release/memtrace"))
    ap.add_argument("--build-root", type=Path, default=target_dir() / "tmp/cmsis-releases")
    ap.add_argument("--arch", action="append")
    args = ap.parse_args()
    names = row_names()
    with tempfile.TemporaryDirectory() as tmp:
        for arch in args.arch or ["cortex-m4", "x86_64"]:
            baselines, tables = {}, {}
            for release, checkout in RELEASES:
                if not (THIRD_PARTY / checkout).is_dir():
                    print(f"{release}: not at {THIRD_PARTY / checkout}, skipped", file=sys.stderr)
                    continue
                elf = build(args.build_root, release, THIRD_PARTY / checkout, arch)
                tables[release] = Path(tmp) / f"{release}-{arch}.json"
                baselines[release] = table(args.memtrace, elf, tables[release])
            print_tables(arch, baselines, names)
            print_regress(args.memtrace, arch, args.build_root, tables, names)


if __name__ == "__main__":
    main()
