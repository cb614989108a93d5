"""`gpugov reconcile`: read the cluster and Prometheus, join, serve `/metrics`, repeat.

Never exits on bad input: a source that cannot be read is logged, counted in
`gpugov_reconciler_errors_total{reason}` and the cycle keeps what it could read (a cycle
without Prometheus still exports the declared and allocated views; used stays unknown).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from gpugov.observe.cluster import (
    ClusterError,
    Tenancy,
    api_client,
    read_cluster,
    read_power_domains,
    read_queues,
    read_tenancy,
)
from gpugov.observe.metrics import ReconcilerMetrics
from gpugov.observe.power import PowerMetrics
from gpugov.observe.promapi import Prometheus, PrometheusError
from gpugov.observe.usage import read_used
from gpugov.observe.views import (
    DEFAULT_IDLE_THRESHOLD,
    NodeRecord,
    PodRecord,
    Reconciliation,
    node_record,
    pod_record,
    reconcile,
)

log = logging.getLogger("gpugov.reconcile")
ClusterSource = Callable[[], Awaitable[tuple[list[dict[str, Any]], list[dict[str, Any]]]]]


@dataclass
class Options:
    kubeconfig: Path | None
    prometheus: str
    host: str
    port: int
    interval: float = 15.0
    window: str = "2m"
    idle_threshold: float = DEFAULT_IDLE_THRESHOLD
    queues: Path | None = None  # control-plane config with the queue tree
    max_pods: int = 5000


def records(pods: list[dict[str, Any]], nodes: list[dict[str, Any]],
            owners: Callable[[str], tuple[str, str] | None] | None = None
            ) -> tuple[list[PodRecord], list[NodeRecord], list[str]]:
    """Pod and node records from API JSON, plus node problems (pure). `owners(namespace)`
    gives the (tenant, queue) each pod is charged to (`cluster.Tenancy.owner`)."""
    out = [r for r in (pod_record(p, owners(_namespace(p)) if owners else None)
                       for p in pods) if r is not None]
    node_recs, problems = [], []
    for n in nodes:
        rec, probs = node_record(n)
        node_recs.append(rec)
        problems += probs
    return out, node_recs, problems


def _namespace(pod: dict[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("namespace") or "")


class Reconciler:
    """One cycle at a time; `metrics` is what `/metrics` serves."""

    def __init__(self, opts: Options, tree: Any | None = None,
                 queue_source: Callable[[], Awaitable[list[dict[str, Any]] | None]] | None = None
                 ) -> None:
        """`tree`: quotas from a config file; else `queue_source` gives Queue objects."""
        self.opts, self.tree, self.queue_source = opts, tree, queue_source
        self._queue_tree_last: Any | None = None
        self.metrics = ReconcilerMetrics(opts.max_pods)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.metrics)
        #: per-rack budget/admitted/measured and per-pod GPU power (observe/power.py)
        self.power = PowerMetrics()
        self.registry.register(self.power)
        #: the PowerDomain objects (None: no source, or the CRD is not installed)
        self.power_source: Callable[[], Awaitable[list[dict[str, Any]] | None]] | None = None
        self._domains: list[dict[str, Any]] = []
        self._said: set[str] = set()
        self._last_cycle: float | None = None
        self._cluster: tuple[list[dict[str, Any]], list[dict[str, Any]]] | None = None
        #: Tenants decide whom a pod is charged to (None: the webhook's annotations)
        self.tenancy_source: Callable[[], Awaitable[Tenancy | None]] | None = None
        self._tenancy: Tenancy | None = None

    def _say(self, message: str) -> None:
        if message not in self._said:  # once per distinct problem, not once per cycle
            self._said.add(message)
            log.warning("%s", message)

    async def cycle(self, source: ClusterSource, prom: Prometheus) -> Reconciliation:
        """One reconcile: `source()` gives the API's pods and nodes (`read_cluster`)."""
        now = time.monotonic()
        try:
            self._cluster = await source()
        except ClusterError as e:
            self.metrics.error("kubernetes-unreachable")
            self._say(f"{e}; keeping the last cluster view")
        pods, nodes = self._cluster or ([], [])
        owners = None
        if self.tenancy_source is not None:
            try:
                self._tenancy = await self.tenancy_source()
            except ClusterError as e:
                self.metrics.error("kubernetes-unreachable")
                self._say(f"{e}; keeping the last Tenants")
            owners = self._tenancy.owner if self._tenancy is not None else None
        pod_recs, node_recs, node_problems = records(pods, nodes, owners)
        tree = self.tree
        if tree is None and self.queue_source is not None:
            tree = await self._queue_tree()
        refused, devices = None, None
        try:
            used = await read_used(prom, self.opts.window)
            uses, agents, refused = used.uses, used.nodes_with_agent, used.refusals
            devices = used.devices
            self.metrics.claims = used.claims
        except PrometheusError as e:
            self.metrics.error("prometheus-unreachable")
            self._say(f"{e}; the used view is unknown until it answers")
            self.metrics.claims = {}  # unknown, not zero
            uses, agents = [], set()  # declared and allocated are still exported
        rec = reconcile(pod_recs, node_recs, uses, agents, tree, self.opts.idle_threshold,
                        devices)
        if refused is None:  # no measurement: unknown, not "every node lacks the agent"
            rec.nodes_without_agent = []
            rec.problems = [p for p in rec.problems if p[0] != "node-without-agent"]
        rec.problems += [("node-inventory", p) for p in node_problems]
        if self.power_source is not None:
            try:
                self._domains = await self.power_source() or []
            except ClusterError as e:
                self.metrics.error("kubernetes-unreachable")
                self._say(f"{e}; keeping the last PowerDomains")
        rec.problems += [("node-power", p) for p in self.power.update(self._domains, nodes,
                                                                         pod_recs)]
        for _, message in rec.problems:
            self._say(message)
        dt = 0.0 if self._last_cycle is None else now - self._last_cycle
        self._last_cycle = now
        self.metrics.update(rec, dt, refused)
        return rec

    async def _queue_tree(self) -> Any | None:
        """The tree from the Queue objects; the last good one when they cannot be used."""
        assert self.queue_source is not None
        try:
            objs = await self.queue_source()
        except ClusterError as e:
            self.metrics.error("kubernetes-unreachable")
            self._say(f"{e}; keeping the last queue quotas")
            return self._queue_tree_last
        if not objs:
            return None  # no Queue CRD or no Queue: queues from pod annotations only
        tree, problems = tree_from_queues(objs)
        for message in problems:
            self._say(message)
        if problems:
            self.metrics.error("queue-objects-invalid")
        if tree is not None:
            self._queue_tree_last = tree
        return self._queue_tree_last

    async def serve(self, stop: asyncio.Event, source: ClusterSource | None = None,
                    started: asyncio.Event | None = None) -> None:
        """Serve /metrics and reconcile every interval until `stop` is set.

        `source` defaults to the Kubernetes API of `opts.kubeconfig`.
        """
        app = web.Application()

        async def metrics(_: web.Request) -> web.Response:
            return web.Response(body=generate_latest(self.registry),
                                headers={"Content-Type": CONTENT_TYPE_LATEST})

        async def healthz(_: web.Request) -> web.Response:
            return web.Response(text="ok\n")

        app.router.add_get("/metrics", metrics)
        app.router.add_get("/healthz", healthz)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, self.opts.host, self.opts.port)
        await site.start()
        log.info("serving /metrics on %s:%s", self.opts.host, self.opts.port)
        if started is not None:
            started.set()
        api = None
        if source is None:
            try:
                api = await api_client(self.opts.kubeconfig)
            except BaseException:
                await runner.cleanup()
                raise

            async def source() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
                return await read_cluster(api)

            async def tenancy() -> Tenancy | None:
                return await read_tenancy(api)
            if self.tenancy_source is None:
                self.tenancy_source = tenancy
            if self.tree is None and self.queue_source is None:
                async def queues() -> list[dict[str, Any]] | None:
                    return await read_queues(api)
                self.queue_source = queues
            if self.power_source is None:
                async def domains() -> list[dict[str, Any]] | None:
                    return await read_power_domains(api)
                self.power_source = domains
        try:
            async with Prometheus(self.opts.prometheus) as prom:
                while not stop.is_set():
                    try:
                        await self.cycle(source, prom)
                    except Exception:  # never die on one bad cycle; say it, count it, go on
                        self.metrics.error("internal")
                        log.exception("reconcile cycle failed")
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), self.opts.interval)
        finally:
            if api is not None:
                await api.close()
            await runner.cleanup()


def tree_from_queues(objs: list[dict[str, Any]]) -> tuple[Any | None, list[str]]:
    """The queue tree from the cluster's Queue objects, and why some were left out.

    The objects are validated as the control plane's config. When the whole set is not a
    valid tree, each top-level queue's subtree is tried alone and the invalid ones are left
    out (one bad Queue must not hide every other queue's quota).
    """
    from gpugov.control.config import ConfigError, parse_config
    from gpugov.control.tree import build_tree

    source = "Queue objects (gpugov.io/v1alpha1)"
    queues = [{"name": (o.get("metadata") or {}).get("name"), **(o.get("spec") or {})}
              for o in objs]
    try:
        return build_tree(parse_config({"queues": queues}, source)), []
    except (ConfigError, KeyError, ValueError) as whole:
        first_error = str(whole)
    by_name = {q["name"]: q for q in queues}

    def root(q: dict[str, Any]) -> str:
        seen = set()
        while q.get("parent") in by_name and q["name"] not in seen:
            seen.add(q["name"])
            q = by_name[q["parent"]]
        return str(q["name"])

    trees: dict[str, list[dict[str, Any]]] = {}
    for q in queues:
        trees.setdefault(root(q), []).append(q)
    kept, problems = [], []
    for name, members in sorted(trees.items()):
        try:
            parse_config({"queues": members}, source)
            kept += members
        except (ConfigError, KeyError, ValueError) as e:
            problems.append(f"queue tree {name!r} left out: {e}")
    if not kept:
        return None, [first_error]
    try:
        return build_tree(parse_config({"queues": kept}, source)), problems
    except (ConfigError, KeyError, ValueError) as e:
        return None, [*problems, str(e)]


def load_tree(path: Path) -> Any:
    """The queue tree of a control-plane config file (ConfigError names what is wrong)."""
    from gpugov.control.config import load_config
    from gpugov.control.tree import build_tree

    return build_tree(load_config(path))


def run(opts: Options) -> None:
    """Run until SIGINT/SIGTERM."""
    import signal

    tree = load_tree(opts.queues) if opts.queues else None
    rec = Reconciler(opts, tree)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await rec.serve(stop)

    asyncio.run(main())
