"""Fixtures for the observation tests: helper modules beside this file are importable."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from collections.abc import Iterator  # noqa: E402

import pytest  # noqa: E402
from obs_stacks import Stack, make_stack  # noqa: E402


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with make_stack(tmp_path_factory.mktemp("stack")) as s:
        yield s
