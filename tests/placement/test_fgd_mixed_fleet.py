"""FGD and GpuPacking on a mixed-mode fleet score only devices the filter accepts."""

from __future__ import annotations

import numpy as np
import pytest

from gpugov.model.cluster import ClusterState, NodeSpec
from gpugov.model.devices import DeviceConfig, DeviceMode
from gpugov.model.request import Allocation, PodRequest
from gpugov.placement.base import PolicyContext
from gpugov.placement.fragmentation import FragmentationModel, TypicalPods
from gpugov.placement.registry import get_policy

SLICE = PodRequest("slice", 1000, 1024, 1, 300)


def _mixed_node(name: str) -> NodeSpec:
    # device 0: dynamic MIG (fully free milli, but no soft slice may land there);
    # device 1: soft, partly used below
    return NodeSpec(name, 64_000, 262_144, 2, "A100-SXM4-80GB",
                    devices=(DeviceConfig(DeviceMode.MIG), DeviceConfig(DeviceMode.SOFT)))


@pytest.mark.parametrize("policy", ["fgd", "gpupacking"])
def test_a_soft_slice_is_scored_on_a_soft_device_not_on_a_free_mig_device(policy: str):
    state = ClusterState([_mixed_node("a"), _mixed_node("b")])
    state.allocate(PodRequest("held", 0, 0, 1, 600), Allocation(0, (1,), 600))
    ctx = PolicyContext(FragmentationModel(TypicalPods.from_requests([SLICE]), state),
                        np.random.default_rng(0))
    pol = get_policy(policy)(ctx)
    nodes = np.flatnonzero(state.feasible(SLICE))
    assert list(nodes) == [0, 1]
    scores = pol.score(state, SLICE, nodes)
    assert ((scores >= 0) & (scores <= 100)).all()
    for n in (0, 1):
        (dev,) = pol.choose_devices(state, SLICE, n)
        assert dev == 1  # the soft device; the MIG device only takes MIG instances


def test_fgd_scores_the_fitting_device_even_when_a_lower_one_has_the_same_free_milli():
    # node b: MIG device 0 and soft device 1 both fully free; FGD skips a device whose free
    # milli equals a lower-index one's, which must not skip the only device that fits
    state = ClusterState([_mixed_node("a"), _mixed_node("b")])
    state.allocate(PodRequest("held", 0, 0, 1, 600), Allocation(0, (1,), 600))
    ctx = PolicyContext(FragmentationModel(TypicalPods.from_requests([SLICE]), state),
                        np.random.default_rng(0))
    best, dev = get_policy("fgd")(ctx)._scores(state, SLICE, np.array([0, 1]))
    assert list(dev) == [1, 1]
    assert best[1] > 0  # an empty soft device taking a slice is a real candidate
