"""Fixtures: one compiled build per session (plus a sanitizer build), and a client runner."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from native_build import Build, build_all, compiler  # noqa: E402

if compiler() is None:  # pragma: no cover - depends on the machine
    pytest.skip("no C compiler (cc) on PATH: native tests need one", allow_module_level=True)


@pytest.fixture(scope="session")
def build(tmp_path_factory: pytest.TempPathFactory) -> Build:
    return build_all(tmp_path_factory.mktemp("native"))


@pytest.fixture(scope="session")
def san_build(tmp_path_factory: pytest.TempPathFactory) -> Build:
    return build_all(tmp_path_factory.mktemp("native-san"), sanitized=True)
