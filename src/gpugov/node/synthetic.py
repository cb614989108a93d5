"""SIMULATED exporter series for a `gpugov dev up` cluster, whose kwok nodes have no GPU.

`gpugov node exporter --simulate` serves, for every kwok node (annotation
`kwok.x-k8s.io/node`) that carries gpugov's inventory, the series `gpugov top` and the
reconciler read from the real exporter (`DCGM_FI_DEV_GPU_UTIL`, `DCGM_FI_DEV_FB_USED` / `_FREE`,
`gpugov_node_gpus`, `gpugov_pod_memory_used_bytes`, `gpugov_pod_device_time_seconds_total`),
so the used view of a dev cluster has numbers. Every series carries `simulated="true"` and
the node has `gpugov_exporter_simulated 1`, which `top` reads to say the numbers are
simulated. A node without the kwok annotation (a real node) is never simulated.

The numbers come from the allocation records (`gpugov.io/allocation`) of the pods bound to
each node, at each scrape: a pod uses a fixed share of what it holds, 55-95 % of its compute
and 60-90 % of its memory (a whole GPU or MIG instance without a memory figure: of the
card's share its compute gives), chosen per pod from a hash of its UID so pods differ and a
pod's numbers stay put. Device time is integrated between scrapes. This is not a measurement
and never runs on a GPU node: the real exporter (`gpugov node exporter`) reads NVML.

DRA claims (`gpugov dev up --dra-pool`, docs/dra.md): a claim allocated on a kwok node's
`gpu.gpugov.io` device counts as its first reserving pod's use of that device — its
`consumedCapacity` (a slice) or the device's published capacity — and its pod series carry
`claim`, as the real exporter's do for claim regions. Claims that cannot be listed (RBAC, no
DRA API) are left out, logged once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpugov.k8s.annotations import (
    ALLOCATION,
    INVENTORY,
    AnnotationError,
    decode_allocation,
    decode_inventory,
)
from gpugov.node import metric_names as mn

log = logging.getLogger("gpugov.synthetic")

KWOK = "kwok.x-k8s.io/node"
SIMULATED = "gpugov_exporter_simulated"
MILLI = 1000
_TERMINAL = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Use:
    """One pod on one device: what it holds and what the model says it uses."""

    namespace: str
    pod: str
    uid: str
    milli: int
    memory_mib: int
    claim: str = ""  # the DRA claim it uses the device through ("" = an allocation record)

    def factors(self) -> tuple[float, float]:
        """(compute share used, memory share used), fixed per pod."""
        h = zlib.crc32(self.uid.encode())
        return 0.55 + (h % 41) / 100, 0.60 + (h // 41 % 31) / 100


@dataclass
class Device:
    node: str
    index: int
    uuid: str
    model: str
    memory_mib: int
    uses: list[Use] = field(default_factory=list)

    def busy_percent(self) -> float:
        return min(100.0, sum(u.milli * u.factors()[0] for u in self.uses) / MILLI * 100)

    def used_mib(self, u: Use) -> float:
        held = u.memory_mib or self.memory_mib * u.milli / MILLI
        return held * u.factors()[1]

    def fb_used_mib(self) -> float:
        return min(float(self.memory_mib), sum(self.used_mib(u) for u in self.uses))


def devices(nodes: list[Mapping[str, Any]], pods: list[Mapping[str, Any]],
            claims: list[Mapping[str, Any]] = ()) -> list[Device]:
    """The simulated devices of the kwok nodes, with the bound pods' allocations and the
    allocated DRA claims (pure)."""
    out: dict[tuple[str, int], Device] = {}
    published: dict[str, dict[str, dict[str, Any]]] = {}  # node -> DRA device name -> device
    for n in nodes:
        meta = n.get("metadata") or {}
        ann = meta.get("annotations") or {}
        if KWOK not in ann or INVENTORY not in ann:
            continue
        try:
            inv = decode_inventory(ann[INVENTORY])
        except AnnotationError as exc:
            log.warning("node %s: %s; not simulated", meta.get("name"), exc)
            continue
        for d in inv.devices:
            out[(meta["name"], d.index)] = Device(meta["name"], d.index, d.uuid, d.model,
                                                  d.memory_mib)
        if claims:
            from gpugov.k8s.dra.slices import Features, node_devices

            published[meta["name"]] = {x["name"]: x for x in node_devices(inv, Features(True))}
    for p in pods:
        meta = p.get("metadata") or {}
        node = (p.get("spec") or {}).get("nodeName")
        text = (meta.get("annotations") or {}).get(ALLOCATION)
        if not node or not text or (p.get("status") or {}).get("phase") in _TERMINAL:
            continue
        try:
            alloc = decode_allocation(text)
        except AnnotationError:
            continue
        for d in alloc.devices:
            dev = out.get((node, d.index))
            if dev is not None and alloc.node == node:
                dev.uses.append(Use(meta.get("namespace", ""), meta.get("name", ""),
                                    meta.get("uid", ""), d.milli, d.memory_mib))
    live = {((p.get("metadata") or {}).get("namespace"), (p.get("metadata") or {}).get("uid"))
            for p in pods if (p.get("status") or {}).get("phase") not in _TERMINAL}
    for c in claims:
        for node, index, use in _claim_uses(c, published, live):
            dev = out.get((node, index))
            if dev is not None:
                dev.uses.append(use)
    return sorted(out.values(), key=lambda d: (d.node, d.index))


def _claim_uses(claim: Mapping[str, Any], published: dict[str, dict[str, dict[str, Any]]],
                live: set[tuple[Any, Any]]) -> list[tuple[str, int, Use]]:
    """(node, GPU index, use) of each gpugov device the claim holds, for its first live
    reserving pod; a value that is not a bounded quantity leaves the device out."""
    from gpugov.k8s.dra.slices import DRIVER
    from gpugov.k8s.quantity import parse_quantity

    meta = claim.get("metadata") or {}
    status = claim.get("status") or {}
    ns = meta.get("namespace", "")
    pod = next((r for r in status.get("reservedFor") or [] if isinstance(r, Mapping)
                and r.get("resource") == "pods" and (ns, r.get("uid")) in live), None)
    alloc = status.get("allocation") or {}
    if pod is None or not isinstance(alloc, Mapping):
        return []
    out = []
    for r in (alloc.get("devices") or {}).get("results") or []:
        if not isinstance(r, Mapping) or r.get("driver") != DRIVER:
            continue
        dev = published.get(str(r.get("pool")), {}).get(str(r.get("device")))
        if dev is None:
            continue
        cap = {k: v.get("value") for k, v in (dev.get("capacity") or {}).items()
               if isinstance(v, Mapping)}
        cap.update(r.get("consumedCapacity") or {})
        try:
            memory = int(parse_quantity(cap.get("memory", 0)) / 2**20)
            percent = float(parse_quantity(cap.get("compute", 100)))
        except (ValueError, TypeError):
            continue
        if not (0 <= memory <= 1 << 24 and 0 < percent <= 100):
            continue
        out.append((str(r.get("pool")), int(dev["attributes"]["index"]["int"]),
                    Use(ns, str(pod.get("name") or ""), str(pod.get("uid") or ""),
                        round(percent * MILLI / 100), memory, str(meta.get("name") or ""))))
    return out


class Simulation:
    """The series of one scrape, with device time integrated across scrapes."""

    def __init__(self) -> None:
        self.device_time: dict[tuple[str, str], float] = {}
        self.last: float | None = None

    def render(self, devs: list[Device], now: float | None = None) -> bytes:
        """The text exposition of one scrape (written directly: a dev fleet of thousands of
        series renders in a fraction of prometheus_client's time)."""
        now = time.monotonic() if now is None else now
        dt = 0.0 if self.last is None else max(0.0, now - self.last)
        self.last = now
        fams: dict[str, tuple[str, str, list[str]]] = {
            mn.DEV_GPU_UTIL: ("gauge", "GPU utilisation (%), SIMULATED", []),
            mn.DEV_FB_USED: ("gauge", "framebuffer used (MiB), SIMULATED", []),
            mn.DEV_FB_FREE: ("gauge", "framebuffer free (MiB), SIMULATED", []),
            mn.NODE_GPUS: ("gauge", "GPUs on the node (SIMULATED node)", []),
            SIMULATED: ("gauge", "1: this node's GPU series are simulated from allocations (a "
                        "dev cluster's kwok node), not measured", []),
            mn.POD_MEMORY_USED: ("gauge", "pod GPU memory (bytes), SIMULATED", []),
            mn.POD_DEVICE_TIME: ("counter", "pod device time (s), SIMULATED", []),
        }
        per_node: dict[tuple[str, str], int] = {}
        for d in devs:
            per_node[(d.node, d.model)] = per_node.get((d.node, d.model), 0) + 1
            one = d.uses[0] if len(d.uses) == 1 else None
            labels = _labels(gpu=str(d.index), UUID=d.uuid, device=f"nvidia{d.index}",
                             modelName=d.model, Hostname=d.node, hostname=d.node,
                             namespace=one.namespace if one else "",
                             pod=one.pod if one else "", pod_uid=one.uid if one else "",
                             simulated="true")
            fb = d.fb_used_mib()
            fams[mn.DEV_GPU_UTIL][2].append(f"{labels} {round(d.busy_percent(), 1)}")
            fams[mn.DEV_FB_USED][2].append(f"{labels} {round(fb)}")
            fams[mn.DEV_FB_FREE][2].append(f"{labels} {round(max(0.0, d.memory_mib - fb))}")
            for u in d.uses:
                pl = _labels(namespace=u.namespace, pod=u.pod, container="", gpu=str(d.index),
                             UUID=d.uuid, claim=u.claim, simulated="true")
                fams[mn.POD_MEMORY_USED][2].append(f"{pl} {round(d.used_mib(u) * 2**20)}")
                key = (u.uid, d.uuid)
                self.device_time[key] = self.device_time.get(key, 0.0) + \
                    dt * u.milli / MILLI * u.factors()[0]
                fams[mn.POD_DEVICE_TIME][2].append(f"{pl} {self.device_time[key]!r}")
        for (node, model), count in sorted(per_node.items()):
            fams[mn.NODE_GPUS][2].append(
                f"{_labels(modelName=model, Hostname=node, simulated='true')} {count}")
        for node in sorted({d.node for d in devs}):
            fams[SIMULATED][2].append(f"{_labels(Hostname=node)} 1")
        out: list[str] = []
        for name, (kind, text, rows) in fams.items():
            out += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
            out += [name + r for r in rows]
        return ("\n".join(out) + "\n").encode()


_ESCAPES = str.maketrans({"\\": "\\\\", "\n": "\\n", '"': '\\"'})


def _labels(**kv: str) -> str:
    """`{k="v",...}` with the exposition format's escapes."""
    return "{" + ",".join(f'{k}="{v.translate(_ESCAPES)}"' for k, v in kv.items()) + "}"


async def _read(api: Any) -> tuple[list[dict], list[dict]]:
    from kubernetes_asyncio import client

    core = client.CoreV1Api(api)
    nodes = await core.list_node(_preload_content=False)
    pods = await core.list_pod_for_all_namespaces(_preload_content=False)
    return (json.loads(await nodes.read()).get("items") or [],
            json.loads(await pods.read()).get("items") or [])


_CLAIMS_UNREADABLE: list[str] = []


async def _read_claims(api: Any) -> list[dict]:
    """The ResourceClaims (resource.k8s.io/v1); [] when they cannot be listed (said once)."""
    from kubernetes_asyncio import client
    from kubernetes_asyncio.client.exceptions import ApiException

    try:
        resp = await client.CustomObjectsApi(api).list_cluster_custom_object(
            "resource.k8s.io", "v1", "resourceclaims", _preload_content=False)
        return json.loads(await resp.read()).get("items") or []
    except ApiException as exc:
        if not _CLAIMS_UNREADABLE:
            _CLAIMS_UNREADABLE.append(str(exc.status))
            log.warning("ResourceClaims cannot be listed (HTTP %s): DRA claims are not "
                        "simulated", exc.status)
        return []


async def serve(host: str, port: int, kubeconfig: Path | None,
                ready: asyncio.Event | None = None) -> None:
    """Serve the simulated /metrics until cancelled (reads the API at each scrape)."""
    from aiohttp import web
    from kubernetes_asyncio import client, config

    cfg = client.Configuration()
    if kubeconfig is not None:
        await config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    else:
        config.load_incluster_config(client_configuration=cfg)
    sim = Simulation()
    async with client.ApiClient(cfg) as api:
        async def metrics(_: web.Request) -> web.Response:
            nodes, pods = await _read(api)
            body = sim.render(devices(nodes, pods, await _read_claims(api)))
            return web.Response(body=body, headers={
                "Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

        async def healthz(_: web.Request) -> web.Response:
            return web.Response(text="ok\n")

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        app.router.add_get("/healthz", healthz)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, host, port).start()
        log.info("serving SIMULATED GPU metrics for kwok nodes on %s:%d", host, port)
        if ready is not None:
            ready.set()
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()
