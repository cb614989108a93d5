"""Pods/s created through gpugov's admission webhook vs the same pods without it.

Starts its own local control plane (etcd + kube-apiserver), installs the CRDs, the default
Queue/Tenant and the webhook, then creates N GPU pods (HAMi spelling) with the webhook
registered, and N pods without GPU requests (they skip the webhook by matchConditions).
Prints pods/s for both and the median admission latency. Usage:

    python bench/webhook_admission.py [--pods 500] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from kubernetes_asyncio import client

from gpugov.k8s.devcluster import build
from gpugov.k8s.devcluster.client import api_client
from gpugov.k8s.devcluster.dev import (
    apply_webhook_configurations,
    create_defaults,
    install_crds,
    start_webhook,
)
from gpugov.k8s.devcluster.plane import LocalControlPlane
from gpugov.k8s.webhook import registration


def pod(i: int, gpu: bool) -> dict:
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20000"} if gpu else {"cpu": "100m"}
    return {"metadata": {"name": f"{'g' if gpu else 'c'}-{i}"},
            "spec": {"containers": [{"name": "c", "image": "x",
                                     "resources": {"limits": limits}}]}}


async def create(kubeconfig: Path, ns: str, n: int, gpu: bool, conc: int) -> tuple[float, list]:
    lat: list[float] = []
    async with api_client(kubeconfig, pool_size=conc) as api:
        core = client.CoreV1Api(api)
        sem = asyncio.Semaphore(conc)

        async def one(i: int) -> None:
            async with sem:
                t = time.perf_counter()
                await core.create_namespaced_pod(ns, pod(i, gpu))
                lat.append(time.perf_counter() - t)
        t0 = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(n)))
        return time.perf_counter() - t0, lat


async def namespace(kubeconfig: Path, name: str) -> None:
    async with api_client(kubeconfig) as api:
        await client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pods", type=int, default=500)
    ap.add_argument("--concurrency", type=int, default=32)
    args = ap.parse_args()
    build.ensure_binaries(("etcd", "kube-apiserver"))
    with tempfile.TemporaryDirectory() as tmp:
        plane = LocalControlPlane(Path(tmp) / "plane", controller_manager=False, kwok=False,
                                  extra_args={"kube-apiserver": ["--max-requests-inflight=2000",
                                                                 "--enable-priority-and-fairness=false"]})
        plane.start()
        try:
            kc = plane.kubeconfig
            asyncio.run(install_crds(kc))
            asyncio.run(create_defaults(kc))
            url = start_webhook(plane)
            asyncio.run(apply_webhook_configurations(
                kc, registration.configurations(plane.ca.pair.cert, url=url)))
            asyncio.run(namespace(kc, "bench"))
            rows = []
            for gpu in (False, True):
                secs, lat = asyncio.run(create(kc, "bench", args.pods, gpu, args.concurrency))
                rows.append((("GPU pods (webhook)" if gpu else "plain pods (no webhook)"),
                             args.pods / secs, statistics.median(lat) * 1000))
        finally:
            plane.stop()
    print(f"pods={args.pods} concurrency={args.concurrency}")
    for name, rate, med in rows:
        print(f"{name:26s} {rate:8.1f} pods/s   median create latency {med:6.1f} ms")


if __name__ == "__main__":
    main()
