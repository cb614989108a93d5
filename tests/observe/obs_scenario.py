"""The demo workload: three views diverging on purpose, as cluster objects and exporter series.

- team-a/idle holds a whole GPU and does nothing (hoarding);
- team-a/leaky's charged memory grows until its limit, then its allocations are refused;
- team-b/oversized asked for 40 GiB and a whole GPU's compute and uses 2 GiB and 10 %;
- team-b/ts-1 and ts-2 share a time-sliced card with 60 GiB limits each on an 80 GiB card;
- team-b/waiting is pending; team-a/plain has no gpugov annotations; team-b/remote runs on a
  node without the agent.

`ExporterSeries` serves the exporter's metrics with the names and labels of docs/contracts.md,
computed from the time since the scenario started (used until the real exporter can run on
the fake NVML in this test).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from observe_data import MIB, device, node, pod
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

GIB = 1024 * MIB
CARD_MIB = 81920
NODE = "node-1"
UUIDS = [f"GPU-demo-{i}" for i in range(4)]
# the shared stack leaks slowly (still growing minutes later); the demo fast, into its limit
LEAK_START, LEAK_RATE, LEAK_LIMIT = 1 * GIB, 64 * MIB, 20 * GIB  # bytes, bytes/s, bytes


def pods() -> list[dict]:
    b = {"ns": "team-b", "queue": "team-b", "tenant": "team-b"}
    return [
        pod("idle", request={"count": 1, "memoryMiB": CARD_MIB},
            devices=[device(UUIDS[0], 0)]),
        pod("leaky", request={"count": 1, "milli": 500, "memoryMiB": 20480},
            devices=[device(UUIDS[1], 1, "soft", 500, 20480)]),
        pod("oversized", request={"count": 1, "milli": 1000, "memoryMiB": 40960},
            devices=[device(UUIDS[2], 2, "soft", 1000, 40960)], **b),
        pod("ts-1", request={"count": 1, "milli": 500, "memoryMiB": 61440},
            devices=[device(UUIDS[3], 3, "timeslice", 500, 61440)], **b),
        pod("ts-2", request={"count": 1, "milli": 500, "memoryMiB": 61440},
            devices=[device(UUIDS[3], 3, "timeslice", 500, 61440)], **b),
        pod("waiting", node=None, phase="Pending", request={"count": 2}, **b),
        pod("plain", gpu_limit=1, queue=None, tenant=None),
        pod("remote", node="node-2", request={"count": 1}, devices=[device("GPU-r-0", 0)], **b),
    ]


def nodes() -> list[dict]:
    return [node(NODE, UUIDS, CARD_MIB), node("node-2", ["GPU-r-0"], CARD_MIB)]


# (pod, namespace, device index, busy fraction, memory bytes or None for the leak, limit)
USES = [("idle", "team-a", 0, 0.0, 2 * GIB, CARD_MIB * MIB),
        ("leaky", "team-a", 1, 0.45, None, None),
        ("oversized", "team-b", 2, 0.10, 2 * GIB, 40 * GIB),
        ("ts-1", "team-b", 3, 0.30, 30 * GIB, 60 * GIB),
        ("ts-2", "team-b", 3, 0.30, 20 * GIB, 60 * GIB)]


class ExporterSeries(Collector):
    """The exporter's series for node-1 at `time.monotonic() - start` seconds."""

    def __init__(self, leak_limit: float = LEAK_LIMIT, leak_rate: float = LEAK_RATE) -> None:
        self.start = time.monotonic()
        self.leak_limit, self.leak_rate = leak_limit, leak_rate

    def leak_bytes(self, t: float) -> float:
        return min(self.leak_limit, LEAK_START + self.leak_rate * t)

    def collect(self) -> Iterator[Metric]:
        t = time.monotonic() - self.start
        dev = ["gpu", "UUID", "modelName", "Hostname"]
        owned = {0: ("team-a", "idle"), 2: ("team-b", "oversized")}
        fams = {n: GaugeMetricFamily(n, n, labels=[*dev, "namespace", "pod", "container"])
                for n in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL",
                          "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
                          "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP",
                          "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_XID_ERRORS",
                          "DCGM_FI_DEV_CLOCKS_EVENT_REASONS")}
        healthy = GaugeMetricFamily("gpugov_device_healthy", "", labels=dev)
        # the detection series carry the labels `gpugov node exporter` gives them
        zombie = GaugeMetricFamily("gpugov_device_memory_zombie_bytes", "",
                                   labels=["gpu", "UUID", "pid", "namespace", "pod"])
        overhead = GaugeMetricFamily("gpugov_device_memory_driver_overhead_bytes", "",
                                     labels=["gpu", "UUID"])
        unaccounted = GaugeMetricFamily("gpugov_device_memory_unaccounted_bytes", "",
                                        labels=["gpu", "UUID", "pid"])
        for i, uuid in enumerate(UUIDS):
            busy = sum(u[3] for u in USES if u[2] == i)
            used = sum(self.leak_bytes(t) if u[4] is None else u[4] for u in USES if u[2] == i)
            ns, p = owned.get(i, ("", ""))
            labels = [str(i), uuid, "A100-SXM4-80GB", NODE, ns, p, "main" if p else ""]
            for name, value in (("DCGM_FI_DEV_GPU_UTIL", 100 * busy),
                                ("DCGM_FI_DEV_MEM_COPY_UTIL", 20 * busy),
                                ("DCGM_FI_DEV_FB_USED", used / MIB),
                                ("DCGM_FI_DEV_FB_FREE", CARD_MIB - used / MIB),
                                ("DCGM_FI_DEV_POWER_USAGE", 60 + 300 * busy),
                                ("DCGM_FI_DEV_GPU_TEMP", 85 if i == 3 else 40),
                                ("DCGM_FI_DEV_SM_CLOCK", 1410),
                                ("DCGM_FI_DEV_XID_ERRORS", 0),
                                ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", 64 if i == 3 else 0)):
                fams[name].add_metric(labels, value)
            healthy.add_metric(labels[:4], 1)
            overhead.add_metric(labels[:2], 300 * MIB)
        zombie.add_metric(["2", UUIDS[2], "977", "team-b", "finished-job"], 1 * GIB)
        unaccounted.add_metric(["3", UUIDS[3], "4242"], 512 * MIB)
        yield from fams.values()
        yield from (healthy, zombie, overhead, unaccounted)
        gpus = GaugeMetricFamily("gpugov_node_gpus", "", labels=["modelName", "Hostname"])
        gpus.add_metric(["A100-SXM4-80GB", NODE], len(UUIDS))
        yield gpus
        errors = CounterMetricFamily("gpugov_exporter_errors", "", labels=["reason"])
        errors.add_metric(["nvml"], 0)
        yield errors
        per = ["namespace", "pod", "container", "gpu", "UUID"]
        g = {n: GaugeMetricFamily(n, "", labels=per) for n in (
            "gpugov_pod_memory_used_bytes", "gpugov_pod_memory_limit_bytes",
            "gpugov_pod_compute_limit_ratio")}
        c = {n: CounterMetricFamily(n, "", labels=per) for n in (
            "gpugov_pod_device_time_seconds", "gpugov_pod_throttled_seconds",
            "gpugov_pod_refused_allocations")}
        for p, ns, i, busy, mem, limit in USES:
            labels = [ns, p, "main", str(i), UUIDS[i]]
            used = self.leak_bytes(t) if mem is None else mem
            g["gpugov_pod_memory_used_bytes"].add_metric(labels, used)
            g["gpugov_pod_memory_limit_bytes"].add_metric(labels, limit or self.leak_limit)
            g["gpugov_pod_compute_limit_ratio"].add_metric(labels, 0.5 if i != 0 else 1.0)
            c["gpugov_pod_device_time_seconds"].add_metric(labels, busy * t)
            c["gpugov_pod_throttled_seconds"].add_metric(labels, 0.05 * t if busy else 0)
            full = mem is None and used >= self.leak_limit
            refused = int((t - (self.leak_limit - LEAK_START) / self.leak_rate) * 2) if full else 0
            c["gpugov_pod_refused_allocations"].add_metric(labels, refused)
        yield from g.values()
        yield from c.values()
