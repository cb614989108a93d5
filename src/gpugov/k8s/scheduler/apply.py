"""Perform a cycle's plan against the API, concurrently (bounded), and report outcomes back.

A binding carries the allocation record in the Binding's own `metadata.annotations`, which
the apiserver copies onto the pod in the same write that sets `spec.nodeName` — so the
record and the binding can never be seen apart (the device plugin reads the record of a
bound pod), and one write per pod instead of two. `metadata.uid` makes it conditional: a
pod deleted and recreated under the same name is not bound by a stale decision.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from typing import Any

from gpugov.k8s.annotations import encode_allocation
from gpugov.k8s.scheduler import dra_alloc, names
from gpugov.k8s.scheduler.kube import MERGE, STRATEGIC, Kube, message
from gpugov.k8s.scheduler.state import Bind, Condition, Evict, Plan, SchedulerState

log = logging.getLogger("gpugov.scheduler")


def _now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def binding_body(b: Bind) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": b.name, "namespace": b.namespace, "uid": b.uid,
                         "annotations": {names.ANN_ALLOCATION: encode_allocation(b.record)}},
            "target": {"apiVersion": "v1", "kind": "Node", "name": b.node}}


class Applier:
    """Issues a plan's writes with at most `concurrency` requests in flight."""

    def __init__(self, kube: Kube, state: SchedulerState, concurrency: int = 64,
                 events: bool = True) -> None:
        self.kube, self.state = kube, state
        self.sem = asyncio.Semaphore(concurrency)
        self.events = events
        self.outcomes: Counter[str] = Counter()  # "bind-ok", "bind-409", ... (for metrics)

    async def apply(self, plan: Plan) -> None:
        releases, self.state.dra.releases = self.state.dra.releases, []
        if releases:  # DRA claims of pods that left: released before their devices are given
            await asyncio.gather(*(self._release(k, uid) for k, uid in dict.fromkeys(releases)))
        tasks = [self._bind(b) for b in plan.binds]
        tasks += [self._evict(e) for e in plan.evictions]
        tasks += [self._condition(c) for c in plan.conditions]
        tasks += [self._queue(q, s) for q, s in plan.queue_status.items()]
        tasks += [self._node(n, a) for n, a in plan.node_annotations.items()]
        if tasks:
            await asyncio.gather(*tasks)

    async def _call(self, what: str, method: str, path: str, body: Any,
                    content_type: str = "application/json") -> tuple[int, Any]:
        async with self.sem:
            try:
                status, doc = await self.kube.request(method, path, body,
                                                      content_type=content_type)
            except (TimeoutError, OSError) as e:
                status, doc = 0, {"message": str(e) or type(e).__name__}
        ok = 200 <= status < 300
        self.outcomes[f"{what}-{'ok' if ok else status}"] += 1
        if not ok and status not in (404, 429):
            log.warning("%s %s: HTTP %s: %s", what, path, status, message(doc))
        return status, doc

    async def _bind(self, b: Bind) -> None:
        if b.claims:  # DRA claims gpugov allocated: allocation and reservation first
            why = await dra_alloc.write_claims(self.kube, b.namespace, b.name, b.uid, b.claims,
                                               self.state.dra.claims)
            if why:
                log.warning("pod %s/%s not bound: %s", b.namespace, b.name, why)
                self.outcomes["bind-claims-failed"] += 1
                self.state.dra.releases += [(k, b.uid) for k, _, _ in b.claims]
                self.state.bind_result(b, False)
                return
        status, _ = await self._call(
            "bind", "POST", f"/api/v1/namespaces/{b.namespace}/pods/{b.name}/binding",
            binding_body(b))
        self.state.bind_result(b, 200 <= status < 300)
        if b.claims and not 200 <= status < 300:
            self.state.dra.releases += [(k, b.uid) for k, _, _ in b.claims]
        if b.warning and 200 <= status < 300 and self.events:
            await self._event(b.namespace, b.name, b.uid, "QoSClassLowered", b.warning,
                              "Warning")

    async def _release(self, key: str, pod_uid: str) -> None:
        """Release a claim gpugov allocated for a pod that left (or was never bound)."""
        try:
            status = await dra_alloc.release_claim(self.kube, key, pod_uid)
        except (TimeoutError, OSError) as e:
            status = 0
            log.warning("release claim %s: %s", key, e)
        ok = 200 <= status < 300 or status == 404
        self.outcomes[f"claim-release-{'ok' if ok else status}"] += 1

    async def _node(self, name: str, annotations: dict[str, str | None]) -> None:
        """Merge gpugov's scheduler-owned node annotations (on-demand MIG requests); a
        failure is rewritten next cycle (the want is compared with what the node says)."""
        await self._call("node", "PATCH", f"/api/v1/nodes/{name}",
                         {"metadata": {"annotations": annotations}}, content_type=MERGE)

    async def _evict(self, e: Evict) -> None:
        body = {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": e.name, "namespace": e.namespace}}
        status, _ = await self._call(
            "evict", "POST", f"/api/v1/namespaces/{e.namespace}/pods/{e.name}/eviction", body)
        self.state.eviction_result(e, status, time.time())
        if 200 <= status < 300 and self.events:
            await self._event(e.namespace, e.name, "", "Preempted",
                              f"gpugov: evicted ({e.kind}) for pod {e.preemptor}", "Normal")

    async def _condition(self, c: Condition) -> None:
        now = _now_rfc3339()
        patch = {"status": {"conditions": [{
            "type": "PodScheduled", "status": "False", "reason": names.UNSCHEDULABLE,
            "message": c.message, "lastTransitionTime": now, "lastProbeTime": None}]}}
        status, _ = await self._call(
            "condition", "PATCH", f"/api/v1/namespaces/{c.namespace}/pods/{c.name}/status",
            patch, STRATEGIC)
        if not 200 <= status < 300:
            self.state.written.pop(c.key, None)  # try again next cycle
            return
        if self.events:
            await self._event(c.namespace, c.name, c.uid, "FailedScheduling", c.message,
                              "Warning")

    async def _event(self, ns: str, name: str, uid: str, reason: str, msg: str,
                     kind: str) -> None:
        now = _now_rfc3339()
        body = {"apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{name}.", "namespace": ns},
                "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": ns,
                                   "name": name, **({"uid": uid} if uid else {})},
                "reason": reason, "message": msg[:1000], "type": kind, "count": 1,
                "firstTimestamp": now, "lastTimestamp": now,
                "source": {"component": names.EVENT_SOURCE},
                "reportingComponent": names.EVENT_SOURCE}
        await self._call("event", "POST", f"/api/v1/namespaces/{ns}/events", body)

    async def _queue(self, name: str, status_doc: dict[str, Any]) -> None:
        status, _ = await self._call(
            "queue-status", "PATCH",
            f"/apis/{names.GROUP}/{names.VERSION}/{names.QUEUES}/{name}/status",
            {"status": status_doc}, MERGE)
        if 200 <= status < 300 or 400 <= status < 500 and status not in (409, 429):
            # a refusal (Queue gone, schema) is not retried every cycle: the next change is
            self.state.queue_status_written(name, status_doc)
