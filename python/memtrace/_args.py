"""The arguments of the API's functions checked, and turned into the
command line's: a wrong type is a `TypeError` and a wrong value a
`ValueError` naming the argument, raised before memtrace runs, never a call
that means something else (a model named `-h` read as an option, the
string `"conv1"` as five one-letter layers)."""

from __future__ import annotations

import os
from typing import Any, Iterable, Optional

#: The largest seed the command line takes (a 64-bit unsigned integer).
MAX_SEED = 2**64 - 1


def text(name: str, value: Any) -> str:
    """`value`, a non-empty `str` without NUL (what a command-line argument
    can hold)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    if not value:
        raise ValueError(f"{name} must not be empty")
    if "\0" in value:
        raise ValueError(f"{name} must not hold a NUL character: {value!r}")
    return value


def optional_text(name: str, value: Any) -> Optional[str]:
    """[`text`], or None."""
    return None if value is None else text(name, value)


def path(name: str, value: Any) -> str:
    """A path (`str` or `os.PathLike`) as one command-line word that is
    never taken for an option: a relative path starting with `-` is written
    `./-…` (the same file)."""
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a path (str or os.PathLike), not {type(value).__name__}")
    word = os.fspath(value)
    if isinstance(word, bytes):
        raise TypeError(f"{name} must be a str path, not bytes")
    word = text(name, word)
    return os.path.join(os.curdir, word) if word.startswith("-") else word


def optional_path(name: str, value: Any) -> Optional[str]:
    """[`path`], or None."""
    return None if value is None else path(name, value)


def model(name: str, value: Any) -> str:
    """A model given by name: `zoo:NAME` as it is, a path as [`path`]."""
    if isinstance(value, str) and value.startswith("zoo:"):
        return text(name, value)
    return path(name, value)


def strings(name: str, value: Any) -> list[str]:
    """Several strings: one `str` is one item (never its characters); else
    an iterable of `str`."""
    if isinstance(value, str):
        return [text(name, value)]
    if isinstance(value, (bytes, bytearray, memoryview)) or not isinstance(value, Iterable):
        raise TypeError(f"{name} must be a str or an iterable of str, not {type(value).__name__}")
    items = list(value)
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"{name} must hold str items, not {type(item).__name__} ({item!r})")
        text(name, item)
    return items


def flag(name: str, value: Any) -> bool:
    """A `bool` (not a truthy string: `plot="no"` is a mistake)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, not {type(value).__name__}")
    return value


def count(name: str, value: Any, *, low: int = 0, high: int = MAX_SEED) -> Optional[int]:
    """An `int` (not a `bool`) from `low` to `high`, or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be from {low} to {high}, not {value}")
    return value


def size(name: str, value: Any) -> Optional[str]:
    """A size: bytes as an `int`, or text the command line reads
    (`"128K"`, `"0.5M"`), or None."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return str(count(name, value, low=1))
    if isinstance(value, str):
        return text(name, value)
    raise TypeError(f"{name} must be a size such as 131072 or '128K', not {type(value).__name__}")


def options(**given: Any) -> list[str]:
    """`--name=value` for each option given (None and False left out, True
    a flag, a list one `--name=item` each). Always one word with `=`: a
    value starting with `-` is still the option's value."""
    args: list[str] = []
    for name, value in given.items():
        if value is None or value is False:
            continue
        option = "--" + name.replace("_", "-")
        if value is True:
            args.append(option)
        elif isinstance(value, list):
            args += [f"{option}={item}" for item in value]
        else:
            args.append(f"{option}={value}")
    return args
