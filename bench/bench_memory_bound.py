"""Allocation at 100 % arrival on the memory-bound workload: gpugov vs FGD (milli only) vs
BestFit, and the same three on the openb default trace when it is present.

Usage: python bench/bench_memory_bound.py [--seeds 42-51] [--trace-dir DIR] [--memory-weight N/D]
Prints, per policy, means over seeds at the moment the arrived GPU compute reaches 100 % of
capacity (the FGD study's procedure, tune 1.3): the share of GPU compute allocated, the
share of GPU memory allocated (whole GPUs hold all of theirs), the pods placed by then, and
how many arrivals failed for lack of compute (`gpu`) or of GPU memory (`gpu-memory`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from gpugov.model.cluster import ClusterState
from gpugov.placement.fragmentation import TypicalPods
from gpugov.sim.experiment import run_experiment, tuned_sequence
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


def memory_at_full_arrival(result, pods, state: ClusterState, seed: int) -> float:
    """Allocated share (%) of GPU memory at 100 % arrival. The arrival sequence is rebuilt
    as `run_experiment` draws it (the seed's first use), so outcomes line up with pods."""
    sequence = tuned_sequence(pods, state.total_gpu_milli, 1.3, np.random.default_rng(seed))
    assert len(sequence) == len(result.outcomes)
    per_card = int(state.gpu_mem_cap.max())
    held = sum(p.gpu_count * per_card if p.gpu_milli >= 1000 else p.gpu_memory_mib
               for p, o in zip(sequence[:full_arrival_index(result, state.total_gpu_milli) + 1],
                               result.outcomes, strict=False) if o == "")
    return 100.0 * held / int(state.gpu_mem_cap.sum())


def seeds_of(text: str) -> list[int]:
    if "-" in text:
        lo, hi = text.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(x) for x in text.split(",")]


def table(title: str, nodes, pods, seeds: list[int]) -> None:
    state = ClusterState(nodes)
    capacity = state.total_gpu_milli
    typical = TypicalPods.from_requests(pods)
    print(f"{title}: {len(nodes)} nodes, {len(pods)} pods, seeds {seeds[0]}..{seeds[-1]}")
    print(f"{'policy':<10}{'compute%':>9}{'min':>7}{'max':>7}{'gpumem%':>9}{'placed':>8}"
          f"{'fail:gpu':>9}{'fail:mem':>9}")
    for name in POLICIES:
        runs = [run_experiment(nodes, pods, name, s, 1.3, typical) for s in seeds]
        values = [alloc_at_full_arrival(r, capacity) for r in runs]
        mem = float("nan")  # "-": GPU memory is meaningless when no pod names it
        if any(p.gpu_memory_mib for p in pods):
            mem = np.mean([memory_at_full_arrival(r, pods, state, s)
                           for r, s in zip(runs, seeds, strict=True)])
        counts = np.mean([outcomes_at_full_arrival(r, capacity) for r in runs], axis=0)
        print(f"{name:<10}{np.mean(values):>9.2f}{min(values):>7.2f}{max(values):>7.2f}"
              f"{'-' if np.isnan(mem) else f'{mem:.2f}':>9}"
              f"{counts[0]:>8.1f}{counts[1]:>9.1f}{counts[2]:>9.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="42-46")
    ap.add_argument("--trace-dir", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--no-trace", action="store_true", help="skip the openb default trace")
    ap.add_argument("--memory-weight", default=None,
                    help="gpugov's memory weight as N/D (default: the policy's own)")
    args = ap.parse_args()
    seeds = seeds_of(args.seeds)
    if args.memory_weight:
        from gpugov.placement import fragmentation

        num, den = (int(x) for x in args.memory_weight.split("/"))
        fragmentation.MEMORY_WEIGHT = (num, den)
        print(f"gpugov memory weight {num}/{den}")
    table("memory-bound (5-40 GiB by 5, 10-50 % compute by 10, 5 % whole GPUs; 80 GiB cards)",
          memory_bound_nodes(), memory_bound_pods(), seeds)
    trace = args.trace_dir / "openb_pod_list_default.csv"
    if not args.no_trace and trace.is_file():
        from gpugov.sim.trace import load_nodes, load_pods

        table("openb default (no GPU memory named)",
              load_nodes(args.trace_dir / "openb_node_list_gpu_node.csv"), load_pods(trace),
              seeds)


if __name__ == "__main__":
    main()
