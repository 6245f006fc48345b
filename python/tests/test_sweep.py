"""Sweeps on a two-node Ray cluster started on this machine."""

import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import memtrace
from memtrace.sweep import Cell, verify_cell

RAY = str(Path(sys.executable).with_name("ray"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_start(*args: str) -> None:
    done = subprocess.run([RAY, "start", *args], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"ray start {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A head node and a second node, one CPU each, on this machine."""
    port = free_port()
    common = ["--num-cpus=1", "--disable-usage-stats"]
    ray_start("--head", f"--port={port}", "--include-dashboard=false", *common)
    address = f"127.0.0.1:{port}"
    ray_start(f"--address={address}", *common)
    yield address
    import ray

    ray.shutdown()
    subprocess.run([RAY, "stop", "--force"], capture_output=True)


def processes_titled(title: str) -> list[int]:
    """PIDs whose command line (a Ray worker sets it to its task) starts so."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes().startswith(title.encode()):
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


def grid(models):
    names = ["tflm_hello_world_int8.tflite", "mlperf_tiny_ad_fc_autoencoder_int8.tflite",
             "tflm_person_detect.tflite"]
    return [models / n for n in names]


KEYS = ("model", "target", "kernels", "planner", "overlap", "ok", "bit_exact", "clobbers",
        "planned_bytes", "arena_to_allocate_bytes", "tflm_head_bytes", "tflm_tail_bytes",
        "instructions", "error")


def sequential(models) -> list[dict]:
    """The same cells, one after the other, through the API's verify."""
    rows = []
    for model in grid(models):
        for kernels in ("tflm", "cmsis-nn"):
            proof = memtrace.verify(model, kernels=kernels)
            rows.append({
                "model": Path(model).name, "kernels": kernels, "ok": proof.ok,
                "planned_bytes": proof.planned_bytes,
                "arena_to_allocate_bytes": proof.arena_to_allocate_bytes,
                "tflm_head_bytes": proof.raw["reference"]["head_bytes"],
            })
    return rows


def comparable(rows):
    return [{"model": Path(r["model"]).name, "kernels": r["kernels"], "ok": r["ok"],
             "planned_bytes": r["planned_bytes"],
             "arena_to_allocate_bytes": r["arena_to_allocate_bytes"],
             "tflm_head_bytes": r["tflm_head_bytes"]} for r in rows]


def test_a_sweep_on_two_nodes_equals_a_sequential_run(cluster, models, tmp_path):
    out = tmp_path / "sweep.parquet"
    seen = []
    result = memtrace.sweep(grid(models), kernels=("tflm", "cmsis-nn"), address=cluster,
                            out=out, on_row=seen.append)
    assert len(result.table) == len(seen) == 6
    assert all(r["error"] is None for r in result.table), [r["error"] for r in result.table]
    assert comparable(result.table) == sequential(models)
    # Both nodes ran cells.
    assert len({r["node"] for r in result.table}) == 2
    # The Parquet table holds the same rows.
    import pyarrow.parquet

    written = pyarrow.parquet.read_table(out).to_pylist()
    assert [{k: r[k] for k in KEYS} for r in written] == [{k: r[k] for k in KEYS} for r in result.table]


def test_a_worker_killed_mid_sweep_loses_no_cell(cluster, models):
    killed = []

    def kill_a_running_task(row):
        if killed:
            return
        running = processes_titled("ray::verify_cell")
        if running:
            os.kill(running[0], signal.SIGKILL)
            killed.append(running[0])

    result = memtrace.sweep(grid(models) * 2, kernels=("tflm",), address=cluster,
                            on_row=kill_a_running_task)
    assert killed, "no task was running when the first row came back"
    assert sorted(r["cell"] for r in result.table) == list(range(6))
    assert all(r["ok"] and r["error"] is None for r in result.table)


def test_a_cell_memtrace_refuses_is_a_row_with_its_error(tmp_path):
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(b"no model")
    row = verify_cell(Cell(0, str(bad), "cortex-m4", "tflm", None))
    assert row["ok"] is False and "bad.tflite" in row["error"]
