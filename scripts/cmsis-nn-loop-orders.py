#!/usr/bin/env python3
"""The loop orders behind docs/kernels.md, as a second method next to the traces.

Each kernel is reduced to the order of its input reads and output writes (one
byte each, int8), read off the TFLM reference kernels and the CMSIS-NN 7.0.0
sources (paths in the comments), and its monotone O_s is computed from that
order by the definition of docs/overlap.md §1. Nothing is traced: if a model
gives the traced value of docs/kernels.md's table, the loop order described
there is the one that produced it.

    scripts/cmsis-nn-loop-orders.py [--specs fixtures/kernels/sweep.specs]

prints one row per layer (MobileNet v1 0.25's five built-in layers, then the
sweep): the reference order, CMSIS-NN's Cortex-M4 (DSP) order and its x86-64
(plain C) order. Standard library only.
"""

import argparse
import math
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

BUILTIN = [
    ("conv1", "op=conv2d,input=1x128x128x3,filter=8x3x3x3,stride=2,padding=same"),
    ("dw1", "op=depthwise_conv2d,input=1x64x64x8,filter=1x3x3x8,padding=same"),
    ("conv2", "op=conv2d,input=1x64x64x8,filter=16x1x1x8,padding=same"),
    ("dw2", "op=depthwise_conv2d,input=1x64x64x16,filter=1x3x3x16,stride=2,padding=same"),
    ("conv3", "op=conv2d,input=1x32x32x16,filter=32x1x1x16,padding=same"),
]


def monotone(seq, ob, ib):
    """max(0, min over reads r after write k of OB - M_k + r, and OB - M_last + IB)."""
    best, front = None, 0
    for kind, off in seq:
        if kind == "w":
            front = max(front, off + 1)
        elif front:
            t = ob - front + off
            best = t if best is None else min(best, t)
    last = ob - front + ib
    return max(0, last if best is None else min(best, last))


class Layer:
    """A kernel-suite spec (docs/protocol.md), int8."""

    def __init__(self, text):
        kv = dict(p.split("=", 1) for p in text.split(","))
        dims = lambda s: [int(d) for d in s.split("x")]
        self.op = kv["op"]
        n, h, w, c = ([1, 1, 1] + dims(kv["input"]))[-4:]
        self.n, self.h, self.w, self.c = n, h, w, c
        f = ([1, 1, 1] + dims(kv.get("filter", "1")))[-4:]
        if self.op in ("max_pool", "average_pool"):
            f = ([1, 1] + dims(kv["filter"]))[-2:]
            self.kh, self.kw, self.co = f[0], f[1], c
        elif self.op == "fully_connected":
            self.units, self.depth, self.batches = f[2], c, n * h * w
        else:
            self.co, self.kh, self.kw = (f[0], f[1], f[2]) if self.op == "conv2d" else (c, f[1], f[2])
        s = dims(kv.get("stride", "1"))
        self.sh, self.sw = (s[0], s[0]) if len(s) == 1 else (s[0], s[1])
        self.same = kv.get("padding", "valid") == "same"
        if self.op in ("conv2d", "depthwise_conv2d", "max_pool", "average_pool"):
            if self.same:
                self.oh, self.ow = math.ceil(h / self.sh), math.ceil(w / self.sw)
                self.ph = max(0, ((self.oh - 1) * self.sh + self.kh - h) // 2)
                self.pw = max(0, ((self.ow - 1) * self.sw + self.kw - w) // 2)
            else:
                self.oh, self.ow = (h - self.kh) // self.sh + 1, (w - self.kw) // self.sw + 1
                self.ph = self.pw = 0

    def pixels(self):
        return [(b, y, x) for b in range(self.n) for y in range(self.oh) for x in range(self.ow)]

    def out(self, b, y, x, ch, per_pixel):
        return ((b * self.oh + y) * self.ow + x) * per_pixel + ch

    def taps(self, b, y, x):
        """Input byte offsets of the in-bounds taps of a window, row by row."""
        for ky in range(self.kh):
            for kx in range(self.kw):
                iy, ix = y * self.sh - self.ph + ky, x * self.sw - self.pw + kx
                if 0 <= iy < self.h and 0 <= ix < self.w:
                    yield ((b * self.h + iy) * self.w + ix) * self.c

    def sizes(self):
        if self.op == "fully_connected":
            return self.batches * self.units, self.batches * self.depth
        if self.op == "add":
            return self.n * self.h * self.w * self.c, self.n * self.h * self.w * self.c
        return self.n * self.oh * self.ow * self.co, self.n * self.h * self.w * self.c


# --- TFLM reference (tensorflow/lite/kernels/internal/reference/integer_ops) --------
def reference(l):
    seq = []
    if l.op in ("conv2d", "depthwise_conv2d", "max_pool", "average_pool"):
        # conv: b, y, x, out channel, taps, in channels; depthwise and pools:
        # b, y, x, channel, taps; one write per output element.
        for b, y, x in l.pixels():
            for oc in range(l.co):
                for t in l.taps(b, y, x):
                    chans = range(l.c) if l.op == "conv2d" else [oc]
                    seq += [("r", t + c) for c in chans]
                seq.append(("w", l.out(b, y, x, oc, l.co)))
    elif l.op == "fully_connected":
        for b in range(l.batches):
            for u in range(l.units):
                seq += [("r", b * l.depth + d) for d in range(l.depth)]
                seq.append(("w", b * l.units + u))
    elif l.op == "add":
        for i in range(l.sizes()[0]):
            seq += [("r", i), ("w", i)]
    return seq


# --- CMSIS-NN -------------------------------------------------------------------------
def pointwise_passes(l):
    """arm_convolve_1x1_s8_fast -> arm_nn_mat_mult_nt_t_s8 (both paths): output
    channels in pairs outermost, every pixel (two at a time) inside, an odd
    channel last on its own."""
    seq, pixels = [], l.n * l.h * l.w
    groups = [[2 * j, 2 * j + 1] for j in range(l.co // 2)] + ([[l.co - 1]] if l.co % 2 else [])
    for chans in groups:
        for p in range(pixels):
            seq += [("r", p * l.c + c) for c in range(l.c)]
            seq += [("w", p * l.co + oc) for oc in chans]
    return seq


def conv_im2col(l):
    """arm_convolve_s8: each pixel's window copied to scratch; every two pixels
    arm_nn_mat_mult_kernel_s8_s16 writes all their channels (reading scratch
    only); a last odd pixel on its own."""
    seq, pending = [], []

    def flush():
        for oc in range(l.co):
            seq.extend(("w", l.out(*p, oc, l.co)) for p in pending)
        pending.clear()

    for p in l.pixels():
        for t in l.taps(*p):
            seq += [("r", t + c) for c in range(l.c)]
        pending.append(p)
        if len(pending) == 2:
            flush()
    flush()
    return seq


def depthwise_groups(l, group):
    """arm_depthwise_conv_3x3_s8: per pixel, channels in groups of 4 (window
    of the group, then its 4 outputs); group = all channels models
    arm_depthwise_conv_s8_opt's DSP path (the whole window to scratch, then
    every channel of the pixel)."""
    seq = []
    for p in l.pixels():
        for g in range(0, l.c, group):
            chans = range(g, min(g + group, l.c))
            for t in l.taps(*p):
                seq += [("r", t + c) for c in chans]
            seq += [("w", l.out(*p, c, l.co)) for c in chans]
    return seq


def max_pool(l):
    """arm_max_pool_s8: the first tap copied into the output pixel (memcpy),
    every later tap compared into it in place (an update)."""
    seq = []
    for p in l.pixels():
        for t in l.taps(*p):
            for c in range(l.c):
                seq += [("r", t + c), ("w", l.out(*p, c, l.c))]
    return seq


def avg_pool_dsp(l):
    """arm_avgpool_s8 with ARM_MATH_DSP: every tap's channels summed into the
    scratch buffer, then the pixel's channels written."""
    seq = []
    for p in l.pixels():
        for t in l.taps(*p):
            seq += [("r", t + c) for c in range(l.c)]
        seq += [("w", l.out(*p, c, l.c)) for c in range(l.c)]
    return seq


def fully_connected(l, rows):
    """arm_fully_connected_s8 -> arm_nn_vec_mat_mult_t_s8, per batch: `rows`
    output units at a time (2 with DSP, 3 in plain C), leftovers one by one."""
    seq = []
    for b in range(l.batches):
        full = l.units - l.units % rows
        groups = [list(range(u, u + rows)) for u in range(0, full, rows)]
        groups += [[u] for u in range(full, l.units)]
        for g in groups:
            seq += [("r", b * l.depth + d) for d in range(l.depth)]
            seq += [("w", b * l.units + u) for u in g]
    return seq


def cmsis(l, dsp):
    if l.op == "conv2d":
        one_by_one = l.kh == l.kw == 1 and l.sh == l.sw == 1 and l.ph == l.pw == 0
        return pointwise_passes(l) if one_by_one else conv_im2col(l)
    if l.op == "depthwise_conv2d":
        if l.kh == l.kw == 3:
            return depthwise_groups(l, 4)
        return depthwise_groups(l, l.c if dsp else 1)  # x86-64: the generic kernel
    if l.op == "max_pool":
        return max_pool(l)
    if l.op == "average_pool":
        return avg_pool_dsp(l) if dsp else reference(l)  # plain C: the reference order
    if l.op == "fully_connected":
        return fully_connected(l, 2 if dsp else 3)
    return reference(l)  # arm_elementwise_add_s8: 4 elements at a time, in order


def read_specs(path):
    rows = []
    for line in Path(path).read_text().splitlines():
        spec, _, name = line.partition("#")
        if spec.strip():
            rows.append((name.strip(), spec.strip()))
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--specs", default=str(ROOT / "fixtures/kernels/sweep.specs"))
    a = p.parse_args()
    print("| layer | reference order | CMSIS-NN, Cortex-M4 (DSP) | CMSIS-NN, x86-64 (C) |")
    print("|---|---|---|---|")
    for name, spec in BUILTIN + read_specs(a.specs):
        l = Layer(spec)
        ob, ib = l.sizes()
        values = [monotone(s, ob, ib) for s in (reference(l), cmsis(l, True), cmsis(l, False))]
        print(f"| {name} | " + " | ".join(map(str, values)) + " |")


if __name__ == "__main__":
    main()
