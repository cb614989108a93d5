"""Node affinity on the scheduler: every operator, several terms ORed, matchFields on the
node name; a term no node meets waits with reason `node-selector`; pod (anti-)affinity,
topologySpreadConstraints and preferred node affinity, which gpugov's scheduler does not
evaluate, are refused naming the field, never ignored."""

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
        {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "zone"}]}}},
     "spec.affinity.podAntiAffinity"),
    ({"affinity": {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "podAffinityTerm": {"topologyKey": "zone"}}]}}},
     "spec.affinity.podAffinity"),
    ({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                                     "whenUnsatisfiable": "DoNotSchedule"}]},
     "spec.topologySpreadConstraints"),
    ({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 5, "preference": {"matchExpressions": [expr("zone", "In", "a")]}}]}}},
     "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"),
    ({"affinity": required([expr("gen", "Gt", "eight")])},
     "nodeSelectorTerms[0].matchExpressions[0]"),
])
def test_what_is_not_evaluated_is_refused_naming_the_field(spec: dict, field: str) -> None:
    st = state(fleet())
    submit(st, pod("p", limits=ONE, **spec))
    plan = st.cycle(T0)
    (cond,) = plan.conditions
    assert not plan.binds and cond.code == INVALID and field in cond.message, cond.message
