"""A pod's inter-pod constraints, read from its spec: pod affinity, pod anti-affinity
(required and preferred) and `topologySpreadConstraints`, with the pod's own namespace and
labels (what other pods' terms match). Pure; kube-scheduler's semantics
(`pod_affinity.py` and `spread.py` evaluate them).

Tenant input: every list, selector and text is bounded before any work (`MAX_*`), and a
malformed term is an error naming its field, value and what is allowed, never ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: bounds (far beyond any real pod): terms per kind, requirements per selector, values per
#: requirement, characters per key/value/namespace, labels per pod
MAX_TERMS, MAX_REQUIREMENTS, MAX_VALUES, MAX_TEXT, MAX_LABELS = 32, 32, 256, 317, 256
MAX_INT32 = 2**31 - 1
SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
HOSTNAME = "kubernetes.io/hostname"


class TermError(ValueError):
    """A malformed inter-pod term; the message names the field."""


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op, have = self.operator, labels.get(self.key)
        if op == "In":
            return have is not None and have in self.values
        if op == "NotIn":
            return have is None or have not in self.values
        if op == "Exists":
            return have is not None
        return have is None  # DoesNotExist


@dataclass(frozen=True, slots=True)
class Selector:
    """A metav1.LabelSelector: requirements ANDed. `nothing` is a nil selector (matches no
    pod, as `LabelSelectorAsSelector(nil)`); an empty one matches every pod."""

    requirements: tuple[Requirement, ...] = ()
    nothing: bool = False

    def matches(self, labels: Mapping[str, str]) -> bool:
        return not self.nothing and all(r.matches(labels) for r in self.requirements)

    @property
    def empty(self) -> bool:
        """kube-scheduler's `Selector.Empty()`: selects everything (spread counts nothing)."""
        return not self.nothing and not self.requirements

    def merged(self, extra: tuple[Requirement, ...]) -> Selector:
        """With `extra` requirements added (matchLabelKeys; a nil selector becomes them)."""
        if not extra:
            return self
        return Selector((() if self.nothing else self.requirements) + extra)

    def text(self) -> str:
        if self.nothing:
            return "<none>"
        parts = []
        for r in self.requirements:
            if r.operator == "In" and len(r.values) == 1:
                parts.append(f"{r.key}={r.values[0]}")
            elif r.operator in ("Exists", "DoesNotExist"):
                parts.append(("!" if r.operator == "DoesNotExist" else "") + r.key)
            else:
                parts.append(f"{r.key} {r.operator.lower()} ({','.join(r.values)})")
        return ",".join(parts) or "<every pod>"


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """A v1.PodAffinityTerm: pods matching `selector` in the term's namespaces (the pod's own
    when neither `namespaces` nor a `namespace_selector` is given), by `topology_key`."""

    where: str  # the field path, for reasons
    selector: Selector
    topology_key: str
    namespaces: frozenset[str]
    namespace_selector: Selector | None = None  # None = nil (selects no namespace)
    weight: int = 0  # preferred terms: 1..100
    #: the namespace of the pod that wrote the term (an untrusted Tenant's terms match only
    #: its own Tenant's pods: `pod_affinity.PodView.matches`)
    owner: str = ""

    def matches(self, namespace: str, labels: Mapping[str, str],
                ns_labels: Mapping[str, Mapping[str, str]]) -> bool:
        """kube-scheduler's `AffinityTerm.Matches(pod, nsLabels)`."""
        if namespace not in self.namespaces and not (
                self.namespace_selector is not None
                and self.namespace_selector.matches(ns_labels.get(namespace, {}))):
            return False
        return self.selector.matches(labels)

    def describe(self) -> str:
        return f"{self.where} ({self.selector.text()}, topologyKey {self.topology_key})"


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """A v1.TopologySpreadConstraint, its selector merged with `matchLabelKeys`."""

    where: str
    max_skew: int
    topology_key: str
    hard: bool  # whenUnsatisfiable: DoNotSchedule (a filter) vs ScheduleAnyway (a score)
    selector: Selector
    min_domains: int = 1
    honor_affinity: bool = True  # nodeAffinityPolicy (default Honor)
    honor_taints: bool = False  # nodeTaintsPolicy (default Ignore)

    def describe(self) -> str:
        return (f"{self.where} (maxSkew {self.max_skew}, topologyKey {self.topology_key}, "
                f"{self.selector.text()})")


@dataclass(frozen=True, slots=True)
class PodTerms:
    """What of a pod inter-pod placement reads: identity (namespace, labels) and its own
    constraints. Hashable: it rides on the engine's `PodRequest.pods`."""

    namespace: str
    labels: tuple[tuple[str, str], ...] = ()
    affinity: tuple[AffinityTerm, ...] = ()
    anti_affinity: tuple[AffinityTerm, ...] = ()
    preferred_affinity: tuple[AffinityTerm, ...] = ()
    preferred_anti_affinity: tuple[AffinityTerm, ...] = ()
    spread: tuple[SpreadConstraint, ...] = ()
    #: the pod's raw nodeSelector (spread's nodeAffinityPolicy: Honor reads it)
    node_selector: tuple[tuple[str, str], ...] = ()

    @property
    def label_map(self) -> dict[str, str]:
        return dict(self.labels)

    @property
    def constrained(self) -> bool:
        """The pod states some inter-pod constraint (its own terms)."""
        return bool(self.affinity or self.anti_affinity or self.preferred_affinity
                    or self.preferred_anti_affinity or self.spread)


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise TermError(f"{where}: {str(value)[:32]!r}; allowed: a string of at most "
                        f"{MAX_TEXT} characters")
    return value


def _list(value: Any, where: str, limit: int = MAX_TERMS) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > limit:
        raise TermError(f"{where}: expected a list of at most {limit} entries")
    return value


def parse_selector(value: Any, where: str) -> Selector:
    """A metav1.LabelSelector (None = nil: selects nothing)."""
    if value is None:
        return Selector(nothing=True)
    if not isinstance(value, dict):
        raise TermError(f"{where}: expected an object with matchLabels / matchExpressions")
    reqs: list[Requirement] = []
    labels = value.get("matchLabels")
    if labels is not None:
        if not isinstance(labels, dict) or len(labels) > MAX_REQUIREMENTS:
            raise TermError(f"{where}.matchLabels: expected a map of at most "
                            f"{MAX_REQUIREMENTS} labels")
        for k, v in labels.items():
            reqs.append(Requirement(_text(k, f"{where}.matchLabels"),
                                    "In", (_text(v, f"{where}.matchLabels.{k}"),)))
    for j, e in enumerate(_list(value.get("matchExpressions"), f"{where}.matchExpressions",
                                MAX_REQUIREMENTS)):
        at = f"{where}.matchExpressions[{j}]"
        if not isinstance(e, dict):
            raise TermError(f"{at}: expected an object with key, operator and values")
        key = _text(e.get("key"), f"{at}.key")
        op = e.get("operator")
        if op not in SELECTOR_OPERATORS:
            raise TermError(f"{at}.operator: {str(op)[:32]!r}; allowed: "
                            f"{', '.join(SELECTOR_OPERATORS)}")
        values = tuple(_text(v, f"{at}.values") for v in
                       _list(e.get("values"), f"{at}.values", MAX_VALUES))
        if op in ("In", "NotIn") and not values:
            raise TermError(f"{at}.values: operator {op} needs at least one value")
        if op in ("Exists", "DoesNotExist") and values:
            raise TermError(f"{at}.values: operator {op} takes no values")
        if not key:
            raise TermError(f"{at}.key: empty; a requirement needs a label key")
        reqs.append(Requirement(key, op, values))
    if len(reqs) > MAX_REQUIREMENTS:
        raise TermError(f"{where}: {len(reqs)} requirements; allowed: at most "
                        f"{MAX_REQUIREMENTS}")
    return Selector(tuple(reqs))


def _label_keys(term: dict[str, Any], where: str, labels: Mapping[str, str],
                mismatch: bool) -> tuple[Requirement, ...]:
    """`matchLabelKeys` (`key In [the pod's value]`) and `mismatchLabelKeys` (`NotIn`): keys
    the pod does not have are skipped, as the apiserver's merge does."""
    out = []
    kinds = (("matchLabelKeys", "In"),) + ((("mismatchLabelKeys", "NotIn"),) if mismatch else ())
    for field, op in kinds:
        for k in _list(term.get(field), f"{where}.{field}", MAX_REQUIREMENTS):
            key = _text(k, f"{where}.{field}")
            if key in labels:
                out.append(Requirement(key, op, (labels[key],)))
    return tuple(out)


def _affinity_term(term: Any, where: str, namespace: str, labels: Mapping[str, str],
                   weight: int = 0) -> AffinityTerm:
    if not isinstance(term, dict):
        raise TermError(f"{where}: expected an object with labelSelector and topologyKey")
    key = _text(term.get("topologyKey", ""), f"{where}.topologyKey")
    if not key:
        raise TermError(f"{where}.topologyKey: empty; Kubernetes requires a node label key "
                        f"(e.g. {HOSTNAME})")
    selector = parse_selector(term.get("labelSelector"), f"{where}.labelSelector")
    selector = selector.merged(_label_keys(term, where, labels, mismatch=True))
    names = frozenset(_text(n, f"{where}.namespaces")
                      for n in _list(term.get("namespaces"), f"{where}.namespaces", MAX_VALUES))
    ns_sel = None
    if term.get("namespaceSelector") is not None:
        ns_sel = parse_selector(term["namespaceSelector"], f"{where}.namespaceSelector")
    if not names and ns_sel is None:
        names = frozenset((namespace,))  # neither given: the pod's own namespace
    return AffinityTerm(where, selector, key, names, ns_sel, weight, namespace)


def _terms(block: dict[str, Any], where: str, namespace: str, labels: Mapping[str, str]
           ) -> tuple[tuple[AffinityTerm, ...], tuple[AffinityTerm, ...]]:
    required = tuple(
        _affinity_term(t, f"{where}.{REQUIRED}[{i}]", namespace, labels)
        for i, t in enumerate(_list(block.get(REQUIRED), f"{where}.{REQUIRED}")))
    preferred = []
    for i, p in enumerate(_list(block.get(PREFERRED), f"{where}.{PREFERRED}")):
        at = f"{where}.{PREFERRED}[{i}]"
        w = _mapping(p).get("weight")
        if not isinstance(w, int) or isinstance(w, bool) or not 1 <= w <= 100:
            raise TermError(f"{at}.weight: {str(w)[:32]!r}; allowed: an integer 1..100")
        preferred.append(_affinity_term(_mapping(p).get("podAffinityTerm"),
                                        f"{at}.podAffinityTerm", namespace, labels, w))
    return required, tuple(preferred)


def _int(value: Any, where: str, low: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= MAX_INT32:
        raise TermError(f"{where}: {str(value)[:32]!r}; allowed: an integer {low}..{MAX_INT32}")
    return value


def _policy(value: Any, where: str, default: bool) -> bool:
    if value is None:
        return default
    if value not in ("Honor", "Ignore"):
        raise TermError(f"{where}: {str(value)[:32]!r}; allowed: Honor, Ignore")
    return value == "Honor"


def _spread(spec: dict[str, Any], labels: Mapping[str, str]) -> tuple[SpreadConstraint, ...]:
    out = []
    base = "spec.topologySpreadConstraints"
    for i, c in enumerate(_list(spec.get("topologySpreadConstraints"), base)):
        where = f"{base}[{i}]"
        if not isinstance(c, dict):
            raise TermError(f"{where}: expected an object")
        skew = _int(c.get("maxSkew"), f"{where}.maxSkew", 1)
        key = _text(c.get("topologyKey", ""), f"{where}.topologyKey")
        if not key:
            raise TermError(f"{where}.topologyKey: empty; a node label key is required")
        when = c.get("whenUnsatisfiable")
        if when not in ("DoNotSchedule", "ScheduleAnyway"):
            raise TermError(f"{where}.whenUnsatisfiable: {str(when)[:32]!r}; allowed: "
                            "DoNotSchedule, ScheduleAnyway")
        min_domains = 1
        if c.get("minDomains") is not None:
            min_domains = _int(c.get("minDomains"), f"{where}.minDomains", 1)
            if when != "DoNotSchedule":
                raise TermError(f"{where}.minDomains: only with whenUnsatisfiable "
                                "DoNotSchedule (Kubernetes' rule)")
        selector = parse_selector(c.get("labelSelector"), f"{where}.labelSelector")
        keys = _label_keys(c, where, labels, mismatch=False)
        out.append(SpreadConstraint(
            where, skew, key, when == "DoNotSchedule", selector.merged(keys), min_domains,
            _policy(c.get("nodeAffinityPolicy"), f"{where}.nodeAffinityPolicy", True),
            _policy(c.get("nodeTaintsPolicy"), f"{where}.nodeTaintsPolicy", False)))
    return tuple(out)


def declares_terms(spec: dict[str, Any]) -> bool:
    """Whether a pod spec states any inter-pod constraint (cheap, before parsing)."""
    aff = _mapping(spec.get("affinity"))
    return bool(aff.get("podAffinity") or aff.get("podAntiAffinity")
                or spec.get("topologySpreadConstraints"))


def parse_pod_terms(obj: dict[str, Any]) -> PodTerms:
    """A pod object's `PodTerms`; TermError names the field of a malformed term."""
    meta, spec = _mapping(obj.get("metadata")), _mapping(obj.get("spec"))
    namespace = str(meta.get("namespace") or "")
    raw = _mapping(meta.get("labels"))
    if len(raw) > MAX_LABELS:
        raise TermError(f"metadata.labels: {len(raw)} labels; allowed: at most {MAX_LABELS}")
    labels = {str(k)[:MAX_TEXT]: str(v)[:MAX_TEXT] for k, v in raw.items()}
    aff = _mapping(spec.get("affinity"))
    for field in ("podAffinity", "podAntiAffinity"):
        if aff.get(field) is not None and not isinstance(aff.get(field), dict):
            raise TermError(f"spec.affinity.{field}: expected an object")
    req_aff, pref_aff = _terms(_mapping(aff.get("podAffinity")), "spec.affinity.podAffinity",
                               namespace, labels)
    req_anti, pref_anti = _terms(_mapping(aff.get("podAntiAffinity")),
                                 "spec.affinity.podAntiAffinity", namespace, labels)
    selector = _mapping(spec.get("nodeSelector"))
    return PodTerms(namespace, tuple(sorted(labels.items())), req_aff, req_anti, pref_aff,
                    pref_anti, _spread(spec, labels),
                    tuple(sorted((str(k), str(v)) for k, v in selector.items())))


def terms_refusal(spec: dict[str, Any], metadata: dict[str, Any] | None = None) -> str:
    """Why a pod spec's inter-pod terms cannot be evaluated as written ("" = they can)."""
    if not declares_terms(spec):
        return ""
    try:
        parse_pod_terms({"metadata": metadata or {}, "spec": spec})
    except TermError as e:
        return str(e)
    return ""
