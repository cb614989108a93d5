"""`topologySpreadConstraints` with kube-scheduler's PodTopologySpread semantics (v1.34):
`DoNotSchedule` is a filter, `ScheduleAnyway` a score. Pure functions over a `PodView`.

Filter, per hard constraint: a node without the topologyKey fails; otherwise
`matching pods in its domain + (1 if the pod matches its own selector) - global minimum`
must be at most `maxSkew`. Domains and counts come from the nodes that carry every hard
constraint's key and pass the constraint's node inclusion policies (`nodeAffinityPolicy`
Honor by default: the pod's nodeSelector and required node affinity; `nodeTaintsPolicy`
Ignore by default). Counted: pods in the incoming pod's namespace, not terminating, whose
labels the selector (merged with `matchLabelKeys`) matches; an empty selector counts none.
The global minimum is 0 while there are fewer domains than `minDomains`.

Score (soft constraints, over the feasible nodes): nodes lacking a key are ignored (score
0); per constraint `count * log(domains + 2) + maxSkew - 1`, summed, rounded; normalised
to `100 * (max + min - s) / max` (fewer matching pods rank higher).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from gpugov.k8s.scheduler.pod_terms import HOSTNAME, PodTerms, SpreadConstraint
from gpugov.model.constraints import affinity_matches, selects, tolerates

if TYPE_CHECKING:
    from gpugov.k8s.scheduler.pod_affinity import PodView
    from gpugov.model.request import PodRequest


def _included(view: PodView, req: PodRequest, pod: PodTerms, c: SpreadConstraint,
              n: int) -> bool:
    """The constraint's node inclusion policies for node `n`."""
    spec = view.specs[n]
    if c.honor_affinity and not (selects(pod.node_selector, view.labels[n])
                                 and affinity_matches(req.node_affinity, view.labels[n],
                                                      spec.name)):
        return False
    return not (c.honor_taints and not tolerates(req.tolerations, spec.taints))


def _count(view: PodView, n: int, c: SpreadConstraint, namespace: str) -> int:
    """kube-scheduler's countPodsMatchSelector on node `n` (terminating pods skipped)."""
    return view.counts(c.selector, namespace).get(n, 0)


def _has_keys(labels: dict[str, str], constraints: tuple[SpreadConstraint, ...]) -> bool:
    return all(c.topology_key in labels for c in constraints)


def spread_filter(view: PodView, req: PodRequest, pod: PodTerms) -> np.ndarray:
    """The nodes the pod's hard (DoNotSchedule) constraints allow."""
    hard = tuple(c for c in pod.spread if c.hard)
    ok = np.ones(len(view.specs), dtype=bool)
    if not hard:
        return ok
    counts: list[dict[str, int]] = [{} for _ in hard]
    for n in range(len(view.specs)):
        labels = view.labels[n]
        if not _has_keys(labels, hard):
            continue
        for i, c in enumerate(hard):
            if not _included(view, req, pod, c, n):
                continue
            value = labels[c.topology_key]
            counts[i][value] = counts[i].get(value, 0) + _count(view, n, c, pod.namespace)
    own = pod.label_map
    for i, c in enumerate(hard):
        low = 0 if len(counts[i]) < c.min_domains else min(counts[i].values())
        me = 1 if c.selector.matches(own) else 0
        for n in range(len(view.specs)):
            value = view.labels[n].get(c.topology_key)
            if value is None or counts[i].get(value, 0) + me - low > c.max_skew:
                ok[n] = False
    return ok


def spread_reason(view: PodView, req: PodRequest, pod: PodTerms, candidates: np.ndarray
                  ) -> str:
    """Words for a pod whose hard constraints leave none of `candidates`."""
    hard = [c for c in pod.spread if c.hard]
    cand = np.flatnonzero(candidates)
    for c in hard:
        lacking = sum(1 for n in cand if c.topology_key not in view.labels[n])
        if lacking == len(cand):
            return (f"{c.describe()}: none of the {len(cand)} candidate node(s) has the label "
                    f"{c.topology_key!r}; label the nodes or fix topologyKey")
    for c in hard:
        alone = PodTerms(pod.namespace, pod.labels, spread=(c,), node_selector=pod.node_selector)
        mask = spread_filter(view, req, alone)
        if not (mask & candidates).any():
            return (f"{c.describe()}: every candidate node would put its domain more than "
                    f"maxSkew {c.max_skew} above the least loaded domain; wait for pods to "
                    "land elsewhere, add nodes in other domains or raise maxSkew")
    return (f"{', '.join(c.where for c in hard)}: together they leave no candidate node "
            "(each alone would allow one)")


def spread_scores(view: PodView, req: PodRequest, pod: PodTerms, nodes: np.ndarray
                  ) -> np.ndarray:
    """kube-scheduler's normalised PodTopologySpread score (0..100) of `nodes` (feasible)."""
    soft = tuple(c for c in pod.spread if not c.hard)
    out = np.zeros(len(nodes), dtype=np.int64)
    if not soft or not len(nodes):
        return out
    ignored = {int(n) for n in nodes if not _has_keys(view.labels[n], soft)}
    kept = [int(n) for n in nodes if int(n) not in ignored]
    counts: list[dict[str, float]] = [{} for _ in soft]
    for i, c in enumerate(soft):
        if c.topology_key != HOSTNAME:
            for n in kept:
                counts[i].setdefault(view.labels[n][c.topology_key], 0)
    weights = [math.log((len(kept) if c.topology_key == HOSTNAME else len(counts[i])) + 2)
               for i, c in enumerate(soft)]
    for n in range(len(view.specs)):
        if not _has_keys(view.labels[n], soft):
            continue
        for i, c in enumerate(soft):
            if c.topology_key == HOSTNAME or not _included(view, req, pod, c, n):
                continue
            value = view.labels[n][c.topology_key]
            if value in counts[i]:
                counts[i][value] += _count(view, n, c, pod.namespace)
    raw: dict[int, int] = {}
    for n in kept:
        s = 0.0
        for i, c in enumerate(soft):
            cnt = (_count(view, n, c, pod.namespace) if c.topology_key == HOSTNAME
                   else counts[i][view.labels[n][c.topology_key]])
            s += cnt * weights[i] + (c.max_skew - 1)
        raw[n] = int(math.floor(s + 0.5))  # Go's math.Round for non-negative values
    if not raw:
        return out
    low, high = min(raw.values()), max(raw.values())
    for j, n in enumerate(nodes):
        n = int(n)
        if n in ignored:
            continue
        out[j] = 100 if high == 0 else 100 * (high + low - raw[n]) // high
    return out
