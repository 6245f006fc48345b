"""memtrace from Python: trace, plan and verify TFLite Micro models and
kernel binaries in an emulated microcontroller.

Each function runs the `memtrace` binary this package installs (with its
prebuilt guests) once, and returns a typed result::

    import memtrace
    run = memtrace.run("model.tflite", kernels="cmsis-nn")
    run.to_pandas()                    # one row per operator: O_s, instructions
    plan = memtrace.plan("model.tflite")
    proof = memtrace.verify("model.tflite", planner="dmo-heap")
    assert proof.ok                    # no clobbered read, bit-exact
    proof.arena_to_allocate_bytes      # what the firmware must allocate

Errors are `MemtraceError`, carrying memtrace's own message; an argument
of the wrong type is a `TypeError`, of a wrong value a `ValueError`, raised
before memtrace runs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Sequence, Union

from . import _args
from ._binary import MemtraceError, call, call_json, executable
from ._model import Model, model_argument, picture_file
from .results import Layer, Plan, PlanResult, RunResult, VerifyResult
from .sweep import SweepResult, sweep

__all__ = [
    "MemtraceError",
    "Layer",
    "Plan",
    "PlanResult",
    "RunResult",
    "SweepResult",
    "VerifyResult",
    "executable",
    "plan",
    "regress",
    "run",
    "sweep",
    "table",
    "verify",
    "version",
]


def version() -> str:
    """The version of the memtrace binary."""
    return call(["--version"])[1].strip()


def run(
    program: Model,
    *,
    kernels: Optional[str] = None,
    target: Optional[str] = None,
    seed: Optional[int] = None,
    input: Optional[os.PathLike] = None,
    layers: Union[str, Sequence[str]] = (),
    plot: bool = False,
) -> RunResult:
    """Traces a model on real TFLM in the emulator (or a kernel binary's
    layers): every operator's buffers, instructions and O_s, and the arena
    TFLM used. `layers` selects layers: one name, or several. `plot=True`
    keeps the trace picture (`result.plot()`)."""
    options = _args.options(
        kernels=_args.optional_text("kernels", kernels),
        target=_args.optional_text("target", target),
        seed=_args.count("seed", seed),
        input=_args.optional_path("input", input),
        layer=_args.strings("layers", layers),
    )
    _args.flag("plot", plot)
    with model_argument(program) as arg, picture_file(plot) as picture:
        _, report, _ = call_json(["run", arg, *options, *_args.options(plot=picture)])
        result = RunResult.from_json(report)
        if picture:
            result.plot_bytes = Path(picture).read_bytes()
    return result


def plan(
    model: Model,
    *,
    planner: Optional[str] = None,
    overlap: Optional[str] = None,
    kernels: Optional[str] = None,
    target: Optional[str] = None,
    fits: Union[str, int, None] = None,
    emit_offline: Optional[os.PathLike] = None,
) -> PlanResult:
    """Plans the model's arena with every planner (or `planner`), with O_s
    traced from the compiled kernels unless `overlap` says otherwise, and
    measures the arena to allocate for the best plan on real TFLM. `fits`
    is a budget: bytes, or a size such as `"128K"`."""
    options = _args.options(
        planner=_args.optional_text("planner", planner),
        overlap=_args.optional_text("overlap", overlap),
        kernels=_args.optional_text("kernels", kernels),
        target=_args.optional_text("target", target),
        fits=_args.size("fits", fits),
        emit_offline=_args.optional_path("emit_offline", emit_offline),
    )
    with model_argument(model) as arg:
        _, report, _ = call_json(["plan", arg, *options])
    return PlanResult.from_json(report)


def verify(
    model: Model,
    *,
    planner: Optional[str] = None,
    overlap: Optional[str] = None,
    plan: Optional[os.PathLike] = None,
    kernels: Optional[str] = None,
    target: Optional[str] = None,
    seed: Optional[int] = None,
    input: Optional[os.PathLike] = None,
    oracle: bool = True,
    fits: Union[str, int, None] = None,
    emit_offline: Optional[os.PathLike] = None,
    plot: bool = False,
) -> VerifyResult:
    """Proves a plan on real TFLM: TFLM runs the model under its own plan
    and under memtrace's (a planner's, a `plan` file's, or the model's
    embedded one), a shadow map finds any clobbered read, and the outputs
    must be bit-exact — with PyPI `tflite-micro` too when this interpreter
    has it (`oracle=False` skips it). A plan that fails is a result with
    `ok` False, not an exception; so is a proven plan that misses the
    `fits` budget (`proven` True, `fits` False)."""
    options = _args.options(
        planner=_args.optional_text("planner", planner),
        overlap=_args.optional_text("overlap", overlap),
        plan=_args.optional_path("plan", plan),
        kernels=_args.optional_text("kernels", kernels),
        target=_args.optional_text("target", target),
        seed=_args.count("seed", seed),
        input=_args.optional_path("input", input),
        no_oracle=not _args.flag("oracle", oracle),
        fits=_args.size("fits", fits),
        emit_offline=_args.optional_path("emit_offline", emit_offline),
    )
    _args.flag("plot", plot)
    with model_argument(model) as arg, picture_file(plot) as picture:
        _, report, _ = call_json(["verify", arg, *options, *_args.options(plot=picture)])
        result = VerifyResult.from_json(report)
        if picture:
            result.plot_bytes = Path(picture).read_bytes()
    return result


def table(
    elf: os.PathLike,
    out: os.PathLike,
    *,
    ops: Union[str, Sequence[str]] = (),
    configs: Optional[int] = None,
) -> Path:
    """Writes a kernel binary's O_s baseline table to `out` (JSON); its path.
    `ops` is one operator or several."""
    options = _args.options(
        out=_args.path("out", out),
        op=_args.strings("ops", ops),
        configs=_args.count("configs", configs, low=1),
    )
    call(["table", _args.path("elf", elf), *options])
    return Path(out)


def regress(baseline: os.PathLike, elf: os.PathLike) -> dict:
    """Compares a kernel binary against a baseline table: the report, whose
    `passed` says whether any layer's O_s shrank or another check failed."""
    _, report, _ = call_json(["regress", _args.path("baseline", baseline), _args.path("elf", elf)])
    return report
