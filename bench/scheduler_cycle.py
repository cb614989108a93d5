"""How long gpugov's scheduler takes to decide a backlog, in process (no apiserver).

Two fleets of N nodes x 8 GPUs, each with P pending pods, fed to `SchedulerState` as the
API objects the watches deliver; the time is `SchedulerState.cycle` (rebuild from the
objects, submit, one control cycle, allocation records) — the decide part of
`bench/k8s_throughput.py`, without the writes:

- `plain`: nodes without an inventory (every device soft), one-GPU pods that tolerate
  everything (no node has a taint): the engine's fast path;
- `modes`: nodes from a `cluster.yaml` pool with MIG, soft, time-slice and exclusive devices,
  half of them tainted, and a mix of MIG, memory-slice, time-slice, whole-GPU and
  tolerating/selecting pods: the per-device filter.

    python bench/scheduler_cycle.py [--nodes 1000] [--pods 7000]

Prints pods bound, seconds and pods/s per fleet (one run each; the machine's load varies).
"""

from __future__ import annotations

import argparse
import time

from gpugov.k8s.devcluster.cluster_file import node_objects, parse_cluster_yaml
from gpugov.k8s.scheduler import names
from gpugov.k8s.scheduler.harness import gpu_node, gpu_pod
from gpugov.k8s.scheduler.state import SchedulerState

SCHED = names.SCHEDULER_NAME


def _ready(obj: dict) -> dict:
    obj["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return obj


def _pod(name: str, limits: dict | None = None, ann: dict | None = None, **kw) -> dict:
    p = gpu_pod(name, "bench", SCHED, limits=limits,
                annotations={names.ANN_QUEUE: "q", **(ann or {})}, **kw)
    p["metadata"]["uid"] = f"uid-{name}"
    p["metadata"]["creationTimestamp"] = "2027-01-01T00:00:00Z"
    p["status"] = {"phase": "Pending"}
    return p


def plain(n: int, pods: int) -> tuple[list[dict], list[dict]]:
    return ([_ready(gpu_node(f"n{i}", 8)) for i in range(n)],
            [_pod(f"p{i}") for i in range(pods)])


def modes(n: int, pods: int) -> tuple[list[dict], list[dict]]:
    pool = {"model": "H100-SXM5-80GB", "gpus": 8, "cpuMilli": 192000, "memoryMiB": 2097152,
            "topology": "nvswitch", "devices": [
                {"index": "0-1", "mode": "mig", "layout": ["3g.40gb", "2g.20gb", "1g.10gb",
                                                           "1g.10gb"]},
                {"index": "2-3", "mode": "soft"}, {"index": "4", "mode": "timeslice",
                                                   "replicas": 4}]}
    taint = [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]
    cluster = parse_cluster_yaml({"nodePools": [
        dict(pool, name="a", count=n - n // 2, labels={"zone": "a"}),
        dict(pool, name="b", count=n // 2, labels={"zone": "b"}, taints=taint)]}, "bench")
    tol = [{"key": "dedicated", "operator": "Exists"}]
    kinds = [
        lambda i: _pod(f"mig{i}", {"nvidia.com/mig-1g.10gb": "1"}, tolerations=[]),
        lambda i: _pod(f"mem{i}", {names.GPU_RESOURCE: "1", "nvidia.com/gpumem": "20000"},
                       tolerations=tol),
        lambda i: _pod(f"ts{i}", {"nvidia.com/gpu.shared": "1"}, tolerations=tol),
        lambda i: _pod(f"whole{i}", tolerations=tol, node_selector={"zone": "b"}),
    ]
    return ([_ready(o) for o in node_objects(cluster)],
            [kinds[i % len(kinds)](i) for i in range(pods)])


def run(name: str, fleet: tuple[list[dict], list[dict]]) -> None:
    nodes, pods = fleet
    st = SchedulerState()
    st.set_object("queue", {"metadata": {"name": "q"}, "spec": {}})
    st.set_object("tenant", {"metadata": {"name": "t"}, "spec": {
        "namespaces": ["bench"], "queue": "q", "trust": "trusted"}})
    for o in nodes:
        st.set_node(o)
    for p in pods:
        st.set_pod(p)
    t = time.perf_counter()
    plan = st.cycle(1.8e9)
    took = time.perf_counter() - t
    print(f"{name}: {len(nodes)} nodes, {len(pods)} pods: {len(plan.binds)} bound in "
          f"{took:.2f} s ({len(plan.binds) / took:.0f} pods/s)", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=7000)
    args = ap.parse_args()
    run("plain", plain(args.nodes, args.pods))
    run("modes", modes(args.nodes, args.pods))


if __name__ == "__main__":
    main()
