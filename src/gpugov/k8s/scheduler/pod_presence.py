"""Every live pod the scheduler sees (any scheduler, any kind, GPU or not), as inter-pod
placement reads it: namespace, labels, node, its own pod (anti-)affinity and spread terms.

The scheduler's state feeds it every pod event. While some live pod states an inter-pod
constraint (`active`), every pod gpugov places carries its `PodTerms` in its engine request
(so pods placed in one cycle count for each other, a gang's members too), and each cycle
hangs a fresh `PodView` of the bound pods on the `ClusterState` (`attached`). When `active`
flips, the caller rebuilds (pending requests change). Pods on nodes gpugov does not manage
are not counted (their nodes' labels are unknown).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gpugov.k8s.scheduler.pod_affinity import CODES, PodView
from gpugov.k8s.scheduler.pod_terms import (
    MAX_LABELS,
    MAX_TEXT,
    PodTerms,
    declares_terms,
    parse_pod_terms,
)


@dataclass(slots=True)
class Presence:
    terms: PodTerms
    node: str
    terminating: bool
    source: tuple  # what `terms` was read from (labels, affinity, spread, nodeSelector)


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _terms(obj: dict[str, Any]) -> PodTerms:
    """The pod's terms; a pod whose terms cannot be read (the apiserver validated them, so
    only a hand-made object) is counted by its labels alone."""
    meta, spec = _mapping(obj.get("metadata")), _mapping(obj.get("spec"))
    if declares_terms(spec):
        with contextlib.suppress(Exception):  # another's pod never stops the watch
            return parse_pod_terms(obj)
    labels = _mapping(meta.get("labels"))
    pairs = sorted((str(k)[:MAX_TEXT], str(v)[:MAX_TEXT]) for k, v in labels.items())
    return PodTerms(str(meta.get("namespace") or ""), tuple(pairs[:MAX_LABELS]),
                    node_selector=tuple(sorted((str(k), str(v)) for k, v in
                                               _mapping(spec.get("nodeSelector")).items())))


#: how many sets of terms keep their last words (bounded: terms are tenant input)
MAX_WORDS = 4096


class PodPresence:
    """Live pods by key, and the view of one cycle."""

    def __init__(self) -> None:
        self.pods: dict[str, Presence] = {}
        self.constrained: set[str] = set()  # pods stating their own inter-pod terms
        self.view: PodView | None = None  # the last cycle's (its `why` words)
        #: the words last said for each set of terms: a job the engine did not try again
        #: this cycle keeps its earlier block, and its reason keeps naming the term
        self.words: dict[PodTerms, str] = {}

    @property
    def active(self) -> bool:
        return bool(self.constrained)

    def set_pod(self, key: str, obj: dict[str, Any]) -> bool:
        """A pod event; True when `active` flipped, or a pending pod's terms or labels
        changed while active (the caller rebuilds: pending requests carry them)."""
        meta, spec = _mapping(obj.get("metadata")), _mapping(obj.get("spec"))
        if _mapping(obj.get("status")).get("phase") in ("Succeeded", "Failed"):
            return self.delete(key)
        before = self.active
        aff = _mapping(spec.get("affinity"))
        source = (meta.get("namespace"), meta.get("labels"), aff.get("podAffinity"),
                  aff.get("podAntiAffinity"), spec.get("topologySpreadConstraints"),
                  spec.get("nodeSelector"))
        old = self.pods.get(key)
        terms = old.terms if old is not None and old.source == source else _terms(obj)
        node = spec.get("nodeName")
        self.pods[key] = Presence(terms, node if isinstance(node, str) else "",
                                  bool(meta.get("deletionTimestamp")), source)
        if terms.constrained:
            self.constrained.add(key)
        else:
            self.constrained.discard(key)
        relabelled = old is not None and old.terms != terms and not node and self.active
        return before != self.active or relabelled

    def delete(self, key: str) -> bool:
        before = self.active
        self.pods.pop(key, None)
        self.constrained.discard(key)
        return before != self.active

    def request_terms(self, key: str) -> PodTerms | None:
        """What a pod's engine request carries: its terms while any pod states some."""
        got = self.pods.get(key)
        return got.terms if got is not None and self.active else None

    @contextlib.contextmanager
    def attached(self, state: Any, node_index: Mapping[str, int],
                 inflight: Mapping[str, Any], ns_labels: Mapping[str, Mapping[str, str]],
                 owner_of: Callable[[str], tuple[str | None, bool]] | None = None
                 ) -> Iterator[None]:
        """Hang this cycle's view of the bound pods (and gpugov's in-flight bindings) on
        `state` while the block runs. `owner_of`: namespace -> (Tenant, untrusted), which
        limits an untrusted Tenant's terms to its own pods (`PodView.in_scope`)."""
        if not self.active:
            yield
            return
        view = PodView(state.nodes, ns_labels, owner_of)
        for key, p in self.pods.items():
            node = p.node
            if not node and key in inflight:
                node = inflight[key].node
            i = node_index.get(node) if node else None
            if i is not None:
                view.add(i, p.terms, p.terminating)
        self.view = view
        state.pod_filter = view
        try:
            yield
        finally:
            state.pod_filter = None

    def reason(self, job: Any) -> tuple[str, str]:
        """(code, detail) for a pending job: an inter-pod code with the words naming the
        term when that is what blocked it, else the job's own."""
        terms = getattr(job.request, "pods", None)
        if job.blocked_by in CODES and terms is not None:
            words = self.view.why.get(terms) if self.view is not None else None
            if words is not None:
                if len(self.words) >= MAX_WORDS and terms not in self.words:
                    self.words.pop(next(iter(self.words)))
                self.words[terms] = words
                return job.blocked_by, words
            if terms in self.words:
                return job.blocked_by, self.words[terms]
        return job.reason, job.detail
