"""Scheduling throughput on a real control plane: gpugov's scheduler vs kube-scheduler.

A local control plane (etcd, kube-apiserver, kwok; gpugov.k8s.devcluster) with N kwok nodes
x G GPUs. Each phase creates P pending one-GPU pods at once (64 requests in flight, no
scheduler running), then starts its scheduler and measures the time from the start until
the last pod is bound (seen through a watch): draining a backlog, the scheduler's start
and first list included (creating pods on a 2-core machine is slower than either scheduler,
so timing from the first creation would measure the apiserver). Phases, on one cluster:
1. gpugov scheduler, P whole-GPU pods;  2. kube-scheduler (fresh pods: the first phase's
pods are deleted), P whole-GPU pods;  3. gpugov scheduler, F fractional pods (memory
slices of `--slice-mib`, i.e. 1/8 of an 80 GiB card by default);  4. with `--mixed M`,
gpugov on a mixed fleet (the plain nodes are replaced by as many H100 nodes with MIG, soft,
time-slice and exclusive devices, half of them tainted): M pods of three tenants whose
queues are over quota (they borrow), MIG 1g.10gb, 20 GB memory slices, time-slice replicas,
whole GPUs selecting the tainted pool, and gangs of 8 whole GPUs (PodGroups); timed until
no pod was bound for `--settle` seconds. Client QPS limits are raised for both
(kube-scheduler: qps/burst 5000/10000; gpugov has none, writes are bounded by
--concurrency). Prints pods/s per phase, the gpugov / kube-scheduler ratio and the peak
resident memory of each gpugov scheduler process (VmHWM).

    python bench/k8s_throughput.py                       # 1000 x 8 GPUs, 7000 + 20000 pods
    python bench/k8s_throughput.py --nodes 50 --pods 300 --fractional 1000   # a quick look
    python bench/k8s_throughput.py --profile /tmp/sched.prof   # cProfile of gpugov's phases
    python bench/k8s_throughput.py --nodes 5000 --pods 30000 --fractional 0 --mixed 30000
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
from gpugov.k8s.devcluster.cluster_file import node_objects, parse_cluster_yaml
from gpugov.k8s.devcluster.dev import install_crds
from gpugov.k8s.devcluster.plane import LocalControlPlane
from gpugov.k8s.devcluster.processes import free_port
from gpugov.k8s.scheduler import names
from gpugov.k8s.scheduler.harness import (
    create_all,
    gpu_node,
    gpu_pod,
    gpugov_argv,
    install_podgroup_crd,
    untaint_ready,
)
from gpugov.k8s.scheduler.kube import Kube

NS = "bench"
GPUGOV = "gpugov-bench"


async def wait_bound(kube: Kube, total: int, deadline_s: float, path: str = "",
                     settle_s: float = 0.0) -> tuple[float, int]:
    """Watch `path` (default: the bench namespace's pods) until `total` pods are bound, or,
    with `settle_s`, until none was bound for that long after the first binding (a first cycle
    over tens of thousands of pods takes minutes; `deadline_s` bounds the wait for it);
    (time of the last binding, bound)."""
    path = path or f"/api/v1/namespaces/{NS}/pods"
    items, rv = await kube.list_all(path)
    done = {_key(p) for p in items if p["spec"].get("nodeName")}
    bound0 = len(done)
    last = time.monotonic()
    end = time.monotonic() + deadline_s
    while len(done) < total:
        now = time.monotonic()
        if settle_s and len(done) > bound0 and now - last > settle_s:
            break
        if now > end:
            raise TimeoutError(f"only {len(done)} of {total} pods bound after {deadline_s} s")
        try:
            window = int(min(60, settle_s)) if settle_s else 60
            async for etype, obj in kube.watch(path, rv, window):
                rv = obj.get("metadata", {}).get("resourceVersion", rv)
                if etype in ("ADDED", "MODIFIED") and (obj.get("spec") or {}).get(
                        "nodeName") and _key(obj) not in done:
                    done.add(_key(obj))
                    last = time.monotonic()
                if len(done) >= total or (settle_s and len(done) > bound0
                                          and time.monotonic() - last > settle_s):
                    break
        except Exception:  # an expired watch: list again
            items, rv = await kube.list_all(path)
            for p in items:
                if p["spec"].get("nodeName") and _key(p) not in done:
                    done.add(_key(p))
                    last = time.monotonic()
    return last, len(done)


def _key(pod: dict) -> str:
    return f"{pod['metadata'].get('namespace')}/{pod['metadata']['name']}"


def peak_rss_mib(plane: LocalControlPlane, name: str) -> dict[str, float]:
    """Peak and current resident memory of a started process (MiB), from /proc."""
    out: dict[str, float] = {}
    try:
        status = Path(f"/proc/{plane.procs.procs[name].pid}/status").read_text()
    except (OSError, KeyError):
        return out
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            out[key] = round(int(value.split()[0]) / 1024, 1)
    return out


async def delete_pods(kube: Kube) -> None:
    """Delete the bench namespace's pods and wait until they are gone (a collection delete of
    tens of thousands of pods outlives the apiserver's request timeout: it is asked again)."""
    while True:
        try:
            await kube.request("DELETE", f"/api/v1/namespaces/{NS}/pods",
                               {"gracePeriodSeconds": 0}, timeout=600)
        except Exception as e:  # the apiserver cut the request at its timeout; it goes on
            print(json.dumps({"delete_pods": f"{type(e).__name__}: {e}"[:200]}), flush=True)
        items, _ = await kube.list_all(f"/api/v1/namespaces/{NS}/pods")
        if not items:
            return
        await asyncio.sleep(5.0)


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
    last, _ = await wait_bound(kube, count, 3600)
    total = last - t0
    row = {"phase": label, "scheduler": scheduler, "pods": count,
           "create_s": round(created, 2), "all_bound_s": round(total, 2),
           "pods_per_s": round(count / total, 1)}
    print(json.dumps(row), flush=True)
    return row


MIXED_NS = ("mixed-a", "mixed-b", "mixed-c")


def mixed_nodes(n: int) -> list[dict]:
    """H100 nodes: MIG (3g+2g+1g+1g) on devices 0-1, soft 2-3, time-slice x4 on 4, exclusive
    5-7; half of them (zone b) tainted dedicated=infer:NoSchedule."""
    pool = {"model": "H100-SXM5-80GB", "gpus": 8, "cpuMilli": 192000, "memoryMiB": 2097152,
            "topology": "nvswitch", "devices": [
                {"index": "0-1", "mode": "mig", "layout": ["3g.40gb", "2g.20gb", "1g.10gb",
                                                           "1g.10gb"]},
                {"index": "2-3", "mode": "soft"},
                {"index": "4", "mode": "timeslice", "replicas": 4}]}
    taint = [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]
    cluster = parse_cluster_yaml({"nodePools": [
        dict(pool, name="mixa", count=n - n // 2, labels={"zone": "a"}),
        dict(pool, name="mixb", count=n // 2, labels={"zone": "b"}, taints=taint)]}, "bench")
    return node_objects(cluster)


def mixed_pods(count: int) -> tuple[list[dict], list[dict]]:
    """(pods, PodGroups): per node the fleet holds 4 MIG 1g.10gb, 8 memory slices, 4 time-slice
    replicas and 3 whole GPUs; pods come in that mix (whole GPUs half selecting the tainted
    zone b, half in gangs of 8), spread over three tenants' namespaces."""
    tol = [{"key": "dedicated", "operator": "Exists"}]
    kinds = (["mig"] * 4 + ["mem"] * 8 + ["ts"] * 4 + ["whole-b"] * 1 + ["gang"] * 2)
    pods: list[dict] = []
    groups: list[dict] = []
    gang_members: dict[str, list[str]] = {}
    current: dict[str, str] = {}  # namespace -> the PodGroup being filled
    for i in range(count):
        ns = MIXED_NS[i % 3]
        kind = kinds[i % len(kinds)]
        name = f"{kind}-{i}"
        if kind == "mig":
            p = gpu_pod(name, ns, GPUGOV, {"nvidia.com/mig-1g.10gb": "1"}, tolerations=[])
        elif kind == "mem":
            p = gpu_pod(name, ns, GPUGOV, {names.GPU_RESOURCE: "1",
                                           "nvidia.com/gpumem": "20000"}, tolerations=tol)
        elif kind == "ts":
            p = gpu_pod(name, ns, GPUGOV, {"nvidia.com/gpu.shared": "1"}, tolerations=tol)
        elif kind == "whole-b":
            p = gpu_pod(name, ns, GPUGOV, tolerations=tol, node_selector={"zone": "b"})
        else:
            members = gang_members.setdefault(ns, [])
            if len(members) % 8 == 0:
                current[ns] = f"g-{i}"
                groups.append({"apiVersion": f"{names.PODGROUP_GROUP}/{names.PODGROUP_VERSION}",
                               "kind": "PodGroup",
                               "metadata": {"name": current[ns], "namespace": ns},
                               "spec": {"minMember": 8}})
            members.append(name)
            p = gpu_pod(name, ns, GPUGOV, tolerations=tol,
                        labels={names.PODGROUP_LABEL: current[ns]})
        pods.append(p)
    # a gang left short of 8 at the end would wait forever: drop its pods and group
    for ns, members in gang_members.items():
        short = len(members) % 8
        if short:
            gone = set(members[-short:])
            pods = [p for p in pods if not (p["metadata"]["namespace"] == ns
                                            and p["metadata"]["name"] in gone)]
            last = next(g for g in reversed(groups) if g["metadata"]["namespace"] == ns)
            groups.remove(last)
    return pods, groups


async def mixed_phase(kube: Kube, plane: LocalControlPlane, args: argparse.Namespace,
                      profile: str | None) -> dict:
    """Replace the plain nodes by the mixed fleet, create the tenants' pods, start gpugov and
    time until no pod was bound for `--settle` s."""
    await kube.request("DELETE", "/api/v1/nodes", {}, timeout=600)
    nodes = mixed_nodes(args.nodes)
    await create_all(kube, "/api/v1/nodes", nodes)
    await install_podgroup_crd(kube)
    total_gpus = 8 * args.nodes
    for i, ns in enumerate(MIXED_NS):  # quotas far below what the pods ask: all borrow
        await create_all(kube, "/api/v1/namespaces", [{"metadata": {"name": ns}}])
        await create_all(kube, f"/apis/{names.GROUP}/{names.VERSION}/{names.QUEUES}", [{
            "apiVersion": "gpugov.io/v1alpha1", "kind": "Queue", "metadata": {"name": ns},
            "spec": {"quota": {"gpu": max(1, total_gpus // 20)}, "weight": i + 1}}])
        await create_all(kube, f"/apis/{names.GROUP}/{names.VERSION}/{names.TENANTS}", [{
            "apiVersion": "gpugov.io/v1alpha1", "kind": "Tenant", "metadata": {"name": ns},
            "spec": {"namespaces": [ns], "queue": ns, "trust": "trusted"}}])
    await asyncio.sleep(5)  # kwok marks the nodes Ready
    # no node lifecycle controller here: lift the apiserver's not-ready taint ourselves
    node_names = [n["metadata"]["name"] for n in nodes]
    await asyncio.gather(*(untaint_ready(kube, node_names[i::32]) for i in range(32)))
    pods, groups = mixed_pods(min(args.mixed, 12 * args.nodes))
    for g in groups:
        ns = g["metadata"]["namespace"]
        await create_all(kube, f"/apis/{names.PODGROUP_GROUP}/{names.PODGROUP_VERSION}/"
                               f"namespaces/{ns}/{names.PODGROUPS}", [g])
    t = time.monotonic()
    for ns in MIXED_NS:
        await create_all(kube, f"/api/v1/namespaces/{ns}/pods",
                         [p for p in pods if p["metadata"]["namespace"] == ns])
    created = time.monotonic() - t
    t0 = time.monotonic()
    start_gpugov(plane, "gpugov-3", profile, args.concurrency)
    last, bound = await wait_bound(kube, len(pods), 7200, "/api/v1/pods", args.settle)
    took = last - t0
    row = {"phase": "gpugov-mixed", "scheduler": GPUGOV, "pods": len(pods),
           "podgroups": len(groups), "bound": bound, "create_s": round(created, 2),
           "all_bound_s": round(took, 2), "pods_per_s": round(bound / took, 1),
           "rss_mib": peak_rss_mib(plane, "gpugov-3")}
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


def _profiled(args: argparse.Namespace, phase: str) -> bool:
    return bool(args.profile) and phase in args.profile_phases.split(",")


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
        prof1 = f"{args.profile}.whole" if _profiled(args, "whole") else None
        rows.append(await phase(kube, "gpugov-whole", GPUGOV, args.pods, whole,
                                lambda: start_gpugov(plane, "gpugov-1", prof1,
                                                     args.concurrency)))
        print(json.dumps({"gpugov-whole rss_mib": peak_rss_mib(plane, "gpugov-1")}),
              flush=True)
        plane.procs.stop("gpugov-1", grace=30)
        await delete_pods(kube)
        rows.append(await phase(kube, "kube-scheduler-whole", "default-scheduler", args.pods,
                                whole, lambda: start_kube_scheduler(plane, wait=False)))
        plane.procs.stop("kube-scheduler", grace=10)
        await delete_pods(kube)
        if args.fractional:
            prof2 = f"{args.profile}.fractional" if _profiled(args, "fractional") else None
            rows.append(await phase(kube, "gpugov-fractional", GPUGOV, args.fractional,
                                    {names.GPU_RESOURCE: "1",
                                     "nvidia.com/gpumem": str(args.slice_mib)},
                                    lambda: start_gpugov(plane, "gpugov-2", prof2,
                                                         args.concurrency)))
            print(json.dumps({"gpugov-fractional rss_mib": peak_rss_mib(plane, "gpugov-2")}),
                  flush=True)
            plane.procs.stop("gpugov-2", grace=30)
            await delete_pods(kube)
        prof3 = f"{args.profile}.mixed" if _profiled(args, "mixed") else None
        if args.mixed:
            rows.append(await mixed_phase(kube, plane, args, prof3))
            plane.procs.stop("gpugov-3", grace=60)
        g, k = rows[0]["pods_per_s"], rows[1]["pods_per_s"]
        print(json.dumps({"gpugov_pods_per_s": g, "kube_scheduler_pods_per_s": k,
                          "ratio": round(g / k, 2),
                          "fractional_pods_per_s": rows[2]["pods_per_s"] if args.fractional
                          else None,
                          "mixed_pods_per_s": rows[-1]["pods_per_s"] if args.mixed else None}),
              flush=True)
        for p in (prof1, f"{args.profile}.fractional" if _profiled(args, "fractional")
                  else None, prof3):
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
    ap.add_argument("--mixed", type=int, default=0,
                    help="pods of the mixed phase on a mixed fleet of --nodes nodes (0: none)")
    ap.add_argument("--settle", type=float, default=60.0,
                    help="mixed phase: stop when no pod was bound for this long (s)")
    ap.add_argument("--profile", default="", help="write cProfile stats to FILE.{whole,...}")
    ap.add_argument("--profile-phases", default="whole,fractional,mixed",
                    help="the gpugov phases --profile applies to (comma list)")
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
