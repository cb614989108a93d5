"""Fixtures shared by the k8s tests: a DRA control plane per module (helm: tests/conftest.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpugov.k8s.devcluster.plane import LocalControlPlane

sys.path.insert(0, str(Path(__file__).parent))
from dra_support import plane_fixture  # noqa: E402


@pytest.fixture(scope="module")
def dra_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalControlPlane]:
    """etcd, apiserver, KCM, kwok and kube-scheduler with gpugov's DRA gates (one per module)."""
    yield from plane_fixture(tmp_path_factory)
