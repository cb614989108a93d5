"""Inter-pod placement: pod affinity, pod anti-affinity and topology spread, evaluated over
the scheduler's view of existing pods with kube-scheduler's semantics (InterPodAffinity and
PodTopologySpread, v1.34), as a node filter and a score of the one `ClusterState`.

`PodView` is built by the scheduler for one cycle from every live pod it sees bound (any
scheduler, any kind: GPU or not) plus its own in-flight bindings, and hangs on the state as
`ClusterState.pod_filter`. The state asks it for a node mask and a score for requests that
carry `PodRequest.pods` (a `PodTerms`), and tells it of every allocation and release, so
pods placed earlier in the same cycle (a gang's members too) count for the next decision.

Filter, for an incoming pod T on node N (kube-scheduler's rules):
- T's required affinity: N has every term's topologyKey, and for each term some existing
  pod matching *all* of T's terms is in N's domain of that key; unless no pod matching all
  terms is anywhere (in any domain of a term's key) and T matches all its own terms (the
  first pod of a self-affine group).
- T's required anti-affinity: for no term is a pod matching it in N's domain (a node
  without the key passes).
- existing pods' required anti-affinity (symmetry): no existing pod whose term matches T
  sits in N's domain of that term's key.
- topology spread (`spread.py`).
A term matches a pod when the pod's namespace is one of the term's namespaces (the owner's
own when none and no namespaceSelector is given) or its labels match the namespaceSelector,
and the pod's labels match the labelSelector. Terminating pods count for affinity (as in
kube-scheduler), not for spread.

One departure, for tenancy (docs/threat-model.md): a term written by a pod of an untrusted
Tenant matches only pods of that same Tenant (of its own namespace when it has no Tenant),
whatever its `namespaces` or `namespaceSelector` say. Otherwise its required anti-affinity
(`namespaceSelector: {}`) would keep every other tenant's matching pods out of its domain (the
symmetric check), and its affinity would steer it next to a chosen victim's pods to share
their node or device. Terms of internal and trusted Tenants keep kube-scheduler's reach.

Score: kube-scheduler's InterPodAffinity (preferred terms of T, and of existing pods towards
T; existing pods' required affinity with hardPodAffinityWeight 1; normalised to 0..100 by
min-max) and PodTopologySpread (`spread.spread_scores`), each weighted 2 as in the default
profile, added to gpugov's placement score with the node affinity and taint preferences.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpugov.k8s.scheduler.pod_terms import AffinityTerm, PodTerms, Selector
from gpugov.k8s.scheduler.spread import spread_filter, spread_reason, spread_scores
from gpugov.model.cluster import NodeSpec
from gpugov.model.request import PodRequest

#: reason codes of a pod no node passes (the pending condition names the term)
AFFINITY, ANTI_AFFINITY, SPREAD = "pod-affinity", "pod-anti-affinity", "topology-spread"
CODES = (AFFINITY, ANTI_AFFINITY, SPREAD)
#: kube-scheduler's default profile weights and InterPodAffinityArgs
PLUGIN_WEIGHT, HARD_POD_AFFINITY_WEIGHT = 2, 1


#: a pod's identity for matching: (namespace, labels as sorted pairs)
Kind = tuple[str, tuple[tuple[str, str], ...]]


@dataclass
class PodView:
    """Existing pods per node of a `ClusterState` (same node order), and namespace labels.

    Pods are kept by kind (namespace and labels): a term is matched once per kind, not once
    per pod, and the pods' own terms are kept per (node, term), so a decision costs the
    distinct kinds plus the domains they sit in, whatever the number of replicas."""

    specs: Sequence[NodeSpec]
    ns_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    #: namespace -> (its Tenant's name or None, the Tenant is untrusted); None = every term
    #: keeps kube-scheduler's reach (no tenancy known)
    owner_of: Callable[[str], tuple[str | None, bool]] | None = None

    def __post_init__(self) -> None:
        self.labels: list[dict[str, str]] = [dict(s.labels) for s in self.specs]
        #: kind id -> node -> pods of that kind on it (all; and not terminating); kinds and
        #: terms are interned to small integers (hashing them costs more than matching)
        self.kinds: dict[int, Counter[int]] = {}
        self.live: dict[int, Counter[int]] = {}
        self._kind_ids: dict[Kind, int] = {}
        self._kind_of: list[Kind] = []
        self._term_ids: dict[AffinityTerm, int] = {}
        #: existing pods' own terms: (node, which, term) -> pods; which is "anti" (required
        #: anti-affinity), "aff" (required affinity), "pref" / "pref-anti" (preferred)
        self.owned: Counter[tuple[int, str, AffinityTerm]] = Counter()
        #: why the last failing evaluation of a pod's terms failed (its condition's words)
        self.why: dict[PodTerms, str] = {}
        self._memo: dict[tuple, Any] = {}
        self._match: dict[tuple[int, int], bool] = {}

    # -- what the scheduler and the state tell it ------------------------------------------
    def add(self, node: int, terms: PodTerms, terminating: bool = False, sign: int = 1) -> None:
        kind = self.kind_id((terms.namespace, terms.labels))
        for table, on in ((self.kinds, True), (self.live, not terminating)):
            if on:
                got = table.setdefault(kind, Counter())
                got[node] += sign
                if got[node] <= 0:
                    del got[node]
        for which, group in (("anti", terms.anti_affinity), ("aff", terms.affinity),
                             ("pref", terms.preferred_affinity),
                             ("pref-anti", terms.preferred_anti_affinity)):
            for a in group:
                self.owned[(node, which, a)] += sign
                if self.owned[(node, which, a)] <= 0:
                    del self.owned[(node, which, a)]
        self._memo.clear()

    def moved(self, req: PodRequest, node: int, sign: int) -> None:
        """`ClusterState.allocate` (+1) or `release` (-1) of a request carrying terms."""
        terms = req.pods
        if not isinstance(terms, PodTerms):
            return
        if sign < 0 and not self.live.get(self.kind_id((terms.namespace, terms.labels)),
                                          {}).get(node):
            return  # not counted here (e.g. its labels changed since): nothing to take back
        self.add(node, terms, sign=1 if sign > 0 else -1)

    def kind_id(self, kind: Kind) -> int:
        got = self._kind_ids.get(kind)
        if got is None:
            got = self._kind_ids[kind] = len(self._kind_of)
            self._kind_of.append(kind)
        return got

    def term_id(self, a: AffinityTerm) -> int:
        got = self._term_ids.get(a)
        if got is None:
            got = self._term_ids[a] = len(self._term_ids)
        return got

    def matches(self, a: AffinityTerm, kind: int, tid: int | None = None) -> bool:
        """`a.matches` for pods of kind id `kind` (cached: terms and kinds are immutable)."""
        key = (self.term_id(a) if tid is None else tid, kind)
        got = self._match.get(key)
        if got is None:
            ns, labels = self._kind_of[kind]
            got = a.matches(ns, dict(labels), self.ns_labels) and self.in_scope(a, ns)
            self._match[key] = got
        return got

    def in_scope(self, a: AffinityTerm, namespace: str) -> bool:
        """Whether term `a` may reach pods of `namespace`: always, unless its owner's Tenant
        is untrusted, then only that Tenant's namespaces (its own namespace alone when it
        has no Tenant)."""
        if self.owner_of is None or not a.owner or namespace == a.owner:
            return True
        tenant, untrusted = self.owner_of(a.owner)
        if not untrusted:
            return True
        return tenant is not None and self.owner_of(namespace)[0] == tenant

    def scoped(self, t: PodTerms) -> bool:
        """The pod's own terms are limited to its Tenant (`in_scope`)."""
        return self.owner_of is not None and self.owner_of(t.namespace)[1]

    def counts(self, selector: Selector, namespace: str) -> Counter[int]:
        """Per node, the live pods of `namespace` that `selector` matches (spread's count;
        an empty selector counts none)."""
        key = ("count", selector, namespace)
        got = self._memo.get(key)
        if got is None:
            got = Counter()
            if not selector.empty:
                for kid, nodes in self.live.items():
                    ns, labels = self._kind_of[kid]
                    if ns == namespace and nodes and selector.matches(dict(labels)):
                        got.update(nodes)
            self._memo[key] = got
        return got

    # -- filter --------------------------------------------------------------------------
    def mask(self, req: PodRequest) -> np.ndarray:
        """Nodes where the pod may land (every check); a read-only array."""
        terms = req.pods
        if not isinstance(terms, PodTerms):
            return np.ones(len(self.specs), dtype=bool)
        key = (terms, req.node_affinity, req.tolerations)
        got = self._memo.get(key)
        if got is None:
            got = self._checks(req, terms)[-1][1]
            self._memo[key] = got
        return got

    def _checks(self, req: PodRequest, t: PodTerms) -> list[tuple[str, np.ndarray]]:
        """(code, cumulative mask) after each check, in kube-scheduler's order."""
        out: list[tuple[str, np.ndarray]] = []
        ok = self._affinity_ok(t) if t.affinity else np.ones(len(self.specs), dtype=bool)
        out.append((AFFINITY, ok))
        ok = ok & self._anti_ok(t.anti_affinity) if t.anti_affinity else ok
        out.append((ANTI_AFFINITY, ok))
        ok = ok & self._existing_anti_ok(t)
        out.append((ANTI_AFFINITY, ok))
        if any(c.hard for c in t.spread):
            ok = ok & spread_filter(self, req, t)
        out.append((SPREAD, ok))
        return out

    def _affinity_ok(self, t: PodTerms) -> np.ndarray:
        """T's required pod affinity per node."""
        # domains (key, value) holding a pod that matches all of T's terms
        found: set[tuple[str, str]] = set()
        tids = [(a, self.term_id(a)) for a in t.affinity]
        for kind, nodes in self.kinds.items():
            if nodes and all(self.matches(a, kind, i) for a, i in tids):
                for n in nodes:
                    for a in t.affinity:
                        value = self.labels[n].get(a.topology_key)
                        if value is not None:
                            found.add((a.topology_key, value))
        own = self.kind_id((t.namespace, t.labels))
        first = not found and all(self.matches(a, own, i) for a, i in tids)
        ok = np.zeros(len(self.specs), dtype=bool)
        for n, labels in enumerate(self.labels):
            if not all(a.topology_key in labels for a in t.affinity):
                continue
            ok[n] = first or all((a.topology_key, labels[a.topology_key]) in found
                                 for a in t.affinity)
        return ok

    def _anti_ok(self, terms: tuple[AffinityTerm, ...]) -> np.ndarray:
        """T's required anti-affinity per node."""
        bad: set[tuple[str, str]] = set()
        tids = [(a, self.term_id(a)) for a in terms]
        for kind, nodes in self.kinds.items():
            for a, i in tids:
                if nodes and self.matches(a, kind, i):
                    for n in nodes:
                        value = self.labels[n].get(a.topology_key)
                        if value is not None:
                            bad.add((a.topology_key, value))
        return self._outside(bad)

    def _existing_anti_ok(self, t: PodTerms) -> np.ndarray:
        """Existing pods' required anti-affinity against T (symmetry)."""
        bad: set[tuple[str, str]] = set()
        own = self.kind_id((t.namespace, t.labels))
        for (n, which, a) in self.owned:
            if which == "anti" and self.matches(a, own):
                value = self.labels[n].get(a.topology_key)
                if value is not None:
                    bad.add((a.topology_key, value))
        return self._outside(bad)

    def _outside(self, bad: set[tuple[str, str]]) -> np.ndarray:
        ok = np.ones(len(self.specs), dtype=bool)
        if bad:
            by_key: dict[str, set[str]] = {}
            for k, v in bad:
                by_key.setdefault(k, set()).add(v)
            for n, labels in enumerate(self.labels):
                ok[n] = not any(labels.get(k) in vs for k, vs in by_key.items())
        return ok

    def reason(self, req: PodRequest, candidates: np.ndarray) -> str:
        """The code of the check that leaves none of `candidates` (the static filters'
        survivors); its words go to `why[req.pods]`."""
        t = req.pods
        assert isinstance(t, PodTerms)
        prev = candidates
        for i, (code, ok) in enumerate(self._checks(req, t)):
            if (candidates & ok).any():
                prev = candidates & ok
                continue
            self.why[t] = self._words(i, req, t, prev)
            return code
        return SPREAD

    def _words(self, step: int, req: PodRequest, t: PodTerms, cand: np.ndarray) -> str:
        n = int(cand.sum())
        if step == 0:
            for a in t.affinity:
                if not any(a.topology_key in self.labels[k] for k in np.flatnonzero(cand)):
                    return (f"{a.describe()}: none of the {n} candidate node(s) has the label "
                            f"{a.topology_key!r}; label the nodes or fix topologyKey")
            scope = (" (this pod's Tenant is untrusted: its terms match only its own "
                     "Tenant's pods)" if self.scoped(t) else "")
            return (f"{', '.join(a.describe() for a in t.affinity)}: no candidate node's "
                    f"domain holds a pod matching all its affinity terms (of {n} candidate "
                    f"node(s)){scope}; start the pods it follows first, or fix the "
                    "labelSelector")
        if step == 1:
            return (f"{', '.join(a.describe() for a in t.anti_affinity)}: each of the {n} "
                    "candidate node(s) has a matching pod in its domain; wait for one to "
                    "leave or add nodes")
        if step == 2:
            return (f"an existing pod's required anti-affinity matches this pod in the domain "
                    f"of each of the {n} candidate node(s); wait for it to leave or add nodes")
        return spread_reason(self, req, t, cand)

    # -- score ---------------------------------------------------------------------------
    def has_scores(self, req: PodRequest) -> bool:
        t = req.pods
        return isinstance(t, PodTerms) and (
            bool(t.preferred_affinity or t.preferred_anti_affinity)
            or any(not c.hard for c in t.spread) or self._any_affinity_pods())

    def _any_affinity_pods(self) -> bool:
        return any(which != "anti" for (_, which, _) in self.owned)

    def scores(self, req: PodRequest, nodes: np.ndarray) -> np.ndarray:
        """InterPodAffinity and PodTopologySpread scores of `nodes` (feasible), normalised
        0..100 each and weighted as kube-scheduler's default profile does."""
        t = req.pods
        out = np.zeros(len(nodes), dtype=np.int64)
        if not isinstance(t, PodTerms) or not len(nodes):
            return out
        out += PLUGIN_WEIGHT * self.affinity_scores(t, nodes)
        if any(not c.hard for c in t.spread):
            out += PLUGIN_WEIGHT * spread_scores(self, req, t, nodes)
        return out

    def affinity_scores(self, t: PodTerms, nodes: np.ndarray) -> np.ndarray:
        """kube-scheduler's normalised InterPodAffinity score (0..100) of `nodes`."""
        topo: Counter[tuple[str, str]] = Counter()

        def add(a: AffinityTerm, weight: int, n: int) -> None:
            value = self.labels[n].get(a.topology_key)
            if value is not None:
                topo[(a.topology_key, value)] += weight

        for kind, where in self.kinds.items():  # the pod's preferred terms, per kind
            for a in t.preferred_affinity:
                if self.matches(a, kind):
                    for n, count in where.items():
                        if self.labels[n]:
                            add(a, a.weight * count, n)
            for a in t.preferred_anti_affinity:
                if self.matches(a, kind):
                    for n, count in where.items():
                        if self.labels[n]:
                            add(a, -a.weight * count, n)
        own = self.kind_id((t.namespace, t.labels))
        for (n, which, a), count in self.owned.items():  # existing pods' terms towards T
            if which != "anti" and self.labels[n] and self.matches(a, own):
                weight = {"aff": HARD_POD_AFFINITY_WEIGHT, "pref": a.weight,
                          "pref-anti": -a.weight}[which]
                add(a, weight * count, n)
        out = np.zeros(len(nodes), dtype=np.int64)
        if not topo or not len(nodes):
            return out
        raw = [sum(w for (k, v), w in topo.items() if self.labels[int(n)].get(k) == v)
               for n in nodes]
        low, high = min(raw), max(raw)
        if high > low:
            out[:] = [int(100 * ((s - low) / (high - low))) for s in raw]
        return out
