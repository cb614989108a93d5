"""Node affinity on the scheduler: every operator, several terms ORed, matchFields on the
node name; a term no node meets waits with reason `node-selector`; preferred node affinity
and PreferNoSchedule taints rank nodes as kube-scheduler does; a malformed term (node or pod
affinity, topologySpreadConstraints) is refused naming the field, never ignored (pod affinity
and spread semantics: test_pod_affinity.py)."""

from __future__ import annotations

import pytest
from tests.k8s.test_scheduler_modes import T0, nodes, pod, pool, state, submit

from gpugov.k8s.scheduler.state import INVALID

ONE = {"nvidia.com/gpu": "1"}


def fleet():
    return nodes(pool("a8", 1, labels={"zone": "a", "gen": "8"}),
                 pool("b9", 1, labels={"zone": "b", "gen": "9"}),
                 pool("c", 1, labels={"zone": "c"}))


def required(*terms: list[dict], fields: list[dict] | None = None) -> dict:
    out = [{"matchExpressions": t} for t in terms]
    if fields:
        out.append({"matchFields": fields})
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": out}}}


def expr(key: str, op: str, *values: str) -> dict:
    return {"key": key, "operator": op, **({"values": list(values)} if values else {})}


@pytest.mark.parametrize("affinity,want", [
    (required([expr("zone", "In", "b", "c"), expr("gen", "Exists")]), "b9-0"),  # AND
    (required([expr("zone", "NotIn", "a", "b")]), "c-0"),
    (required([expr("gen", "DoesNotExist")]), "c-0"),
    (required([expr("gen", "Gt", "8")]), "b9-0"),
    (required([expr("gen", "Lt", "9")]), "a8-0"),
    (required([expr("zone", "In", "x")], [expr("gen", "Lt", "9")]), "a8-0"),  # OR of terms
    (required(fields=[expr("metadata.name", "In", "c-0")]), "c-0"),
])
def test_every_operator_and_terms_ored(affinity: dict, want: str) -> None:
    st = state(fleet())
    submit(st, pod("p", limits=ONE, affinity=affinity))
    (b,) = st.cycle(T0).binds
    assert b.node == want


def test_a_term_no_node_meets_waits_with_node_selector() -> None:
    st = state(fleet())
    submit(st, pod("p", limits=ONE, affinity=required([expr("rack", "In", "r1")])))
    plan = st.cycle(T0)
    (cond,) = plan.conditions
    assert not plan.binds and cond.code != INVALID and "node-selector" in cond.message


@pytest.mark.parametrize("spec,field", [
    ({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": ""}]}}},
     "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"
     ".topologyKey"),
    ({"affinity": {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 101, "podAffinityTerm": {"topologyKey": "zone"}}]}}},
     "spec.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight"),
    ({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                                     "whenUnsatisfiable": "Never"}]},
     "spec.topologySpreadConstraints[0].whenUnsatisfiable"),
    ({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 500, "preference": {"matchExpressions": [expr("zone", "In", "a")]}}]}}},
     "preferredDuringSchedulingIgnoredDuringExecution[0].weight"),
    ({"affinity": required([expr("gen", "Gt", "eight")])},
     "nodeSelectorTerms[0].matchExpressions[0]"),
])
def test_a_malformed_term_is_refused_naming_the_field(spec: dict, field: str) -> None:
    st = state(fleet())
    submit(st, pod("p", limits=ONE, **spec))
    plan = st.cycle(T0)
    (cond,) = plan.conditions
    assert not plan.binds and cond.code == INVALID and field in cond.message, cond.message


def preferred(*weighted: tuple[int, list[dict]]) -> dict:
    return {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": w, "preference": {"matchExpressions": e}} for w, e in weighted]}}


def test_preferred_node_affinity_ranks_nodes_by_the_weights_they_match() -> None:
    st = state(fleet())
    aff = preferred((10, [expr("zone", "In", "c")]), (60, [expr("gen", "Gt", "8")]),
                    (30, [expr("zone", "In", "a")]))
    submit(st, pod("p", limits=ONE, affinity=aff))
    (b,) = st.cycle(T0).binds
    assert b.node == "b9-0"  # 60 > 30 > 10


def test_a_prefer_no_schedule_taint_ranks_its_node_last_unless_tolerated() -> None:
    soft = {"key": "spot", "value": "yes", "effect": "PreferNoSchedule"}
    objs = nodes(pool("t", 1, labels={"zone": "a"}, taints=[soft]),
                 pool("u", 1, labels={"zone": "a"}))
    st = state(objs)
    submit(st, pod("p", limits=ONE))
    (b,) = st.cycle(T0).binds
    assert b.node == "u-0"
    st2 = state(nodes(pool("t", 1, labels={"zone": "a"}, taints=[soft])))
    submit(st2, pod("q", limits=ONE))
    assert [b.node for b in st2.cycle(T0).binds] == ["t-0"]  # a preference, never a refusal


def test_admission_can_ask_the_same_question_before_the_pod_exists() -> None:
    from gpugov.k8s.scheduler.translate import affinity_refusal

    assert affinity_refusal({"affinity": required([expr("gen", "Gt", "8")])}) == ""
    assert "spec.topologySpreadConstraints" in affinity_refusal(
        {"topologySpreadConstraints": [{"maxSkew": 1}]})
