"""Soft slices never overfill a device in either dimension; replicas track memory risk."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpugov.model.devices import MpsState, SoftState, TimesliceState
from gpugov.placement.soft import (
    PodType,
    fragmentation,
    place_mps,
    place_soft,
    place_timeslice,
)

WORKLOAD = [PodType(100, 6144, 1), PodType(250, 12288, 1), PodType(500, 40960, 0.5)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 1000), st.integers(1, 90_000)), max_size=40),
       st.sampled_from([1.0, 1.5]))
def test_no_device_over_memory_or_compute(pods, oversub) -> None:
    states = [SoftState(81920, oversubscription=oversub) for _ in range(4)]
    for k, (milli, mem) in enumerate(pods):
        got = place_soft(states, f"p{k}", milli, mem, WORKLOAD)
        if got is None:
            assert all(milli > s.free_milli or mem > s.free_memory_mib for s in states)
            continue
        i, states[i] = got
    for s in states:
        assert 0 <= s.used_milli <= 1000
        assert 0 <= s.used_memory_mib <= s.memory_capacity_mib


def test_fragmentation_counts_free_capacity_no_pod_can_use() -> None:
    # device 0: compute free but memory gone -> all free compute is stranded
    frag = fragmentation(np.array([600, 600]), np.array([1000, 60000]), np.array([81920] * 2),
                         WORKLOAD)
    assert frag[0] > frag[1]
    assert frag[1] == 0.0


def test_soft_placement_packs_when_it_costs_nothing_and_spreads_when_it_would() -> None:
    partly = SoftState(81920, used_milli=400, used_memory_mib=34816)  # 600 / 46 GiB free
    i, _ = place_soft([SoftState(81920), partly], "small", 100, 6144, WORKLOAD)  # type: ignore
    assert i == 1  # still room for a 500-milli pod afterwards: pack
    tight = SoftState(81920, used_milli=500, used_memory_mib=40960)  # exactly one 500 fits
    i, _ = place_soft([SoftState(81920), tight], "small", 100, 6144, WORKLOAD)  # type: ignore
    assert i == 0  # packing would strand the 500-milli slot: FGD spreads


def test_timeslice_is_a_counter_and_tracks_memory_risk() -> None:
    states = [TimesliceState(16384, replicas=2)]
    i, states[0] = place_timeslice(states, "a", 12000)  # type: ignore[misc]
    _, states[0] = place_timeslice(states, "b", 12000)  # type: ignore[misc]
    assert states[0].memory_risk > 1.0  # both placed: nothing enforces memory
    assert place_timeslice(states, "c", 1) is None  # out of replicas


def test_mps_caps_each_client() -> None:
    states = [MpsState(81920, clients=4)]
    assert place_mps(states, "big", 250, 30000) is None  # over 20 GiB per client
    assert place_mps(states, "ok", 250, 20000) is not None
    assert place_mps(states, "hungry", 400, 1000) is None  # over 25 % of SMs
