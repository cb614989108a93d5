"""Fragmentation-aware MIG placement on the one cluster state: valid starts only, big
profiles kept placeable, cut-up GPUs filled before empty ones are broken, and the state's
choice of start is the one `placement.mig.best_start` measures as least fragmenting."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpugov.model.cluster import ClusterState, NodeSpec
from gpugov.model.devices import DeviceConfig, DeviceMode
from gpugov.model.mig import MIG_GEOMETRIES, MigInstance, get_geometry, layout_errors
from gpugov.model.mig_table import mig_table
from gpugov.model.request import PodRequest
from gpugov.placement.base import PolicyContext
from gpugov.placement.engine import Placer, allocation_for
from gpugov.placement.fragmentation import FragmentationModel, TypicalPods
from gpugov.placement.mig import best_start
from gpugov.placement.registry import get_policy

H100 = "H100-SXM5-80GB"


def mig_state(model: str, gpus: int, layout: tuple[MigInstance, ...] | None = None
              ) -> ClusterState:
    cfg = DeviceConfig(DeviceMode.MIG, mig_layout=layout)
    return ClusterState([NodeSpec("n", 64_000, 1 << 20, gpus, model, devices=(cfg,) * gpus)])


def mig_pod(name: str, model: str, profile: str) -> PodRequest:
    return PodRequest(name, 0, 0, 1, mig_table(model).milli(profile), mode=DeviceMode.MIG,
                      mig_profile=profile)


def placer(state: ClusterState) -> Placer:
    ctx = PolicyContext(FragmentationModel(TypicalPods.from_requests([]), state),
                        np.random.default_rng(0))
    return Placer(state, get_policy("bestfit")(ctx))


def test_first_1g_goes_to_the_end_keeping_4g_and_3g_open() -> None:
    g = get_geometry(H100)
    assert best_start(g, (), "1g.10gb")[0] == 6  # type: ignore[index]
    p = placer(mig_state(H100, 1))
    a = p.place(mig_pod("a", H100, "1g.10gb")).allocation
    b = p.place(mig_pod("b", H100, "4g.40gb")).allocation
    assert a is not None and b is not None and (a.mig_start, b.mig_start) == (6, 0)
    assert layout_errors(g, [MigInstance(6, "1g.10gb"), MigInstance(0, "4g.40gb")]) == []


def test_prefers_an_already_cut_gpu_over_breaking_an_empty_one() -> None:
    p = placer(mig_state("A100-SXM4-40GB", 2))
    first = p.place(mig_pod("a", "A100-SXM4-40GB", "1g.5gb")).allocation
    second = p.place(mig_pod("b", "A100-SXM4-40GB", "1g.5gb")).allocation
    assert first is not None and second is not None
    assert second.devices == first.devices  # the other GPU stays whole


def test_a_fixed_layout_hands_out_its_instances_and_takes_them_back() -> None:
    layout = (MigInstance(0, "4g.40gb"), MigInstance(4, "2g.20gb"), MigInstance(6, "1g.10gb"))
    state = mig_state(H100, 1, layout)
    p = placer(state)
    req = mig_pod("a", H100, "2g.20gb")
    a = p.place(req).allocation
    assert a is not None and a.mig_start == 4
    assert p.decide(mig_pod("b", H100, "2g.20gb")).reason == "mig-slice"  # the one is taken
    assert p.decide(mig_pod("c", H100, "3g.40gb")).reason == "mig-slice"  # not in the layout
    one = p.place(mig_pod("d", H100, "1g.10gb")).allocation
    assert one is not None and one.mig_start == 6
    state.release(req, a)
    again = p.place(mig_pod("e", H100, "2g.20gb")).allocation
    assert again is not None and again.mig_start == 4  # the freed instance, reused


@settings(max_examples=150, deadline=None)
@given(model=st.sampled_from(list(MIG_GEOMETRIES)), data=st.data())
def test_sequences_of_placements_stay_valid_and_least_fragmenting(model: str, data) -> None:
    g = get_geometry(model)
    state = mig_state(model, 2)
    held: list[list[MigInstance]] = [[], []]
    names = [n for n in g.profile_names(include_media=False) if n in mig_table(model).by_profile]
    for k in range(data.draw(st.integers(1, 16))):
        req = mig_pod(f"p{k}", model, data.draw(st.sampled_from(names)))
        d = placer(state).decide(req)
        if d.allocation is None:
            assert d.reason == "mig-slice"
            continue
        a = d.allocation
        dev = a.devices[0]
        expected = best_start(g, held[dev], req.mig_profile)
        assert expected is not None and a.mig_start == expected[0]
        state.allocate(req, a)
        held[dev].append(MigInstance(a.mig_start, req.mig_profile))
        assert layout_errors(g, held[dev]) == []  # valid starts, never overlapping


def test_allocation_for_names_the_start_the_state_checks() -> None:
    state = mig_state(H100, 1)
    req = mig_pod("a", H100, "3g.40gb")
    a = allocation_for(state, req, 0, (0,))
    state.allocate(req, a)
    assert a.mig_start in get_geometry(H100).profile("3g.40gb").starts
