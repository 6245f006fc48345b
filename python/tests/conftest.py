"""The wheel's tests run against the installed package, never the source
tree: `scripts/test-wheel.sh` installs the wheel in a fresh venv whose PATH
has no compiler, and runs these with that venv's interpreter."""

import os
import sys
from pathlib import Path

import pytest

MODELS = Path(os.environ.get("MEMTRACE_MODELS", Path(__file__).resolve().parents[3] / "shared" / "models"))


@pytest.fixture(scope="session")
def models() -> Path:
    if not MODELS.is_dir():
        pytest.fail(f"the shared models are not at {MODELS} (set MEMTRACE_MODELS)")
    return MODELS


@pytest.fixture(scope="session")
def prefix() -> Path:
    """Where the wheel installed itself (the venv)."""
    return Path(sys.prefix).resolve()
