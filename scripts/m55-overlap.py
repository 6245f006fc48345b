#!/usr/bin/env python3
"""O_s of CMSIS-NN's Helium (MVE) kernels: the kernel suite built for the
Cortex-M55, run in QEMU's mps3-an547 machine under the memlog TCG plugin
(harness-c/qemu-m55/), its accesses turned into each layer's monotone and
exact O_s with the definitions of docs/overlap.md section 1 (the same
arithmetic as overlap/src/empirical.rs), next to memtrace's Cortex-M4 trace
of the same layer.

    make -C harness-c/qemu-m55                      # plugin + M55 suite
    scripts/m55-overlap.py                          # the built-in layers
    scripts/m55-overlap.py --job 'op=add,dtype=int8,input=1x8x8x16'
    scripts/m55-overlap.py --job SPEC --job SPEC --json out.json

A job is first run by memtrace on the Cortex-M4 suite (--m4-elf): its JSON
gives the layer's resolved spec (output shape, padding), which this script
writes into a copy of the M55 ELF's job mailbox, and the Cortex-M4 O_s to
compare with. Without memtrace (--no-compare) only the built-in layers run.

Exit status: 0 when every run ended with the guest's exit code 0 (the suite
compares each CMSIS-NN output with the TFLM reference kernel's, bit for
bit, and exits 5 on a difference), 1 otherwise.
"""
import argparse
import array
import bisect
import collections
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HARNESS = os.path.join(ROOT, "harness-c")

# memtrace.h
CMD_LAYER_BEGIN, CMD_BUFFER, CMD_LAYER_END, CMD_EXIT, CMD_REASON = 1, 2, 3, 4, 5
ROLES = {0: "input", 1: "output", 2: "weights", 3: "bias", 4: "scratch"}
# memtrace_job.h
JOB_MAGIC, JOB_WORDS = 0x4A4F4231, 48
OPS = {"conv2d": 1, "depthwise_conv2d": 2, "max_pool": 3, "average_pool": 4,
       "fully_connected": 5, "add": 6, "relu": 7, "matmul": 8, "transpose_conv": 9,
       "concatenation": 10, "pad": 11}
DTYPES = {"f32": 1, "int8": 2}
PADDINGS = {"same": 1, "valid": 2}
ACTIVATIONS = {"none": 0, "relu": 1, "relu6": 2}


class Elf:
    """Sections and symbols of a little-endian ELF32 file."""

    def __init__(self, path):
        with open(path, "rb") as f:
            self.data = f.read()
        d = self.data
        if d[:4] != b"\x7fELF" or d[4] != 1 or d[5] != 1:
            raise SystemExit(f"{path}: not a little-endian ELF32 file")
        shoff, = struct.unpack_from("<I", d, 0x20)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", d, 0x2E)
        raw = [struct.unpack_from("<IIIIIIIIII", d, shoff + i * shentsize) for i in range(shnum)]
        names = raw[shstrndx]
        self.sections = []
        for s in raw:
            name = d[names[4] + s[0]:d.index(b"\0", names[4] + s[0])].decode()
            self.sections.append({"name": name, "type": s[1], "addr": s[3], "offset": s[4],
                                  "size": s[5], "link": s[6], "entsize": s[9]})
        self.symbols = {}
        for s in self.sections:
            if s["type"] != 2:  # SHT_SYMTAB
                continue
            strtab = self.sections[s["link"]]
            for i in range(s["size"] // 16):
                st_name, value, size, _info, _other, _shndx = struct.unpack_from(
                    "<IIIBBH", d, s["offset"] + i * 16)
                if st_name:
                    o = strtab["offset"] + st_name
                    self.symbols[d[o:d.index(b"\0", o)].decode()] = (value, size)

    def symbol(self, name):
        if name not in self.symbols:
            raise SystemExit(f"the ELF has no symbol {name}")
        return self.symbols[name][0]

    def file_offset(self, addr):
        for s in self.sections:
            if s["type"] == 1 and s["addr"] <= addr < s["addr"] + s["size"]:  # PROGBITS
                return s["offset"] + addr - s["addr"]
        return None

    def cstring(self, addr):
        o = self.file_offset(addr) if addr else None
        if o is None:
            return None  # built at run time: not in the file
        return self.data[o:self.data.index(b"\0", o)].decode(errors="replace")


def job_words(spec, seed):
    """memtrace_job.h's mailbox from the `spec` object of memtrace's JSON."""
    w = [0] * JOB_WORDS
    w[0] = JOB_MAGIC
    w[1] = OPS[spec["op"]]
    w[2] = DTYPES[spec["dtype"]]
    for i in range(4):
        w[3 + i] = spec["input"][i]
        w[7 + i] = spec["filter"][i]
        w[11 + i] = spec["output"][i]
    w[15], w[16] = spec["stride"]
    w[17], w[18] = spec["dilation"]
    w[19] = PADDINGS[spec["padding"]]
    w[20], w[21] = spec["pad"]
    w[22] = spec["depth_multiplier"]
    w[23] = ACTIVATIONS[spec["activation"]]
    w[24] = seed
    w[25] = spec.get("axis") or 0
    input2 = spec.get("input2") or [0, 0, 0, 0]
    paddings = spec.get("paddings") or {"before": [0] * 4, "after": [0] * 4}
    for i in range(4):
        w[26 + i] = input2[i]
        w[30 + i] = paddings["before"][i]
        w[34 + i] = paddings["after"][i]
    return w


def disassembly(elf_path, objdump):
    """PC -> (function, mnemonic) for every instruction, MVE decoded."""
    out = subprocess.run([objdump, "-d", "--no-show-raw-insn", "-m", "armv8.1-m.main", elf_path],
                         check=True, capture_output=True, text=True).stdout
    table, func = {}, "?"
    for line in out.splitlines():
        m = re.match(r"^[0-9a-f]+ <(.+)>:$", line)
        if m:
            func = m.group(1)
            continue
        m = re.match(r"^\s+([0-9a-f]+):\t(\S+)", line)
        if m:
            table[int(m.group(1), 16)] = (func, m.group(2))
    return table


def run_qemu(args, elf_path, ranges, workdir):
    """Runs the guest under memlog; returns (records, port word values, seconds, instructions)."""
    log = os.path.join(workdir, "accesses.bin")
    unimp = os.path.join(workdir, "unimp.log")
    plugin = ",".join([args.plugin, f"out={log}"] + [f"range={lo:#x}:{hi:#x}" for lo, hi in ranges])
    cmd = [args.qemu, "-M", "mps3-an547", "-nographic", "-monitor", "none", "-serial", "none",
           "-kernel", elf_path, "-plugin", plugin, "-d", "unimp", "-D", unimp]
    start = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    seconds = time.monotonic() - start
    m = re.search(r"memlog: (\d+) instructions, (\d+) accesses logged", p.stderr)
    if p.returncode != 0 or not m:
        raise SystemExit(f"QEMU failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr}")
    records = array.array("I")
    with open(log, "rb") as f:
        records.frombytes(f.read())
    if sys.byteorder != "little":
        records.byteswap()
    port = []
    with open(unimp) as f:
        for line in f:
            w = re.search(r"unimplemented device write \(size 4, offset 0x([0-9a-f]+), value 0x([0-9a-f]+)\)", line)
            if w:
                port.append((int(w.group(1), 16), int(w.group(2), 16)))
    return records, port, seconds, int(m.group(1))


def decode(records, port, port_base, elf):
    """Splits the access log into layers with the port's commands."""
    addrs, pcs, infos = records[0::3], records[1::3], records[2::3]
    port_idx = [i for i, a in enumerate(addrs) if port_base <= a < port_base + 8]
    if len(port_idx) != len(port):
        raise SystemExit(f"{len(port_idx)} port stores in the plugin log, {len(port)} in QEMU's unimp log")
    layers, fifo, layer, exit_code, reason = [], [], None, None, None

    def ptr():
        lo, hi = fifo.pop(0), fifo.pop(0)
        return lo | hi << 32

    for i, (offset, value) in zip(port_idx, port):
        if offset == 0:
            fifo.append(value)
            continue
        if value == CMD_LAYER_BEGIN:
            name, op, params = ptr(), ptr(), ptr()
            layer = {"name": elf.cstring(name), "op": elf.cstring(op), "params": elf.cstring(params),
                     "buffers": [], "begin": i + 1}
        elif value == CMD_BUFFER:
            bid, role = fifo.pop(0), fifo.pop(0)
            base = ptr()
            size, elem = fifo.pop(0), fifo.pop(0)
            name = ptr()
            layer["buffers"].append({"id": bid, "role": ROLES.get(role, str(role)), "base": base,
                                     "size": size, "elem_size": elem, "name": elf.cstring(name)})
        elif value == CMD_LAYER_END:
            b = layer["begin"]
            layer["accesses"] = [(addrs[j], pcs[j], infos[j] & 0xFFFF, infos[j] >> 16)
                                 for j in range(b, i) if not port_base <= addrs[j] < port_base + 8]
            del layer["begin"]
            layers.append(layer)
            layer = None
        elif value == CMD_EXIT:
            exit_code = struct.unpack("<i", struct.pack("<I", fifo.pop(0)))[0]
        elif value == CMD_REASON:
            reason = elf.cstring(ptr()) or "(reason built at run time)"
        if fifo:
            raise SystemExit(f"command {value} left {len(fifo)} FIFO words (docs/protocol.md)")
    return layers, exit_code, reason


def overlap(accesses, inp, out):
    """Monotone and exact O_s of (input, output), docs/overlap.md section 1."""
    ib, ob = inp["size"], out["size"]
    in_lo, out_lo = inp["base"], out["base"]
    max_end, mono_min, front_seq, front_val = 0, None, [], []
    last_read = [0] * ib
    for seq, (a, _pc, size, store) in enumerate(accesses):
        if store:
            lo, hi = max(a, out_lo) - out_lo, min(a + size, out_lo + ob) - out_lo
            if lo < hi and hi > max_end:
                max_end = hi
                front_seq.append(seq)
                front_val.append(hi)
        else:
            lo, hi = max(a, in_lo) - in_lo, min(a + size, in_lo + ib) - in_lo
            if lo < hi:
                if max_end > 0:
                    c = ob - max_end + lo
                    mono_min = c if mono_min is None else min(mono_min, c)
                for r in range(lo, hi):
                    last_read[r] = seq + 1
    if not front_seq:
        return {"monotone_bytes": ib, "exact_bytes": ib}
    cap = ob - max_end + ib
    monotone = max(0, cap if mono_min is None else min(mono_min, cap))
    best = cap
    for r, last in enumerate(last_read):
        if last:
            k = bisect.bisect_left(front_seq, last - 1)  # writes strictly before the read
            if k:
                best = min(best, r + ob - front_val[k - 1])
    return {"monotone_bytes": monotone, "exact_bytes": max(0, best)}


def in_buffer(a, b):
    return b["base"] <= a < b["base"] + b["size"]


def describe(layer, dis):
    """Which functions and instructions made the layer's buffer accesses."""
    bufs = layer["buffers"]
    funcs, mnems = collections.Counter(), collections.Counter()
    mve = total = 0
    for a, pc, _size, _store in layer["accesses"]:
        if not any(in_buffer(a, b) for b in bufs):
            continue
        func, mnem = dis.get(pc, ("?", "?"))
        funcs[func] += 1
        mnems[mnem] += 1
        total += 1
        mve += mnem.startswith("v")
    return {"accesses": total, "mve_accesses": mve, "functions": funcs.most_common(),
            "instructions": mnems.most_common()}


def memtrace_m4(args, job):
    cmd = [args.memtrace, "run", args.m4_elf, "--format", "json", "--exact-time"]
    if job:
        cmd += ["--job", job, "--seed", str(args.seed)]
    start = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.monotonic() - start
    if p.returncode not in (0,):
        raise SystemExit(f"memtrace failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr}")
    report = json.loads(p.stdout)
    report["seconds"] = seconds
    return report


def one_run(args, job, dis, elf):
    m4 = memtrace_m4(args, job) if args.compare else None
    with tempfile.TemporaryDirectory(prefix="m55-overlap-") as work:
        elf_path = args.elf
        if job:
            if not m4:
                raise SystemExit("--job needs memtrace's Cortex-M4 run for the resolved spec (drop --no-compare)")
            spec = m4["layers"][0]["spec"]
            patched = bytearray(elf.data)
            at = elf.file_offset(elf.symbol("memtrace_job"))
            if at is None:
                raise SystemExit("memtrace_job has no bytes in the file (link with qemu-m55/an547.ld)")
            struct.pack_into("<48i", patched, at, *job_words(spec, args.seed))
            elf_path = os.path.join(work, "suite-job.elf")
            with open(elf_path, "wb") as f:
                f.write(patched)
        arena = (elf.symbol("memtrace_arena"), elf.symbol("memtrace_arena_end"))
        port = elf.symbol("memtrace_port")
        records, words, seconds, insns = run_qemu(args, elf_path, [arena, (port, port + 8)], work)
    layers, exit_code, reason = decode(records, words, port, elf)
    rows = []
    m4_layers = {l["name"]: l for l in m4["layers"]} if m4 else {}
    for layer in layers:
        ins = [b for b in layer["buffers"] if b["role"] == "input"]
        outs = [b for b in layer["buffers"] if b["role"] == "output"]
        row = {"name": layer["name"] or "?", "params": layer["params"], "kernel": describe(layer, dis),
               "buffers": [{k: v for k, v in b.items() if k != "base"} for b in layer["buffers"]]}
        if ins and outs:
            row["overlap"] = dict(overlap(layer["accesses"], ins[0], outs[0]),
                                  input=ins[0]["name"], output=outs[0]["name"],
                                  input_bytes=ins[0]["size"], output_bytes=outs[0]["size"])
            if len(ins) > 1:
                row["input2_overlap"] = dict(overlap(layer["accesses"], ins[1], outs[0]),
                                             input=ins[1]["name"], output=outs[0]["name"])
        ref = m4_layers.get(row["name"])
        if ref:
            row["cortex_m4"] = {"kernel": ref.get("kernel"), "library": ref.get("library"),
                                "instructions": ref.get("instructions"),
                                "overlap": {k: ref["overlap"][k] for k in ("monotone_bytes", "exact_bytes")}
                                if ref.get("overlap") else None}
            if ref.get("input2_overlap"):
                row["cortex_m4"]["input2_overlap"] = {k: ref["input2_overlap"][k]
                                                      for k in ("monotone_bytes", "exact_bytes")}
        rows.append(row)
    run = {"job": job, "exit_code": exit_code, "reason": reason, "qemu_seconds": round(seconds, 3),
           "instructions": insns, "instructions_per_second": round(insns / seconds) if seconds else None,
           "accesses_logged": len(records) // 3, "layers": rows}
    if m4:
        run["cortex_m4_seconds"] = round(m4["seconds"], 3)
        run["cortex_m4_instructions"] = m4.get("instructions")
    return run


def fmt_os(o):
    return f"{o['monotone_bytes']} / {o['exact_bytes']}" if o else "-"


def print_run(run):
    print(f"## {run.get('label') or run['job'] or 'built-in layers'}" + (f" (`{run['job']}`)" if run.get("label") else ""))
    print(f"guest exit code {run['exit_code']}" + (f" ({run['reason']})" if run["reason"] else "")
          + f"; QEMU + memlog: {run['instructions']} instructions in {run['qemu_seconds']} s "
          f"({run['instructions_per_second'] / 1e6:.1f} M/s), {run['accesses_logged']} accesses logged"
          + (f"; memtrace on Cortex-M4: {run['cortex_m4_instructions']} instructions in "
             f"{run['cortex_m4_seconds']} s" if "cortex_m4_seconds" in run else ""))
    print()
    print("| layer | IB → OB | M55 kernel (MVE share of accesses) | M55 monotone / exact B "
          "| M4 kernel | M4 monotone / exact B |")
    print("|---|---|---|---|---|---|")
    for r in run["layers"]:
        o = r.get("overlap")
        k = r["kernel"]
        func = k["functions"][0][0] if k["functions"] else "-"
        share = f"{100 * k['mve_accesses'] / k['accesses']:.0f} %" if k["accesses"] else "-"
        m4 = r.get("cortex_m4") or {}
        size = f"{o['input_bytes']} → {o['output_bytes']}" if o else "-"
        line = (f"| {r['name']} | {size} | `{func}` ({share}) | {fmt_os(o)} | "
                f"{('`' + m4['kernel'] + '`') if m4.get('kernel') else '-'} | {fmt_os(m4.get('overlap'))} |")
        print(line)
        if r.get("input2_overlap"):
            print(f"| {r['name']} (input2) | | | {fmt_os(r['input2_overlap'])} | | "
                  f"{fmt_os(m4.get('input2_overlap'))} |")
    print()
    for r in run["layers"]:
        top = ", ".join(f"{m} {n}" for m, n in r["kernel"]["instructions"][:8])
        print(f"- {r['name']}: accesses by instruction: {top}")
    print()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--job", action="append", default=[], help="a layer spec, as memtrace run --job (repeatable)")
    ap.add_argument("--specs", help="a file of job specs, one a line, as fixtures/kernels/sweep.specs "
                    "(`# name` after a spec labels it)")
    ap.add_argument("--seed", type=int, default=1, help="data seed of a job (memtrace's default: 1)")
    ap.add_argument("--elf", default=os.path.join(HARNESS, "build/cortex-m55/suite-cmsis.elf"))
    ap.add_argument("--m4-elf", default=os.path.join(HARNESS, "build/cortex-m4/suite-cmsis.elf"))
    ap.add_argument("--plugin", default=os.path.join(HARNESS, "build/qemu-m55/libmemlog.so"))
    ap.add_argument("--qemu", default="qemu-system-arm")
    ap.add_argument("--objdump", default="arm-none-eabi-objdump")
    ap.add_argument("--memtrace", default=os.environ.get("MEMTRACE") or shutil.which("memtrace")
                    or os.path.expanduser("~/.cache/memtrace-target/release/memtrace"))
    ap.add_argument("--no-compare", dest="compare", action="store_false",
                    help="do not run memtrace on the Cortex-M4 suite (built-in layers only)")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()
    for path in (args.elf, args.plugin) + ((args.m4_elf,) if args.compare else ()):
        if not os.path.exists(path):
            raise SystemExit(f"{path} not found: make -C harness-c/qemu-m55 (and make -C harness-c for the M4 suite)")
    jobs = [(j, None) for j in args.job]
    if args.specs:
        with open(args.specs) as f:
            for line in f:
                spec, _, label = line.partition("#")
                if spec.strip():
                    jobs.append((spec.strip(), label.strip() or None))
    elf = Elf(args.elf)
    dis = disassembly(args.elf, args.objdump)
    runs = []
    for job, label in jobs or [(None, None)]:
        run = one_run(args, job, dis, elf)
        if label:
            run["label"] = label
        runs.append(run)
    for run in runs:
        print_run(run)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=1)
    return 0 if all(r["exit_code"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
