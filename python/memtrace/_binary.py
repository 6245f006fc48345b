"""The `memtrace` executable this package drives, and one call of it.

Every API function is one run of the command-line tool with
`--format json`: the tool is the single implementation, and the Python side
only builds arguments and reads the JSON it prints.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any, Sequence


class MemtraceError(RuntimeError):
    """memtrace refused or failed: the message is memtrace's own (what was
    wrong and where), `status` its exit status and `args_used` the command."""

    def __init__(self, message: str, status: int, args_used: Sequence[str]):
        super().__init__(message)
        self.status = status
        self.args_used = list(args_used)


def executable() -> Path:
    """The `memtrace` binary: `$MEMTRACE_BINARY`, else the one this wheel
    installed beside the interpreter's scripts, else the first on `PATH`."""
    named = os.environ.get("MEMTRACE_BINARY")
    if named:
        return Path(named)
    scripts = Path(sysconfig.get_path("scripts")) / "memtrace"
    if scripts.is_file():
        return scripts
    found = shutil.which("memtrace")
    if found:
        return Path(found)
    raise MemtraceError(
        "the memtrace binary was not found: install the wheel (pip install memtrace-*.whl) "
        "or set MEMTRACE_BINARY to its path",
        127,
        [],
    )


def oracle_environment() -> dict[str, str]:
    """The environment of a call: with PyPI `tflite-micro` importable here
    and no oracle named, this interpreter is `verify`'s host oracle."""
    env = dict(os.environ)
    if not env.get("MEMTRACE_TFLM_PYTHON") and importlib.util.find_spec("tflite_micro"):
        env["MEMTRACE_TFLM_PYTHON"] = sys.executable
    return env


def call(args: Sequence[str], *, check: bool = True) -> tuple[int, str, str]:
    """Runs `memtrace ARGS`; its status, stdout and stderr. With `check`, a
    status other than 0 and 1 (1 is a report's verdict, e.g. a plan that
    did not verify) raises [`MemtraceError`] with memtrace's message."""
    command = [str(executable()), *args]
    done = subprocess.run(
        command,
        capture_output=True,
        # memtrace writes UTF-8, whatever this interpreter's locale.
        encoding="utf-8",
        errors="replace",
        env=oracle_environment(),
        check=False,
    )
    if check and done.returncode not in (0, 1):
        raise MemtraceError(_message(done.stderr, done.returncode), done.returncode, command)
    if check and done.returncode == 1 and not done.stdout.strip():
        # Status 1 with no report is an error, not a verdict.
        raise MemtraceError(_message(done.stderr, 1), 1, command)
    return done.returncode, done.stdout, done.stderr


def call_json(args: Sequence[str]) -> tuple[int, Any, str]:
    """[`call`] with `--format json`: the status, the parsed report, stderr.
    Output that is not one JSON document is a [`MemtraceError`] (with what
    memtrace said), never a `JSONDecodeError`."""
    status, out, err = call([*args, "--format", "json"])
    try:
        return status, json.loads(out), err
    except json.JSONDecodeError as error:
        said = _message(err, status)
        raise MemtraceError(
            f"memtrace printed no JSON report ({error}); it said: {said}",
            status,
            [str(executable()), *args, "--format", "json"],
        ) from None


def _message(stderr: str, status: int) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error")]
    text = "\n".join(errors or lines[-5:])
    return text or f"memtrace exited with status {status} and said nothing"
