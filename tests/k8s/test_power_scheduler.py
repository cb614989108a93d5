"""PowerDomains in the scheduler, on plain API objects: pods wait with reason `power` (the
rack named in watts) while their rack's budget is spent, the domain's status carries
budget/admitted/measured/headroom, and the capping plan caps the lowest-priority GPUs first
when the agents' measured draw is over budget, and lifts the caps when there is room."""

from __future__ import annotations

from tests.k8s.test_scheduler_state import T0, bind_all, make, node, pod

from gpugov.k8s.power.capping import CapDevice, plan_caps
from gpugov.k8s.power.contract import POWER, DevicePower, decode_power, encode_power
from gpugov.k8s.power.writer import merge_doc


def rack_node(name: str, rack: str = "r1", gpus: int = 4, power: list | None = None) -> dict:
    obj = node(name, gpus)
    obj["metadata"]["labels"]["gpugov.io/rack"] = rack
    if power is not None:
        obj["metadata"]["annotations"] = {POWER: encode_power(power)}
    return obj


def domain(name: str, panel: float, **spec) -> dict:
    return {"metadata": {"name": name}, "spec": {"panelWatts": panel, **spec}}


def test_pods_wait_for_power_and_the_status_says_how_much_is_admitted():
    st = make(nodes=0)
    for n in ("n0", "n1"):
        st.set_node(rack_node(n))
    # A100 (400 W): idle 8 x 40 W = 320 W; 0.8 x 2000 W = 1600 W -> 3 GPUs at 360 W more
    st.set_object("powerdomain", domain("r1", 2000))
    for i in range(5):
        st.set_pod(pod(f"p{i}"))
    plan = st.cycle(T0)
    assert len(plan.binds) == 3
    msgs = {c.message for c in plan.conditions}
    assert len(msgs) == 1
    (msg,) = msgs
    assert msg.startswith("gpugov: no-node-fits") and "power" in msg
    assert "power domain r1 would draw 1760 W of 1600 W allowed (80 % of 2000 W)" in msg
    status = plan.power_status["r1"]
    assert status["budgetWatts"] == 1600 and status["admittedWatts"] == 320 + 3 * 360
    assert status["headroomWatts"] == 1600 - 1400 and status["nodes"] == 2
    assert status["conditions"][0]["status"] == "True"
    # a pod of the rack ends: the next one is bound
    bind_all(st, plan)
    st.delete_pod(plan.binds[0].key)
    plan = st.cycle(T0 + 1)
    assert len(plan.binds) == 1


def test_a_rack_without_budget_objects_is_unlimited_and_bad_domains_say_why():
    st = make(nodes=0)
    st.set_node(rack_node("n0"))
    st.set_node(rack_node("n1", rack="r2"))
    st.set_object("powerdomain", domain("r1", -5))
    st.set_object("powerdomain", domain("r9", 1000))
    st.set_object("powerdomain", domain("both", 1e5, nodeSelector={"matchLabels": {}}))
    for i in range(8):
        st.set_pod(pod(f"p{i}"))
    plan = st.cycle(T0)
    assert len(plan.binds) == 8
    bad = plan.power_status["r1"]["conditions"][0]
    assert bad["reason"] == "Invalid" and "spec.panelWatts: -5" in bad["message"]
    assert plan.power_status["r9"]["conditions"][0]["reason"] == "NoNodes"
    both = plan.power_status["both"]
    assert both["nodes"] == 2 and both["conditions"][0]["reason"] == "Ready"


def test_measured_draw_over_budget_caps_the_lowest_priority_gpus_first_then_lifts():
    st = make(nodes=0)
    st.set_object("powerdomain", domain("r1", 2000, ratio=0.5))  # budget 1000 W
    for name in ("lo", "hi"):
        st.set_pod(pod(name, priority_class=""))
    st.set_node(rack_node("n0", gpus=2))
    plan = st.cycle(T0)
    bind_all(st, plan)
    # the agent reports 2 x 600 W (e.g. a card over its TDP in this model): 200 W over
    st.pods[plan.binds[1].key].priority = 100
    hi_dev = plan.binds[1].record.devices[0].index
    lo_dev = plan.binds[0].record.devices[0].index
    draw = [DevicePower(i, 600.0, 1e6, 400.0, 100.0, 400.0) for i in range(2)]
    st.set_node(rack_node("n0", gpus=2, power=draw))
    plan = st.cycle(T0 + 1)
    caps = plan.power_status["r1"]["caps"]
    assert caps == {"n0": {str(lo_dev): 200.0}}  # 400 W usable on lo, 200 W shed there
    assert plan.power_status["r1"]["measuredWatts"] == 1200
    assert plan.power_status["r1"]["conditions"][0]["reason"] == "OverBudget"
    assert hi_dev != lo_dev
    # draw falls well below the budget: the cap is lifted (written as null)
    low = [DevicePower(i, 100.0, 2e6, 400.0, 100.0, 400.0) for i in range(2)]
    st.set_node(rack_node("n0", gpus=2, power=low))
    st.power.status_written("r1", {"caps": caps})
    plan = st.cycle(T0 + 2)
    assert plan.power_status["r1"]["caps"] == {}
    assert merge_doc({"caps": caps}, plan.power_status["r1"])["caps"] == {"n0": None}


def test_plan_caps_never_goes_below_the_cards_minimum_and_has_hysteresis():
    devs = [CapDevice("a", 0, 0, 500, 300, 700), CapDevice("a", 1, 5, 500, 300, 700)]
    caps = plan_caps(500, devs, {})
    assert caps == {("a", 0): 300, ("a", 1): 300}  # 500 to shed: 200 + 200 at the floor
    # within 5 % below the budget: caps stay
    assert plan_caps(1000, [CapDevice("a", 0, 0, 480, 300, 700),
                            CapDevice("a", 1, 5, 480, 300, 700)], {("a", 0): 480}) == \
        {("a", 0): 480}
    # far below: lifted, highest priority first
    lifted = plan_caps(1000, [CapDevice("a", 0, 0, 100, 300, 700),
                              CapDevice("a", 1, 5, 100, 300, 700)],
                       {("a", 0): 300, ("a", 1): 300})
    assert lifted == {("a", 0): 650.0}  # room 950 - 200: 400 lifts a1 to 700 (its max), 350 to a0


def test_the_power_annotation_is_bounded_and_refused_naming_the_field():
    import pytest
    for text, field in (('{"v":1,"devices":[{"index":0,"drawW":-1}]}', "drawW"),
                        ('{"v":1,"devices":[{"index":0,"drawW":1e9}]}', "drawW"),
                        ('{"v":1,"devices":[{"index":0},{"index":0,"drawW":1}]}', "drawW"),
                        ('{"v":1,"devices":[{"index":-1,"drawW":1}]}', "index"),
                        ('{"v":2}', "v: 1"), ("x" * 70000, "bytes")):
        with pytest.raises(ValueError, match=field):
            decode_power(text)
    st = make(nodes=0)
    st.set_node({**rack_node("n0"), "metadata": {**rack_node("n0")["metadata"],
                                                  "annotations": {POWER: "nope"}}})
    assert "not JSON" in st.power.errors["n0"]


def test_dev_up_turns_cluster_yaml_power_domains_into_labelled_nodes_and_objects():
    from gpugov.k8s.devcluster.cluster_file import node_objects
    from gpugov.k8s.power.devcluster import with_domains
    from gpugov.model.cluster_spec import parse_cluster_yaml

    pool = {"count": 2, "model": "H100-SXM5-80GB", "gpus": 8, "cpuMilli": 64000,
            "memoryMiB": 262144}
    cluster = parse_cluster_yaml({
        "nodePools": [dict(pool, name="a", labels={"row": "r1"}), dict(pool, name="b")],
        "powerDomainLabel": "row",
        "powerDomains": [{"name": "r1", "panelWatts": 30000},
                         {"name": "r2", "panelWatts": 9000, "ratio": 0.5, "nodes": ["b-1"]}]},
        "c.yaml")
    nodes, objs = with_domains(cluster, node_objects(cluster))
    assert [n["metadata"]["labels"].get("row") for n in nodes] == ["r1", "r1", None, "r2"]
    assert [(o["metadata"]["name"], o["spec"]) for o in objs] == [
        ("r1", {"panelWatts": 30000.0, "ratio": 0.8,
                "nodeSelector": {"matchLabels": {"row": "r1"}}}),
        ("r2", {"panelWatts": 9000.0, "ratio": 0.5,
                "nodeSelector": {"matchLabels": {"row": "r2"}}})]
    # the scheduler reads them back to the same membership
    st = make(nodes=0)
    for n in nodes:
        n["status"] = node("x")["status"]
        st.set_node(n)
    for o in objs:
        st.set_object("powerdomain", o)
    st.set_pod(pod("p"))
    plan = st.cycle(T0)
    assert plan.power_status["r1"]["nodes"] == 2 and plan.power_status["r2"]["nodes"] == 1


def test_a_budget_lowered_under_running_pods_counts_them_and_admits_nothing_more():
    st = make(nodes=0)
    for n in ("n0", "n1"):
        st.set_node(rack_node(n))
    st.set_object("powerdomain", domain("r1", 4000))  # 3.2 kW: room for all 8 GPUs
    for i in range(6):
        st.set_pod(pod(f"p{i}"))
    plan = st.cycle(T0)
    assert len(plan.binds) == 6
    bind_all(st, plan)
    # the panel is derated under them: a restart (rebuild) still counts every running pod
    st.set_object("powerdomain", domain("r1", 2000))  # 1.6 kW < 320 W + 6 x 360 W
    st.set_pod(pod("late"))
    plan = st.cycle(T0 + 1)
    assert not plan.binds and not st.held and len(st.jobs) == 7
    status = plan.power_status["r1"]
    assert status["admittedWatts"] == 320 + 6 * 360 and status["headroomWatts"] < 0
    (cond,) = [c for c in plan.conditions if c.name == "late"]
    assert "power domain r1 would draw" in cond.message


def test_a_cap_not_applied_yet_is_not_shed_again():
    devs = [CapDevice("a", 0, 0, 390, 100, 400), CapDevice("a", 1, 9, 390, 100, 400)]
    first = plan_caps(640, devs, {})
    assert first == {("a", 0): 250}
    # the agent has not set it yet (the draw is still 390 W): the plan holds, it does not cut
    # again and again while the measurement lags
    assert plan_caps(640, devs, first) == first
