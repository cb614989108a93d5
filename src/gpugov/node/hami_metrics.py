"""HAMi's metric names (opt-in), so HAMi's Grafana dashboard keeps working on gpugov's exporter.

HAMi splits them over two processes: its scheduler (allocation views: `hami_gpu_*`,
`hami_node_gpu_memory_allocated_ratio`) and its vGPU monitor (host and per-container usage:
`hami_host_gpu_*`, `hami_vgpu_memory_*`, `hami_container_device_utilization_ratio`). On a gpugov
node both come from what the node really holds: allocations are the pod regions' limits on each
device (what the enforcement library enforces), usage is NVML's and the regions' charges.
Labels are HAMi's (`node, device_uuid, device_index, device_type`; per container `namespace,
pod, container, vdevice_index, device_uuid`). `container` is empty: a region is per pod
(one of a pod's several GPU containers: its own region, named). A device's allocation counts
each pod once, with the largest of its containers' limits there: an init container's device
is handed on to an app container, and containers running together never share a device.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client.core import GaugeMetricFamily, Metric

from gpugov.node.detect import Findings
from gpugov.node.nvml.discovery import GpuInfo
from gpugov.node.nvml.samples import DeviceSample
from gpugov.node.pod_regions import PodRegion

MIB = 1 << 20
DEVICE = ["node", "device_uuid", "device_index", "device_type"]
CONTAINER = ["namespace", "pod", "container", "vdevice_index", "device_uuid"]
ENV = "GPUGOV_EXPORTER_HAMI_METRICS"  # "1": serve them (the chart's opt-in sets it)


@dataclass
class DeviceTime:
    """Each region device's device-time counter at the previous scrape, for a ratio."""

    seen: dict[tuple[str, int], tuple[int, float]] = field(default_factory=dict)

    def ratio(self, key: tuple[str, int], device_ns: int, now: float) -> float | None:
        prev = self.seen.get(key)
        self.seen[key] = (device_ns, now)
        if prev is None or now <= prev[1] or device_ns < prev[0]:
            return None
        return min(1.0, (device_ns - prev[0]) / 1e9 / (now - prev[1]))


def families(samples: list[DeviceSample], topo: dict[int, GpuInfo], regions: list[PodRegion],
             f: Findings, hostname: str, clock: DeviceTime, now: float) -> Iterator[Metric]:
    g = {n: GaugeMetricFamily(n, h, labels=DEVICE) for n, h in (
        ("hami_gpu_memory_limit_bytes", "GPU device memory (bytes)"),
        ("hami_gpu_shared_count", "Pods holding a slice of the device"),
        ("hami_gpu_core_allocated_ratio", "Compute allocated on the device (0-1)"),
        ("hami_node_gpu_memory_allocated_ratio", "Memory allocated / device memory"),
        ("hami_host_gpu_memory_used_bytes", "Device memory in use, from NVML (bytes)"),
        ("hami_host_gpu_utilization_ratio", "Device utilization, from NVML (0-1)"))}
    allocated = GaugeMetricFamily("hami_gpu_memory_allocated_bytes", "Memory allocated on the "
                                  "device (bytes)", labels=[*DEVICE, "device_cores"])
    used = GaugeMetricFamily("hami_vgpu_memory_used_bytes", "Memory the container's slice "
                             "holds (bytes)", labels=CONTAINER)
    limit = GaugeMetricFamily("hami_vgpu_memory_limit_bytes", "The slice's memory limit "
                              "(bytes)", labels=CONTAINER)
    util = GaugeMetricFamily("hami_container_device_utilization_ratio", "Device time the "
                             "slice used since the last scrape (0-1)", labels=CONTAINER)
    # per device, per pod: the largest of its containers' limits there (an init container's
    # device is handed on; containers running together never share a device)
    held: dict[int, dict[tuple[str, str, str], tuple[int, int]]] = {}
    for (ri, k), (gpu, uuid) in sorted(f.placement.items()):
        r = regions[ri]
        reg = r.region
        if k >= len(reg.mem_limit):
            continue
        owner = (r.namespace, r.pod, r.uid)
        mem, core = held.setdefault(gpu, {}).get(owner, (0, 0))
        held[gpu][owner] = (max(mem, reg.mem_limit[k]), max(core, reg.core_limit[k]))
        labels = [r.namespace, r.pod, r.container, str(k), uuid]
        used.add_metric(labels, reg.used[k])
        if reg.mem_limit[k]:
            limit.add_metric(labels, reg.mem_limit[k])
        # device time is metered only under a compute limit: no series without one (unknown),
        # never a false 0
        if k < len(reg.device_ns) and (reg.core_limit[k] or reg.device_ns[k]):
            ratio = clock.ratio((str(r.path), k), reg.device_ns[k], now)
            if ratio is not None:
                util.add_metric(labels, ratio)
    mem_alloc = {g: sum(m for m, _ in by.values()) for g, by in held.items()}
    core_alloc = {g: sum(c for _, c in by.values()) for g, by in held.items()}
    pods = {g: set(by) for g, by in held.items()}
    for s in samples:
        if s.lost:
            continue
        info = topo.get(s.index)
        uuid = s.uuid or (info.uuid if info else "")
        labels = [hostname, uuid, str(s.index), info.name if info else s.name]
        total = (info.memory_mib * MIB) if info and info.memory_mib else None
        if total:
            g["hami_gpu_memory_limit_bytes"].add_metric(labels, total)
            g["hami_node_gpu_memory_allocated_ratio"].add_metric(
                labels, mem_alloc.get(s.index, 0) / total)
        allocated.add_metric([*labels, "100"], mem_alloc.get(s.index, 0))
        g["hami_gpu_shared_count"].add_metric(labels, len(pods.get(s.index, ())))
        g["hami_gpu_core_allocated_ratio"].add_metric(labels, core_alloc.get(s.index, 0) / 100)
        if s.fb_used_mib is not None:
            g["hami_host_gpu_memory_used_bytes"].add_metric(labels, s.fb_used_mib * MIB)
        if s.gpu_util is not None:
            g["hami_host_gpu_utilization_ratio"].add_metric(labels, s.gpu_util / 100)
    yield from g.values()
    yield from (allocated, used, limit, util)
