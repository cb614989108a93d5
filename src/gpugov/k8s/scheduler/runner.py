"""The scheduler process: list+watch the API into `SchedulerState`, run cycles, apply plans.

Cycles run when something changed (after a short batching pause, so a burst of pod
creations is decided in one cycle) and at least every `period` seconds (time alone moves
minRuntime and headGrace thresholds). Writes of one cycle are issued concurrently; the next
cycle starts when they are done. Watches restart after errors (a 410 relists), and a CRD
that is not installed yet is listed again every 10 s. Nothing here raises on bad objects:
`SchedulerState` turns them into pod conditions and counters.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from gpugov.k8s.power import contract as power_contract
from gpugov.k8s.power.writer import write_statuses
from gpugov.k8s.scheduler import dra_alloc, dra_claims, names
from gpugov.k8s.scheduler.apply import Applier
from gpugov.k8s.scheduler.kube import Kube, WatchExpired
from gpugov.k8s.scheduler.state import SchedulerState

log = logging.getLogger("gpugov.scheduler")

#: kind -> collection path (cluster-wide)
PATHS: dict[str, str] = {
    "node": "/api/v1/nodes",
    "queue": f"/apis/{names.GROUP}/{names.VERSION}/{names.QUEUES}",
    "tenant": f"/apis/{names.GROUP}/{names.VERSION}/{names.TENANTS}",
    "priorityclass": "/apis/scheduling.k8s.io/v1/priorityclasses",
    "prioritypolicy": f"/apis/{names.GROUP}/{names.VERSION}/{names.PRIORITY_POLICIES}",
    "podgroup": f"/apis/{names.PODGROUP_GROUP}/{names.PODGROUP_VERSION}/{names.PODGROUPS}",
    # Volcano's PodGroups form gangs the same way (absent CRD: retried quietly)
    "vcpodgroup": f"/apis/{names.VOLCANO_PODGROUP_GROUP}/{names.VOLCANO_PODGROUP_VERSION}/"
                  f"{names.PODGROUPS}",
    "namespace": "/api/v1/namespaces",  # labels: Tenants that select namespaces by label
    "powerdomain": power_contract.PATH,  # racks' budgets (absent CRD: retried quietly)
    # DRA claims of gpugov's driver are charged to their queues (dra_claims.py), valued from
    # gpugov's slices (an API server without resource.k8s.io/v1: retried quietly)
    "resourceclaim": dra_claims.CLAIMS_PATH,
    "resourceslice": dra_claims.SLICES_PATH,
    # DeviceClasses: gpugov's scheduler allocates claims of its own classes (dra_alloc.py)
    "deviceclass": dra_alloc.CLASSES_PATH,
    "pod": "/api/v1/pods",
}


def _key(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


class Runner:
    """Drives one `SchedulerState` against the API until `stop` is set."""

    def __init__(self, kube: Kube, state: SchedulerState, applier: Applier | None,
                 period: float = 1.0, batch_wait: float = 0.05) -> None:
        self.kube, self.state, self.applier = kube, state, applier
        self.period, self.batch_wait = period, batch_wait
        self.wake = asyncio.Event()
        self.synced: dict[str, bool] = dict.fromkeys(PATHS, False)
        self.seen: dict[str, set[str]] = {k: set() for k in PATHS}
        self.cycles = 0
        self.bound = 0
        self.on_cycle: Callable[[Any], None] | None = None  # test/bench hook

    # -- feeding the state --------------------------------------------------------------------
    def _apply(self, kind: str, etype: str, obj: dict[str, Any]) -> None:
        st = self.state
        try:
            if kind == "pod":
                if etype == "DELETED":
                    st.delete_pod(_key(obj))
                else:
                    st.set_pod(obj)
            elif kind == "node":
                name = (obj.get("metadata") or {}).get("name", "")
                if etype == "DELETED":
                    st.delete_node(name)
                else:
                    st.set_node(obj)
            elif etype == "DELETED":
                st.delete_object(kind, obj)
            else:
                st.set_object(kind, obj)
        except Exception:  # a bad object must never stop the scheduler
            st.errors[kind] += 1
            log.exception("ignoring a %s event on %s", kind, _key(obj))
        self.wake.set()

    def _relist(self, kind: str, items: list[dict[str, Any]]) -> None:
        keys = {_key(o) for o in items}
        for gone in self.seen[kind] - keys:
            ns, name = gone.split("/", 1)
            self._apply(kind, "DELETED", {"metadata": {"namespace": ns, "name": name}}
                        if ns else {"metadata": {"name": name}})
        for o in items:
            self._apply(kind, "ADDED", o)
        self.seen[kind] = keys

    async def sync(self, kind: str) -> str:
        items, rv = await self.kube.list_all(PATHS[kind])
        self._relist(kind, items)
        self.synced[kind] = True
        return rv

    async def watch_kind(self, kind: str, rv: str) -> None:
        while True:
            try:
                if not rv:
                    await asyncio.sleep(10.0)  # not installed (CRD) or list failed
                    rv = await self.sync(kind)
                    continue
                async for etype, obj in self.kube.watch(PATHS[kind], rv):
                    meta = obj.get("metadata") or {}
                    rv = meta.get("resourceVersion", rv)
                    if etype == "BOOKMARK":
                        continue
                    key = _key(obj)
                    if etype == "DELETED":
                        self.seen[kind].discard(key)
                    else:
                        self.seen[kind].add(key)
                    self._apply(kind, etype, obj)
            except asyncio.CancelledError:
                raise
            except WatchExpired:
                rv = await self._safe_sync(kind)
            except Exception as e:  # connection reset, apiserver restart, ...
                log.warning("watch %s: %s; listing again", kind, e)
                await asyncio.sleep(1.0)
                rv = await self._safe_sync(kind)

    async def _safe_sync(self, kind: str) -> str:
        try:
            return await self.sync(kind)
        except Exception as e:
            log.warning("list %s: %s", kind, e)
            return ""

    # -- the loop -------------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        versions = {}
        for kind in PATHS:  # nodes and config before pods: the first cycle sees everything
            versions[kind] = await self._safe_sync(kind)
        log.info("synced: %d nodes, %d pods, %d queues", len(self.state.nodes),
                 len(self.state.pods), len(self.state.queue_objs))
        watches = [asyncio.create_task(self.watch_kind(k, versions[k])) for k in PATHS]
        try:
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), self.period)
                if stop.is_set():
                    break
                self.wake.clear()
                await asyncio.sleep(self.batch_wait)
                await self.run_cycle()
        finally:
            for t in watches:
                t.cancel()
            await asyncio.gather(*watches, return_exceptions=True)

    async def run_cycle(self) -> None:
        t0 = time.perf_counter()
        try:
            plan = self.state.cycle(time.time())
        except Exception:
            log.exception("cycle failed; rebuilding from the API objects")
            self.state.errors["cycle"] += 1
            self.state.dirty = True
            return
        t1 = time.perf_counter()
        if (not plan.empty() or self.state.dra.releases) and self.applier is not None:
            await self.applier.apply(plan)  # (DRA claims to release: dra_alloc.py)
        if plan.power_status and self.applier is not None:
            await write_statuses(self.kube, self.state.power, plan.power_status)
        self.cycles += 1
        self.bound += len(plan.binds)
        if plan.binds or plan.evictions:
            log.info("cycle %d: %d considered, %d bound, %d evicted, %d conditions "
                     "(decide %.3f s, write %.3f s)", self.cycles, plan.considered,
                     len(plan.binds), len(plan.evictions), len(plan.conditions), t1 - t0,
                     time.perf_counter() - t1)
        if self.on_cycle is not None:
            self.on_cycle(plan)
