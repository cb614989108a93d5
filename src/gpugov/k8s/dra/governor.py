"""`gpugov dra governor`: queues govern the claims kube-scheduler allocates (docs/dra.md).

gpugov's devices are published with binding conditions (`Features.governed`), so
kube-scheduler, after allocating a claim to them and reserving it for the pod, waits before
binding the pod until the claim's device status says `gpugov.io/admitted` (or gives that node
up when it says `gpugov.io/refused`). This controller decides: the claim's namespace gives
its Tenant and leaf queue (the Tenants, as gpugov's scheduler reads them — never the pod's
annotations); the Tenant's trust tier gives the isolation its devices must deliver
(`ledger.claim_isolation`: an untrusted tenant gets no slice, time-slice or MPS client);
the allocated devices give its charge (`ledger.claim_charge`); the queue tree's
limits, counting what gpugov's scheduler already charged (each Queue's status.usage) and the
claims admitted so far, give the answer. A refusal names the queue, the resource and the
numbers; kube-scheduler puts it in the pod's FailedScheduling event, deallocates the claim
and tries again later (a claim is admitted once capacity under the limit frees up).

Gangs (pods labelled `scheduling.x-k8s.io/pod-group`, the PodGroup's `minMember`) are
decided all or nothing: kube-scheduler binds each pod alone, so the governor leaves a gang's
claims undecided until `minMember` of its pods wait, then admits them together or refuses
them together.

Each round lists claims, gpugov's slices, Queues, Tenants and namespaces (polling, every
`interval` seconds; kube-scheduler itself polls binding conditions every 5 s). Claims are
decided oldest allocation first; each fails alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from gpugov.k8s.dra.ledger import (
    ChargeError,
    Ledger,
    QueueNode,
    claim_charge,
    claim_isolation,
    device_index,
    pod_usage,
)
from gpugov.k8s.dra.reclaim import Holder, Waiter, claim_demand, victims
from gpugov.k8s.dra.slices import ADMITTED, CLASSES, DRIVER, REFUSED, SLICE_CLASS
from gpugov.k8s.scheduler import names
from gpugov.k8s.scheduler.kube import Kube, message
from gpugov.k8s.scheduler.tenancy import Tenancy
from gpugov.k8s.scheduler.translate import queue_config
from gpugov.model.isolation import MIN_ISOLATION

log = logging.getLogger(__name__)

CLAIMS = "/apis/resource.k8s.io/v1/resourceclaims"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
QUEUES = f"/apis/{names.GROUP}/{names.VERSION}/{names.QUEUES}"
TENANTS = f"/apis/{names.GROUP}/{names.VERSION}/{names.TENANTS}"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _ours(claim: dict[str, Any]) -> list[dict[str, Any]]:
    """The claim's allocated gpugov devices that wait on binding conditions."""
    alloc = (claim.get("status") or {}).get("allocation") or {}
    return [r for r in (alloc.get("devices") or {}).get("results") or []
            if r.get("driver") == DRIVER and ADMITTED in (r.get("bindingConditions") or [])]


def _unschedulable(pod: dict[str, Any]) -> bool:
    """kube-scheduler tried and found no node (its PodScheduled condition says so)."""
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False"
               and c.get("reason") == "Unschedulable"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _claim_names(pod: dict[str, Any]) -> list[str]:
    """The pod's ResourceClaim names: named ones, and those created from its templates."""
    out = [c["resourceClaimName"] for c in (pod.get("spec") or {}).get("resourceClaims") or []
           if c.get("resourceClaimName")]
    out += [s["resourceClaimName"] for s in
            (pod.get("status") or {}).get("resourceClaimStatuses") or []
            if s.get("resourceClaimName")]
    return out


def _pods(claim: dict[str, Any]) -> set[str]:
    return {str(r.get("uid")) for r in (claim.get("status") or {}).get("reservedFor") or []
            if r.get("resource") == "pods"}


def verdict(claim: dict[str, Any]) -> str | None:
    """ADMITTED / REFUSED when gpugov decided this allocation, else None."""
    for d in (claim.get("status") or {}).get("devices") or []:
        if d.get("driver") != DRIVER:
            continue
        for c in d.get("conditions") or []:
            if c.get("type") in (ADMITTED, REFUSED) and c.get("status") == "True":
                return c["type"]
    return None


def queues_of(objs: list[dict[str, Any]]) -> dict[str, QueueNode]:
    out = {}
    for o in objs:
        try:
            q = queue_config(o)
        except ValueError as e:
            log.warning("governor: %s", e)
            continue
        # the scheduler's pods only: the claims in its usage are counted here (pod_usage)
        out[q.name] = QueueNode(q.name, q.parent, q.limit, pod_usage(o.get("status") or {}),
                                dict(q.quota))
    return out


class Governor:
    def __init__(self, kube: Kube, interval: float = 1.0, reclaim: bool = True) -> None:
        self.kube, self.interval = kube, interval
        self.decisions: dict[str, str] = {}  # claim uid -> the last reason ("" = admitted)
        self.errors: list[str] = []  # what failed other than a write conflict (bounded)
        self._groups: dict[str, str] = {}  # pod UID -> "<ns>/<PodGroup>" or ""
        #: evict for pending DRA pods of queues under their guarantee (`reclaim.py`)
        self.reclaim = reclaim
        self.evicted: list[str] = []

    async def _list(self, path: str) -> list[dict[str, Any]]:
        items, _ = await self.kube.list_all(path)
        return items

    async def _group_of(self, claim: dict[str, Any]) -> str | None:
        """`<ns>/<PodGroup>` of the pod the claim is reserved for (its
        `scheduling.x-k8s.io/pod-group` label), cached by pod UID (labels of a gang member do
        not move)."""
        ns = claim["metadata"]["namespace"]
        for ref in (claim.get("status") or {}).get("reservedFor") or []:
            if ref.get("resource") != "pods":
                continue
            uid = str(ref.get("uid"))
            if uid not in self._groups:
                code, pod = await self.kube.request(
                    "GET", f"/api/v1/namespaces/{ns}/pods/{ref.get('name')}")
                if code != 200:
                    return None
                label = ((pod.get("metadata") or {}).get("labels") or {}).get(
                    names.PODGROUP_LABEL)
                if len(self._groups) > 100_000:
                    self._groups.clear()
                self._groups[uid] = f"{ns}/{label}" if label else ""
            return self._groups[uid] or None
        return None

    async def _min_member(self, group: str) -> tuple[int | None, str]:
        ns, name = group.split("/", 1)
        # a list by name: the scheduler identity may list and watch PodGroups, not get them
        code, doc = await self.kube.request(
            "GET", f"/apis/{names.PODGROUP_GROUP}/{names.PODGROUP_VERSION}/namespaces/{ns}/"
                   f"{names.PODGROUPS}", query=[("fieldSelector", f"metadata.name={name}")])
        items = (doc or {}).get("items") or [] if code == 200 else []
        if not items:
            return None, f"PodGroup {group} does not exist (HTTP {code})"
        n = (items[0].get("spec") or {}).get("minMember", 1)
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 100_000:
            return None, f"PodGroup {group}: spec.minMember {n!r}; allowed: 1..100000"
        return n, ""

    async def round(self) -> int:
        """Decide every allocated claim that waits on gpugov; returns how many were written.

        A gang (pods of one PodGroup) is decided together: nothing is admitted until claims
        of at least `minMember` of its pods wait (kube-scheduler holds each bound-to-be pod
        meanwhile, up to its 10-minute binding timeout), then all of them are admitted when
        they fit their queues together, or all refused."""
        claims = await self._list(CLAIMS)
        waiting = [c for c in claims if _ours(c)]
        classes = set(CLASSES.values()) | {SLICE_CLASS}
        unallocated = [c for c in claims if not (c.get("status") or {}).get("allocation")
                       and claim_demand(c, classes) is not None]
        if not waiting and not (self.reclaim and unallocated):
            return 0
        devices = device_index(await self._list(SLICES))
        namespaces = await self._list("/api/v1/namespaces")
        tenancy = Tenancy(await self._list(TENANTS),
                          {n["metadata"]["name"]: (n["metadata"].get("labels") or {})
                           for n in namespaces})
        ledger = Ledger(queues_of(await self._list(QUEUES)))
        todo = []
        admitted_pods: dict[str, set[str]] = {}
        for c in waiting:
            if verdict(c) == ADMITTED:  # counted first: what is admitted stays admitted
                owner = tenancy.of(c["metadata"]["namespace"])
                with contextlib.suppress(ChargeError):
                    ledger.admitted[c["metadata"]["uid"]] = (
                        owner.queue or "", claim_charge(c, devices))
                group = await self._group_of(c)
                if group:
                    admitted_pods.setdefault(group, set()).update(_pods(c))
            elif verdict(c) is None:
                todo.append(c)
        todo.sort(key=lambda c: (str(c["status"]["allocation"].get("allocationTimestamp")
                                     or ""), c["metadata"]["creationTimestamp"]))
        singles: list[dict[str, Any]] = []
        gangs: dict[str, list[dict[str, Any]]] = {}
        for c in todo:
            group = await self._group_of(c)
            if group and len(admitted_pods.get(group, ())) == 0:
                gangs.setdefault(group, []).append(c)
            else:  # no gang, or its gang already runs: a member joining it
                singles.append(c)
        written = 0
        for c in singles:
            try:
                why = self._decide(c, tenancy, ledger, devices)
            except Exception as e:  # noqa: BLE001 - one claim never stops the others
                why = f"gpugov could not value this claim: {type(e).__name__}: {e}"
            if await self._write(c, why):
                written += 1
        for group, members in sorted(gangs.items()):
            written += await self._gang(group, members, tenancy, ledger, devices)
        if self.reclaim and unallocated:
            await self._reclaim(claims, classes, tenancy, ledger)
        return written

    async def _reclaim(self, claims: list[dict[str, Any]], classes: set[str],
                       tenancy: Tenancy, ledger: Ledger) -> None:
        """Evict for pending DRA pods of queues under their guarantee (reclaim.py)."""
        by_name = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in claims}
        pods = await self._list("/api/v1/pods")
        waiters, holders = [], []
        holding = {uid for c in claims if verdict(c) == ADMITTED for uid in _pods(c)}
        for p in pods:
            meta, spec = p.get("metadata") or {}, p.get("spec") or {}
            ns, prio = meta.get("namespace", ""), spec.get("priority") or 0
            owner = tenancy.of(ns)
            if owner.queue is None or isinstance(prio, bool) or not isinstance(prio, int):
                continue
            if meta.get("uid") in holding and not meta.get("deletionTimestamp"):
                holders.append(Holder(ns, meta["name"], meta["uid"], owner.queue, prio,
                                      str(meta.get("creationTimestamp") or "")))
                continue
            if spec.get("nodeName") or not spec.get("resourceClaims") or \
                    not _unschedulable(p):
                continue
            demand, total = None, None
            for name in _claim_names(p):
                c = by_name.get((ns, name))
                if c is None or (c.get("status") or {}).get("allocation"):
                    continue
                demand = claim_demand(c, classes)
                if demand is not None:
                    total = demand if total is None else total + demand
            if total is not None:
                waiters.append(Waiter(ns, meta["name"], owner.queue, prio, total))
        for w, h in victims(waiters, holders, ledger):
            why = (f"preempted by gpugov for {w.namespace}/{w.name} (priority {w.priority}, "
                   f"queue {w.queue} under its guarantee): this pod's queue {h.queue} is over "
                   "its guarantee")
            code, doc = await self.kube.request(
                "POST", f"/api/v1/namespaces/{h.namespace}/pods/{h.name}/eviction",
                {"apiVersion": "policy/v1", "kind": "Eviction",
                 "metadata": {"name": h.name, "namespace": h.namespace}})
            if code not in (200, 201):
                log.info("reclaim: evicting %s/%s: HTTP %s: %s", h.namespace, h.name, code,
                         message(doc))
                continue
            self.evicted.append(f"{h.namespace}/{h.name}")
            log.info("reclaim: evicted %s/%s: %s", h.namespace, h.name, why)
            await self.kube.request("POST", f"/api/v1/namespaces/{h.namespace}/events", {
                "metadata": {"generateName": f"{h.name}.", "namespace": h.namespace},
                "involvedObject": {"kind": "Pod", "namespace": h.namespace, "name": h.name,
                                   "uid": h.uid, "apiVersion": "v1"},
                "reason": "Preempted", "message": why, "type": "Warning",
                "source": {"component": "gpugov-dra-governor"}})

    async def _gang(self, group: str, members: list[dict[str, Any]], tenancy: Tenancy,
                    ledger: Ledger, devices: dict[tuple[str, str], dict[str, Any]]) -> int:
        need, why = await self._min_member(group)
        pods = {p for c in members for p in _pods(c)}
        if need is not None and len(pods) < need:
            for c in members:  # undecided: kube-scheduler keeps the pods waiting
                self.decisions[c["metadata"]["uid"]] = (
                    f"gang {group}: claims of {len(pods)} of its minMember {need} pods "
                    "are allocated; waiting for the others")
            return 0
        if not why:
            taken: list[str] = []
            for c in members:
                try:
                    why = self._decide(c, tenancy, ledger, devices)
                except Exception as e:  # noqa: BLE001
                    why = f"gpugov could not value this claim: {type(e).__name__}: {e}"
                if why:
                    why = f"gang {group} ({len(pods)} pods) is refused as a whole: {why}"
                    for uid in taken:
                        ledger.admitted.pop(uid, None)
                    break
                taken.append(c["metadata"]["uid"])
        written = 0
        for c in members:
            if await self._write(c, why):
                written += 1
        return written

    @staticmethod
    def _decide(c: dict[str, Any], tenancy: Tenancy, ledger: Ledger,
                devices: dict[tuple[str, str], dict[str, Any]]) -> str:
        ns = c["metadata"]["namespace"]
        owner = tenancy.of(ns)
        if owner.queue is None:
            return (f"namespace {ns} is charged to no queue ({owner.why or 'no Tenant'}): "
                    "gpugov devices are given only to a Tenant's pods")
        delivered, device = claim_isolation(c, devices)
        need = MIN_ISOLATION[owner.trust]
        if delivered < need:
            return (f"namespace {ns}'s Tenant is {owner.trust}: its claims need {need} "
                    f"isolation and device {device} gives {delivered} (claim a whole GPU "
                    "or a MIG instance)")
        try:
            charge = claim_charge(c, devices)
        except ChargeError as e:
            return str(e)
        why = ledger.admit(c["metadata"]["uid"], owner.queue, charge)
        return f"{why} ({charge.text()})" if why else ""

    async def _write(self, c: dict[str, Any], why: str) -> bool:
        meta = c["metadata"]
        cond = {"type": REFUSED if why else ADMITTED, "status": "True",
                "reason": "OverQuota" if why and "limit" in why else
                ("Refused" if why else "Admitted"),
                "message": (why or "charged to its queue by gpugov")[:1000],
                "lastTransitionTime": _now()}
        status = dict(c.get("status") or {})
        have = [d for d in status.get("devices") or [] if d.get("driver") != DRIVER]
        for r in _ours(c):
            have.append({"driver": DRIVER, "pool": r["pool"], "device": r["device"],
                         **({"shareID": r["shareID"]} if r.get("shareID") else {}),
                         "conditions": [cond]})
        status["devices"] = have
        body = {**c, "status": status}
        code, doc = await self.kube.request(
            "PUT", f"/apis/resource.k8s.io/v1/namespaces/{meta['namespace']}/resourceclaims/"
                   f"{meta['name']}/status", body)
        if code != 200:
            if code != 409:
                self._error(f"claim {meta['namespace']}/{meta['name']}: HTTP {code}: "
                            f"{message(doc)}")
            log.info("claim %s/%s: status not written (HTTP %s: %s); next round",
                     meta["namespace"], meta["name"], code, message(doc))
            return False
        self.decisions[meta["uid"]] = why
        log.info("claim %s/%s: %s", meta["namespace"], meta["name"], why or "admitted")
        return True

    def _error(self, text: str) -> None:
        self.errors = [*self.errors[-99:], text]

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.round()
            except (TimeoutError, RuntimeError, OSError) as e:
                self._error(str(e))
                log.warning("governor: %s; retrying", e)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.interval)
