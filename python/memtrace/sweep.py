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

from . import _args
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
    models: "os.PathLike | str | Iterable[os.PathLike | str]",
    targets: "str | Sequence[str]",
    kernels: "str | Sequence[str]",
    planners: "str | None | Sequence[Optional[str]]",
) -> list[Cell]:
    """Every combination, in a fixed order (models outermost); each
    argument one item or several (a `str` is one item)."""
    models = _models(models)
    targets = _args.strings("targets", targets)
    kernels = _args.strings("kernels", kernels)
    planners = _planners(planners)
    return [
        Cell(i, m, t, k, p)
        for i, (m, t, k, p) in enumerate(itertools.product(models, targets, kernels, planners))
    ]


def verify_cell(cell: Cell, model_bytes: Optional[bytes] = None) -> dict[str, Any]:
    """One cell's row: `memtrace verify` of its model (from `model_bytes`
    when the model travelled as bytes: a cluster's nodes need not share a
    file system) on its target, kernels and planner."""
    if not isinstance(cell, Cell):
        raise TypeError(f"cell must be a memtrace.sweep.Cell, not {type(cell).__name__}")
    if model_bytes is not None and not isinstance(model_bytes, bytes):
        raise TypeError(f"model_bytes must be bytes or None, not {type(model_bytes).__name__}")
    started = time.monotonic()
    row: dict[str, Any] = {c: None for c in COLUMNS}
    row.update(cell=cell.index, model=cell.model, target=cell.target, kernels=cell.kernels,
               planner=cell.planner, node=_ray_node())
    with tempfile.TemporaryDirectory(prefix="memtrace-cell-") as folder:
        model = cell.model
        if model_bytes is not None:
            model = str(Path(folder) / Path(cell.model).name)
            Path(model).write_bytes(model_bytes)
        args = [
            "verify",
            _args.model("model", model),
            *_args.options(target=cell.target, kernels=cell.kernels, planner=cell.planner),
        ]
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
    models: "os.PathLike | str | Iterable[os.PathLike | str]",
    *,
    targets: "str | Sequence[str]" = ("cortex-m4",),
    kernels: "str | Sequence[str]" = ("tflm",),
    planners: "str | None | Sequence[Optional[str]]" = (None,),
    address: Optional[str] = None,
    out: Optional[os.PathLike] = None,
    retries: int = 3,
    on_row: Optional[Callable[[dict[str, Any]], None]] = None,
) -> SweepResult:
    """Verifies every cell on Ray — a local Ray by default, the cluster at
    `address` (`"ray://…"` or `"HOST:PORT"`) otherwise — and writes the
    table to `out` (Parquet) when given. `on_row` sees each row as it comes
    back. Each node needs this package installed (`pip install memtrace`).

    One model, target, kernel library or planner may be given alone (a
    `str` is one, never its characters). The arguments and `out` are
    checked before any cell runs: a wrong type is a `TypeError`, an `out`
    that is a folder or cannot be written a `ValueError`."""
    grid = cells(models, targets, kernels, planners)
    if address is not None:
        _args.text("address", address)
    _args.count("retries", retries)
    if on_row is not None and not callable(on_row):
        raise TypeError(f"on_row must be callable, not {type(on_row).__name__}")
    if out is not None:
        out = writable_table(out)
        import pyarrow.parquet  # noqa: F401  (missing, it fails now, not after the cells)
    import ray

    started = time.monotonic()
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


def _models(models: Any) -> list[str]:
    """The sweep's models: one path or `zoo:NAME`, or an iterable of them."""
    if isinstance(models, (str, os.PathLike)):
        models = [models]
    elif isinstance(models, (bytes, bytearray, memoryview)) or not isinstance(models, Iterable):
        raise TypeError(
            "models must be a path or 'zoo:NAME', or an iterable of them, "
            f"not {type(models).__name__}"
        )
    models = list(models)
    if not models:
        raise ValueError("models is empty: a sweep needs at least one model")
    return [_args.model("models", m) for m in models]


def _planners(planners: Any) -> list[Optional[str]]:
    """The sweep's planners: one name, None (each cell's best plan), or an
    iterable of names and None."""
    if planners is None or isinstance(planners, str):
        planners = [planners]
    elif isinstance(planners, (bytes, bytearray, memoryview)) or not isinstance(planners, Iterable):
        raise TypeError(
            f"planners must be a str, None or an iterable of them, not {type(planners).__name__}"
        )
    return [None if p is None else _args.text("planners", p) for p in planners]


def writable_table(out: Any) -> Path:
    """`out` as the path of a table to write: a new file or a file to
    replace, in a folder that exists and can be written; checked before a
    sweep spends its time."""
    path = Path(_args.path("out", out))
    if path.is_dir():
        raise ValueError(f"out {str(path)!r} is a folder: name the Parquet file to write")
    folder = path.parent
    if not folder.is_dir():
        raise ValueError(f"out {str(path)!r}: the folder {str(folder)!r} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"out {str(path)!r}: the folder {str(folder)!r} cannot be written")
    if path.exists() and not path.is_file():
        raise ValueError(f"out {str(path)!r} exists and is not a regular file")
    return path


def _umask() -> int:
    """This process's umask (reading it means setting it: set back at once)."""
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def write_parquet(rows: list[dict[str, Any]], path: Path) -> Path:
    """The rows as a Parquet table at `path`, written whole or not at all:
    through a temporary file of its own (created new, an unpredictable
    name) beside it, removed if anything fails."""
    import pyarrow
    import pyarrow.parquet

    table = pyarrow.Table.from_pylist(rows)
    fd, partial = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as sink:
            # mkstemp's file is private (0600); the table gets a new file's mode.
            os.fchmod(sink.fileno(), 0o666 & ~_umask())
            pyarrow.parquet.write_table(table, sink)
        os.replace(partial, path)
    except BaseException:
        try:
            os.unlink(partial)
        except FileNotFoundError:
            pass
        raise
    return path
