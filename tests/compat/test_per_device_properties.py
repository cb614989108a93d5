"""Property: whatever mix of HAMi-style requests arrives (N devices each with a slice, memory
in MiB or as a percentage of the card), every policy's placements stay within every device's
compute and memory, put N slices on N distinct devices of one node, charge a percentage of the
card each device has, and releasing everything gives every device back whole."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpugov.model.cluster import ClusterState, NodeSpec
from gpugov.model.devices import DeviceMode
from gpugov.model.request import PodRequest
from gpugov.placement.base import PolicyContext
from gpugov.placement.engine import Placer
from gpugov.placement.fragmentation import FragmentationModel, TypicalPods
from gpugov.placement.registry import POLICIES, PRODUCTION_POLICIES, get_policy

CARDS = ("A100-SXM4-40GB", "A100-SXM4-80GB", "H100-SXM5-80GB", "T4")


@st.composite
def requests(draw) -> PodRequest:
    count = draw(st.integers(1, 3))
    milli = draw(st.integers(1, 1000))
    mem = draw(st.sampled_from(["pct", "mib", "none"]))
    kw: dict = {}
    if mem == "pct":
        kw["gpu_memory_percent"] = float(draw(st.integers(1, 100)))
    elif mem == "mib":
        kw["gpu_memory_mib"] = draw(st.integers(1, 40_000))
    if milli == 1000:
        kw.pop("gpu_memory_percent", None)
    if count > 1 and milli < 1000:
        kw["mode"] = DeviceMode.SOFT
    return PodRequest(f"p{draw(st.integers(0, 10**9))}", 100, 100, count, milli, **kw)


@settings(max_examples=60, deadline=None)
@given(nodes=st.lists(st.tuples(st.sampled_from(CARDS), st.integers(1, 4)), min_size=1,
                      max_size=4),
       reqs=st.lists(requests(), min_size=1, max_size=25),
       policy=st.sampled_from([*POLICIES, *PRODUCTION_POLICIES]))
def test_n_slices_and_percentages_never_overcommit(nodes, reqs, policy) -> None:
    specs = [NodeSpec(f"n{i}", 64_000, 262_144, g, m) for i, (m, g) in enumerate(nodes)]
    state = ClusterState(specs)
    typical = TypicalPods.from_requests([PodRequest("t", 1000, 1, 1, 500)])
    placer = Placer(state, get_policy(policy)(PolicyContext(
        FragmentationModel(typical, state), np.random.default_rng(0))))
    placed = []
    for req in reqs:
        d = placer.place(req)
        if d.allocation is None:
            continue
        a = d.allocation
        assert len(set(a.devices)) == len(a.devices) == req.gpu_count
        card = int(state.gpu_mem_cap[a.node, a.devices[0]])
        if req.gpu_memory_percent:
            assert a.memory_mib == math.ceil(card * req.gpu_memory_percent / 100)
        placed.append((req, a))
        assert (state.gpu_free >= 0).all() and (state.gpu_mem_free >= 0).all()
    for req, a in reversed(placed):
        state.release(req, a)
    assert (state.gpu_free == state.gpu_cap).all()
    assert (state.gpu_mem_free == state.gpu_mem_cap).all()
