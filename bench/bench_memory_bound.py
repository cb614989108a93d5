"""Allocation at 100 % arrival on the memory-bound workload: gpugov vs FGD (milli only) vs
BestFit, and the same three on the openb default trace when it is present.

Usage: python bench/bench_memory_bound.py [--seeds 42-51] [--trace-dir DIR]
Prints, per policy, means over seeds at the moment the arrived GPU compute reaches 100 % of
capacity (the FGD study's procedure, tune 1.3): the share of GPU compute allocated, the pods
placed by then, and how many arrivals failed for lack of compute (`gpu`) or of GPU memory
(`gpu-memory`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from gpugov.model.cluster import ClusterState
from gpugov.placement.fragmentation import TypicalPods
from gpugov.sim.experiment import run_experiment
from gpugov.sim.memory_workload import memory_bound_nodes, memory_bound_pods

POLICIES = ("gpugov", "fgd", "bestfit")
DEFAULT_TRACE = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / \
    "alibaba-gpu-v2023"


def full_arrival_index(result, capacity: int) -> int:
    """Index of the last arrival not beyond 100 % of GPU capacity."""
    return max(int(np.searchsorted(result.arrived_milli, capacity, side="right")) - 1, 0)


def alloc_at_full_arrival(result, capacity: int) -> float:
    """Allocated share (%) of GPU compute at the last arrival not beyond 100 % of capacity."""
    return 100.0 * float(result.used_milli[full_arrival_index(result, capacity)]) / capacity


def outcomes_at_full_arrival(result, capacity: int) -> tuple[int, int, int]:
    """(placed, failed on compute, failed on GPU memory) up to 100 % arrival."""
    seen = result.outcomes[:full_arrival_index(result, capacity) + 1]
    return seen.count(""), seen.count("gpu"), seen.count("gpu-memory")


def seeds_of(text: str) -> list[int]:
    if "-" in text:
        lo, hi = text.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(x) for x in text.split(",")]


def table(title: str, nodes, pods, seeds: list[int]) -> None:
    capacity = ClusterState(nodes).total_gpu_milli
    typical = TypicalPods.from_requests(pods)
    print(f"{title}: {len(nodes)} nodes, {len(pods)} pods, seeds {seeds[0]}..{seeds[-1]}")
    print(f"{'policy':<10}{'alloc% mean':>12}{'min':>8}{'max':>8}{'placed':>9}"
          f"{'fail:gpu':>10}{'fail:mem':>10}")
    for name in POLICIES:
        runs = [run_experiment(nodes, pods, name, s, 1.3, typical) for s in seeds]
        values = [alloc_at_full_arrival(r, capacity) for r in runs]
        counts = np.mean([outcomes_at_full_arrival(r, capacity) for r in runs], axis=0)
        print(f"{name:<10}{np.mean(values):>12.2f}{min(values):>8.2f}{max(values):>8.2f}"
              f"{counts[0]:>9.1f}{counts[1]:>10.1f}{counts[2]:>10.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="42-46")
    ap.add_argument("--trace-dir", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--no-trace", action="store_true", help="skip the openb default trace")
    args = ap.parse_args()
    seeds = seeds_of(args.seeds)
    table("memory-bound (5-40 GiB, 10-50 % compute, 5 % whole GPUs; 80 GiB cards)",
          memory_bound_nodes(), memory_bound_pods(), seeds)
    trace = args.trace_dir / "openb_pod_list_default.csv"
    if not args.no_trace and trace.is_file():
        from gpugov.sim.trace import load_nodes, load_pods

        table("openb default (no GPU memory named)",
              load_nodes(args.trace_dir / "openb_node_list_gpu_node.csv"), load_pods(trace),
              seeds)


if __name__ == "__main__":
    main()
