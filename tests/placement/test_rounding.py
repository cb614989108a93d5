"""Rounding on mixed-mode nodes: a pod never gets weaker isolation than its request and tier
require, takes the weakest sufficient and least rounded-up form, and a refusal says whether
isolation or room blocked it. Everything is decided on the one `ClusterState`."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpugov.k8s.resources import GpuRequest, translate
from gpugov.model.cluster import MODE_CODE, ClusterState, NodeSpec
from gpugov.model.devices import DeviceConfig, DeviceMode, hgx_topology
from gpugov.model.isolation import IsolationLevel, TrustTier, required_isolation
from gpugov.model.mig import MigInstance, get_geometry, maximal_layouts
from gpugov.model.mig_table import mig_table
from gpugov.model.request import PodRequest
from gpugov.placement.base import PolicyContext
from gpugov.placement.engine import Placer, allocation_for
from gpugov.placement.fragmentation import FragmentationModel, TypicalPods
from gpugov.placement.registry import get_policy
from gpugov.placement.rounding import Rounded, covering_profiles, place_rounded

H100 = "H100-SXM5-80GB"
A100 = "A100-SXM4-80GB"
GIB = 1024
U, INT, T = TrustTier.UNTRUSTED, TrustTier.INTERNAL, TrustTier.TRUSTED
CODE_MODE = {v: k for k, v in MODE_CODE.items()}

_MODES = {"mig": DeviceMode.MIG, "soft": DeviceMode.SOFT, "ts": DeviceMode.TIMESLICE,
          "mps": DeviceMode.MPS, "excl": DeviceMode.EXCLUSIVE}


def _config(kind: str) -> DeviceConfig:
    mode = _MODES[kind.rstrip("!~")]
    return DeviceConfig(mode, 4 if mode in (DeviceMode.TIMESLICE, DeviceMode.MPS) else 1)


def placer_for(*nodes: tuple[str, ...], domains: int = 1, policy: str = "bestfit") -> Placer:
    """One node per tuple of device kinds: `mig`, `soft`, `ts`, `mps`, `excl`; a `!` suffix
    makes the device full (another tenant holds all of it), `~` partly used (a small soft
    slice of another tenant)."""
    specs = []
    for i, kinds in enumerate(nodes):
        n = len(kinds)
        topo = hgx_topology(n, domains=domains, numa_nodes=min(2, n), pcie_switches=min(4, n))
        specs.append(NodeSpec(f"n{i}", 64_000, 256 * GIB, n, H100,
                              devices=tuple(_config(k) for k in kinds), topology=topo))
    state = ClusterState(specs)
    for i, kinds in enumerate(nodes):
        for d, kind in enumerate(kinds):
            for filler in _fillers(kind, d):
                state.allocate(filler, allocation_for(state, filler, i, (d,)))
    ctx = PolicyContext(FragmentationModel(TypicalPods.from_requests([]), state),
                        np.random.default_rng(0))
    return Placer(state, get_policy(policy)(ctx))


def _fillers(kind: str, d: int) -> list[PodRequest]:
    base = kind.rstrip("!~")
    if kind.endswith("~"):
        return [PodRequest(f"small{d}", 0, 0, 1, 100, gpu_memory_mib=GIB, tenant="other")]
    if not kind.endswith("!"):
        return []
    if base == "mig":
        return [PodRequest(f"f{d}", 0, 0, 1, 1000, mode=DeviceMode.MIG, mig_profile="7g.80gb",
                           tenant="other")]
    if base in ("ts", "mps"):
        return [PodRequest(f"f{d}-{r}", 0, 0, 1, 250, mode=_MODES[base], oversubscribe=True,
                           tenant="other") for r in range(4)]
    mode = DeviceMode.SOFT if base == "soft" else DeviceMode.EXCLUSIVE
    return [PodRequest(f"f{d}", 0, 0, 1, 1000, mode=mode, tenant="other")]


def device_mode(placer: Placer, got: Rounded) -> DeviceMode:
    assert got.allocation is not None
    a = got.allocation
    modes = {CODE_MODE[int(placer.state.dev_mode[a.node, d])] for d in a.devices}
    assert len(modes) == 1
    return modes.pop()


def commit(placer: Placer, got: Rounded) -> None:
    assert got.request is not None and got.allocation is not None
    placer.state.allocate(got.request, got.allocation)


SMALL = {"nvidia.com/gpumem": 12 * GIB, "nvidia.com/gpucores": 25}  # a soft slice
NOTEBOOK = {"nvidia.com/gpumem": 6 * GIB, "nvidia.com/gpucores": 10}

# (node devices, limits, annotations, tier, expected slice mode or None = refused,
#  weaker_had_room)
CASES = [
    # untrusted: only hard, even when only weaker modes have room
    (("soft~", "ts", "mps"), SMALL, {}, U, None, True),
    (("soft~", "ts", "mig!", "excl!"), SMALL, {}, U, None, True),
    (("soft~", "ts", "mig"), SMALL, {}, U, DeviceMode.MIG, False),
    (("soft~", "ts", "excl"), SMALL, {}, U, DeviceMode.EXCLUSIVE, False),
    (("soft", "ts"), SMALL, {}, U, DeviceMode.EXCLUSIVE, False),  # a free soft GPU, whole
    (("mig", "excl"), SMALL, {}, U, DeviceMode.MIG, False),  # MIG wastes less than a card
    # internal: soft or hard, never none; a capped time-slice replica is soft (memory),
    # after a soft slice, which also enforces the compute share
    (("ts", "mps", "soft", "mig"), SMALL, {}, INT, DeviceMode.SOFT, False),
    (("ts", "mps", "soft!", "mig"), SMALL, {}, INT, DeviceMode.TIMESLICE, False),
    (("ts!", "mps", "soft!", "mig"), SMALL, {}, INT, DeviceMode.MIG, False),
    (("mps", "soft!"), SMALL, {}, INT, None, True),
    # trusted: the weakest mode with room first, keeping isolated room for stricter tenants
    (("excl", "mig", "soft", "ts"), SMALL, {}, T, DeviceMode.SOFT, False),
    (("excl", "mig", "soft!", "ts"), SMALL, {}, T, DeviceMode.TIMESLICE, False),
    (("excl", "mig", "soft", "ts", "mps"), NOTEBOOK, {}, T, DeviceMode.MPS, False),
    (("excl", "mig", "soft", "ts!"), SMALL, {}, T, DeviceMode.SOFT, False),
    (("excl", "mig"), SMALL, {}, T, DeviceMode.MIG, False),
    # the pod's own annotation raises the floor above its tier's
    (("ts", "soft"), SMALL, {"gpugov.io/isolation": "soft"}, T, DeviceMode.SOFT, False),
    # MIG requests only on MIG devices
    (("excl", "soft", "mig"), {"nvidia.com/mig-1g.10gb": 1}, {}, T, DeviceMode.MIG, False),
    (("excl", "soft", "mig!"), {"nvidia.com/mig-1g.10gb": 1}, {}, T, None, False),
    # whole GPUs: whole devices first, a full MIG instance only for one GPU when none is free
    (("mig", "excl"), {"nvidia.com/gpu": 1}, {}, T, DeviceMode.EXCLUSIVE, False),
    (("mig", "excl!"), {"nvidia.com/gpu": 1}, {}, T, DeviceMode.MIG, False),
    (("mig", "mig", "excl"), {"nvidia.com/gpu": 2}, {}, T, None, False),
    # time-slice replicas have no size: never upgraded
    (("ts", "mig"), {"nvidia.com/gpu.shared": 1}, {}, T, DeviceMode.TIMESLICE, False),
    (("ts", "mig"), {"nvidia.com/gpu.shared": 1}, {}, INT, DeviceMode.TIMESLICE, False),
    (("ts", "mig"), {"nvidia.com/gpu.shared": 1}, {}, U, None, True),
]


@pytest.mark.parametrize(("kinds", "limits", "ann", "tier", "mode", "weaker"), CASES)
def test_mode_chosen_per_tier(kinds, limits, ann, tier, mode, weaker) -> None:
    req = translate(limits, ann)
    assert req is not None
    placer = placer_for(kinds)
    before = placer.state.snapshot()
    got = place_rounded(placer, req, "pod", tier, tenant=str(tier))
    required = required_isolation(req.isolation, tier)
    assert got.required == required
    for k, v in before.items():  # deciding changes nothing
        assert np.array_equal(v, placer.state.snapshot()[k]), k
    if mode is None:
        assert not got.placed, got
        assert got.weaker_had_room is weaker
        if weaker:
            assert f"needs {required} isolation" in got.reason
        return
    assert got.placed, got
    assert got.request is not None and got.request.slice_mode is mode
    assert got.isolation >= required
    if mode is not DeviceMode.EXCLUSIVE:
        assert device_mode(placer, got) is mode  # the slice lands on a device of that mode
    commit(placer, got)  # the state accepts what was decided


def test_refusal_names_tier_and_the_modes_that_had_room() -> None:
    got = place_rounded(placer_for(("soft~", "ts", "excl!")), translate(SMALL), "p", U)  # type: ignore[arg-type]
    assert not got.placed
    assert got.reason == ("needs hard isolation (tenant tier untrusted); room only on timeslice "
                          "devices, which deliver soft")  # sealed: not beside another tenant
    req = GpuRequest(1, DeviceMode.SOFT, 250, 12 * GIB, isolation=IsolationLevel.HARD)
    got = place_rounded(placer_for(("soft~", "ts", "excl!")), req, "p", INT)
    assert got.reason.startswith("needs hard isolation (asked by the pod; tenant tier internal "
                                 "needs soft)")
    assert "soft/timeslice devices, which deliver soft" in got.reason


def test_refusal_without_room_names_the_dimension_per_mode() -> None:
    got = place_rounded(placer_for(("soft!", "mig!", "excl!")), translate(SMALL), "p", INT)  # type: ignore[arg-type]
    assert not got.placed and not got.weaker_had_room
    assert got.reason.startswith("no room for 1 × 250m/12288 MiB at soft isolation or above")
    assert "soft: gpu" in got.reason and "mig: mig-slice" in got.reason
    assert "exclusive: gpu" in got.reason


def test_replica_refusal_says_what_to_ask_for() -> None:
    got = place_rounded(placer_for(("ts",)), translate({"nvidia.com/gpu.shared": 1}), "p", U)  # type: ignore[arg-type]
    assert not got.placed and "nvidia.com/gpumem" in got.reason


def test_mig_request_lands_at_a_valid_least_fragmenting_start() -> None:
    placer = placer_for(("excl", "soft", "mig"))
    got = place_rounded(placer, translate({"nvidia.com/mig-1g.10gb": 1}), "p", T)  # type: ignore[arg-type]
    assert got.allocation is not None and got.allocation.devices == (2,)
    assert got.allocation.mig_start in get_geometry(H100).profile("1g.10gb").starts
    assert got.allocation.mig_start == 6  # keeps 4g@0, 3g@0/4, 2g@0/2/4 open


def test_soft_request_maps_to_the_smallest_covering_profile() -> None:
    def profile(limits: dict) -> str:
        got = place_rounded(placer_for(("mig",)), translate(limits), "p", U)  # type: ignore[arg-type]
        assert got.request is not None
        return got.request.mig_profile

    assert profile(SMALL) == "2g.20gb"  # 250m needs 2 of 7 compute slices
    assert profile({"nvidia.com/gpumem": 30 * GIB}) == "3g.40gb"  # memory share 375m, 30 GiB
    assert profile({"nvidia.com/gpumem-percentage": 50}) == "4g.40gb"  # half the slices


def test_a_larger_covering_profile_before_a_whole_device() -> None:
    # a fixed layout 4g@0 (taken) + 3g@4: no 2g is possible, the free 3g still covers the pod
    specs = [NodeSpec("n", 64_000, 256 * GIB, 2, H100, devices=(
        DeviceConfig(DeviceMode.EXCLUSIVE),
        DeviceConfig(DeviceMode.MIG, mig_layout=(MigInstance(0, "4g.40gb"),
                                                 MigInstance(4, "3g.40gb")))))]
    state = ClusterState(specs)
    taken = PodRequest("a", 0, 0, 1, 571, mode=DeviceMode.MIG, mig_profile="4g.40gb")
    state.allocate(taken, allocation_for(state, taken, 0, (1,)))
    ctx = PolicyContext(FragmentationModel(TypicalPods.from_requests([]), state),
                        np.random.default_rng(0))
    placer = Placer(state, get_policy("bestfit")(ctx))
    got = place_rounded(placer, translate(SMALL), "p", INT)  # type: ignore[arg-type]
    assert got.request is not None and got.request.mig_profile == "3g.40gb"
    assert got.allocation is not None and got.allocation.mig_start == 4
    assert got.rank > 0  # the 2g form was tried first


def test_multi_gpu_whole_request_stays_in_one_nvswitch_domain() -> None:
    placer = placer_for(("excl", "excl!", *["excl"] * 6), domains=2)
    got = place_rounded(placer, translate({"nvidia.com/gpu": 4}), "p", U)  # type: ignore[arg-type]
    assert got.allocation is not None and got.allocation.devices == (4, 5, 6, 7)
    # topology=required refuses a set split across domains; preferred takes it
    placer = placer_for(("excl", "excl!", *["excl"] * 3, "excl!", "excl", "excl"), domains=2)
    req = translate({"nvidia.com/gpu": 4}, {"gpugov.io/topology": "required"})
    got = place_rounded(placer, req, "p", U)  # type: ignore[arg-type]
    assert not got.placed and "NVLink domain" in got.reason
    assert place_rounded(placer, translate({"nvidia.com/gpu": 4}), "p", U).placed  # type: ignore[arg-type]


def test_disallowed_models_are_skipped() -> None:
    spec = [NodeSpec("a100", 64_000, 256 * GIB, 1, A100, devices=(DeviceConfig(),)),
            NodeSpec("h100", 64_000, 256 * GIB, 1, H100, devices=(DeviceConfig(),))]
    state = ClusterState(spec)
    ctx = PolicyContext(FragmentationModel(TypicalPods.from_requests([]), state),
                        np.random.default_rng(0))
    placer = Placer(state, get_policy("bestfit")(ctx))
    got = place_rounded(placer, translate({"nvidia.com/gpu": 1}, {"gpugov.io/model": H100}),  # type: ignore[arg-type]
                        "p", T)
    assert got.allocation is not None and got.allocation.node == 1


def test_the_weakest_sufficient_form_wins_across_nodes() -> None:
    placer = placer_for(("mig", "excl"), ("mig", "ts"))
    got = place_rounded(placer, translate(SMALL), "p", T)  # type: ignore[arg-type]
    assert got.allocation is not None and got.allocation.node == 1  # the time-slice node
    got = place_rounded(placer_for(("ts",), ("soft~",)), translate(SMALL), "p", U)  # type: ignore[arg-type]
    assert not got.placed and got.weaker_had_room


def test_untrusted_pods_never_share_a_device_with_another_tenant() -> None:
    placer = placer_for(("mig",))
    a = place_rounded(placer, translate(NOTEBOOK), "a", U, tenant="acme")  # type: ignore[arg-type]
    commit(placer, a)
    b = place_rounded(placer, translate(NOTEBOOK), "b", U, tenant="evil")  # type: ignore[arg-type]
    assert not b.placed  # the one MIG GPU holds acme's instance
    c = place_rounded(placer, translate(NOTEBOOK), "c", U, tenant="acme")  # type: ignore[arg-type]
    assert c.placed  # acme may add instances to its own GPU


def test_covering_profiles_are_smallest_first() -> None:
    g = get_geometry(H100)
    assert [p.name for p in covering_profiles(g, 250, 12 * GIB)][:3] == \
        ["2g.20gb", "3g.40gb", "4g.40gb"]
    assert covering_profiles(g, 1000, 90 * GIB) == []


# --- property: random mixed fleets, requests and tiers -----------------------------------

KINDS = ("excl", "mig", "soft", "ts", "mps")


@st.composite
def fleets(draw) -> list[NodeSpec]:
    specs = []
    for i in range(draw(st.integers(1, 3))):
        n = draw(st.integers(1, 6))
        model = draw(st.sampled_from((H100, A100)))
        cfgs = []
        for _ in range(n):
            kind = draw(st.sampled_from(KINDS))
            if kind == "mig" and draw(st.booleans()):
                layout = draw(st.sampled_from(maximal_layouts(model)[:8]))
                from gpugov.model.mig import find_placement
                inst = tuple(find_placement(get_geometry(model), list(layout)) or ())
                cfgs.append(DeviceConfig(DeviceMode.MIG, mig_layout=inst))
            elif kind in ("ts", "mps"):
                cfgs.append(DeviceConfig(_MODES[kind], draw(st.integers(2, 4))))
            else:
                cfgs.append(DeviceConfig(_MODES[kind]))
        topo = hgx_topology(n, domains=2 if n > 1 else 1, numa_nodes=min(2, n),
                            pcie_switches=min(4, n))
        specs.append(NodeSpec(f"n{i}", 64_000, 512 * GIB, n, model, devices=tuple(cfgs),
                              topology=topo))
    return specs


@st.composite
def requests(draw) -> GpuRequest:
    iso = draw(st.sampled_from([None, *IsolationLevel]))
    kind = draw(st.sampled_from(["whole", "mig", "soft", "replica"]))
    if kind == "whole":
        return GpuRequest(draw(st.integers(1, 4)), DeviceMode.EXCLUSIVE, isolation=iso)
    if kind == "mig":
        profile = draw(st.sampled_from(get_geometry(H100).profile_names(include_media=False)))
        return GpuRequest(1, DeviceMode.MIG, mig_profile=profile, isolation=iso)
    if kind == "replica":
        return GpuRequest(1, DeviceMode.TIMESLICE, milli=None, isolation=iso)
    milli = draw(st.one_of(st.none(), st.integers(1, 999)))
    mem = draw(st.integers(1, 81920))
    if milli is None or draw(st.booleans()):
        return GpuRequest(1, DeviceMode.SOFT, milli=milli, memory_mib=mem, isolation=iso)
    return GpuRequest(1, DeviceMode.SOFT, milli=milli, isolation=iso)  # whole-card memory


def _check_capacity(state: ClusterState) -> None:
    assert (state.gpu_free >= 0).all() and (state.gpu_mem_free >= 0).all()
    assert (state.rep_free >= 0).all() and (state.rep_free <= state.rep_cap).all()
    assert (state.mig_compute_free >= 0).all()


@settings(max_examples=120, deadline=None)
@given(fleets(), st.lists(st.tuples(requests(), st.sampled_from(list(TrustTier)),
                                    st.sampled_from(["a", "b"])), min_size=1, max_size=14))
def test_isolation_never_below_required_and_no_device_over_capacity(specs, asks) -> None:
    state = ClusterState(specs)
    ctx = PolicyContext(FragmentationModel(TypicalPods.from_requests([]), state),
                        np.random.default_rng(0))
    placer = Placer(state, get_policy("bestfit")(ctx))
    held: dict[tuple[int, int], set[tuple[str, bool]]] = {}  # device -> (tenant, sealed)
    mig: dict[tuple[int, int], list[MigInstance]] = {}
    for k, (req, tier, tenant) in enumerate(asks):
        got = place_rounded(placer, req, f"p{k}", tier, tenant=f"{tier}-{tenant}")
        required = required_isolation(req.isolation, tier)
        if not got.placed:
            assert got.reason
            continue
        assert got.isolation >= required
        a, form = got.allocation, got.request
        assert a is not None and form is not None
        if req.mode is DeviceMode.MIG:
            assert form.mig_profile == req.mig_profile
        commit(placer, got)
        _check_capacity(state)
        for d in a.devices:
            dev_mode = CODE_MODE[int(state.dev_mode[a.node, d])]
            if form.slice_mode is not DeviceMode.EXCLUSIVE:
                assert dev_mode is form.slice_mode and dev_mode.isolation >= required
            else:
                assert dev_mode in (DeviceMode.EXCLUSIVE, DeviceMode.SOFT)
            mine = (f"{tier}-{tenant}", tier is TrustTier.UNTRUSTED)
            others = held.setdefault((a.node, d), set())
            if mine[1]:  # sealed: only its own tenant on the device
                assert all(t == mine[0] for t, _ in others)
            assert all(t == mine[0] for t, sealed in others if sealed)
            others.add(mine)
        if form.slice_mode is DeviceMode.MIG:  # instances at valid starts, never overlapping
            insts = mig.setdefault((a.node, a.devices[0]), [])
            insts.append(MigInstance(a.mig_start, form.mig_profile))
            g = mig_table(specs[a.node].model).geometry
            from gpugov.model.mig import layout_errors
            assert layout_errors(g, insts) == []


def test_nodes_held_for_someone_else_are_not_used_and_say_so() -> None:
    placer = placer_for(("soft",), ("mig",))
    held = np.array([False, True])
    got = place_rounded(placer, translate(SMALL), "p", U, exclude=held)  # type: ignore[arg-type]
    assert got.allocation is not None and got.allocation.node == 0  # a whole soft GPU
    held = np.array([True, True])
    got = place_rounded(placer, translate(SMALL), "p", U, exclude=held)  # type: ignore[arg-type]
    assert not got.placed and "reserved" in got.reason
