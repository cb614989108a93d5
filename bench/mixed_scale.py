"""One control cycle over a mixed-mode fleet: 5,000 nodes x 8 GPUs whose devices are soft,
exclusive, MIG (dynamic and fixed layouts), time-slice and MPS, with taints, labels and power
budgets, and up to 50,000 pending requests of every kind (whole and multi-GPU, soft slices
with GPU memory, MIG profiles, time-slice with and without memory or oversubscription, MPS
clients, isolation floors, sealed tenants, node selectors and tolerations). Prints pods
placed per second and, with --profile, where the time goes (cProfile, top entries). The
milli-only case of bench/control_cycle.py runs beside it for comparison. A benchmark: it
prints numbers, asserts nothing.

    python bench/mixed_scale.py [--policy fgd] [--depth 50000] [--profile 25] [--no-milli]

Every request kind has its own CPU figure, so no two kinds share a job shape (the control
cycle caches failures per `Job.shape_key`).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time
from collections import Counter

import numpy as np

import control_cycle  # bench/ is on sys.path when this script runs
from gpugov.control.config import parse_config
from gpugov.control.cycle import new_control_plane
from gpugov.control.workload import Job
from gpugov.model.cluster import NodeSpec
from gpugov.model.constraints import Taint, Toleration
from gpugov.model.devices import DeviceConfig, DeviceMode, hgx_topology
from gpugov.model.isolation import IsolationLevel, TrustTier
from gpugov.model.mig import find_placement, get_geometry
from gpugov.model.request import PodRequest

NODES = 5000
GPUS = 8
MODELS = ("A100-SXM4-80GB", "H100-SXM5-80GB")
GIB = 1024
TAINT = Taint("dedicated", "infer", "NoSchedule")
TOLERATE = (Toleration("dedicated", "Equal", "infer", "NoSchedule"),)


def device_pools() -> list[tuple[str, float, tuple[DeviceConfig, ...]]]:
    """(name, share of nodes, the 8 devices) of each node pool."""
    soft = DeviceConfig()
    excl = DeviceConfig(DeviceMode.EXCLUSIVE)
    dyn = DeviceConfig(DeviceMode.MIG)
    layout = find_placement(get_geometry(MODELS[0]), ["3g.40gb", "2g.20gb", "1g.10gb",
                                                      "1g.10gb"])
    assert layout is not None
    fixed = DeviceConfig(DeviceMode.MIG, mig_layout=layout)
    ts = DeviceConfig(DeviceMode.TIMESLICE, replicas=4)
    mps = DeviceConfig(DeviceMode.MPS, replicas=4)
    return [
        ("soft", 0.30, (soft,) * 8),
        ("exclusive", 0.20, (excl,) * 8),
        ("mig", 0.20, (dyn,) * 4 + (fixed,) * 4),
        ("shared", 0.15, (ts,) * 4 + (mps,) * 4),
        ("mixed", 0.15, (soft, soft, excl, excl, dyn, fixed, ts, mps)),
    ]


def mixed_nodes(rng: np.random.Generator, count: int = NODES) -> list[NodeSpec]:
    """The fleet: pools by share; every node labelled with a zone; a tenth of the nodes
    tainted for inference, a tenth with a power budget of six GPUs at TDP."""
    pools = device_pools()
    share = np.array([p[1] for p in pools])
    kinds = rng.choice(len(pools), size=count, p=share / share.sum())
    topo = hgx_topology(GPUS)
    nodes = []
    for i, k in enumerate(kinds):
        model = MODELS[i % 2]
        budget = 6 * (400 if model.startswith("A100") else 700) if i % 10 == 3 else None
        nodes.append(NodeSpec(
            f"{pools[k][0]}-{i:05d}", 128_000, 1_048_576, GPUS, model, devices=pools[k][2],
            labels=(("zone", "ab"[i % 2]),), taints=(TAINT,) if i % 10 == 7 else (),
            power_budget_w=budget, topology=topo))
    return nodes


def request_kinds() -> list[tuple[str, float, TrustTier, dict]]:
    """(name, weight, tenant trust tier, PodRequest fields) of each request kind; CPU differs
    per kind. Time-slice and MPS pods are trusted tenants' (others may not share a device
    without isolation); untrusted tenants get sealed, hard-isolated slices."""
    def whole(n: int, cpu: int) -> dict:
        return dict(cpu_milli=cpu * n, memory_mib=32768 * n, gpu_count=n, gpu_milli=1000)

    def one(cpu: int, milli: int, **more) -> dict:
        return dict(cpu_milli=cpu, memory_mib=16384, gpu_count=1, gpu_milli=milli, **more)

    internal, trusted, untrusted = TrustTier.INTERNAL, TrustTier.TRUSTED, TrustTier.UNTRUSTED
    return [
        ("whole-1", 0.15, internal, whole(1, 8000)),
        ("whole-2", 0.05, internal, whole(2, 8001)),
        ("whole-4", 0.03, internal, whole(4, 8002)),
        ("whole-8", 0.01, internal, whole(8, 8003)),
        ("soft-30%-20GiB", 0.12, internal, one(4000, 300, gpu_memory_mib=20 * GIB)),
        ("soft-50%-40GiB", 0.05, internal, one(4001, 500, gpu_memory_mib=40 * GIB)),
        ("mig-1g.10gb", 0.09, internal, one(2000, 142, mode=DeviceMode.MIG,
                                            mig_profile="1g.10gb")),
        ("mig-2g.20gb", 0.05, internal, one(2001, 285, mode=DeviceMode.MIG,
                                            mig_profile="2g.20gb")),
        ("mig-3g.40gb", 0.04, internal, one(2002, 428, mode=DeviceMode.MIG,
                                            mig_profile="3g.40gb")),
        ("timeslice-16GiB", 0.08, trusted, one(3000, 250, mode=DeviceMode.TIMESLICE,
                                               gpu_memory_mib=16 * GIB)),
        ("timeslice-oversub", 0.03, trusted, one(3001, 250, mode=DeviceMode.TIMESLICE,
                                                 oversubscribe=True)),
        ("mps", 0.08, trusted, one(3002, 250, mode=DeviceMode.MPS, gpu_memory_mib=16 * GIB)),
        ("hard-floor-whole", 0.02, internal, dict(whole(1, 8004),
                                                  min_isolation=IsolationLevel.HARD)),
        ("sealed-soft", 0.03, internal, one(5000, 400, gpu_memory_mib=30 * GIB, sealed=True)),
        ("untrusted-mig", 0.03, untrusted, one(5002, 142, mode=DeviceMode.MIG,
                                               mig_profile="1g.10gb")),
        ("selector-toleration", 0.05, internal, one(5001, 200, gpu_memory_mib=10 * GIB,
                                                    node_selector=(("zone", "a"),),
                                                    tolerations=TOLERATE)),
        ("cpu-only", 0.08, internal, dict(cpu_milli=1000, memory_mib=4096)),
    ]


def mixed_pods(rng: np.random.Generator, depth: int) -> tuple[list[PodRequest], list[TrustTier]]:
    """The pending pods and each one's tenant trust tier; sealed pods belong to one of 20
    tenants."""
    kinds = request_kinds()
    weight = np.array([k[1] for k in kinds])
    drawn = rng.choice(len(kinds), size=depth, p=weight / weight.sum())
    tenants = rng.integers(0, 20, size=depth)
    pods, trust = [], []
    for i, k in enumerate(drawn):
        name, _, tier, fields = kinds[k]
        fields = dict(fields)
        if fields.get("sealed") or tier is TrustTier.UNTRUSTED:
            fields["tenant"] = f"ext-{tenants[i]}"
        pods.append(PodRequest(f"p{i}-{name}", **fields))
        trust.append(tier)
    return pods, trust


def config(gpus: int = NODES * GPUS) -> dict:
    """200 leaf queues (20 orgs x 10 teams): bench/control_cycle.py's tree for this fleet."""
    return control_cycle.config(gpus=gpus)


def run(nodes: list[NodeSpec], pods: list[PodRequest], trust: list[TrustTier], policy: str,
        seed: int, profile: int) -> tuple[float, float, int, int, Counter, str]:
    """(cycle seconds, its CPU seconds, pods started, pods considered, started per kind,
    profile text)."""
    rng = np.random.default_rng(seed)
    cfg = parse_config(config())
    cp = new_control_plane(cfg, nodes, policy=policy, seed=seed, workload=pods)
    leaf_ids = [i for i, leaf in enumerate(cp.tree.is_leaf) if leaf]
    leaves = rng.integers(0, len(leaf_ids), size=len(pods))
    for i, pod in enumerate(pods):
        cls = cfg.priority_class("high" if i % 4 == 0 else "low")
        cp.submit(Job(pod.name, leaf_ids[leaves[i]], cls, float(i), 1, pod, trust[i]))
    prof = cProfile.Profile() if profile else None
    t0, c0 = time.perf_counter(), time.process_time()
    if prof:
        prof.enable()
    result = cp.cycle(float(len(pods)))
    if prof:
        prof.disable()
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    kinds = Counter(j.name.split("-", 1)[1] for j in result.started)
    text = ""
    if prof:
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(profile)
        text = out.getvalue()
    return elapsed, cpu, len(result.started), result.considered, kinds, text


def milli_only(depth: int, seed: int
               ) -> tuple[list[NodeSpec], list[PodRequest], list[TrustTier]]:
    """bench/control_cycle.py's fleet and pods (every device soft, milli only)."""
    from control_cycle import SHAPES  # the sibling bench script (run from bench/ or repo)

    rng = np.random.default_rng(seed)
    nodes = [NodeSpec(f"n{i:05d}", 128_000, 1_048_576, 8, "A100") for i in range(NODES)]
    p = np.array([s[4] for s in SHAPES])
    kinds = rng.choice(len(SHAPES), size=depth, p=p / p.sum())
    pods = [PodRequest(f"p{i}-milli", SHAPES[k][2], SHAPES[k][3], SHAPES[k][0], SHAPES[k][1])
            for i, k in enumerate(kinds)]
    return nodes, pods, [TrustTier.INTERNAL] * depth


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", default="fgd")
    ap.add_argument("--depth", type=int, default=50_000)
    ap.add_argument("--nodes", type=int, default=NODES)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="profile the mixed cycle and print the top N entries by own time")
    ap.add_argument("--no-milli", action="store_true", help="skip the milli-only comparison")
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    nodes = mixed_nodes(rng, a.nodes)
    pods, trust = mixed_pods(rng, a.depth)
    print(f"policy={a.policy} nodes={a.nodes}x{GPUS} GPUs pending={a.depth} leaf queues=200")
    print("pods/s: pods started per second of the cycle's wall time; pods/cpu_s: per second of "
          "its CPU time (steadier on a busy machine)")
    print(f"{'case':>10} {'cycle_s':>8} {'cpu_s':>7} {'placed':>7} {'considered':>10} "
          f"{'pods/s':>8} {'pods/cpu_s':>10}")
    cases = [("mixed", nodes, pods, trust, a.profile)]
    if not a.no_milli:
        cases.append(("milli-only", *milli_only(a.depth, a.seed), 0))
    for name, ns, ps, ts, prof in cases:
        elapsed, cpu, placed, considered, kinds, text = run(ns, ps, ts, a.policy, a.seed,
                                                             prof)
        print(f"{name:>10} {elapsed:>8.2f} {cpu:>7.2f} {placed:>7} {considered:>10} "
              f"{placed / elapsed:>8.0f} {placed / cpu:>10.0f}")
        if name == "mixed":
            asked = Counter(p.name.split("-", 1)[1] for p in ps)
            print("    placed per kind: " + ", ".join(
                f"{k} {kinds.get(k, 0)}/{n}" for k, n in sorted(asked.items())))
        if text:
            print(text)


if __name__ == "__main__":
    main()
