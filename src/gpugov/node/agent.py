"""`gpugov node agent`: publishes what the node's GPUs are, applies MIG layouts, reports.

Each round (every `interval_s`):
1. NVML discovery + health -> GFD labels and the `gpugov.io/inventory` annotation, written with
   one JSON merge patch on the Node (stale GFD labels it owns are removed; nothing else is
   touched) whenever they change.
2. MIG: when the node label `nvidia.com/mig.config` names a config of the mig-parted file that
   is not applied yet, the agent validates it against every GPU (nothing changes on an error),
   marks the GPUs to change unschedulable for gpugov (`gpugov.io/unschedulable-gpus` and
   `healthy: false` in the inventory), waits `drain_grace_s`, changes the idle ones, refuses the
   busy ones untouched, then reports: `nvidia.com/mig.config.state` (success / failed),
   `gpugov.io/mig-config-state` (per-GPU outcome) and one Event per GPU.
2b. On-demand MIG (`node/mig_on_demand.py`, when the node takes instances on demand): the
   instances gpugov's scheduler asks for in `gpugov.io/mig-requests` are created in free
   slices only, the inventory re-published, each outcome written to
   `gpugov.io/mig-requests-state` and an Event.
3. MPS: while some GPU is in `mps` mode, the MPS control daemon runs with per-client defaults
   (`gpugov.node.mps`; started, adopted after an agent restart, stopped when no GPU is in
   `mps` mode); a refusal becomes a Warning Event and the device plugin refuses MPS clients.
4. Power (`node/power.py`): measured draw and energy per GPU -> `gpugov.io/power`; the power
   limits the node's PowerDomain asks for (`status.caps`) set with NVML, one Event each.
5. Bypass and zombie detection (`detect`) against the pods the API says run on this node; a
   new finding becomes a Warning Event on the Node.
Bad input (a corrupt annotation, an unknown MIG profile, a garbage region) is logged, reported
and counted; the loop goes on.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gpugov.k8s import annotations as ann
from gpugov.k8s.annotations import INVENTORY, encode_inventory
from gpugov.k8s.power.contract import POWER
from gpugov.node import labels as gfd
from gpugov.node.detect import detect, nvml_pids
from gpugov.node.mig_apply import GpuOutcome, apply_change, plan_changes
from gpugov.node.mig_config import MigConfigError, MigEntry, load, select
from gpugov.node.mps import MpsDaemon, MpsError
from gpugov.node.nvml.samples import sample_all
from gpugov.node.nvml.source import NvmlDeviceSource
from gpugov.node.pod_regions import scan
from gpugov.node.power import PowerCaps
from gpugov.node.power import reconcile as reconcile_power
from gpugov.node.procs import ProcTable

log = logging.getLogger(__name__)

UNSCHEDULABLE_GPUS = ann.UNSCHEDULABLE_GPUS
MIG_CONFIG_STATE = ann.MIG_CONFIG_STATE
COMPONENT = "gpugov-node-agent"
AGENT_ERRORS = "gpugov_node_agent_errors_total"
MERGE = "application/merge-patch+json"


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class AgentConfig:
    node_name: str
    mig_config_file: Path | None = None
    regions: Path | None = None
    interval_s: float = 10.0
    drain_grace_s: float = 30.0
    event_namespace: str = "default"
    proc_root: Path = Path("/proc")
    #: the MPS control daemon of GPUs in `mps` mode; None = MPS is not managed here
    mps: MpsDaemon | None = None
    #: GFD's `-SHARED` product suffix on a shared node (NVIDIA config renameByDefault: false)
    shared_product: bool = False


@dataclass
class NodeAgent:
    api: client.ApiClient
    source: NvmlDeviceSource
    cfg: AgentConfig
    errors: Counter[str] = field(default_factory=Counter)
    published: dict[str, Any] | None = None
    reported: set[tuple[str, int, int]] = field(default_factory=set)
    mig_attempted: str | None = None
    mps_problem: str = ""
    #: the measured draw (`gpugov.io/power`) and the power limits set (node/power.py)
    power_annotation: str | None = None
    power_caps: PowerCaps = field(default_factory=PowerCaps)

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    # -------------------------------------------------------------- publishing
    async def publish(self, extra_annotations: dict[str, Any] | None = None,
                      extra_labels: dict[str, Any] | None = None, force: bool = False) -> None:
        """Labels + inventory annotation as one merge patch (only when something changed)."""
        node = await self.core.read_node(self.cfg.node_name)
        current = dict(node.metadata.labels or {})
        new = gfd.gfd_labels(self.source.node, self.source.sharing, self.cfg.shared_product)
        labels: dict[str, Any] = dict(new)
        labels.update({k: None for k in gfd.stale(current, new)})
        labels.update(extra_labels or {})
        annotations: dict[str, Any] = {INVENTORY: encode_inventory(self.source.inventory())}
        if self.power_annotation is not None:
            annotations[POWER] = self.power_annotation
        annotations.update(extra_annotations or {})
        body = {"metadata": {"labels": labels, "annotations": annotations}}
        if body == self.published and not force:
            return
        await self.core.patch_node(self.cfg.node_name, body, _content_type=MERGE)
        self.published = body

    async def event(self, reason: str, message: str, warning: bool = False) -> None:
        t = now()
        body = {
            "metadata": {"generateName": f"{self.cfg.node_name}.gpugov-",
                         "namespace": self.cfg.event_namespace},
            "involvedObject": {"kind": "Node", "name": self.cfg.node_name, "apiVersion": "v1"},
            "reason": reason, "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": COMPONENT, "host": self.cfg.node_name},
            "firstTimestamp": t, "lastTimestamp": t, "count": 1,
        }
        try:
            await self.core.create_namespaced_event(self.cfg.event_namespace, body)
        except ApiException as exc:  # events are best effort
            self.errors["event_failed"] += 1
            log.warning("could not post event %s: %s", reason, exc.reason)

    # -------------------------------------------------------------- MIG
    def _load_configs(self) -> dict[str, list[MigEntry]] | None:
        if self.cfg.mig_config_file is None:
            return None
        return load(self.cfg.mig_config_file)

    async def reconcile_mig(self) -> list[GpuOutcome] | None:
        """Apply the config the node label names, if not applied yet; the outcomes."""
        node = await self.core.read_node(self.cfg.node_name)
        labels = node.metadata.labels or {}
        annotations = node.metadata.annotations or {}
        want = labels.get(gfd.MIG_CONFIG)
        if not want:
            return None
        try:
            state = json.loads(annotations.get(MIG_CONFIG_STATE, "{}"))
            if not isinstance(state, dict):
                raise ValueError("not an object")
        except ValueError:
            self.errors["bad_mig_state_annotation"] += 1
            log.warning("%s on node %s is not valid JSON; treating as not applied",
                        MIG_CONFIG_STATE, self.cfg.node_name)
            state = {}
        if state.get("config") == want and state.get("state") == "success":
            return None
        if self.mig_attempted == want:
            return None  # failed before: retried when the label or the file changes
        self.mig_attempted = want
        source = str(self.cfg.mig_config_file)
        try:
            configs = self._load_configs()
            if configs is None:
                raise MigConfigError(f"node label {gfd.MIG_CONFIG}={want} but the agent runs "
                                     "without --mig-config")
            entries = select(configs, want, source)
        except MigConfigError as exc:
            return await self._mig_failed(want, [str(exc)])
        loop = asyncio.get_running_loop()
        nv = self.source.nvml
        plan = await loop.run_in_executor(None, plan_changes, nv, self.source.node, entries)
        if plan.errors:
            return await self._mig_failed(want, plan.errors)
        outcomes = [GpuOutcome(i, "unchanged") for i in plan.unchanged]
        if plan.changes:
            self.source.draining = frozenset(c.index for c in plan.changes)
            await loop.run_in_executor(None, self.source.refresh)
            await self.publish(
                extra_annotations={UNSCHEDULABLE_GPUS: ",".join(
                    str(i) for i in sorted(self.source.draining))},
                extra_labels={gfd.MIG_CONFIG_STATE: "pending"})
            await asyncio.sleep(self.cfg.drain_grace_s)
            models = {g.index: g.model for g in self.source.node.gpus}
            for c in plan.changes:
                outcomes.append(await loop.run_in_executor(
                    None, apply_change, nv, c, models.get(c.index, "")))
            self.source.draining = frozenset()
            await loop.run_in_executor(None, self.source.refresh)
        ok = all(o.state in ("applied", "unchanged") for o in outcomes)
        result = {"v": 1, "config": want, "state": "success" if ok else "failed", "time": now(),
                  "gpus": {str(o.index): (o.state + (f": {o.message}" if o.message else ""))
                           for o in sorted(outcomes, key=lambda o: o.index)}}
        await self.publish(extra_annotations={UNSCHEDULABLE_GPUS: None,
                                              MIG_CONFIG_STATE: json.dumps(result)},
                           extra_labels={gfd.MIG_CONFIG_STATE: result["state"]}, force=True)
        for o in outcomes:
            if o.state == "applied":
                await self.event("MigConfigApplied", f"{want}: {o.message}")
            elif o.state == "refused":
                await self.event("MigConfigRefused", f"{want}: {o.message}", warning=True)
            elif o.state == "failed":
                await self.event("MigConfigFailed", f"{want}: {o.message}", warning=True)
        return outcomes

    async def _mig_failed(self, want: str, errors: list[str]) -> list[GpuOutcome]:
        self.errors["mig_config_invalid"] += 1
        for e in errors:
            log.warning("MIG config %s: %s", want, e)
        result = {"v": 1, "config": want, "state": "failed", "time": now(), "errors": errors}
        await self.publish(extra_annotations={MIG_CONFIG_STATE: json.dumps(result)},
                           extra_labels={gfd.MIG_CONFIG_STATE: "failed"}, force=True)
        await self.event("MigConfigInvalid", f"{want}: {'; '.join(errors)}", warning=True)
        return []

    async def reconcile_mig_requests(self) -> dict[str, str] | None:
        """Create the MIG instances the scheduler asks for (on-demand nodes only)."""
        if not self.source.sharing.mig_on_demand:
            return None
        from gpugov.node.mig_on_demand import reconcile_requests
        return await reconcile_requests(self)

    # -------------------------------------------------------------- MPS
    async def reconcile_mps(self) -> str | None:
        """Start, adopt or stop the MPS control daemon as the inventory says (what was done)."""
        daemon = self.cfg.mps
        if daemon is None:
            return None
        loop = asyncio.get_running_loop()
        try:
            done = await loop.run_in_executor(None, daemon.reconcile, self.source.inventory())
        except MpsError as exc:
            self.errors["mps_failed"] += 1
            if str(exc) != self.mps_problem:
                self.mps_problem = str(exc)
                log.warning("MPS control daemon: %s", exc)
                await self.event("MpsDaemonFailed", str(exc), warning=True)
            return "failed"
        self.mps_problem = ""
        if done in ("started", "restarted", "stopped"):
            await self.event(f"MpsDaemon{done.capitalize()}",
                             f"MPS control daemon {done} ({daemon.pipe_dir})")
        return done

    # -------------------------------------------------------------- power
    async def reconcile_power(self) -> None:
        """Publish measured draw and energy; set the power limits the rack asks for."""
        await reconcile_power(self)

    # -------------------------------------------------------------- detection
    async def live_pod_uids(self) -> set[str]:
        pods = await self.core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={self.cfg.node_name}")
        return {p.metadata.uid for p in pods.items
                if (p.status.phase or "") not in ("Succeeded", "Failed")}

    async def check_memory(self) -> None:
        loop = asyncio.get_running_loop()
        live = await self.live_pod_uids()

        def run() -> Any:
            regions, problems = scan(self.cfg.regions)
            for p in problems:
                self.errors[p.reason] += 1
            samples = sample_all(self.source.nvml)
            procs = ProcTable.read(self.cfg.proc_root, nvml_pids(samples))
            return detect(samples, regions, procs, live)

        f = await loop.run_in_executor(None, run)
        for kind, items in (("GpuMemoryBypass", f.unaccounted), ("GpuMemoryZombie", f.zombie)):
            for x in items:
                key = (kind, x.gpu, x.pid)
                if key in self.reported:
                    continue
                self.reported.add(key)
                who = f" of pod {x.namespace}/{x.pod}" if x.pod else ""
                what = ("no enforcement region accounts for it" if kind == "GpuMemoryBypass"
                        else "its process or pod is gone")
                await self.event(kind, f"GPU {x.gpu} ({x.uuid}): PID {x.pid}{who} holds "
                                       f"{x.bytes} bytes and {what}", warning=True)

    # -------------------------------------------------------------- loop
    async def round(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.source.refresh)
        for step in (self.publish, self.reconcile_power, self.reconcile_mig,
                     self.reconcile_mig_requests, self.reconcile_mps, self.check_memory):
            try:
                await step()
            except ApiException as exc:
                self.errors[f"api_{exc.status}"] += 1
                log.warning("%s: API error %s %s", step.__name__, exc.status, exc.reason)
            except Exception:
                self.errors[f"{step.__name__}_failed"] += 1
                log.exception("%s failed", step.__name__)

    async def run(self) -> None:
        while True:
            await self.round()
            await asyncio.sleep(self.cfg.interval_s)


class AgentErrorsCollector:
    """`gpugov_node_agent_errors_total{reason}`: what the agent logged and went on from."""

    def __init__(self, agent: NodeAgent) -> None:
        self.agent = agent

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily

        m = CounterMetricFamily(AGENT_ERRORS, "Errors of the node agent by reason",
                                labels=["reason"])
        for reason, n in sorted(self.agent.errors.items()):
            m.add_metric([reason], n)
        yield m


async def serve_metrics(agent: NodeAgent, host: str, port: int) -> Any:
    """Serve the agent's /metrics (aiohttp); returns the runner to clean up."""
    from aiohttp import web
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(AgentErrorsCollector(agent))  # type: ignore[arg-type]

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry),
                            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner


async def run_agent(cfg: AgentConfig, nvml_library: str | None, kubeconfig: Path | None,
                    sharing: Any = None, recovery_s: float = 300.0,
                    metrics: tuple[str, int] | None = None) -> None:
    """Open NVML and the API (kubeconfig, else in-cluster) and run rounds until cancelled."""
    from kubernetes_asyncio import config

    from gpugov.node.nvml.health import HealthTracker
    from gpugov.node.nvml.library import Nvml
    from gpugov.node.nvml.source import SharingPolicy

    nv = Nvml(nvml_library)
    try:
        source = NvmlDeviceSource(nv, HealthTracker(nv, recovery_s),
                                  sharing or SharingPolicy())
        api_cfg = client.Configuration()
        if kubeconfig is not None:
            await config.load_kube_config(config_file=str(kubeconfig),
                                          client_configuration=api_cfg)
        else:
            config.load_incluster_config(client_configuration=api_cfg)
        async with client.ApiClient(api_cfg) as api:
            agent = NodeAgent(api, source, cfg)
            runner = await serve_metrics(agent, *metrics) if metrics else None
            try:
                await agent.run()
            finally:
                if runner is not None:
                    await runner.cleanup()
    finally:
        nv.close()
