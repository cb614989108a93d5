"""Required node affinity (`model.constraints`) has kube-scheduler's semantics: checked
against a reference written from k8s.io/apimachinery `labels.Requirement.Matches` and
k8s.io/component-helpers `nodeaffinity` (terms ORed, requirements ANDed, an empty term
matches nothing, Gt/Lt read both sides with strconv.ParseInt(s, 10, 64), matchFields on
metadata.name), on random labels and terms."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpugov.model.constraints import NodeRequirement, NodeTerm, affinity_matches

KEYS = ["zone", "gen", "gpu", "kubernetes.io/hostname"]
VALUES = ["a", "b", "3", "9", "-1", "007", "+4", "x9", "", "99999999999999999999999"]


def parse_int64(s: str) -> int | None:
    """Go's strconv.ParseInt(s, 10, 64): optional sign, ASCII digits, int64 range."""
    if not re.fullmatch(r"[+-]?[0-9]+", s):
        return None
    v = int(s)
    return v if -(2**63) <= v <= 2**63 - 1 else None


def reference_requirement(key: str, op: str, values: list[str], labels: dict[str, str]) -> bool:
    has = key in labels
    if op == "In":
        return has and labels[key] in set(values)
    if op == "NotIn":
        return not has or labels[key] not in set(values)
    if op == "Exists":
        return has
    if op == "DoesNotExist":
        return not has
    # Gt / Lt
    if not has:
        return False
    lv, rv = parse_int64(labels[key]), parse_int64(values[0])
    if lv is None or rv is None:
        return False
    return lv > rv if op == "Gt" else lv < rv


def reference(terms: list[dict], labels: dict[str, str], name: str) -> bool:
    if not terms:
        return True  # no required affinity at all
    for t in terms:
        exprs, fields = t["exprs"], t["fields"]
        if not exprs and not fields:
            continue  # a nil or empty term selects no objects
        if all(reference_requirement(k, op, v, labels) for k, op, v in exprs) and all(
                (name in v) == (op == "In") for op, v in fields):
            return True
    return False


@st.composite
def requirement(draw):
    op = draw(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]))
    key = draw(st.sampled_from(KEYS))
    if op in ("In", "NotIn"):
        values = draw(st.lists(st.sampled_from(VALUES), min_size=1, max_size=3))
    elif op in ("Gt", "Lt"):
        values = [draw(st.sampled_from(["3", "9", "-1", "007", "+4", "0"]))]
    else:
        values = []
    return key, op, values


@st.composite
def terms(draw):
    out = []
    for _ in range(draw(st.integers(0, 3))):
        exprs = draw(st.lists(requirement(), max_size=3))
        fields = draw(st.lists(st.tuples(st.sampled_from(["In", "NotIn"]),
                                         st.lists(st.sampled_from(["n1", "n2"]),
                                                  min_size=1, max_size=1)), max_size=1))
        out.append({"exprs": exprs, "fields": fields})
    return out


def compiled(ts: list[dict]) -> tuple[NodeTerm, ...]:
    return tuple(NodeTerm(tuple(
        [NodeRequirement(k, op, tuple(v)) for k, op, v in t["exprs"]]
        + [NodeRequirement("metadata.name", op, tuple(v), field=True) for op, v in t["fields"]]))
        for t in ts)


@settings(max_examples=600, deadline=None)
@given(ts=terms(), labels=st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES),
                                          max_size=4),
       name=st.sampled_from(["n1", "n2", "n3"]))
def test_node_affinity_equals_kube_schedulers(ts, labels, name) -> None:
    assert affinity_matches(compiled(ts), labels, name) == reference(ts, labels, name)


@pytest.mark.parametrize("key,op,values,why", [
    ("zone", "Gt", ("a",), "is not an integer"),
    ("zone", "Lt", ("1", "2"), "exactly one value"),
    ("zone", "In", (), "at least one value"),
    ("zone", "Exists", ("a",), "takes no values"),
    ("zone", "Near", ("a",), "is not one of"),
    ("", "Exists", (), "needs a key"),
])
def test_malformed_requirements_are_refused_naming_what_is_wrong(key, op, values, why) -> None:
    with pytest.raises(ValueError, match=why):
        NodeRequirement(key, op, values)


def test_match_fields_take_only_the_node_name() -> None:
    with pytest.raises(ValueError, match="metadata.name"):
        NodeRequirement("metadata.uid", "In", ("x",), field=True)
