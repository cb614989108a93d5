"""Several MIG instances in one pod, and replicas of time-sliced MIG instances, in the one state.

Random fleets of MIG devices (dynamic, fixed layouts, fixed layouts with time-sliced
instances) take random pods (N instances of a profile; one replica of a time-sliced
instance, naming memory or not, capped or oversubscribing, with an isolation floor) through
the engine with several policies, in random place / release order. After every step what
the live allocations hold is recomputed from them alone: no memory slice held twice, no
device's compute slices overdrawn, a fixed layout's instance held at most once and only when
it is in the layout and not time-sliced, no time-sliced instance with more replicas or
memory than it has, uncapped and capped replicas never on one instance; releasing
everything gives the state back exactly.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpugov.model.cluster import ClusterState, NodeSpec
from gpugov.model.devices import DeviceConfig, DeviceMode
from gpugov.model.isolation import IsolationLevel
from gpugov.model.mig import MigInstance, find_placement, get_geometry, maximal_layouts
from gpugov.model.mig_table import mig_table
from gpugov.model.request import Allocation, PodRequest
from gpugov.placement.base import PolicyContext
from gpugov.placement.engine import Placer
from gpugov.placement.fragmentation import FragmentationModel, TypicalPods
from gpugov.placement.registry import get_policy

MODELS = ("A100-SXM4-40GB", "H100-SXM5-80GB", "A30")
PROFILES = ("1g.5gb", "1g.10gb", "2g.20gb", "2g.10gb", "3g.40gb", "3g.20gb", "1g.6gb",
            "2g.12gb", "4g.40gb", "1g.20gb")


@st.composite
def devices(draw, model: str) -> DeviceConfig:
    kind = draw(st.sampled_from(["dynamic", "fixed", "shared"]))
    if kind == "dynamic":
        return DeviceConfig(DeviceMode.MIG)
    profiles = draw(st.sampled_from(maximal_layouts(model)))
    layout = find_placement(get_geometry(model), list(profiles))
    assert layout is not None
    if kind == "shared":
        layout = tuple(MigInstance(m.start, m.profile, draw(st.sampled_from([1, 2, 4])))
                       for m in layout)
    return DeviceConfig(DeviceMode.MIG, mig_layout=tuple(layout))


@st.composite
def fleets(draw) -> list[NodeSpec]:
    out = []
    for i in range(draw(st.integers(1, 3))):
        model = draw(st.sampled_from(MODELS))
        gpus = draw(st.integers(1, 3))
        devs = tuple(draw(devices(model)) for _ in range(gpus))
        out.append(NodeSpec(f"n{i}", 64_000, 256_000, gpus, model, devices=devs))
    return out


@st.composite
def requests(draw, i: int) -> PodRequest:
    profile = draw(st.sampled_from(PROFILES))
    if draw(st.booleans()):
        return PodRequest(f"p{i}", 100, 100, draw(st.integers(1, 8)), 142,
                          mode=DeviceMode.MIG, mig_profile=profile)
    over = draw(st.booleans())
    floor = IsolationLevel.NONE if over else draw(st.sampled_from(
        [IsolationLevel.NONE, IsolationLevel.SOFT]))
    return PodRequest(f"p{i}", 100, 100, 1, 1, mode=DeviceMode.TIMESLICE, mig_profile=profile,
                      gpu_memory_mib=0 if over else draw(st.sampled_from([0, 0, 1000, 3000])),
                      oversubscribe=over, min_isolation=floor)


def check(state: ClusterState, specs: list[NodeSpec], live: list[tuple[PodRequest, Allocation]]
          ) -> None:
    """What the live allocations hold never exceeds what the hardware has."""
    slices: dict[tuple[int, int], int] = {}
    compute: dict[tuple[int, int], int] = {}
    instances: dict[tuple[int, int, int], list[tuple[PodRequest, Allocation]]] = {}
    for req, a in live:
        spec = specs[a.node]
        table = mig_table(spec.model)
        if req.mode is DeviceMode.MIG:
            assert len(a.devices) == len(a.mig_starts) == req.gpu_count
            for d, start in a.instances:
                k = table.number(req.mig_profile, start)
                pl = table.placements[k]
                layout = spec.devices[d].mig_layout
                if layout is not None:  # an instance of the layout, not a time-sliced one
                    assert MigInstance(start, req.mig_profile) in layout, (req, a)
                key = (a.node, d)
                assert not slices.get(key, 0) & pl.bits, f"{req.name}: slices held twice"
                slices[key] = slices.get(key, 0) | pl.bits
                compute[key] = compute.get(key, 0) + pl.compute_slices
                assert compute[key] <= table.geometry.compute_slices
        else:
            d = a.devices[0]
            k = table.number(req.mig_profile, a.mig_start)
            inst = next(m for m in spec.devices[d].mig_layout or ()
                        if (m.start, m.profile) == (a.mig_start, req.mig_profile))
            assert inst.replicas > 1, "a replica of an instance that is not time-sliced"
            assert a.milli == table.milli(req.mig_profile) // inst.replicas
            want = 0 if req.oversubscribe else (req.gpu_memory_mib or
                                                table.placements[k].memory_mib // inst.replicas)
            assert a.memory_mib == want
            instances.setdefault((a.node, d, k), []).append((req, a))
    for (n, d, k), held in instances.items():
        spec = specs[n]
        pl = mig_table(spec.model).placements[k]
        inst = next(m for m in spec.devices[d].mig_layout or () if m.start == pl.start
                    and m.profile == pl.profile)
        assert len(held) <= inst.replicas
        assert sum(a.memory_mib for _, a in held) <= pl.memory_mib
        uncapped = any(r.oversubscribe for r, _ in held)
        soft = any(r.min_isolation > IsolationLevel.NONE and not r.oversubscribe
                   for r, _ in held)
        assert not (uncapped and soft), "uncapped and capped replicas on one instance"
    for n in range(len(specs)):
        assert (state.gpu_free[n] >= 0).all() and (state.gpu_mem_free[n] >= 0).all()


@pytest.mark.parametrize("policy", ["gpugov", "bestfit", "fgd"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_no_mig_instance_or_replica_is_overcommitted_and_release_gives_all_back(policy, data):
    specs = data.draw(fleets())
    state = ClusterState(specs)
    before = state.snapshot()
    reqs = [data.draw(requests(i)) for i in range(data.draw(st.integers(1, 14)))]
    rng = np.random.default_rng(0)
    ctx = PolicyContext(FragmentationModel(TypicalPods.from_requests(reqs), state), rng)
    placer = Placer(state, get_policy(policy)(ctx))
    live: list[tuple[PodRequest, Allocation]] = []
    for req in reqs:
        if live and data.draw(st.booleans()):
            r, a = live.pop(data.draw(st.integers(0, len(live) - 1)))
            state.release(r, a)
            check(state, specs, live)
        decision = placer.place(req)
        if decision.allocation is not None:
            live.append((req, decision.allocation))
        else:
            assert decision.reason
        check(state, specs, live)
    for r, a in reversed(live):
        state.release(r, a)
    after = state.snapshot()
    for key in before:
        if isinstance(before[key], dict):
            assert before[key] == after[key], key
        elif key != "version":
            assert np.array_equal(before[key], after[key]), key


def test_several_instances_share_one_gpu_and_fill_it_before_another():
    """Two 1g.10gb on a node of two empty H100s go on one GPU, the other stays whole; seven
    fill it; an eighth goes to the second GPU."""
    spec = NodeSpec("n", 64_000, 256_000, 2, "H100-SXM5-80GB",
                    devices=(DeviceConfig(DeviceMode.MIG), DeviceConfig(DeviceMode.MIG)))
    state = ClusterState([spec])
    placer = Placer(state, get_policy("gpugov")(PolicyContext(
        FragmentationModel(TypicalPods.from_requests([]), state), np.random.default_rng(0))))
    two = PodRequest("two", 0, 0, 2, 142, mode=DeviceMode.MIG, mig_profile="1g.10gb")
    a = placer.place(two).allocation
    assert a is not None and len(set(a.devices)) == 1 and len(a.mig_starts) == 2
    assert int(state.gpu_free[0, 1 - a.devices[0]]) == 1000
    five = PodRequest("five", 0, 0, 5, 142, mode=DeviceMode.MIG, mig_profile="1g.10gb")
    b = placer.place(five).allocation
    assert b is not None and set(b.devices) == set(a.devices)
    eight = PodRequest("one", 0, 0, 1, 142, mode=DeviceMode.MIG, mig_profile="1g.10gb")
    c = placer.place(eight).allocation
    assert c is not None and c.devices[0] != a.devices[0]
    nine = PodRequest("nine", 0, 0, 7, 142, mode=DeviceMode.MIG, mig_profile="1g.10gb")
    assert placer.place(nine).reason == "mig-slice"


def test_a_time_sliced_instance_is_handed_out_only_as_replicas():
    """A 1g.10gb time-sliced ×4 serves four replicas (instance memory ÷ 4 each), never a
    whole-instance pod; a replica naming more memory than is left is refused (gpu-memory)."""
    layout = (MigInstance(0, "4g.40gb"), MigInstance(4, "2g.20gb"), MigInstance(6, "1g.10gb", 4))
    spec = NodeSpec("n", 64_000, 256_000, 1, "H100-SXM5-80GB",
                    devices=(DeviceConfig(DeviceMode.MIG, mig_layout=layout),))
    state = ClusterState([spec])
    placer = Placer(state, get_policy("gpugov")(PolicyContext(
        FragmentationModel(TypicalPods.from_requests([]), state), np.random.default_rng(0))))
    whole = PodRequest("whole", 0, 0, 1, 142, mode=DeviceMode.MIG, mig_profile="1g.10gb")
    assert placer.place(whole).reason == "mig-slice"
    replica = PodRequest("r", 0, 0, 1, 1, mode=DeviceMode.TIMESLICE, mig_profile="1g.10gb")
    got = [placer.place(replica).allocation for _ in range(3)]
    assert all(a is not None and a.mig_start == 6 and a.memory_mib == 9984 // 4 for a in got)
    big = PodRequest("big", 0, 0, 1, 1, mode=DeviceMode.TIMESLICE, mig_profile="1g.10gb",
                     gpu_memory_mib=5000)
    assert placer.place(big).reason == "gpu-memory"
    assert placer.place(replica).allocation is not None
    assert placer.place(replica).reason == "replicas"
