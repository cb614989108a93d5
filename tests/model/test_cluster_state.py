"""ClusterState: feasibility, allocation bookkeeping, snapshots."""

from __future__ import annotations

import numpy as np
import pytest

from gpugov.model.cluster import ClusterState, NodeSpec
from gpugov.model.request import Allocation, PodRequest


def cluster() -> ClusterState:
    return ClusterState([
        NodeSpec("a", 8000, 32768, 2, "T4"),
        NodeSpec("b", 64000, 262144, 8, "V100M32"),
        NodeSpec("cpu", 16000, 65536, 0),
    ])


def test_feasible_respects_cpu_memory_model_and_gpu_capacity() -> None:
    s = cluster()
    assert s.feasible(PodRequest("p", 4000, 1024, 1, 500)).tolist() == [True, True, False]
    assert s.feasible(PodRequest("p", 4000, 1024, 1, 500, ("T4",))).tolist() == [
        True, False, False]
    assert s.feasible(PodRequest("p", 9000, 1024, 1, 500)).tolist() == [False, True, False]
    assert s.feasible(PodRequest("p", 1000, 40000, 1, 500)).tolist() == [False, True, False]
    assert s.feasible(PodRequest("p", 1000, 1024, 4, 1000)).tolist() == [False, True, False]
    # CPU-only pods may go anywhere with CPU and memory, GPU-less nodes included
    assert s.feasible(PodRequest("p", 1000, 1024)).tolist() == [True, True, True]


def test_failure_reason_names_the_binding_constraint() -> None:
    s = cluster()
    assert s.failure_reason(PodRequest("p", 1000, 1, 1, 500, ("A100",))) == "gpu-model"
    assert s.failure_reason(PodRequest("p", 1000, 1, 16, 1000)) == "gpu"
    assert s.failure_reason(PodRequest("p", 100000, 1, 1, 1000)) == "cpu"
    assert s.failure_reason(PodRequest("p", 1000, 10**9, 1, 1000)) == "memory"


def test_allocate_release_round_trip_and_derived_arrays() -> None:
    s = cluster()
    req = PodRequest("p", 2000, 1024, 1, 300)
    alloc = Allocation(1, (3,), 300)
    s.allocate(req, alloc)
    assert s.gpu_free[1, 3] == 700
    assert s.full_gpus[1] == 7 and s.gpu_free_total[1] == 7700 and s.cpu_free[1] == 62000
    assert s.used_gpu_milli == 300
    s.release(req, alloc)
    assert s.used_gpu_milli == 0 and s.full_gpus[1] == 8 and s.cpu_free[1] == 64000


def test_allocate_refuses_overcommit_and_duplicate_devices() -> None:
    s = cluster()
    with pytest.raises(ValueError):
        s.allocate(PodRequest("p", 1000, 1, 2, 1000), Allocation(1, (2, 2), 1000))
    with pytest.raises(ValueError):
        s.allocate(PodRequest("p", 1000, 1, 1, 1000), Allocation(0, (5,), 1000))
    s.allocate(PodRequest("p", 1000, 1, 1, 800), Allocation(0, (0,), 800))
    with pytest.raises(ValueError):
        s.allocate(PodRequest("q", 1000, 1, 1, 300), Allocation(0, (0,), 300))


def test_snapshot_restore_brings_back_state_and_moves_versions_forward() -> None:
    s = cluster()
    snap = s.snapshot()
    before = s.version.copy()
    s.allocate(PodRequest("p", 1000, 1, 2, 1000), Allocation(1, (0, 1), 1000))
    s.restore(snap)
    assert s.full_gpus[1] == 8 and s.used_gpu_milli == 0
    assert np.all(s.version >= before) and s.version[1] > before[1] + 1


def test_empty_cluster_and_cluster_without_gpus() -> None:
    empty = ClusterState([])
    assert empty.total_gpu_milli == 0 and len(empty.feasible(PodRequest("p", 1, 1))) == 0
    cpu_only = ClusterState([NodeSpec("c", 1000, 1000, 0)])
    assert cpu_only.feasible(PodRequest("p", 1, 1, 1, 100)).tolist() == [False]
    assert cpu_only.failure_reason(PodRequest("p", 1, 1, 1, 100)) == "gpu-model"
