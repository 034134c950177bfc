"""Shared fixtures for the end-to-end tests.

IGNIS_BUILD names the CMake build directory to test (default: build),
relative to the repository root unless absolute. The reference data is read
from tests/fixtures, or from IGNIS_FIXTURES when set."""
from __future__ import annotations

import ctypes
import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(os.environ.get("IGNIS_FIXTURES") or REPO_ROOT / "tests" / "fixtures")


def pytest_configure(config):
    # the tests skip what they cannot find; a wrong fixture root must not
    # turn the reference comparisons into silent skips
    if not (FIXTURES / "hf" / "tiny-27b-like" / "reference.json").is_file():
        raise pytest.UsageError(f"no test fixtures in {FIXTURES} (IGNIS_FIXTURES)")


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
