"""Pods/s created through gpugov's admission webhook vs the same pods without it.

Starts its own local control plane (etcd + kube-apiserver), installs the CRDs, the default
Queue/Tenant and the webhook (as its own ServiceAccount, with the chart's RBAC), then, in
`--rounds` alternating rounds, creates N pods without GPU requests (they skip the webhook by
matchConditions) and N GPU pods (HAMi spelling) through the webhook. Prints pods/s of both,
their ratio (one run: both under the same load), the median and p99 create latency seen by
the client, and the webhook's own review latency (p50/p99 from its
`gpugov_webhook_review_seconds` histogram: the bucket bound at or above the quantile) and how
many pods it resolved by a live read instead of its watch cache. Usage:

    python bench/webhook_admission.py [--pods 500] [--concurrency 32] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
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
from gpugov.k8s.devcluster.plane import LocalControlPlane, probe
from gpugov.k8s.devcluster.rbac import apply_component_rbac
from gpugov.k8s.identities import SYSTEM_NAMESPACE
from gpugov.k8s.webhook import registration


def pod(name: str, gpu: bool) -> dict:
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20000"} if gpu else {"cpu": "100m"}
    return {"metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "x",
                                     "resources": {"limits": limits}}]}}


async def create(kubeconfig: Path, ns: str, names: list[str], gpu: bool, conc: int
                 ) -> tuple[float, list]:
    lat: list[float] = []
    async with api_client(kubeconfig, pool_size=conc) as api:
        core = client.CoreV1Api(api)
        sem = asyncio.Semaphore(conc)

        async def one(name: str) -> None:
            async with sem:
                t = time.perf_counter()
                await core.create_namespaced_pod(ns, pod(name, gpu))
                lat.append(time.perf_counter() - t)
        t0 = time.perf_counter()
        await asyncio.gather(*(one(n) for n in names))
        return time.perf_counter() - t0, lat


def histogram(text: str, name: str, label: str) -> list[tuple[float, float]]:
    """(upper bound, cumulative count) of one Prometheus histogram series."""
    out = []
    for m in re.finditer(rf'^{name}_bucket{{le="([^"]+)",{label}}} (\S+)$', text, re.M):
        out.append((float(m.group(1)), float(m.group(2))))
    return sorted(out)


def quantile(buckets: list[tuple[float, float]], q: float) -> float:
    total = buckets[-1][1] if buckets else 0.0
    for bound, count in buckets:
        if total and count >= q * total:
            return bound
    return float("nan")


def cpu_seconds(plane: LocalControlPlane) -> dict[str, float]:
    """CPU seconds (user + system) each process of the plane has used so far."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for name, proc in plane.procs.procs.items():
        try:
            fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            out[name] = (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            pass
    return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def namespace(kubeconfig: Path, name: str) -> None:
    async with api_client(kubeconfig) as api:
        await client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pods", type=int, default=500)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2)
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
            hook_kc = asyncio.run(apply_component_rbac(kc, "webhook", SYSTEM_NAMESPACE,
                                                       Path(tmp) / "kubeconfig-webhook"))
            url = start_webhook(plane, kubeconfig=hook_kc)
            asyncio.run(apply_webhook_configurations(
                kc, registration.configurations(plane.ca.pair.cert, url=url)))
            asyncio.run(namespace(kc, "bench"))
            secs = {False: 0.0, True: 0.0}
            lats: dict[bool, list[float]] = {False: [], True: []}
            cpu: dict[bool, dict[str, float]] = {False: {}, True: {}}
            for r in range(args.rounds):
                for gpu in (False, True):
                    names = [f"{'g' if gpu else 'c'}{r}-{i}" for i in range(args.pods)]
                    before = cpu_seconds(plane)
                    took, lat = asyncio.run(create(kc, "bench", names, gpu, args.concurrency))
                    for proc, used in cpu_seconds(plane).items():
                        cpu[gpu][proc] = cpu[gpu].get(proc, 0.0) + used - before.get(proc, 0)
                    secs[gpu] += took
                    lats[gpu] += lat
            metrics = (probe(url + "/metrics", plane.ssl_context()) or b"").decode()
        finally:
            plane.stop()
    n = args.pods * args.rounds
    rate = {gpu: n / secs[gpu] for gpu in secs}
    print(f"pods={args.pods} x {args.rounds} rounds concurrency={args.concurrency}")
    for gpu, name in ((False, "plain pods (no webhook)"), (True, "GPU pods (webhook)")):
        print(f"{name:26s} {rate[gpu]:8.1f} pods/s   create latency median "
              f"{statistics.median(lats[gpu]) * 1000:6.1f} ms  p99 "
              f"{pct(lats[gpu], 0.99) * 1000:6.1f} ms")
    print(f"ratio GPU/plain            {rate[True] / rate[False]:8.2f}")
    for gpu, name in ((False, "plain"), (True, "GPU")):
        print(f"CPU ms per {name} pod: " + ", ".join(
            f"{proc} {used * 1000 / n:.1f}" for proc, used in sorted(cpu[gpu].items())))
    buckets = histogram(metrics, "gpugov_webhook_review_seconds", 'webhook="mutate"')
    print(f"inside the webhook (mutate, {int(buckets[-1][1]) if buckets else 0} reviews): "
          f"p50 <= {quantile(buckets, 0.5) * 1000:g} ms, p99 <= "
          f"{quantile(buckets, 0.99) * 1000:g} ms")
    live = re.findall(r'^gpugov_webhook_tenancy_live_reads\{why="([^"]+)"\} (\S+)$', metrics,
                      re.M)
    print("tenancy read live instead of from the cache: "
          + (", ".join(f"{w} {float(c):g}" for w, c in live) or "none"))


if __name__ == "__main__":
    main()
