"""gpugov vs BestFit vs FGD on a mixed-mode fleet: MIG, soft, exclusive and time-slice devices
on one cluster, and a request stream asking for each (sim/memory_workload.py).

Usage: python bench/bench_mixed_modes.py [--seeds 42-51] [--weights F,T,P,E] [--per-pool 8]
                                         [--shares SOFT,MIG,TS,WHOLE]
Pods arrive in a shuffled order (the FGD study's procedure: topped up or thinned to tune 1.3
x GPU capacity) and never leave. Prints, per policy, means over seeds of the GPU compute
allocated (what the placed pods are charged: a MIG instance its profile's share, a
time-slice replica 1/replicas) as % of capacity at the first failed arrival and at 100 %
arrival, failures by reason up to 100 % arrival, and the share of multi-GPU pods whose
devices share one NVLink domain. `--weights` sets gpugov's general-path weights
(fragmentation, topology, power, energy) for a measurement; `--shares` the request mix.
"""

from __future__ import annotations

import argparse
from collections import Counter

import numpy as np

from gpugov.model.cluster import ClusterState
from gpugov.placement.base import PolicyContext
from gpugov.placement.engine import Placer
from gpugov.placement.fragmentation import FragmentationModel, TypicalPods
from gpugov.placement.gpugov import Weights
from gpugov.placement.registry import get_policy
from gpugov.sim.experiment import tuned_sequence
from gpugov.sim.memory_workload import MIXED_SHARES, mixed_fleet_nodes, mixed_pods

POLICIES = ("gpugov", "fgd", "bestfit")
TUNE = 1.3


def run(nodes, pods, policy: str, seed: int, weights: Weights | None = None) -> dict:
    """One run: allocated share at first failure and at 100 % arrival, failures, NVLink."""
    rng = np.random.default_rng(seed)
    state = ClusterState(nodes)
    cap = state.total_gpu_milli
    sequence = tuned_sequence(pods, cap, TUNE, rng)
    model = FragmentationModel(TypicalPods.from_requests(pods), state)
    chosen = get_policy(policy)(PolicyContext(model, rng))
    if weights is not None:
        chosen.weights = weights
    placer = Placer(state, chosen, rng.permutation(len(state)))
    arrived, first_fail, at_full = 0, None, None
    failures: Counter = Counter()
    multi = same = 0
    for pod in sequence:
        if at_full is None and arrived + pod.total_gpu_milli > cap:
            at_full = state.used_gpu_milli / cap
        arrived += pod.total_gpu_milli
        decision = placer.place(pod)
        if decision.allocation is None:
            if first_fail is None:
                first_fail = state.used_gpu_milli / cap
            if at_full is None:
                failures[decision.reason] += 1
        elif pod.gpu_count > 1:
            dom = state.dev_nvlink[decision.allocation.node, list(decision.allocation.devices)]
            multi += 1
            same += bool(dom.min() >= 0 and dom.min() == dom.max())
    full = at_full if at_full is not None else state.used_gpu_milli / cap
    return {"first": 100 * (first_fail if first_fail is not None else full), "full": 100 * full,
            "failures": failures, "nvlink": 100 * same / max(multi, 1)}


def seeds_of(text: str) -> list[int]:
    if "-" in text:
        lo, hi = text.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(x) for x in text.split(",")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("--per-pool", type=int, default=8)
    ap.add_argument("--weights", default=None, help="gpugov weights F,T,P,E (sum 1)")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--shares", default=",".join(str(x) for x in MIXED_SHARES),
                    help="request mix: soft, MIG, time-slice, whole-GPU shares")
    args = ap.parse_args()
    seeds = seeds_of(args.seeds)
    shares = tuple(float(x) for x in args.shares.split(","))
    weights = None
    if args.weights:
        weights = Weights(*(float(x) for x in args.weights.split(",")))
        print(f"gpugov weights {weights}")
    nodes = mixed_fleet_nodes(args.per_pool)
    gpus = sum(n.gpu_count for n in nodes)
    print(f"mixed fleet: {len(nodes)} nodes, {gpus} GPUs; request shares {shares}; "
          f"seeds {seeds[0]}..{seeds[-1]}")
    print(f"{'policy':<10}{'@1st fail%':>11}{'@100%':>8}{'min':>7}{'max':>7}{'nvlink%':>9}"
          "  failures up to 100 % (mean per run)")
    for name in args.policies.split(","):
        runs = [run(nodes, mixed_pods(seed=s, shares=shares), name, s,
                    weights if name == "gpugov" else None) for s in seeds]
        full = [r["full"] for r in runs]
        total: Counter = Counter()
        for r in runs:
            total.update(r["failures"])
        fails = ", ".join(f"{k} {v / len(runs):.1f}" for k, v in sorted(total.items()))
        print(f"{name:<10}{np.mean([r['first'] for r in runs]):>11.2f}{np.mean(full):>8.2f}"
              f"{min(full):>7.2f}{max(full):>7.2f}{np.mean([r['nvlink'] for r in runs]):>9.1f}"
              f"  {fails or '-'}")


if __name__ == "__main__":
    main()
