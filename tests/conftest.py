"""Shared fixtures: the public trace data beside the checkout, when it is there, and helm."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpugov.k8s.devcluster import build

REPO = Path(__file__).resolve().parents[1]
TRACE_DIR = (REPO / ".." / "shared" / "traces" / "alibaba-gpu-v2023").resolve()
TARGETS = (REPO / ".." / "shared" / "targets" / "fgd-atc23-default-trace.csv").resolve()

# `k8s_control_plane`: a real local Kubernetes control plane per session (gpugov.k8s.devcluster)
pytest_plugins = ("gpugov.k8s.devcluster.pytest_plugin",)


@pytest.fixture(scope="session")
def trace_dir() -> Path:
    """The Alibaba GPU trace folder; tests using it skip when ../shared is absent."""
    if not (TRACE_DIR / "openb_node_list_gpu_node.csv").exists():
        pytest.skip(f"needs the Alibaba GPU trace at {TRACE_DIR} (../shared beside the repo)")
    return TRACE_DIR


@pytest.fixture(scope="session")
def targets_file() -> Path:
    """The FGD study's published default-trace numbers; tests using it skip when absent."""
    if not TARGETS.exists():
        pytest.skip(f"needs the published targets at {TARGETS} (../shared beside the repo)")
    return TARGETS


@pytest.fixture(scope="module")
def helm() -> Path:
    """The helm binary, built from its Go module; skips where Go is missing."""
    if build.missing(("helm",)) and build.go_binary() is None:
        pytest.skip("needs helm, built from its Go module, and Go is not installed")
    build.ensure_binaries((), include_helm=True)
    return build.bin_dir() / "helm"
