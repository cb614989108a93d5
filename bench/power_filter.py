"""Cost of the power-domain filter step: the same arrivals placed by the engine on the same
fleet without racks (the trace fast path, and the general per-device path, forced by one
tainted CPU-only node) and with racks budgeted (ratios of wall times measured within one
run; noisy on a shared machine).

    PYTHONPATH=src python3 bench/power_filter.py [--nodes 1024] [--rack 16] [--pods 6000]
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np

from gpugov.model.cluster import ClusterState, NodeSpec
from gpugov.model.constraints import Taint
from gpugov.model.power import PowerDomain
from gpugov.model.request import PodRequest
from gpugov.placement.base import PolicyContext
from gpugov.placement.engine import Placer
from gpugov.placement.fragmentation import FragmentationModel, TypicalPods
from gpugov.placement.registry import get_policy


def run(nodes: list[NodeSpec], reqs: list[PodRequest], policy: str) -> tuple[float, int]:
    state = ClusterState(nodes)
    rng = np.random.default_rng(0)
    ctx = PolicyContext(FragmentationModel(TypicalPods.from_requests(reqs), state), rng)
    placer = Placer(state, get_policy(policy)(ctx), rng.permutation(len(state)))
    t0 = time.perf_counter()
    placed = sum(placer.place(r).allocation is not None for r in reqs)
    return time.perf_counter() - t0, placed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--rack", type=int, default=16)
    ap.add_argument("--pods", type=int, default=6000)
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    plain = [NodeSpec(f"n{i}", 192_000, 2_097_152, 8, "H100-SXM5-80GB")
             for i in range(args.nodes)]
    # panels feeding ~70 % of a rack's GPUs at full power
    panel = args.rack * 8 * 700 * 0.7 / 0.8
    racked = [dataclasses.replace(s, power_domain=PowerDomain(f"r{i // args.rack}", panel))
              for i, s in enumerate(plain)]
    milli = rng.choice([250, 500, 1000, 1000], args.pods)
    count = np.where(milli == 1000, rng.choice([1, 2, 4], args.pods), 1)
    reqs = [PodRequest(f"p{i}", 1000, 1024, int(c), int(m))
            for i, (c, m) in enumerate(zip(count, milli, strict=True))]
    general = [*plain, NodeSpec("cpu-only", 1000, 1024, 0, taints=(Taint("x"),))]
    for policy in ("gpugov", "fgd", "bestfit"):
        t_plain, n_plain = run(plain, reqs, policy)
        t_gen, n_gen = run(general, reqs, policy)
        t_rack, n_rack = run(racked, reqs, policy)
        print(f"{policy:8} fast path {t_plain:6.2f} s ({n_plain})  general {t_gen:6.2f} s "
              f"({n_gen})  racks {t_rack:6.2f} s ({n_rack} placed)  racks/general "
              f"{t_rack / t_gen:5.2f}")


if __name__ == "__main__":
    main()
