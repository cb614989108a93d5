"""Mixed-mode nodes: a pod never gets weaker isolation than its request and tier require."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpugov.k8s.resources import GpuRequest, translate
from gpugov.model.devices import (
    Device,
    DeviceMode,
    DeviceState,
    ExclusiveState,
    MigState,
    MpsState,
    SoftState,
    TimesliceState,
    hgx_topology,
)
from gpugov.model.isolation import IsolationLevel, TrustTier, required_isolation
from gpugov.model.mig import (
    MigInstance,
    find_placement,
    get_geometry,
    layout_errors,
    maximal_layouts,
)
from gpugov.placement.mixed import Placed, Refused, choose_node, place_mixed

H100 = "H100-SXM5-80GB"
A100 = "A100-SXM4-80GB"
CARD = 81920
GIB = 1024
U, INT, T = TrustTier.UNTRUSTED, TrustTier.INTERNAL, TrustTier.TRUSTED


def _state(kind: str) -> DeviceState:
    """`mig`, `soft`, `ts`, `mps`, `excl`, or a full variant (`soft!`, `ts!`, `mps!`, `excl!`,
    `mig!`) that has no room left."""
    full = kind.endswith("!")
    kind = kind.rstrip("!")
    if kind == "mig":
        if full:
            return MigState(H100, tuple(find_placement(get_geometry(H100), ["7g.80gb"]) or ()),
                            ("other",))
        return MigState(H100)
    if kind == "soft":
        return SoftState(CARD, used_milli=1000 if full else 0)
    if kind == "ts":
        return TimesliceState(CARD, 4, used=4 if full else 0)
    if kind == "mps":
        return MpsState(CARD, 4, used=4 if full else 0)
    return ExclusiveState("other" if full else None)


def node(*kinds: str, domains: int = 1) -> list[Device]:
    topo = hgx_topology(len(kinds), domains=domains, numa_nodes=min(2, len(kinds)),
                        pcie_switches=min(4, len(kinds)))
    return [Device(i, H100, _state(k), topo[i]) for i, k in enumerate(kinds)]


SMALL = {"nvidia.com/gpumem": 12 * GIB, "nvidia.com/gpucores": 25}  # a soft slice
NOTEBOOK = {"nvidia.com/gpumem": 6 * GIB, "nvidia.com/gpucores": 10}

# (node devices, limits, annotations, tier, expected mode or None = refused, weaker_had_room)
CASES = [
    # untrusted: only hard, even when only weaker modes have room
    (("soft", "ts", "mps"), SMALL, {}, U, None, True),
    (("soft", "ts", "mig!", "excl!"), SMALL, {}, U, None, True),
    (("soft", "ts", "mig"), SMALL, {}, U, DeviceMode.MIG, False),
    (("soft", "ts", "excl"), SMALL, {}, U, DeviceMode.EXCLUSIVE, False),
    (("mig", "excl"), SMALL, {}, U, DeviceMode.MIG, False),  # MIG wastes less than a card
    # internal: soft or hard, never none
    (("ts", "mps", "soft", "mig"), SMALL, {}, INT, DeviceMode.SOFT, False),
    (("ts", "mps", "soft!", "mig"), SMALL, {}, INT, DeviceMode.MIG, False),
    (("ts", "mps", "soft!"), SMALL, {}, INT, None, True),
    # trusted: the weakest mode with room first, keeping isolated room for stricter tenants
    (("excl", "mig", "soft", "ts"), SMALL, {}, T, DeviceMode.TIMESLICE, False),
    (("excl", "mig", "soft", "ts", "mps"), NOTEBOOK, {}, T, DeviceMode.MPS, False),
    (("excl", "mig", "soft", "ts!"), SMALL, {}, T, DeviceMode.SOFT, False),
    (("excl", "mig"), SMALL, {}, T, DeviceMode.MIG, False),
    # the pod's own annotation raises the floor above its tier's
    (("ts", "soft"), SMALL, {"gpugov.io/isolation": "soft"}, T, DeviceMode.SOFT, False),
    # MIG requests only on MIG devices
    (("excl", "soft", "mig"), {"nvidia.com/mig-1g.10gb": 1}, {}, T, DeviceMode.MIG, False),
    (("excl", "soft", "mig!"), {"nvidia.com/mig-1g.10gb": 1}, {}, T, None, False),
    # whole GPUs: exclusive first, a full MIG instance only for one GPU when none is free
    (("mig", "excl"), {"nvidia.com/gpu": 1}, {}, T, DeviceMode.EXCLUSIVE, False),
    (("mig", "excl!"), {"nvidia.com/gpu": 1}, {}, T, DeviceMode.MIG, False),
    (("mig", "mig", "excl"), {"nvidia.com/gpu": 2}, {}, T, None, False),
    # time-slice replicas have no size: never upgraded
    (("ts", "mig"), {"nvidia.com/gpu.shared": 1}, {}, T, DeviceMode.TIMESLICE, False),
    (("ts", "mig"), {"nvidia.com/gpu.shared": 1}, {}, INT, None, True),
]


@pytest.mark.parametrize(("kinds", "limits", "ann", "tier", "mode", "weaker"), CASES)
def test_mode_chosen_per_tier(kinds, limits, ann, tier, mode, weaker) -> None:
    req = translate(limits, ann)
    assert req is not None
    devs = node(*kinds)
    got = place_mixed(devs, req, tier, "pod")
    required = required_isolation(req.isolation, tier)
    if mode is None:
        assert isinstance(got, Refused), got
        assert got.weaker_had_room is weaker
        assert got.required == required
        if weaker:
            assert f"needs {required} isolation" in got.reason
        return
    assert isinstance(got, Placed), got
    assert got.mode is mode
    assert got.isolation >= required
    for s in got.slices:
        assert devs[s.device].mode is mode  # the slice lands on a device of that mode


def test_refusal_names_tier_and_the_modes_that_had_room() -> None:
    got = place_mixed(node("soft", "ts", "excl!"), translate(SMALL), U, "pod")  # type: ignore
    assert isinstance(got, Refused)
    assert got.reason.startswith("needs hard isolation (tenant tier untrusted)")
    assert "timeslice/soft" in got.reason and "none/soft" in got.reason


def test_refusal_without_room_lists_each_mode() -> None:
    got = place_mixed(node("soft!", "mig!", "excl!"), translate(SMALL), INT, "pod")  # type: ignore
    assert isinstance(got, Refused) and not got.weaker_had_room
    assert "soft:" in got.reason and "mig:" in got.reason and "exclusive: 0 of 1 free" in got.reason


def test_replica_refusal_says_what_to_ask_for() -> None:
    got = place_mixed(node("ts"), translate({"nvidia.com/gpu.shared": 1}), U, "p")  # type: ignore
    assert isinstance(got, Refused) and "nvidia.com/gpumem" in got.reason


def test_mig_request_lands_at_a_valid_least_fragmenting_start() -> None:
    devs = node("excl", "soft", "mig")
    got = place_mixed(devs, translate({"nvidia.com/mig-1g.10gb": 1}), T, "p")  # type: ignore
    assert isinstance(got, Placed)
    (s,) = got.slices
    assert s.device == 2 and s.mig is not None
    assert s.mig.start in get_geometry(H100).profile("1g.10gb").starts
    assert s.mig.start == 6  # keeps 4g@0, 3g@0/4, 2g@0/2/4 open (placement/mig.py)


def test_soft_request_maps_to_the_smallest_covering_profile() -> None:
    got = place_mixed(node("mig"), translate(SMALL), U, "p")  # type: ignore
    assert isinstance(got, Placed) and got.slices[0].mig is not None
    assert got.slices[0].mig.profile == "2g.20gb"  # 250m needs 2 of 7 compute slices
    got = place_mixed(node("mig"), translate({"nvidia.com/gpumem": 30 * GIB}), U, "p")  # type: ignore
    assert isinstance(got, Placed) and got.slices[0].mig is not None
    assert got.slices[0].mig.profile == "3g.40gb"  # memory share 375m, 30 GiB
    half = translate({"nvidia.com/gpumem-percentage": 50})
    got = place_mixed(node("mig"), half, U, "p")  # type: ignore
    assert isinstance(got, Placed) and got.slices[0].mig is not None
    assert got.slices[0].mig.profile == "4g.40gb"  # 50 % = half the memory slices


def test_a_free_larger_instance_before_a_whole_device() -> None:
    # 4g@0 is busy and a free 3g@4 exists: no 2g start is left, the 3g still covers 250m/12 GiB
    busy = MigState(H100, (MigInstance(0, "4g.40gb"), MigInstance(4, "3g.40gb")), ("a", None))
    devs = [Device(0, H100, ExclusiveState()), Device(1, H100, busy)]
    got = place_mixed(devs, translate(SMALL), U, "p")  # type: ignore
    assert isinstance(got, Placed) and got.slices[0].mig == MigInstance(4, "3g.40gb")
    assert got.devices[1].state.owners == ("a", "p")  # type: ignore[union-attr]


def test_multi_gpu_whole_request_stays_in_one_nvswitch_domain() -> None:
    devs = node(*(["excl"] * 8), domains=2)
    devs[1] = Device(1, H100, ExclusiveState("busy"), devs[1].topology)
    got = place_mixed(devs, translate({"nvidia.com/gpu": 4}), U, "p")  # type: ignore
    assert isinstance(got, Placed)
    assert {devs[s.device].topology.nvlink_domain for s in got.slices} == {1}
    # topology=required refuses a set split across domains
    devs[5] = Device(5, H100, ExclusiveState("busy"), devs[5].topology)
    req = translate({"nvidia.com/gpu": 4}, {"gpugov.io/topology": "required"})
    got = place_mixed(devs, req, U, "p")  # type: ignore
    assert isinstance(got, Refused) and "NVLink domain" in got.reason
    assert isinstance(place_mixed(devs, translate({"nvidia.com/gpu": 4}), U, "p"), Placed)  # type: ignore


def test_unhealthy_and_disallowed_models_are_skipped() -> None:
    devs = node("excl", "excl")
    devs[0] = Device(0, H100, ExclusiveState(), devs[0].topology, healthy=False)
    devs[1] = Device(1, A100, ExclusiveState(), devs[1].topology)
    assert isinstance(place_mixed(devs, translate({"nvidia.com/gpu": 1},  # type: ignore
                                                  {"gpugov.io/model": H100}), T, "p"), Refused)
    got = place_mixed(devs, translate({"nvidia.com/gpu": 1}), T, "p")  # type: ignore
    assert isinstance(got, Placed) and got.slices[0].device == 1


def test_placement_is_pure() -> None:
    devs = node("mig", "soft", "ts")
    before = list(devs)
    got = place_mixed(devs, translate(SMALL), INT, "p")  # type: ignore
    assert devs == before and isinstance(got, Placed) and got.devices != tuple(before)


def test_choose_node_prefers_the_weakest_sufficient_mode_then_the_node_score() -> None:
    hard_only = node("mig", "excl")
    with_ts = node("mig", "ts")
    got = choose_node([("hard", hard_only), ("ts", with_ts)], translate(SMALL), T, "p")  # type: ignore
    assert not isinstance(got, Refused) and got.node == "ts"
    split = node("excl", "excl", "excl", "excl", domains=2)  # 2 + 2 across domains
    split = [split[0], split[2]]  # one per domain: a split pair
    tight = node("excl", "excl")
    got = choose_node([("split", split), ("tight", tight)], translate({"nvidia.com/gpu": 2}),  # type: ignore
                      U, "p")
    assert not isinstance(got, Refused) and got.node == "tight"  # same NVLink domain
    got = choose_node([("a", node("ts")), ("b", node("soft"))], translate(SMALL), U, "p")  # type: ignore
    assert isinstance(got, Refused) and got.weaker_had_room and got.reason.startswith("a: ")


# --- property: random mixed nodes, requests and tiers ------------------------------------

MODELS = (H100, A100)


@st.composite
def mixed_nodes(draw) -> list[Device]:
    n = draw(st.integers(1, 8))
    topo = hgx_topology(n, domains=draw(st.sampled_from([1, 2])) if n > 1 else 1,
                        numa_nodes=min(2, n), pcie_switches=min(4, n))
    devs = []
    for i in range(n):
        model = draw(st.sampled_from(MODELS))
        card = CARD
        kind = draw(st.sampled_from(["excl", "mig", "soft", "ts", "mps"]))
        state: DeviceState
        if kind == "mig":
            layouts = maximal_layouts(model)
            layout = draw(st.sampled_from([(), *layouts[:8]]))
            inst = find_placement(get_geometry(model), list(layout)) or ()
            state = MigState(model, inst)
        elif kind == "soft":
            state = SoftState(card, oversubscription=draw(st.sampled_from([1.0, 1.5])))
        elif kind == "ts":
            state = TimesliceState(card, draw(st.integers(1, 4)))
        elif kind == "mps":
            state = MpsState(card, draw(st.integers(1, 4)))
        else:
            state = ExclusiveState()
        devs.append(Device(i, model, state, topo[i]))
    return devs


@st.composite
def requests(draw) -> GpuRequest:
    iso = draw(st.sampled_from([None, *IsolationLevel]))
    kind = draw(st.sampled_from(["whole", "mig", "soft", "replica"]))
    if kind == "whole":
        return GpuRequest(draw(st.integers(1, 4)), DeviceMode.EXCLUSIVE, isolation=iso)
    if kind == "mig":
        profile = draw(st.sampled_from(get_geometry(H100).profile_names(include_media=False)))
        return GpuRequest(draw(st.integers(1, 3)), DeviceMode.MIG, mig_profile=profile,
                          isolation=iso)
    if kind == "replica":
        return GpuRequest(1, DeviceMode.TIMESLICE, milli=None, isolation=iso)
    milli = draw(st.one_of(st.none(), st.integers(1, 999)))
    mem = draw(st.integers(1, CARD))
    if milli is None or draw(st.booleans()):
        return GpuRequest(1, DeviceMode.SOFT, milli=milli, memory_mib=mem, isolation=iso)
    return GpuRequest(1, DeviceMode.SOFT, milli=milli, isolation=iso)  # whole-card memory


def _check_capacity(devs: list[Device]) -> None:
    for d in devs:
        s = d.state
        if isinstance(s, SoftState):
            assert 0 <= s.used_milli <= 1000
            assert 0 <= s.used_memory_mib <= s.memory_capacity_mib
        elif isinstance(s, MigState):
            assert not layout_errors(get_geometry(s.model), s.instances)  # no overlap, valid
        elif isinstance(s, TimesliceState):
            assert s.used <= s.replicas
        elif isinstance(s, MpsState):
            assert s.used <= s.clients


@settings(max_examples=150, deadline=None)
@given(mixed_nodes(), st.lists(st.tuples(requests(), st.sampled_from(list(TrustTier))),
                               min_size=1, max_size=12))
def test_isolation_never_below_required_and_no_device_over_capacity(devs, asks) -> None:
    for k, (req, tier) in enumerate(asks):
        got = place_mixed(devs, req, tier, f"p{k}")
        required = required_isolation(req.isolation, tier)
        if isinstance(got, Refused):
            assert got.reason
            continue
        assert got.isolation >= required
        by_index = {d.index: d for d in devs}
        for s in got.slices:
            assert by_index[s.device].mode.isolation >= required  # the device's own mode
            assert s.mode is by_index[s.device].mode
            if s.mode is DeviceMode.EXCLUSIVE:
                assert by_index[s.device].state == ExclusiveState()  # was free
        if req.mode is DeviceMode.MIG:
            assert {s.mode for s in got.slices} == {DeviceMode.MIG}
            assert all(s.mig is not None and s.mig.profile == req.mig_profile
                       for s in got.slices)
        assert len(got.slices) == (req.count if req.mode in (DeviceMode.EXCLUSIVE,
                                                             DeviceMode.MIG) else 1)
        devs = list(got.devices)
        _check_capacity(devs)


def test_mixed_scenario_delivers_each_tier_its_floor_and_accounts_for_every_pod() -> None:
    from gpugov.sim.modes import mixed_scenario

    rows = {r.tier: r for r in mixed_scenario(pods_per_tier=40, seed=0)}
    for r in rows.values():
        assert r.placed + r.refused_isolation + r.refused_no_room == r.pods == 40
        assert sum(r.delivered.values()) == r.placed
        assert all(n == 0 for lvl, n in r.delivered.items() if lvl < r.floor)
    assert rows[U].refused_isolation > 0  # soft/time-slice room existed, and was not given
    assert rows[T].delivered[IsolationLevel.NONE] > 0  # trusted pods leave isolated room free
    assert rows[T].refused_isolation == 0  # nothing is below the trusted floor
