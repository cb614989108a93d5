"""DRA claim allocation by kube-scheduler on gpugov's published slices, plain and governed.

Usage: python bench/dra_allocation.py [--nodes 8] [--gpus 8] [--pods 64]
Starts a local v1.34 control plane with the DRA alpha gates gpugov uses, kwok nodes whose
GPUs are half exclusive and half soft, publishes their slices, then times creating --pods
claims + pods until all are bound by kube-scheduler: once with plain slices, once with
gpugov's binding conditions and `gpugov dra governor` admitting each claim to its queue.
Prints pods/s for each and their ratio (one run, same machine; numbers under load are noisy).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "k8s"))
from dra_support import (  # noqa: E402
    claim,
    claim_pod,
    dra_plane,
    gpu,
    inventory,
    kwok_node,
    request,
)

from gpugov.k8s.devcluster.dev import install_crds  # noqa: E402
from gpugov.k8s.dra.governor import Governor  # noqa: E402
from gpugov.k8s.dra.publisher import SlicePublisher, probe_features  # noqa: E402
from gpugov.k8s.dra.slices import SLICE_CLASS  # noqa: E402
from gpugov.k8s.scheduler.kube import Kube  # noqa: E402
from gpugov.model.devices import DeviceMode  # noqa: E402


async def one_run(kube: Kube, tag: str, nodes: int, gpus: int, pods: int,
                  governed: bool) -> float:
    features = await probe_features(kube, governed)
    pub = SlicePublisher(kube, features)
    await pub.ensure_classes()
    for i in range(nodes):
        inv = inventory(*[gpu(g, DeviceMode.SOFT if g % 2 else DeviceMode.EXCLUSIVE)
                          for g in range(gpus)])
        await kube.request("POST", "/api/v1/nodes", kwok_node(f"{tag}-n{i}", inv))
        _, n = await kube.request("GET", f"/api/v1/nodes/{tag}-n{i}")
        await pub.sync_node(n)
    ns = f"bench-{tag}"
    await kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    stop = asyncio.Event()
    tasks = []
    if governed:
        g = "/apis/gpugov.io/v1alpha1"
        await kube.request("POST", f"{g}/queues", {
            "apiVersion": "gpugov.io/v1alpha1", "kind": "Queue", "metadata": {"name": ns},
            "spec": {"quota": {"gpu": 1000}}})
        await kube.request("POST", f"{g}/tenants", {
            "apiVersion": "gpugov.io/v1alpha1", "kind": "Tenant", "metadata": {"name": ns},
            "spec": {"queue": ns, "namespaces": [ns]}})
        tasks.append(asyncio.create_task(Governor(kube, interval=0.2).run(stop)))
    t0 = time.perf_counter()
    sem = asyncio.Semaphore(32)

    async def make(i: int) -> None:
        req = request("g", "gpu.gpugov.io", selector='!device.attributes["gpu.gpugov.io"]'
                      '.sharing') if i % 2 else request(
            "g", SLICE_CLASS, capacity={"memory": "16Gi", "compute": "25"})
        async with sem:
            await kube.request("POST", f"/apis/resource.k8s.io/v1/namespaces/{ns}/"
                                       "resourceclaims", claim(f"c{i}", ns, [req]))
            await kube.request("POST", f"/api/v1/namespaces/{ns}/pods",
                               claim_pod(f"c{i}", ns, {"gpu": f"c{i}"}))

    await asyncio.gather(*(make(i) for i in range(pods)))
    while True:
        items, _ = await kube.list_all(f"/api/v1/namespaces/{ns}/pods")
        if sum(1 for p in items if p["spec"].get("nodeName")) >= pods:
            break
        if time.perf_counter() - t0 > 600:
            raise SystemExit(f"{tag}: not all bound after 600 s")
        await asyncio.sleep(0.1)
    took = time.perf_counter() - t0
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    return took


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--pods", type=int, default=64)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        plane = dra_plane(Path(d) / "plane")
        plane.start()
        try:
            await install_crds(plane.kubeconfig)
            kube = await Kube.from_kubeconfig(plane.kubeconfig)
            try:
                plain = await one_run(kube, "plain", a.nodes, a.gpus, a.pods, False)
                gov = await one_run(kube, "gov", a.nodes, a.gpus, a.pods, True)
            finally:
                await kube.close()
        finally:
            plane.stop()
    print(f"kube-scheduler DRA, plain slices : {a.pods} pods in {plain:.1f} s = "
          f"{a.pods / plain:.1f} pods/s")
    print(f"kube-scheduler DRA, governed     : {a.pods} pods in {gov:.1f} s = "
          f"{a.pods / gov:.1f} pods/s")
    print(f"governed / plain throughput      : {plain / gov:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
