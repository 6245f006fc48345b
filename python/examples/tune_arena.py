"""A small architecture search on Ray Tune with memtrace's verified arena as
the constraint: among candidate models (here the shared `.tflite` models and
memtrace's int8 zoo, exported), find the one with the most parameters whose
plan verifies on real TFLM and whose arena to allocate fits the budget.

With generated Keras models, the candidate is the converter:
`memtrace.verify(tf.lite.TFLiteConverter.from_keras_model(m), ...)`.

Run with the wheel, Ray Tune and pyarrow installed:
python tune_arena.py MODELS_DIR [BUDGET_BYTES]"""

import subprocess
import sys
import tempfile
from pathlib import Path

from ray import tune

import memtrace

models_dir = Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/models")
budget = int(sys.argv[2]) if len(sys.argv) > 2 else 128 * 1024
exported = Path(tempfile.mkdtemp(prefix="memtrace-zoo-"))
for name in ("mobilenet_v1_0.25_128_int8", "tiny_unet_80x120_int8"):
    subprocess.run([str(memtrace.executable()), "zoo", "export", name,
                    str(exported / f"{name}.tflite")], check=True, capture_output=True)
candidates = sorted(str(p) for p in [*models_dir.glob("*int8*.tflite"), *exported.glob("*.tflite")])


def parameters(model: str) -> int:
    """Constant bytes in the model file: a stand-in for its capacity."""
    return Path(model).stat().st_size


def objective(config):
    proof = memtrace.verify(config["model"], kernels=config["kernels"], oracle=False)
    arena = proof.arena_to_allocate_bytes or 1 << 40
    feasible = proof.ok and arena <= budget
    return {"score": parameters(config["model"]) if feasible else 0,
            "arena": arena, "verified": proof.ok, "fits": feasible}


tuner = tune.Tuner(
    objective,
    param_space={"model": tune.grid_search(candidates), "kernels": tune.grid_search(["tflm", "cmsis-nn"])},
    tune_config=tune.TuneConfig(metric="score", mode="max"),
)
results = tuner.fit()
best = results.get_best_result()
print(f"budget {budget} B: best {Path(best.config['model']).name} on {best.config['kernels']}, "
      f"arena to allocate {best.metrics['arena']} B, verified {best.metrics['verified']}")
for r in results:
    print(f"  {Path(r.config['model']).name:45} {r.config['kernels']:9} arena {r.metrics['arena']:>8} "
          f"fits {r.metrics['fits']}")
