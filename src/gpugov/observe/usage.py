"""The used view: PromQL over the exporter's metrics, and turning the answers into `DeviceUse`.

Per pod and device the enforcement library's numbers win (device time and charged memory);
a whole device without the library falls back to DCGM utilisation and framebuffer use
labelled with the owning pod.

DRA claims: the exporter labels a claim's region's series with its `claim` (and the pod it is
reserved for), so the same numbers are also summed per claim (`UsedView.claims`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpugov.observe import names as m
from gpugov.observe.promapi import Prometheus, Sample
from gpugov.observe.views import MIB, DeviceUse

KEY = "namespace, pod, UUID"
CLAIM_KEY = "namespace, claim, pod"


def queries(window: str) -> dict[str, str]:
    """The instant queries one reconcile cycle runs (`window`: the rate window, e.g. 2m)."""
    return {
        "memory": f"sum by ({KEY}) ({m.POD_MEMORY_USED})",
        "busy": f"sum by ({KEY}) (rate({m.POD_DEVICE_TIME}[{window}]))",
        "dcgm_util": f'max by ({KEY}) ({m.DEV_GPU_UTIL}{{pod!=""}})',
        "dcgm_fb": f'max by ({KEY}) ({m.DEV_FB_USED}{{pod!=""}})',
        "dev_util": f"max by (UUID) ({m.DEV_GPU_UTIL})",
        "dev_fb": f"max by (UUID) ({m.DEV_FB_USED})",
        "agents": f"count by (Hostname) ({m.NODE_GPUS})",
        "refusals": f"sum by (namespace, pod) ({m.POD_REFUSED})",
        "claim_memory": f'sum by ({CLAIM_KEY}) ({m.POD_MEMORY_USED}{{claim!=""}})',
        "claim_busy": f'sum by ({CLAIM_KEY}) (rate({m.POD_DEVICE_TIME}{{claim!=""}}[{window}]))',
    }


@dataclass
class UsedView:
    uses: list[DeviceUse]
    nodes_with_agent: set[str]
    refusals: dict[tuple[str, str], float]
    #: UUID -> the device's own (busy fraction, framebuffer bytes used)
    devices: dict[str, tuple[float | None, float | None]]
    #: (namespace, claim, pod) -> (charged memory bytes, busy fraction) of a DRA claim
    claims: dict[tuple[str, str, str], tuple[float | None, float | None]] = field(
        default_factory=dict)


def _key(s: Sample) -> tuple[str, str, str]:
    return s.labels.get("namespace", ""), s.labels.get("pod", ""), s.labels.get("UUID", "")


def combine(results: dict[str, list[Sample]]) -> UsedView:
    """Pure: the answers of `queries` to per-pod device uses (library first, DCGM second)."""
    memory = {_key(s): s.value for s in results.get("memory", [])}
    busy = {_key(s): s.value for s in results.get("busy", [])}
    for s in results.get("dcgm_util", []):
        busy.setdefault(_key(s), s.value / 100.0)
    for s in results.get("dcgm_fb", []):
        memory.setdefault(_key(s), s.value * MIB)
    keys = sorted(k for k in set(memory) | set(busy) if k[0] and k[1])
    uses = [DeviceUse(ns, pod, uuid, memory.get((ns, pod, uuid)), busy.get((ns, pod, uuid)))
            for ns, pod, uuid in keys]
    util = {s.labels.get("UUID", ""): s.value / 100.0 for s in results.get("dev_util", [])}
    fb = {s.labels.get("UUID", ""): s.value * MIB for s in results.get("dev_fb", [])}
    devices = {u: (util.get(u), fb.get(u)) for u in set(util) | set(fb) if u}
    agents = {s.labels["Hostname"] for s in results.get("agents", []) if "Hostname" in s.labels}
    refusals = {(s.labels.get("namespace", ""), s.labels.get("pod", "")): s.value
                for s in results.get("refusals", [])}
    def claim(s: Sample) -> tuple[str, str, str]:
        return s.labels.get("namespace", ""), s.labels.get("claim", ""), s.labels.get("pod", "")
    cmem = {claim(s): s.value for s in results.get("claim_memory", [])}
    cbusy = {claim(s): s.value for s in results.get("claim_busy", [])}
    claims = {k: (cmem.get(k), cbusy.get(k)) for k in set(cmem) | set(cbusy) if k[0] and k[1]}
    return UsedView(uses, agents, refusals, devices, claims)


async def read_used(prom: Prometheus, window: str) -> UsedView:
    """Run every query (PrometheusError propagates: the caller decides what to keep)."""
    return combine({name: await prom.query(q) for name, q in queries(window).items()})
