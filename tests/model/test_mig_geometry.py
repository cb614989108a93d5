"""MIG geometry per model: the combinations users rely on, and the maximal-layout catalogue."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpugov.model.catalog import CATALOG
from gpugov.model.mig import (
    MIG_GEOMETRIES,
    MigInstance,
    feasible_layouts,
    find_placement,
    get_geometry,
    layout_errors,
    maximal_layouts,
    models_with_profile,
)

EIGHT_SLICE = ["A100-SXM4-40GB", "A100-SXM4-80GB", "H100-SXM5-80GB", "H100-NVL", "H200",
               "H100-PCIE-80GB", "H100-96GB", "GH200", "H20", "GH200-144GB", "H200-NVL", "B200",
               "GB200", "B300", "GB300"]


def _names(model: str) -> dict[str, str]:
    """Short class names (1g, 1g*, 2g, 3g, 4g, 7g) -> this model's profile names."""
    g = get_geometry(model)
    by_id = {p.profile_id: p.name for p in g.base_profiles()}
    return {"1g": by_id[19], "1g*": by_id[15], "2g": by_id[14], "3g": by_id[9],
            "4g": by_id[5], "7g": by_id[0]}


@pytest.mark.parametrize("model", EIGHT_SLICE)
@pytest.mark.parametrize(
    ("combo", "valid"),
    [
        (["4g", "3g"], True),
        (["3g", "3g", "1g"], False),
        (["4g", "2g", "2g"], False),
        (["1g"] * 7, True),
        (["3g", "3g"], True),
        (["3g", "2g", "2g"], True),
        (["4g", "1g", "1g", "1g"], True),
        (["2g", "2g", "2g", "1g"], True),
        (["1g"] * 8, False),
        (["1g*"] * 4, True),
        (["3g", "1g*", "1g*", "1g"], False),
        (["7g", "1g"], False),
    ],
)
def test_known_combinations(model: str, combo: list[str], valid: bool) -> None:
    names = _names(model)
    profiles = [names[c] for c in combo]
    placement = find_placement(get_geometry(model), profiles)
    assert (placement is not None) == valid
    if placement is not None:
        assert layout_errors(get_geometry(model), placement) == []
        assert sorted(i.profile for i in placement) == sorted(profiles)


def test_a30_geometry() -> None:
    g = get_geometry("A30")
    assert find_placement(g, ["2g.12gb", "1g.6gb", "1g.6gb"]) is not None
    assert find_placement(g, ["2g.12gb", "2g.12gb", "1g.6gb"]) is None
    labels = {tuple(lay) for lay in maximal_layouts("A30")}
    assert labels == {("4g.24gb",), ("2g.12gb", "2g.12gb"), ("2g.12gb", "1g.6gb", "1g.6gb"),
                      ("1g.6gb",) * 4}


@pytest.mark.parametrize("model", EIGHT_SLICE)
def test_layout_counts_match_exhaustive_enumeration(model: str) -> None:
    # data-plane-facts §1.3: 77 feasible multisets, 28 maximal ones on 8-slice GPUs
    assert len(feasible_layouts(model)) == 77
    assert len(maximal_layouts(model)) == 28


@pytest.mark.parametrize("model", list(MIG_GEOMETRIES))
def test_every_maximal_layout_is_placeable_and_maximal(model: str) -> None:
    g = get_geometry(model)
    for lay in maximal_layouts(model):
        placement = find_placement(g, lay)
        assert placement is not None, lay
        assert layout_errors(g, placement) == []
        for extra in g.profile_names(include_media=False):
            assert find_placement(g, [*lay, extra]) is None, (lay, extra)


def test_layout_errors_name_the_problem() -> None:
    g = get_geometry("H100-SXM5-80GB")
    assert "allowed starts: 0,4" in layout_errors(g, [MigInstance(2, "3g.40gb")])[0]
    errs = layout_errors(g, [MigInstance(0, "4g.40gb"), MigInstance(2, "2g.20gb")])
    assert any("overlaps" in e for e in errs)
    errs = layout_errors(g, [MigInstance(0, "1g.10gb+me"), MigInstance(1, "1g.10gb+me")])
    assert any("+me" in e for e in errs)


def test_catalog_knows_every_mig_model_and_flags_it() -> None:
    for model in MIG_GEOMETRIES:
        assert CATALOG[model].mig_capable
    assert not CATALOG["L4"].mig_capable
    assert models_with_profile("1g.10gb") == ["A100-SXM4-40GB", "A100-SXM4-80GB",
                                              "H100-SXM5-80GB", "H100-PCIE-80GB"]
    assert all(not p.confirmed for p in get_geometry("H200").profiles)


# --- properties: any placement the engine produces is valid ------------------------------------

@settings(max_examples=200, deadline=None)
@given(model=st.sampled_from(list(MIG_GEOMETRIES)), data=st.data())
def test_find_placement_never_overlaps_and_uses_valid_starts(model: str, data) -> None:
    g = get_geometry(model)
    profiles = data.draw(st.lists(st.sampled_from(g.profile_names()), min_size=1, max_size=9))
    placement = find_placement(g, profiles)
    if placement is None:
        return
    taken: set[int] = set()
    for inst in placement:
        p = g.profile(inst.profile)
        assert inst.start in p.starts
        span = set(range(inst.start, inst.start + p.memory_slices))
        assert not span & taken
        assert max(span) < g.memory_slices
        taken |= span
    assert sum(g.profile(i.profile).compute_slices for i in placement) <= g.compute_slices
