"""What the compatibility layer costs: the webhook's mutate answer per upstream pod (HAMi,
KAI, Volcano, device plugin, Kueue examples; tests/compat/upstream) with the migration
options, and placement of N-device soft slices with per-card percentages against plain
single-device slices on a mixed fleet (gpugov policy, general path).

    python bench/compat_translate.py [--rounds 200] [--nodes 500] [--pods 2000]

Prints microseconds per mutate answer and placements per second for each request shape.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.compat.upstream_pods import upstream_pods  # noqa: E402

from gpugov.k8s.webhook import admission  # noqa: E402
from gpugov.k8s.webhook.tenancy import Resolution  # noqa: E402
from gpugov.model.cluster import ClusterState, NodeSpec  # noqa: E402
from gpugov.model.devices import DeviceMode  # noqa: E402
from gpugov.model.isolation import TrustTier  # noqa: E402
from gpugov.model.request import PodRequest  # noqa: E402
from gpugov.placement.base import PolicyContext  # noqa: E402
from gpugov.placement.engine import Placer  # noqa: E402
from gpugov.placement.fragmentation import FragmentationModel, TypicalPods  # noqa: E402
from gpugov.placement.registry import get_policy  # noqa: E402

CARDS = ("A100-SXM4-40GB", "A100-SXM4-80GB", "H100-SXM5-80GB")


def mutate_cost(rounds: int) -> float:
    opts = admission.Options(adopt=("kai-scheduler", "volcano", "hami-scheduler"))
    res = Resolution("t", "default-queue", TrustTier.INTERNAL)
    reviews = [{"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "namespace": "ns", "operation": "CREATE", "object": p.pod}
               for p in upstream_pods()]
    t0 = time.perf_counter()
    for _ in range(rounds):
        for r in reviews:
            admission.mutate(r, lambda ns: res, options=opts)
    return (time.perf_counter() - t0) / (rounds * len(reviews)) * 1e6


def placements(nodes: int, pods: int, shape: dict) -> float:
    specs = [NodeSpec(f"n{i}", 128_000, 1 << 20, 8, CARDS[i % len(CARDS)])
             for i in range(nodes)]
    state = ClusterState(specs)
    typical = TypicalPods.from_requests([PodRequest("t", 1000, 1, 1, 500)])
    placer = Placer(state, get_policy("gpugov")(PolicyContext(
        FragmentationModel(typical, state), np.random.default_rng(0))))
    t0 = time.perf_counter()
    placed = 0
    for i in range(pods):
        if placer.place(PodRequest(f"p{i}", 1000, 1024, **shape)).allocation is not None:
            placed += 1
    dt = time.perf_counter() - t0
    return placed / dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--pods", type=int, default=2000)
    a = ap.parse_args()
    print(f"mutate answer, {len(upstream_pods())} upstream pods: "
          f"{mutate_cost(a.rounds):.1f} us per pod")
    shapes = {
        "1 slice, 3000 MiB, 30 %": dict(gpu_count=1, gpu_milli=300, gpu_memory_mib=3000),
        "1 slice, 40 % of its card, 30 %": dict(gpu_count=1, gpu_milli=300,
                                                gpu_memory_percent=40.0),
        "2 slices, 30 % of the card each, 30 %": dict(
            gpu_count=2, gpu_milli=300, gpu_memory_percent=30.0, mode=DeviceMode.SOFT),
        "4 slices, 16384 MiB each": dict(gpu_count=4, gpu_milli=200, gpu_memory_mib=16384,
                                         mode=DeviceMode.SOFT),
    }
    for name, shape in shapes.items():
        print(f"placements/s, {a.nodes} mixed nodes x 8 GPUs, {name}: "
              f"{placements(a.nodes, a.pods, shape):.0f}")


if __name__ == "__main__":
    main()
