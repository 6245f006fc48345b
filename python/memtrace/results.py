"""Typed results of the API calls, each with its per-row table for pandas
or polars and the JSON report memtrace printed (`raw`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Optional


def _frame(rows: list[dict[str, Any]], library: str):
    if library == "pandas":
        import pandas

        return pandas.DataFrame(rows)
    import polars

    return polars.DataFrame(rows)


class _Table:
    """Results whose rows make a table (`rows()`)."""

    def rows(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    def to_pandas(self):
        """The rows as a `pandas.DataFrame` (pandas must be installed)."""
        return _frame(self.rows(), "pandas")

    def to_polars(self):
        """The rows as a `polars.DataFrame` (polars must be installed)."""
        return _frame(self.rows(), "polars")


class _Pictured:
    """Results that keep the picture memtrace drew (`plot=True`)."""

    plot_bytes: Optional[bytes]

    def plot(self):
        """The picture (run: the trace; verify: the arena of both runs), as
        an IPython image in a notebook, else PNG bytes."""
        if self.plot_bytes is None:
            raise ValueError("no picture: call with plot=True")
        try:
            from IPython.display import Image

            return Image(data=self.plot_bytes, format="png")
        except ImportError:
            return self.plot_bytes


@dataclass
class Layer:
    """One traced layer: a model operator on TFLM, or a kernel layer."""

    index: int
    name: str
    op: str
    instructions: int
    input_bytes: Optional[int]
    output_bytes: Optional[int]
    monotone_os_bytes: Optional[int]
    exact_os_bytes: Optional[int]
    library: Optional[str]
    kernel: Optional[str]


@dataclass
class RunResult(_Table, _Pictured):
    """`memtrace run`: every layer, and on TFLM the arena it used."""

    program: str
    arch: str
    kernels: Optional[str]
    arena_used_bytes: Optional[int]
    head_bytes: Optional[int]
    tail_bytes: Optional[int]
    layers: list[Layer]
    raw: dict[str, Any] = field(repr=False)
    plot_bytes: Optional[bytes] = field(default=None, repr=False)

    @classmethod
    def from_json(cls, report: dict[str, Any]) -> "RunResult":
        tflm = report.get("tflm") or {}
        layers = []
        for layer in report["layers"]:
            overlap = layer.get("overlap") or {}
            layers.append(
                Layer(
                    index=layer["index"],
                    name=layer["name"],
                    op=layer["op"],
                    instructions=layer["instructions"],
                    input_bytes=overlap.get("input_bytes"),
                    output_bytes=overlap.get("output_bytes"),
                    monotone_os_bytes=overlap.get("monotone_bytes"),
                    exact_os_bytes=overlap.get("exact_bytes"),
                    library=layer.get("library"),
                    kernel=layer.get("kernel"),
                )
            )
        return cls(
            program=tflm.get("model", report["elf"]),
            arch=report["arch"],
            kernels=tflm.get("kernels"),
            arena_used_bytes=tflm.get("arena_used_bytes"),
            head_bytes=tflm.get("head_bytes"),
            tail_bytes=tflm.get("tail_bytes"),
            layers=layers,
            raw=report,
        )

    def rows(self) -> list[dict[str, Any]]:
        return [asdict(layer) for layer in self.layers]


@dataclass
class Plan:
    """One planner's plan: its arena head and where each tensor goes."""

    planner: str
    overlap: str
    status: str
    peak_bytes: Optional[int]
    """None when the planner does not apply (`status` says so)."""
    tensors: list[dict[str, Any]] = field(repr=False)


@dataclass
class PlanResult(_Table):
    """`memtrace plan`: every planner's plan, and the arena a firmware must
    allocate for the best one, measured on real TFLM."""

    model: str
    kernels: str
    lower_bound_bytes: int
    plans: list[Plan]
    arena_to_allocate_bytes: Optional[int]
    warnings: list[str]
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, report: dict[str, Any]) -> "PlanResult":
        arena = (report.get("arena_to_allocate") or {}).get("arena") or {}
        return cls(
            model=report["model"],
            kernels=report["kernels"],
            lower_bound_bytes=report["lower_bound_bytes"],
            plans=[
                Plan(p["planner"], p["overlap"], p["status"], p["peak_bytes"], p["tensors"])
                for p in report["plans"]
            ],
            arena_to_allocate_bytes=arena.get("bytes"),
            warnings=list(report.get("warnings") or []),
            raw=report,
        )

    @property
    def best(self) -> Plan:
        """The smallest plan of the planners that made one (the one
        `--emit-offline` writes; the first of equals, as the command line
        takes it). A planner that does not apply (TinySeg's replacement on a
        model with a skip connection) has no size and is never the best."""
        made = [p for p in self.plans if p.peak_bytes is not None]
        if not made:
            raise ValueError(f"no planner made a plan for {self.model}")
        return min(made, key=lambda p: p.peak_bytes)

    def rows(self) -> list[dict[str, Any]]:
        return [
            {k: v for k, v in asdict(p).items() if k != "tensors"} for p in self.plans
        ]


@dataclass
class VerifyResult(_Table, _Pictured):
    """`memtrace verify`: the plan proven (or not) on real TFLM. `ok` is
    the verdict (the exit status): `proven`, and with `fits` the arena
    within the budget and with `emit_offline` the files written. `fits` is
    None without a budget."""

    model: str
    kernels: str
    target: str
    ok: bool
    proven: bool
    fits: Optional[bool]
    budget_bytes: Optional[int]
    bit_exact: bool
    clobbers: int
    oracle_agrees: Optional[bool]
    planner: str
    planned_bytes: int
    arena_to_allocate_bytes: Optional[int]
    warnings: list[str]
    raw: dict[str, Any] = field(repr=False)
    plot_bytes: Optional[bytes] = field(default=None, repr=False)

    @classmethod
    def from_json(cls, report: dict[str, Any]) -> "VerifyResult":
        arena = (report.get("arena_to_allocate") or {}).get("arena") or {}
        oracle = report.get("oracle")
        budget = report.get("budget")
        return cls(
            model=report["model"],
            kernels=report["kernels"],
            target=report["target"],
            ok=report["ok"],
            proven=report["proven"],
            fits=budget["arena_bytes"] <= budget["budget_bytes"] if budget else None,
            budget_bytes=budget["budget_bytes"] if budget else None,
            bit_exact=report["bit_exact"],
            clobbers=len(report["clobbers"]),
            oracle_agrees=oracle.get("agrees") if oracle else None,
            planner=report["plan"]["planner"],
            planned_bytes=report["plan"]["planned_bytes"],
            arena_to_allocate_bytes=arena.get("bytes"),
            warnings=list(report.get("warnings") or []),
            raw=report,
        )

    def rows(self) -> list[dict[str, Any]]:
        """One row per operator: its traced O_s."""
        return list(self.raw["traced_overlaps"])

