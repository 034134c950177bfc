"""Shared fixtures for the end-to-end tests.

IGNIS_BUILD names the CMake build directory to test (default: build),
relative to the repository root unless absolute."""
from __future__ import annotations

import ctypes
import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def ignis_build() -> Path:
    """The build directory under test."""
    return (REPO_ROOT / os.environ.get("IGNIS_BUILD", "build")).resolve()


@pytest.fixture(scope="session")
def libignis(ignis_build: Path) -> ctypes.CDLL:
    """The shared library of that build, loaded with ctypes."""
    path = ignis_build / "libignis.so"
    if not path.is_file():
        pytest.fail(f"{path} not found: build the `ignis` target first")
    return ctypes.CDLL(str(path))
