"""Node constraints a pod must satisfy besides capacity: labels it selects, taints it tolerates.

Kubernetes semantics (core/v1): a pod may land on a node only if it tolerates every taint with
effect `NoSchedule` or `NoExecute`; `PreferNoSchedule` is a preference, never a refusal (it
lowers the node's score, `intolerable_preferences`). Required node affinity
(`affinity_matches`: every operator, terms ORed) is a filter; preferred node affinity
(`preference_weight`) a score. A
toleration matches a taint when the keys are equal (an empty key with `Exists` matches every
key), the effects are equal (an empty effect matches every effect) and, for `Equal`, the values
are equal.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
#: effects that keep a pod off a node unless tolerated.
HARD_EFFECTS = ("NoSchedule", "NoExecute")


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"

    def __post_init__(self) -> None:
        if not self.key:
            raise ValueError("a taint needs a key")
        if self.effect not in TAINT_EFFECTS:
            raise ValueError(f"taint effect {self.effect!r} is not one of "
                             f"{', '.join(TAINT_EFFECTS)}")


#: taints gpugov puts on nodes in its own state only: a toleration must name them by key
INTERNAL_TAINT_PREFIX = "internal.gpugov.io/"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def __post_init__(self) -> None:
        if self.operator not in ("Equal", "Exists"):
            raise ValueError(f"toleration operator {self.operator!r} is not Equal or Exists")
        if self.operator == "Exists" and self.value:
            raise ValueError("a toleration with operator Exists takes no value")
        if not self.key and self.operator != "Exists":
            raise ValueError("a toleration with an empty key needs operator Exists")
        if self.effect and self.effect not in TAINT_EFFECTS:
            raise ValueError(f"toleration effect {self.effect!r} is not one of "
                             f"{', '.join(TAINT_EFFECTS)}")

    def matches(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:  # but gpugov's state-only taints (k8s/scheduler/dra_alloc.py)
            return not taint.key.startswith(INTERNAL_TAINT_PREFIX)
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


def tolerates(tolerations: Iterable[Toleration], taints: Iterable[Taint]) -> bool:
    """True when every NoSchedule/NoExecute taint is matched by some toleration."""
    tols = tuple(tolerations)
    return all(any(t.matches(taint) for t in tols)
               for taint in taints if taint.effect in HARD_EFFECTS)


def selects(selector: Iterable[tuple[str, str]], labels: Mapping[str, str]) -> bool:
    """True when the node's labels carry every key=value of the pod's nodeSelector."""
    return all(labels.get(k) == v for k, v in selector)


_INT = re.compile(r"[+-]?[0-9]+")
#: node affinity operators (core/v1 NodeSelectorRequirement)
AFFINITY_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
#: the one field a `matchFields` requirement may name (kube-scheduler's rule)
NODE_NAME_FIELD = "metadata.name"


@dataclass(frozen=True, slots=True)
class NodeRequirement:
    """One `matchExpressions` (or `matchFields`, `field=True`) entry of a node selector term.

    Semantics of kube-scheduler (k8s.io/component-helpers nodeaffinity): `In` the label exists
    and its value is one of `values`; `NotIn` it is absent or not one of them; `Exists` /
    `DoesNotExist`; `Gt` / `Lt` the label exists and, read as an integer, is greater / less
    than the one integer value (a label that is not an integer does not match). A field
    requirement names `metadata.name` with `In` or `NotIn` and one value."""

    key: str
    operator: str
    values: tuple[str, ...] = ()
    field: bool = False

    def __post_init__(self) -> None:
        op, n = self.operator, len(self.values)
        if op not in AFFINITY_OPERATORS:
            raise ValueError(f"operator {op!r} is not one of {', '.join(AFFINITY_OPERATORS)}")
        if not self.key:
            raise ValueError("a requirement needs a key")
        if op in ("In", "NotIn") and n == 0:
            raise ValueError(f"operator {op} needs at least one value")
        if op in ("Exists", "DoesNotExist") and n:
            raise ValueError(f"operator {op} takes no values")
        if op in ("Gt", "Lt"):
            if n != 1:
                raise ValueError(f"operator {op} takes exactly one value")
            _int64(self.values[0], f"operator {op}: value")
        if self.field and (self.key != NODE_NAME_FIELD or op not in ("In", "NotIn") or n != 1):
            raise ValueError(f"matchFields supports only {NODE_NAME_FIELD} with In or NotIn "
                             "and one value")

    def matches(self, labels: Mapping[str, str], name: str = "") -> bool:
        if self.field:
            return (name in self.values) == (self.operator == "In")
        op, present = self.operator, self.key in labels
        if op == "Exists":
            return present
        if op == "DoesNotExist":
            return not present
        if op == "In":
            return present and labels[self.key] in self.values
        if op == "NotIn":
            return not present or labels[self.key] not in self.values
        if not present:
            return False
        try:
            have = _int64(labels[self.key], "label")
        except ValueError:
            return False
        want = _int64(self.values[0], "value")
        return have > want if op == "Gt" else have < want


@dataclass(frozen=True, slots=True)
class NodeTerm:
    """One `nodeSelectorTerms` entry: its requirements all hold (an empty term matches no
    node, as in Kubernetes)."""

    requirements: tuple[NodeRequirement, ...] = ()

    def matches(self, labels: Mapping[str, str], name: str = "") -> bool:
        return bool(self.requirements) and all(r.matches(labels, name)
                                               for r in self.requirements)


def affinity_matches(terms: Iterable[NodeTerm], labels: Mapping[str, str],
                     name: str = "") -> bool:
    """Required node affinity: some term matches (terms are ORed); no terms = no constraint."""
    terms = tuple(terms)
    return not terms or any(t.matches(labels, name) for t in terms)


def _int64(text: str, what: str) -> int:
    """Kubernetes reads Gt/Lt values with strconv.ParseInt(s, 10, 64)."""
    s = str(text)
    if len(s) > 20 or not _INT.fullmatch(s):
        raise ValueError(f"{what} {s[:32]!r} is not an integer")
    v = int(s)
    if not -(2**63) <= v < 2**63:
        raise ValueError(f"{what} {s[:32]!r} is out of the int64 range")
    return v


def preference_weight(preferred: Iterable[tuple[int, NodeTerm]], labels: Mapping[str, str],
                      name: str = "") -> int:
    """Preferred node affinity: the sum of the weights of the terms the node matches (an
    empty term matches nothing, as kube-scheduler skips it)."""
    return sum(w for w, t in preferred if t.matches(labels, name))


def intolerable_preferences(tolerations: Iterable[Toleration], taints: Iterable[Taint]) -> int:
    """How many `PreferNoSchedule` taints of a node no toleration matches (kube-scheduler's
    TaintToleration score counts these)."""
    tols = [t for t in tolerations if t.effect in ("", "PreferNoSchedule")]
    return sum(1 for taint in taints if taint.effect == "PreferNoSchedule"
               and not any(t.matches(taint) for t in tols))
