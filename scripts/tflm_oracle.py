#!/usr/bin/env python3
"""Independent oracle for `memtrace verify`: run a .tflite model in the real,
current TensorFlow Lite Micro (PyPI package `tflite-micro`, its Python
interpreter built for the host) and in `memtrace verify` (TFLM in the
emulator) on the same seeded input, and compare the output bytes.

    python tflm_oracle.py MEMTRACE_BINARY MODEL.tflite [--seed N]

Prints one JSON object: {"model", "equal", "tflm_hex", "memtrace_hex",
"memtrace_ok", "max_ulp" (float outputs only), "tflm_arena_head_bytes" (the
"Arena allocation head" of TFLM's print_allocations, i.e. its planned
activation arena), "memtrace_greedy_bytes" and "memtrace_plan_bytes" (the
reference tflm-greedy arena and the DMO plan's arena of `memtrace verify`)}.
Exit 0 when the outputs are bit-exact, 1 otherwise, 2 when TFLM cannot run
the model (e.g. the uint8 micro_speech model, which current TFLM rejects).
"""
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
from tflite_micro.python.tflite_micro import runtime


def arena_head_bytes(interp):
    """TFLM's planned arena, read from print_allocations(), which the C++
    side prints straight to the process's stdout or stderr."""
    with tempfile.TemporaryFile(mode="w+b") as log:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            interp.print_allocations()
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
        log.seek(0)
        text = log.read().decode(errors="replace")
    m = re.search(r"Arena allocation head (\d+) bytes", text)
    return int(m.group(1)) if m else None


def main():
    memtrace, model = sys.argv[1], sys.argv[2]
    seed = int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else 3
    # Arguments after `--` go to `memtrace verify` (e.g. --kernels cmsis-nn).
    extra = sys.argv[sys.argv.index("--") + 1:] if "--" in sys.argv else []
    try:
        interp = runtime.Interpreter.from_file(model, arena_size=4 * 1024 * 1024)
    except RuntimeError as e:
        print(json.dumps({"model": model, "error": str(e)}))
        return 2
    d = interp.get_input_details(0)
    rng = np.random.default_rng(seed)
    if d["dtype"] == np.float32:
        x = rng.uniform(-1, 1, d["shape"]).astype(np.float32)
    else:
        info = np.iinfo(d["dtype"])
        x = rng.integers(info.min, info.max + 1, d["shape"]).astype(d["dtype"])
    interp.set_input(x, 0)
    interp.invoke()
    head = arena_head_bytes(interp)
    y = interp.get_output(0)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "input.bin")
        with open(path, "wb") as f:
            f.write(x.tobytes())
        out = subprocess.run(
            [memtrace, "verify", model, "--input", path, "--no-oracle", "--format", "json",
             *extra],
            capture_output=True, text=True, env=dict(os.environ, CI="1"),
        )
    report = json.loads(out.stdout)
    mine = bytes.fromhex(report["output_hex"])
    theirs = y.tobytes()
    result = {
        "model": model,
        "equal": mine == theirs,
        "tflm_hex": theirs.hex(),
        "memtrace_hex": mine.hex(),
        "memtrace_ok": report["clobbers"] == [] and report["bit_exact"],
        "tflm_arena_head_bytes": head,
        "memtrace_greedy_bytes": report["reference"]["planned_bytes"],
        "memtrace_plan_bytes": report["plan"]["planned_bytes"],
    }
    if y.dtype == np.float32 and len(mine) == len(theirs):
        a = np.frombuffer(mine, np.int32).astype(np.int64)
        b = np.frombuffer(theirs, np.int32).astype(np.int64)
        result["max_ulp"] = int(np.abs(a - b).max()) if len(a) else 0
    print(json.dumps(result))
    return 0 if result["equal"] and result["memtrace_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
