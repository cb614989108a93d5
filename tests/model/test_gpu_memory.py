"""GPU memory as a dimension of ClusterState: capacity from the catalog, the filter, the
device choice of every policy, bookkeeping, snapshots, and no change for memory-free pods."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpugov.model.catalog import CATALOG
from gpugov.model.cluster import ClusterState, NodeSpec
from gpugov.model.request import Allocation, PodRequest
from gpugov.placement.base import PolicyContext
from gpugov.placement.engine import Placer
from gpugov.placement.fragmentation import FragmentationModel, TypicalPods
from gpugov.placement.registry import POLICIES

GIB = 1024


def fleet() -> ClusterState:
    return ClusterState([
        NodeSpec("t4", 32_000, 131_072, 2, "T4"),  # 16 GiB cards
        NodeSpec("a100", 64_000, 262_144, 4, "A100-SXM4-80GB"),  # 80 GiB cards
        NodeSpec("g2", 64_000, 262_144, 8, "G2"),  # undisclosed: memory unknown
        NodeSpec("own", 64_000, 262_144, 2, "G3", gpu_memory_mib=24 * GIB),  # NVML's figure
    ])


def test_capacity_comes_from_the_catalog_or_the_node_and_unknown_is_zero() -> None:
    s = fleet()
    assert s.gpu_mem_cap[0].tolist() == [16 * GIB, 16 * GIB] + [0] * 6
    assert s.gpu_mem_cap[1, :4].tolist() == [CATALOG["A100-SXM4-80GB"].memory_mib] * 4
    assert s.gpu_mem_cap[2].tolist() == [0] * 8
    assert s.gpu_mem_cap[3, :2].tolist() == [24 * GIB] * 2
    assert (s.gpu_mem_free == s.gpu_mem_cap).all()


def test_filter_checks_memory_only_when_the_request_names_it() -> None:
    s = fleet()
    assert s.feasible(PodRequest("p", 1000, 1, 1, 300)).tolist() == [True] * 4
    assert s.feasible(PodRequest("p", 1000, 1, 1, 300, (), 10 * GIB)).tolist() == [
        True, True, False, True]
    assert s.feasible(PodRequest("p", 1000, 1, 1, 300, (), 20 * GIB)).tolist() == [
        False, True, False, True]
    assert s.feasible(PodRequest("p", 1000, 1, 1, 300, (), 40 * GIB)).tolist() == [
        False, True, False, False]
    # whole GPUs: enough fully free devices, each with enough memory
    assert s.feasible(PodRequest("p", 1000, 1, 2, 1000, (), 20 * GIB)).tolist() == [
        False, True, False, True]
    assert s.failure_reason(PodRequest("p", 1000, 1, 1, 300, (), 100 * GIB)) == "gpu-memory"
    assert s.failure_reason(PodRequest("p", 1000, 1, 1, 300, ("G2",), GIB)) == "gpu-memory"


def test_memory_is_charged_per_device_and_whole_gpus_take_all_of_it() -> None:
    s = fleet()
    s.allocate(PodRequest("a", 1000, 1, 1, 200, (), 50 * GIB), Allocation(1, (0,), 200, 50 * GIB))
    assert s.gpu_mem_free[1, 0] == 30 * GIB and s.gpu_free[1, 0] == 800
    # compute is left but memory is not: a 40 GiB slice cannot join it
    big = PodRequest("b", 1000, 1, 1, 100, (), 40 * GIB)
    assert not s.device_fits(big, 1)[0]
    with pytest.raises(ValueError, match="GPU memory"):
        s.allocate(big, Allocation(1, (0,), 100, 40 * GIB))
    whole = PodRequest("w", 1000, 1, 2, 1000)
    s.allocate(whole, Allocation(1, (1, 2), 1000))
    assert s.gpu_mem_free[1, 1:3].tolist() == [0, 0]
    s.release(whole, Allocation(1, (1, 2), 1000))
    s.release(PodRequest("a", 1000, 1, 1, 200, (), 50 * GIB), Allocation(1, (0,), 200, 50 * GIB))
    assert (s.gpu_mem_free == s.gpu_mem_cap).all()
    with pytest.raises(ValueError, match="never made"):
        s.release(PodRequest("a", 1000, 1, 1, 200, (), GIB), Allocation(1, (0,), 0, GIB))


def test_snapshot_restore_covers_memory() -> None:
    s = fleet()
    snap = s.snapshot()
    s.allocate(PodRequest("a", 1000, 1, 1, 200, (), GIB), Allocation(3, (1,), 200, GIB))
    s.restore(snap)
    assert (s.gpu_mem_free == s.gpu_mem_cap).all()


def test_request_validation_of_memory() -> None:
    with pytest.raises(ValueError, match="gpu_memory_mib"):
        PodRequest("p", 1000, 1, 1, 100, (), -1)
    with pytest.raises(ValueError, match="needs a GPU"):
        PodRequest("p", 1000, 1, 0, 0, (), 1024)
    with pytest.raises(ValueError, match="gpu_memory_mib"):
        NodeSpec("n", 1, 1, 1, "T4", gpu_memory_mib=-5)


def _placer(name: str, state: ClusterState, pods: list[PodRequest]) -> Placer:
    ctx = PolicyContext(FragmentationModel(TypicalPods.from_requests(pods), state),
                        np.random.default_rng(0))
    return Placer(state, POLICIES[name](ctx))


@pytest.mark.parametrize("name", list(POLICIES))
def test_every_policy_picks_a_device_with_enough_memory(name: str) -> None:
    # one A100 node: device 0 has compute but little memory left, device 1 has both
    s = ClusterState([NodeSpec("a", 64_000, 262_144, 2, "A100-SXM4-80GB")])
    s.allocate(PodRequest("x", 1, 1, 1, 100, (), 75 * GIB), Allocation(0, (0,), 100, 75 * GIB))
    s.allocate(PodRequest("y", 1, 1, 1, 500), Allocation(0, (1,), 500))
    req = PodRequest("p", 1000, 1024, 1, 200, (), 10 * GIB)
    placer = _placer(name, s, [req])
    decision = placer.place(req)
    assert decision.allocation is not None and decision.allocation.devices == (1,)
    assert decision.allocation.memory_mib == 10 * GIB
    assert s.gpu_mem_free[0, 1] == 70 * GIB


requests = st.builds(
    lambda count, milli, mem: PodRequest("p", 1000, 1024, count, 1000 if count > 1 else milli,
                                         (), mem),
    st.sampled_from([1, 1, 1, 2, 4]), st.integers(50, 1000), st.sampled_from(
        [0, 0, 4 * GIB, 10 * GIB, 20 * GIB, 40 * GIB, 70 * GIB]))


@settings(max_examples=40, deadline=None)
@given(st.lists(requests, min_size=1, max_size=60), st.sampled_from(list(POLICIES)))
def test_no_device_memory_is_ever_overcommitted(reqs: list[PodRequest], name: str) -> None:
    s = fleet()
    placer = _placer(name, s, reqs)
    placed = []
    for req in reqs:
        before = s.snapshot()
        d = placer.place(req)
        if d.allocation is None:
            after = s.snapshot()
            assert all((before[k] == after[k]).all() for k in before)
            continue
        placed.append((req, d.allocation))
        assert (s.gpu_mem_free >= 0).all() and (s.gpu_free >= 0).all()
        a = d.allocation
        if req.gpu_memory_mib:
            assert (s.gpu_mem_cap[a.node, list(a.devices)] >= req.gpu_memory_mib).all()
    # recompute the memory held per device from the allocations alone
    held = np.zeros_like(s.gpu_mem_cap)
    for _req, a in placed:
        for dev in a.devices:
            held[a.node, dev] += s.gpu_mem_cap[a.node, dev] if a.milli == 1000 else a.memory_mib
    assert (held == s.gpu_mem_cap - s.gpu_mem_free).all()
    assert (held <= s.gpu_mem_cap).all()
