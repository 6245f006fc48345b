"""Cells per minute of a sweep: one cell at a time through the API, against
the same cells as Ray tasks on this machine's cores. Run with the wheel
installed and Ray available: python sweep_throughput.py MODELS_DIR."""

import sys
import time
from pathlib import Path

import memtrace
from memtrace.sweep import cells, verify_cell

models_dir = Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/models")
models = sorted(models_dir.glob("*.tflite"))
kernels = ("tflm", "cmsis-nn")
grid = cells([str(m) for m in models], ["cortex-m4"], kernels, [None])

# Warm the trace cache once, so both passes below see the same state.
for cell in grid:
    verify_cell(cell)

t0 = time.monotonic()
sequential = [verify_cell(cell) for cell in grid]
t_seq = time.monotonic() - t0

result = memtrace.sweep(models, kernels=kernels)
t_ray = result.seconds

same = [(r["model"], r["kernels"], r["planned_bytes"], r["arena_to_allocate_bytes"]) for r in sequential] == [
    (r["model"], r["kernels"], r["planned_bytes"], r["arena_to_allocate_bytes"]) for r in result.table
]
print(f"{len(grid)} cells: one at a time {t_seq:.1f} s ({60 * len(grid) / t_seq:.1f} cells/min), "
      f"Ray on this machine {t_ray:.1f} s ({60 * len(grid) / t_ray:.1f} cells/min), "
      f"ratio {t_seq / t_ray:.2f}; tables equal: {same}")
