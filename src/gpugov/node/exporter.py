"""`gpugov node exporter`: GPU, pod and detection metrics read at scrape time.

A prometheus_client custom collector: every scrape asks NVML (no background sampler), drains
pending XID events, reads the pod regions and runs bypass/zombie detection. Device metrics use
DCGM exporter names and labels; a driver that lacks a query gives fewer series, never an error.
Anything that goes wrong is logged and counted in `gpugov_exporter_errors_total{reason}`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pynvml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpugov.node import hami_metrics as hami
from gpugov.node import metric_names as mn
from gpugov.node.detect import Findings, detect, nvml_pids
from gpugov.node.dra.regions import scan_claims
from gpugov.node.nvml.dcgm_fields import DRIVER_VERSION_LABEL, FIELDS, pcie_fallback
from gpugov.node.nvml.discovery import GpuInfo, catalog_model, discover
from gpugov.node.nvml.gpm import GpmSampler
from gpugov.node.nvml.health import DEFAULT_RECOVERY_S, HealthTracker
from gpugov.node.nvml.library import Nvml
from gpugov.node.nvml.samples import DeviceSample, sample_all
from gpugov.node.pod_regions import PodRegion, scan
from gpugov.node.procs import ProcTable

log = logging.getLogger(__name__)
# dcgm-exporter's labels (internal/pkg/rendermetrics): `Hostname` as gpugov's joins and
# dcgm-exporter < 4.6 spell it, `hostname` as dcgm-exporter spells it since; pod labels from
# the pod region on the device (empty = absent in Prometheus)
DEV_LABELS = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "hostname",
              DRIVER_VERSION_LABEL, "GPU_I_PROFILE", "GPU_I_ID", "namespace", "pod",
              "container", "pod_uid"]
# `claim`: the DRA claim whose region it is (`claim-regions/`), empty for the device plugin's
POD_LABELS = ["namespace", "pod", "container", "gpu", "UUID", "claim"]


@dataclass
class ExporterConfig:
    hostname: str = ""
    regions: Path | None = None  # <state>/regions folder of the device plugin
    recovery_s: float = DEFAULT_RECOVERY_S
    proc_root: Path = Path("/proc")
    # HAMi's metric names too (opt-in: gpugov.node.hami_metrics; $GPUGOV_EXPORTER_HAMI_METRICS=1)
    hami_metrics: bool = field(default_factory=lambda: os.environ.get(hami.ENV) == "1")
    #: <state>/claim-regions of the DRA kubelet plugin; None = beside `regions`
    claim_regions: Path | None = None


class NodeCollector(Collector):
    """Reads NVML, regions and /proc on each collect()."""

    def __init__(self, nvml: Nvml, cfg: ExporterConfig) -> None:
        self.nvml = nvml
        self.cfg = cfg
        # DaemonSet pods get NODE_NAME from the downward API; a pod's own hostname is the
        # pod name, which would not join the node's other series
        self.hostname = cfg.hostname or os.environ.get("NODE_NAME") or socket.gethostname()
        self.health = HealthTracker(nvml, cfg.recovery_s)
        self.errors: Counter[str] = Counter()
        self._nvml_errors_seen: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.last_findings = Findings()
        self._discovery_key: tuple | None = None
        self._topo: dict[int, GpuInfo] = {}
        self._driver = ""
        self.gpm = GpmSampler(nvml)
        self._hami_clock = hami.DeviceTime()

    def _driver_version(self) -> str:
        if not self._driver:
            self._driver = self.nvml.query(pynvml.nvmlSystemGetDriverVersion) or ""
        return self._driver

    def _profiling(self, s: DeviceSample, uuid: str, targets: set,
                   gi: int | None = None) -> dict[str, float]:
        """DCGM_FI_PROF_* from GPM (Hopper+, per GPU instance too); PCIe throughput from
        nvmlDeviceGetPcieThroughput where GPM is absent; nothing else on older GPUs."""
        h = self.nvml.query(pynvml.nvmlDeviceGetHandleByIndex, s.index)
        if h is None:
            return {}
        targets.add((uuid, gi))
        got = self.gpm.read(h, uuid, gi)
        if gi is None and not self.gpm.supported(h, uuid):
            got = pcie_fallback(self.nvml, h)
        return got

    def _count_nvml_errors(self) -> None:
        new = self.nvml.errors - self._nvml_errors_seen
        for reason, n in new.items():
            self.errors[f"nvml_{reason}"] += n
        self._nvml_errors_seen = Counter(self.nvml.errors)

    def collect(self) -> Iterator[Metric]:
        with self._lock:  # one scrape at a time: NVML sessions and counters are shared
            try:
                yield from self._collect()
            except Exception:  # never fail a scrape: report what broke
                log.exception("scrape failed")
                self.errors["scrape_failed"] += 1
                yield self._errors_metric()

    def _discovery(self, samples: list[DeviceSample]) -> dict[int, GpuInfo]:
        """Discovery (names, models, MIG profiles) is re-read only when the set of GPUs or
        of their MIG instances changed since the last scrape: it is the costly part."""
        key = tuple((s.index, s.uuid, tuple(sorted(m.gi_id for m in s.mig)))
                    for s in samples if not s.lost)
        if key != self._discovery_key:
            self._topo = {g.index: g for g in discover(self.nvml).gpus}
            self._discovery_key = key
        return self._topo

    def _errors_metric(self) -> Metric:
        m = CounterMetricFamily(mn.EXPORTER_ERRORS, "Errors of the exporter by reason",
                                labels=["reason"])
        for reason in sorted(self.errors):
            m.add_metric([reason], self.errors[reason])
        return m

    def _collect(self) -> Iterator[Metric]:
        self.health.poll()
        samples = sample_all(self.nvml)
        topo = self._discovery(samples)
        regions, problems = scan(self.cfg.regions)
        claim_dir = self.cfg.claim_regions or (
            self.cfg.regions.parent / "claim-regions" if self.cfg.regions else None)
        by_claim, claims, claim_problems = scan_claims(claim_dir)
        claims = [""] * len(regions) + claims  # the claim of each region, by index
        regions, problems = regions + by_claim, problems + claim_problems
        for p in problems:
            self.errors[p.reason] += 1
        procs = (ProcTable.read(self.cfg.proc_root, nvml_pids(samples))
                 if self.cfg.proc_root.is_dir() else ProcTable())
        findings = detect(samples, regions, procs)
        self.last_findings = findings
        for s in samples:
            if s.lost:
                self.errors["gpu_lost"] += 1
        self._count_nvml_errors()

        owners = _device_owners(regions, findings)
        # every field typed gauge: dcgm-exporter's "counter" fields keep their names and values,
        # and prometheus_client would append `_total` to a counter's name
        fams = {f.name: GaugeMetricFamily(f.name, f.help, labels=DEV_LABELS) for f in FIELDS}
        healthy = GaugeMetricFamily(mn.DEVICE_HEALTHY, "1 healthy, 0 not (XID / lost)",
                                    labels=["gpu", "UUID", "modelName", "Hostname"])
        models: Counter[str] = Counter()
        driver = self._driver_version()
        targets: set = set()
        for s in samples:
            g = topo.get(s.index)
            model = g.name if g else s.name
            uuid = s.uuid or (g.uuid if g else "")
            models[catalog_model(model) if model else "unknown"] += 1
            healthy.add_metric([str(s.index), uuid, model, self.hostname],
                               0.0 if s.lost or not self.health.healthy(s.index) else 1.0)
            if s.lost:
                continue
            ns, pod, uid = owners.get(s.index, ("", "", ""))
            ident = [str(s.index), uuid, g.bus_id if g else "", f"nvidia{s.index}", model,
                     self.hostname, self.hostname, driver]
            base = [*ident, "", "", ns, pod, "", uid]
            dh = self.health.devices.get(s.index)
            values = {
                mn.DEV_GPU_UTIL: s.gpu_util, mn.DEV_MEM_COPY_UTIL: s.mem_copy_util,
                mn.DEV_FB_USED: s.fb_used_mib, mn.DEV_FB_FREE: s.fb_free_mib,
                mn.DEV_POWER_USAGE: s.power_w, mn.DEV_GPU_TEMP: s.temp_c,
                mn.DEV_SM_CLOCK: s.sm_clock_mhz,
                mn.DEV_XID_ERRORS: float(dh.last_xid) if dh else 0.0,
                mn.DEV_CLOCKS_EVENT_REASONS: s.throttle_reasons,
                **s.fields, **self._profiling(s, uuid, targets),
            }
            for name, v in values.items():
                if v is not None and name in fams:
                    fams[name].add_metric(base, float(v))
            # MIG rows: framebuffer and GPM activity per GPU instance (utilization is not
            # defined for them); the parent's index and UUID, as dcgm-exporter writes them
            profiles = {m.gi_id: m.profile for m in (g.mig if g else ())}
            for m in s.mig:
                row = [*ident, profiles.get(m.gi_id, ""), str(m.gi_id), "", "", "", ""]
                mig_values = {mn.DEV_FB_USED: m.fb_used_mib, mn.DEV_FB_FREE: m.fb_free_mib,
                              "DCGM_FI_DEV_FB_RESERVED": m.fb_reserved_mib,
                              **self._profiling(s, uuid, targets, m.gi_id)}
                for name, v in mig_values.items():
                    if v is not None and name in fams:
                        fams[name].add_metric(row, float(v))
        self.gpm.forget(targets)
        yield from fams.values()
        yield healthy
        gpus = GaugeMetricFamily(mn.NODE_GPUS, "GPUs on the node", labels=["modelName",
                                                                         "Hostname"])
        for model, n in sorted(models.items()):
            gpus.add_metric([model, self.hostname], n)
        yield gpus
        yield from self._pod_metrics(regions, findings, claims)
        if self.cfg.hami_metrics:
            yield from hami.families(samples, topo, regions, findings, self.hostname,
                                     self._hami_clock, time.monotonic())
        yield from self._detection_metrics(findings, topo)
        yield self._errors_metric()

    def _pod_metrics(self, regions: list[PodRegion], f: Findings,
                     claims: list[str] | None = None) -> Iterator[Metric]:
        used = GaugeMetricFamily(mn.POD_MEMORY_USED, "GPU memory charged by the enforcement "
                                 "library (bytes)", labels=POD_LABELS)
        limit = GaugeMetricFamily(mn.POD_MEMORY_LIMIT, "The library's memory limit (bytes)",
                                  labels=POD_LABELS)
        compute = GaugeMetricFamily(mn.POD_COMPUTE_LIMIT, "Compute quota (0-1)",
                                    labels=POD_LABELS)
        device_time = CounterMetricFamily(mn.POD_DEVICE_TIME, "Device time charged by the "
                                          "library's compute throttle (s)", labels=POD_LABELS)
        throttled = CounterMetricFamily(mn.POD_THROTTLED, "Time launches waited for compute "
                                        "tokens (s)", labels=POD_LABELS)
        refused = CounterMetricFamily(mn.POD_REFUSED, "Allocations refused at the memory cap",
                                      labels=POD_LABELS)
        for ri, r in enumerate(regions):
            reg = r.region
            # a `devices` file lists the container's GPUs: ordinals past it do not exist, even
            # when a limit set for all devices fills them in
            ordinals = len(r.device_uuids) if r.device_uuids else len(reg.mem_limit)
            for k in range(min(ordinals, len(reg.mem_limit))):
                counters = (reg.device_ns[k], reg.throttled_ns[k], reg.refused[k])
                if not (reg.mem_limit[k] or reg.core_limit[k] or reg.used[k] or any(counters)):
                    continue
                gpu, uuid = f.placement.get((ri, k), ("", ""))
                labels = [r.namespace, r.pod, r.container, str(gpu), uuid,
                          claims[ri] if claims else ""]
                used.add_metric(labels, reg.used[k])
                if reg.mem_limit[k]:
                    limit.add_metric(labels, reg.mem_limit[k])
                if reg.core_limit[k]:
                    compute.add_metric(labels, reg.core_limit[k] / 100)
                # counters exist from the first scrape, at 0, so rate() and increase() see
                # the first charge or refusal. Device time is metered only under a compute
                # limit: without one there is no series (unknown, so readers fall back to
                # DCGM), never a false 0.
                if reg.core_limit[k] or reg.device_ns[k] or reg.throttled_ns[k]:
                    device_time.add_metric(labels, reg.device_ns[k] / 1e9)
                    throttled.add_metric(labels, reg.throttled_ns[k] / 1e9)
                if reg.mem_limit[k] or reg.refused[k]:
                    refused.add_metric(labels, reg.refused[k])
        yield from (used, limit, compute, device_time, throttled, refused)

    def _detection_metrics(self, f: Findings, topo: dict) -> Iterator[Metric]:
        un = GaugeMetricFamily(mn.DEVICE_UNACCOUNTED, "GPU memory of processes no region "
                               "accounts for (bypass)", labels=["gpu", "UUID", "pid"])
        for x in f.unaccounted:
            un.add_metric([str(x.gpu), x.uuid, str(x.pid)], x.bytes)
        zo = GaugeMetricFamily(mn.DEVICE_ZOMBIE, "GPU memory still held by a process or pod "
                               "that is gone", labels=["gpu", "UUID", "pid", "namespace", "pod"])
        for x in f.zombie:
            zo.add_metric([str(x.gpu), x.uuid, str(x.pid), x.namespace, x.pod], x.bytes)
        ov = GaugeMetricFamily(mn.DEVICE_DRIVER_OVERHEAD, "NVML memory minus the library's "
                               "charge, over accounted processes", labels=["gpu", "UUID"])
        for gpu, b in sorted(f.overhead.items()):
            ov.add_metric([str(gpu), topo[gpu].uuid if gpu in topo else ""], b)
        yield from (un, zo, ov)


def _device_owners(regions: list[PodRegion], f: Findings) -> dict[int, tuple[str, str, str]]:
    """gpu -> (namespace, pod, pod uid) when exactly one pod region sits on the device."""
    pods: dict[int, set[tuple[str, str, str]]] = {}
    for (ri, _), (gpu, _) in f.placement.items():
        r = regions[ri]
        pods.setdefault(gpu, set()).add((r.namespace, r.pod, r.uid))
    return {g: next(iter(p)) for g, p in pods.items() if len(p) == 1}


def make_registry(collector: NodeCollector) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    return reg


async def serve(host: str, port: int, collector: NodeCollector,
                ready: asyncio.Event | None = None) -> None:
    """Serve /metrics until cancelled (aiohttp; the scrape runs in a worker thread)."""
    from aiohttp import web

    registry = make_registry(collector)

    async def metrics(_: web.Request) -> web.Response:
        body = await asyncio.get_running_loop().run_in_executor(None, generate_latest, registry)
        return web.Response(body=body, headers={"Content-Type":
                                                "text/plain; version=0.0.4; charset=utf-8"})

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    log.info("exporter listening on %s:%d", host, port)
    if ready is not None:
        ready.set()
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def parse_listen(text: str) -> tuple[str, int]:
    """HOST:PORT (IPv6 in brackets); ValueError names the value and the expected form."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--listen {text!r}: expected HOST:PORT, e.g. 0.0.0.0:9400")
    return host.strip("[]") or "0.0.0.0", int(port)


def run(listen: str, cfg: ExporterConfig, library: str | None = None) -> None:
    host, port = parse_listen(listen)
    nv = Nvml(library)
    try:
        asyncio.run(serve(host, port, NodeCollector(nv, cfg)))
    except KeyboardInterrupt:  # pragma: no cover - interactive stop
        pass
    finally:
        nv.close()
