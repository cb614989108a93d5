"""Scheduling throughput on a real control plane: gpugov's scheduler vs kube-scheduler.

A local control plane (etcd, kube-apiserver, kwok; gpugov.k8s.devcluster) with N kwok nodes
x G GPUs. Each phase creates P pending one-GPU pods at once (64 requests in flight, no
scheduler running), then starts its scheduler and measures the time from the start until
the last pod is bound (seen through a watch): draining a backlog, the scheduler's start
and first list included (creating pods on a 2-core machine is slower than either scheduler,
so timing from the first creation would measure the apiserver). Phases, on one cluster:
1. gpugov scheduler, P whole-GPU pods;  2. kube-scheduler (fresh pods: the first phase's
pods are deleted), P whole-GPU pods;  3. gpugov scheduler, F fractional pods (memory
slices of `--slice-mib`, i.e. 1/8 of an 80 GiB card by default). Client QPS limits are
raised for both (kube-scheduler: qps/burst 5000/10000; gpugov has none, writes are bounded
by --concurrency). Prints pods/s per phase and the gpugov / kube-scheduler ratio.

    python bench/k8s_throughput.py                       # 1000 x 8 GPUs, 7000 + 20000 pods
    python bench/k8s_throughput.py --nodes 50 --pods 300 --fractional 1000   # a quick look
    python bench/k8s_throughput.py --profile /tmp/sched.prof   # cProfile of gpugov's phases
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pstats
import ssl
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

from gpugov.k8s.devcluster import build
from gpugov.k8s.devcluster.dev import install_crds
from gpugov.k8s.devcluster.plane import LocalControlPlane
from gpugov.k8s.devcluster.processes import free_port
from gpugov.k8s.scheduler import names
from gpugov.k8s.scheduler.harness import create_all, gpu_node, gpu_pod, gpugov_argv
from gpugov.k8s.scheduler.kube import Kube

NS = "bench"
GPUGOV = "gpugov-bench"


async def wait_bound(kube: Kube, total: int, deadline_s: float) -> float:
    """Watch the namespace until `total` pods are bound; returns the time of the last one."""
    items, rv = await kube.list_all(f"/api/v1/namespaces/{NS}/pods")
    done = {p["metadata"]["name"] for p in items if p["spec"].get("nodeName")}
    last = time.monotonic()
    end = time.monotonic() + deadline_s
    while len(done) < total:
        if time.monotonic() > end:
            raise TimeoutError(f"only {len(done)} of {total} pods bound after {deadline_s} s")
        try:
            async for etype, obj in kube.watch(f"/api/v1/namespaces/{NS}/pods", rv, 60):
                rv = obj.get("metadata", {}).get("resourceVersion", rv)
                if etype in ("ADDED", "MODIFIED") and (obj.get("spec") or {}).get("nodeName"):
                    name = obj["metadata"]["name"]
                    if name not in done:
                        done.add(name)
                        last = time.monotonic()
                if len(done) >= total:
                    break
        except Exception:  # an expired watch: list again
            items, rv = await kube.list_all(f"/api/v1/namespaces/{NS}/pods")
            for p in items:
                if p["spec"].get("nodeName") and p["metadata"]["name"] not in done:
                    done.add(p["metadata"]["name"])
                    last = time.monotonic()
    return last


async def delete_pods(kube: Kube) -> None:
    await kube.request("DELETE", f"/api/v1/namespaces/{NS}/pods", {"gracePeriodSeconds": 0},
                       timeout=600)
    while True:
        items, _ = await kube.list_all(f"/api/v1/namespaces/{NS}/pods")
        if not items:
            return
        await asyncio.sleep(1.0)


async def phase(kube: Kube, label: str, scheduler: str, count: int, limits: dict[str, str],
                start) -> dict:
    """Create `count` pending pods, then start the scheduler (`start()`) and time until the
    last is bound: the time to drain a backlog created at once, scheduler start included."""
    objs = [gpu_pod(f"{label}-{i}", NS, scheduler, limits=limits) for i in range(count)]
    t = time.monotonic()
    await create_all(kube, "/api/v1/namespaces/{ns}/pods", objs)
    created = time.monotonic() - t
    t0 = time.monotonic()
    start()
    last = await wait_bound(kube, count, 3600)
    total = last - t0
    row = {"phase": label, "scheduler": scheduler, "pods": count,
           "create_s": round(created, 2), "all_bound_s": round(total, 2),
           "pods_per_s": round(count / total, 1)}
    print(json.dumps(row), flush=True)
    return row


def start_gpugov(plane: LocalControlPlane, name: str, profile: str | None,
                 concurrency: int) -> None:
    env = dict(os.environ)
    if profile:
        env["GPUGOV_PROFILE"] = profile
    plane.procs.start(name, gpugov_argv(
        "scheduler", "--kubeconfig", str(plane.kubeconfig), "--scheduler-name", GPUGOV,
        "--concurrency", str(concurrency), "--no-events"), env=env)


def wait_log(plane: LocalControlPlane, name: str, text: str, timeout: float = 300) -> None:
    log = Path(plane.procs.procs[name].log)
    end = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        if not plane.procs.procs[name].running() or time.monotonic() > end:
            raise RuntimeError(f"{name} did not say {text!r}:\n{log.read_text()[-2000:]}")
        time.sleep(0.2)


def start_kube_scheduler(plane: LocalControlPlane, wait: bool = True) -> None:
    cfg = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
           "clientConnection": {"kubeconfig": str(plane.kubeconfig), "qps": 5000,
                                "burst": 10000},
           "leaderElection": {"leaderElect": False}}
    path = plane.workdir / "bench-kube-scheduler.yaml"
    path.write_text(yaml.safe_dump(cfg))
    kc = str(plane.kubeconfig)
    plane.procs.start("kube-scheduler", [
        str(plane.bin / "kube-scheduler"), f"--config={path}", "--bind-address=127.0.0.1",
        f"--secure-port={free_port()}", f"--authentication-kubeconfig={kc}",
        f"--authorization-kubeconfig={kc}", f"--cert-dir={plane.workdir / 'sched-certs'}"])
    if not wait:
        return
    port = int(next(a for a in plane.procs.procs["kube-scheduler"].argv
                    if a.startswith("--secure-port=")).split("=")[1])
    end = time.monotonic() + 120
    while not _healthy(f"https://127.0.0.1:{port}/healthz"):
        if time.monotonic() > end:
            raise RuntimeError("kube-scheduler did not become healthy")
        time.sleep(0.2)
    time.sleep(3)  # as for gpugov: time to list the cluster before the pods come


def _healthy(url: str) -> bool:
    """kube-scheduler's /healthz answers "ok" (its serving certificate is self-signed)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=2) as r:  # noqa: S310 - loopback
            return r.read() == b"ok"
    except OSError:
        return False


def top(profile: str, n: int = 25) -> None:
    print(f"\n== where gpugov's scheduler spent its time ({profile}) ==")
    pstats.Stats(profile).sort_stats("cumulative").print_stats(n)
    pstats.Stats(profile).sort_stats("tottime").print_stats(n)


async def run(args: argparse.Namespace, plane: LocalControlPlane) -> None:
    kube = await Kube.from_kubeconfig(plane.kubeconfig, pool=128)
    try:
        await install_crds(plane.kubeconfig)
        await create_all(kube, "/apis/gpugov.io/v1alpha1/queues", [{
            "apiVersion": "gpugov.io/v1alpha1", "kind": "Queue",
            "metadata": {"name": "bench"}, "spec": {}}])
        await create_all(kube, "/apis/gpugov.io/v1alpha1/tenants", [{
            "apiVersion": "gpugov.io/v1alpha1", "kind": "Tenant", "metadata": {"name": "all"},
            "spec": {"queue": "bench", "namespaceSelector": {}}}])
        await create_all(kube, "/api/v1/namespaces", [{"metadata": {"name": NS}}])
        t = time.monotonic()
        nodes = [gpu_node(f"bench-{i:04d}", args.gpus) for i in range(args.nodes)]
        if args.no_kwok:  # nobody will mark them Ready: create them Ready
            for n in nodes:
                n["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        await create_all(kube, "/api/v1/nodes", nodes)
        print(json.dumps({"nodes": args.nodes, "gpus_per_node": args.gpus,
                          "create_nodes_s": round(time.monotonic() - t, 1)}), flush=True)
        await asyncio.sleep(5)  # kwok marks them Ready
        whole = {names.GPU_RESOURCE: "1"}
        rows = []
        prof1 = f"{args.profile}.whole" if args.profile else None
        rows.append(await phase(kube, "gpugov-whole", GPUGOV, args.pods, whole,
                                lambda: start_gpugov(plane, "gpugov-1", prof1,
                                                     args.concurrency)))
        plane.procs.stop("gpugov-1", grace=30)
        await delete_pods(kube)
        rows.append(await phase(kube, "kube-scheduler-whole", "default-scheduler", args.pods,
                                whole, lambda: start_kube_scheduler(plane, wait=False)))
        plane.procs.stop("kube-scheduler", grace=10)
        await delete_pods(kube)
        if args.fractional:
            prof2 = f"{args.profile}.fractional" if args.profile else None
            rows.append(await phase(kube, "gpugov-fractional", GPUGOV, args.fractional,
                                    {names.GPU_RESOURCE: "1",
                                     "nvidia.com/gpumem": str(args.slice_mib)},
                                    lambda: start_gpugov(plane, "gpugov-2", prof2,
                                                         args.concurrency)))
            plane.procs.stop("gpugov-2", grace=30)
        g, k = rows[0]["pods_per_s"], rows[1]["pods_per_s"]
        print(json.dumps({"gpugov_pods_per_s": g, "kube_scheduler_pods_per_s": k,
                          "ratio": round(g / k, 2),
                          "fractional_pods_per_s": rows[2]["pods_per_s"] if args.fractional
                          else None}), flush=True)
        for p in (prof1, f"{args.profile}.fractional" if args.profile else None):
            if p and Path(p).exists():
                top(p)
    finally:
        await kube.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--pods", type=int, default=7000)
    ap.add_argument("--fractional", type=int, default=20000)
    ap.add_argument("--slice-mib", type=int, default=10240)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--profile", default="", help="write cProfile stats to FILE.{whole,...}")
    ap.add_argument("--workdir", default="", help="control plane folder (default: a temp one)")
    ap.add_argument("--no-kwok", action="store_true",
                    help="no kwok: nodes are created Ready and pods are never run")
    args = ap.parse_args()
    if args.pods > args.nodes * args.gpus:
        sys.exit(f"--pods {args.pods} exceeds the cluster's {args.nodes * args.gpus} GPUs")
    needed = ("etcd", "kube-apiserver", "kube-scheduler") + (() if args.no_kwok else ("kwok",))
    build.ensure_binaries(needed)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="gpugov-bench-"))
    plane = LocalControlPlane(workdir, controller_manager=False, kwok=not args.no_kwok)
    plane.start()
    try:
        asyncio.run(run(args, plane))
    finally:
        plane.stop()


if __name__ == "__main__":
    main()
