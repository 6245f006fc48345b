"""A model argument as the command line takes it: a path or `zoo:NAME`, or
the `.tflite` bytes a converter produced, written to a private file for the
call's duration."""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Union

from . import _args

Model = Union[str, os.PathLike, bytes, bytearray, memoryview, object]


@contextmanager
def model_argument(model: Model) -> Iterator[str]:
    """The command-line argument of `model`: a path (`str`, `Path`) or
    `zoo:NAME` as given (a relative path starting with `-` as `./-…`, never
    an option); `.tflite` bytes, or a TFLite converter (whose `convert()`
    gives them), through a temporary file."""
    if isinstance(model, (str, os.PathLike)):
        yield _args.model("model", model)
        return
    if hasattr(model, "convert") and callable(model.convert):
        model = model.convert()
    if not isinstance(model, (bytes, bytearray, memoryview)):
        raise TypeError(
            "a model is a .tflite path, 'zoo:NAME', the .tflite bytes or a TFLite converter, "
            f"not {type(model).__name__}"
        )
    if not model:
        raise ValueError("the model's .tflite bytes are empty")
    with tempfile.TemporaryDirectory(prefix="memtrace-") as folder:
        path = Path(folder) / "model.tflite"
        path.write_bytes(bytes(model))
        yield str(path)


@contextmanager
def picture_file(wanted: bool, suffix: str = ".png") -> Iterator[Union[str, None]]:
    """A temporary picture path when `wanted`, else `None`."""
    if not wanted:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="memtrace-plot-") as folder:
        yield str(Path(folder) / f"plot{suffix}")
