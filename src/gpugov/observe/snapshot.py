"""One picture of the cluster for `gpugov top`: queues, devices, pods and offenders.

Read either from Prometheus (the reconciler's series plus the exporter's device fields) or
straight from the cluster (the same join the reconciler runs, with the used view from
Prometheus when one is given).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from gpugov.observe import names as m
from gpugov.observe.promapi import Prometheus, PrometheusError
from gpugov.observe.views import MIB, Amount, PodRow, QueueRow, Reconciliation


@dataclass(frozen=True)
class DeviceView:
    node: str
    gpu: str
    uuid: str
    mode: str
    allocated: float  # compute, 1.0 = whole device
    busy: float | None  # measured busy fraction (None: not measured)
    memory_used: float | None
    memory_total: float | None


@dataclass(frozen=True)
class Offender:
    namespace: str
    pod: str
    what: str  # idle | leak | oversized
    detail: str
    score: float  # for ordering: bigger first


@dataclass
class Snapshot:
    source: str
    queues: list[QueueRow] = field(default_factory=list)
    devices: list[DeviceView] = field(default_factory=list)
    pods: list[PodRow] = field(default_factory=list)
    offenders: list[Offender] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    #: why the used view (busy, memory) is empty, when it is: `top` says it once
    used_note: str = ""
    #: the nodes whose used view is SIMULATED (a dev cluster's kwok nodes,
    #: `gpugov node exporter --simulate`): `top` says so beside the numbers
    simulated: list[str] = field(default_factory=list)


NO_PROMETHEUS = ("used (busy, memory) not measured: no --prometheus given; the used view comes "
                 "from `gpugov node exporter` on each GPU node, scraped by Prometheus (a "
                 "`gpugov dev up` cluster simulates it for its kwok nodes: pass the "
                 "--prometheus URL `dev up` printed; without Debian's prometheus binary it "
                 "started none)")
SIMULATED_QUERY = "count by (Hostname) (gpugov_exporter_simulated)"


async def simulated_nodes(prom: Prometheus) -> list[str]:
    """Nodes whose exporter series are simulated (`gpugov.node.synthetic`), not measured."""
    return sorted({s.labels.get("Hostname", "") for s in await prom.query(SIMULATED_QUERY)}
                  - {""})
NO_EXPORTER = ("used (busy, memory) not measured: Prometheus has no exporter series for these "
               "devices; is `gpugov node exporter` running on the GPU nodes and scraped?")


def offenders(pods: list[PodRow], leaks: dict[tuple[str, str], float],
              oversize_ratio: float = 0.5) -> list[Offender]:
    """Idle allocations, growing memory, and requests far above use (pure)."""
    out = []
    for p in pods:
        if p.idle_compute > 0:
            out.append(Offender(p.namespace, p.pod, "idle",
                                f"{p.idle_compute:.2f} GPU allocated and idle",
                                p.idle_compute))
        if p.declared and p.used and p.declared.memory_bytes and \
                p.used.memory_bytes is not None and \
                p.used.memory_bytes < oversize_ratio * p.declared.memory_bytes:
            spare = p.declared.memory_bytes - p.used.memory_bytes
            out.append(Offender(p.namespace, p.pod, "oversized",
                                f"uses {p.used.memory_bytes / MIB / 1024:.1f} of "
                                f"{p.declared.memory_bytes / MIB / 1024:.1f} GiB requested",
                                spare / (80 * 1024 * MIB)))
    for (ns, pod), rate in leaks.items():
        out.append(Offender(ns, pod, "leak", f"memory +{rate / MIB * 60:.0f} MiB/min",
                            rate / MIB))
    return sorted(out, key=lambda o: (-o.score, o.namespace, o.pod, o.what))


LEAK_QUERY = ("sum by (namespace, pod) (deriv({metric}[{window}])) > 1024")


def per_device(samples: list[Any], scale: float, combine: str = "sum") -> dict[str, float]:
    """One value per physical GPU (by UUID) from exporter rows.

    A MIG-enabled card's rows carry its parent's UUID plus `GPU_I_ID`; keyed by UUID alone
    they overwrote each other and the whole-card row. A whole-card row (no `GPU_I_ID`) wins;
    a card reported only per instance is the sum (memory) or mean (busy) of its instances.
    """
    whole: dict[str, float] = {}
    parts: dict[str, list[float]] = defaultdict(list)
    for s in samples:
        uuid = s.labels.get("UUID", "")
        if s.labels.get("GPU_I_ID", ""):
            parts[uuid].append(s.value * scale)
        else:
            whole[uuid] = s.value * scale
    out = {u: (sum(v) if combine == "sum" else sum(v) / len(v)) for u, v in parts.items()}
    out.update(whole)
    return out


def _key(labels: dict[str, str]) -> tuple[str, str]:
    return labels.get("namespace", ""), labels.get("pod", "")


async def from_prometheus(prom: Prometheus, window: str = "5m") -> Snapshot:
    """Rebuild the picture from the reconciler's and the exporter's series."""
    views: dict[str, dict[tuple[str, str], dict[str, float]]] = defaultdict(
        lambda: defaultdict(dict))
    meta: dict[tuple[str, str], dict[str, str]] = {}
    for view in m.VIEWS:
        for kind, name in (("gpus", m.GPUS[view]), ("memory", m.MEMORY[view]),
                           ("compute", m.COMPUTE[view])):
            for s in await prom.query(name):
                views[view][_key(s.labels)][kind] = s.value
                meta[_key(s.labels)] = s.labels
    idle = {_key(s.labels): s.value for s in await prom.query(
        f"rate({m.IDLE_ALLOCATED}[{window}])")}
    pods = []
    for key in sorted(meta):
        def amount(view: str, key: tuple[str, str] = key) -> Amount | None:
            v = views[view].get(key)
            return None if not v else Amount(v.get("gpus", 0.0), v.get("memory"),
                                             v.get("compute", 0.0))
        labels = meta[key]
        pods.append(PodRow(key[0], key[1], labels.get("tenant", ""), labels.get("queue", ""),
                           None, amount("declared"), amount("allocated"), amount("used"),
                           idle.get(key, 0.0)))
    queues: dict[str, dict[str, float]] = defaultdict(dict)
    for kind, name in (("quota", m.QUEUE_QUOTA), ("fair", m.QUEUE_FAIR_SHARE),
                       ("usage", m.QUEUE_USAGE), ("pending", m.QUEUE_PENDING)):
        for s in await prom.query(name):
            queues[s.labels.get("queue", "")][kind] = s.value
    queue_rows = [QueueRow(q, v.get("quota"), v.get("fair"), v.get("usage", 0.0),
                           int(v.get("pending", 0))) for q, v in sorted(queues.items())]
    busy = per_device(await prom.query(m.DEV_GPU_UTIL), 1 / 100, combine="mean")
    used = per_device(await prom.query(m.DEV_FB_USED), MIB)
    free = per_device(await prom.query(m.DEV_FB_FREE), MIB)
    devices = []
    for s in await prom.query(m.DEVICE_ALLOCATED_COMPUTE):
        u = s.labels.get("UUID", "")
        total = used[u] + free[u] if u in used and u in free else None
        devices.append(DeviceView(s.labels.get("node", ""), s.labels.get("gpu", ""), u,
                                  s.labels.get("mode", ""), s.value, busy.get(u),
                                  used.get(u), total))
    devices.sort(key=lambda d: (d.node, d.gpu))
    unmeasured = bool(devices) and all(d.busy is None and d.memory_used is None for d in devices)
    leaks = {_key(s.labels): s.value for s in await prom.query(
        LEAK_QUERY.format(metric=m.POD_MEMORY_USED, window=window))}
    snap = Snapshot(f"Prometheus {prom.url}", queue_rows, devices, pods,
                    offenders(pods, leaks))
    snap.simulated = await simulated_nodes(prom)
    if unmeasured:
        snap.used_note = NO_EXPORTER
    if not pods and not queue_rows:
        snap.problems.append(f"Prometheus at {prom.url} has no gpugov reconciler series: is "
                             "`gpugov reconcile` running and scraped?")
    return snap


def from_reconciliation(rec: Reconciliation, source: str,
                        leaks: dict[tuple[str, str], float] | None = None) -> Snapshot:
    devices = [DeviceView(d.node, str(d.index), d.uuid, d.mode, d.compute, None, None, None)
               for d in rec.devices]
    return Snapshot(source, rec.queues, devices, rec.pods, offenders(rec.pods, leaks or {}),
                    [msg for _, msg in rec.problems])


async def from_cluster(api: Any, prom: Prometheus | None, tree: Any | None,
                       window: str = "5m") -> Snapshot:
    """The reconciler's join run here: cluster objects, plus the used view if `prom`."""
    from gpugov.observe.cluster import ClusterError, read_cluster, read_queues, read_tenancy
    from gpugov.observe.reconciler import records, tree_from_queues
    from gpugov.observe.usage import read_used
    from gpugov.observe.views import reconcile

    pods, nodes = await read_cluster(api)
    try:
        tenancy, tenancy_note = await read_tenancy(api), ""
    except ClusterError as e:  # e.g. RBAC: this user may list pods but not Tenants
        tenancy, tenancy_note = None, f"{e}; tenants and queues from pod annotations"
    pod_recs, node_recs, problems = records(pods, nodes,
                                            tenancy.owner if tenancy is not None else None)
    problems += [tenancy_note] if tenancy_note else []
    if tree is None:
        objs = await read_queues(api)
        if objs:
            tree, queue_problems = tree_from_queues(objs)
            problems += queue_problems
    uses, agents, note, leaks, devices = [], set(), None, {}, None
    simulated: list[str] = []
    if prom is not None:
        try:
            used = await read_used(prom, window)
            uses, agents, devices = used.uses, used.nodes_with_agent, used.devices
            leaks = {_key(s.labels): s.value for s in await prom.query(
                LEAK_QUERY.format(metric=m.POD_MEMORY_USED, window=window))}
            simulated = await simulated_nodes(prom)
        except PrometheusError as e:
            note = f"{e}; showing declared and allocated only"
    rec = reconcile(pod_recs, node_recs, uses, agents, tree, devices=devices)
    if prom is None or note:
        rec.nodes_without_agent = []
        rec.problems = [p for p in rec.problems if p[0] != "node-without-agent"]
    snap = from_reconciliation(rec, "cluster" + (f" + Prometheus {prom.url}" if prom else ""),
                               leaks)
    snap.problems = problems + snap.problems + ([note] if note else [])
    snap.simulated = simulated
    if devices:  # the exporter's own device fields: busy and framebuffer used
        snap.devices = [DeviceView(d.node, d.gpu, d.uuid, d.mode, d.allocated,
                                   *devices.get(d.uuid, (None, None)), None)
                        for d in snap.devices]
    if prom is None:
        snap.used_note = NO_PROMETHEUS
    elif note:
        snap.used_note = f"used (busy, memory) not measured: {note}"
    elif not devices:
        snap.used_note = NO_EXPORTER
    return snap
