"""The MIG planner serves the demand it sees, never touches busy GPUs, and emits mig-parted."""

from __future__ import annotations

from collections import Counter

from gpugov.model.mig import get_geometry
from gpugov.placement.mig_planner import (
    GpuSlot,
    balanced_layout,
    mig_parted_config,
    plan_layouts,
    profile_for_milli,
    serve,
    static_plan,
)

H100 = "H100-SXM5-80GB"


def test_milli_to_profile_mapping() -> None:
    g = get_geometry(H100)
    assert [profile_for_milli(g, m) for m in (50, 142, 143, 286, 300, 470, 572, 1000)] == [
        "1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb", "3g.40gb", "4g.40gb", "7g.80gb", "7g.80gb"]


def test_small_requests_may_use_bigger_instances() -> None:
    g = get_geometry(H100)
    assert serve(g, {"1g.10gb": 3}, {"2g.20gb": 2})["1g.10gb"] == 2
    assert serve(g, {"3g.40gb": 1}, {"2g.20gb": 5})["3g.40gb"] == 0


def test_planner_beats_static_layouts_and_keeps_busy_gpus() -> None:
    slots = [GpuSlot("n0", i) for i in range(4)] + [GpuSlot("n1", 0, ("1g.10gb",) * 7, True)]
    demand = Counter({"4g.40gb": 2, "3g.40gb": 2, "1g.10gb": 10})
    plan = plan_layouts(H100, slots, demand)
    assert plan.layouts[4] == ("1g.10gb",) * 7  # busy: untouched
    assert sum(plan.served_after.values()) == 14
    for static in (("1g.10gb",) * 7, balanced_layout(H100)):
        base = static_plan(H100, slots, demand, static)
        assert sum(plan.served_after.values()) > sum(base.served_after.values())


def test_mig_parted_config_shape() -> None:
    slots = [GpuSlot("n0", 0), GpuSlot("n0", 1), GpuSlot("n1", 0)]
    plan = plan_layouts(H100, slots, Counter({"3g.40gb": 2, "7g.80gb": 1}))
    config, labels = mig_parted_config(plan)
    assert config["version"] == "v1"
    assert set(labels) == {"n0", "n1"}
    for entries in config["mig-configs"].values():
        for e in entries:
            assert e["device-filter"] == ["0x233010DE"]
            assert isinstance(e["devices"], list) and isinstance(e["mig-enabled"], bool)
            assert ("mig-devices" in e) == e["mig-enabled"]
