"""Sweeps on Ray: one `memtrace verify` per cell of models × targets ×
kernels × planners, each cell a Ray task (one memtrace process), results
streamed back as they finish and written as a Parquet table.

Ray schedules and retries; memtrace only defines a cell. A task whose
worker dies (a node lost, a process killed) is run again by Ray
(`retries`); a cell memtrace itself refuses (a model TFLM cannot run) is a
row with its `error`, not a retry, since it would fail the same way again.
"""

from __future__ import annotations

import itertools
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

from ._binary import MemtraceError, call_json
from .results import _Table

#: The columns of a sweep's table, in order.
COLUMNS = (
    "cell", "model", "target", "kernels", "planner", "overlap", "ok", "bit_exact",
    "clobbers", "planned_bytes", "arena_to_allocate_bytes", "tflm_head_bytes",
    "tflm_tail_bytes", "instructions", "seconds", "node", "error",
)


@dataclass(frozen=True)
class Cell:
    """One verify of the sweep."""

    index: int
    model: str
    target: str
    kernels: str
    planner: Optional[str]


def cells(
    models: Sequence[str], targets: Sequence[str], kernels: Sequence[str], planners: Sequence[Optional[str]]
) -> list[Cell]:
    """Every combination, in a fixed order (models outermost)."""
    return [
        Cell(i, str(m), t, k, p)
        for i, (m, t, k, p) in enumerate(itertools.product(models, targets, kernels, planners))
    ]


def verify_cell(cell: Cell, model_bytes: Optional[bytes] = None) -> dict[str, Any]:
    """One cell's row: `memtrace verify` of its model (from `model_bytes`
    when the model travelled as bytes: a cluster's nodes need not share a
    file system) on its target, kernels and planner."""
    started = time.monotonic()
    row: dict[str, Any] = {c: None for c in COLUMNS}
    row.update(cell=cell.index, model=cell.model, target=cell.target, kernels=cell.kernels,
               planner=cell.planner, node=_ray_node())
    with tempfile.TemporaryDirectory(prefix="memtrace-cell-") as folder:
        model = cell.model
        if model_bytes is not None:
            model = str(Path(folder) / Path(cell.model).name)
            Path(model).write_bytes(model_bytes)
        args = ["verify", model, "--target", cell.target, "--kernels", cell.kernels]
        if cell.planner:
            args += ["--planner", cell.planner]
        try:
            _, report, _ = call_json(args)
        except MemtraceError as error:
            row.update(ok=False, error=str(error), seconds=time.monotonic() - started)
            return row
    arena = (report.get("arena_to_allocate") or {}).get("arena") or {}
    row.update(
        planner=report["plan"]["planner"],
        overlap=report["plan"]["overlap"],
        ok=report["ok"],
        bit_exact=report["bit_exact"],
        clobbers=len(report["clobbers"]),
        planned_bytes=report["plan"]["planned_bytes"],
        arena_to_allocate_bytes=arena.get("bytes"),
        tflm_head_bytes=report["reference"]["head_bytes"],
        tflm_tail_bytes=report["reference"]["tail_bytes"],
        instructions=report["plan"]["instructions"],
        seconds=time.monotonic() - started,
    )
    return row


def _ray_node() -> Optional[str]:
    """The Ray node this runs on, when it runs in a Ray task."""
    try:
        import ray

        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
    except ImportError:
        return None


@dataclass
class SweepResult(_Table):
    """The sweep's rows, in cell order, and where its table was written."""

    table: list[dict[str, Any]]
    path: Optional[Path] = None
    seconds: float = 0.0

    def rows(self) -> list[dict[str, Any]]:
        return self.table


def sweep(
    models: Iterable[os.PathLike | str],
    *,
    targets: Sequence[str] = ("cortex-m4",),
    kernels: Sequence[str] = ("tflm",),
    planners: Sequence[Optional[str]] = (None,),
    address: Optional[str] = None,
    out: Optional[os.PathLike] = None,
    retries: int = 3,
    on_row: Optional[Callable[[dict[str, Any]], None]] = None,
) -> SweepResult:
    """Verifies every cell on Ray — a local Ray by default, the cluster at
    `address` (`"ray://…"` or `"HOST:PORT"`) otherwise — and writes the
    table to `out` (Parquet) when given. `on_row` sees each row as it comes
    back. Each node needs this package installed (`pip install memtrace`)."""
    import ray

    started = time.monotonic()
    grid = cells([os.fspath(m) for m in models], targets, kernels, planners)
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    remote = ray.remote(max_retries=retries, retry_exceptions=False, num_cpus=1)(verify_cell)
    shipped = {}
    for cell in grid:
        if cell.model not in shipped:
            path = Path(cell.model)
            shipped[cell.model] = ray.put(path.read_bytes()) if path.is_file() else None
    pending = {remote.remote(cell, shipped[cell.model]): cell for cell in grid}
    rows: list[dict[str, Any]] = []
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        for ref in done:
            pending.pop(ref)
            row = ray.get(ref)
            rows.append(row)
            if on_row:
                on_row(row)
    rows.sort(key=lambda r: r["cell"])
    result = SweepResult(table=rows, seconds=time.monotonic() - started)
    if out is not None:
        result.path = write_parquet(rows, Path(out))
    return result


def write_parquet(rows: list[dict[str, Any]], path: Path) -> Path:
    """The rows as a Parquet table at `path`, written whole or not at all."""
    import pyarrow
    import pyarrow.parquet

    table = pyarrow.Table.from_pylist(rows)
    partial = path.with_name(path.name + ".partial")
    pyarrow.parquet.write_table(table, partial)
    os.replace(partial, path)
    return path
