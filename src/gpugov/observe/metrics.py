"""The reconciler's `/metrics`: one snapshot of the join plus the counters it keeps.

Per-pod series carry `namespace`, `pod`, `tenant`, `queue` (tenant and queue follow from the
pod, so they add no cardinality); queue series carry `queue`; device series `node`, `gpu`,
`UUID`. Cardinality is bounded: beyond `max_pods` pods (largest allocations kept), the rest
of each namespace is folded into one `pod="_other"` series, so sums stay exact.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpugov.observe import names as m
from gpugov.observe.views import Amount, PodRow, Reconciliation

POD_LABELS = ["namespace", "pod", "tenant", "queue"]
OTHER = "_other"


class ReconcilerMetrics(Collector):
    """Holds the latest reconciliation and the counters accumulated between cycles."""

    def __init__(self, max_pods: int = 5000) -> None:
        self.max_pods = max_pods
        self.latest = Reconciliation()
        self._folded: set[tuple[str, str]] = set()
        self.idle_seconds: dict[tuple[str, ...], float] = defaultdict(float)
        self.refusals: dict[tuple[str, ...], float] = defaultdict(float)
        self._last_refused: dict[tuple[str, str], float] = {}
        self.errors: dict[str, float] = defaultdict(float)
        self.last_success: float | None = None
        #: (namespace, claim, pod) -> (memory bytes, busy fraction) of DRA claims
        self.claims: dict[tuple[str, str, str], tuple[float | None, float | None]] = {}

    # -- updates ---------------------------------------------------------------------------
    def update(self, rec: Reconciliation, dt: float,
               refused: dict[tuple[str, str], float] | None, now: float | None = None) -> None:
        """Take a new reconciliation; `dt` seconds passed since the previous one."""
        self.latest = rec
        self._folded = self._fold(rec)
        live = set()
        for p in rec.pods:
            key = self._labels(p)
            live.add(key)
            if p.used is not None and dt > 0:
                self.idle_seconds[key] += p.idle_compute * dt
        for key in [k for k in self.idle_seconds if k not in live]:
            del self.idle_seconds[key]
        if refused is not None:
            index = {(p.namespace, p.pod): self._labels(p) for p in rec.pods}
            for pod, total in refused.items():
                if pod not in index:
                    continue
                key = (*index[pod], "memory-cap")
                before = self._last_refused.get(pod)
                # first sight sets the baseline; a drop means the exporter restarted
                grew = 0.0 if before is None else total if total < before else total - before
                self.refusals[key] += grew
            self._last_refused = dict(refused)
        for key in [k for k in self.refusals if k[:4] not in live]:
            del self.refusals[key]
        self.last_success = time.time() if now is None else now

    def error(self, reason: str) -> None:
        self.errors[reason] += 1

    # -- collection ------------------------------------------------------------------------
    def _fold(self, rec: Reconciliation) -> set[tuple[str, str]]:
        """Pods beyond `max_pods` (smallest allocations first) get no series of their own."""
        if len(rec.pods) <= self.max_pods:
            return set()
        rows = sorted(rec.pods, key=lambda p: (
            -((p.allocated.compute or 0.0) if p.allocated else 0.0), p.namespace, p.pod))
        return {(p.namespace, p.pod) for p in rows[self.max_pods:]}

    def _labels(self, p: PodRow) -> tuple[str, ...]:
        if (p.namespace, p.pod) in self._folded:
            return p.namespace, OTHER, p.tenant, p.queue
        return p.namespace, p.pod, p.tenant, p.queue

    def collect(self) -> Iterator[Metric]:
        rec = self.latest
        views: dict[str, dict[str, GaugeMetricFamily]] = {
            kind: {v: GaugeMetricFamily(names[v], doc.format(view=v), labels=POD_LABELS)
                   for v in m.VIEWS}
            for kind, names, doc in (
                ("gpus", m.GPUS, "GPUs {view} per pod (used: devices busy above the idle "
                 "threshold)"),
                ("memory", m.MEMORY, "GPU memory {view} per pod, bytes"),
                ("compute", m.COMPUTE, "GPU compute {view} per pod, 1.0 = one whole GPU"))}
        sums: dict[tuple[str, str, tuple[str, ...]], float] = defaultdict(float)
        for p in rec.pods:
            key = self._labels(p)
            for view, amount in (("declared", p.declared), ("allocated", p.allocated),
                                 ("used", p.used)):
                if amount is None:
                    continue
                for kind, value in _values(amount):
                    sums[(kind, view, key)] += value
        for (kind, view, key), value in sorted(sums.items()):
            views[kind][view].add_metric(list(key), value)
        for fams in views.values():
            yield from fams.values()
        eff = GaugeMetricFamily(m.EFFICIENCY, "used / allocated per pod",
                                labels=[*POD_LABELS, "resource"])
        folded = self._folded
        for p in rec.pods:
            if (p.namespace, p.pod) in folded:
                continue
            for resource in ("memory", "compute"):
                value = p.efficiency(resource)
                if value is not None:
                    eff.add_metric([*self._labels(p), resource], value)
        yield eff
        idle = CounterMetricFamily(m.IDLE_ALLOCATED, "GPU time allocated while idle, "
                                   "GPU-seconds (1.0 = one whole GPU)", labels=POD_LABELS)
        for key, value in sorted(self.idle_seconds.items()):
            idle.add_metric(list(key), value)
        yield idle
        refusals = CounterMetricFamily(m.QUOTA_REFUSALS, "allocations refused at a pod's "
                                       "limit", labels=[*POD_LABELS, "reason"])
        for key, value in sorted(self.refusals.items()):
            refusals.add_metric(list(key), value)
        yield refusals
        fams = {name: GaugeMetricFamily(name, doc, labels=["queue"]) for name, doc in (
            (m.QUEUE_QUOTA, "guaranteed GPUs of the queue"),
            (m.QUEUE_FAIR_SHARE, "fair share of the queue, GPUs"),
            (m.QUEUE_USAGE, "GPUs (compute) allocated to running pods of the queue"),
            (m.QUEUE_PENDING, "pods of the queue waiting for placement"))}
        for q in rec.queues:
            if q.quota_gpus is not None:
                fams[m.QUEUE_QUOTA].add_metric([q.queue], q.quota_gpus)
            if q.fair_share_gpus is not None:
                fams[m.QUEUE_FAIR_SHARE].add_metric([q.queue], q.fair_share_gpus)
            fams[m.QUEUE_USAGE].add_metric([q.queue], q.usage_gpus)
            fams[m.QUEUE_PENDING].add_metric([q.queue], q.pending_pods)
        yield from fams.values()
        over = GaugeMetricFamily(m.TIMESLICE_OVERCOMMIT, "sum of the memory limits of a "
                                 "time-sliced device's tenants / card memory",
                                 labels=["node", "gpu", "UUID"])
        dev_labels = ["node", "gpu", "UUID", "mode"]
        dev_compute = GaugeMetricFamily(m.DEVICE_ALLOCATED_COMPUTE, "compute allocated on a "
                                        "device, 1.0 = the whole device", labels=dev_labels)
        dev_memory = GaugeMetricFamily(m.DEVICE_ALLOCATED_MEMORY, "memory limits allocated "
                                       "on a device, bytes", labels=dev_labels)
        for d in rec.devices:
            labels = [d.node, str(d.index), d.uuid, d.mode]
            dev_compute.add_metric(labels, d.compute)
            dev_memory.add_metric(labels, d.memory_bytes)
            if d.overcommit is not None:
                over.add_metric(labels[:3], d.overcommit)
        yield over
        yield dev_compute
        yield dev_memory
        missing = GaugeMetricFamily(m.NODE_AGENT_MISSING, "1 for a node running GPU pods "
                                    "without an exporter reporting", labels=["node"])
        for node in rec.nodes_without_agent:
            missing.add_metric([node], 1)
        yield missing
        problems = GaugeMetricFamily(m.RECONCILER_PROBLEMS, "objects the last cycle could "
                                     "not fully read", labels=["reason"])
        counts: dict[str, int] = defaultdict(int)
        for reason, _ in rec.problems:
            counts[reason] += 1
        for reason, n in sorted(counts.items()):
            problems.add_metric([reason], n)
        yield problems
        errors = CounterMetricFamily(m.RECONCILER_ERRORS, "reconcile cycles that failed to "
                                     "read a source", labels=["reason"])
        for reason, n in sorted(self.errors.items()):
            errors.add_metric([reason], n)
        yield errors
        yield from self._claim_metrics()
        last = GaugeMetricFamily(m.RECONCILER_LAST_SUCCESS, "unix time of the last complete "
                                 "reconcile cycle")
        if self.last_success is not None:
            last.add_metric([], self.last_success)
        yield last


    def _claim_metrics(self) -> Iterator[Metric]:
        """Usage by DRA claim (and the pod it is reserved for); at most `max_pods` claims,
        those holding the most memory first."""
        labels = ["namespace", "claim", "pod"]
        mem = GaugeMetricFamily(m.CLAIM_USED_MEMORY, "GPU memory a DRA claim's containers "
                                "hold (the enforcement library's charge)", labels=labels)
        busy = GaugeMetricFamily(m.CLAIM_USED_COMPUTE, "busy fraction of a device a DRA "
                                 "claim's containers use (device time per second)",
                                 labels=labels)
        top = sorted(self.claims.items(), key=lambda kv: (-(kv[1][0] or 0.0), kv[0]))
        for key, (memory, compute) in top[:self.max_pods]:
            if memory is not None:
                mem.add_metric(list(key), memory)
            if compute is not None:
                busy.add_metric(list(key), compute)
        yield from (mem, busy)


def _values(a: Amount) -> Iterator[tuple[str, float]]:
    for kind, value in (("gpus", a.gpus), ("memory", a.memory_bytes), ("compute", a.compute)):
        if value is not None:
            yield kind, value
