"""Failing examples the state properties found (tests/model/test_state_properties.py), kept
as plain regression tests."""

from __future__ import annotations

import numpy as np
import pytest

from gpugov.model.cluster import ClusterState, NodeSpec
from gpugov.model.devices import DeviceConfig, DeviceMode
from gpugov.model.request import Allocation, PodRequest

MIG = DeviceConfig(DeviceMode.MIG)
EXCL = DeviceConfig(DeviceMode.EXCLUSIVE)


def mig_pod(name: str, profile: str) -> PodRequest:
    return PodRequest(name, 0, 0, 1, 142, mode=DeviceMode.MIG, mig_profile=profile)


def test_mig_instance_needs_free_memory_slices_not_only_compute() -> None:
    """3g.40gb at 0 and at 4 occupy every memory slice of an A100 but leave one compute
    slice: no 1g.10gb fits (a 1g profile has 7 starts, padded to 8, and the padding once
    counted as a free start)."""
    s = ClusterState([NodeSpec("a", 8000, 8192, 1, "A100-SXM4-80GB", devices=(MIG,))])
    for i, start in enumerate((0, 4)):
        req = mig_pod(f"big{i}", "3g.40gb")
        s.allocate(req, Allocation(0, (0,), 428, s.charge(req, 0, 0)[1], start))
    assert s.mig_compute_free[0, 0] == 1
    small = mig_pod("small", "1g.10gb")
    assert s.feasible(small).tolist() == [False]
    assert s.device_fits(small, 0).tolist() == [False]
    assert s.failure_reason(small) == "mig-slice"
    with pytest.raises(ValueError):
        s.allocate(small, Allocation(0, (0,), 142, s.charge(small, 0, 0)[1], 6))


def test_padding_columns_match_no_device_mode() -> None:
    """A soft slice on a cluster of exclusive devices is refused for its mode, also when a
    node has fewer GPUs than the widest (its padding columns are no device at all)."""
    s = ClusterState([NodeSpec("a", 8000, 8192, 1, "A100-SXM4-80GB", devices=(EXCL,)),
                      NodeSpec("b", 8000, 8192, 2, "A100-SXM4-80GB", devices=(EXCL, EXCL))])
    req = PodRequest("p", 0, 0, 1, 100)
    assert s.feasible(req).tolist() == [False, False]
    assert s.failure_reason(req) == "gpu-mode"
    assert s.device_fits(req, np.arange(2)).tolist() == [[False, False], [False, False]]


def test_too_few_devices_is_a_compute_refusal_on_both_paths() -> None:
    """A 2-GPU pod where every node has one GPU: `gpu`, whether the per-node summaries
    (all soft) or the per-device filter (a mode somewhere) answer."""
    plain = ClusterState([NodeSpec("a", 8000, 8192, 1, "A100-SXM4-80GB")])
    mixed = ClusterState([NodeSpec("a", 8000, 8192, 1, "A100-SXM4-80GB", devices=(EXCL,))])
    req = PodRequest("p", 0, 0, 2, 1000)
    assert plain.failure_reason(req) == mixed.failure_reason(req) == "gpu"


def test_cpu_only_pod_keeps_its_node_selector_when_allocated() -> None:
    s = ClusterState([NodeSpec("a", 8000, 8192, 1, "T4", labels=(("zone", "a"),)),
                      NodeSpec("b", 8000, 8192, 1, "T4", labels=(("zone", "b"),))])
    req = PodRequest("p", 1000, 1024, node_selector=(("zone", "a"),))
    assert s.feasible(req).tolist() == [True, False]
    before = s.snapshot()
    with pytest.raises(ValueError, match="nodeSelector"):
        s.allocate(req, Allocation(1, (), 0))
    assert all(np.array_equal(v, before[k]) for k, v in s.snapshot().items())
    s.allocate(req, Allocation(0, (), 0))
    assert s.cpu_free.tolist() == [7000, 8000]


def test_mig_allocation_at_a_start_the_profile_lacks_is_refused() -> None:
    """A replayed allocation naming a start the profile does not have (3g.40gb starts at 0
    or 4) is a ValueError like every other refusal, and changes nothing."""
    s = ClusterState([NodeSpec("a", 8000, 8192, 1, "A100-SXM4-80GB", devices=(MIG,))])
    req = mig_pod("p", "3g.40gb")
    before = s.snapshot()
    with pytest.raises(ValueError, match="3g.40gb"):
        s.allocate(req, Allocation(0, (0,), 428, s.charge(req, 0, 0)[1], 3))
    assert all(np.array_equal(v, before[k]) for k, v in s.snapshot().items())
