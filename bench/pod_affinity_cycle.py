"""What pod affinity, anti-affinity and topology spread cost gpugov's scheduler, in process.

N nodes x 8 GPUs in Z zones, E existing CPU pods of another scheduler spread over them (every
tenth with its own hostname anti-affinity), and P pending one-GPU pods in deployments of 10
replicas, fed to `SchedulerState` as the API objects the watches deliver. The time is
`SchedulerState.cycle` (rebuild, submit, one control cycle, records), for the same pods:

- `plain`: no inter-pod terms anywhere (existing pods without their anti-affinity): the
  engine's fast path, as before pod affinity was built;
- `none`: the pending pods state nothing, every tenth existing pod its anti-affinity (so
  every request carries its pod's terms and the cycle builds a pod view);
- `anti`: each deployment's replicas repel each other on kubernetes.io/hostname;
- `spread`: each deployment spreads over zones, maxSkew 1, DoNotSchedule.

    python bench/pod_affinity_cycle.py [--nodes 200] [--existing 1000] [--pods 1000]

Prints pods bound, seconds and pods/s per case, and the ratio to `plain` measured in the same
run (one run each; the machine's load varies).
"""

from __future__ import annotations

import argparse
import time

from gpugov.k8s.scheduler import names
from gpugov.k8s.scheduler.harness import gpu_node, gpu_pod
from gpugov.k8s.scheduler.state import SchedulerState

HOST = "kubernetes.io/hostname"


def fleet(n: int, zones: int) -> list[dict]:
    out = []
    for i in range(n):
        o = gpu_node(f"n{i}", 8, {HOST: f"n{i}", "zone": f"z{i % zones}"})
        o["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        out.append(o)
    return out


def existing(count: int, n: int, terms: bool = True) -> list[dict]:
    out = []
    for j in range(count):
        spec = {"schedulerName": "default-scheduler", "nodeName": f"n{j % n}",
                "containers": [{"name": "c", "resources": {}}]}
        if terms and j % 10 == 0:
            spec["affinity"] = {"podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"svc": f"s{j}"}}, "topologyKey": HOST}]}}
        out.append({"metadata": {"name": f"e{j}", "namespace": "other", "uid": f"ue{j}",
                                 "labels": {"svc": f"s{j}"},
                                 "creationTimestamp": "2027-01-01T00:00:00Z"},
                    "spec": spec, "status": {"phase": "Running"}})
    return out


def pending(count: int, kind: str) -> list[dict]:
    out = []
    for i in range(count):
        app = f"d{i // 10}"
        p = gpu_pod(f"p{i}", "bench", names.SCHEDULER_NAME, labels={"app": app},
                    annotations={names.ANN_QUEUE: "q"})
        p["metadata"].update(uid=f"up{i}", creationTimestamp="2027-01-01T00:00:00Z")
        p["status"] = {"phase": "Pending"}
        sel = {"matchLabels": {"app": app}}
        if kind == "anti":
            p["spec"]["affinity"] = {"podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": sel, "topologyKey": HOST}]}}
        elif kind == "spread":
            p["spec"]["topologySpreadConstraints"] = [
                {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                 "labelSelector": sel}]
        out.append(p)
    return out


def run(args: argparse.Namespace, kind: str) -> float:
    st = SchedulerState()
    for o in fleet(args.nodes, args.zones):
        st.set_node(o)
    st.set_object("queue", {"metadata": {"name": "q"}, "spec": {}})
    st.set_object("tenant", {"metadata": {"name": "all"},
                             "spec": {"queue": "q", "namespaceSelector": {}}})
    for o in existing(args.existing, args.nodes, kind != "plain") + pending(args.pods, kind):
        st.set_pod(o)
    t0 = time.perf_counter()
    plan = st.cycle(1_800_000_000.0)
    dt = time.perf_counter() - t0
    print(f"{kind:7s} {len(plan.binds):6d} bound  {dt:7.2f} s  {len(plan.binds) / dt:8.1f} pods/s")
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--zones", type=int, default=4)
    ap.add_argument("--existing", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=1000)
    args = ap.parse_args()
    base = run(args, "plain")
    for kind in ("none", "anti", "spread"):
        print(f"        ratio to plain: {run(args, kind) / base:.1f}x")


if __name__ == "__main__":
    main()
