#!/usr/bin/env python3
"""Independent oracle for `memtrace verify`: run a .tflite model in the real,
current TensorFlow Lite Micro (PyPI package `tflite-micro`, its Python
interpreter built for the host) and in memtrace's emulated executor on the
same seeded input, and compare the output bytes.

    python tflm_oracle.py MEMTRACE_BINARY MODEL.tflite [--seed N]

Prints one JSON object: {"model", "equal", "tflm_hex", "memtrace_hex",
"max_ulp" (float outputs only), "tflm_arena_bytes" (if reported)}.
Exit 0 when the outputs are bit-exact, 1 otherwise, 2 when TFLM cannot run
the model (e.g. the uint8 micro_speech model, which current TFLM rejects).
"""
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import contextlib

import numpy as np
from tflite_micro.python.tflite_micro import runtime


def main():
    memtrace, model = sys.argv[1], sys.argv[2]
    seed = int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else 3
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
    y = interp.get_output(0)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "input.bin")
        with open(path, "wb") as f:
            f.write(x.tobytes())
        out = subprocess.run(
            [memtrace, "verify", model, "--input", path, "--format", "json"],
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
    }
    if y.dtype == np.float32 and len(mine) == len(theirs):
        a = np.frombuffer(mine, np.int32).astype(np.int64)
        b = np.frombuffer(theirs, np.int32).astype(np.int64)
        result["max_ulp"] = int(np.abs(a - b).max()) if len(a) else 0
    print(json.dumps(result))
    return 0 if result["equal"] and result["memtrace_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
