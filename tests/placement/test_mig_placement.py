"""Fragmentation-aware MIG placement: valid starts only, and keep big profiles placeable."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpugov.model.devices import MigState
from gpugov.model.mig import MIG_GEOMETRIES, get_geometry, layout_errors
from gpugov.placement.mig import best_start, place_on_gpus, release


def test_first_1g_goes_to_the_end_keeping_4g_and_3g_open() -> None:
    g = get_geometry("H100-SXM5-80GB")
    assert best_start(g, (), "1g.10gb")[0] == 6  # type: ignore[index]
    _, st1 = place_on_gpus([MigState("H100-SXM5-80GB")], "1g.10gb", "a")  # type: ignore[misc]
    _, st2 = place_on_gpus([st1], "4g.40gb", "b")  # type: ignore[misc]
    assert layout_errors(g, st2.instances) == []


def test_prefers_an_already_cut_gpu_over_breaking_an_empty_one() -> None:
    empty = MigState("A100-SXM4-40GB")
    _, used = place_on_gpus([empty], "1g.5gb", "a")  # type: ignore[misc]
    gpu, _ = place_on_gpus([empty, used], "1g.5gb", "b")  # type: ignore[misc]
    assert gpu == 1


def test_reuses_a_free_instance_before_creating_one() -> None:
    _, s = place_on_gpus([MigState("H100-SXM5-80GB")], "2g.20gb", "a")  # type: ignore[misc]
    s = release(s, "a")
    _, s2 = place_on_gpus([s], "2g.20gb", "b")  # type: ignore[misc]
    assert s2.instances == s.instances and s2.owners == ("b",)


@settings(max_examples=150, deadline=None)
@given(model=st.sampled_from(list(MIG_GEOMETRIES)), data=st.data())
def test_sequences_of_placements_stay_valid(model: str, data) -> None:
    g = get_geometry(model)
    states = [MigState(model), MigState(model)]
    names = g.profile_names()
    for k in range(data.draw(st.integers(1, 16))):
        got = place_on_gpus(states, data.draw(st.sampled_from(names)), f"p{k}")
        if got is None:
            continue
        i, new = got
        states[i] = new
        for s in states:  # MigState validates itself; check explicitly anyway
            assert layout_errors(g, s.instances) == []
