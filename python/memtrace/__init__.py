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

Errors are `MemtraceError`, carrying memtrace's own message.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Sequence

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


def _options(**given) -> list[str]:
    """`--name value` for each option given (None left out; True a flag)."""
    args: list[str] = []
    for name, value in given.items():
        if value is None or value is False:
            continue
        flag = "--" + name.replace("_", "-")
        if value is True:
            args.append(flag)
        elif isinstance(value, (list, tuple)):
            for item in value:
                args += [flag, str(item)]
        else:
            args += [flag, os.fspath(value) if isinstance(value, os.PathLike) else str(value)]
    return args


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
    layers: Sequence[str] = (),
    plot: bool = False,
) -> RunResult:
    """Traces a model on real TFLM in the emulator (or a kernel binary's
    layers): every operator's buffers, instructions and O_s, and the arena
    TFLM used. `plot=True` keeps the trace picture (`result.plot()`)."""
    with model_argument(program) as arg, picture_file(plot) as picture:
        _, report, _ = call_json(
            [
                "run",
                arg,
                *_options(
                    kernels=kernels, target=target, seed=seed, input=input,
                    layer=list(layers), plot=picture,
                ),
            ]
        )
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
    fits: Optional[str] = None,
    emit_offline: Optional[os.PathLike] = None,
) -> PlanResult:
    """Plans the model's arena with every planner (or `planner`), with O_s
    traced from the compiled kernels unless `overlap` says otherwise, and
    measures the arena to allocate for the best plan on real TFLM."""
    with model_argument(model) as arg:
        _, report, _ = call_json(
            [
                "plan",
                arg,
                *_options(
                    planner=planner, overlap=overlap, kernels=kernels, target=target,
                    fits=fits, emit_offline=emit_offline,
                ),
            ]
        )
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
    fits: Optional[str] = None,
    emit_offline: Optional[os.PathLike] = None,
    plot: bool = False,
) -> VerifyResult:
    """Proves a plan on real TFLM: TFLM runs the model under its own plan
    and under memtrace's (a planner's, a `plan` file's, or the model's
    embedded one), a shadow map finds any clobbered read, and the outputs
    must be bit-exact — with PyPI `tflite-micro` too when this interpreter
    has it (`oracle=False` skips it). A plan that fails is a result with
    `ok` False, not an exception."""
    with model_argument(model) as arg, picture_file(plot) as picture:
        _, report, _ = call_json(
            [
                "verify",
                arg,
                *_options(
                    planner=planner, overlap=overlap, plan=plan, kernels=kernels,
                    target=target, seed=seed, input=input, no_oracle=not oracle,
                    fits=fits, emit_offline=emit_offline, plot=picture,
                ),
            ]
        )
        result = VerifyResult.from_json(report)
        if picture:
            result.plot_bytes = Path(picture).read_bytes()
    return result


def table(elf: os.PathLike, out: os.PathLike, *, ops: Sequence[str] = (), configs: Optional[int] = None) -> Path:
    """Writes a kernel binary's O_s baseline table to `out` (JSON); its path."""
    call(["table", os.fspath(elf), *_options(out=out, op=list(ops), configs=configs)])
    return Path(out)


def regress(baseline: os.PathLike, elf: os.PathLike) -> dict:
    """Compares a kernel binary against a baseline table: the report, whose
    `passed` says whether any layer's O_s shrank or another check failed."""
    _, report, _ = call_json(["regress", os.fspath(baseline), os.fspath(elf)])
    return report
