"""DRA claim allocation on gpugov's published slices: kube-scheduler (plain and governed)
against gpugov's own scheduler allocating the claims (docs/dra.md, path 1).

Usage: python bench/dra_allocation.py [--nodes 8] [--gpus 8] [--pods 64] [--no-governed]
Starts a local v1.34 control plane with the DRA alpha gates gpugov uses and kwok nodes whose
GPUs are half exclusive and half soft, publishes their slices, then times creating --pods
claims + pods (half one whole GPU by a CEL selector on the model, half 16 GiB / 25 % slices)
until all are bound: by kube-scheduler with plain slices; by kube-scheduler with
gpugov's binding conditions and `gpugov dra governor`; and by gpugov's scheduler, which
translates the claims, places them in its one state with the queue and writes each claim's
allocation and reservation before the Binding. Each run has its own nodes and namespace on the
same cluster. Prints pods/s for each, the ratios, and where gpugov's time goes (deciding,
claim writes, bindings). One run, same machine; numbers under load are noisy.
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
from gpugov.k8s.scheduler import dra_alloc  # noqa: E402
from gpugov.k8s.scheduler.apply import Applier  # noqa: E402
from gpugov.k8s.scheduler.kube import Kube  # noqa: E402
from gpugov.k8s.scheduler.runner import Runner  # noqa: E402
from gpugov.k8s.scheduler.state import SchedulerState  # noqa: E402
from gpugov.model.devices import DeviceMode  # noqa: E402


async def one_run(kube: Kube, tag: str, nodes: int, gpus: int, pods: int,
                  governed: bool, gpugov: bool = False) -> float:
    features = await probe_features(kube, governed)
    pub = SlicePublisher(kube, features)
    await pub.ensure_classes()
    for i in range(nodes):
        inv = inventory(*[gpu(g, DeviceMode.SOFT if g % 2 else DeviceMode.EXCLUSIVE)
                          for g in range(gpus)])
        node = kwok_node(f"{tag}-n{i}", inv)
        node["metadata"]["labels"]["gpugov-bench"] = tag
        await kube.request("POST", "/api/v1/nodes", node)
        _, n = await kube.request("GET", f"/api/v1/nodes/{tag}-n{i}")
        await pub.sync_node(n)
    ns = f"bench-{tag}"
    await kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    stop = asyncio.Event()
    tasks = []
    if governed or gpugov:
        g = "/apis/gpugov.io/v1alpha1"
        await kube.request("POST", f"{g}/queues", {
            "apiVersion": "gpugov.io/v1alpha1", "kind": "Queue", "metadata": {"name": ns},
            "spec": {"quota": {"gpu": 1000}}})
        await kube.request("POST", f"{g}/tenants", {
            "apiVersion": "gpugov.io/v1alpha1", "kind": "Tenant", "metadata": {"name": ns},
            "spec": {"queue": ns, "namespaces": [ns]}})
    if governed:
        tasks.append(asyncio.create_task(Governor(kube, interval=0.2).run(stop)))
    runner = None
    if gpugov:
        state = SchedulerState(scheduler_name="gpugov-bench", node_selector={"gpugov-bench": tag})
        runner = Runner(kube, state, Applier(kube, state, events=False), period=0.5,
                        batch_wait=0.05)
        tasks.append(asyncio.create_task(runner.run(stop)))
        await asyncio.sleep(1.0)  # listed and watching before the pods arrive
    t0 = time.perf_counter()
    sem = asyncio.Semaphore(32)

    async def make(i: int) -> None:
        req = request("g", "gpu.gpugov.io", selector='device.attributes["gpu.gpugov.io"]'
                      '.model == "A100-SXM4-80GB"') if i % 2 else request(
            "g", SLICE_CLASS, capacity={"memory": "16Gi", "compute": "25"})
        async with sem:
            await kube.request("POST", f"/apis/resource.k8s.io/v1/namespaces/{ns}/"
                                       "resourceclaims", claim(f"c{i}", ns, [req]))
            await kube.request("POST", f"/api/v1/namespaces/{ns}/pods",
                               claim_pod(f"c{i}", ns, {"gpu": f"c{i}"},
                                         scheduler="gpugov-bench" if gpugov else
                                         "default-scheduler"))

    await asyncio.gather(*(make(i) for i in range(pods)))
    while True:
        items, _ = await kube.list_all(f"/api/v1/namespaces/{ns}/pods")
        if sum(1 for p in items if p["spec"].get("nodeName")) >= pods:
            break
        if time.perf_counter() - t0 > LIMIT:
            why = {str(c.get("message"))[:200] for p in items if not p["spec"].get("nodeName")
                   for c in (p.get("status") or {}).get("conditions") or []
                   if c.get("type") == "PodScheduled"}
            raise SystemExit(f"{tag}: not all bound after {LIMIT} s: {sorted(why)[:3]}")
        await asyncio.sleep(0.1)
    took = time.perf_counter() - t0
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    if governed:  # its claims stay; charged to no queue, they hold no later run's fair share
        g = "/apis/gpugov.io/v1alpha1"
        await kube.request("DELETE", f"{g}/tenants/{ns}")
        await kube.request("DELETE", f"{g}/queues/{ns}")
    if runner is not None:
        SPENT["cycles"] = runner.cycles
        SPENT["rebuilds"] = runner.state.rebuilds
    return took


LIMIT = float(__import__("os").environ.get("BENCH_LIMIT", "300"))
#: where gpugov's scheduler spends its time (seconds, summed; writes overlap each other)
SPENT: dict[str, float] = {"decide": 0.0, "claim writes": 0.0, "bindings": 0.0}


def _timed(name: str, fn):  # noqa: ANN001, ANN202 - a thin wrapper for the bench only
    if asyncio.iscoroutinefunction(fn):
        async def wrapped(*a, **kw):  # noqa: ANN002, ANN003, ANN202
            t = time.perf_counter()
            try:
                return await fn(*a, **kw)
            finally:
                SPENT[name] += time.perf_counter() - t
    else:
        def wrapped(*a, **kw):  # noqa: ANN002, ANN003, ANN202
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                SPENT[name] += time.perf_counter() - t
    return wrapped


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--pods", type=int, default=64)
    ap.add_argument("--no-governed", action="store_true", help="skip the governed run")
    a = ap.parse_args()
    dra_alloc.write_claims = _timed("claim writes", dra_alloc.write_claims)
    SchedulerState.cycle = _timed("decide", SchedulerState.cycle)
    Applier._call = _timed("bindings", Applier._call)  # binds, conditions, Queue status
    with tempfile.TemporaryDirectory() as d:
        plane = dra_plane(Path(d) / "plane")
        plane.start()
        try:
            await install_crds(plane.kubeconfig)
            kube = await Kube.from_kubeconfig(plane.kubeconfig)
            try:
                plain = await one_run(kube, "plain", a.nodes, a.gpus, a.pods, False)
                gov = None if a.no_governed else \
                    await one_run(kube, "gov", a.nodes, a.gpus, a.pods, True)
                own = await one_run(kube, "gpugov", a.nodes, a.gpus, a.pods, False, True)
            finally:
                await kube.close()
        finally:
            plane.stop()
    print(f"kube-scheduler DRA, plain slices : {a.pods} pods in {plain:.1f} s = "
          f"{a.pods / plain:.1f} pods/s")
    if gov is not None:
        print(f"kube-scheduler DRA, governed     : {a.pods} pods in {gov:.1f} s = "
              f"{a.pods / gov:.1f} pods/s")
    print(f"gpugov's scheduler allocating    : {a.pods} pods in {own:.1f} s = "
          f"{a.pods / own:.1f} pods/s")
    if gov is not None:
        print(f"governed / plain throughput      : {plain / gov:.2f}")
    print(f"gpugov / kube-scheduler plain    : {plain / own:.2f}")
    if gov is not None:
        print(f"gpugov / kube-scheduler governed : {gov / own:.2f}")
    print(f"gpugov's time: decide {SPENT['decide']:.2f} s in {SPENT.get('cycles', 0):.0f} "
          f"cycles ({SPENT.get('rebuilds', 0):.0f} rebuilds); claim writes "
          f"{SPENT['claim writes']:.2f} s and other API writes {SPENT['bindings']:.2f} s "
          "(summed over concurrent requests)")


if __name__ == "__main__":
    asyncio.run(main())
