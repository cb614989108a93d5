"""Scheduler-extender mode: kube-scheduler keeps scheduling, gpugov's engine places GPUs.

For clusters that keep kube-scheduler (HAMi's integration path): an HTTP server with the
extender verbs `filter`, `prioritize` and `bind`. The payloads are kube-scheduler's
`k8s.io/kube-scheduler/extender/v1` structs, which have no JSON tags, so the keys are the Go
field names (`Pod`, `Nodes`, `NodeNames`, `FailedNodes`, `Host`, `Score`, `PodName`, ...).

Placement is the engine's: the cluster state is built from the nodes and every bound pod's
`gpugov.io/allocation` record (watched), `filter` keeps the nodes where the pod's request
fits (`ClusterState.feasible`), `prioritize` returns the policy's scores scaled to 0..10,
and `bind` chooses the devices on the node kube-scheduler picked, writes the allocation
record and binds in one Binding (see `scheduler.apply`). Binds are serialised, and a bind
is counted in the state at once, so two pods never get the same device. Queues, quotas and
preemption are not applied in this mode (kube-scheduler orders the pods): use
`gpugov scheduler` for those.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
from aiohttp import web

from gpugov.control.workload import placement_request
from gpugov.k8s.annotations import encode_allocation
from gpugov.k8s.scheduler.apply import binding_body
from gpugov.k8s.scheduler.held import close_nodes, recorded_allocation
from gpugov.k8s.scheduler.kube import Kube, message
from gpugov.k8s.scheduler.runner import Runner
from gpugov.k8s.scheduler.state import Bind, SchedulerState
from gpugov.k8s.scheduler.translate import pod_info
from gpugov.model.cluster import ClusterState
from gpugov.model.request import Allocation, PodRequest
from gpugov.placement.base import PolicyContext
from gpugov.placement.engine import Placer, allocation_for
from gpugov.placement.fragmentation import FragmentationModel, TypicalPods
from gpugov.placement.registry import get_policy

log = logging.getLogger("gpugov.extender")

#: kube-scheduler's MaxExtenderPriority
MAX_SCORE = 10


class ExtenderState:
    """Nodes and recorded allocations (watched) -> a `ClusterState` and `Placer`, rebuilt
    when a node or pod event arrived since the last request."""

    def __init__(self, policy: str = "gpugov") -> None:
        self.view = SchedulerState(policy=policy)
        self.policy_cls = get_policy(policy)
        self._version = -1
        self.state: ClusterState | None = None
        self.placer: Placer | None = None
        self.index: dict[str, int] = {}
        self.errors = 0

    def refresh(self) -> None:
        v = self.view
        if self._version == v.version and self.state is not None:
            return
        infos = [v.nodes[n] for n in sorted(v.nodes)]
        self.index = {n.name: i for i, n in enumerate(infos)}
        v.node_index = self.index
        v.card_mib = max((n.card_memory_mib for n in infos), default=0)
        v.taints = any(n.spec.taints for n in infos)
        state = ClusterState([n.spec for n in infos])
        for key, info in sorted(v.pods.items()):
            record = info.allocation or v.inflight.get(key)
            if info.done or record is None or record.node not in self.index:
                continue
            try:
                req = placement_request(v.pod_request(info), info.trust)
                alloc = recorded_allocation(state, req, self.index[record.node], record)
                state.allocate(req, alloc)
            except ValueError:
                self.errors += 1
                log.warning("pod %s: recorded allocation conflicts; not counted", key)
        for problem in close_nodes(state, infos):
            self.errors += 1
            log.warning("%s", problem)
        ctx = PolicyContext(FragmentationModel(TypicalPods.from_requests([]), state),
                            np.random.default_rng(0))
        self.state, self.placer = state, Placer(state, self.policy_cls(ctx))
        self._version = v.version

    def request_of(self, pod: dict[str, Any]) -> tuple[PodRequest | None, str]:
        """The placement request of a pod object, or (None, why)."""
        info = pod_info(pod, self.view.tenants)
        if info.error:
            return None, info.error
        if info.node_affinity:
            return None, info.node_affinity
        try:
            return placement_request(self.view.pod_request(info), info.trust), ""
        except ValueError as e:
            return None, str(e)

    def filter(self, req: PodRequest, node_names: list[str]) -> tuple[list[str], dict[str, str]]:
        self.refresh()
        assert self.state is not None
        ok = self.state.feasible(req)
        keep, failed = [], {}
        for name in node_names:
            i = self.index.get(name)
            if i is None:
                failed[name] = "gpugov: node unknown to gpugov"
            elif not ok[i]:
                failed[name] = f"gpugov: {self.why_not(req, i)}"
            else:
                keep.append(name)
        return keep, failed

    def why_not(self, req: PodRequest, i: int) -> str:
        """Why `req` does not fit node `i`, naming the first constraint that fails there."""
        st = self.state
        assert st is not None
        if st.cpu_free[i] < 0:
            return "node takes no new pods (not Ready, cordoned, or an unreadable taint)"
        if req.gpu_milli > 0 and not st.model_mask(req.models)[i]:
            return f"gpu-model: the node's GPU is not one of {', '.join(req.models)}"
        if req.node_selector and not st.selector_mask(req)[i]:
            return f"node-selector: the node's labels miss {dict(req.node_selector)}"
        if st.has_taints and not st.taint_mask(req)[i]:
            return "taint: the pod does not tolerate the node's taints"
        if req.gpu_count and st.device_fits(req, np.array([i]))[0].sum() < req.gpu_count:
            return ("gpu: no device of the node can take it (mode, isolation, tenant, MIG "
                    "slice, replicas, compute, GPU memory or power)")
        return "cpu or memory: not enough free on the node"

    def prioritize(self, req: PodRequest, node_names: list[str]) -> list[dict[str, Any]]:
        self.refresh()
        assert self.state is not None and self.placer is not None
        idx = [self.index[n] for n in node_names if n in self.index]
        ok = self.state.feasible(req)
        feasible = np.array([i for i in idx if ok[i]], dtype=np.int64)
        scores: dict[int, int] = {}
        if len(feasible):
            s = self.placer.policy.normalize(self.placer.scores(req, feasible))
            scores = {int(i): int(v) * MAX_SCORE // 100 for i, v in zip(feasible, s, strict=True)}
        return [{"Host": n, "Score": scores.get(self.index.get(n, -1), 0)} for n in node_names]

    def choose(self, req: PodRequest, node: str) -> Allocation | None:
        """Devices for `req` on `node` (None if it does not fit there any more)."""
        self.refresh()
        assert self.state is not None and self.placer is not None
        i = self.index.get(node)
        if i is None or not self.state.feasible(req)[i]:
            return None
        devices = self.placer.policy.choose_devices(self.state, req, i)
        return allocation_for(self.state, req, i, devices)


class Extender:
    """The HTTP handlers and the watches that keep `ExtenderState` current."""

    def __init__(self, kube: Kube, policy: str = "gpugov") -> None:
        self.kube = kube
        self.st = ExtenderState(policy)
        self.bind_lock = asyncio.Lock()
        self.runner = Runner(kube, self.st.view, None)
        self.tasks: list[asyncio.Task] = []
        self.requests: dict[str, int] = {"filter": 0, "prioritize": 0, "bind": 0, "bad": 0}

    async def start(self) -> None:
        for kind in ("node", "pod", "tenant"):
            rv = await self.runner.sync(kind)
            self.tasks.append(asyncio.create_task(self.runner.watch_kind(kind, rv)))

    async def stop(self) -> None:
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_post("/filter", self.filter)
        app.router.add_post("/prioritize", self.prioritize)
        app.router.add_post("/bind", self.bind)
        app.router.add_get("/healthz", self.healthz)
        return app

    async def healthz(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _args(self, request: web.Request) -> dict[str, Any] | web.Response:
        try:
            args = json.loads(await request.read())
            if not isinstance(args, dict):
                raise ValueError(f"expected a JSON object, got {type(args).__name__}")
            return args
        except ValueError as e:
            self.requests["bad"] += 1
            return web.json_response({"Error": f"gpugov extender: bad request body: {e}"},
                                     status=400)

    async def filter(self, request: web.Request) -> web.Response:
        self.requests["filter"] += 1
        args = await self._args(request)
        if isinstance(args, web.Response):
            return args
        nodes_list, items, node_names = _nodes_of(args)
        req, why = self.st.request_of(args.get("Pod") or {})
        if req is None:
            failed = dict.fromkeys(node_names, f"gpugov: {why}")
            return web.json_response(_filter_result(nodes_list, items, [], {}, failed))
        keep, failed = self.st.filter(req, list(node_names))
        return web.json_response(_filter_result(nodes_list, items, keep, failed, {}))

    async def prioritize(self, request: web.Request) -> web.Response:
        self.requests["prioritize"] += 1
        args = await self._args(request)
        if isinstance(args, web.Response):
            return args
        nodes_list, items, node_names = _nodes_of(args)
        req, _ = self.st.request_of(args.get("Pod") or {})
        if req is None:
            return web.json_response([{"Host": n, "Score": 0} for n in node_names])
        return web.json_response(self.st.prioritize(req, list(node_names)))

    async def bind(self, request: web.Request) -> web.Response:
        self.requests["bind"] += 1
        args = await self._args(request)
        if isinstance(args, web.Response):
            return args
        ns, name = args.get("PodNamespace", ""), args.get("PodName", "")
        node, uid = args.get("Node", ""), args.get("PodUID", "")
        status, pod = await self.kube.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
        if status != 200:
            return web.json_response({"Error": f"gpugov: cannot read pod {ns}/{name}: "
                                               f"HTTP {status}: {message(pod)}"})
        async with self.bind_lock:
            info = pod_info(pod, self.st.view.tenants)
            req, why = self.st.request_of(pod)
            if req is None:
                return web.json_response({"Error": f"gpugov: {why}"})
            alloc = self.st.choose(req, node)
            if alloc is None:
                return web.json_response({"Error": f"gpugov: pod {ns}/{name} no longer fits "
                                                   f"on node {node}"})
            record = self.st.view.allocation_record_on(info, alloc, node, self.st.state)
            b = Bind(info.key, ns, name, uid or info.uid, node, record)
            status, doc = await self.kube.request(
                "POST", f"/api/v1/namespaces/{ns}/pods/{name}/binding", binding_body(b))
            if not 200 <= status < 300:
                return web.json_response({"Error": f"gpugov: binding {ns}/{name} to {node}: "
                                                   f"HTTP {status}: {message(doc)}"})
            self.st.view.inflight[info.key] = record
            self.st.view.pods[info.key] = info
            self.st.view.version += 1
        log.info("bound %s to %s: %s", info.key, node, encode_allocation(record))
        return web.json_response({"Error": ""})


def _filter_result(nodes_list: Any, items: list[dict[str, Any]], keep: list[str],
                   failed: dict[str, str], unresolvable: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {"FailedNodes": failed, "FailedAndUnresolvableNodes": unresolvable,
                           "Error": ""}
    if isinstance(nodes_list, dict):
        wanted = set(keep)
        out["Nodes"] = {"metadata": {}, "items": [
            n for n in items if (n.get("metadata") or {}).get("name") in wanted]}
    else:
        out["NodeNames"] = keep
    return out


async def serve(kubeconfig: Path | str, host: str, port: int, policy: str = "gpugov",
                ready: asyncio.Event | None = None, stop: asyncio.Event | None = None) -> None:
    """Run the extender until `stop` is set (or forever)."""
    kube = await Kube.from_kubeconfig(kubeconfig)
    ext = Extender(kube, policy)
    runner = None
    try:
        await ext.start()
        runner = web.AppRunner(ext.app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        await site.start()
        log.info("gpugov extender listening on http://%s:%d (since %.0f)", host, port,
                 time.time())
        if ready is not None:
            ready.set()
        await (stop or asyncio.Event()).wait()
    finally:
        if runner is not None:
            await runner.cleanup()
        await ext.stop()
        await kube.close()


def _nodes_of(args: dict[str, Any]) -> tuple[Any, list[dict[str, Any]], list[str]]:
    """The candidate nodes of a filter/prioritize call: `Nodes` (a NodeList, when the
    extender is not node-cache capable) or `NodeNames` (when it is)."""
    nodes_list = args.get("Nodes")
    items = (nodes_list or {}).get("items") or [] if isinstance(nodes_list, dict) else []
    node_names = args.get("NodeNames") or [
        (n.get("metadata") or {}).get("name", "") for n in items]
    return nodes_list, items, node_names
