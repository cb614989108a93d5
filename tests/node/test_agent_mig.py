"""MIG layouts from mig-parted configs applied on the fake NVML: idle GPUs change, busy ones
are refused untouched, bad configs are refused before anything changes."""

from __future__ import annotations

import pytest
from nvml_fake import A30, A100_80, T4

from gpugov.node.mig_apply import apply_change, plan_changes
from gpugov.node.mig_config import MigConfigError, load, parse, select
from gpugov.node.nvml.discovery import discover

MIXED = {"version": "v1", "mig-configs": {"mixed": [
    {"devices": "all", "mig-enabled": True,
     "mig-devices": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}}]}}


def _layout(gpu):
    return [(m.profile, m.start) for m in gpu.mig]


def test_layout_applied_to_idle_gpu_and_refused_on_busy_one(node, open_nvml, sleepers):
    node.gpu(A100_80)  # MIG off, idle
    worker = sleepers.start()
    node.gpu(A100_80, "mig-mode 1", "gi 0 0", f"proc {worker} 4000000000 0")  # 7g, busy
    nv = open_nvml(node)
    plan = plan_changes(nv, discover(nv), select(parse(MIXED), "mixed"))
    assert plan.errors == [] and [c.index for c in plan.changes] == [0, 1]
    model = discover(nv).by_index(0).model
    outcomes = [apply_change(nv, c, model) for c in plan.changes]
    assert [o.state for o in outcomes] == ["applied", "refused"]
    assert "busy" in outcomes[1].message and str(worker) in outcomes[1].message
    after = discover(nv)
    assert after.by_index(0).mig_enabled
    assert sorted(p for p, _ in _layout(after.by_index(0))) == [
        "1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]
    # placed where the geometry allows: 3g at 0 or 4, no overlaps
    assert all(m.uuid.startswith("MIG-") for m in after.by_index(0).mig)
    assert _layout(after.by_index(1)) == [("7g.80gb", 0)]  # the busy GPU is untouched
    # a second run finds GPU 0 already right
    again = plan_changes(nv, after, select(parse(MIXED), "mixed"))
    assert again.unchanged == [0] and [c.index for c in again.changes] == [1]


def test_disable_mig_on_idle_gpu(node, open_nvml):
    node.gpu(A30, "mig-mode 1", "gi 5 0", "gi 14 2", "gi 14 3")
    nv = open_nvml(node)
    cfg = parse({"version": "v1", "mig-configs": {"off": [
        {"devices": [0], "mig-enabled": False}]}})
    plan = plan_changes(nv, discover(nv), cfg["off"])
    [out] = [apply_change(nv, c, "A30") for c in plan.changes]
    assert out.state == "applied"
    g = discover(nv).by_index(0)
    assert not g.mig_enabled and g.mig == ()


def test_unknown_profile_and_impossible_layout_refused_before_any_change(node, open_nvml):
    node.gpu(A100_80, "mig-mode 1")
    node.gpu(T4)
    nv = open_nvml(node)
    cfg = parse({"version": "v1", "mig-configs": {
        "typo": [{"devices": [0], "mig-enabled": True, "mig-devices": {"3g.45gb": 2}}],
        "too-much": [{"devices": [0], "mig-enabled": True,
                      "mig-devices": {"4g.40gb": 1, "2g.20gb": 2}}],
        "t4": [{"devices": [1], "mig-enabled": True, "mig-devices": {}}]}})
    typo = plan_changes(nv, discover(nv), cfg["typo"])
    assert typo.changes == [] and len(typo.errors) == 1
    assert "unknown MIG profile '3g.45gb'" in typo.errors[0] and "3g.40gb" in typo.errors[0]
    too = plan_changes(nv, discover(nv), cfg["too-much"])
    assert too.changes == [] and "does not fit" in too.errors[0]
    t4 = plan_changes(nv, discover(nv), cfg["t4"])
    assert "not MIG-capable" in t4.errors[0]
    assert discover(nv).by_index(0).mig == ()


@pytest.mark.parametrize("doc, message", [
    ({"version": "v2", "mig-configs": {"a": []}}, "version 'v2'; allowed: v1"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "some", "mig-enabled": True}]}},
     "mig-configs.a[0].devices: 'some'"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": "yes"}]}},
     "mig-configs.a[0].mig-enabled: 'yes'; allowed: true or false"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": False,
                                               "mig-devices": {"1g.10gb": 1}}]}},
     "must be absent or empty when mig-enabled is false"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": True,
                                               "mig-devices": {"1g.10gb": -1}}]}},
     "mig-devices.1g.10gb: -1"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enable": True}]}},
     "unknown key(s) ['mig-enable']"),
])
def test_bad_config_names_field_and_value(doc, message):
    with pytest.raises(MigConfigError) as e:
        parse(doc, "plan.yaml")
    assert message in str(e.value) and str(e.value).startswith("plan.yaml")


def test_config_file_and_name(tmp_path):
    f = tmp_path / "plan.yaml"
    f.write_text("version: v1\nmig-configs:\n  all-disabled:\n    - devices: all\n"
                 "      mig-enabled: false\n")
    cfgs = load(f)
    with pytest.raises(MigConfigError, match="no config named 'balanced'; known: all-disabled"):
        select(cfgs, "balanced", str(f))
    f.write_text("version: [v1\n")
    with pytest.raises(MigConfigError, match="not YAML"):
        load(f)
