"""Scheduler-extender mode: kube-scheduler keeps scheduling, gpugov's engine places GPUs.

For clusters that keep kube-scheduler (HAMi's integration path): an HTTPS server with the
extender verbs `filter`, `prioritize` and `bind`. The payloads are kube-scheduler's
`k8s.io/kube-scheduler/extender/v1` structs, which have no JSON tags, so the keys are the Go
field names (`Pod`, `Nodes`, `NodeNames`, `FailedNodes`, `Host`, `Score`, `PodName`, ...).

Who may call it: only a client presenting a certificate signed by the configured CA
(kube-scheduler's extender `tlsConfig`: certFile/keyFile/caFile); a caller without one fails
the TLS handshake before any verb runs. Plain HTTP exists only behind `--insecure-http`, for
local debugging, and says so loudly.

What it binds: only what gpugov decided. The cluster state is built by the same
`SchedulerState` the scheduler uses (nodes, Queues, Tenants, PriorityClasses and every bound
pod's allocation record, watched), so each pod's queue and its quota are the scheduler's.
`filter` keeps the nodes where the pod fits and its queue admits it, and remembers (per pod
UID, bounded) which nodes it accepted; `prioritize` returns the policy's scores scaled to
0..10; `bind` refuses a pod whose `spec.schedulerName` is not the one this extender serves,
a pod it never filtered in this process, a node it did not accept, and a bind its queue's
limits no longer admit; otherwise it chooses the devices, writes the allocation record and
binds in one Binding (see `scheduler.apply`). Binds are serialised and counted in the state
at once, so two pods never get the same device and a queue never goes over its cap.
Preemption is not done in this mode (kube-scheduler orders the pods): use
`gpugov scheduler` for it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from aiohttp import web

from gpugov.control.resources import demand_estimate
from gpugov.control.workload import Job
from gpugov.k8s.annotations import encode_allocation
from gpugov.k8s.scheduler import names
from gpugov.k8s.scheduler.apply import binding_body
from gpugov.k8s.scheduler.kube import Kube, message
from gpugov.k8s.scheduler.runner import PATHS, Runner
from gpugov.k8s.scheduler.state import Bind, SchedulerState
from gpugov.k8s.scheduler.translate import PodInfo, pod_info
from gpugov.model.cluster import ClusterState
from gpugov.model.request import Allocation, PodRequest
from gpugov.placement.engine import Placer, allocation_for

log = logging.getLogger("gpugov.extender")

#: kube-scheduler's MaxExtenderPriority
MAX_SCORE = 10
#: the API kinds the extender watches: the scheduler's inputs (Runner.PATHS) but PodGroups
#: (no gangs in this mode); namespaces' labels resolve Tenants that select by label
WATCHED = tuple(k for k in PATHS if k != "podgroup")
#: pods whose filter answer is remembered for `bind` (oldest forgotten first)
MAX_DECISIONS = 20_000
#: how long a filter answer stays valid for `bind`, seconds
DECISION_TTL = 600.0


@dataclass(frozen=True, slots=True)
class Admitted:
    """A pod gpugov would place: its info, its job (queue, class, demand) and request."""

    info: PodInfo
    job: Job

    @property
    def req(self) -> PodRequest:
        return self.job.request


class ExtenderState:
    """The scheduler's view of the API (`SchedulerState`: nodes, Queues, Tenants, bound
    pods' records, watched) -> its control plane's `ClusterState`, `Placer` and quota
    ledger, rebuilt when an event arrived since the last request."""

    def __init__(self, policy: str = "gpugov",
                 scheduler_name: str = names.SCHEDULER_NAME) -> None:
        self.view = SchedulerState(policy=policy, scheduler_name=scheduler_name)
        self._version = -1
        self.state: ClusterState | None = None
        self.placer: Placer | None = None
        self.index: dict[str, int] = {}
        self.errors = 0

    @property
    def scheduler_name(self) -> str:
        return self.view.scheduler_name

    def refresh(self, now: float | None = None) -> None:
        v = self.view
        if self._version == v.version and not v.dirty:
            return  # nothing arrived since the last rebuild (with or without a config)
        before = sum(v.errors.values())
        v.rebuild(time.time() if now is None else now)
        self.errors += sum(v.errors.values()) - before
        self.index = dict(v.node_index)
        cp = v.cp
        self.state, self.placer = (cp.state, cp.placer) if cp is not None else (None, None)
        self._version = v.version

    def admit(self, pod: dict[str, Any]) -> tuple[Admitted | None, str]:
        """The pod as gpugov would schedule it, or (None, why not): it must be this
        extender's scheduler's, valid, in a leaf queue, and its queue must admit it now."""
        self.refresh()
        v = self.view
        try:
            info = pod_info(pod, v.tenants)
        except Exception as e:  # one unreadable pod fails alone, the extender goes on
            log.warning("unreadable pod: %s", e)
            return None, f"unreadable pod object: {type(e).__name__}: {e}"[:500]
        if info.scheduler != v.scheduler_name:
            return None, (f"pod's schedulerName {info.scheduler!r} is not {v.scheduler_name!r}, "
                          "the scheduler this extender serves")
        if v.cp is None:
            code, why = v._why_no_engine()  # the scheduler's own words: the real cause
            return None, f"{code}: {why}"
        if info.error:
            return None, info.error
        if info.node_affinity:
            return None, info.node_affinity
        try:
            v.pod_request(info)
        except ValueError as e:
            return None, str(e)
        leaf, code, detail = v._leaf(info)
        if leaf is None:
            return None, f"{code}: {detail}"
        cp = v.cp
        job = v._new_job(f"extender:{info.key}", info, 1)
        assert job is not None
        job.demand = job.charged = demand_estimate(cp.tree.resources, job.request, 1,
                                                   cp.card_mib)
        verdict = cp.ledger.check(leaf, job.demand, job.pinned)
        if verdict is not None:
            return None, f"quota: {verdict.describe()}"
        return Admitted(info, job), ""

    def request_of(self, pod: dict[str, Any]) -> tuple[PodRequest | None, str]:
        """The placement request of a pod object, or (None, why)."""
        adm, why = self.admit(pod)
        return (adm.req, "") if adm is not None else (None, why)

    def charge_problem(self, adm: Admitted, alloc: Allocation) -> str:
        """Why charging `alloc` to the pod's queue breaks a quota rule ("" = it does not)."""
        cp = self.view.cp
        assert cp is not None
        _, verdict = cp.check_charge(adm.job, [alloc])
        return f"quota: {verdict.describe()}" if verdict is not None else ""

    def filter(self, req: PodRequest, node_names: list[str]) -> tuple[list[str], dict[str, str]]:
        self.refresh()
        if self.state is None:
            return [], dict.fromkeys(node_names, "gpugov: no queue config or no nodes")
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
        if self.state is None or self.placer is None:
            return [{"Host": n, "Score": 0} for n in node_names]
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
        if self.state is None or self.placer is None:
            return None
        i = self.index.get(node)
        if i is None or not self.state.feasible(req)[i]:
            return None
        devices = self.placer.policy.choose_devices(self.state, req, i)
        return allocation_for(self.state, req, i, devices)


class Decisions:
    """Which nodes `filter` accepted for which pod (by UID), bounded in size and age: `bind`
    binds only what was decided here, in this process."""

    def __init__(self, limit: int = MAX_DECISIONS, ttl: float = DECISION_TTL) -> None:
        self.limit, self.ttl = limit, ttl
        self._by_uid: OrderedDict[str, tuple[str, frozenset[str], float]] = OrderedDict()

    def remember(self, uid: str, key: str, nodes: list[str], now: float) -> None:
        if not uid:
            return
        self._by_uid.pop(uid, None)
        self._by_uid[uid] = (key, frozenset(nodes), now)
        while len(self._by_uid) > self.limit:
            self._by_uid.popitem(last=False)

    def problem(self, uid: str, key: str, node: str, now: float) -> str:
        """Why binding pod `uid` (`key`) to `node` was not decided here ("" = it was)."""
        got = self._by_uid.get(uid) if uid else None
        if got is None or got[0] != key or now - got[2] > self.ttl:
            return (f"pod {key} was not filtered by this extender (or too long ago): bind only "
                    "follows this extender's own filter answer")
        if node not in got[1]:
            return f"node {node} was not accepted for pod {key} by this extender's filter"
        return ""

    def forget(self, uid: str) -> None:
        self._by_uid.pop(uid, None)

    def __len__(self) -> int:
        return len(self._by_uid)


class Extender:
    """The HTTP handlers and the watches that keep `ExtenderState` current."""

    def __init__(self, kube: Kube, policy: str = "gpugov",
                 scheduler_name: str = names.SCHEDULER_NAME) -> None:
        self.kube = kube
        self.st = ExtenderState(policy, scheduler_name)
        self.bind_lock = asyncio.Lock()
        self.runner = Runner(kube, self.st.view, None)
        self.decisions = Decisions()
        self.tasks: list[asyncio.Task] = []
        self.requests: dict[str, int] = {"filter": 0, "prioritize": 0, "bind": 0, "bad": 0,
                                         "bind_refused": 0}

    async def start(self) -> None:
        for kind in WATCHED:  # nodes and config before pods
            rv = await self.runner._safe_sync(kind)
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
        except (ValueError, RecursionError) as e:
            return self._bad(e)

    def _bad(self, e: Exception) -> web.Response:
        self.requests["bad"] += 1
        return web.json_response({"Error": f"gpugov extender: bad request body: {e}"},
                                 status=400)

    async def filter(self, request: web.Request) -> web.Response:
        self.requests["filter"] += 1
        args = await self._args(request)
        if isinstance(args, web.Response):
            return args
        try:
            nodes_list, items, node_names = _nodes_of(args)
            pod = _pod_of(args)
        except ValueError as e:
            return self._bad(e)
        adm, why = self.st.admit(pod)
        if adm is None:
            failed = dict.fromkeys(node_names, f"gpugov: {why}")
            return web.json_response(_filter_result(nodes_list, items, [], {}, failed))
        keep, failed = self.st.filter(adm.req, list(node_names))
        self.decisions.remember(adm.info.uid, adm.info.key, keep, time.monotonic())
        return web.json_response(_filter_result(nodes_list, items, keep, failed, {}))

    async def prioritize(self, request: web.Request) -> web.Response:
        self.requests["prioritize"] += 1
        args = await self._args(request)
        if isinstance(args, web.Response):
            return args
        try:
            _, _, node_names = _nodes_of(args)
            pod = _pod_of(args)
        except ValueError as e:
            return self._bad(e)
        req, _ = self.st.request_of(pod)
        if req is None:
            return web.json_response([{"Host": n, "Score": 0} for n in node_names])
        return web.json_response(self.st.prioritize(req, list(node_names)))

    def _refuse(self, why: str) -> web.Response:
        self.requests["bind_refused"] += 1
        log.warning("bind refused: %s", why)
        return web.json_response({"Error": f"gpugov: {why}"})

    async def bind(self, request: web.Request) -> web.Response:
        self.requests["bind"] += 1
        args = await self._args(request)
        if isinstance(args, web.Response):
            return args
        ns, name = str(args.get("PodNamespace") or ""), str(args.get("PodName") or "")
        node, uid = str(args.get("Node") or ""), str(args.get("PodUID") or "")
        if not (ns and name and node and uid):
            return self._refuse("bind needs PodNamespace, PodName, PodUID and Node")
        status, pod = await self.kube.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
        if status != 200:
            return self._refuse(f"cannot read pod {ns}/{name}: HTTP {status}: {message(pod)}")
        async with self.bind_lock:
            adm, why = self.st.admit(pod)
            if adm is None:
                return self._refuse(f"pod {ns}/{name}: {why}")
            info = adm.info
            if info.uid != uid:
                return self._refuse(f"pod {ns}/{name} has UID {info.uid}, not {uid}")
            why = self.decisions.problem(uid, info.key, node, time.monotonic())
            if why:
                return self._refuse(why)
            alloc = self.st.choose(adm.req, node)
            if alloc is None:
                return self._refuse(f"pod {ns}/{name} no longer fits on node {node}")
            why = self.st.charge_problem(adm, alloc)
            if why:
                return self._refuse(f"pod {ns}/{name}: {why}")
            record = self.st.view.allocation_record_on(info, alloc, node, self.st.state)
            b = Bind(info.key, ns, name, uid, node, record)
            status, doc = await self.kube.request(
                "POST", f"/api/v1/namespaces/{ns}/pods/{name}/binding", binding_body(b))
            if not 200 <= status < 300:
                return self._refuse(f"binding {ns}/{name} to {node}: HTTP {status}: "
                                    f"{message(doc)}")
            self.decisions.forget(uid)
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


@dataclass(frozen=True)
class TlsFiles:
    """The extender's serving certificate and key, and the CA its callers' client
    certificates must be signed by (PEM files)."""

    cert: Path
    key: Path
    client_ca: Path

    def context(self) -> ssl.SSLContext:
        """TLS 1.2+, a client certificate required and verified against `client_ca`."""
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(self.client_ca))
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(str(self.cert), str(self.key))
        ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx


INSECURE_WARNING = ("gpugov extender: --insecure-http: serving filter/prioritize/bind over "
                    "PLAIN HTTP WITHOUT AUTHENTICATION; anyone who can reach %s:%d can ask it "
                    "to bind pods. For local debugging only, never in a cluster.")


async def serve(kubeconfig: Path | str, host: str, port: int, policy: str = "gpugov",
                ready: asyncio.Event | None = None, stop: asyncio.Event | None = None,
                tls: TlsFiles | None = None, insecure_http: bool = False,
                scheduler_name: str = names.SCHEDULER_NAME,
                health: tuple[str, int] | None = None) -> None:
    """Run the extender until `stop` is set (or forever). `tls` is required unless
    `insecure_http`; `health`: an extra plain-HTTP listener serving only /healthz (for
    kubelet probes, which present no client certificate)."""
    if tls is None and not insecure_http:
        raise ValueError("the extender needs TLS files (serving cert, key, client CA) or "
                         "the explicit insecure_http flag")
    ssl_ctx = tls.context() if tls is not None else None
    kube = await Kube.from_kubeconfig(kubeconfig)
    ext = Extender(kube, policy, scheduler_name)
    runners: list[web.AppRunner] = []
    try:
        await ext.start()
        runner = web.AppRunner(ext.app(), access_log=None)
        runners.append(runner)
        await runner.setup()
        await web.TCPSite(runner, host, port, ssl_context=ssl_ctx).start()
        if ssl_ctx is None:
            for _ in range(3):
                log.warning(INSECURE_WARNING, host, port)
        else:
            log.info("gpugov extender listening on https://%s:%d for scheduler %r (client "
                     "certificates signed by %s required)", host, port, scheduler_name,
                     tls.client_ca if tls else "")
        if health is not None:
            happ = web.Application()
            happ.router.add_get("/healthz", ext.healthz)
            hrunner = web.AppRunner(happ, access_log=None)
            runners.append(hrunner)
            await hrunner.setup()
            await web.TCPSite(hrunner, *health).start()
        if ready is not None:
            ready.set()
        await (stop or asyncio.Event()).wait()
    finally:
        for r in runners:
            await r.cleanup()
        await ext.stop()
        await kube.close()


def _nodes_of(args: dict[str, Any]) -> tuple[Any, list[dict[str, Any]], list[str]]:
    """The candidate nodes of a filter/prioritize call: `Nodes` (a NodeList, when the
    extender is not node-cache capable) or `NodeNames` (when it is). ValueError names what
    is malformed."""
    nodes_list = args.get("Nodes")
    if nodes_list is not None and not isinstance(nodes_list, dict):
        raise ValueError("Nodes must be a NodeList object")
    items = (nodes_list or {}).get("items") or []
    if not isinstance(items, list) or not all(isinstance(n, dict) for n in items):
        raise ValueError("Nodes.items must be a list of Node objects")
    names_of_items = []
    for n in items:
        meta = n.get("metadata")
        name = meta.get("name", "") if isinstance(meta, dict) else ""
        names_of_items.append(name if isinstance(name, str) else "")
    node_names = args.get("NodeNames") or names_of_items
    if not isinstance(node_names, list) or not all(isinstance(n, str) for n in node_names):
        raise ValueError("NodeNames must be a list of node names")
    return nodes_list, items, node_names


def _pod_of(args: dict[str, Any]) -> dict[str, Any]:
    pod = args.get("Pod")
    if pod is not None and not isinstance(pod, dict):
        raise ValueError("Pod must be a Pod object")
    return pod or {}
